/**
 * @module
 * Decoding of list responses whose entries mostly repeat from one call to the next: the PLEG
 * lists every sandbox and container once a second, and at steady state each entry's bytes are
 * the same as in the previous list (a 250-pod node: ~500 entries, ~0.5 KB to 1 KB each, some
 * 650 KB of objects and strings made per second only to be compared with the same values and
 * dropped). {@link ReusingListCodec} splits a response into its entries without decoding them,
 * and an entry whose bytes equal one of the previous response's gets that response's object;
 * only new and changed entries are decoded. The objects are shared between calls: callers read
 * them and never change them (the lists' callers only read: the PLEG, the container and image
 * garbage collectors, the log rotation, the resource managers' start). Private to the CRI client
 * (`remote_runtime.ts`).
 */

import type { Codec } from "./connection.ts";
import { fnv1a32 } from "../util/fnv.ts";

/** Wire type of a length-delimited field (protobuf). */
const LENGTH_DELIMITED = 2;

/** An entry of the previous response: its bytes (a copy) and its object. */
interface Kept<T> {
  readonly bytes: Uint8Array;
  readonly value: T;
}

function sameBytes(a: Uint8Array, buf: Uint8Array, start: number, end: number): boolean {
  if (a.length !== end - start) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== buf[start + i]) return false;
  return true;
}

/**
 * A codec of a response message whose only field is the repeated entry field `field`
 * (ListContainersResponse.containers, ListPodSandboxResponse.items): decodes as `response`
 * does, reusing the previous response's objects for entries with the same bytes. A response
 * with any other field is decoded whole, as `response` would, and kept nothing from.
 */
export class ReusingListCodec<R, T> implements Codec<R> {
  readonly #response: Codec<R>;
  readonly #entry: Codec<T>;
  readonly #field: number;
  readonly #wrap: (entries: T[]) => R;
  #kept = new Map<number, Kept<T>>();
  /** Entries decoded and entries reused, for tests. */
  decoded = 0;
  reused = 0;

  constructor(opts: {
    response: Codec<R>;
    entry: Codec<T>;
    field: number;
    wrap: (entries: T[]) => R;
  }) {
    this.#response = opts.response;
    this.#entry = opts.entry;
    this.#field = opts.field;
    this.#wrap = opts.wrap;
  }

  encode(message: R): { finish(): Uint8Array } {
    return this.#response.encode(message);
  }

  decode(buf: Uint8Array): R {
    const spans: number[] = [];
    let at = 0;
    while (at < buf.length) {
      const tag = varint(buf, at);
      if (tag === undefined || tag.value !== ((this.#field << 3) | LENGTH_DELIMITED)) {
        // Not the one field this codec knows: the generated decoder reads it (or says what
        // is wrong with it).
        this.#kept = new Map();
        return this.#response.decode(buf);
      }
      const len = varint(buf, tag.next);
      if (len === undefined || len.next + len.value > buf.length) {
        this.#kept = new Map();
        return this.#response.decode(buf);
      }
      spans.push(len.next, len.next + len.value);
      at = len.next + len.value;
    }
    const kept = new Map<number, Kept<T>>();
    const entries: T[] = [];
    for (let i = 0; i < spans.length; i += 2) {
      const start = spans[i]!;
      const end = spans[i + 1]!;
      const hash = fnv1a32(buf.subarray(start, end));
      const old = this.#kept.get(hash);
      let entry: Kept<T>;
      if (old !== undefined && sameBytes(old.bytes, buf, start, end)) {
        entry = old;
        this.reused++;
      } else {
        // A copy: a view would keep this whole response alive as long as the entry lasts.
        const bytes = buf.slice(start, end);
        entry = { bytes, value: this.#entry.decode(bytes) };
        this.decoded++;
      }
      if (!kept.has(hash)) kept.set(hash, entry);
      entries.push(entry.value);
    }
    this.#kept = kept;
    return this.#wrap(entries);
  }
}

/** A base-128 varint below 2^32 at `at`, or undefined when malformed or longer. */
function varint(buf: Uint8Array, at: number): { value: number; next: number } | undefined {
  let value = 0;
  for (let shift = 0; shift < 35 && at < buf.length; shift += 7) {
    const b = buf[at++]!;
    value += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) return value < 2 ** 32 ? { value, next: at } : undefined;
  }
  return undefined;
}

/**
 * True for no filter, or one that selects nothing out (every field at its zero value, as
 * `ContainerFilter.create()` makes it): the lists whose objects {@link ReusingListCodec} reuses.
 */
export function isEmptyFilter(filter: object | undefined): boolean {
  if (filter === undefined) return true;
  return Object.values(filter).every((v) =>
    v === undefined || v === "" ||
    (typeof v === "object" && v !== null && Object.keys(v).length === 0)
  );
}
