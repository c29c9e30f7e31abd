/**
 * @module
 * Validation rules for what the kubelet holds back from pods: `enforceNodeAllocatable` and the
 * reserved cgroups and `cgroupsPerQOS` each enforcement needs, `reservedSystemCPUs` (a cpuset
 * list, not combined with the reserved cgroups) and `reservedMemory` (per NUMA node limits, as
 * upstream's validation_reserved_memory.go). Private to validation.ts.
 */

import type { KubeletConfiguration } from "./config_types.ts";
import { parseQuantity } from "../util/quantity.ts";

/** Reports one issue, as validateKubeletConfiguration collects them. */
type Add = (path: string, value: unknown, message: string) => void;

const quote = (values: readonly string[]) => values.map((v) => JSON.stringify(v)).join(", ");

const ENFORCE_KEYS = [
  "pods",
  "system-reserved",
  "system-reserved-compressible",
  "kube-reserved",
  "kube-reserved-compressible",
  "none",
];

/** enforceNodeAllocatable: known, distinct values, each with the cgroups it enforces on. */
export function checkEnforceNodeAllocatable(cfg: KubeletConfiguration, add: Add) {
  const values = cfg.enforceNodeAllocatable ?? [];
  for (const base of ["system-reserved", "kube-reserved"]) {
    if (values.includes(base) && values.includes(`${base}-compressible`)) {
      add(
        "enforceNodeAllocatable",
        values,
        `cannot contain both "${base}" and "${base}-compressible"`,
      );
    }
  }
  const seen = new Set<string>();
  values.forEach((val, i) => {
    const path = `enforceNodeAllocatable[${i}]`;
    if (seen.has(val)) {
      add(path, val, "is a duplicate enforcement");
      return;
    }
    seen.add(val);
    switch (val) {
      case "pods":
        break;
      case "system-reserved":
      case "system-reserved-compressible":
        if ((cfg.systemReservedCgroup ?? "") === "") {
          add(
            "systemReservedCgroup",
            "",
            `must be specified when enforceNodeAllocatable contains "${val}"`,
          );
        }
        break;
      case "kube-reserved":
      case "kube-reserved-compressible":
        if ((cfg.kubeReservedCgroup ?? "") === "") {
          add(
            "kubeReservedCgroup",
            "",
            `must be specified when enforceNodeAllocatable contains "${val}"`,
          );
        }
        break;
      case "none":
        if (values.length > 1) {
          add("enforceNodeAllocatable", values, 'may not contain other enforcements with "none"');
        }
        return;
      default:
        add(path, val, `must be one of: ${quote(ENFORCE_KEYS)}`);
        return;
    }
    if (cfg.cgroupsPerQOS !== true) {
      add(
        "cgroupsPerQOS",
        cfg.cgroupsPerQOS ?? false,
        `must be true when enforceNodeAllocatable contains "${val}"`,
      );
    }
  });
}

/** reservedSystemCPUs: a valid CPU list, and not combined with the reserved cgroups. */
export function checkReservedSystemCPUs(cfg: KubeletConfiguration, add: Add) {
  const reservedCPUs = cfg.reservedSystemCPUs ?? "";
  if (reservedCPUs !== "") {
    if ((cfg.systemReservedCgroup ?? "") !== "" || (cfg.kubeReservedCgroup ?? "") !== "") {
      add(
        "reservedSystemCPUs",
        reservedCPUs,
        "cannot be used with systemReservedCgroup (--system-reserved-cgroup) or " +
          "kubeReservedCgroup (--kube-reserved-cgroup)",
      );
    }
    const problem = cpuSetProblem(reservedCPUs);
    if (problem) {
      add("reservedSystemCPUs", reservedCPUs, `must be a CPU list such as 0-3,8: ${problem}`);
    }
  }
}

/** k8s.io/utils/cpuset.Parse's syntax: "0-3,8,10-11". */
function cpuSetProblem(text: string): string | undefined {
  const atoi = (s: string) => (/^[+-]?[0-9]+$/.test(s) ? Number(s) : undefined);
  for (const r of text.split(",")) {
    const dash = r.indexOf("-");
    const bounds = dash < 0 ? [r] : [r.slice(0, dash), r.slice(dash + 1)];
    const nums = bounds.map(atoi);
    const bad = bounds.find((_, i) => nums[i] === undefined);
    if (bad !== undefined) return `strconv.Atoi: parsing "${bad}": invalid syntax`;
    const [start, end] = nums as number[];
    if (end !== undefined && start !== undefined && start > end) {
      return `invalid range "${r}" (${start} > ${end})`;
    }
  }
  return undefined;
}

/** reservedMemory: memory or hugepages limits, none zero, none repeated for one NUMA node. */
export function checkReservedMemory(
  entries: NonNullable<KubeletConfiguration["reservedMemory"]>,
  add: Add,
) {
  const seen = new Map<number, Set<string>>();
  entries.forEach((entry, i) => {
    const numa = entry.numaNode ?? 0;
    const names = seen.get(numa) ?? new Set<string>();
    seen.set(numa, names);
    for (const [name, q] of Object.entries(entry.limits ?? {})) {
      const path = `reservedMemory[${i}].limits.${name}`;
      if (name !== "memory" && !name.startsWith("hugepages-")) {
        add(
          path,
          q,
          `is not supported for NUMA node ${numa}: only memory and hugepages-<size> are`,
        );
      }
      let zero = false;
      try {
        zero = parseQuantity(q) === 0;
      } catch {
        // The schema rejects bad quantity syntax while decoding.
      }
      if (zero) add(path, q, `must not be zero for NUMA node ${numa}`);
      if (names.has(name)) add(path, q, `is a duplicate for NUMA node ${numa}`);
      names.add(name);
    }
  });
}
