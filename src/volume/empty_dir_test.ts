import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod, V1Volume } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { type CommandRunner, Mounter } from "../util/mount.ts";
import {
  EMPTY_DIR_PLUGIN_NAME,
  EmptyDirError,
  emptyDirMemorySize,
  EmptyDirPlugin,
  pageSizeMountOption,
  setVolumeOwnership,
} from "./empty_dir.ts";
import { podVolumeDir } from "./plugin.ts";

const Mi = 1024 * 1024;
const Gi = 1024 * Mi;
const quiet = createLogger({ write: () => {} });

/** True when the test may mount and chown; else skips loudly, or throws under CI=true. */
function needsRoot(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

interface FakeMount {
  mountPoint: string;
  fsType: string;
  /** The superblock options (mountinfo's last field). @default "rw" */
  superOptions?: string;
}

/** A Mounter whose commands are recorded and act on an in-memory mount table. */
function fakeMounter(initial: FakeMount[] = []) {
  const table = [...initial];
  const calls: { cmd: string; args: string[] }[] = [];
  const run: CommandRunner = (cmd, args) => {
    calls.push({ cmd, args: [...args] });
    if (cmd === "mount") {
      const t = args.indexOf("-t");
      table.push({ mountPoint: args.at(-1) ?? "", fsType: t >= 0 ? args[t + 1] ?? "" : "" });
    } else if (cmd === "umount") {
      const i = table.findLastIndex((m) => m.mountPoint === args[0]);
      if (i >= 0) table.splice(i, 1);
    }
    return Promise.resolve("");
  };
  const readMountInfo = () =>
    Promise.resolve(
      table.map((m, i) =>
        `${100 + i} 1 0:${50 + i} / ${m.mountPoint} rw,relatime - ${m.fsType} ${m.fsType} ${
          m.superOptions ?? "rw"
        }`
      ).join("\n"),
    );
  return { calls, table, mounter: new Mounter({ run, readMountInfo }) };
}

function podOf(spec: Partial<NonNullable<V1Pod["spec"]>> = {}, uid = "pod-uid-1"): V1Pod {
  return {
    metadata: { name: "p", namespace: "default", uid },
    spec: { containers: [{ name: "c" }], ...spec },
  };
}

function container(name: string, limits?: Record<string, string>, guaranteed = false): V1Container {
  return {
    name,
    resources: limits === undefined ? {} : { limits, requests: guaranteed ? limits : {} },
  };
}

function emptyDir(name: string, medium?: string, sizeLimit?: string): V1Volume {
  return { name, emptyDir: { medium, sizeLimit } };
}

async function withTempDir(fn: (root: string) => Promise<void>): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "volume_empty_dir_test_" });
  try {
    await fn(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("EmptyDirPlugin has upstream's name and supports only emptyDir volumes", () => {
  const plugin = new EmptyDirPlugin({ mounter: fakeMounter().mounter, logger: quiet });
  assert.equal(plugin.name, "kubernetes.io/empty-dir");
  assert.equal(EMPTY_DIR_PLUGIN_NAME, plugin.name);
  assert.equal(plugin.requiresRemount, false);
  assert.equal(plugin.canSupport({ name: "a", emptyDir: {} }), true);
  assert.equal(plugin.canSupport({ name: "b", hostPath: { path: "/x" } }), false);
});

Deno.test("EmptyDirPlugin setUp makes the disk volume dir with mode 0777 despite the umask", async () => {
  await withTempDir(async (root) => {
    const { mounter, calls } = fakeMounter();
    const plugin = new EmptyDirPlugin({ mounter, logger: quiet });
    const dir = podVolumeDir(join(root, "pods"), "uid1", EMPTY_DIR_PLUGIN_NAME, "cache");
    const mounted = await plugin.setUp({ pod: podOf(), volume: emptyDir("cache"), dir });
    assert.deepEqual(mounted, { hostPath: dir, readOnly: false, selinuxRelabel: true });
    const info = await Deno.stat(dir);
    assert.ok(info.isDirectory);
    assert.equal(info.mode! & 0o7777, 0o777);
    assert.deepEqual(calls, [], "disk medium mounts nothing");

    // Whatever the umask, a directory that exists with other bits is chmod'ed to 0777.
    await Deno.chmod(dir, 0o700);
    await Deno.writeTextFile(join(dir, "f"), "kept");
    await plugin.setUp({ pod: podOf(), volume: emptyDir("cache", ""), dir });
    assert.equal((await Deno.stat(dir)).mode! & 0o7777, 0o777);
    assert.equal(await Deno.readTextFile(join(dir, "f")), "kept", "set-up is idempotent");
  });
});

Deno.test("EmptyDirPlugin setUp mounts a sized tmpfs for medium Memory", async () => {
  await withTempDir(async (root) => {
    const { mounter, calls } = fakeMounter();
    const plugin = new EmptyDirPlugin({
      mounter,
      logger: quiet,
      nodeAllocatableMemory: () => 8 * Gi,
    });
    const dir = join(root, "mem");
    const mounted = await plugin.setUp({
      pod: podOf(),
      volume: emptyDir("mem", "Memory", "64Mi"),
      dir,
    });
    assert.deepEqual(mounted, { hostPath: dir, readOnly: false, selinuxRelabel: true });
    const real = await Deno.realPath(dir);
    assert.deepEqual(calls, [
      { cmd: "mount", args: ["-t", "tmpfs", "-o", `size=${64 * Mi}`, "tmpfs", real] },
    ]);
    assert.equal((await Deno.stat(dir)).mode! & 0o777, 0o777, "the dir under the mount");

    // Already a tmpfs mount there: set-up is a no-op.
    await plugin.setUp({ pod: podOf(), volume: emptyDir("mem", "Memory", "64Mi"), dir });
    assert.equal(calls.length, 1);
  });
});

Deno.test("EmptyDirPlugin setUp adds noswap only when tmpfsNoswap is on", async () => {
  await withTempDir(async (root) => {
    const on = fakeMounter();
    await new EmptyDirPlugin({ mounter: on.mounter, logger: quiet, tmpfsNoswap: true }).setUp({
      pod: podOf(),
      volume: emptyDir("a", "Memory", "1Gi"),
      dir: join(root, "a"),
    });
    assert.deepEqual(on.calls[0]?.args.slice(0, 4), ["-t", "tmpfs", "-o", `size=${Gi},noswap`]);

    // Nothing bounds the size and noswap is off: no -o at all (the kernel's default size).
    const off = fakeMounter();
    await new EmptyDirPlugin({ mounter: off.mounter, logger: quiet }).setUp({
      pod: podOf(),
      volume: emptyDir("b", "Memory"),
      dir: join(root, "b"),
    });
    assert.deepEqual(off.calls[0]?.args, [
      "-t",
      "tmpfs",
      "tmpfs",
      await Deno.realPath(join(root, "b")),
    ]);
  });
});

Deno.test("EmptyDirPlugin setUp mounts tmpfs over a mount of another type", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "m");
    await Deno.mkdir(dir);
    const fake = fakeMounter([{ mountPoint: await Deno.realPath(dir), fsType: "ext4" }]);
    await new EmptyDirPlugin({ mounter: fake.mounter, logger: quiet }).setUp({
      pod: podOf(),
      volume: emptyDir("m", "Memory", "1Mi"),
      dir,
    });
    assert.equal(fake.calls.length, 1);
    assert.equal(fake.calls[0]?.cmd, "mount");
  });
});

