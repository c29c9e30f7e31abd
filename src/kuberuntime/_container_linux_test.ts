import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { generateLinuxContainerResources, type LinuxConfigOptions } from "./_container_linux.ts";
import type { HostLinux } from "./_host_linux.ts";
import { newExclusiveCpus } from "../cm/exclusive_cpus.ts";

const HOST: HostLinux = {
  hugePageSizes: () => [],
  swapControllerAvailable: () => false,
  selinuxEnabled: () => false,
  defaultMaskedPaths: () => [],
  swapCapacityBytes: () => 0,
};

const limits = { cpu: "2", memory: "1Gi" };
const PINNED: V1Container = { name: "pinned", resources: { requests: limits, limits } };
const SHARED: V1Container = {
  name: "shared",
  resources: { requests: { cpu: "500m", memory: "1Gi" }, limits: { cpu: "500m", memory: "1Gi" } },
};
const POD: V1Pod = { metadata: { uid: "u1" }, spec: { containers: [PINNED, SHARED] } };

/** The static policy's state: two CPUs of the pod's integer container. */
const exclusiveCpus = (_uid: string, name: string) => name === "pinned" ? [2, 3] : [];

function quota(container: V1Container, opts: Partial<LinuxConfigOptions>): [bigint, bigint] {
  const r = generateLinuxContainerResources(POD, container, {
    memoryCapacityBytes: 8 * 2 ** 30,
    host: HOST,
    ...opts,
  });
  return [r.cpuQuota, r.cpuPeriod];
}

Deno.test("generateLinuxContainerResources gives a container on exclusive CPUs no CFS quota (DisableCPUQuotaWithExclusiveCPUs on by default)", () => {
  const x = newExclusiveCpus({ exclusiveCpus })!;
  assert.deepEqual(quota(PINNED, { exclusiveCpus: x }), [-1n, 100_000n]);
  // Its neighbour on the shared pool keeps its quota.
  assert.deepEqual(quota(SHARED, { exclusiveCpus: x }), [50_000n, 100_000n]);
  // Without cpuCFSQuota no quota is set at all, as upstream.
  assert.deepEqual(quota(PINNED, { exclusiveCpus: x, cpuCFSQuota: false }), [0n, 0n]);
});

Deno.test("generateLinuxContainerResources enforces the quota of pinned CPUs with DisableCPUQuotaWithExclusiveCPUs off", () => {
  const off = newExclusiveCpus({
    exclusiveCpus,
    featureGates: { DisableCPUQuotaWithExclusiveCPUs: false },
  });
  assert.deepEqual(quota(PINNED, { exclusiveCpus: off }), [200_000n, 100_000n]);
  assert.deepEqual(quota(PINNED, {}), [200_000n, 100_000n]);
});
