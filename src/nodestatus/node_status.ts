/**
 * @module
 * The Node object the kubelet registers and the status it reports, computed from what the
 * kubelet knows: configuration, machine info, runtime state, images. Pure functions, so each
 * field can be checked against upstream's wording. Corresponds to upstream
 * `pkg/kubelet/kubelet_node_status.go` (initialNode) and `pkg/kubelet/nodestatus/setters.go`.
 */

import type { V1Node, V1NodeCondition, V1NodeStatus, V1Taint } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { MachineInfo } from "../stats/machine_info.ts";
import { formatBinarySI, parseQuantity } from "../util/quantity.ts";
import { aggregate } from "../runtime_state.ts";
import { getThresholdQuantity, parseThresholdConfig } from "../eviction/thresholds.ts";

/** What initialNode needs. */
export interface InitialNodeOptions {
  readonly nodeName: string;
  readonly hostname: string;
  readonly nodeLabels: Readonly<Record<string, string>>;
  readonly registerWithTaints: readonly V1Taint[];
  readonly registerSchedulable: boolean;
  readonly enableControllerAttachDetach: boolean;
  readonly providerID?: string;
}

/** The Go name of this process's architecture, as node labels and nodeInfo report it. */
export const GOARCH = Deno.build.arch === "x86_64" ? "amd64" : "arm64";

