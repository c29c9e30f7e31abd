import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, criMethods } from "../cri/connection.ts";
import { type Device, RegistrationDefinition } from "../../proto/deviceplugin/v1beta1/api.ts";
import { FakeDevicePlugin } from "../testing/fake_device_plugin.ts";
import { ENDPOINT_STOP_GRACE_PERIOD_MS } from "./endpoint.ts";
import {
  DeviceAllocationError,
  deviceCheckpointMissing,
  DeviceManager,
  type DeviceManagerOptions,
} from "./manager.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const REG = criMethods(RegistrationDefinition);
const RESOURCE = "example.com/gpu";

function healthy(...ids: string[]): Device[] {
  return ids.map((ID) => ({ ID, health: "Healthy" }));
}

function pod(uid: string, containers: V1Container[], init: V1Container[] = []): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "default" },
    spec: { containers, initContainers: init },
  };
}

function wants(name: string, n: number, resource = RESOURCE): V1Container {
  return { name, resources: { limits: { [resource]: String(n) } } };
}

interface Env extends AsyncDisposable {
  readonly root: string;
  readonly clock: FakeClock;
  readonly active: V1Pod[];
  /** What sourcesReady answers. */
  ready: boolean;
  manager: DeviceManager;
  /** A new manager over the same directory, with these containers running. */
  restart(running?: string[]): Promise<DeviceManager>;
  plugin(
    name: string,
    devices: Device[],
    opts?: Partial<Parameters<typeof FakeDevicePlugin.start>[0]>,
  ): Promise<FakeDevicePlugin>;
  register(endpoint: string, resource?: string, version?: string): Promise<void>;
}

async function env(opts: Partial<DeviceManagerOptions> = {}): Promise<Env> {
  const root = await Deno.makeTempDir({ prefix: "devicemanager-test-" });
  const clock = new FakeClock();
  const active: V1Pod[] = [];
  const ctl = new AbortController();
  const plugins: FakeDevicePlugin[] = [];
  const make = async (running: string[] = []) => {
    const m = new DeviceManager({
      rootDirectory: root,
      clock,
      logger: quiet,
      activePods: () => active,
      sourcesReady: () => e.ready,
      signal: ctl.signal,
      ...opts,
    });
    await m.start(running);
    return m;
  };
  const e: Env = {
    root,
    clock,
    active,
    ready: true,
    manager: undefined as unknown as DeviceManager,
    async restart(running) {
      await e.manager.stop();
      e.manager = await make(running);
      return e.manager;
    },
    async plugin(name, devices, o = {}) {
      const p = await FakeDevicePlugin.start({
        socket: join(root, "device-plugins", name),
        devices,
        ...o,
      });
      plugins.push(p);
      return p;
    },
    async register(endpoint, resource = RESOURCE, version = "v1beta1") {
      const conn = new CriConnection({ endpoint: e.manager.socketPath });
      try {
        await conn.unary(REG.register, { version, endpoint, resourceName: resource });
      } finally {
        conn.close();
      }
    },
    async [Symbol.asyncDispose]() {
      for (const p of plugins) await p.stop();
      await e.manager.stop();
      ctl.abort();
      await Deno.remove(root, { recursive: true });
    },
  };
  e.manager = await make();
  return e;
}

/** Polls `f` until it returns true (the ListAndWatch stream is asynchronous). */
async function until(f: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (f()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`timed out waiting for ${what}`);
}

Deno.test("a registered plugin's healthy devices are capacity and allocatable, unhealthy ones capacity only", async () => {
  await using e = await env();
  const p = await e.plugin("gpu.sock", [...healthy("a", "b"), { ID: "c", health: "Unhealthy" }]);
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 3, "the device list");
  assert.deepEqual(e.manager.getCapacity(), {
    capacity: { [RESOURCE]: 3 },
    allocatable: { [RESOURCE]: 2 },
    removed: [],
  });
  p.setDevices(healthy("a"));
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 1, "the new device list");
  assert.deepEqual(e.manager.getCapacity().allocatable, { [RESOURCE]: 1 });
});

