import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { buildCgroupFixture, type FixtureCgroup } from "./testing/cgroup_fixtures.ts";
import { FakeClock } from "./util/clock.ts";
import { createLogger } from "./klog/klog.ts";
import { newKubeletStats, parseVerboseInfo } from "./kubelet_stats.ts";
import type { PodStatus } from "./container/pod_cache.ts";

const UID = "0a1b2c3d-0000-4000-8000-000000000001";
const BURSTABLE_POD = `/kubepods/burstable/pod${UID}`;

function cg(path: string, cpuNs: bigint, memUsage: number): FixtureCgroup {
  return { path, cpuNs, memUsage, inactiveFile: 0, rss: memUsage, pids: 1 };
}

/** A burstable pod with one container, its cgroups at `podPath` (or in containerd's tree). */
async function world(podPath: string | undefined) {
  const root = await Deno.makeTempDir({ prefix: "kubelet_stats_test_" });
  const sbPath = podPath ? `${podPath}/sandbox` : "/k8s.io/sandbox";
  const cPath = podPath ? `${podPath}/main` : "/k8s.io/main";
  const cgroups = [cg(sbPath, 1_000n, 1_000), cg(cPath, 2_000_000_000n, 40_000_000)];
  // The pod cgroup holds more than its children (pod overhead): its own figures win.
  if (podPath) {
    cgroups.push(cg(podPath, 5_000_000_000n, 60_000_000), cg("/kubepods", 9_000_000_000n, 1e8));
  }
  const fixture = await buildCgroupFixture(root, "hybrid", cgroups);
  const info = (path: string, image?: string) => ({
    info: JSON.stringify({ pid: fixture.pids.get(path), image }),
  });
  const pod: V1Pod = {
    metadata: { name: "web", namespace: "default", uid: UID },
    spec: { containers: [{ name: "main", resources: { requests: { cpu: "100m" } } }] },
  };
  const status: PodStatus = {
    id: UID,
    name: "web",
    namespace: "default",
    ips: [],
    timestamp: 0,
    sandboxStatuses: [api.PodSandboxStatus.create({
      id: "sb",
      state: api.PodSandboxState.SANDBOX_READY,
    })],
    containerStatuses: [api.ContainerStatus.create({
      id: "c1",
      metadata: { name: "main", attempt: 0 },
      state: api.ContainerState.CONTAINER_RUNNING,
      labels: { "io.kubernetes.container.name": "main" },
    })],
  };
  const stats = await newKubeletStats({
    nodeName: "node-1",
    runtime: {
      containerStatus: () =>
        Promise.resolve(api.ContainerStatusResponse.create({ info: info(cPath) })),
      podSandboxStatus: () =>
        Promise.resolve(
          api.PodSandboxStatusResponse.create({ info: info(sbPath, "registry.k8s.io/pause:3.10") }),
        ),
      listContainerStats: () => Promise.resolve([]),
    },
    imageService: { imageFsInfo: () => Promise.resolve(api.ImageFsInfoResponse.create({})) },
    pods: () => [{ pod, status }],
    runtimePods: () => [status],
    rootDirectory: root,
    podLogsDirectory: root,
    machine: {
      numCores: 4,
      memoryCapacity: 8 * 2 ** 30,
      machineID: "m",
      systemUUID: "s",
      bootID: "b",
    },
    clock: new FakeClock(),
    logger: createLogger({ write: () => {} }),
    root,
  });
  return { stats, pod, [Symbol.asyncDispose]: () => Deno.remove(root, { recursive: true }) };
}

Deno.test("newKubeletStats reports a pod's own cgroup and the pods system container", async () => {
  await using w = await world(BURSTABLE_POD);
  await w.stats.cadvisor.housekeep();
  const s = w.stats.provider.cpuAndMemory();
  const pod = s.pods[0]!;
  assert.equal(pod.cpu?.usageCoreNanoSeconds, 5_000_000_000, "the pod cgroup, not the sum");
  assert.equal(pod.memory?.usageBytes, 60_000_000);
  assert.equal(pod.containers[0]?.cpu?.usageCoreNanoSeconds, 2_000_000_000);
  assert.deepEqual(s.node.systemContainers?.map((c) => c.name), ["pods"]);
  assert.equal(s.node.systemContainers?.[0]?.cpu?.usageCoreNanoSeconds, 9_000_000_000);
});

