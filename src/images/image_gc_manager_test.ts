import assert from "node:assert/strict";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import { FakeRuntimeService } from "../testing/fake_runtime_service.ts";
import {
  formatSize,
  IMAGE_GC_PERIOD_MS,
  ImageGCError,
  ImageGCManager,
  type ImageGCManagerOptions,
  ImageGCPolicyError,
} from "./image_gc_manager.ts";
import { createLogger } from "../klog/klog.ts";
import { CriError, GrpcCode } from "../cri/connection.ts";

const MIN = 60_000;
const MB = 1_000_000;
const NODE: ObjectRef = { kind: "Node", name: "node-a", uid: "node-a" };

interface Recorded {
  readonly object: ObjectRef;
  readonly type: string;
  readonly reason: string;
  readonly message: string;
}

/** A hand-written runtime: images by id, containers, and scripted removal failures. */
class FakeImages {
  readonly images = new Map<string, api.Image>();
  containers: api.Container[] = [];
  readonly removed: string[] = [];
  readonly failRemove = new Set<string>();
  listFails = false;

  add(id: string, size: number, pinned = false): void {
    this.images.set(id, api.Image.create({ id, size: BigInt(size), pinned }));
  }

  /** A container of any state using `imageId`; `legacy` gives it only as image_ref. */
  use(imageId: string, state = api.ContainerState.CONTAINER_RUNNING, legacy = false): void {
    this.containers.push(api.Container.create({
      id: `c${this.containers.length}`,
      metadata: { name: "app", attempt: 0 },
      image: api.ImageSpec.create({ image: "docker.io/library/app:1" }),
      imageRef: imageId,
      imageId: legacy ? "" : imageId,
      state,
      labels: { "io.kubernetes.pod.name": "p", "io.kubernetes.pod.namespace": "ns" },
    }));
  }

  readonly imageService = {
    listImages: (_filter?: api.ImageFilter, _signal?: AbortSignal) => {
      if (this.listFails) return Promise.reject(new Error("rpc error: code = Unavailable"));
      return Promise.resolve([...this.images.values()]);
    },
    removeImage: (image: api.ImageSpec, _signal?: AbortSignal) => {
      if (this.failRemove.has(image.image)) {
        return Promise.reject(new Error(`failed to remove ${image.image}: device busy`));
      }
      this.removed.push(image.image);
      this.images.delete(image.image);
      return Promise.resolve();
    },
  };

  /** Each container's CRI status mounts, by container id; a container without one has none. */
  readonly mounts = new Map<string, api.Mount[]>();
  /** ContainerStatus fails for these container ids, with the error given. */
  readonly statusErrors = new Map<string, Error>();

  readonly runtime = {
    listContainers: (_filter?: api.ContainerFilter, _signal?: AbortSignal) =>
      Promise.resolve(this.containers),
    containerStatus: (containerId: string, _verbose?: boolean, _signal?: AbortSignal) => {
      const err = this.statusErrors.get(containerId);
      if (err) return Promise.reject(err);
      return Promise.resolve(api.ContainerStatusResponse.create({
        status: api.ContainerStatus.create({
          id: containerId,
          mounts: this.mounts.get(containerId) ?? [],
        }),
      }));
    },
  };
}

