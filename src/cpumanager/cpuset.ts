/**
 * @module
 * An immutable set of CPU ids (logical CPUs, cores, sockets, NUMA nodes, uncore caches: any
 * small non-negative integer ids) with the Linux cpu list format ("0-3,8") in both directions.
 * The CPU manager's state, its checkpoint and the topology queries all speak it. Corresponds to
 * `k8s.io/utils/cpuset`: {@link CPUSet.parse} accepts and rejects what upstream's `Parse` does,
 * with the same messages, and {@link CPUSet.toString} is upstream's canonical `String()`.
 */

/** A cpu list did not parse; `message` is upstream's (`strconv.Atoi: parsing "a": invalid syntax`). */
export class CPUSetParseError extends Error {
  override name = "CPUSetParseError";
}

const MAX_INT64 = 2n ** 63n - 1n;

/** Go's strconv.Atoi on a 64-bit platform, with its error text. */
function atoi(s: string): number {
  if (!/^[+-]?\d+$/.test(s)) {
    throw new CPUSetParseError(`strconv.Atoi: parsing ${JSON.stringify(s)}: invalid syntax`);
  }
  const big = BigInt(s);
  if (big > MAX_INT64 || big < -MAX_INT64 - 1n) {
    throw new CPUSetParseError(`strconv.Atoi: parsing ${JSON.stringify(s)}: value out of range`);
  }
  if (big > BigInt(Number.MAX_SAFE_INTEGER) || big < BigInt(Number.MIN_SAFE_INTEGER)) {
    // Go would go on to add 2^53 and more elements; no machine has such a CPU id.
    throw new CPUSetParseError(`cpu id ${s} is beyond ${Number.MAX_SAFE_INTEGER}`);
  }
  return Number(big);
}

/** An immutable set of CPU ids; every operation returns a new set. */
export class CPUSet implements Iterable<number> {
  readonly #elems: ReadonlySet<number>;
  #sorted?: readonly number[];

  /** The set of the given ids (duplicates collapse), as upstream's `cpuset.New(...)`. */
  constructor(cpus: Iterable<number> = []) {
    this.#elems = new Set(cpus);
  }

  /** The set of the given ids. */
  static of(...cpus: number[]): CPUSet {
    return new CPUSet(cpus);
  }

  /**
   * Parses a Linux cpu list ("0-5,34,46-48"); "" is the empty set. Throws {@link
   * CPUSetParseError} with upstream's message: `strconv.Atoi: parsing "x": invalid syntax` for a
   * bad number (including empty parts as in "0,,3" or "1-") and `invalid range "3-0" (3 > 0)`.
   */
  static parse(s: string): CPUSet {
    if (s === "") return new CPUSet();
    const out = new Set<number>();
    for (const r of s.split(",")) {
      const dash = r.indexOf("-");
      if (dash < 0) {
        out.add(atoi(r));
        continue;
      }
      const start = atoi(r.slice(0, dash));
      const end = atoi(r.slice(dash + 1));
      if (start > end) {
        throw new CPUSetParseError(`invalid range ${JSON.stringify(r)} (${start} > ${end})`);
      }
      for (let e = start; e <= end; e++) out.add(e);
    }
    return new CPUSet(out);
  }

  /** Number of ids. */
  get size(): number {
    return this.#elems.size;
  }

  /** True when the set has no ids. */
  isEmpty(): boolean {
    return this.#elems.size === 0;
  }

  /** True when `cpu` is in the set. */
  has(cpu: number): boolean {
    return this.#elems.has(cpu);
  }

  /** True when both sets hold the same ids. */
  equals(other: CPUSet): boolean {
    return this.size === other.size && this.isSubsetOf(other);
  }

  /** True when every id of this set is in `other`. */
  isSubsetOf(other: CPUSet): boolean {
    for (const c of this.#elems) if (!other.has(c)) return false;
    return true;
  }

  /** The ids of this set and of all `others`. */
  union(...others: CPUSet[]): CPUSet {
    const out = new Set(this.#elems);
    for (const o of others) for (const c of o.#elems) out.add(c);
    return new CPUSet(out);
  }

  /** The ids in both sets. */
  intersection(other: CPUSet): CPUSet {
    return this.filter((c) => other.has(c));
  }

  /** The ids of this set that are not in `other`. */
  difference(other: CPUSet): CPUSet {
    return this.filter((c) => !other.has(c));
  }

  /** The ids for which `keep` returns true. */
  filter(keep: (cpu: number) => boolean): CPUSet {
    const out: number[] = [];
    for (const c of this.#elems) if (keep(c)) out.push(c);
    return new CPUSet(out);
  }

  /** The ids in ascending order (a fresh array). */
  list(): number[] {
    this.#sorted ??= [...this.#elems].sort((a, b) => a - b);
    return [...this.#sorted];
  }

  /** The ids in insertion order (upstream's UnsortedList, whose order is unspecified). */
  unsortedList(): number[] {
    return [...this.#elems];
  }

  /** Ascending ids. */
  [Symbol.iterator](): Iterator<number> {
    return this.list()[Symbol.iterator]();
  }

  /** The canonical cpu list: ascending, adjacent ids merged into ranges ("1-3,5-6,8"); "" when empty. */
  toString(): string {
    const parts: string[] = [];
    const elems = this.list();
    for (let i = 0; i < elems.length;) {
      const start = elems[i]!;
      let end = start;
      while (i + 1 < elems.length && elems[i + 1] === end + 1) end = elems[++i]!;
      parts.push(start === end ? `${start}` : `${start}-${end}`);
      i++;
    }
    return parts.join(",");
  }

  /** The cpu list, so that JSON.stringify writes what the checkpoint holds. */
  toJSON(): string {
    return this.toString();
  }
}
