/**
 * @module
 * Where a device plugin resource could be placed, as topology hints: every set of NUMA nodes
 * whose devices can satisfy the request, the narrowest ones preferred; and which free devices
 * lie inside the NUMA nodes the topology manager chose. Corresponds to upstream
 * `pkg/kubelet/cm/devicemanager/topology_hints.go` (generateDeviceTopologyHints,
 * deviceNUMANodes) and `filterByAffinity` of `manager.go`.
 */

import type { Device } from "../../proto/deviceplugin/v1beta1/api.ts";
import { type BitMask, iterateBitMasks } from "../topologymanager/bitmask.ts";
import type { TopologyHint } from "../topologymanager/policy.ts";
import { NODE_WITHOUT_TOPOLOGY } from "./pod_devices.ts";

/** The NUMA node IDs a device reports (none for a device without topology). */
export function deviceNumaNodes(device: Pick<Device, "topology"> | undefined): number[] {
  return (device?.topology?.nodes ?? []).map((n) => Number(n.ID));
}

/** Whether any device of the resource reports NUMA nodes (upstream deviceHasTopologyAlignment). */
export function hasTopologyAlignment(devices: ReadonlyMap<string, Device>): boolean {
  for (const d of devices.values()) if (deviceNumaNodes(d).length > 0) return true;
  return false;
}

/**
 * upstream generateDeviceTopologyHints: a hint for every combination of the NUMA nodes with
 * devices (the machine's when none reports any) holding enough available devices, every
 * reusable device inside it; preferred when as narrow as the narrowest combination whose
 * devices, free or not, could satisfy the request.
 */
export function generateDeviceTopologyHints(
  machineNodes: readonly number[],
  devices: ReadonlyMap<string, Device>,
  available: ReadonlySet<string>,
  reusable: ReadonlySet<string>,
  request: number,
): TopologyHint[] {
  const known = new Set(machineNodes);
  const withDevices = new Set<number>();
  for (const d of devices.values()) {
    for (const n of deviceNumaNodes(d)) if (known.has(n)) withDevices.add(n);
  }
  const nodes = withDevices.size > 0 ? [...withDevices].sort((a, b) => a - b) : [...machineNodes];
  let minAffinitySize = nodes.length;
  const hints: { numaNodeAffinity: BitMask; preferred: boolean }[] = [];
  iterateBitMasks(nodes, (mask) => {
    let inMask = 0;
    for (const d of devices.values()) if (mask.anySet(deviceNumaNodes(d))) inMask++;
    if (inMask >= request && mask.count() < minAffinitySize) minAffinitySize = mask.count();
    let matching = 0;
    for (const id of reusable) {
      const d = devices.get(id);
      if (d?.topology === undefined) continue;
      if (!mask.anySet(deviceNumaNodes(d))) return;
      matching++;
    }
    for (const id of available) if (mask.anySet(deviceNumaNodes(devices.get(id)))) matching++;
    if (matching < request) return;
    hints.push({ numaNodeAffinity: mask, preferred: false });
  });
  return hints.map((h) => ({ ...h, preferred: h.numaNodeAffinity.count() === minAffinitySize }));
}

/**
 * upstream filterByAffinity: the available devices split into those on the chosen NUMA nodes,
 * those on other nodes and those without topology, each list in the order the allocation should
 * take them (a node's devices together, nodes with fewer free devices first). Without an
 * affinity every device is "without affinity".
 */
export function filterByAffinity(
  affinity: BitMask | undefined,
  devices: ReadonlyMap<string, Device>,
  available: ReadonlySet<string>,
): { aligned: string[]; unaligned: string[]; noAffinity: string[] } {
  if (affinity === undefined || !hasTopologyAlignment(devices)) {
    return { aligned: [], unaligned: [], noAffinity: [...available] };
  }
  const perNode = new Map<number, Set<string>>();
  for (const id of available) {
    const nodes = deviceNumaNodes(devices.get(id));
    for (const n of nodes.length === 0 ? [NODE_WITHOUT_TOPOLOGY] : nodes) {
      let set = perNode.get(n);
      if (!set) perNode.set(n, set = new Set());
      set.add(id);
    }
  }
  const size = (n: number) => perNode.get(n)!.size;
  const order = [...perNode.keys()].sort((a, b) => {
    const inA = a !== NODE_WITHOUT_TOPOLOGY && affinity.isSet(a);
    const inB = b !== NODE_WITHOUT_TOPOLOGY && affinity.isSet(b);
    if (inA && inB) return size(a) - size(b);
    if (inA) return -1;
    if (inB) return 1;
    if (a === NODE_WITHOUT_TOPOLOGY) return 1;
    if (b === NODE_WITHOUT_TOPOLOGY) return -1;
    return size(a) - size(b);
  });
  const out = { aligned: [] as string[], unaligned: [] as string[], noAffinity: [] as string[] };
  for (const id of available) {
    for (const n of order) {
      if (!perNode.get(n)!.has(id)) continue;
      if (n === NODE_WITHOUT_TOPOLOGY) out.noAffinity.push(id);
      else if (affinity.isSet(n)) out.aligned.push(id);
      else out.unaligned.push(id);
      break;
    }
  }
  return out;
}
