import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1PersistentVolume, V1Pod, V1Volume } from "@kubernetes/client-node";
import { FakeKubeGetter } from "../testing/fake_kube_getter.ts";
import type { EventRecorder } from "../client/record.ts";
import { createLogger } from "../klog/klog.ts";
import { Mounter } from "../util/mount.ts";
import {
  ORPHAN_CLEANUP_CONCURRENCY,
  VolumeManager,
  type VolumeManagerOptions,
  VolumeMountError,
} from "./volume_manager.ts";
import { FakeClock } from "../util/clock.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { VolumeMetrics } from "../metrics/volume_metrics.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import { IMAGE_VOLUME, ImagePlugin } from "./image.ts";
import {
  type MountedVolume,
  podVolumeDir,
  podVolumesDir,
  type VolumeAttachmentInfo,
  type VolumePlugin,
  type VolumeSetUpContext,
  type VolumeSpec,
  type VolumeTearDownContext,
} from "./plugin.ts";

/**
 * An in-memory plugin that also makes and removes the volume dir, so a restart finds it. It
 * supports volumes with its `field` set; failures are injected by volume name.
 */
class FakePlugin implements VolumePlugin {
  readonly calls: string[];
  readonly failSetUp = new Map<string, string>();
  readonly failTearDown = new Map<string, string>();
  /** When set, setUp of this volume waits for it. */
  gate?: { volume: string; promise: Promise<void> };
  /** When set, the next tearDown waits for it (taken by that one). */
  tearDownGate?: Promise<void>;
  /** When set, every tearDown waits for it. */
  tearDownHold?: Promise<void>;
  /** Run inside each setUp and tearDown (a test moves its clock there). */
  during?: () => void;
  #setUps = 0;

  constructor(
    readonly name: string,
    readonly field: keyof V1Volume,
    readonly requiresRemount: boolean,
    calls: string[],
  ) {
    this.calls = calls;
  }

  canSupport(volume: V1Volume): boolean {
    return volume[this.field] !== undefined;
  }

  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    this.calls.push(`setUp ${ctx.pod.metadata?.uid}/${ctx.volume.name} ${ctx.dir}`);
    if (this.gate?.volume === ctx.volume.name) await this.gate.promise;
    this.during?.();
    const fail = this.failSetUp.get(ctx.volume.name);
    if (fail !== undefined) throw new Error(fail);
    await Deno.mkdir(ctx.dir, { recursive: true });
    await Deno.writeTextFile(join(ctx.dir, "data"), `${++this.#setUps}`);
    return { hostPath: `${ctx.dir}#${this.#setUps}`, readOnly: false, selinuxRelabel: false };
  }

  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    this.calls.push(`tearDown ${ctx.podUid}/${ctx.volumeName} ${ctx.dir}`);
    const gate = this.tearDownGate;
    this.tearDownGate = undefined;
    if (gate) await gate;
    if (this.tearDownHold) await this.tearDownHold;
    this.during?.();
    const fail = this.failTearDown.get(ctx.volumeName);
    if (fail !== undefined) throw new Error(fail);
    await Deno.remove(ctx.dir, { recursive: true }).catch(() => {});
  }
}

interface Fixture extends AsyncDisposable {
  readonly dir: string;
  readonly pods: string;
  readonly calls: string[];
  readonly events: { type: string; reason: string; message: string; name: string }[];
  readonly emptyDir: FakePlugin;
  readonly configMap: FakePlugin;
  /** A new manager over the same directory and plugins (an agent restart). */
  newManager(extra?: Partial<VolumeManagerOptions>): VolumeManager;
  readonly vm: VolumeManager;
}

