import assert from "node:assert/strict";
import * as api from "../../proto/runtime/v1/api.ts";
import { CgroupManager } from "./cgroup_manager.ts";
import { FakeClock } from "../util/clock.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { CriError, GrpcCode } from "../cri/connection.ts";
import type { EventRecorder } from "../client/record.ts";
import { FakeRuntimeService } from "../testing/fake_runtime_service.ts";
import {
  checkCgroupDriver,
  NodeContainerManager,
  type NodeContainerManagerOptions,
  validateSystemRequirements,
} from "./node_container_manager.ts";
import {
  captureLogger,
  type CmHost,
  type CmHostOptions,
  makeCmHost,
} from "../testing/cm_fixtures.ts";

const GiB = 1024n ** 3n;
const MiB = 1024n ** 2n;

function fakeRuntime(cgroupDriver: api.CgroupDriver) {
  const fake = new FakeRuntimeService({ cgroupDriver });
  return { runtimeConfig: () => Promise.resolve(fake.runtimeConfig({})) };
}

Deno.test("checkCgroupDriver takes the driver the runtime reports", async () => {
  const { logger, lines } = captureLogger();
  assert.equal(
    await checkCgroupDriver("cgroupfs", fakeRuntime(api.CgroupDriver.SYSTEMD), { logger }),
    "systemd",
  );
  assert.ok(lines.some((l) => l.includes('configured="cgroupfs" runtime="systemd"')), lines.join());
  assert.ok(lines.some((l) => l.includes("Using cgroup driver setting received from the CRI")));
  assert.equal(
    await checkCgroupDriver("systemd", fakeRuntime(api.CgroupDriver.CGROUPFS), { logger }),
    "cgroupfs",
  );
  const silent = { runtimeConfig: () => Promise.resolve({}) };
  assert.equal(await checkCgroupDriver("systemd", silent, { logger }), "systemd");
});

Deno.test("checkCgroupDriver keeps the configured driver when RuntimeConfig is unimplemented", async () => {
  const { logger, lines } = captureLogger();
  let calls = 0;
  const old = {
    runtimeConfig: () => {
      calls++;
      return Promise.reject(
        new CriError("RuntimeService/RuntimeConfig", GrpcCode.UNIMPLEMENTED, "unknown method"),
      );
    },
  };
  assert.equal(await checkCgroupDriver("cgroupfs", old, { logger }), "cgroupfs");
  assert.equal(calls, 1);
  assert.ok(
    lines.some((l) => l.includes("Falling back to using cgroupDriver from kubelet config")),
  );
});

Deno.test("checkCgroupDriver retries other errors twice, 2s apart, then throws", async () => {
  const { logger } = captureLogger();
  const clock = new FakeClock();
  let calls = 0;
  const starting = {
    runtimeConfig: () => {
      calls++;
      return Promise.reject(new CriError("RuntimeService/RuntimeConfig", 14, "connection refused"));
    },
  };
  const start = clock.now();
  const result = checkCgroupDriver("cgroupfs", starting, { logger, clock });
  result.catch(() => {});
  for (let i = 0; i < 20 && calls < 3; i++) {
    await new Promise((r) => setTimeout(r, 0));
    if (clock.waiters > 0) clock.step(2000);
  }
  await assert.rejects(result, /code = Unavailable desc = connection refused/);
  assert.equal(calls, 3);
  assert.equal(clock.now() - start, 4000);
});

Deno.test("checkCgroupDriver refuses a driver it does not know", async () => {
  const { logger } = captureLogger();
  const odd = { runtimeConfig: () => Promise.resolve({ linux: { cgroupDriver: 7 } }) };
  await assert.rejects(
    checkCgroupDriver("cgroupfs", odd, { logger }),
    /runtime returned an unknown cgroup driver 7/,
  );
});

async function withHost(
  mode: "v1" | "v2" | "hybrid",
  hostOpts: CmHostOptions,
  fn: (host: CmHost) => Promise<void>,
): Promise<void> {
  const host = await makeCmHost(mode, hostOpts);
  try {
    await fn(host);
  } finally {
    await host.cleanup();
  }
}

Deno.test("validateSystemRequirements names the cgroup subsystems not mounted", async () => {
  await withHost("v1", { v1: ["cpu,cpuacct", "memory"] }, async (host) => {
    await assert.rejects(
      validateSystemRequirements(host.layout, { cgroupsPerQOS: true }),
      /^Error: system validation failed - Following Cgroup subsystem not mounted: \[cpuset\]$/,
    );
  });
  await withHost("hybrid", { v1: ["memory", "devices"] }, async (host) => {
    await assert.rejects(
      validateSystemRequirements(host.layout, { cgroupsPerQOS: false }),
      /not mounted: \[cpu cpuacct cpuset\]/,
    );
  });
  await withHost("hybrid", {}, async (host) => {
    const features = await validateSystemRequirements(host.layout, { cgroupsPerQOS: true });
    assert.deepEqual(features, { cpuHardcapping: true });
    await Deno.remove(`${host.dir("cpu", "/")}/cpu.cfs_quota_us`);
    assert.deepEqual(
      await validateSystemRequirements(host.layout, { cgroupsPerQOS: true }),
      { cpuHardcapping: false },
    );
  });
});

