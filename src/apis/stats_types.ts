/**
 * @module
 * The Summary API's types (`/stats/summary`, `stats.kubelet.k8s.io/v1alpha1`) with upstream's
 * JSON field names, and a strict decoder over the same schema: every field's name and type, so
 * a test (or a client) can check that a document is exactly what upstream's Go types accept
 * and produce: no unknown fields, no wrong types, no negative or fractional unsigned numbers.
 * Times are RFC 3339 strings as metav1.Time marshals them. Corresponds to upstream
 * `staging/src/k8s.io/kubelet/pkg/apis/stats/v1alpha1/types.go`.
 */

/** The system containers' names (upstream SystemContainer* constants). */
export const SYSTEM_CONTAINER_KUBELET = "kubelet";
export const SYSTEM_CONTAINER_RUNTIME = "runtime";
export const SYSTEM_CONTAINER_MISC = "misc";
export const SYSTEM_CONTAINER_PODS = "pods";

/** Top-level container of node and pod stats. */
export interface Summary {
  node: NodeStats;
  pods: PodStats[];
}

/** Node-level samples. */
export interface NodeStats {
  nodeName: string;
  systemContainers?: ContainerStats[];
  startTime: string;
  cpu?: CPUStats;
  memory?: MemoryStats;
  io?: IOStats;
  network?: NetworkStats;
  fs?: FsStats;
  runtime?: RuntimeStats;
  rlimit?: RlimitStats;
  swap?: SwapStats;
}

/** The OS's process limits. */
export interface RlimitStats {
  time: string;
  maxpid?: number;
  curproc?: number;
}

/** The runtime's filesystems. */
export interface RuntimeStats {
  imageFs?: FsStats;
  containerFs?: FsStats;
}

/** Processes of a pod. */
export interface ProcessStats {
  process_count?: number;
}

/** Pod-level samples. */
export interface PodStats {
  podRef: PodReference;
  startTime: string;
  containers: ContainerStats[];
  cpu?: CPUStats;
  memory?: MemoryStats;
  io?: IOStats;
  network?: NetworkStats;
  volume?: VolumeStats[];
  "ephemeral-storage"?: FsStats;
  process_stats?: ProcessStats;
  swap?: SwapStats;
}

/** Container-level samples. */
export interface ContainerStats {
  name: string;
  startTime: string;
  cpu?: CPUStats;
  memory?: MemoryStats;
  io?: IOStats;
  accelerators?: AcceleratorStats[];
  rootfs?: FsStats;
  logs?: FsStats;
  userDefinedMetrics?: UserDefinedMetric[];
  swap?: SwapStats;
}

/** Enough to find a pod. */
export interface PodReference {
  name: string;
  namespace: string;
  uid: string;
}

/** One network interface's counters. */
export interface InterfaceStats {
  name: string;
  rxBytes?: number;
  rxErrors?: number;
  txBytes?: number;
  txErrors?: number;
}

/** The default interface's counters inline, and every interface. */
export interface NetworkStats extends InterfaceStats {
  time: string;
  interfaces?: InterfaceStats[];
}

/** CPU usage. */
export interface CPUStats {
  time: string;
  /** Core-nanoseconds per second over the sample window. */
  usageNanoCores?: number;
  /** Cumulative CPU time since the container started. */
  usageCoreNanoSeconds?: number;
  psi?: PSIStats;
}

/** Memory usage. */
export interface MemoryStats {
  time: string;
  /** The limit minus the working set; omitted without a limit. */
  availableBytes?: number;
  usageBytes?: number;
  workingSetBytes?: number;
  rssBytes?: number;
  pageFaults?: number;
  majorPageFaults?: number;
  psi?: PSIStats;
}

/** IO: its pressure stall information (the only IO figure the Summary API carries). */
export interface IOStats {
  time: string;
  psi?: PSIStats;
}

/** Pressure stall information of one resource. */
export interface PSIStats {
  /** All non-idle tasks stalled at once. */
  full: PSIData;
  /** Some tasks stalled. */
  some: PSIData;
}

/** One line of a pressure file. */
export interface PSIData {
  /** Total stall time as the kernel counts it (µs; upstream's comment says ns). */
  total: number;
  avg10: number;
  avg60: number;
  avg300: number;
}