Deno.test("EmptyDirPlugin setUp mounts hugetlbfs with the medium's or the pod's page size", async () => {
  await withTempDir(async (root) => {
    const { mounter, calls } = fakeMounter();
    const plugin = new EmptyDirPlugin({ mounter, logger: quiet });
    const pod = podOf({
      containers: [{
        name: "c",
        resources: {
          requests: { "hugepages-2Mi": "4Mi", memory: "1Mi" },
          limits: { "hugepages-2Mi": "4Mi", memory: "1Mi" },
        },
      }],
    });
    for (const medium of ["HugePages", "HugePages-2Mi"]) {
      const dir = join(root, medium);
      await plugin.setUp({ pod, volume: emptyDir("h", medium), dir });
      assert.deepEqual(calls.at(-1), {
        cmd: "mount",
        args: ["-t", "hugetlbfs", "-o", "pagesize=2Mi", "nodev", await Deno.realPath(dir)],
      });
    }
    // Mounted already: set-up is a no-op.
    await plugin.setUp({ pod, volume: emptyDir("h", "HugePages"), dir: join(root, "HugePages") });
    assert.equal(calls.length, 2);
  });
});

Deno.test("pageSizeMountOption refuses what upstream's getPageSizeMountOption refuses", () => {
  const pod = (requests: Record<string, string>[]) =>
    podOf({
      containers: requests.map((r, i) => ({ name: `c${i}`, resources: { requests: r } })),
    });
  assert.equal(
    pageSizeMountOption(
      "HugePages-1Gi",
      pod([{ "hugepages-2Mi": "2Mi" }, { "hugepages-1Gi": "1Gi" }]),
    ),
    "pagesize=1Gi",
  );
  assert.throws(
    () =>
      pageSizeMountOption(
        "HugePages",
        pod([{ "hugepages-2Mi": "2Mi" }, { "hugepages-1Gi": "1Gi" }]),
      ),
    /^EmptyDirError: medium: HugePages can't be used if container requests multiple huge page sizes$/,
  );
  assert.throws(
    () => pageSizeMountOption("HugePages-2Mi", pod([{ memory: "1Mi" }])),
    /^EmptyDirError: medium HugePages-2Mi: hugePages storage requested, but there is no resource request for huge pages$/,
  );
  assert.throws(
    () => pageSizeMountOption("HugePages-1Gi", pod([{ "hugepages-2Mi": "2Mi" }])),
    /there is no resource request for huge pages/,
  );
});