async function fixture(): Promise<Fixture> {
  const dir = await Deno.makeTempDir({ prefix: "volume-manager-" });
  const pods = join(dir, "pods");
  await Deno.mkdir(pods);
  const calls: string[] = [];
  const events: Fixture["events"] = [];
  const recorder: EventRecorder = {
    event: (ref, type, reason, message) => events.push({ type, reason, message, name: ref.name }),
  };
  const emptyDir = new FakePlugin("kubernetes.io/empty-dir", "emptyDir", false, calls);
  const configMap = new FakePlugin("kubernetes.io/configmap", "configMap", true, calls);
  const references = [{
    registerPod: (p: V1Pod) => void calls.push(`register ${p.metadata?.uid}`),
    unregisterPod: (p: V1Pod) => void calls.push(`unregister ${p.metadata?.uid}`),
  }];
  const newManager = (extra?: Partial<VolumeManagerOptions>) =>
    new VolumeManager({
      podsDirectory: pods,
      plugins: [emptyDir, configMap],
      recorder,
      logger: createLogger({ write: () => {}, pid: 1 }),
      references,
      ...extra,
    });
  return {
    dir,
    pods,
    calls,
    events,
    emptyDir,
    configMap,
    newManager,
    vm: newManager(),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A pod whose one container mounts every volume named in `mounted` (default: all). */
function pod(uid: string, volumes: V1Volume[], mounted = volumes.map((v) => v.name)): V1Pod {
  return {
    metadata: { name: `pod-${uid}`, namespace: "default", uid },
    spec: {
      containers: [{
        name: "main",
        image: "busybox",
        volumeMounts: mounted.map((name) => ({ name, mountPath: `/mnt/${name}` })),
      }],
      volumes,
    },
  };
}

const cache = (name = "cache"): V1Volume => ({ name, emptyDir: {} });
const config = (name = "config"): V1Volume => ({ name, configMap: { name: "cm" } });

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

const signal = new AbortController().signal;

Deno.test("VolumeManager sets up the mounted volumes in spec order, each in its plugin's dir", async () => {
  await using f = await fixture();
  const p = pod("u1", [cache(), config(), cache("unused"), cache("init")], ["cache", "config"]);
  p.spec!.initContainers = [{
    name: "init",
    image: "busybox",
    volumeMounts: [{ name: "init", mountPath: "/init" }],
  }];
  await f.vm.mountPodVolumes(signal, p);
  const dirOf = (plugin: string, name: string) => podVolumeDir(f.pods, "u1", plugin, name);
  assert.deepEqual(f.calls, [
    "register u1",
    `setUp u1/cache ${dirOf("kubernetes.io/empty-dir", "cache")}`,
    `setUp u1/config ${dirOf("kubernetes.io/configmap", "config")}`,
    `setUp u1/init ${dirOf("kubernetes.io/empty-dir", "init")}`,
  ]);
  assert.equal(
    dirOf("kubernetes.io/configmap", "config"),
    join(f.pods, "u1", "volumes", "kubernetes.io~configmap", "config"),
  );
  const mounted = f.vm.podVolumes("u1");
  assert.deepEqual([...mounted.keys()].sort(), ["cache", "config", "init"]);
  assert.equal(mounted.get("cache")?.hostPath, `${dirOf("kubernetes.io/empty-dir", "cache")}#1`);
  assert.equal(f.vm.podVolumes("other").size, 0);
  assert.equal(await f.vm.podVolumesExist("u1"), true);
  assert.equal(await f.vm.podVolumesExist("other"), false);
  assert.deepEqual(f.events, []);
});

Deno.test("VolumeManager reports each failed SetUp as FailedMount and throws upstream's VolumeMountError", async () => {
  await using f = await fixture();
  f.emptyDir.failSetUp.set("z-scratch", 'first "error"');
  f.configMap.failSetUp.set("b-config", 'configmap "cm" not found');
  const p = pod("u1", [cache("z-scratch"), cache("a-ok"), config("b-config"), cache("c-ok")]);
  const err = await f.vm.mountPodVolumes(signal, p).then(() => undefined, (e) => e);
  assert.ok(err instanceof VolumeMountError);
  assert.equal(
    err.message,
    'unmounted volumes=[b-config z-scratch], unattached volumes=[], failed to process volumes=[]: first "error"',
  );
  assert.deepEqual(err.unmountedVolumes, ["b-config", "z-scratch"]);
  // The others were set up regardless.
  assert.deepEqual([...f.vm.podVolumes("u1").keys()].sort(), ["a-ok", "c-ok"]);
  assert.deepEqual(f.events, [
    {
      type: "Warning",
      reason: "FailedMount",
      message: 'MountVolume.SetUp failed for volume "z-scratch" : first "error"',
      name: "pod-u1",
    },
    {
      type: "Warning",
      reason: "FailedMount",
      message: 'MountVolume.SetUp failed for volume "b-config" : configmap "cm" not found',
      name: "pod-u1",
    },
  ]);
  // Once the sources are fixed, the next call mounts only what is missing (and remounts).
  f.emptyDir.failSetUp.clear();
  f.configMap.failSetUp.clear();
  f.calls.length = 0;
  await f.vm.mountPodVolumes(signal, p);
  assert.deepEqual(f.calls.map((c) => c.split(" ").slice(0, 2).join(" ")), [
    "register u1",
    "setUp u1/z-scratch",
    "setUp u1/b-config",
  ]);
  assert.equal(f.vm.podVolumes("u1").size, 4);
});

Deno.test("VolumeManager mounts other pods while one pod's volume is stuck or failing", async () => {
  await using f = await fixture();
  const release = Promise.withResolvers<void>();
  f.emptyDir.gate = { volume: "slow", promise: release.promise };
  f.emptyDir.failSetUp.set("bad", "boom");
  let slowDone = false;
  const slow = f.vm.mountPodVolumes(signal, pod("slow-pod", [cache("slow")])).then(() => {
    slowDone = true;
  });
  await assert.rejects(f.vm.mountPodVolumes(signal, pod("bad-pod", [cache("bad")])), {
    name: "VolumeMountError",
  });
  await f.vm.mountPodVolumes(signal, pod("good-pod", [cache("good")]));
  assert.equal(f.vm.podVolumes("good-pod").size, 1);
  assert.equal(slowDone, false);
  release.resolve();
  await slow;
  assert.equal(f.vm.podVolumes("slow-pod").size, 1);
  assert.deepEqual(f.events.map((e) => e.name), ["pod-bad-pod"]);
});

Deno.test("VolumeManager sets up again only volumes whose plugin requires a remount", async () => {
  await using f = await fixture();
  const p = pod("u1", [cache(), config()]);
  await f.vm.mountPodVolumes(signal, p);
  const firstConfig = f.vm.podVolumes("u1").get("config")?.hostPath;
  await f.vm.mountPodVolumes(signal, p);
  await f.vm.mountPodVolumes(signal, p);
  const setUps = (v: string) => f.calls.filter((c) => c.startsWith(`setUp u1/${v} `)).length;
  assert.equal(setUps("cache"), 1);
  assert.equal(setUps("config"), 3);
  assert.notEqual(f.vm.podVolumes("u1").get("config")?.hostPath, firstConfig);
  assert.equal(f.calls.filter((c) => c === "register u1").length, 3);
});

Deno.test("VolumeManager keeps the previous mount when a remount fails, with a FailedMount event", async () => {
  await using f = await fixture();
  const p = pod("u1", [config()]);
  await f.vm.mountPodVolumes(signal, p);
  const before = f.vm.podVolumes("u1").get("config");
  assert.ok(before);
  f.configMap.failSetUp.set("config", 'configmap "cm" not found');
  // Every volume the containers mount is still mounted: upstream goes on with the sync.
  await f.vm.mountPodVolumes(signal, p);
  assert.deepEqual(f.vm.podVolumes("u1").get("config"), before);
  assert.deepEqual(f.events.map((e) => e.message), [
    'MountVolume.SetUp failed for volume "config" : configmap "cm" not found',
  ]);
});

Deno.test("VolumeManager fails a volume type no plugin supports with 'is not supported yet'", async () => {
  await using f = await fixture();
  const p = pod("u1", [
    { name: "claim", persistentVolumeClaim: { claimName: "data" } },
    cache(),
    { name: "inline", csi: { driver: "x.example.com" } },
  ]);
  await assert.rejects(f.vm.mountPodVolumes(signal, p), {
    name: "VolumeMountError",
    message: "unmounted volumes=[claim inline], unattached volumes=[], failed to process " +
      "volumes=[claim inline]: volume claim: persistent volume claims need an apiserver: no " +
      'kubeClient defined; volume type "csi" is not supported yet',
  });
  assert.deepEqual([...f.vm.podVolumes("u1").keys()], ["cache"]);
  // SetUp was never tried: no FailedMount event for them.
  assert.deepEqual(f.events, []);

  // Two plugins claiming one volume is an error too (upstream FindPluginBySpec).
  const twice = new VolumeManager({
    podsDirectory: f.pods,
    plugins: [f.emptyDir, new FakePlugin("example.com/other", "emptyDir", false, [])],
    recorder: { event: () => {} },
    logger: createLogger({ write: () => {}, pid: 1 }),
  });
  await assert.rejects(twice.mountPodVolumes(signal, pod("u2", [cache()])), {
    message: "unmounted volumes=[cache], unattached volumes=[], failed to process " +
      "volumes=[cache]: multiple volume plugins matched: kubernetes.io/empty-dir,example.com/other",
  });
});

Deno.test("VolumeManager accepts image volumes with the image plugin, leaving nothing on disk", async () => {
  await using f = await fixture();
  const vm = new VolumeManager({
    podsDirectory: f.pods,
    plugins: [f.emptyDir, new ImagePlugin()],
    recorder: { event: () => {} },
    logger: createLogger({ write: () => {}, pid: 1 }),
  });
  const p = pod("u1", [cache(), { name: "data", image: { reference: "data:1" } }]);
  await vm.mountPodVolumes(signal, p);
  assert.deepEqual(vm.podVolumes("u1").get("data"), IMAGE_VOLUME);
  assert.equal(await exists(join(podVolumesDir(f.pods, "u1"), "kubernetes.io~image")), false);
  await vm.unmountPodVolumes(signal, "u1");
  assert.equal(vm.podVolumesExist("u1"), false);
  assert.deepEqual(f.events, []);
});

Deno.test("VolumeManager tears down volumes dropped from the spec, also after a restart", async () => {
  await using f = await fixture();
  await f.vm.mountPodVolumes(signal, pod("u1", [cache("a"), cache("b"), config("c")]));
  f.calls.length = 0;
  await f.vm.mountPodVolumes(signal, pod("u1", [cache("a"), config("c")]));
  assert.deepEqual(f.calls.map((c) => c.split(" ").slice(0, 2).join(" ")), [
    "register u1",
    "tearDown u1/b",
    "setUp u1/c",
  ]);
  assert.deepEqual([...f.vm.podVolumes("u1").keys()].sort(), ["a", "c"]);
  assert.equal(await exists(podVolumeDir(f.pods, "u1", "kubernetes.io/empty-dir", "b")), false);

  // A new instance knows nothing in memory: what is on disk and not desired still goes.
  const restarted = f.newManager();
  f.calls.length = 0;
  await restarted.mountPodVolumes(signal, pod("u1", [cache("a")]));
  assert.deepEqual(f.calls.map((c) => c.split(" ").slice(0, 2).join(" ")), [
    "register u1",
    "tearDown u1/c",
    "setUp u1/a",
  ]);
});

Deno.test("VolumeManager.unmountPodVolumes tears down what it finds on disk after a restart", async () => {
  await using f = await fixture();
  const p = pod("u1", [cache(), config()]);
  await f.vm.mountPodVolumes(signal, p);
  const restarted = f.newManager();
  assert.equal(restarted.podVolumes("u1").size, 0);
  assert.equal(await restarted.podVolumesExist("u1"), true);
  f.calls.length = 0;
  await restarted.unmountPodVolumes(signal, "u1");
  // Each with the plugin named by its unescaped dir; no pod was seen, so none to unregister.
  assert.deepEqual(f.calls.sort(), [
    `tearDown u1/cache ${podVolumeDir(f.pods, "u1", "kubernetes.io/empty-dir", "cache")}`,
    `tearDown u1/config ${podVolumeDir(f.pods, "u1", "kubernetes.io/configmap", "config")}`,
  ]);
  assert.equal(await restarted.podVolumesExist("u1"), false);
  // The empty plugin dirs and the volumes dir went; the pod dir stays.
  assert.equal(await exists(podVolumesDir(f.pods, "u1")), false);
  assert.equal(await exists(join(f.pods, "u1")), true);
});

Deno.test("VolumeManager.unmountPodVolumes keeps a volume whose TearDown fails and retries it", async () => {
  await using f = await fixture();
  const p = pod("u1", [cache(), config()]);
  await f.vm.mountPodVolumes(signal, p);
  f.emptyDir.failTearDown.set("cache", "device busy");
  await assert.rejects(f.vm.unmountPodVolumes(signal, "u1"), {
    name: "VolumeUnmountError",
    message: 'UnmountVolume.TearDown failed for volume "cache" : device busy',
  });
  assert.deepEqual([...f.vm.podVolumes("u1").keys()], ["cache"]);
  assert.equal(await f.vm.podVolumesExist("u1"), true);
  f.emptyDir.failTearDown.clear();
  await f.vm.unmountPodVolumes(signal, "u1");
  assert.equal(f.vm.podVolumes("u1").size, 0);
  assert.equal(await f.vm.podVolumesExist("u1"), false);
  // Unregistered once, by the first call.
  assert.equal(f.calls.filter((c) => c === "unregister u1").length, 1);
});

Deno.test("VolumeManager.unmountPodVolumes names a dir of an unknown plugin and leaves it", async () => {
  await using f = await fixture();
  await f.vm.mountPodVolumes(signal, pod("u1", [cache()]));
  const csi = join(podVolumesDir(f.pods, "u1"), "kubernetes.io~csi", "pvc-1");
  await Deno.mkdir(csi, { recursive: true });
  await assert.rejects(f.vm.unmountPodVolumes(signal, "u1"), {
    name: "VolumeUnmountError",
    message: `no volume plugin matched name: kubernetes.io/csi: tearing down "${csi}" is not ` +
      "supported yet",
  });
  assert.equal(await exists(csi), true);
  // The known plugin's volume was torn down all the same.
  assert.equal(f.vm.podVolumes("u1").size, 0);
  assert.equal(await exists(podVolumeDir(f.pods, "u1", "kubernetes.io/empty-dir", "cache")), false);
  assert.equal(await f.vm.podVolumesExist("u1"), true);
});

Deno.test("VolumeManager registers the pod with references before setup and unregisters it after teardown", async () => {
  await using f = await fixture();
  const seen: [string, V1Pod][] = [];
  const vm = new VolumeManager({
    podsDirectory: f.pods,
    plugins: [f.emptyDir],
    recorder: { event: () => {} },
    logger: createLogger({ write: () => {}, pid: 1 }),
    references: [
      {
        registerPod: (p) => void seen.push(["register", p]),
        unregisterPod: (p) => void seen.push(["unregister", p]),
      },
      {
        registerPod: (p) => void f.calls.push(`register2 ${p.metadata?.uid}`),
        unregisterPod: (p) => void f.calls.push(`unregister2 ${p.metadata?.uid}`),
      },
    ],
  });
  const first = pod("u1", [cache()]);
  const second = pod("u1", [cache()]);
  await vm.mountPodVolumes(signal, first);
  assert.deepEqual(f.calls.map((c) => c.split(" ")[0]), ["register2", "setUp"]);
  await vm.mountPodVolumes(signal, second);
  await vm.unmountPodVolumes(signal, "u1");
  assert.deepEqual(seen.map(([op]) => op), ["register", "register", "unregister"]);
  assert.equal(seen[2]?.[1], second, "unregistered with the last pod seen");
  assert.equal(f.calls.at(-1), "unregister2 u1");
  assert.ok(f.calls.indexOf("unregister2 u1") > f.calls.findIndex((c) => c.startsWith("tearDown")));
  // A pod that is not known (no mount since a restart) unregisters nothing.
  await vm.unmountPodVolumes(signal, "u1");
  assert.equal(seen.length, 3);
});

Deno.test("VolumeManager.mountPodVolumes stops at an aborted signal without events", async () => {
  await using f = await fixture();
  const ctrl = new AbortController();
  ctrl.abort(new Error("pod deleted"));
  await assert.rejects(f.vm.mountPodVolumes(ctrl.signal, pod("u1", [cache()])), {
    message: "pod deleted",
  });
  assert.deepEqual(f.calls, []);
  assert.deepEqual(f.events, []);
});

Deno.test("VolumeManager.cleanupOrphanedPodDirs removes orphans, keeps kept pods and follows no symlink", async () => {
  await using f = await fixture();
  await f.vm.mountPodVolumes(signal, pod("kept", [cache(), config()]));
  await f.vm.mountPodVolumes(signal, pod("gone", [cache(), config()]));
  // An orphan from an earlier life: volumes on disk, plugin data, a file, a symlink out.
  const outside = join(f.dir, "outside");
  await Deno.mkdir(outside);
  await Deno.writeTextFile(join(outside, "precious"), "x");
  const old = join(f.pods, "old");
  await Deno.mkdir(join(old, "volumes", "kubernetes.io~empty-dir", "scratch"), {
    recursive: true,
  });
  await Deno.writeTextFile(join(old, "volumes", "kubernetes.io~empty-dir", "scratch", "f"), "");
  await Deno.mkdir(join(old, "plugins", "kubernetes.io~empty-dir", "wrapped"), {
    recursive: true,
  });
  await Deno.mkdir(join(old, "containers", "main"), { recursive: true });
  await Deno.symlink(outside, join(old, "containers", "main", "link"));
  await Deno.writeTextFile(join(old, "etc-hosts"), "127.0.0.1 localhost\n");
  // An orphan whose volume no plugin knows: left, and the others go on.
  const stuck = join(f.pods, "stuck");
  await Deno.mkdir(join(stuck, "volumes", "kubernetes.io~csi", "pvc"), { recursive: true });
  await Deno.mkdir(join(stuck, "plugins"), { recursive: true });
  // A pod dir that is a symlink is never followed; a stray file is ignored.
  await Deno.symlink(outside, join(f.pods, "linked"));
  await Deno.writeTextFile(join(f.pods, "stray"), "");

  f.calls.length = 0;
  await f.vm.cleanupOrphanedPodDirs(signal, new Set(["kept"]));

  assert.equal(await exists(join(f.pods, "gone")), false);
  assert.equal(await exists(old), false);
  assert.equal(await exists(join(stuck, "volumes", "kubernetes.io~csi", "pvc")), true);
  assert.equal(await exists(join(stuck, "plugins")), true, "nothing removed while volumes remain");
  assert.equal(await exists(join(f.pods, "linked")), true);
  assert.equal(await exists(join(f.pods, "stray")), true);
  assert.equal(await Deno.readTextFile(join(outside, "precious")), "x");
  assert.equal(f.vm.podVolumes("gone").size, 0);
  // The kept pod is untouched, in memory and on disk.
  assert.equal(f.vm.podVolumes("kept").size, 2);
  assert.equal(
    await exists(podVolumeDir(f.pods, "kept", "kubernetes.io/empty-dir", "cache")),
    true,
  );
  assert.ok(!f.calls.some((c) => c.includes("kept")), f.calls.join("\n"));
  assert.ok(f.calls.includes("unregister gone"));
  assert.ok(f.calls.some((c) => c.startsWith("tearDown old/scratch ")));
});

Deno.test("VolumeManager.cleanupOrphanedPodDirs cleans orphans side by side, not one after another", async () => {
  await using f = await fixture();
  await f.vm.mountPodVolumes(signal, pod("first", [cache()]));
  await f.vm.mountPodVolumes(signal, pod("second", [cache()]));
  // Whichever orphan's TearDown comes first is held until the other's has run.
  const held = Promise.withResolvers<void>();
  const other = Promise.withResolvers<void>();
  f.emptyDir.tearDownGate = held.promise;
  f.emptyDir.during = () => other.resolve();
  const sweep = f.vm.cleanupOrphanedPodDirs(signal, new Set());
  let timer: ReturnType<typeof setTimeout> | undefined;
  const overlapped = await Promise.race([
    other.promise.then(() => true),
    new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), 5_000)),
  ]);
  clearTimeout(timer);
  held.resolve();
  await sweep;
  assert.ok(overlapped, `the second orphan waited for the first: ${f.calls.join("\n")}`);
  assert.equal(await exists(join(f.pods, "first")), false);
  assert.equal(await exists(join(f.pods, "second")), false);
});

