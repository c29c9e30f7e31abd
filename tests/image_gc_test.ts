/**
 * Image garbage collection end to end, on a real containerd whose root (content store and
 * snapshots: what CRI ImageFsInfo reports as the image filesystem) is a 64 MiB tmpfs, through
 * the real apiserver. Each test fills that filesystem with locally built images of random data,
 * runs a pod on some of them under an agent with image GC off, then restarts the agent with
 * thresholds derived from the measured usage and a minimum image age of 0: the first
 * collection runs as soon as the agent starts (upstream's `wait.Until` in
 * StartGarbageCollection), so no test waits for the 5-minute period.
 *
 * Shown: unused images are removed until usage is at or below imageGCLowThresholdPercent (and
 * no more than needed), never the image in use; with only images in use the collection fails
 * with upstream's FreeDiskSpaceFailed event and error log. Not shown here: the order among
 * unused images (every image is first seen at the same pass and never used, so all tie; the
 * order by last use is unit-tested on a fake clock in src/images/image_gc_manager_test.ts), and
 * ImageGCFailed, which upstream records only on the second failure in a row, 5 minutes later
 * (unit-tested likewise). containerd 1.6 does not pin its sandbox image (CRI `pinned` is false;
 * containerd 1.7 added pinning): upstream then treats it as any unused image, and so do these
 * tests; on a runtime that pins it, they check that it stays.
 *
 * Upstream's counterpart is `test/e2e_node/image_gc_test.go`.
 */

import assert from "node:assert/strict";
import { basename, join } from "node:path";
import type { CoreV1EventList, V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, dumpLogsOnFailure, startControlPlane } from "./control_plane.ts";
import { ensureControlPlaneBinaries } from "./control_plane_build.ts";
import { type ImageSpec, importImages, PAUSE, PAUSE_IMAGE } from "./images.ts";
import {
  adminClient,
  poll,
  removeCgroupTree,
  startNodeAgent,
  TEST_CGROUP_PARENT,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("image GC e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "mount",
  "umount",
  "df",
]);
const NS = "default";
const NODES = { free: "kts-imagegc-free", full: "kts-imagegc-full" } as const;
/** Size of the tmpfs the image filesystem is. */
const IMAGE_FS_BYTES = 64 * 2 ** 20;
/** Random bytes in each filler image: about 8 MiB on the image filesystem (layer + snapshot). */
const FILLER_BYTES = 4 * 2 ** 20;
// No imagefs or nodefs thresholds: node-level reclaim would delete every unused image at once.
const EVICTION = ["evictionHard:", "  memory.available: 100Mi"];
// Every image is first seen by the first collection itself, so only a minimum age of 0 lets
// that pass remove any. `imageMinimumGCAge: 0s` in the file is defaulted to 2m, as upstream
// defaults a zero duration; the (deprecated) flag is applied after defaulting and keeps 0.
const MIN_AGE_ZERO = "--minimum-image-ttl-duration=0s";

/** An image of `FILLER_BYTES` random bytes that runs `sleep`. */
function filler(i: number): ImageSpec {
  return {
    name: `kubelet-ts.local/imagegc-filler-${i}:1`,
    cmd: ["sleep", "3600"],
    fillerBytes: FILLER_BYTES,
  };
}

// ---- The world: one control plane; each test brings its own node -----------------------------

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly crictl: string;
}

let world: Promise<World> | undefined;

async function startWorld(): Promise<World> {
  const dir = await Deno.makeTempDir({ prefix: "imagegc-e2e-" });
  try {
    const crictl = (await ensureControlPlaneBinaries()).crictl;
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: Object.values(NODES) });
    return { dir, cp, crictl };
  } catch (e) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw e;
  }
}

/** One node: its small image filesystem, containerd, and the agent running now. */
interface Node {
  readonly name: string;
  readonly dir: string;
  readonly imageFs: string;
  readonly socket: string;
  readonly endpoint: string;
  agent?: RunningAgent;
}

/**
 * Test `name` on node `nodeName`: mounts a tmpfs of {@link IMAGE_FS_BYTES}, starts a containerd
 * with its root there, imports `images`, and runs `fn`; afterwards stops the agent (which must
 * exit 0), containerd, and unmounts the tmpfs. A failure prints the agent's stderr tail and the
 * control plane's logs.
 */