/** The Node the kubelet registers (upstream initialNode), status left to the setters. */
export function initialNode(o: InitialNodeOptions): V1Node {
  const taints: V1Taint[] = o.registerWithTaints.map((t) => ({ ...t }));
  if (!o.registerSchedulable && !taints.some((t) => t.key === "node.kubernetes.io/unschedulable")) {
    taints.push({ key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" });
  }
  const node: V1Node = {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name: o.nodeName,
      labels: {
        "kubernetes.io/hostname": o.hostname,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": GOARCH,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": GOARCH,
        ...o.nodeLabels,
      },
      annotations: o.enableControllerAttachDetach
        ? { "volumes.kubernetes.io/controller-managed-attach-detach": "true" }
        : {},
    },
    spec: { unschedulable: !o.registerSchedulable, ...(taints.length > 0 ? { taints } : {}) },
  };
  if (o.providerID) node.spec!.providerID = o.providerID;
  return node;
}

/** Inputs of the status setters. */
export interface StatusInputs {
  readonly config: KubeletConfiguration;
  readonly machine: MachineInfo;
  /** Bytes of the filesystem under --root-dir, when known. */
  readonly rootfsCapacity?: number;
  readonly hostname: string;
  readonly nodeIPs: readonly string[];
  readonly kubeletVersion: string;
  /** e.g. "containerd://1.6.20". */
  readonly containerRuntimeVersion: string;
  /**
   * The features this node declares (status.declaredFeatures, NodeDeclaredFeatures), sorted.
   * @default none
   */
  readonly declaredFeatures?: readonly string[];
  /** The runtime's handlers and their features, from its last CRI Status. @default none */
  readonly runtimeHandlers?: readonly {
    readonly name: string;
    readonly features?: {
      readonly recursiveReadOnlyMounts: boolean;
      readonly userNamespaces: boolean;
    };
  }[];
  readonly images: readonly api.Image[];
  /** Why the node is not ready (runtime, network, storage errors), empty when ready. */
  readonly notReadyReasons: readonly string[];
  /** Time of this status, in ms. */
  readonly now: number;
  /**
   * The attachable volumes in use (upstream VolumesInUse setter), sorted; undefined until the
   * volume manager knows them, which leaves the field as it is. @default undefined
   */
  readonly volumesInUse?: readonly string[];
  /**
   * The device plugins' resources (upstream's MachineInfo setter asks the container manager):
   * counts of devices, and the resources to report as 0 (their plugin is gone). @default none
   */
  readonly devices?: {
    readonly capacity: Readonly<Record<string, number>>;
    readonly allocatable: Readonly<Record<string, number>>;
    readonly removed: readonly string[];
  };
  /** Resource pressure as the eviction manager reports it. @default none */
  readonly pressure?: {
    readonly memory?: boolean;
    readonly disk?: boolean;
    readonly pid?: boolean;
  };
}

const GI = 2 ** 30;

/** Hugepage resource name for a page size in bytes (hugepages-2Mi, hugepages-1Gi). */
export function hugePageResourceName(bytes: number): string {
  if (bytes % GI === 0) return `hugepages-${bytes / GI}Gi`;
  if (bytes % 2 ** 20 === 0) return `hugepages-${bytes / 2 ** 20}Mi`;
  return `hugepages-${bytes / 1024}Ki`;
}

/** Capacity and allocatable as upstream's MachineInfo setter and node allocatable compute them. */
export function capacityAndAllocatable(inputs: StatusInputs): {
  capacity: Record<string, string>;
  allocatable: Record<string, string>;
} {
  const { config, machine } = inputs;
  const pods = config.podsPerCore && config.podsPerCore > 0
    ? Math.min(machine.numCores * config.podsPerCore, config.maxPods)
    : config.maxPods;
  const cap: Record<string, number> = {
    cpu: machine.numCores,
    memory: machine.memoryCapacity,
    pods,
  };
  // Upstream's container manager adds ephemeral-storage only with localStorageCapacityIsolation.
  if (inputs.rootfsCapacity !== undefined && config.localStorageCapacityIsolation !== false) {
    cap["ephemeral-storage"] = inputs.rootfsCapacity;
  }
  let hugeTotal = 0;
  for (const [size, count] of machine.hugePages) {
    cap[hugePageResourceName(size)] = size * count;
    hugeTotal += size * count;
  }
  const reserved = (name: string): number => {
    let sum = 0;
    for (const m of [config.systemReserved, config.kubeReserved]) {
      const q = m?.[name];
      if (q !== undefined) sum += parseQuantity(q);
    }
    return sum;
  };
  // Upstream hardEvictionReservation (cm/helpers.go) over the hard thresholds only, as
  // cmd/kubelet parses them: a percentage is a float32 fraction, so "10%" of 100 GB reserves
  // 149 bytes more than a tenth.
  const hard = parseThresholdConfig({ evictionHard: config.evictionHard });
  const eviction = (signal: string, capacity: number): number => {
    let v = 0;
    for (const t of hard) {
      if (t.signal === signal && t.operator === "LessThan") {
        v = getThresholdQuantity(t.value, capacity);
      }
    }
    return v;
  };
  const alloc: Record<string, number> = { ...cap };
  alloc.cpu = Math.max(0, cap.cpu! - reserved("cpu"));
  // Hugepages are carved out of memory: allocatable memory excludes them, as upstream.
  alloc.memory = Math.max(
    0,
    cap.memory! - reserved("memory") - eviction("memory.available", cap.memory!) - hugeTotal,
  );
  if (cap["ephemeral-storage"] !== undefined) {
    const c = cap["ephemeral-storage"];
    alloc["ephemeral-storage"] = Math.max(
      0,
      c - reserved("ephemeral-storage") - eviction("nodefs.available", c),
    );
  }
  // Quantities as upstream builds them: cpu in millis, pods DecimalSI, the rest BinarySI.
  const fmt = (name: string, v: number) =>
    name === "cpu"
      ? formatCpu(v)
      : name === "pods"
      ? String(Math.floor(v))
      : formatBinarySI(Math.floor(v));
  const capacity = Object.fromEntries(Object.entries(cap).map(([k, v]) => [k, fmt(k, v)]));
  const allocatable = Object.fromEntries(Object.entries(alloc).map(([k, v]) => [k, fmt(k, v)]));
  // Device plugin resources are counts (DecimalSI); a removed one is reported as 0.
  const devices = inputs.devices;
  for (const [k, v] of Object.entries(devices?.capacity ?? {})) capacity[k] = String(v);
  for (const [k, v] of Object.entries(devices?.allocatable ?? {})) allocatable[k] = String(v);
  for (const k of devices?.removed ?? []) capacity[k] = allocatable[k] = "0";
  return { capacity, allocatable };
}

function formatCpu(cores: number): string {
  return Number.isInteger(cores) ? String(cores) : `${Math.round(cores * 1000)}m`;
}

/** Kubernetes' RFC 3339 time, seconds precision (metav1.Time). */
export function rfc3339(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

function condition(
  previous: readonly V1NodeCondition[] | undefined,
  type: string,
  status: "True" | "False" | "Unknown",
  reason: string,
  message: string,
  now: number,
): V1NodeCondition {
  const old = previous?.find((c) => c.type === type);
  const changed = !old || old.status !== status;
  return {
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: rfc3339(now) as unknown as Date,
    lastTransitionTime: (changed ? rfc3339(now) : old!.lastTransitionTime) as Date,
  };
}

/** Upstream caps the names reported per image. */
const MAX_NAMES_PER_IMAGE = 5;

/** The node status as the setters build it; `previous` keeps condition transition times. */
export function nodeStatus(inputs: StatusInputs, previous?: V1NodeStatus): V1NodeStatus {
  const { config, machine, now } = inputs;
  const { capacity, allocatable } = capacityAndAllocatable(inputs);
  const ready = inputs.notReadyReasons.length === 0;
  const prev = previous?.conditions;
  const images = [...inputs.images]
    .sort((a, b) => Number((b.size ?? 0n) - (a.size ?? 0n)))
    .slice(0, config.nodeStatusMaxImages === -1 ? undefined : config.nodeStatusMaxImages)
    .map((i) => ({
      names: [...i.repoDigests, ...i.repoTags].slice(0, MAX_NAMES_PER_IMAGE),
      sizeBytes: Number(i.size),
    }));
  return {
    capacity,
    allocatable,
    conditions: [
      inputs.pressure?.memory
        ? condition(
          prev,
          "MemoryPressure",
          "True",
          "KubeletHasInsufficientMemory",
          "kubelet has insufficient memory available",
          now,
        )
        : condition(
          prev,
          "MemoryPressure",
          "False",
          "KubeletHasSufficientMemory",
          "kubelet has sufficient memory available",
          now,
        ),
      inputs.pressure?.disk
        ? condition(
          prev,
          "DiskPressure",
          "True",
          "KubeletHasDiskPressure",
          "kubelet has disk pressure",
          now,
        )
        : condition(
          prev,
          "DiskPressure",
          "False",
          "KubeletHasNoDiskPressure",
          "kubelet has no disk pressure",
          now,
        ),
      inputs.pressure?.pid
        ? condition(
          prev,
          "PIDPressure",
          "True",
          "KubeletHasInsufficientPID",
          "kubelet has insufficient PID available",
          now,
        )
        : condition(
          prev,
          "PIDPressure",
          "False",
          "KubeletHasSufficientPID",
          "kubelet has sufficient PID available",
          now,
        ),
      ready
        ? condition(prev, "Ready", "True", "KubeletReady", "kubelet is posting ready status", now)
        : condition(
          prev,
          "Ready",
          "False",
          "KubeletNotReady",
          aggregate(inputs.notReadyReasons) ?? "",
          now,
        ),
    ],
    addresses: [
      ...inputs.nodeIPs.map((address) => ({ type: "InternalIP", address })),
      { type: "Hostname", address: inputs.hostname },
    ],
    daemonEndpoints: { kubeletEndpoint: { Port: config.port } },
    nodeInfo: {
      machineID: machine.machineID,
      systemUUID: machine.systemUUID,
      bootID: machine.bootID,
      kernelVersion: machine.kernelVersion,
      osImage: machine.osImage,
      containerRuntimeVersion: inputs.containerRuntimeVersion,
      kubeletVersion: inputs.kubeletVersion,
      kubeProxyVersion: "",
      operatingSystem: "linux",
      architecture: GOARCH,
      // NodeSwap (locked on): the machine's swap, when it has any.
      ...(machine.swapCapacity ? { swap: { capacity: machine.swapCapacity } } : {}),
    },
    images,
    // An empty list is sent as null: the strategic merge patch then removes the field.
    ...(inputs.volumesInUse
      ? {
        volumesInUse:
          (inputs.volumesInUse.length ? [...inputs.volumesInUse] : null) as unknown as string[],
      }
      : {}),
    ...(inputs.declaredFeatures?.length
      ? { declaredFeatures: [...inputs.declaredFeatures] } as Record<string, unknown>
      : {}),
    // Upstream's RuntimeHandlers setter (an empty list is left out of the object).
    ...(inputs.runtimeHandlers?.length
      ? {
        runtimeHandlers: inputs.runtimeHandlers.map((h) => ({
          name: h.name,
          features: {
            recursiveReadOnlyMounts: h.features?.recursiveReadOnlyMounts ?? false,
            userNamespaces: h.features?.userNamespaces ?? false,
          },
        })),
      }
      : {}),
  };
}

/** The events each condition's setter records for its new status (upstream `events`). */
const CONDITION_EVENTS: Readonly<Record<string, { True: string; False: string }>> = {
  MemoryPressure: { True: "NodeHasInsufficientMemory", False: "NodeHasSufficientMemory" },
  DiskPressure: { True: "NodeHasDiskPressure", False: "NodeHasNoDiskPressure" },
  PIDPressure: { True: "NodeHasInsufficientPID", False: "NodeHasSufficientPID" },
  Ready: { True: "NodeReady", False: "NodeNotReady" },
};

/**
 * The reasons of the Normal events the condition setters record going from `previous` to
 * `next`, in the setters' order: a pressure condition's when it is new or its status changed
 * (upstream MemoryPressureCondition, DiskPressureCondition and PIDPressureCondition start a new
 * condition as Unknown), Ready's only when an existing condition changed status (upstream
 * ReadyCondition's needToRecordEvent).
 */
export function conditionEvents(
  previous: readonly V1NodeCondition[] | undefined,
  next: readonly V1NodeCondition[],
): string[] {
  const reasons: string[] = [];
  for (const c of next) {
    const events = CONDITION_EVENTS[c.type];
    if (!events || (c.status !== "True" && c.status !== "False")) continue;
    const old = previous?.find((p) => p.type === c.type);
    if (old ? old.status === c.status : c.type === "Ready") continue;
    reasons.push(events[c.status]);
  }
  return reasons;
}

/** True when two statuses differ in more than heartbeat times (upstream nodeStatusHasChanged). */
export function nodeStatusHasChanged(a: V1NodeStatus | undefined, b: V1NodeStatus): boolean {
  if (!a) return true;
  const strip = (s: V1NodeStatus) =>
    JSON.stringify({
      ...s,
      conditions: (s.conditions ?? []).map((c) => ({ ...c, lastHeartbeatTime: undefined })),
    });
  return strip(a) !== strip(b);
}

/**
 * The features this node declares to the scheduler and to pod update admission
 * (status.declaredFeatures, upstream discoverNodeDeclaredFeatures with the NodeDeclaredFeatures
 * gate): of upstream's registry, those this agent supports with their gate on, sorted by name as
 * upstream's framework sorts them. Left out: ExtendWebSocketsToKubelet (the apiserver keeps
 * translating WebSocket streams to SPDY for this node), InPlacePodVerticalScalingInitContainers
 * (not built: such resizes are refused before they reach the node),
 * UserNamespacesHostNetworkSupport (alpha, off).
 */
export function nodeDeclaredFeatures(gates: Readonly<Record<string, boolean>>): string[] {
  if (gates.NodeDeclaredFeatures === false) return [];
  const out: string[] = [];
  // In-place resize of pod-level resources (the apiserver refuses it for a node without it).
  if (gates.InPlacePodLevelResourcesVerticalScaling !== false) {
    out.push("InPlacePodLevelResourcesVerticalScaling");
  }
  if (gates.RestartAllContainersOnContainerExits !== false) {
    out.push("RestartAllContainersOnContainerExits");
  }
  return out;
}