Deno.test("registration refuses another API version and a resource name that is not extended", async () => {
  await using e = await env();
  await assert.rejects(
    e.register("x.sock", RESOURCE, "v1alpha1"),
    /requested API version "v1alpha1" is not supported by kubelet. Supported version is "\[v1beta1\]"/,
  );
  await assert.rejects(
    e.register("x.sock", "nvidia.com/"),
    /the ResourceName "nvidia.com\/" is invalid/,
  );
  await assert.rejects(e.register("x.sock", "cpu"), /the ResourceName "cpu" is invalid/);
  // The socket is not there: the kubelet could not dial it back.
  await assert.rejects(e.register("missing.sock"), /failed to dial device plugin/);
  assert.deepEqual(e.manager.getCapacity().capacity, {});
});

Deno.test("devices are allocated at admission and given to the container, and kept across a restart", async () => {
  await using e = await env();
  const p = await e.plugin("gpu.sock", healthy("a", "b", "c"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 3, "the device list");
  const c = wants("app", 2);
  const pd = pod("uid-1", [c]);
  e.active.push(pd);
  assert.equal(e.manager.needsDevices(pd), true);
  await e.manager.allocatePod(pd);
  assert.equal(p.count("Allocate"), 1);
  const opts = await e.manager.runContainerOptions(pd, c);
  assert.ok(opts);
  const ids = opts.cdiDevices.map((n) => n.replace("example.com/fake=", "")).sort();
  assert.equal(ids.length, 2);
  assert.deepEqual(opts.envs.map((v) => v.name).sort(), ids.map((id) => `DEVICE_${id}`));
  assert.deepEqual(
    opts.mounts.map((m) => m.containerPath).sort(),
    ids.map((i) => `/run/fake/${i}`),
  );
  assert.deepEqual(
    opts.devices.map((d) => d.containerPath).sort(),
    ids.map((i) => `/dev/fake-${i}`),
  );
  assert.deepEqual(opts.annotations.map((a) => a.name), ["fake.example.com/ids"]);
  assert.equal(await deviceCheckpointMissing(e.root), false);

  // A new kubelet reads the allocation back: the running container keeps its devices before
  // the plugin is back (upstream's sources not ready yet), without a second Allocate.
  e.ready = false;
  const again = await e.restart(["uid-1/app"]);
  await again.allocatePod(pd);
  const restored = await again.runContainerOptions(pd, c);
  assert.deepEqual(restored?.cdiDevices.slice().sort(), opts.cdiDevices.slice().sort());
  assert.equal(p.count("Allocate"), 1);
  assert.deepEqual(
    again.getDevices("uid-1", "app")?.get(RESOURCE) &&
      [...again.getDevices("uid-1", "app")!.get(RESOURCE)!.keys()].sort(),
    ids,
  );
  // The plugin is not back yet: its resource is known, with no devices.
  assert.deepEqual(again.getCapacity(), {
    capacity: { [RESOURCE]: 0 },
    allocatable: { [RESOURCE]: 0 },
    removed: [],
  });
  // A container of the pod that is not running needs the plugin, as upstream's does.
  await assert.rejects(
    again.allocate(pd, wants("other", 1)),
    /no healthy devices present; cannot allocate unhealthy devices example.com\/gpu/,
  );
  // Admission sees allocatable at least as high as what is allocated.
  assert.deepEqual(again.sanitizeAllocatable({ [RESOURCE]: "0", cpu: "4" }), {
    [RESOURCE]: "2",
    cpu: "4",
  });
});

Deno.test("a pod asking for more devices than are free is refused with upstream's message", async () => {
  await using e = await env();
  await e.plugin("gpu.sock", healthy("a", "b"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 2, "the device list");
  const first = pod("uid-1", [wants("app", 1)]);
  e.active.push(first);
  await e.manager.allocatePod(first);
  await assert.rejects(
    e.manager.allocatePod(pod("uid-2", [wants("app", 2)])),
    (err: Error) =>
      err instanceof DeviceAllocationError &&
      err.message ===
        `requested number of devices unavailable for ${RESOURCE}. Requested: 2, Available: 1`,
  );
  // Once the first pod is gone its device is free again.
  e.active.length = 0;
  await e.manager.allocatePod(pod("uid-2", [wants("app", 2)]));
});

Deno.test("an unregistered resource and a failing Allocate are errors naming them", async () => {
  await using e = await env();
  await e.plugin("gpu.sock", healthy("a"), { failAllocate: "no power" });
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 1, "the device list");
  // A resource no plugin registered is not the device manager's.
  const other = pod("uid-0", [wants("app", 1, "example.com/fpga")]);
  assert.equal(e.manager.needsDevices(other), false);
  await assert.rejects(
    e.manager.allocatePod(pod("uid-1", [wants("app", 1)])),
    /rpc error: code = Unknown desc = no power/,
  );
});

Deno.test("GetPreferredAllocation and PreStartContainer are called when the plugin asks for them", async () => {
  await using e = await env();
  const p = await e.plugin("gpu.sock", healthy("a", "b", "c", "d"), {
    options: { getPreferredAllocationAvailable: true, preStartRequired: true },
    preferred: () => ["c", "a"],
  });
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 4, "the device list");
  const c = wants("app", 2);
  const pd = pod("uid-1", [c]);
  e.active.push(pd);
  await e.manager.allocatePod(pd);
  const alloc = p.calls.find((x) => x.method === "Allocate");
  assert.deepEqual(
    alloc?.method === "Allocate" && alloc.request.containerRequests[0]!.devicesIds.sort(),
    ["a", "c"],
  );
  const pref = p.calls.find((x) => x.method === "GetPreferredAllocation");
  assert.equal(
    pref?.method === "GetPreferredAllocation" &&
      pref.request.containerRequests[0]!.allocationSize,
    2,
  );
  await e.manager.runContainerOptions(pd, c);
  const pre = p.calls.find((x) => x.method === "PreStartContainer");
  assert.deepEqual(pre?.method === "PreStartContainer" && pre.request.devicesIds.sort(), [
    "a",
    "c",
  ]);
});