Deno.test("EmptyDirPlugin setUp refuses a hugetlbfs mount of another page size", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "h");
    await Deno.mkdir(dir);
    const fake = fakeMounter([{
      mountPoint: await Deno.realPath(dir),
      fsType: "hugetlbfs",
      superOptions: "rw,pagesize=1024M",
    }]);
    const plugin = new EmptyDirPlugin({ mounter: fake.mounter, logger: quiet });
    await assert.rejects(
      plugin.setUp({ pod: podOf({}, "u1"), volume: emptyDir("h", "HugePages-2Mi"), dir }),
      (err: Error) =>
        err instanceof EmptyDirError &&
        err.message ===
          `pod u1: mounted dir ${dir} pagesize '1Gi' and requested medium size '2Mi' differ`,
    );
    assert.deepEqual(fake.calls, []);
  });
});

Deno.test("EmptyDirPlugin setUp rejects an unknown medium with upstream's message", async () => {
  await withTempDir(async (root) => {
    const plugin = new EmptyDirPlugin({ mounter: fakeMounter().mounter, logger: quiet });
    await assert.rejects(
      plugin.setUp({ pod: podOf(), volume: emptyDir("x", "Floppy"), dir: join(root, "x") }),
      { name: "EmptyDirError", message: `unknown storage medium "Floppy"` },
    );
  });
});

Deno.test("EmptyDirPlugin tearDown unmounts a mount at the dir, then removes it", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "mem");
    const fake = fakeMounter();
    const plugin = new EmptyDirPlugin({ mounter: fake.mounter, logger: quiet });
    await plugin.setUp({ pod: podOf(), volume: emptyDir("mem", "Memory", "1Mi"), dir });
    const real = await Deno.realPath(dir);
    await Deno.writeTextFile(join(dir, "f"), "x");

    await plugin.tearDown({ podUid: "pod-uid-1", volumeName: "mem", dir });
    assert.deepEqual(fake.calls.map((c) => [c.cmd, ...c.args]).slice(1), [["umount", real]]);
    assert.deepEqual(fake.table, []);
    await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);

    // Idempotent: the dir is gone, nothing to do.
    await plugin.tearDown({ podUid: "pod-uid-1", volumeName: "mem", dir });
    assert.equal(fake.calls.length, 2);
  });
});

Deno.test("EmptyDirPlugin tearDown removes a disk volume and its content without unmounting", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "d");
    const fake = fakeMounter();
    const plugin = new EmptyDirPlugin({ mounter: fake.mounter, logger: quiet });
    await plugin.setUp({ pod: podOf(), volume: emptyDir("d"), dir });
    await Deno.mkdir(join(dir, "sub"));
    await Deno.writeTextFile(join(dir, "sub", "f"), "x");
    await plugin.tearDown({ podUid: "pod-uid-1", volumeName: "d", dir });
    await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
    assert.deepEqual(fake.calls, []);
  });
});

Deno.test("EmptyDirPlugin tearDown refuses to delete through a mount that will not go away", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "stuck");
    await Deno.mkdir(dir);
    await Deno.writeTextFile(join(dir, "f"), "x");
    const real = await Deno.realPath(dir);
    const readMountInfo = () => Promise.resolve(`100 1 0:50 / ${real} rw - tmpfs tmpfs rw`);
    const mounter = new Mounter({ run: () => Promise.resolve(""), readMountInfo });
    const plugin = new EmptyDirPlugin({ mounter, logger: quiet });
    await assert.rejects(
      plugin.tearDown({ podUid: "u", volumeName: "stuck", dir }),
      EmptyDirError,
    );
    assert.equal(await Deno.readTextFile(join(dir, "f")), "x");
  });
});