Deno.test("validateSystemRequirements on v2 needs cpu and memory for cgroupsPerQOS", async () => {
  await withHost("v2", { v2Controllers: ["cpu", "pids"] }, async (host) => {
    await assert.rejects(
      validateSystemRequirements(host.layout, { cgroupsPerQOS: true }),
      /system validation failed - Following Cgroup controllers not available in .*cgroup\.controllers: \[memory\]/,
    );
    assert.deepEqual(
      await validateSystemRequirements(host.layout, { cgroupsPerQOS: false }),
      { cpuHardcapping: true },
    );
  });
});

interface Ev {
  type: string;
  reason: string;
  message: string;
  kind: string;
  name: string;
}

async function withNode(
  opts: Partial<NodeContainerManagerOptions>,
  fn: (host: CmHost, ncm: NodeContainerManager, events: Ev[], clock: FakeClock) => Promise<void>,
): Promise<void> {
  await withHost("v1", {}, async (host) => {
    const { logger } = captureLogger();
    const clock = new FakeClock();
    const events: Ev[] = [];
    const recorder: EventRecorder = {
      event: (o, type, reason, message) =>
        events.push({ type, reason, message, kind: o.kind, name: o.name }),
    };
    const cm = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      hugePagesDir: host.hugePagesDir,
      clock,
    });
    const ncm = new NodeContainerManager({
      cgroupManager: cm,
      cgroupRoot: "/",
      capacity: { cpu: "2", memory: "8Gi", pid: "4194304", "hugepages-2Mi": "0" },
      systemReserved: { cpu: "500m", memory: "1Gi" },
      kubeReserved: { memory: "512Mi", pid: "1000" },
      nodeName: "node-1",
      recorder,
      clock,
      logger,
      ...opts,
    });
    await fn(host, ncm, events, clock);
  });
}

Deno.test("NodeContainerManager sizes kubepods to capacity minus the reservations", async () => {
  await withNode({}, async (host, ncm, events) => {
    assert.deepEqual(ncm.rootName, ["kubepods"]);
    await ncm.validateCgroupRoot();
    await ncm.createNodeAllocatableCgroup();
    // 2 CPUs - 500m; 8Gi - 1Gi - 512Mi; the hard eviction threshold is not taken off.
    assert.equal(await host.read("cpu", "/kubepods", "cpu.shares"), "1536");
    const memory = String(8n * GiB - GiB - 512n * MiB);
    assert.equal(await host.read("memory", "/kubepods", "memory.limit_in_bytes"), memory);
    assert.equal(await host.read("pids", "/kubepods", "pids.max"), "4193304");
    assert.equal(await host.read("hugetlb", "/kubepods", "hugetlb.2MB.limit_in_bytes"), "0");
    assert.equal(ncm.allocatableMemory(), 8n * GiB - GiB - 512n * MiB);
    await host.poke("cpu", "/kubepods", "cpu.shares", "1024\n");
    await ncm.enforceNodeAllocatable();
    assert.equal(await host.read("cpu", "/kubepods", "cpu.shares"), "1536");
    assert.deepEqual(events, [{
      type: "Normal",
      reason: "NodeAllocatableEnforced",
      message: "Updated Node Allocatable limit across pods",
      kind: "Node",
      name: "node-1",
    }]);
  });
});

Deno.test("NodeContainerManager sizes kubepods to capacity when pods are not enforced", async () => {
  await withNode({ enforceNodeAllocatable: [] }, async (host, ncm) => {
    await ncm.createNodeAllocatableCgroup();
    assert.equal(await host.read("cpu", "/kubepods", "cpu.shares"), "2048");
    assert.equal(await host.read("memory", "/kubepods", "memory.limit_in_bytes"), String(8n * GiB));
  });
});

Deno.test("NodeContainerManager retries a failed node allocatable update every minute", async () => {
  await withNode({}, async (host, ncm, events, clock) => {
    await ncm.createNodeAllocatableCgroup();
    await host.poke("memory", "/kubepods", "memory.usage_in_bytes", `${8n * GiB}\n`);
    const abort = new AbortController();
    await ncm.enforceNodeAllocatable(abort.signal);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.type, "Warning");
    assert.equal(events[0]!.reason, "FailedNodeAllocatableEnforcement");
    assert.match(
      events[0]!.message,
      /^Failed to update Node Allocatable Limits \["kubepods"\]: .*unable to set memory limit/,
    );
    const settle = async () => {
      for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
    };
    clock.step(59_000);
    await settle();
    assert.equal(events.length, 1);
    clock.step(1_000);
    await settle();
    assert.equal(events.length, 2, "retried after a minute");
    await host.poke("memory", "/kubepods", "memory.usage_in_bytes", "0\n");
    clock.step(60_000);
    await settle();
    assert.equal(events.at(-1)!.reason, "NodeAllocatableEnforced");
    assert.equal(clock.waiters, 0, "the loop ends on success");
    abort.abort();
  });
});

