import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod, V1Secret, V1SecretVolumeSource } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { type CommandRunner, Mounter, parseMountInfo } from "../util/mount.ts";
import { makeSecretPayload, SECRET_PLUGIN_NAME, SecretPlugin } from "./secret.ts";
import { podVolumeDir, VolumeSourceError } from "./plugin.ts";

const quiet = createLogger({ write: () => {} });
const text = (s: string) => new TextEncoder().encode(s);

/** True when the test may mount; else skips loudly, or throws under CI=true. */
function needsRoot(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

/** A Mounter whose commands are recorded and act on an in-memory mount table only. */
function fakeMounter(initial: { mountPoint: string; fsType: string }[] = []) {
  const table = [...initial];
  const calls: string[] = [];
  const run: CommandRunner = (cmd, args) => {
    calls.push([cmd, ...args].join(" "));
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
        `${100 + i} 1 0:${50 + i} / ${m.mountPoint} rw,relatime - ${m.fsType} ${m.fsType} rw`
      ).join("\n"),
    );
  return { calls, table, mounter: new Mounter({ run, readMountInfo }) };
}

function podWith(source: V1SecretVolumeSource, memoryLimit?: string): V1Pod {
  return {
    metadata: { name: "p", namespace: "ns", uid: "uid-1" },
    spec: {
      containers: [{
        name: "c",
        resources: memoryLimit === undefined ? undefined : {
          limits: { memory: memoryLimit, cpu: "1" },
          requests: { memory: memoryLimit, cpu: "1" },
        },
      }],
      volumes: [{ name: "sec", secret: source }],
    },
  };
}

/** A plugin over a mutable map of Secrets in namespace ns, with the pods dir in a temp dir. */
async function fixture(mounter: Mounter) {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "secret_test_" }));
  const store = new Map<string, V1Secret>();
  const plugin = new SecretPlugin({
    secrets: { get: (ns, name) => Promise.resolve(ns === "ns" ? store.get(name) : undefined) },
    mounter,
    logger: quiet,
    clock: new FakeClock(),
  });
  const dir = podVolumeDir(join(root, "pods"), "uid-1", SECRET_PLUGIN_NAME, "sec");
  const setUp = (pod: V1Pod) => {
    const volume = pod.spec?.volumes?.[0];
    assert.ok(volume);
    return plugin.setUp({ pod, volume, dir });
  };
  const tearDown = () => plugin.tearDown({ podUid: "uid-1", volumeName: "sec", dir });
  const cleanup = () => Deno.remove(root, { recursive: true });
  return { store, plugin, dir, setUp, tearDown, cleanup };
}

const secret = (data: Record<string, string>): V1Secret => ({
  metadata: { name: "s" },
  data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, btoa(v)])),
});