Deno.test("VolumeManager.cleanupOrphanedPodDirs leaves a pod kept while it waited for its turn", async () => {
  await using f = await fixture();
  const uids = Array.from({ length: ORPHAN_CLEANUP_CONCURRENCY + 1 }, (_, i) => `p${i}`);
  for (const uid of uids) await f.vm.mountPodVolumes(signal, pod(uid, [cache()]));
  const hold = Promise.withResolvers<void>();
  f.emptyDir.tearDownHold = hold.promise;
  const keep = new Set<string>();
  f.calls.length = 0;
  const sweep = f.vm.cleanupOrphanedPodDirs(signal, keep);
  const tearingDown = (uid: string) => f.calls.some((c) => c.startsWith(`tearDown ${uid}/`));
  for (let i = 0; i < 1000 && uids.filter(tearingDown).length < ORPHAN_CLEANUP_CONCURRENCY; i++) {
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  assert.equal(uids.filter(tearingDown).length, ORPHAN_CLEANUP_CONCURRENCY);
  // The one waiting for a slot is dispatched again meanwhile (a static pod put back).
  const waiting = uids.find((uid) => !tearingDown(uid))!;
  keep.add(waiting);
  hold.resolve();
  await sweep;
  assert.equal(tearingDown(waiting), false);
  assert.equal(f.vm.podVolumes(waiting).size, 1);
  assert.equal(await exists(join(f.pods, waiting)), true);
  for (const uid of uids.filter((u) => u !== waiting)) {
    assert.equal(await exists(join(f.pods, uid)), false, uid);
  }
});

Deno.test("VolumeManager.cleanupOrphanedPodDirs never deletes into a mount point", async () => {
  if (!(Deno.build.os === "linux" && Deno.uid() === 0)) {
    const reason = `mounting a tmpfs needs root on Linux (uid is ${Deno.uid()})`;
    if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
    console.warn(`SKIPPING VolumeManager mount point test: ${reason}`);
    return;
  }
  await using f = await fixture();
  const mounter = new Mounter();
  const mnt = join(f.pods, "orphan", "plugins", "example.com~driver", "mnt");
  await Deno.mkdir(mnt, { recursive: true });
  await mounter.mount("tmpfs", mnt, "tmpfs", ["size=1m"]);
  try {
    await Deno.writeTextFile(join(mnt, "data"), "keep me");
    await f.vm.cleanupOrphanedPodDirs(signal, new Set());
    assert.equal(await Deno.readTextFile(join(mnt, "data")), "keep me");
    assert.equal(await exists(join(f.pods, "orphan")), true);
    await mounter.unmount(mnt);
    await f.vm.cleanupOrphanedPodDirs(signal, new Set());
    assert.equal(await exists(join(f.pods, "orphan")), false);
  } finally {
    if (await mounter.mountAt(mnt)) await mounter.unmount(mnt);
  }
});

/** A manager recording into a fresh registry, on a fake clock each plugin call moves 50 ms. */
function metered(f: Fixture) {
  const registry = new MetricsRegistry();
  const metrics = new VolumeMetrics(registry);
  const clock = new FakeClock();
  f.emptyDir.during = f.configMap.during = () => clock.step(50);
  const vm = f.newManager({ metrics, clock });
  /** The `_sum` of one histogram series, or a gauge's value, from a scrape. */
  const value = async (name: string, labels: Record<string, string>, suffix?: string) => {
    const family = parseExposition(await registry.render()).find((x) => x.name === name);
    const sample = family?.samples.find((x) =>
      x.suffix === suffix && Object.entries(labels).every(([k, v]) => x.labels[k] === v)
    );
    return sample?.value;
  };
  return { vm, metrics, clock, registry, value };
}

const EMPTY_DIR = "kubernetes.io/empty-dir";
const CONFIG_MAP = "kubernetes.io/configmap";

function op(plugin: string, operation: string, status = "success") {
  return { volume_plugin: plugin, operation_name: operation, status, migrated: "false" };
}

Deno.test("VolumeManager times verify, mount and the end-to-end mount; a remount verifies nothing", async () => {
  await using f = await fixture();
  const { vm, metrics, clock, value } = metered(f);
  const p = pod("a", [cache(), config()]);
  await vm.mountPodVolumes(signal, p);
  const h = metrics.storageOperationDuration;
  const e2e = metrics.volumeOperationTotal;
  assert.equal(h.count(op(EMPTY_DIR, "verify_controller_attached_volume")), 1);
  assert.equal(h.count(op(CONFIG_MAP, "verify_controller_attached_volume")), 1);
  assert.equal(h.count(op(EMPTY_DIR, "volume_mount")), 1);
  assert.equal(h.count(op(CONFIG_MAP, "volume_mount")), 1);
  // Each SetUp took 50 ms; the configMap, mounted second, waited for the emptyDir's first.
  const storage = "storage_operation_duration_seconds";
  const total = "volume_operation_total_seconds";
  const overall = (plugin: string) => ({
    plugin_name: plugin,
    operation_name: "overall_volume_mount",
  });
  assert.equal(await value(storage, op(EMPTY_DIR, "volume_mount"), "_sum"), 0.05);
  assert.equal(await value(total, overall(EMPTY_DIR), "_sum"), 0.05);
  assert.equal(await value(total, overall(CONFIG_MAP), "_sum"), 0.1);

  // The next sync remounts only the configMap (RequiresRemount), asked for anew; nothing is
  // verified again.
  clock.step(1000);
  await vm.mountPodVolumes(signal, p);
  assert.equal(h.count(op(CONFIG_MAP, "verify_controller_attached_volume")), 1);
  assert.equal(h.count(op(CONFIG_MAP, "volume_mount")), 2);
  assert.equal(h.count(op(EMPTY_DIR, "volume_mount")), 1);
  assert.equal(e2e.count(overall(CONFIG_MAP)), 2);
  assert.equal(await value(total, overall(CONFIG_MAP), "_sum"), 0.15000000000000002);
});

Deno.test("VolumeManager counts a failed SetUp and TearDown as fail-unknown, and unmounts as volume_unmount", async () => {
  await using f = await fixture();
  const { vm, metrics } = metered(f);
  f.configMap.failSetUp.set("config", "boom");
  await assert.rejects(vm.mountPodVolumes(signal, pod("a", [cache(), config()])), VolumeMountError);
  const h = metrics.storageOperationDuration;
  assert.equal(h.count(op(CONFIG_MAP, "volume_mount", "fail-unknown")), 1);
  assert.equal(h.count(op(CONFIG_MAP, "volume_mount")), 0);
  assert.equal(
    metrics.volumeOperationTotal.count({
      plugin_name: CONFIG_MAP,
      operation_name: "overall_volume_mount",
    }),
    0,
  );

  f.emptyDir.failTearDown.set("cache", "busy");
  await assert.rejects(vm.unmountPodVolumes(signal, "a"));
  assert.equal(h.count(op(EMPTY_DIR, "volume_unmount", "fail-unknown")), 1);
  f.emptyDir.failTearDown.clear();
  await vm.unmountPodVolumes(signal, "a");
  assert.equal(h.count(op(EMPTY_DIR, "volume_unmount")), 1);
  // Torn down, the volume is no longer attached: mounting it again verifies it again.
  await assert.rejects(vm.mountPodVolumes(signal, pod("a", [cache(), config()])));
  assert.equal(h.count(op(EMPTY_DIR, "verify_controller_attached_volume")), 2);
});

Deno.test("VolumeManager shows desired and actual volumes per plugin at each scrape", async () => {
  await using f = await fixture();
  const { vm, value } = metered(f);
  const name = "volume_manager_total_volumes";
  const count = (plugin: string, state: string) => value(name, { plugin_name: plugin, state });
  // Nothing known: no series, as upstream's collector with empty states.
  assert.equal(await count(EMPTY_DIR, "desired_state_of_world"), undefined);
  f.configMap.failSetUp.set("config", "boom");
  await assert.rejects(vm.mountPodVolumes(signal, pod("a", [cache(), config()])));
  await vm.mountPodVolumes(signal, pod("b", [cache("c1"), cache("c2")]));
  assert.equal(await count(EMPTY_DIR, "desired_state_of_world"), 3);
  assert.equal(await count(EMPTY_DIR, "actual_state_of_world"), 3);
  // Wanted but not set up: desired only.
  assert.equal(await count(CONFIG_MAP, "desired_state_of_world"), 1);
  assert.equal(await count(CONFIG_MAP, "actual_state_of_world"), undefined);
  // A terminated pod leaves the desired state, and the actual once torn down.
  await vm.unmountPodVolumes(signal, "b");
  assert.equal(await count(EMPTY_DIR, "desired_state_of_world"), 1);
  assert.equal(await count(EMPTY_DIR, "actual_state_of_world"), 1);
});

Deno.test("VolumeManager.cleanupOrphanedPodDirs reports the orphans and failures of the last sweep", async () => {
  await using f = await fixture();
  const { vm, metrics } = metered(f);
  await vm.mountPodVolumes(signal, pod("kept", [cache()]));
  await vm.mountPodVolumes(signal, pod("gone", [cache()]));
  await vm.mountPodVolumes(signal, pod("stuck", [cache()]));
  // Only the stuck pod's TearDown fails.
  f.emptyDir.during = () => {
    if (f.calls.at(-1)?.startsWith("tearDown stuck/")) throw new Error("busy");
  };
  await vm.cleanupOrphanedPodDirs(signal, new Set(["kept"]));
  assert.equal(metrics.orphanPodCleanedVolumes.get(), 2);
  assert.equal(metrics.orphanPodCleanedVolumesErrors.get(), 1);
  // The next sweep finds only the stuck pod, which now goes.
  f.emptyDir.during = undefined;
  await vm.cleanupOrphanedPodDirs(signal, new Set(["kept"]));
  assert.equal(metrics.orphanPodCleanedVolumes.get(), 1);
  assert.equal(metrics.orphanPodCleanedVolumesErrors.get(), 0);
});

/** A plugin of PersistentVolumes with a `csi` source; attachable when `attachable`. */
class FakePvPlugin extends FakePlugin {
  attachable = false;
  readonly specs: string[] = [];

  constructor(calls: string[]) {
    super("kubernetes.io/csi", "csi", false, calls);
  }

  canSupportPersistentVolume(pv: V1PersistentVolume): boolean {
    return pv.spec?.csi !== undefined;
  }

  attachment(spec: VolumeSpec): Promise<VolumeAttachmentInfo | undefined> {
    const csi = spec.persistentVolume?.spec?.csi;
    return Promise.resolve(
      this.attachable && csi
        ? { uniqueName: `kubernetes.io/csi/${csi.driver}^${csi.volumeHandle}` }
        : undefined,
    );
  }

  async reconstructAttachment(dir: string): Promise<VolumeAttachmentInfo | undefined> {
    // What the fake's setUp wrote there.
    const written = await Deno.stat(join(dir, "data")).then(() => true, () => false);
    return this.attachable && written
      ? { uniqueName: "kubernetes.io/csi/d.example.com^h1" }
      : undefined;
  }

  override setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    this.specs.push(`${ctx.spec?.name} readOnly=${ctx.spec?.readOnly}`);
    return super.setUp(ctx);
  }
}