/** Swap usage. */
export interface SwapStats {
  time: string;
  swapAvailableBytes?: number;
  swapUsageBytes?: number;
}

/** An accelerator's usage. */
export interface AcceleratorStats {
  make: string;
  model: string;
  id: string;
  memoryTotal: number;
  memoryUsed: number;
  dutyCycle: number;
}

/** A volume's filesystem usage. */
export interface VolumeStats extends FsStats {
  name?: string;
  pvcRef?: { name: string; namespace: string };
  volumeHealthStats?: { abnormal: boolean };
}

/** Filesystem usage. */
export interface FsStats {
  time: string;
  availableBytes?: number;
  capacityBytes?: number;
  usedBytes?: number;
  inodesFree?: number;
  inodes?: number;
  inodesUsed?: number;
}

/** A metric a container exposes. */
export interface UserDefinedMetric {
  name: string;
  type: "gauge" | "cumulative" | "delta";
  units: string;
  labels?: Record<string, string>;
  time: string;
  value: number;
}

// ---- Schema ---------------------------------------------------------------------------------

/** A field's type: Go's uint64, int64, float64, string, bool, metav1.Time, or a composite. */
type Kind =
  | "string"
  | "uint64"
  | "int64"
  | "float64"
  | "bool"
  | "time"
  | { readonly object: Schema }
  | { readonly array: Kind }
  | { readonly stringMap: true };

/** An object's fields: name → [kind, required]. Required fields lack Go's `omitempty`. */
type Schema = Readonly<Record<string, readonly [Kind, boolean]>>;

const obj = (schema: Schema): Kind => ({ object: schema });
const arr = (kind: Kind): Kind => ({ array: kind });
const opt = (kind: Kind): readonly [Kind, boolean] => [kind, false];
const req = (kind: Kind): readonly [Kind, boolean] => [kind, true];

const FS: Schema = {
  time: req("time"),
  availableBytes: opt("uint64"),
  capacityBytes: opt("uint64"),
  usedBytes: opt("uint64"),
  inodesFree: opt("uint64"),
  inodes: opt("uint64"),
  inodesUsed: opt("uint64"),
};
const PSI_DATA: Schema = {
  total: req("uint64"),
  avg10: req("float64"),
  avg60: req("float64"),
  avg300: req("float64"),
};
const PSI: Schema = { full: req(obj(PSI_DATA)), some: req(obj(PSI_DATA)) };
const IO: Schema = { time: req("time"), psi: opt(obj(PSI)) };
const CPU: Schema = {
  time: req("time"),
  usageNanoCores: opt("uint64"),
  usageCoreNanoSeconds: opt("uint64"),
  psi: opt(obj(PSI)),
};
const MEMORY: Schema = {
  time: req("time"),
  availableBytes: opt("uint64"),
  usageBytes: opt("uint64"),
  workingSetBytes: opt("uint64"),
  rssBytes: opt("uint64"),
  pageFaults: opt("uint64"),
  majorPageFaults: opt("uint64"),
  psi: opt(obj(PSI)),
};
const SWAP: Schema = {
  time: req("time"),
  swapAvailableBytes: opt("uint64"),
  swapUsageBytes: opt("uint64"),
};
const INTERFACE: Schema = {
  name: req("string"),
  rxBytes: opt("uint64"),
  rxErrors: opt("uint64"),
  txBytes: opt("uint64"),
  txErrors: opt("uint64"),
};
// The default interface is inline: its name is required in Go (no omitempty).
const NETWORK: Schema = { time: req("time"), ...INTERFACE, interfaces: opt(arr(obj(INTERFACE))) };
const ACCELERATOR: Schema = {
  make: req("string"),
  model: req("string"),
  id: req("string"),
  memoryTotal: req("uint64"),
  memoryUsed: req("uint64"),
  dutyCycle: req("uint64"),
};
const USER_METRIC: Schema = {
  name: req("string"),
  type: req("string"),
  units: req("string"),
  labels: opt({ stringMap: true }),
  time: req("time"),
  value: req("float64"),
};
const CONTAINER: Schema = {
  name: req("string"),
  startTime: req("time"),
  cpu: opt(obj(CPU)),
  memory: opt(obj(MEMORY)),
  io: opt(obj(IO)),
  accelerators: opt(arr(obj(ACCELERATOR))),
  rootfs: opt(obj(FS)),
  logs: opt(obj(FS)),
  userDefinedMetrics: opt(arr(obj(USER_METRIC))),
  swap: opt(obj(SWAP)),
};
const VOLUME: Schema = {
  ...FS,
  name: opt("string"),
  pvcRef: opt(obj({ name: req("string"), namespace: req("string") })),
  volumeHealthStats: opt(obj({ abnormal: req("bool") })),
};
const POD: Schema = {
  podRef: req(obj({ name: req("string"), namespace: req("string"), uid: req("string") })),
  startTime: req("time"),
  containers: req(arr(obj(CONTAINER))),
  cpu: opt(obj(CPU)),
  memory: opt(obj(MEMORY)),
  io: opt(obj(IO)),
  network: opt(obj(NETWORK)),
  volume: opt(arr(obj(VOLUME))),
  "ephemeral-storage": opt(obj(FS)),
  process_stats: opt(obj({ process_count: opt("uint64") })),
  swap: opt(obj(SWAP)),
};
const NODE: Schema = {
  nodeName: req("string"),
  systemContainers: opt(arr(obj(CONTAINER))),
  startTime: req("time"),
  cpu: opt(obj(CPU)),
  memory: opt(obj(MEMORY)),
  io: opt(obj(IO)),
  network: opt(obj(NETWORK)),
  fs: opt(obj(FS)),
  runtime: opt(obj({ imageFs: opt(obj(FS)), containerFs: opt(obj(FS)) })),
  rlimit: opt(obj({ time: req("time"), maxpid: opt("int64"), curproc: opt("int64") })),
  swap: opt(obj(SWAP)),
};
const SUMMARY: Schema = { node: req(obj(NODE)), pods: req(arr(obj(POD))) };