Deno.test("a plugin that goes away leaves its devices unhealthy, then its resource is removed", async () => {
  await using e = await env();
  const p = await e.plugin("gpu.sock", healthy("a", "b"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().allocatable[RESOURCE] === 2, "the device list");
  await p.stop();
  await until(() => e.manager.getCapacity().allocatable[RESOURCE] === 0, "the stream's end");
  assert.deepEqual(e.manager.getCapacity().capacity, { [RESOURCE]: 2 });
  e.clock.step(ENDPOINT_STOP_GRACE_PERIOD_MS + 1);
  assert.deepEqual(e.manager.getCapacity(), { capacity: {}, allocatable: {}, removed: [RESOURCE] });
  // Reported once: the resource is forgotten.
  assert.deepEqual(e.manager.getCapacity().removed, []);

  // A plugin registering again takes its resource back.
  await e.plugin("gpu2.sock", healthy("a", "b", "c"));
  await e.register("gpu2.sock");
  await until(() => e.manager.getCapacity().allocatable[RESOURCE] === 3, "the new plugin");
});

Deno.test("an init container's devices are reused by the containers after it", async () => {
  await using e = await env();
  const p = await e.plugin("gpu.sock", healthy("a", "b"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 2, "the device list");
  const pd = pod("uid-1", [wants("app", 1)], [wants("init", 1)]);
  e.active.push(pd);
  await e.manager.allocatePod(pd);
  const [init, app] = p.calls.filter((c) => c.method === "Allocate").map((c) =>
    c.method === "Allocate" ? c.request.containerRequests[0]!.devicesIds : []
  );
  assert.deepEqual(app, init);
  // The second device is still free for another pod.
  await e.manager.allocatePod(pod("uid-2", [wants("app", 1)]));
});

Deno.test("the stale sockets of the device plugin directory are removed at start, the checkpoint is kept", async () => {
  await using e = await env();
  const p = await e.plugin("gpu.sock", healthy("a"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 1, "the device list");
  await e.manager.allocatePod(pod("uid-1", [wants("app", 1)]));
  await p.stop();
  const dir = join(e.root, "device-plugins");
  const listener = Deno.listen({ transport: "unix", path: join(dir, "stale.sock") });
  await Deno.writeTextFile(join(dir, "notes.txt"), "kept");
  await e.restart();
  listener.close();
  const names = [];
  for await (const d of Deno.readDir(dir)) names.push(d.name);
  assert.deepEqual(names.sort(), ["kubelet.sock", "kubelet_internal_checkpoint", "notes.txt"]);
});

Deno.test("a corrupt checkpoint is logged and the manager starts empty", async () => {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), pid: 1 });
  const root = await Deno.makeTempDir({ prefix: "devicemanager-test-" });
  try {
    await Deno.mkdir(join(root, "device-plugins"));
    await Deno.writeTextFile(
      join(root, "device-plugins", "kubelet_internal_checkpoint"),
      '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"example.com/gpu":["a"]}},"Checksum":1}',
    );
    const ctl = new AbortController();
    const m = new DeviceManager({
      rootDirectory: root,
      clock: new FakeClock(),
      logger,
      activePods: () => [],
      sourcesReady: () => true,
      signal: ctl.signal,
    });
    await m.start();
    await m.stop();
    ctl.abort();
    assert.ok(
      lines.some((l) =>
        l.includes("Continue after failing to read checkpoint file") && l.includes("corrupt")
      ),
      lines.join("\n"),
    );
    assert.deepEqual(m.getCapacity().capacity, {});
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a device turning Unhealthy is in its pod's allocatedResourcesStatus and asks for that pod's sync", async () => {
  const changed: string[][] = [];
  await using e = await env({ onHealthChange: (uids) => changed.push(uids) });
  const p = await e.plugin("gpu.sock", healthy("a", "b"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().allocatable[RESOURCE] === 2, "the device list");
  // The first list names devices nobody holds: no pod to sync.
  assert.deepEqual(changed, []);
  const pd = pod("uid-1", [wants("app", 1)]);
  e.active.push(pd);
  await e.manager.allocatePod(pd);
  const [held] = [...e.manager.getDevices("uid-1", "app")!.get(RESOURCE)!.keys()];
  const free = held === "a" ? "b" : "a";
  assert.deepEqual(e.manager.allocatedResourcesStatus(pd, "app"), [
    { name: RESOURCE, resources: [{ resourceID: held, health: "Healthy" }] },
  ]);
  assert.deepEqual(e.manager.allocatedResourcesStatus(pd, "other"), []);

  // The free device changing asks for no sync.
  p.setDevices([...healthy(held!), { ID: free, health: "Unhealthy" }]);
  await until(
    () => e.manager.getCapacity().allocatable[RESOURCE] === 1,
    "the free device's change",
  );
  assert.deepEqual(changed, []);

  p.setDevices([{ ID: held!, health: "Unhealthy" }, { ID: free, health: "Unhealthy" }]);
  await until(() => changed.length > 0, "the health change");
  assert.deepEqual(changed, [["uid-1"]]);
  assert.deepEqual(e.manager.allocatedResourcesStatus(pd, "app"), [
    { name: RESOURCE, resources: [{ resourceID: held, health: "Unhealthy" }] },
  ]);

  // As upstream, a plugin that goes away leaves the last reported health.
  await p.stop();
  await until(() => e.manager.getCapacity().capacity[RESOURCE] === 2, "the stream's end");
  assert.deepEqual(e.manager.allocatedResourcesStatus(pd, "app")[0]?.resources, [
    { resourceID: held, health: "Unhealthy" },
  ]);
  assert.deepEqual(changed, [["uid-1"]]);
});

Deno.test("with ResourceHealthStatus off no device health is reported nor any pod synced for it", async () => {
  const changed: string[][] = [];
  await using e = await env({
    featureGates: { ResourceHealthStatus: false },
    onHealthChange: (uids) => changed.push(uids),
  });
  const p = await e.plugin("gpu.sock", healthy("a"));
  await e.register("gpu.sock");
  await until(() => e.manager.getCapacity().allocatable[RESOURCE] === 1, "the device list");
  const pd = pod("uid-1", [wants("app", 1)]);
  e.active.push(pd);
  await e.manager.allocatePod(pd);
  p.setDevices([{ ID: "a", health: "Unhealthy" }]);
  await until(() => e.manager.getCapacity().allocatable[RESOURCE] === 0, "the health change");
  assert.deepEqual(changed, []);
  assert.deepEqual(e.manager.allocatedResourcesStatus(pd, "app"), []);
});