function nodeTest(
  name: string,
  nodeName: string,
  images: readonly ImageSpec[],
  fn: (w: World, node: Node, api: KubeClient) => Promise<void>,
): void {
  Deno.test({
    name: `image GC: ${name}`,
    ignore: gate.ignore,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      gate.check();
      world ??= startWorld();
      const w = await world;
      await using stack = new AsyncDisposableStack();
      // The agent's cgroup root is named after this directory: unique per run, yet short
      // enough for containerd's socket paths.
      const dir = join(w.dir, `${nodeName.replace("kts-", "")}-${basename(w.dir).slice(-6)}`);
      const imageFs = join(dir, "imagefs");
      await Deno.mkdir(imageFs, { recursive: true });
      // Last out: the agent's cgroup root, once containerd has stopped every container.
      stack.defer(() => removeCgroupTree(`${TEST_CGROUP_PARENT}/${basename(dir)}`));
      await run("mount", ["-t", "tmpfs", "-o", `size=${IMAGE_FS_BYTES}`, "tmpfs", imageFs]);
      stack.defer(() => run("umount", ["-l", imageFs]).then(() => {}));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), root: imageFs, socket }),
      );
      await importImages({ containerdSocket: socket, images });
      const node: Node = { name: nodeName, dir, imageFs, socket, endpoint: containerd.endpoint };
      stack.defer(() => stopAgent(node));
      const api = await adminClient(w.cp, "image-gc-e2e-test");
      stack.defer(() => api.close());
      try {
        await dumpLogsOnFailure(w.cp, () => fn(w, node, api));
      } catch (e) {
        const tail = node.agent?.stderr().split("\n").slice(-80).join("\n");
        console.error(`agent stderr:\n${tail}`);
        throw e;
      }
    },
  });
}

// ---- Helpers ------------------------------------------------------------------------------------

async function run(program: string, args: readonly string[]): Promise<string> {
  const out = await new Deno.Command(program, { args: [...args], stdin: "null" }).output();
  const dec = new TextDecoder();
  if (!out.success) {
    throw new Error(`'${program} ${args.join(" ")}' failed: ${dec.decode(out.stderr)}`);
  }
  return dec.decode(out.stdout);
}

/** SIGTERM to the node's agent, which must exit 0. */
async function stopAgent(node: Node): Promise<void> {
  const agent = node.agent;
  if (!agent) return;
  node.agent = undefined;
  agent.process.kill("SIGTERM");
  const status = await agent.process.status;
  assert.equal(status.code, 0, agent.stderr().split("\n").slice(-20).join("\n"));
}

/** Starts the node's agent with `configLines` (stopping the one before) and waits for its sync loop. */
async function startAgent(
  w: World,
  node: Node,
  configLines: readonly string[],
  extraArgs: readonly string[] = [],
): Promise<RunningAgent> {
  await stopAgent(node);
  const { agent } = await startNodeAgent({
    cp: w.cp,
    dir: node.dir,
    nodeName: node.name,
    endpoint: node.endpoint,
    configLines: [...EVICTION, ...configLines],
    extraArgs,
  });
  node.agent = agent;
  return agent;
}

/** Capacity and available bytes of the filesystem at `path`, as `df` (and the agent) see them. */
async function df(path: string): Promise<{ capacity: number; available: number }> {
  const out = await run("df", ["-B1", "--output=size,avail", path]);
  const [capacity, available] = (out.trim().split("\n")[1] ?? "").trim().split(/\s+/).map(Number);
  assert.ok(Number.isSafeInteger(capacity) && Number.isSafeInteger(available), out);
  return { capacity: capacity!, available: available! };
}

/** Usage percent as upstream's GarbageCollect computes it (integer division). */
function usagePercent(fs: { capacity: number; available: number }): number {
  return 100 - Math.trunc(fs.available * 100 / fs.capacity);
}

/** What upstream's GarbageCollect would try to free at `low`. */
function amountToFree(fs: { capacity: number; available: number }, low: number): number {
  return Math.trunc(fs.capacity * (100 - low) / 100) - fs.available;
}

interface CriImage {
  id: string;
  repoTags: string[];
  size: number;
  pinned: boolean;
}