function setup(opts: Partial<ImageGCManagerOptions> = {}) {
  const clock = new FakeClock();
  const fake = new FakeImages();
  const events: Recorded[] = [];
  const lines: string[] = [];
  const recorder: EventRecorder = {
    event: (object, type, reason, message) => events.push({ object, type, reason, message }),
  };
  // Usage as a test sets it; capacity 1000 MB.
  const fs = { capacityBytes: 1000 * MB, availableBytes: 500 * MB };
  let fsCalls = 0;
  const manager = new ImageGCManager({
    imageService: fake.imageService,
    runtime: fake.runtime,
    imageFsStats: () => {
      fsCalls++;
      return Promise.resolve(fs.capacityBytes < 0 ? undefined : { ...fs });
    },
    recorder,
    nodeRef: NODE,
    clock,
    logger: createLogger({ write: (l) => lines.push(l), verbosity: 5 }),
    ...opts,
  });
  return { clock, fake, events, lines, fs, manager, fsCalls: () => fsCalls };
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

Deno.test("ImageGCManager rejects thresholds as upstream NewImageGCManager does", () => {
  const cases: [Record<string, number>, string][] = [
    [{ highThresholdPercent: 101 }, "invalid HighThresholdPercent 101, must be in range [0-100]"],
    [{ lowThresholdPercent: -1 }, "invalid LowThresholdPercent -1, must be in range [0-100]"],
    [
      { highThresholdPercent: 70, lowThresholdPercent: 75 },
      "LowThresholdPercent 75 can not be higher than HighThresholdPercent 70",
    ],
  ];
  for (const [policy, message] of cases) {
    assert.throws(() => setup({ policy }), (e) => {
      assert.ok(e instanceof ImageGCPolicyError);
      assert.equal(e.message, message);
      return true;
    });
  }
  // Equal thresholds are allowed upstream; defaults are upstream's.
  const { manager } = setup({ policy: { highThresholdPercent: 80, lowThresholdPercent: 80 } });
  assert.equal(manager.policy.minAgeMs, 2 * MIN);
  assert.deepEqual(setup().manager.policy, {
    highThresholdPercent: 85,
    lowThresholdPercent: 80,
    minAgeMs: 120_000,
    maxAgeMs: 0,
  });
});

Deno.test("ImageGCManager detectImages records first detection, use and size", async () => {
  const { clock, fake, manager } = setup();
  const t0 = clock.now();
  fake.add("sha256:a", 10 * MB);
  fake.add("sha256:b", 20 * MB, true);
  fake.add("sha256:c", 30 * MB);
  fake.use("sha256:a", api.ContainerState.CONTAINER_EXITED);
  fake.use("sha256:c", api.ContainerState.CONTAINER_RUNNING, true);
  const inUse = await manager.detectImages();
  assert.deepEqual([...inUse].sort(), ["sha256:a", "sha256:c"]);
  assert.deepEqual(manager.record("sha256:a"), {
    firstDetected: t0,
    lastUsed: t0,
    size: 10 * MB,
    pinned: false,
    runtimeHandler: "",
  });
  assert.equal(manager.record("sha256:b")?.lastUsed, 0);
  assert.equal(manager.record("sha256:b")?.pinned, true);

  clock.step(MIN);
  fake.containers = [];
  fake.images.delete("sha256:c");
  await manager.detectImages();
  assert.equal(manager.record("sha256:a")?.firstDetected, t0);
  assert.equal(manager.record("sha256:a")?.lastUsed, t0, "not used since");
  assert.equal(manager.record("sha256:c"), undefined, "vanished images are forgotten");
});

Deno.test("ImageGCManager detectImages counts the images of image volumes as in use", async () => {
  const { clock, fake, lines, manager } = setup();
  const t0 = clock.now();
  fake.add("sha256:app", 10 * MB);
  fake.add("sha256:data", 20 * MB);
  fake.add("sha256:other", 30 * MB);
  fake.use("sha256:app");
  fake.mounts.set("c0", [
    api.Mount.create({ containerPath: "/etc/hosts", hostPath: "/pods/u/etc-hosts" }),
    api.Mount.create({
      containerPath: "/volume",
      readonly: true,
      image: api.ImageSpec.create({ image: "sha256:data", userSpecifiedImage: "data:1" }),
    }),
    // An image the runtime no longer lists is not in use.
    api.Mount.create({
      containerPath: "/gone",
      image: api.ImageSpec.create({ image: "sha256:x" }),
    }),
  ]);
  const inUse = await manager.detectImages();
  assert.deepEqual([...inUse].sort(), ["sha256:app", "sha256:data"]);
  assert.equal(manager.record("sha256:data")?.lastUsed, t0);
  assert.equal(manager.record("sha256:other")?.lastUsed, 0);
  assert.ok(lines.some((l) => l.includes("Container uses image as mount")), lines.join("\n"));
});

Deno.test("ImageGCManager detectImages skips a container gone since the listing, fails on other status errors", async () => {
  const { fake, manager } = setup();
  fake.add("sha256:a", 10 * MB);
  fake.add("sha256:b", 10 * MB);
  fake.use("sha256:a");
  fake.use("sha256:b");
  fake.statusErrors.set(
    "c0",
    new CriError("RuntimeService/ContainerStatus", GrpcCode.NOT_FOUND, "container not found"),
  );
  assert.deepEqual([...await manager.detectImages()].sort(), ["sha256:a", "sha256:b"]);
  fake.statusErrors.set(
    "c1",
    new CriError("RuntimeService/ContainerStatus", GrpcCode.UNAVAILABLE, "connection refused"),
  );
  await assert.rejects(manager.detectImages(), (e) => {
    assert.ok(e instanceof ImageGCError);
    assert.match(
      e.message,
      /^get container status: RuntimeService\/ContainerStatus: rpc error: code = Unavailable desc = connection refused$/,
    );
    return true;
  });
});

Deno.test("ImageGCManager garbageCollect leaves images alone below the high threshold", async () => {
  const { clock, fake, fs, events, manager } = setup();
  fake.add("sha256:a", 100 * MB);
  await manager.detectImages();
  clock.step(10 * MIN);
  fs.availableBytes = 160 * MB; // usage 84%
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, []);
  // 84.9% counts as 85%: upstream's integer division truncates the available share.
  fs.availableBytes = 151 * MB;
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, ["sha256:a"]);
  assert.deepEqual(events, []);
});