Deno.test("emptyDirMemorySize uses the volume sizeLimit when it is below node allocatable", () => {
  const pod = podOf();
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "64Mi"), 8 * Gi), 64 * Mi);
  // Larger than node allocatable: the node bound wins.
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "16Gi"), 8 * Gi), 8 * Gi);
  // Zero is ignored.
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "0"), 8 * Gi), 8 * Gi);
  // Rounded up to whole bytes, as Quantity.Value().
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "1500m"), 8 * Gi), 2);
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "1.5k"), 8 * Gi), 1500);
});

Deno.test("emptyDirMemorySize caps at a Guaranteed pod's memory limit", () => {
  const limits = { cpu: "1", memory: "256Mi" };
  const pod = podOf({ containers: [container("a", limits, true)] });
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory"), 8 * Gi), 256 * Mi);
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "64Mi"), 8 * Gi), 64 * Mi);
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "1Gi"), 8 * Gi), 256 * Mi);
  // Node allocatable below the pod's limit: the node bound wins.
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory"), 128 * Mi), 128 * Mi);
  // Overhead is added to the pod's limit.
  const withOverhead = podOf({
    containers: [container("a", limits, true)],
    overhead: { memory: "10Mi" },
  });
  assert.equal(emptyDirMemorySize(withOverhead, emptyDir("v", "Memory"), 8 * Gi), 266 * Mi);
});

Deno.test("emptyDirMemorySize counts a Burstable pod's limit only when every container has one", () => {
  const all = podOf({
    containers: [container("a", { memory: "100Mi" }), container("b", { memory: "200Mi" })],
  });
  assert.equal(emptyDirMemorySize(all, emptyDir("v", "Memory"), 8 * Gi), 300 * Mi);

  const one = podOf({ containers: [container("a", { memory: "100Mi" }), container("b")] });
  assert.equal(emptyDirMemorySize(one, emptyDir("v", "Memory"), 8 * Gi), 8 * Gi);

  // An init container without a memory limit also leaves the pod cgroup unbounded.
  const init = podOf({
    containers: [container("a", { memory: "100Mi" })],
    initContainers: [container("i", { cpu: "1" })],
  });
  assert.equal(emptyDirMemorySize(init, emptyDir("v", "Memory"), 8 * Gi), 8 * Gi);

  // A pod-level memory limit declares it for the whole pod.
  const podLevel = podOf({
    containers: [container("a"), container("b")],
    resources: { limits: { memory: "512Mi" } },
  });
  assert.equal(emptyDirMemorySize(podLevel, emptyDir("v", "Memory"), 8 * Gi), 512 * Mi);
});

Deno.test("emptyDirMemorySize ignores BestEffort pods and is unbounded with nothing known", () => {
  const pod = podOf();
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory"), 8 * Gi), 8 * Gi);
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory"), undefined), undefined);
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "32Mi"), undefined), 32 * Mi);
  // Upstream: a zero node bound admits nothing smaller, so no size option.
  assert.equal(emptyDirMemorySize(pod, emptyDir("v", "Memory", "32Mi"), 0), undefined);
  const guaranteed = podOf({
    containers: [container("a", { cpu: "1", memory: "256Mi" }, true)],
  });
  assert.equal(emptyDirMemorySize(guaranteed, emptyDir("v", "Memory"), undefined), 256 * Mi);
});

Deno.test("EmptyDirPlugin setUp gives the pod's fsGroup the volume dir", async () => {
  if (!needsRoot("chown to an fsGroup")) return;
  await withTempDir(async (root) => {
    const dir = join(root, "g");
    const plugin = new EmptyDirPlugin({ mounter: fakeMounter().mounter, logger: quiet });
    const pod = podOf({ securityContext: { fsGroup: 4321 } });
    await plugin.setUp({ pod, volume: emptyDir("g"), dir });
    const info = await Deno.stat(dir);
    assert.equal(info.gid, 4321);
    assert.equal(info.mode! & 0o7777, 0o2777);

    const plain = join(root, "plain");
    await plugin.setUp({ pod: podOf(), volume: emptyDir("plain"), dir: plain });
    assert.equal((await Deno.stat(plain)).gid, Deno.gid());
    assert.equal((await Deno.stat(plain)).mode! & 0o7777, 0o777);
  });
});

