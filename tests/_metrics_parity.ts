/**
 * What the two-kubelet comparison (tests/upstream_parity_test.ts) compares: two scrapes of one
 * endpoint, the Go kubelet's and ours, read leniently (any family type, as client_golang writes
 * them: summaries and untyped families included) and compared family by family: every family
 * upstream has must be ours too, with its type, HELP and label names, and with every kind of
 * series it has (for /metrics/cadvisor, whose cgroup a series describes: the machine, a QoS
 * class, a pod, a pause container, a container, a system container). Exceptions are an explicit
 * list, each with its reason, and an exception nobody needs any more is itself a problem, so the
 * list cannot outlive what it excuses. Also renders the record of family counts kept in
 * tests/results/. Test support only.
 */

import type { MetricDeclaration } from "../src/metrics/metrics.ts";

/** A family as read by {@link parseLoose}. */
export interface LooseFamily {
  readonly name: string;
  readonly type: string;
  readonly help: string;
  readonly samples: readonly LooseSample[];
}

/** One sample line: its full name (with a histogram's or summary's suffix) and labels. */
export interface LooseSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const SAMPLE_RE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)(?: -?\d+)?$/;
const LABEL_RE = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g;
const SUFFIXES = ["_bucket", "_sum", "_count"];

/**
 * Reads text format 0.0.4 as any Prometheus client writes it: `# HELP` and `# TYPE` in either
 * order, families without HELP, samples of a family's suffixed names. Throws on a line that is
 * none of these, naming it.
 */
export function parseLoose(text: string): Map<string, LooseFamily> {
  const out = new Map<
    string,
    { name: string; type: string; help: string; samples: LooseSample[] }
  >();
  const family = (name: string) => {
    let f = out.get(name);
    if (!f) out.set(name, f = { name, type: "untyped", help: "", samples: [] });
    return f;
  };
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    const help = /^# HELP (\S+) ?(.*)$/.exec(line);
    if (help) {
      family(help[1] ?? "").help = (help[2] ?? "").replace(
        /\\([\\n])/g,
        (_, c) => c === "n" ? "\n" : c,
      );
      return;
    }
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      family(type[1] ?? "").type = type[2] ?? "";
      return;
    }
    if (line.startsWith("#")) return;
    const m = SAMPLE_RE.exec(line);
    if (!m) throw new Error(`line ${i + 1}: not a sample: ${JSON.stringify(line)}`);
    const name = m[1] ?? "";
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").slice(1, -1).matchAll(LABEL_RE)) {
      labels[l[1] ?? ""] = (l[2] ?? "").replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    const owner = out.has(name)
      ? name
      : SUFFIXES.map((s) => name.endsWith(s) ? name.slice(0, -s.length) : "").find((n) =>
        n !== "" && out.has(n)
      ) ?? name;
    family(owner).samples.push({ name, labels, value: Number(m[3]) });
  });
  for (const [name, f] of out) if (f.samples.length === 0) out.delete(name);
  return out;
}

/** Says which kind of series a sample is (e.g. which cgroup it describes); "" for all alike. */
export type SeriesKind = (family: string, labels: Readonly<Record<string, string>>) => string;

/** One allowed difference: the family (and, optionally, what of it) and why. */
export interface Exception {
  readonly family: string;
  /** "family" (absent), "type", "help", "label:<name>" or "kind:<kind>". */
  readonly what: string;
  readonly reason: string;
}

/** Options of {@link compareScrapes}. */
export interface CompareOptions {
  /** The endpoint, for messages ("/metrics/cadvisor"). */
  readonly endpoint: string;
  readonly upstream: ReadonlyMap<string, LooseFamily>;
  readonly ours: ReadonlyMap<string, LooseFamily>;
  /** Families of upstream not compared at all (the Go runtime's go_*), with the reason. */
  readonly skip?: (family: string) => string | undefined;
  readonly kind?: SeriesKind;
  readonly exceptions?: readonly Exception[];
  /**
   * Families our agent registers (MetricsRegistry.declared) though its scrape may show none: a
   * vector appears once first observed, so a family upstream shows only after something
   * happened there (a failed RunPodSandbox: kubelet_run_podsandbox_errors_total) is not
   * missing when ours declares it with upstream's type, HELP and label names.
   */
  readonly declared?: ReadonlyMap<string, MetricDeclaration>;
}

/** What {@link compareScrapes} found. */
export interface Comparison {
  /** Each difference upstream has and we lack, not excused. */
  readonly problems: string[];
  /** Exceptions that excused nothing. */
  readonly unused: Exception[];
  /** Exceptions that excused something, with what. */
  readonly used: { readonly exception: Exception; readonly found: string }[];
  /** Upstream's families our scrape lacks though our agent declares them alike. */
  readonly unobserved: string[];
}

/** Label names of a family's samples, without `le` and `quantile`. */
export function labelNames(f: LooseFamily): Set<string> {
  const out = new Set<string>();
  for (const s of f.samples) {
    for (const k of Object.keys(s.labels)) if (k !== "le" && k !== "quantile") out.add(k);
  }
  return out;
}