function claimWorld(): FakeKubeGetter {
  return new FakeKubeGetter({
    "/api/v1/namespaces/default/persistentvolumeclaims/c1": {
      metadata: { name: "c1", namespace: "default", uid: "c1-uid" },
      spec: { volumeName: "pv-1" },
      status: { phase: "Bound" },
    },
    "/api/v1/persistentvolumes/pv-1": {
      metadata: { name: "pv-1" },
      spec: { csi: { driver: "d.example.com", volumeHandle: "h1" }, claimRef: { uid: "c1-uid" } },
    },
    "/api/v1/nodes/node-a": { metadata: { name: "node-a" }, status: {} },
  });
}

const claimVolume: V1Volume = { name: "data", persistentVolumeClaim: { claimName: "c1" } };

Deno.test("VolumeManager sets a claim up as its PersistentVolume, in a dir named after the PV", async () => {
  await using f = await fixture();
  const csi = new FakePvPlugin(f.calls);
  const vm = f.newManager({ plugins: [f.emptyDir, csi], client: claimWorld(), nodeName: "node-a" });
  await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
  const dir = podVolumeDir(f.pods, "u1", "kubernetes.io/csi", "pv-1");
  assert.deepEqual(f.calls, ["register u1", `setUp u1/data ${dir}`]);
  assert.deepEqual(csi.specs, ["pv-1 readOnly=false"]);
  // Containers find it under the pod's volume name.
  assert.equal(vm.podVolumes("u1").get("data")?.hostPath, `${dir}#1`);
  // Another sync keeps it; the PV's dir is not taken for an undesired volume.
  await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
  assert.equal(f.calls.filter((c) => c.startsWith("tearDown")).length, 0);
  await vm.unmountPodVolumes(signal, "u1");
  assert.deepEqual(f.calls.slice(-2), [`tearDown u1/pv-1 ${dir}`, "unregister u1"]);
});

