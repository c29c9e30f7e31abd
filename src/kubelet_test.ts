import assert from "node:assert/strict";
import { FakeClock } from "./util/clock.ts";
import type { Dependencies } from "./dependencies.ts";
import { startFakeRuntime } from "./testing/fake_remote_runtime.ts";
import { createLogger } from "./klog/klog.ts";
import { Kubelet, nodeForAdmission, RUNTIME_UP_PERIOD_MS } from "./kubelet.ts";
import { loadKubeletConfiguration } from "./app/kubelet_config.ts";
import { newKubeletFlags } from "./apis/flags.ts";
import { preInitRuntimeService } from "./cri/runtime_service.ts";

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

Deno.test("Kubelet gives the runtime the configured pod CIDR at start, and updateRuntimeUp keeps the runtime state from CRI Status every period", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-runtime-up-" });
  await using fake = await startFakeRuntime({ socket: `${dir}/cri.sock` });
  const { config } = await loadKubeletConfiguration({
    configFile: "",
    dropinDir: "",
    flags: [],
    cgroupV1: false,
  });
  config.healthzPort = 0;
  config.enableServer = false;
  // Not the host's iptables from a unit test (kubelet_network_linux_test.ts covers them).
  config.makeIPTablesUtilChains = false;
  config.containerRuntimeEndpoint = fake.endpoint;
  config.podCIDR = "10.244.0.0/24";
  const services = preInitRuntimeService({
    containerRuntimeEndpoint: fake.endpoint,
    timeoutMs: 5_000,
  });
  const lines: string[] = [];
  const clock = new FakeClock();
  const deps: Dependencies = {
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    clock,
    recorder: { event() {} },
    os: {
      hostname: () => "node",
      // Only under the test's own root directory (its plugin watcher's plugins_registry).
      mkdirAll: (path, mode) =>
        path.startsWith(dir) ? Deno.mkdir(path, { recursive: true, mode }) : Promise.resolve(),
    },
    runtimeService: services.runtimeService,
    imageService: services.imageService,
  };
  const kubelet = new Kubelet({
    // Not the host's /var/lib/kubelet: the plugin manager watches <root-dir>/plugins_registry.
    server: { flags: { ...newKubeletFlags(), rootDirectory: `${dir}/root` }, config },
    deps,
    nodeName: "node",
    hostname: "node",
    nodeIPs: [],
  });
  const ctl = new AbortController();
  const running = kubelet.run(ctl.signal);
  try {
    // Ready once the first Status came and the PLEG has relisted (its health check joins).
    await until(
      "the first Status and relist",
      () =>
        kubelet.pleg?.healthy().ok === true && kubelet.runtimeState.runtimeErrors() === undefined,
    );
    assert.equal(kubelet.runtimeState.networkErrors(), undefined);
    assert.equal(fake.service.podCidr, "10.244.0.0/24", "UpdateRuntimeConfig at start");
    assert.equal(kubelet.runtimeState.podCIDR(), "10.244.0.0/24");
    assert.ok(
      lines.some((l) =>
        l.includes('"Updating Pod CIDR" originalPodCIDR="" newPodCIDR="10.244.0.0/24"')
      ),
    );

    fake.service.setCondition(
      "NetworkReady",
      false,
      "NetworkPluginNotReady",
      "cni plugin not initialized",
    );
    const statusCalls = fake.callCount("Status");
    await until("the loop to sleep", () => clock.waiters > 0);
    assert.equal(
      kubelet.runtimeState.networkErrors(),
      undefined,
      "nothing changes before the period ends",
    );
    clock.step(RUNTIME_UP_PERIOD_MS);
    await until("the next Status", () => kubelet.runtimeState.networkErrors() !== undefined);
    assert.equal(fake.callCount("Status"), statusCalls + 1);
    assert.equal(
      kubelet.runtimeState.networkErrors(),
      "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized",
    );
    assert.ok(lines.some((l) => l.startsWith("E") && l.includes('"Container runtime not ready"')));

    fake.service.setCondition("RuntimeReady", false, "Broken", "runtime broke");
    await until("the loop to sleep again", () => clock.waiters > 0);
    clock.step(RUNTIME_UP_PERIOD_MS);
    await until(
      "the runtime error",
      () => (kubelet.runtimeState.runtimeErrors() ?? "").includes("Broken"),
    );
    assert.equal(
      kubelet.runtimeState.runtimeErrors(),
      "container runtime not ready: RuntimeReady=false reason:Broken message:runtime broke",
    );
  } finally {
    ctl.abort();
    await running;
    services.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("nodeForAdmission uses the computed node until the listed Node has its status", () => {
  const computed = { metadata: { name: "n" }, status: { allocatable: { pods: "110" } } };
  const bare = { metadata: { name: "n" } };
  const listed = { metadata: { name: "n" }, status: { allocatable: { pods: "50" } } };
  assert.equal(nodeForAdmission(undefined, () => computed), computed);
  assert.equal(nodeForAdmission(bare, () => computed), computed);
  assert.equal(nodeForAdmission(listed, () => computed), listed);
});