/** A document that does not match the schema; the message names the JSON path. */
export class StatsSchemaError extends Error {
  override name = "StatsSchemaError";
}

/** RFC 3339 as metav1.Time marshals it (seconds; a fraction only in MicroTime, tolerated). */
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Checks `doc` against the Summary schema as Go's strict JSON decoding would (unknown fields
 * rejected), and returns it typed. Throws {@link StatsSchemaError} naming the first bad path.
 */
export function decodeSummary(doc: unknown): Summary {
  check(doc, obj(SUMMARY), "$");
  return doc as Summary;
}

function check(value: unknown, kind: Kind, path: string): void {
  const fail = (what: string): never => {
    throw new StatsSchemaError(`${path}: ${what}, got ${JSON.stringify(value)}`);
  };
  if (typeof kind === "string") {
    switch (kind) {
      case "string":
        if (typeof value !== "string") fail("expected a string");
        return;
      case "bool":
        if (typeof value !== "boolean") fail("expected a boolean");
        return;
      case "float64":
        if (typeof value !== "number" || !Number.isFinite(value)) fail("expected a number");
        return;
      case "int64":
        if (!Number.isSafeInteger(value)) fail("expected an integer");
        return;
      case "uint64":
        if (!Number.isSafeInteger(value) || (value as number) < 0) {
          fail("expected an unsigned integer");
        }
        return;
      case "time":
        if (typeof value !== "string" || !RFC3339.test(value)) fail("expected an RFC 3339 time");
        return;
    }
  }
  if ("array" in kind) {
    if (!Array.isArray(value)) fail("expected an array");
    (value as unknown[]).forEach((v, i) => check(v, kind.array, `${path}[${i}]`));
    return;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    fail("expected an object");
  }
  const record = value as Record<string, unknown>;
  if ("stringMap" in kind) {
    for (const [k, v] of Object.entries(record)) check(v, "string", `${path}.${k}`);
    return;
  }
  for (const key of Object.keys(record)) {
    if (!(key in kind.object)) fail(`unknown field ${JSON.stringify(key)}`);
  }
  for (const [key, [fieldKind, required]] of Object.entries(kind.object)) {
    const v = record[key];
    if (v === undefined || v === null) {
      if (required) throw new StatsSchemaError(`${path}.${key}: required field missing`);
      continue;
    }
    check(v, fieldKind, `${path}.${key}`);
  }
}