Deno.test("ImageGCManager garbageCollect frees least recently used images down to the low threshold", async () => {
  const { clock, fake, fs, events, lines, manager } = setup();
  fake.add("sha256:old-unused", 60 * MB);
  fake.add("sha256:used-early", 50 * MB);
  fake.add("sha256:used-late", 40 * MB);
  fake.add("sha256:pinned", 500 * MB, true);
  fake.use("sha256:used-early");
  await manager.detectImages();
  clock.step(MIN);
  fake.containers = [];
  fake.use("sha256:used-late");
  fake.use("sha256:running");
  fake.add("sha256:running", 70 * MB);
  await manager.detectImages();
  clock.step(MIN);
  fake.containers = [];
  fake.use("sha256:running");
  fake.add("sha256:young", 90 * MB);
  await manager.detectImages();
  clock.step(MIN);
  // 85% used: to reach 80%, 50 MB must go.
  fs.availableBytes = 150 * MB;
  lines.length = 0;
  await manager.garbageCollect();
  // Never used sorts first; then by lastUsed. 60 MB covers 50 MB, so it stops there.
  assert.deepEqual(fake.removed, ["sha256:old-unused"]);
  assert.deepEqual(events, []);
  assert.ok(lines.some((l) =>
    l.includes(
      '"Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold" usage=85 highThreshold=85 amountToFree=50000000 lowThreshold=80',
    )
  ));

  // Next round needs 90 MB: used-early (lastUsed t0) then used-late (t0+1m), never the young
  // (first seen 1 minute ago), the pinned or the running one.
  fs.availableBytes = 110 * MB;
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, ["sha256:old-unused", "sha256:used-early", "sha256:used-late"]);
  assert.deepEqual(events, []);
});

Deno.test("ImageGCManager garbageCollect records FreeDiskSpaceFailed when too little is eligible", async () => {
  const { clock, fake, fs, events, manager } = setup();
  fake.add("sha256:a", 30 * MB);
  fake.add("sha256:b", 900 * MB);
  fake.use("sha256:b");
  await manager.detectImages();
  clock.step(3 * MIN);
  fs.availableBytes = 50 * MB; // 95%: 150 MB to free
  await assert.rejects(manager.garbageCollect(), (e) => {
    assert.ok(e instanceof ImageGCError);
    assert.equal(
      e.message,
      "Insufficient free disk space on the node's image filesystem (95% of 953.7 MiB used). Failed to free sufficient space by deleting unused images (freed 30000000 bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
    );
    return true;
  });
  assert.deepEqual(fake.removed, ["sha256:a"]);
  assert.deepEqual(events, [{
    object: NODE,
    type: "Warning",
    reason: "FreeDiskSpaceFailed",
    message:
      "Insufficient free disk space on the node's image filesystem (95% of 953.7 MiB used). Failed to free sufficient space by deleting unused images (freed 30000000 bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
  }]);
});

Deno.test("formatSize prints one decimal in the largest binary unit, ties to even as Go", () => {
  assert.equal(formatSize(0), "0 B");
  assert.equal(formatSize(1023), "1023 B");
  assert.equal(formatSize(1024), "1.0 KiB");
  assert.equal(formatSize(64 * 2 ** 20), "64.0 MiB");
  assert.equal(formatSize(96.5 * 2 ** 30), "96.5 GiB");
  // 1.25 and 1.75 are exact: Go's %.1f rounds them to the even digit.
  assert.equal(formatSize(1.25 * 2 ** 30), "1.2 GiB");
  assert.equal(formatSize(1.75 * 2 ** 30), "1.8 GiB");
  assert.equal(formatSize(2 ** 20 - 1), "1024.0 KiB");
  assert.equal(formatSize(3 * 2 ** 50), "3072.0 TiB");
});