Deno.test("VolumeManager keeps a mounted claim while its claim cannot be read (after a restart)", async () => {
  await using f = await fixture();
  const csi = new FakePvPlugin(f.calls);
  const client = claimWorld();
  await f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" })
    .mountPodVolumes(signal, pod("u1", [claimVolume]));
  // The agent restarts while the apiserver has lost the claim (or cannot be reached).
  client.objects.delete("/api/v1/namespaces/default/persistentvolumeclaims/c1");
  const restarted = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
  await assert.rejects(restarted.mountPodVolumes(signal, pod("u1", [claimVolume])), {
    message: "unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: " +
      'error processing PVC default/c1: failed to fetch PVC from API server: persistentvolumeclaims "c1" not found',
  });
  assert.equal(f.calls.filter((c) => c.startsWith("tearDown")).length, 0, f.calls.join("\n"));
  assert.ok(await Deno.stat(podVolumeDir(f.pods, "u1", "kubernetes.io/csi", "pv-1")));
});

Deno.test("VolumeManager sets up an attachable volume once it is reported in use and attached", async () => {
  await using f = await fixture();
  const csi = new FakePvPlugin(f.calls);
  csi.attachable = true;
  const client = claimWorld();
  const vm = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
  const unique = "kubernetes.io/csi/d.example.com^h1";
  // Nothing is reported before the volumes on disk were looked at.
  assert.equal(vm.volumesInUse(), undefined);
  await vm.reconstruct(signal);
  assert.deepEqual(vm.volumesInUse(), []);
  await assert.rejects(vm.mountPodVolumes(signal, pod("u1", [claimVolume])), {
    message: "unmounted volumes=[data], unattached volumes=[data], failed to process volumes=[]: " +
      `Volume has not been added to the list of VolumesInUse in the node's volume status for volume "pv-1" `,
  });
  // The node status reports what the pod wants attached, before anything is mounted.
  assert.deepEqual(vm.volumesInUse(), [unique]);
  vm.markVolumesReportedInUse(vm.volumesInUse() ?? []);
  await assert.rejects(vm.mountPodVolumes(signal, pod("u1", [claimVolume])), {
    message:
      /unattached volumes=\[data\].*: Volume not attached according to node status for volume "pv-1" $/,
  });
  // The attach-detach controller attaches it.
  client.objects.set("/api/v1/nodes/node-a", {
    metadata: { name: "node-a" },
    status: { volumesAttached: [{ name: unique, devicePath: "" }] },
  });
  await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
  assert.equal(f.calls.filter((c) => c.startsWith("setUp")).length, 1);
  assert.deepEqual(f.events.map((e) => e.message), [
    `Volume has not been added to the list of VolumesInUse in the node's volume status for volume "pv-1" `,
    `Volume not attached according to node status for volume "pv-1" `,
  ]);
  // Still in use while mounted, and no longer once torn down.
  await vm.unmountPodVolumes(signal, "u1");
  assert.deepEqual(vm.volumesInUse(), []);
});