Deno.test("SecretPlugin mounts a tmpfs once, writes decoded data and unmounts at tearDown", async () => {
  const fake = fakeMounter();
  const f = await fixture(fake.mounter);
  try {
    assert.equal(f.plugin.name, "kubernetes.io/secret");
    assert.equal(f.plugin.requiresRemount, true);
    assert.equal(f.plugin.canSupport({ name: "v", secret: {} }), true);
    assert.equal(f.plugin.canSupport({ name: "v", configMap: {} }), false);
    f.store.set("s", secret({ token: "t0ps3cret", "ca.crt": "PEM" }));
    const pod = podWith({ secretName: "s" });
    const mounted = await f.setUp(pod);
    assert.deepEqual(mounted, { hostPath: f.dir, readOnly: true, selinuxRelabel: true });
    assert.deepEqual(fake.calls, [`mount -t tmpfs tmpfs ${f.dir}`]);
    assert.equal(await Deno.readTextFile(join(f.dir, "token")), "t0ps3cret");
    assert.equal(((await Deno.stat(join(f.dir, "ca.crt"))).mode ?? 0) & 0o777, 0o644);
    // Already a tmpfs: a resync writes again without mounting again.
    f.store.set("s", secret({ token: "rotated" }));
    await f.setUp(pod);
    assert.equal(fake.calls.length, 1);
    assert.equal(await Deno.readTextFile(join(f.dir, "token")), "rotated");
    await f.tearDown();
    assert.deepEqual(fake.calls.slice(1), [`umount ${f.dir}`]);
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
    await f.tearDown();
    assert.equal(fake.calls.length, 2);
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin sizes the tmpfs to the pod's memory limit", async () => {
  const fake = fakeMounter();
  const f = await fixture(fake.mounter);
  try {
    f.store.set("s", secret({ k: "v" }));
    await f.setUp(podWith({ secretName: "s" }, "64Mi"));
    assert.deepEqual(fake.calls, [`mount -t tmpfs -o size=${64 * 1024 * 1024} tmpfs ${f.dir}`]);
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin applies items, per-item modes and defaultMode", async () => {
  const f = await fixture(fakeMounter().mounter);
  try {
    f.store.set("s", secret({ a: "A", b: "B", c: "C" }));
    await f.setUp(podWith({
      secretName: "s",
      defaultMode: 0o400,
      items: [{ key: "a", path: "dir/a.txt", mode: 0o440 }, { key: "b", path: "b.txt" }],
    }));
    assert.equal(await Deno.readTextFile(join(f.dir, "dir/a.txt")), "A");
    assert.equal(((await Deno.stat(join(f.dir, "dir/a.txt"))).mode ?? 0) & 0o777, 0o440);
    assert.equal(((await Deno.stat(join(f.dir, "b.txt"))).mode ?? 0) & 0o777, 0o400);
    await assert.rejects(Deno.lstat(join(f.dir, "c")), Deno.errors.NotFound);
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin reports a missing Secret or key, and mounts nothing", async () => {
  const fake = fakeMounter();
  const f = await fixture(fake.mounter);
  try {
    await assert.rejects(f.setUp(podWith({ secretName: "absent" })), (err: unknown) => {
      assert.ok(err instanceof VolumeSourceError);
      assert.equal(err.message, `secret "absent" not found`);
      return true;
    });
    f.store.set("s", secret({ a: "A" }));
    await assert.rejects(
      f.setUp(podWith({ secretName: "s", items: [{ key: "missing", path: "m" }] })),
      { message: "references non-existent secret key: missing" },
    );
    assert.deepEqual(fake.calls, []);
    await f.setUp(podWith({ secretName: "absent", optional: true }));
    assert.deepEqual(fake.calls, [`mount -t tmpfs tmpfs ${f.dir}`]);
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin unmounts and removes a volume whose first write fails", async () => {
  const fake = fakeMounter();
  const f = await fixture(fake.mounter);
  try {
    f.store.set("s", secret({ a: "A", b: "B" }));
    const clash = [{ key: "a", path: "x" }, { key: "b", path: "x/y" }];
    await assert.rejects(f.setUp(podWith({ secretName: "s", items: clash })), /ts data directory/);
    assert.deepEqual(fake.calls, [`mount -t tmpfs tmpfs ${f.dir}`, `umount ${f.dir}`]);
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin keeps a mounted volume when an update fails", async () => {
  const fake = fakeMounter();
  const f = await fixture(fake.mounter);
  try {
    f.store.set("s", secret({ a: "A", b: "B" }));
    await f.setUp(podWith({ secretName: "s" }));
    const clash = [{ key: "a", path: "x" }, { key: "b", path: "x/y" }];
    await assert.rejects(f.setUp(podWith({ secretName: "s", items: clash })), /ts data directory/);
    assert.deepEqual(fake.calls, [`mount -t tmpfs tmpfs ${f.dir}`]);
    assert.equal(await Deno.readTextFile(join(f.dir, "a")), "A");
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin tearDown refuses to empty a mount that is not tmpfs", async () => {
  const fake = fakeMounter();
  const f = await fixture(fake.mounter);
  try {
    await Deno.mkdir(f.dir, { recursive: true });
    await Deno.writeTextFile(join(f.dir, "keep"), "x");
    fake.table.push({ mountPoint: f.dir, fsType: "ext4" });
    await assert.rejects(f.tearDown(), /is a ext4 mount point; .* is not supported yet/);
    assert.equal(await Deno.readTextFile(join(f.dir, "keep")), "x");
    assert.deepEqual(fake.calls, []);
  } finally {
    await f.cleanup();
  }
});

Deno.test("SecretPlugin really mounts a tmpfs and tearDown unmounts it", async () => {
  if (!needsRoot("mounting tmpfs")) return;
  const f = await fixture(new Mounter());
  const mountedAt = async (dir: string) =>
    parseMountInfo(await Deno.readTextFile("/proc/self/mountinfo"))
      .filter((m) => m.mountPoint === dir)
      .map((m) => m.fsType);
  try {
    f.store.set("s", secret({ token: "t0ps3cret" }));
    await f.setUp(podWith({ secretName: "s" }));
    assert.deepEqual(await mountedAt(f.dir), ["tmpfs"]);
    assert.equal(await Deno.readTextFile(join(f.dir, "token")), "t0ps3cret");
    await f.setUp(podWith({ secretName: "s" }));
    assert.deepEqual(await mountedAt(f.dir), ["tmpfs"]);
    await f.tearDown();
    assert.deepEqual(await mountedAt(f.dir), []);
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
  } finally {
    // Never leave a mount behind, even when an assertion failed.
    for (let i = 0; i < 4 && (await mountedAt(f.dir)).length > 0; i++) {
      await new Deno.Command("umount", { args: [f.dir] }).output();
    }
    await f.cleanup();
  }
});

Deno.test("makeSecretPayload reads volume and projected sources alike", () => {
  const s = secret({ k: "v" });
  const want = new Map([["k", { data: text("v"), mode: 0o600 }]]);
  assert.deepEqual(makeSecretPayload({ secretName: "s" }, s, 0o600, "ns"), want);
  assert.deepEqual(makeSecretPayload({ name: "s" }, s, 0o600, "ns"), want);
  assert.throws(() => makeSecretPayload({ name: "p" }, undefined, 0o644, "ns"), {
    message: `secret "p" not found`,
  });
  assert.deepEqual(
    makeSecretPayload({ name: "p", optional: true }, undefined, 0o644, "ns"),
    new Map(),
  );
  assert.throws(
    () => makeSecretPayload({ name: "s" }, { data: { k: "%%%" } }, 0o644, "ns"),
    /key k of secret ns\/s: invalid base64/,
  );
});