/** Compares one endpoint's scrapes; see the module documentation. */
export function compareScrapes(opts: CompareOptions): Comparison {
  const exceptions = opts.exceptions ?? [];
  const usedSet = new Set<Exception>();
  const used: Comparison["used"] = [];
  const problems: string[] = [];
  const unobserved: string[] = [];
  const report = (family: string, what: string, found: string) => {
    const e = exceptions.find((x) => x.family === family && x.what === what);
    if (e) {
      usedSet.add(e);
      used.push({ exception: e, found });
    } else problems.push(`${opts.endpoint} ${family}: ${found}`);
  };
  for (const [name, up] of [...opts.upstream].sort(([a], [b]) => a < b ? -1 : 1)) {
    if (opts.skip?.(name) !== undefined) continue;
    const ours = opts.ours.get(name);
    if (!ours) {
      const d = opts.declared?.get(name);
      if (!d) {
        report(name, "family", `missing (upstream: ${up.type}, ${up.samples.length} samples)`);
        continue;
      }
      const alike = d.type === up.type && d.help === up.help &&
        [...labelNames(up)].every((l) => d.labelNames.includes(l));
      if (alike) unobserved.push(`${opts.endpoint} ${name}`);
      else {
        report(
          name,
          "family",
          `no samples, and declared unlike upstream's (${d.type} ${JSON.stringify(d.help)} ` +
            `[${d.labelNames.join(", ")}]; upstream ${up.type} ${JSON.stringify(up.help)} ` +
            `[${[...labelNames(up)].join(", ")}])`,
        );
      }
      continue;
    }
    if (ours.type !== up.type) report(name, "type", `type ${ours.type}, upstream ${up.type}`);
    if (ours.help !== up.help) {
      report(
        name,
        "help",
        `HELP ${JSON.stringify(ours.help)}, upstream ${JSON.stringify(up.help)}`,
      );
    }
    const mine = labelNames(ours);
    for (const l of labelNames(up)) {
      if (!mine.has(l)) report(name, `label:${l}`, `no label ${l}`);
    }
    const kind = opts.kind;
    if (kind) {
      const ourKinds = new Set(ours.samples.map((s) => kind(name, s.labels)));
      const upKinds = new Set(up.samples.map((s) => kind(name, s.labels)));
      for (const k of upKinds) if (!ourKinds.has(k)) report(name, `kind:${k}`, `no ${k} series`);
    }
  }
  return { problems, unused: exceptions.filter((e) => !usedSet.has(e)), used, unobserved };
}

/** Counts for the record: families per endpoint, ours and upstream's, and how many are shared. */
export interface EndpointCount {
  readonly endpoint: string;
  readonly upstream: number;
  readonly ours: number;
  readonly shared: number;
}

/** Counts the families of two scrapes of one endpoint (skipped ones left out of upstream's). */
export function countFamilies(
  endpoint: string,
  upstream: ReadonlyMap<string, LooseFamily>,
  ours: ReadonlyMap<string, LooseFamily>,
  skip?: (family: string) => string | undefined,
): EndpointCount {
  const up = [...upstream.keys()].filter((n) => skip?.(n) === undefined);
  return {
    endpoint,
    upstream: up.length,
    ours: ours.size,
    shared: up.filter((n) => ours.has(n)).length,
  };
}

const QOS_RE = /^\/kubepods(?:\.slice)?(?:\/(?:burstable|besteffort)(?:\.slice)?)?$/;
const POD_RE = /\/pod[0-9a-f_-]+(?:\.slice)?$/;

/**
 * Which cgroup a /metrics/cadvisor series describes: the machine ("/"), a QoS-class cgroup
 * (named, so /kubepods and /kubepods/burstable count apart), a pod cgroup, a container of a pod
 * (its pause container included: a cAdvisor that cannot reach the runtime reports containers as
 * raw cgroups without their labels, so labels cannot tell them apart), or a system container
 * (named by its cgroup path); "" for a series without an `id` (machine_* families). Test agents
 * run under a cgroupRoot of their own, which is cut off up to `/kubepods`.
 */
export const cadvisorKind: SeriesKind = (_family, labels) => {
  const id = labels.id;
  if (id === undefined) return "";
  if (id === "/") return "root";
  const at = id.indexOf("/kubepods");
  if (at < 0) return `system ${id}`;
  const rel = id.slice(at);
  if (QOS_RE.test(rel)) return `qos ${rel}`;
  if (POD_RE.test(rel)) return "pod";
  return "container";
};

/**
 * Every key path of a JSON document, arrays collapsed to `[]` (`pods[].containers[].cpu.usageNanoCores`),
 * for comparing the shape of two Summary API documents.
 */
export function jsonKeyPaths(value: unknown, prefix = ""): Set<string> {
  const out = new Set<string>();
  const walk = (v: unknown, path: string) => {
    if (Array.isArray(v)) {
      for (const item of v) walk(item, `${path}[]`);
    } else if (v !== null && typeof v === "object") {
      for (const [k, child] of Object.entries(v)) {
        const p = path === "" ? k : `${path}.${k}`;
        out.add(p);
        walk(child, p);
      }
    }
  };
  walk(value, prefix);
  return out;
}