Deno.test("VolumeManager reports an attachable volume found on disk in use until it is torn down", async () => {
  await using f = await fixture();
  const csi = new FakePvPlugin(f.calls);
  csi.attachable = true;
  const client = claimWorld();
  const unique = "kubernetes.io/csi/d.example.com^h1";
  client.objects.set("/api/v1/nodes/node-a", {
    metadata: { name: "node-a" },
    status: { volumesAttached: [{ name: unique, devicePath: "" }] },
  });
  const before = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
  await before.reconstruct(signal);
  before.markVolumesReportedInUse([unique]);
  await before.mountPodVolumes(signal, pod("u1", [claimVolume]));
  // The agent restarts: the volume is still mounted, so the node must keep it in use.
  const after = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
  assert.equal(after.volumesInUse(), undefined);
  await after.reconstruct(signal);
  assert.deepEqual(after.volumesInUse(), [unique]);
  await after.unmountPodVolumes(signal, "u1");
  assert.deepEqual(after.volumesInUse(), []);
});

Deno.test("VolumeManager maps a block claim at the pod's volumeDevices link, and unmaps it after a restart", async () => {
  await using f = await fixture();
  const csi = new FakePvPlugin(f.calls);
  const maps: string[] = [];
  Object.assign(csi, {
    async mapDevice(ctx: VolumeSetUpContext): Promise<MountedVolume> {
      maps.push(`map ${ctx.spec?.name} block=${ctx.spec?.block} ${ctx.dir}`);
      await Deno.mkdir(join(ctx.dir, ".."), { recursive: true });
      await Deno.symlink("/dev/null", ctx.dir);
      return { hostPath: ctx.dir, readOnly: false, selinuxRelabel: false };
    },
    async unmapDevice(ctx: VolumeTearDownContext): Promise<void> {
      maps.push(`unmap ${ctx.volumeName} ${ctx.dir}`);
      await Deno.remove(ctx.dir);
    },
  });
  const client = claimWorld();
  const pvPath = "/api/v1/persistentvolumes/pv-1";
  const pv = client.objects.get(pvPath) as { spec: Record<string, unknown> };
  client.objects.set(pvPath, { ...pv, spec: { ...pv.spec, volumeMode: "Block" } });
  const p = pod("u1", [claimVolume], []);
  p.spec!.containers[0]!.volumeDevices = [{ name: "data", devicePath: "/dev/xvda" }];
  const vm = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
  await vm.mountPodVolumes(signal, p);
  const link = join(f.pods, "u1", "volumeDevices", "kubernetes.io~csi", "pv-1");
  assert.deepEqual(maps, [`map pv-1 block=true ${link}`]);
  assert.equal(vm.podVolumes("u1").get("data")?.hostPath, link);
  // No setUp of a file system for it.
  assert.equal(f.calls.filter((c) => c.startsWith("setUp")).length, 0);

  // After a restart the link is found on disk and unmapped when the pod goes.
  const restarted = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
  assert.equal(restarted.podVolumesExist("u1"), true);
  await restarted.unmountPodVolumes(signal, "u1");
  assert.deepEqual(maps.slice(1), [`unmap pv-1 ${link}`]);
  assert.equal(restarted.podVolumesExist("u1"), false);
  assert.equal(
    await Deno.lstat(join(f.pods, "u1", "volumeDevices")).then(() => true, () => false),
    false,
  );

  // A volume that is no claim cannot be a device (a Filesystem claim: persistent_volume_claims).
  const inline = pod("u3", [cache("scratch")], []);
  inline.spec!.containers[0]!.volumeDevices = [{ name: "scratch", devicePath: "/dev/xvdb" }];
  await assert.rejects(vm.mountPodVolumes(signal, inline), {
    message:
      /failed to process volumes=\[scratch\]: volume scratch is specified in volumeDevices: only a persistentVolumeClaim or ephemeral volume of volumeMode Block can be$/,
  });
});

