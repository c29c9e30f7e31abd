/**
 * @module
 * Seeded fuzzing for the tests (tests/fuzz_test.ts, `deno task fuzz`): a small PRNG
 * (mulberry32, so a seed and a case index replay a case exactly), generators of odd values
 * (unicode, huge and empty strings, boundary and non-finite numbers, wrong types, deep nesting,
 * long arrays), a mutator that applies a few of them to a valid JSON-like example, and the
 * loop that runs a target over N cases with a per-case time limit and sorts the outcomes:
 * accepted, rejected with a clear error, or failed (a crash: an engine error such as TypeError,
 * an error with no message, or a hang). Upstream has no counterpart; Go's kubelet relies on
 * its callers' validation.
 */

/** A deterministic PRNG (mulberry32). */
export class Rng {
  #s: number;
  constructor(seed: number) {
    this.#s = seed >>> 0;
  }
  /** A float in [0, 1). */
  next(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
}

/** The seed of case `index` of a run seeded with `seed`: each case replays on its own. */
export function caseSeed(seed: number, index: number): number {
  return (Math.imul(seed ^ 0x9e3779b9, 2654435761) + Math.imul(index + 1, 40503)) >>> 0;
}

const ODD_STRINGS = [
  "",
  " ",
  "\t",
  "\n",
  "\0",
  "-",
  "..",
  "../../etc/shadow",
  "/",
  "//",
  "%00",
  "%2e%2e",
  "null",
  "true",
  "yes",
  "no",
  "0x10",
  "1e400",
  "-0",
  ".inf",
  "NaN",
  "~",
  "*",
  "&a",
  "!!binary",
  "'",
  '"',
  "\\",
  "{}",
  "[]",
  "a: b",
  "- x",
  "# c",
  "ü",
  "日本語",
  "🙂",
  "\u202e",
  "\ud800",
  "A".repeat(64),
  "x".repeat(4097),
  "1Gi",
  "-1",
  "100m",
  "1.5",
  "9".repeat(30),
  "kube-system",
  "system:node:x",
];

const ODD_NUMBERS = [
  0,
  -1,
  1,
  -0,
  0.5,
  -0.5,
  255,
  256,
  65535,
  65536,
  2147483647,
  2147483648,
  -2147483648,
  4294967295,
  Number.MAX_SAFE_INTEGER,
  Number.MIN_SAFE_INTEGER,
  1e21,
  -1e21,
  Number.MAX_VALUE,
  Number.MIN_VALUE,
  Number.EPSILON,
];

/** A string from the odd list, or random code points (some outside the BMP, some controls). */
export function oddString(rng: Rng): string {
  if (rng.chance(0.6)) return rng.pick(ODD_STRINGS);
  const n = rng.chance(0.1) ? 2000 + rng.int(20000) : rng.int(40);
  let s = "";
  for (let i = 0; i < n; i++) {
    const r = rng.next();
    s += r < 0.7
      ? String.fromCharCode(32 + rng.int(95))
      : r < 0.8
      ? String.fromCharCode(rng.int(32))
      : String.fromCodePoint(0xe000 + rng.int(0x10ffff - 0xe000));
  }
  return s;
}

export function oddNumber(rng: Rng): number {
  return rng.chance(0.8) ? rng.pick(ODD_NUMBERS) : (rng.next() - 0.5) * 10 ** rng.int(20);
}

/** Any JSON value, nested at most `depth`. */
export function oddValue(rng: Rng, depth = 3): unknown {
  const r = rng.int(depth > 0 ? 8 : 5);
  switch (r) {
    case 0:
      return null;
    case 1:
      return rng.chance(0.5);
    case 2:
      return oddNumber(rng);
    case 3:
    case 4:
      return oddString(rng);
    case 5: {
      // A long array holds scalars only, so sizes stay in the megabytes.
      if (rng.chance(0.05)) return Array.from({ length: 5000 }, () => oddValue(rng, 0));
      return Array.from({ length: rng.int(4) }, () => oddValue(rng, depth - 1));
    }
    case 6: {
      // Deep nesting.
      let v: unknown = oddValue(rng, 0);
      for (let i = rng.int(200); i > 0; i--) v = rng.chance(0.5) ? [v] : { a: v };
      return v;
    }
    default: {
      const o: Record<string, unknown> = {};
      for (let i = rng.int(4); i > 0; i--) {
        o[oddString(rng).slice(0, 30)] = oddValue(rng, depth - 1);
      }
      return o;
    }
  }
}

/** A value of the same JSON type as `like`, but odd (for schema-valid mutations). */
export function oddOfSameType(rng: Rng, like: unknown): unknown {
  if (typeof like === "string") return oddString(rng);
  if (typeof like === "number") {
    return Number.isInteger(like) ? Math.trunc(oddNumber(rng)) : oddNumber(rng);
  }
  if (typeof like === "boolean") return !like;
  if (Array.isArray(like)) {
    if (like.length === 0) return [];
    const n = rng.chance(0.1) ? 500 : rng.int(5);
    // One element repeated (shared, not cloned), as a list of many equal entries.
    const e = rng.pick(like);
    return Array.from({ length: n }, () => e);
  }
  return like;
}

type Json = Record<string, unknown> | unknown[];

/** Paths into `v`, at most 2000 and 12 deep: an earlier mutation may have made it huge. */
function paths(v: unknown, at: (string | number)[] = [], out: (string | number)[][] = []) {
  if (out.length >= 2000) return out;
  out.push(at);
  if (at.length >= 12) return out;
  if (Array.isArray(v)) v.forEach((e, i) => paths(e, [...at, i], out));
  else if (v && typeof v === "object") {
    for (const [k, e] of Object.entries(v)) paths(e, [...at, k], out);
  }
  return out;
}

/**
 * A copy of `example` with 1-4 mutations at random paths: removed, replaced by an odd value of
 * any type (or, with `sameType`, of the same JSON type), an unknown field added, an array
 * emptied or blown up.
 */
export function mutate<T>(rng: Rng, example: T, opts: { sameType?: boolean } = {}): T {
  const root = structuredClone(example) as unknown as Json;
  for (let n = 1 + rng.int(4); n > 0; n--) {
    const all = paths(root).filter((p) => p.length > 0);
    if (all.length === 0) break;
    const path = rng.pick(all);
    let parent: unknown = root;
    for (const k of path.slice(0, -1)) parent = (parent as Record<string | number, unknown>)[k];
    const key = path.at(-1)!;
    const obj = parent as Record<string | number, unknown>;
    const op = rng.int(opts.sameType ? 3 : 5);
    if (op === 0 && !Array.isArray(obj)) delete obj[key];
    else if (op === 1) obj[key] = oddOfSameType(rng, obj[key]);
    else if (op === 2 && obj[key] && typeof obj[key] === "object" && !Array.isArray(obj[key])) {
      (obj[key] as Record<string, unknown>)[`x${oddString(rng).slice(0, 20)}`] = opts.sameType
        ? oddString(rng)
        : oddValue(rng);
    } else if (op === 3) obj[key] = oddValue(rng);
    else obj[key] = oddOfSameType(rng, obj[key]);
  }
  return root as unknown as T;
}

/** Text-level damage for parsers: a cut, a doubled line, a stray character, a YAML oddity. */
export function damageText(rng: Rng, text: string): string {
  const lines = text.split("\n");
  const i = rng.int(lines.length);
  switch (rng.int(6)) {
    case 0:
      return text.slice(0, rng.int(text.length + 1));
    case 1:
      lines.splice(i, 0, lines[i] ?? "");
      return lines.join("\n");
    case 2: {
      const at = rng.int(text.length + 1);
      return text.slice(0, at) +
        rng.pick(["\t", ":", "-", "{", "[", "'", '"', "&", "*", "!", "%", "|", ">", "\0", "#"]) +
        text.slice(at);
    }
    case 3:
      lines.splice(
        i,
        0,
        rng.pick([
          "%YAML 1.2",
          "---",
          "...",
          "<<: *a",
          "x: &a [1, *a]",
          "!!python/object:os.system x",
          "? complex key",
          "dup: 1",
          "dup: 2",
          "key: !!binary aGVsbG8=",
          "key: 0x1F",
          "key: .inf",
          "key: yes",
        ]),
      );
      return lines.join("\n");
    case 4:
      return lines.map((l) => (rng.chance(0.2) ? "  " + l : l)).join("\n");
    default:
      return text + "\n" + text;
  }
}

/** How one case ended. */
export type FuzzOutcome = "accepted" | "rejected";

/** A case that crashed or hung. */
export interface FuzzFailure {
  readonly index: number;
  readonly seed: number;
  readonly input: string;
  readonly error: string;
}

/** The figures of one run. */
export interface FuzzReport {
  readonly target: string;
  readonly seed: number;
  readonly cases: number;
  readonly accepted: number;
  readonly rejected: number;
  readonly failures: readonly FuzzFailure[];
  readonly ms: number;
}

/** Errors that mean a bug, not a rejection: engine errors, and errors without a message. */
export function isCrash(e: unknown): string | undefined {
  if (!(e instanceof Error)) return `threw a non-Error: ${String(e).slice(0, 200)}`;
  if (
    e instanceof TypeError || e instanceof RangeError || e instanceof ReferenceError ||
    e.constructor === SyntaxError || e instanceof EvalError
  ) {
    return `${e.name}: ${e.message}\n${e.stack?.split("\n").slice(1, 4).join("\n") ?? ""}`;
  }
  if (e.message.trim() === "") return `${e.name} with an empty message`;
  return undefined;
}

/** Options of {@link runFuzz}. */
export interface FuzzOptions<T> {
  readonly target: string;
  readonly seed: number;
  readonly cases: number;
  /** Builds case input from its own PRNG. */
  readonly generate: (rng: Rng, index: number) => T;
  /**
   * Runs the target: resolves "accepted", or throws. A thrown error is a rejection unless
   * {@link isCrash} or `check` (for rejections that must say more, e.g. name the file) says
   * otherwise.
   */
  readonly run: (input: T) => Promise<FuzzOutcome> | FuzzOutcome;
  readonly check?: (e: Error, input: T) => string | undefined;
  /** How an input is shown in a failure. @default JSON, cut at 2000 characters */
  readonly show?: (input: T) => string;
  /** A case taking longer is a hang. @default 5000 */
  readonly timeoutMs?: number;
}

/** Runs the cases one after another and returns the report (failures keep going). */
export async function runFuzz<T>(opts: FuzzOptions<T>): Promise<FuzzReport> {
  const t0 = performance.now();
  let accepted = 0;
  let rejected = 0;
  const failures: FuzzFailure[] = [];
  const show = opts.show ?? ((v: T) => JSON.stringify(v) ?? String(v));
  for (let index = 0; index < opts.cases; index++) {
    const seed = caseSeed(opts.seed, index);
    const input = opts.generate(new Rng(seed), index);
    const fail = (error: string) =>
      failures.push({ index, seed, input: show(input).slice(0, 2000), error });
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const hang = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`HANG: no answer in ${opts.timeoutMs ?? 5000} ms`)),
          opts.timeoutMs ?? 5000,
        );
      });
      await Promise.race([Promise.resolve().then(() => opts.run(input)), hang]);
      accepted++;
    } catch (e) {
      const crash = e instanceof Error && e.message.startsWith("HANG:")
        ? e.message
        : isCrash(e) ?? opts.check?.(e as Error, input);
      if (crash) fail(crash);
      else rejected++;
    } finally {
      clearTimeout(timer);
    }
  }
  return {
    target: opts.target,
    seed: opts.seed,
    cases: opts.cases,
    accepted,
    rejected,
    failures,
    ms: performance.now() - t0,
  };
}