Deno.test("newKubeletStats works a pod's cgroup out once, not at every housekeeping wake", async () => {
  await using w = await world(BURSTABLE_POD);
  const spec = w.pod.spec;
  let reads = 0;
  Object.defineProperty(w.pod, "spec", { get: () => (reads++, spec) });
  await w.stats.cadvisor.housekeep();
  const once = reads;
  assert.ok(once > 0, "the QoS class is read from the spec");
  for (let i = 0; i < 3; i++) await w.stats.cadvisor.housekeep();
  assert.equal(reads, once);
  assert.equal(w.stats.provider.cpuAndMemory().pods[0]?.cpu?.usageCoreNanoSeconds, 5_000_000_000);
});

Deno.test("newKubeletStats adds up sandbox and containers while pods have no cgroup", async () => {
  await using w = await world(undefined);
  await w.stats.cadvisor.housekeep();
  const s = w.stats.provider.cpuAndMemory();
  assert.equal(s.pods[0]?.cpu?.usageCoreNanoSeconds, 2_000_001_000);
  assert.equal(s.pods[0]?.memory?.usageBytes, 40_001_000);
  assert.equal(s.node.systemContainers, undefined, "no kubepods, and no kubelet cgroup here");
});

Deno.test("newKubeletStats gives /metrics/cadvisor an entry per container and sandbox", async () => {
  await using w = await world(undefined);
  await w.stats.cadvisor.housekeep();
  const route = w.stats.routes.find((r) => r.pattern === "/metrics/cadvisor")!;
  let body = "";
  await route.handler!(
    { url: new URL("https://k/metrics/cadvisor") } as never,
    { writeHead: () => {}, end: (t: string) => void (body = t) } as never,
  );
  assert.match(
    body,
    /^container_memory_usage_bytes\{container="main",id="\/k8s.io\/main",image="",name="c1",namespace="default",pod="web"\} 4e\+07 /m,
  );
  // A sandbox as cAdvisor's containerd handler labels it: no container name, the pause image.
  assert.match(
    body,
    /^container_memory_usage_bytes\{container="",id="\/k8s.io\/sandbox",image="registry.k8s.io\/pause:3.10",name="sb",namespace="default",pod="web"\} /m,
  );
});

Deno.test("newKubeletStats gives /metrics/cadvisor series for the pod, QoS and kubepods cgroups", async () => {
  await using w = await world(BURSTABLE_POD);
  await w.stats.cadvisor.housekeep();
  const route = w.stats.routes.find((r) => r.pattern === "/metrics/cadvisor")!;
  let body = "";
  await route.handler!(
    { url: new URL("https://k/metrics/cadvisor") } as never,
    { writeHead: () => {}, end: (t: string) => void (body = t) } as never,
  );
  const ids = [
    ...body.matchAll(
      /^container_memory_usage_bytes\{container="([^"]*)",id="([^"]*)",image="[^"]*",name="[^"]*",namespace="([^"]*)",pod="([^"]*)"/gm,
    ),
  ]
    .map((m) => `${m[2]} ${m[1]}/${m[3]}/${m[4]}`);
  assert.deepEqual(ids, [
    "/ //",
    "/kubepods //",
    `${BURSTABLE_POD} /default/web`,
    `${BURSTABLE_POD}/sandbox /default/web`,
    `${BURSTABLE_POD}/main main/default/web`,
  ]);
  // The fixture has no burstable/besteffort cgroup files of its own: no series for them.
  assert.match(body, /^container_spec_cpu_shares\{/m);
  assert.match(body, /^container_threads\{container="main",.*\} 1 /m);
  assert.match(body, /^machine_cpu_books\{/m);
  assert.doesNotMatch(
    body,
    /^machine_cpu_cores\{[^}]*\} \d+ \d+$/m,
    "machine samples are unstamped",
  );
});

Deno.test("parseVerboseInfo reads the pid and image of containerd's info JSON", () => {
  assert.deepEqual(
    parseVerboseInfo({ info: JSON.stringify({ pid: 4242, image: "registry.k8s.io/pause:3.10" }) }),
    { pid: 4242, image: "registry.k8s.io/pause:3.10" },
  );
  assert.deepEqual(parseVerboseInfo({ info: JSON.stringify({ pid: 4242, sandboxID: "x" }) }), {
    pid: 4242,
  });
  assert.deepEqual(parseVerboseInfo({}), {});
  assert.deepEqual(parseVerboseInfo({ info: "{not json" }), {});
  assert.deepEqual(parseVerboseInfo({ info: "null" }), {});
  assert.deepEqual(parseVerboseInfo({ info: JSON.stringify({ pid: 0, image: "" }) }), {});
  assert.deepEqual(parseVerboseInfo({ info: JSON.stringify({ pid: "12", image: 3 }) }), {});
});