Deno.test("VolumeManager sets a volume up again at each sync when its plugin says so for that spec", async () => {
  await using f = await fixture();
  const csi = new FakePvPlugin(f.calls);
  let republish = true;
  Object.assign(csi, { requiresRemountFor: () => Promise.resolve(republish) });
  const vm = f.newManager({ plugins: [f.emptyDir, csi], client: claimWorld(), nodeName: "node-a" });
  await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
  await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
  republish = false;
  await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
  assert.equal(f.calls.filter((c) => c.startsWith("setUp")).length, 2);
});

Deno.test("VolumeManager grows a mounted claim's volume, also one its plugin sets up again at each sync", async () => {
  for (const remount of [false, true]) {
    await using f = await fixture();
    const csi = new FakePvPlugin(f.calls);
    const expanded: string[] = [];
    Object.assign(csi, {
      requiresRemountFor: () => Promise.resolve(remount),
      nodeExpand: (spec: VolumeSpec, _dir: string, size: number) => {
        expanded.push(`${spec.name} ${size}`);
        return Promise.resolve();
      },
    });
    const client = claimWorld();
    const claimPath = "/api/v1/namespaces/default/persistentvolumeclaims/c1";
    const claim = client.objects.get(claimPath) as Record<string, unknown>;
    client.objects.set(claimPath, {
      ...claim,
      status: { phase: "Bound", capacity: { storage: "1Gi" } },
    });
    const vm = f.newManager({ plugins: [f.emptyDir, csi], client, nodeName: "node-a" });
    await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
    // The volume grew in the backend; the resizer leaves the node's part pending.
    const pvPath = "/api/v1/persistentvolumes/pv-1";
    const pv = client.objects.get(pvPath) as { spec: Record<string, unknown> };
    client.objects.set(pvPath, { ...pv, spec: { ...pv.spec, capacity: { storage: "2Gi" } } });
    client.objects.set(claimPath, {
      ...claim,
      status: {
        phase: "Bound",
        capacity: { storage: "1Gi" },
        allocatedResources: { storage: "2Gi" },
        allocatedResourceStatuses: { storage: "NodeResizePending" },
      },
    });
    await vm.mountPodVolumes(signal, pod("u1", [claimVolume]));
    assert.deepEqual(expanded, [`pv-1 ${2 * 2 ** 30}`], `remount=${remount}`);
  }
});