Deno.test("ImageGCManager garbageCollect fails on an unknown or empty image filesystem", async () => {
  const { fs, events, manager } = setup();
  fs.capacityBytes = 0;
  await assert.rejects(
    manager.garbageCollect(),
    /^ImageGCError: invalid capacity 0 on image filesystem$/,
  );
  assert.deepEqual(events.map((e) => [e.reason, e.message]), [
    ["InvalidDiskCapacity", "invalid capacity 0 on image filesystem"],
  ]);
  fs.capacityBytes = -1; // the stats provider has nothing yet
  await assert.rejects(manager.garbageCollect(), /imageFs information is unavailable/);
  assert.equal(events.length, 1);
});

Deno.test("ImageGCManager garbageCollect removes images unused beyond maxAge whatever the usage", async () => {
  const { clock, fake, fs, events, manager } = setup({ policy: { maxAgeMs: 60 * MIN } });
  fs.availableBytes = 900 * MB; // 10%: no space pressure
  fake.add("sha256:stale", 10 * MB);
  fake.add("sha256:recent", 10 * MB);
  fake.add("sha256:pinned", 10 * MB, true);
  fake.use("sha256:recent", api.ContainerState.CONTAINER_EXITED);
  await manager.detectImages();
  clock.step(30 * MIN);
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, [], "nothing before maxAge has passed since collection began");
  fake.containers = []; // recent was last used at t0+30m
  clock.step(31 * MIN);
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, ["sha256:stale"]);
  clock.step(30 * MIN);
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, ["sha256:stale", "sha256:recent"]);
  assert.deepEqual(events, []);
});

Deno.test("ImageGCManager garbageCollect goes on past failed removals and reports them", async () => {
  const { clock, fake, fs, manager } = setup();
  fake.add("sha256:a", 10 * MB);
  fake.add("sha256:b", 10 * MB);
  fake.add("sha256:c", 10 * MB);
  await manager.detectImages();
  fake.failRemove.add("sha256:a");
  fake.failRemove.add("sha256:b");
  clock.step(5 * MIN);
  fs.availableBytes = 100 * MB;
  await assert.rejects(
    manager.garbageCollect(),
    (e) => {
      assert.ok(e instanceof ImageGCError);
      assert.equal(
        e.message,
        "wanted to free 100000000 bytes, but freed 10000000 bytes space with errors in image deletion: [failed to remove sha256:a: device busy, failed to remove sha256:b: device busy]",
      );
      return true;
    },
  );
  assert.deepEqual(fake.removed, ["sha256:c"]);
  assert.ok(manager.record("sha256:a"), "a failed removal keeps the record");
});

Deno.test("ImageGCManager deleteUnusedImages removes every unused image old enough", async () => {
  const { clock, fake, fs, manager } = setup();
  fs.availableBytes = 999 * MB;
  fake.add("sha256:a", 10 * MB);
  fake.add("sha256:b", 10 * MB);
  fake.add("sha256:in-use", 10 * MB);
  fake.add("sha256:pinned", 10 * MB, true);
  fake.use("sha256:in-use", api.ContainerState.CONTAINER_CREATED);
  await manager.detectImages();
  clock.step(2 * MIN);
  fake.add("sha256:young", 10 * MB);
  assert.equal(await manager.deleteUnusedImages(), 20 * MB);
  assert.deepEqual(fake.removed.sort(), ["sha256:a", "sha256:b"]);
});