Deno.test("NodeContainerManager stops retrying when its signal aborts", async () => {
  await withNode({}, async (host, ncm, events, clock) => {
    await ncm.createNodeAllocatableCgroup();
    await host.poke("memory", "/kubepods", "memory.usage_in_bytes", `${8n * GiB}\n`);
    const abort = new AbortController();
    await ncm.enforceNodeAllocatable(abort.signal);
    assert.equal(clock.waiters, 1);
    abort.abort();
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(clock.waiters, 0);
    clock.step(120_000);
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(events.length, 1);
  });
});

Deno.test("NodeContainerManager enforces the reserved cgroups that exist", async () => {
  const opts = {
    enforceNodeAllocatable: ["pods", "system-reserved", "kube-reserved-compressible"],
    systemReservedCgroup: "/system.slice",
    kubeReservedCgroup: "/kube.slice",
    kubeReserved: { cpu: "250m", memory: "512Mi" },
  };
  await withNode(opts, async (host, ncm, events) => {
    const cm = new CgroupManager({
      layout: host.layout,
      logger: captureLogger().logger,
      fs: host.fs,
    });
    await cm.create(["system.slice"]);
    await ncm.createNodeAllocatableCgroup();
    await assert.rejects(
      ncm.enforceNodeAllocatable(),
      /^Error: Failed to enforce Kube Reserved Compressible Cgroup Limits on "\/kube.slice": cgroup \["kube.slice"\] has some missing paths/,
    );
    assert.equal(await host.read("memory", "/system.slice", "memory.limit_in_bytes"), String(GiB));
    assert.equal(await host.read("cpu", "/system.slice", "cpu.shares"), "512");
    assert.deepEqual(events.map((e) => [e.type, e.message.slice(0, 44)]), [
      ["Normal", "Updated Node Allocatable limit across pods"],
      ["Normal", "Updated limits on system reserved cgroup /sy"],
      ["Warning", "Failed to enforce Kube Reserved Compressible"],
    ]);
    // Compressible enforcement sets cpu shares only.
    await cm.create(["kube.slice"]);
    events.length = 0;
    await ncm.enforceNodeAllocatable();
    assert.equal(await host.read("cpu", "/kube.slice", "cpu.shares"), "256");
    assert.equal(
      await host.read("memory", "/kube.slice", "memory.limit_in_bytes"),
      "9223372036854771712",
    );
    assert.equal(events.at(-1)!.message, "Updated limits on kube reserved cgroup /kube.slice");
  });
});

Deno.test("NodeContainerManager validates the configured cgroup root", async () => {
  await withNode({ cgroupRoot: "" }, async (_host, ncm) => {
    assert.deepEqual(ncm.rootName, ["kubepods"]);
    await ncm.validateCgroupRoot();
  });
  await withNode({ cgroupRoot: "/nope" }, async (_host, ncm) => {
    assert.deepEqual(ncm.rootName, ["nope", "kubepods"]);
    await assert.rejects(
      ncm.validateCgroupRoot(),
      /^Error: invalid configuration: cgroup \["nope"\] has some missing paths/,
    );
  });
  await withNode({ cgroupsPerQOS: false }, async (_host, ncm, events) => {
    assert.deepEqual(ncm.rootName, []);
    await assert.rejects(ncm.createNodeAllocatableCgroup(), /needs cgroupsPerQOS/);
    await ncm.enforceNodeAllocatable();
    assert.deepEqual(events, [], "the root cgroup is never limited");
  });
});

Deno.test("checkCgroupDriver sets kubelet_cri_losing_support only for a runtime without RuntimeConfig", async () => {
  const { logger } = captureLogger();
  const rendered = async (m: KubeletMetrics) =>
    (await m.render()).split("\n").filter((l) => l.startsWith("kubelet_cri_losing_support"));
  // A runtime that answers: nothing registered, nothing rendered.
  const current = new KubeletMetrics({ process: false });
  await checkCgroupDriver("cgroupfs", fakeRuntime(api.CgroupDriver.SYSTEMD), {
    logger,
    criLosingSupport: current.criLosingSupport,
  });
  assert.deepEqual(await rendered(current), []);
  const old = {
    runtimeConfig: () =>
      Promise.reject(
        new CriError("RuntimeService/RuntimeConfig", GrpcCode.UNIMPLEMENTED, "unknown method"),
      ),
  };
  const m = new KubeletMetrics({ process: false });
  await checkCgroupDriver("cgroupfs", old, { logger, criLosingSupport: m.criLosingSupport });
  assert.deepEqual(await rendered(m), ['kubelet_cri_losing_support{version="1.37.0"} 1']);
});
