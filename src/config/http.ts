/**
 * @module
 * The static pod URL source of PodConfig: fetches `staticPodURL` (with the
 * `staticPodURLHeader` headers) every `httpCheckFrequency` and hands the pods it holds, one Pod
 * or a v1 PodList, to `onUpdate` as a whole set (upstream's SET from the "http" source). A body
 * that is unchanged since the last read is not decoded again; an empty body is an empty set
 * (so the source counts as seen) and an error; a failed fetch or a body that is not a pod keeps
 * the previous set and is logged, the first three times at full verbosity and then at v4 until
 * it succeeds again. Corresponds to upstream `pkg/kubelet/config/http.go`, with the decoding of
 * `common.go` shared with the file source (`static_pod_decode.ts`).
 */

import type { V1Pod } from "@kubernetes/client-node";
import { parse as parseYaml } from "yaml";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { staticPodFromManifest, StaticPodManifestError } from "./static_pod_decode.ts";
import { MAX_MANIFEST_BYTES } from "./file.ts";

/** What {@link StaticPodURLSource} needs. */
export interface StaticPodURLSourceOptions {
  /** `staticPodURL`. */
  readonly url: string;
  /** `staticPodURLHeader`: each header with its values. */
  readonly header?: Readonly<Record<string, readonly string[]>>;
  /** This node's name: it suffixes pod names and enters their UIDs. */
  readonly nodeName: string;
  /** `httpCheckFrequency` in milliseconds. @default 20000 */
  readonly httpCheckFrequencyMs?: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Receives the whole set after each successful read that changed it. */
  readonly onUpdate: (pods: V1Pod[]) => void;
  /** @default globalThis.fetch */
  readonly fetch?: typeof globalThis.fetch;
}

/** Upstream's client timeout for the URL. */
const FETCH_TIMEOUT_MS = 10_000;

/** Why a read of the URL gave no pods. */
export class StaticPodURLError extends Error {
  override name = "StaticPodURLError";
}

/** Upstream's sourceURL; call `run(signal)` to start it. */
export class StaticPodURLSource {
  readonly #o: StaticPodURLSourceOptions;
  readonly #fetch: typeof globalThis.fetch;
  #data: string | undefined;
  #failureLogs = 0;

  constructor(opts: StaticPodURLSourceOptions) {
    this.#o = opts;
    this.#fetch = opts.fetch ?? globalThis.fetch;
  }

  /** Reads the URL now and every httpCheckFrequency until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const period = this.#o.httpCheckFrequencyMs ?? 20_000;
    while (!signal.aborted) {
      await this.readOnce(signal);
      await this.#o.clock.sleep(period, signal).catch(() => {});
    }
  }

  /** One read (upstream run): logs what went wrong rather than throwing. */
  async readOnce(signal?: AbortSignal): Promise<void> {
    const log = this.#o.logger;
    try {
      await this.extract(signal);
      if (this.#failureLogs > 0) {
        log.info("Successfully read pods from URL");
        this.#failureLogs = 0;
      }
    } catch (e) {
      if (signal?.aborted) return;
      const err = e instanceof Error ? e.message : String(e);
      if (this.#failureLogs < 3) log.info("Failed to read pods from URL", { err });
      else if (this.#failureLogs === 3) {
        log.info("Failed to read pods from URL. Dropping verbosity of this message to V(4)", {
          err,
        });
      } else log.v(4).info("Failed to read pods from URL", { err });
      this.#failureLogs++;
    }
  }

  /** Upstream extractFromURL: throws {@link StaticPodURLError} on any failure. */
  async extract(signal?: AbortSignal): Promise<void> {
    const { url, nodeName } = this.#o;
    const headers = new Headers();
    for (const [k, values] of Object.entries(this.#o.header ?? {})) {
      for (const v of values) headers.append(k, v);
    }
    const deadline = AbortSignal.timeout(FETCH_TIMEOUT_MS);
    let res: Response;
    try {
      res = await this.#fetch(url, {
        headers,
        signal: signal ? AbortSignal.any([signal, deadline]) : deadline,
      });
    } catch (e) {
      throw new StaticPodURLError(
        `Get "${url}": ${e instanceof Error ? e.message : String(e)}`,
        { cause: e },
      );
    }
    const bytes = new Uint8Array(await res.arrayBuffer());
    if (res.status !== 200) {
      throw new StaticPodURLError(`${url}: ${res.status} ${res.statusText}`);
    }
    if (bytes.length > MAX_MANIFEST_BYTES) {
      throw new StaticPodURLError(`${url}: the body is larger than ${MAX_MANIFEST_BYTES} bytes`);
    }
    if (bytes.length === 0) {
      // An empty set lets the source count as seen.
      this.#data = "";
      this.#o.onUpdate([]);
      throw new StaticPodURLError(`zero-length data received from ${url}`);
    }
    const text = new TextDecoder().decode(bytes);
    if (text === this.#data) return;
    this.#data = text;
    this.#o.onUpdate(decodePods(text, url, nodeName));
  }
}

/** One Pod or a v1 PodList, each pod decoded, defaulted and validated as a static pod. */
export function decodePods(text: string, url: string, nodeName: string): V1Pod[] {
  let single: StaticPodManifestError;
  try {
    return [staticPodFromManifest(text, url, nodeName, "url").pod];
  } catch (e) {
    if (!(e instanceof StaticPodManifestError)) throw e;
    single = e;
  }
  const list = parseList(text);
  if (list === undefined && kindOf(text) === "Pod") {
    // It is a pod, just not a valid one: say what is wrong with it (upstream's singlePodErr).
    throw new StaticPodURLError(single.message, { cause: single });
  }
  if (list === undefined) {
    throw new StaticPodURLError(
      `${url}: received '${text}', but couldn't parse as single pod (${single.message}) or as list of pods (not a v1 PodList)`,
    );
  }
  return list.map((item, i) => {
    try {
      return staticPodFromManifest(JSON.stringify(item), url, nodeName, "url").pod;
    } catch (e) {
      throw new StaticPodURLError(
        `${url}: list of pods: items[${i}]: ${e instanceof Error ? e.message : String(e)}`,
        { cause: e },
      );
    }
  });
}

function kindOf(text: string): unknown {
  try {
    const o = parseYaml(text) as Record<string, unknown> | null;
    return o !== null && typeof o === "object" ? o.kind : undefined;
  } catch {
    return undefined;
  }
}

function parseList(text: string): unknown[] | undefined {
  let obj: unknown;
  try {
    obj = parseYaml(text);
  } catch {
    return undefined;
  }
  if (obj === null || typeof obj !== "object") return undefined;
  const o = obj as Record<string, unknown>;
  if (o.kind !== "PodList" || o.apiVersion !== "v1") return undefined;
  return Array.isArray(o.items) ? o.items : [];
}