Deno.test("setVolumeOwnership chowns every entry and adds group bits, leaving link targets", async () => {
  if (!needsRoot("chown to an fsGroup")) return;
  await withTempDir(async (root) => {
    const vol = join(root, "vol");
    const outside = join(root, "outside");
    await Deno.mkdir(join(vol, "sub"), { recursive: true });
    await Deno.chmod(join(vol, "sub"), 0o700);
    await Deno.writeTextFile(join(vol, "sub", "f"), "x");
    await Deno.chmod(join(vol, "sub", "f"), 0o600);
    await Deno.writeTextFile(outside, "y");
    await Deno.chmod(outside, 0o600);
    await Deno.symlink(outside, join(vol, "link"));

    await setVolumeOwnership(vol, 4321, { logger: quiet });
    assert.equal((await Deno.stat(join(vol, "sub"))).mode! & 0o7777, 0o2770);
    assert.equal((await Deno.stat(join(vol, "sub"))).gid, 4321);
    assert.equal((await Deno.stat(join(vol, "sub", "f"))).mode! & 0o7777, 0o660);
    assert.equal((await Deno.stat(join(vol, "sub", "f"))).gid, 4321);
    assert.equal((await Deno.lstat(join(vol, "link"))).gid, 4321, "the link itself");
    const target = await Deno.stat(outside);
    assert.equal(target.mode! & 0o7777, 0o600, "chmod does not go through the link");
    assert.notEqual(target.gid, 4321, "lchown does not go through the link");

    // Read-only volumes get group read, not write.
    const ro = join(root, "ro");
    await Deno.mkdir(ro);
    await Deno.writeTextFile(join(ro, "f"), "z");
    await Deno.chmod(join(ro, "f"), 0o600);
    await setVolumeOwnership(ro, 4321, { readOnly: true, logger: quiet });
    assert.equal((await Deno.stat(join(ro, "f"))).mode! & 0o7777, 0o640);
  });
});

Deno.test("setVolumeOwnership with OnRootMismatch changes nothing when the root already matches", async () => {
  if (!needsRoot("chown to an fsGroup")) return;
  await withTempDir(async (root) => {
    const vol = join(root, "vol");
    await Deno.mkdir(vol);
    await Deno.writeTextFile(join(vol, "f"), "x");
    await Deno.chmod(join(vol, "f"), 0o600);
    // The root lacks the group: everything is changed, as with Always.
    await setVolumeOwnership(vol, 4321, { logger: quiet, changePolicy: "OnRootMismatch" });
    assert.equal((await Deno.stat(join(vol, "f"))).gid, 4321);
    assert.equal((await Deno.stat(vol)).mode! & 0o2070, 0o2070, "setgid and group rwx");
    // Now the root matches: a file changed since is left alone.
    await Deno.chown(join(vol, "f"), -1, 0);
    await setVolumeOwnership(vol, 4321, { logger: quiet, changePolicy: "OnRootMismatch" });
    assert.equal((await Deno.stat(join(vol, "f"))).gid, 0);
    // Always changes it again.
    await setVolumeOwnership(vol, 4321, { logger: quiet });
    assert.equal((await Deno.stat(join(vol, "f"))).gid, 4321);
  });
});

Deno.test("EmptyDirPlugin mounts and tears down a real tmpfs", async () => {
  if (!needsRoot("mounting tmpfs")) return;
  await withTempDir(async (root) => {
    const dir = join(root, "pods", "uid", "volumes", "kubernetes.io~empty-dir", "mem");
    const plugin = new EmptyDirPlugin({ mounter: new Mounter(), logger: quiet });
    const real = async () => {
      const text = await Deno.readTextFile("/proc/self/mountinfo");
      const mine = await Deno.realPath(root);
      return text.split("\n").filter((l) => l.split(" ")[4]?.startsWith(mine));
    };
    try {
      await plugin.setUp({ pod: podOf(), volume: emptyDir("mem", "Memory", "1Mi"), dir });
      const lines = await real();
      assert.equal(lines.length, 1, lines.join("\n"));
      assert.match(lines[0] ?? "", / - tmpfs tmpfs .*size=1024k/);
      await Deno.writeTextFile(join(dir, "f"), "in memory");

      // Set-up again: no second mount stacked on the first.
      await plugin.setUp({ pod: podOf(), volume: emptyDir("mem", "Memory", "1Mi"), dir });
      assert.equal((await real()).length, 1);
    } finally {
      await plugin.tearDown({ podUid: "uid", volumeName: "mem", dir });
    }
    assert.deepEqual(await real(), []);
    await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
  });
});