Deno.test("ImageGCManager run collects at once and every 5 minutes, ImageGCFailed on the second failure", async () => {
  const { clock, fake, fs, events, lines, manager } = setup();
  fake.add("sha256:a", 10 * MB);
  fs.capacityBytes = -1; // stats not ready yet
  const ac = new AbortController();
  const done = manager.run(ac.signal);
  await until(() => clock.waiters === 1, "the first pass");
  assert.ok(manager.record("sha256:a"), "the first detection happens at start");
  assert.ok(lines.some((l) => l.includes("Image garbage collection failed once")));
  assert.deepEqual(events, []);

  clock.step(IMAGE_GC_PERIOD_MS - 1);
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(lines.filter((l) => l.includes("Image garbage collection failed")).length, 1);
  clock.step(1);
  await until(() => events.length === 1, "the ImageGCFailed event");
  assert.deepEqual(events[0], {
    object: NODE,
    type: "Warning",
    reason: "ImageGCFailed",
    message: "imageFs information is unavailable",
  });
  assert.ok(
    lines.some((l) => l.includes("Image garbage collection failed multiple times in a row")),
  );

  fs.capacityBytes = 1000 * MB;
  await until(() => clock.waiters === 1, "the second sleep");
  clock.step(IMAGE_GC_PERIOD_MS);
  await until(() => lines.some((l) => l.includes("Image garbage collection succeeded")), "success");
  assert.equal(events.length, 1);
  ac.abort();
  await done;
});

Deno.test("ImageGCManager run only detects when collection is off", async () => {
  const { clock, fake, manager, fsCalls } = setup({
    policy: { highThresholdPercent: 100, lowThresholdPercent: 80 },
  });
  fake.add("sha256:a", 10 * MB);
  const ac = new AbortController();
  const done = manager.run(ac.signal);
  await until(() => clock.waiters === 1, "the first pass");
  assert.ok(manager.record("sha256:a"));
  fake.listFails = true;
  clock.step(IMAGE_GC_PERIOD_MS);
  await until(() => clock.waiters === 1, "the second pass");
  assert.equal(fsCalls(), 0);
  ac.abort();
  await done;
});

Deno.test("ImageGCManager keeps the pinned sandbox image and images of exited containers of the fake CRI", async () => {
  const clock = new FakeClock();
  const pause = "registry.k8s.io/pause:3.10";
  const cri = new FakeRuntimeService({
    clock,
    sandboxImage: pause,
    preloadImages: [pause, "busybox:1.36", "nginx:1.27"],
  });
  const removed: string[] = [];
  const manager = new ImageGCManager({
    imageService: {
      listImages: (filter) => Promise.resolve(cri.images.listImages({ filter }).images),
      removeImage: (image) => {
        removed.push(image.image);
        cri.images.removeImage({ image });
        return Promise.resolve();
      },
    },
    runtime: {
      listContainers: (filter) => Promise.resolve(cri.listContainers({ filter }).containers),
      containerStatus: (containerId) =>
        Promise.resolve(cri.containerStatus({ containerId, verbose: false })),
    },
    imageFsStats: () => Promise.resolve({ capacityBytes: 100, availableBytes: 1 }),
    recorder: { event: () => {} },
    nodeRef: NODE,
    clock,
    logger: createLogger({ write: () => {} }),
  });
  const { podSandboxId } = cri.runPodSandbox(api.RunPodSandboxRequest.create({
    config: { metadata: { name: "p", namespace: "ns", uid: "u1", attempt: 0 } },
  }));
  const { containerId } = cri.createContainer(api.CreateContainerRequest.create({
    podSandboxId,
    config: {
      metadata: { name: "app", attempt: 0 },
      image: api.ImageSpec.create({ image: "busybox:1.36" }),
    },
  }));
  cri.startContainer({ containerId });
  cri.exitContainer(containerId, 0);
  await manager.detectImages();
  clock.step(5 * MIN);
  // 99% used: 19 bytes to free, which nginx alone covers.
  await manager.garbageCollect();
  const nginx = cri.images.get("nginx:1.27");
  assert.equal(nginx, undefined, "nginx was removed");
  assert.equal(removed.length, 1);
  assert.ok(cri.images.get(pause), "the pinned sandbox image stays");
  assert.ok(cri.images.get("busybox:1.36"), "an exited container still uses busybox");
});

Deno.test("ImageGCManager keeps the defaults of policy fields given as undefined", async () => {
  // As the agent passes unset config fields (imageMaximumGCAge has no default).
  const { clock, fake, manager } = setup({
    policy: { highThresholdPercent: undefined, maxAgeMs: undefined, minAgeMs: undefined },
  });
  assert.deepEqual(manager.policy, {
    highThresholdPercent: 85,
    lowThresholdPercent: 80,
    minAgeMs: 120_000,
    maxAgeMs: 0,
  });
  fake.add("sha256:a", 100 * MB);
  await manager.detectImages();
  clock.step(10 * MIN);
  await manager.garbageCollect();
  assert.deepEqual(fake.removed, [], "50% usage, no maximum age: nothing goes");
});
