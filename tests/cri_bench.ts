/**
 * CRI call latency through our client: Version, and ListContainers with 100 containers, against
 * the fake runtime and against real containerd (root only; without root the containerd rows are
 * left out with a warning). `deno task bench:micro` prints the figures.
 */

import { join } from "node:path";
import * as api from "../proto/runtime/v1/api.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import { startContainerd } from "./containerd_harness.ts";
import { containerConfig, type CriTarget, sandboxConfig } from "./cri_suite.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { whyNotRunnable } from "./requirements.ts";

const CONTAINERS = 100;
const dir = await Deno.makeTempDir({ prefix: "cri-bench-" });
const cleanups: (() => Promise<void> | void)[] = [];

/** A pod with {@link CONTAINERS} created (not started) containers, labelled for the filter. */
async function populate(runtime: RemoteRuntimeService, logRoot: string): Promise<void> {
  const t = { imageName: BUSYBOX_IMAGE, logRoot } as CriTarget;
  const sandbox = sandboxConfig(t, "bench");
  const pod = await runtime.runPodSandbox(sandbox, "");
  for (let i = 0; i < CONTAINERS; i++) {
    await runtime.createContainer(
      pod,
      containerConfig(t, `c${i}`, ["sleep", "3600"], { bench: "yes" }),
      sandbox,
    );
  }
  cleanups.unshift(async () => {
    await runtime.stopPodSandbox(pod).catch(() => {});
    await runtime.removePodSandbox(pod).catch(() => {});
  });
}

const fake = await startFakeRuntime({
  socket: join(dir, "fake.sock"),
  preloadImages: [BUSYBOX_IMAGE],
});
const fakeConn = new CriConnection({ endpoint: fake.endpoint });
const fakeRuntime = new RemoteRuntimeService({ connection: fakeConn });
await populate(fakeRuntime, join(dir, "fake-pods"));
cleanups.push(() => fakeConn.close(), () => fake.stop());

const filter = api.ContainerFilter.create({ labelSelector: { bench: "yes" } });

Deno.bench("fake runtime: Version", { group: "version" }, async () => {
  await fakeRuntime.version();
});
Deno.bench(
  `fake runtime: ListContainers (${CONTAINERS} containers)`,
  { group: "list" },
  async () => {
    const items = await fakeRuntime.listContainers(filter);
    if (items.length !== CONTAINERS) throw new Error(`listed ${items.length}`);
  },
);

const why = await whyNotRunnable(["containerd", "ctr", "runc"]);
if (why) {
  console.warn(`cri_bench: containerd rows left out: ${why}`);
} else {
  const containerd = await startContainerd({ dir: join(dir, "containerd") });
  await importImages({ containerdSocket: containerd.socket, images: [BUSYBOX, PAUSE] });
  const conn = new CriConnection({ endpoint: containerd.endpoint });
  const runtime = new RemoteRuntimeService({ connection: conn });
  await populate(runtime, join(dir, "containerd-pods"));
  cleanups.push(() => conn.close(), () => containerd.stop());

  Deno.bench("containerd: Version", { group: "version", baseline: true }, async () => {
    await runtime.version();
  });
  Deno.bench(`containerd: ListContainers (${CONTAINERS} containers)`, {
    group: "list",
    baseline: true,
  }, async () => {
    const items = await runtime.listContainers(filter);
    if (items.length !== CONTAINERS) throw new Error(`listed ${items.length}`);
  });
}

// Deno.bench has no after-all hook; a last bench run exactly once stops what was started, so
// no containerd, shim or pause process outlives the run.
Deno.bench({
  name: "(teardown: stop runtimes)",
  group: "teardown",
  n: 1,
  warmup: 0,
  async fn() {
    for (const c of cleanups.splice(0)) await c();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  },
});