/** The images CRI ListImages reports (through crictl), by tag. */
async function criImages(w: World, node: Node): Promise<Map<string, CriImage>> {
  const out = await run(w.crictl, ["-r", node.endpoint, "images", "-o", "json"]);
  const parsed = JSON.parse(out) as {
    images: { id: string; repoTags?: string[]; size: string; pinned?: boolean }[];
  };
  const byTag = new Map<string, CriImage>();
  for (const i of parsed.images) {
    const image = {
      id: i.id,
      repoTags: i.repoTags ?? [],
      size: Number(i.size),
      pinned: i.pinned === true,
    };
    for (const tag of image.repoTags) byTag.set(tag, image);
  }
  return byTag;
}

function podOn(node: Node, name: string, images: readonly string[]): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: node.name,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      restartPolicy: "Never",
      containers: images.map((image, i) => ({
        name: `c${i}`,
        image,
        imagePullPolicy: "Never",
        command: ["sleep", "3600"],
      })),
    },
  });
}

/**
 * Runs pod `name` on `images` under an agent with image GC off (imageGCHighThresholdPercent
 * 100), so that the next agent's first collection finds its containers, and stops that agent.
 */
async function runPodWithGCOff(
  w: World,
  node: Node,
  api: KubeClient,
  name: string,
  images: readonly string[],
): Promise<void> {
  await startAgent(w, node, ["imageGCHighThresholdPercent: 100"]);
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: podOn(node, name, images) });
  assert.equal(r.code, 0, r.stderr);
  await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running", 60_000);
  await stopAgent(node);
}

async function assertStillRunning(api: KubeClient, name: string): Promise<void> {
  const p: V1Pod = await waitPod(api, NS, name, "read", () => true);
  assert.equal(p.status?.phase, "Running");
  for (const s of p.status?.containerStatuses ?? []) {
    assert.ok(s.state?.running, `${s.name} runs: ${JSON.stringify(s.state)}`);
    assert.equal(s.restartCount, 0);
  }
}

// ---- Tests --------------------------------------------------------------------------------------

const FREE_IMAGES = [PAUSE, filler(1), filler(2), filler(3), filler(4)];

nodeTest(
  "unused images are removed until usage is at or below the low threshold, never one in use",
  NODES.free,
  FREE_IMAGES,
  async (w, node, api) => {
    // containerd reports its snapshotter directory on the tmpfs as the image filesystem.
    const fsInfo = JSON.parse(await run(w.crictl, ["-r", node.endpoint, "imagefsinfo"]));
    const mountpoint: string = fsInfo.status.imageFilesystems[0].fsId.mountpoint;
    assert.ok(mountpoint.startsWith(`${node.imageFs}/`), mountpoint);

    const [inUse, ...unused] = FREE_IMAGES.slice(1).map((i) => i.name);
    await runPodWithGCOff(w, node, api, "gc-keeper", [inUse!]);

    const before = await criImages(w, node);
    const fillerSize = before.get(unused[0]!)!.size;
    const pause = before.get(PAUSE_IMAGE)!;
    const fs = await df(node.imageFs);
    const usage = usagePercent(fs);
    // Freeing must take exactly two of the three unused fillers, whichever comes first and
    // whether or not the (unpinned) sandbox image goes too: more than one filler and the
    // sandbox image, at most two fillers. Aim at the middle of that window.
    const target = 1.5 * fillerSize + pause.size / 2;
    const high = usage - 2;
    let low = 0;
    for (let l = 0; l < high; l++) {
      if (Math.abs(amountToFree(fs, l) - target) < Math.abs(amountToFree(fs, low) - target)) {
        low = l;
      }
    }
    const amount = amountToFree(fs, low);
    assert.ok(
      amount > fillerSize + pause.size && amount <= 2 * fillerSize,
      `thresholds for usage ${usage}% (${JSON.stringify(fs)}): high ${high}, low ${low}, ` +
        `amount to free ${amount}, filler size ${fillerSize}`,
    );

    const agent = await startAgent(w, node, [
      `imageGCHighThresholdPercent: ${high}`,
      `imageGCLowThresholdPercent: ${low}`,
    ], [MIN_AGE_ZERO, "-v=4"]);
    // The agent's image filesystem is the small one.
    const summary = await poll(
      "the node's summary",
      async () => {
        const path = `/api/v1/nodes/${node.name}/proxy/stats/summary`;
        const r = await w.cp.kubectl(["get", "--raw", path]);
        return r.code === 0 ? JSON.parse(r.stdout) : undefined;
      },
      30_000,
      500,
    );
    assert.equal(summary.node.runtime.imageFs.capacityBytes, fs.capacity);
    await agent.waitFor("Image garbage collection succeeded", 30_000);
    const log = agent.stderr();
    assert.match(
      log,
      new RegExp(
        `"Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold" usage=\\d+ highThreshold=${high} amountToFree=\\d+ lowThreshold=${low}`,
      ),
    );

    const after = await criImages(w, node);
    assert.ok(after.has(inUse!), "the image in use stays");
    const removed = unused.filter((name) => !after.has(name));
    assert.equal(removed.length, 2, `two of ${unused.join(", ")} removed: ${removed}`);
    if (pause.pinned) assert.ok(after.has(PAUSE_IMAGE), "the pinned sandbox image stays");
    // Each removal is logged with the image's id; only unused images were removed.
    const removedIds = [...log.matchAll(/"Removing image to free bytes" imageID="([^"]+)"/g)]
      .map((m) => m[1]);
    const unusedIds = new Set(
      [...unused, ...(pause.pinned ? [] : [PAUSE_IMAGE])].map((n) => before.get(n)!.id),
    );
    const pauseRemoved = !after.has(PAUSE_IMAGE);
    assert.equal(removedIds.length, removed.length + (pauseRemoved ? 1 : 0), log);
    for (const id of removedIds) assert.ok(unusedIds.has(id!), `${id} was unused`);
    assert.ok(usagePercent(await df(node.imageFs)) <= low, "usage at or below the low threshold");
    await assertStillRunning(api, "gc-keeper");
  },
);

nodeTest(
  "with only images in use the space cannot be freed: FreeDiskSpaceFailed",
  NODES.full,
  [PAUSE, filler(1), filler(2)],
  async (w, node, api) => {
    const images = [filler(1).name, filler(2).name];
    await runPodWithGCOff(w, node, api, "gc-full", images);
    const pause = (await criImages(w, node)).get(PAUSE_IMAGE)!;
    const fs = await df(node.imageFs);
    const high = usagePercent(fs) - 5;
    const low = high - 5;
    assert.ok(amountToFree(fs, low) > pause.size, `${JSON.stringify(fs)}, low ${low}`);

    const agent = await startAgent(w, node, [
      `imageGCHighThresholdPercent: ${high}`,
      `imageGCLowThresholdPercent: ${low}`,
    ], [MIN_AGE_ZERO]);
    await agent.waitFor(
      '"Image garbage collection failed once. Stats initialization may not have completed yet"',
      30_000,
    );
    const event = await poll(
      "the FreeDiskSpaceFailed event",
      async () => {
        const list = await api.get<CoreV1EventList>(
          `/api/v1/events?fieldSelector=involvedObject.name%3D${node.name},reason%3DFreeDiskSpaceFailed`,
        );
        return list.items[0];
      },
      30_000,
      200,
    );
    assert.equal(event.type, "Warning");
    assert.equal(event.involvedObject.kind, "Node");
    assert.equal(event.source?.component, "kubelet");
    const m = new RegExp(
      "^Insufficient free disk space on the node's image filesystem \\((\\d+)% of 64\\.0 MiB used\\)\\. " +
        "Failed to free sufficient space by deleting unused images \\(freed (\\d+) bytes\\)\\. " +
        "Investigate disk usage, as it could be used by active images, logs, volumes, or other data\\.$",
    ).exec(event.message ?? "");
    assert.ok(m, event.message);
    assert.ok(Number(m[1]) >= high, `usage ${m[1]}% at or over ${high}%`);
    // Only the sandbox image was eligible, and only where the runtime does not pin it.
    assert.equal(Number(m[2]), pause.pinned ? 0 : pause.size);
    assert.ok(
      agent.stderr().includes(`err="${event.message}"`),
      "the failure is logged with the event's message",
    );
    const after = await criImages(w, node);
    for (const name of images) assert.ok(after.has(name), `${name}, in use, stays`);
    await assertStillRunning(api, "gc-full");
  },
);

// Registered last, so it runs after the tests.
Deno.test({
  name: "image GC: teardown",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    if (!world) return;
    const w = await world;
    await w.cp.stop();
    await Deno.remove(w.dir, { recursive: true }).catch(() => {});
  },
});
