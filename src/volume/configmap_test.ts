import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ConfigMap, V1ConfigMapVolumeSource, V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { DEFAULT_VOLUME_MODE, keyToPathPayload } from "./_projection.ts";
import { CONFIG_MAP_PLUGIN_NAME, ConfigMapPlugin, makeConfigMapPayload } from "./configmap.ts";
import { podVolumeDir, VolumeSourceError } from "./plugin.ts";

const quiet = createLogger({ write: () => {} });
const text = (s: string) => new TextEncoder().encode(s);

/** True when the test may chown; else skips loudly, or throws under CI=true. */
function needsRoot(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

function podWith(source: V1ConfigMapVolumeSource, fsGroup?: number): V1Pod {
  return {
    metadata: { name: "p", namespace: "ns", uid: "uid-1" },
    spec: {
      containers: [{ name: "c" }],
      volumes: [{ name: "cfg", configMap: source }],
      securityContext: fsGroup === undefined ? undefined : { fsGroup },
    },
  };
}

/** A plugin over a mutable map of ConfigMaps in namespace ns, with the pods dir in a temp dir. */
async function fixture() {
  const root = await Deno.makeTempDir({ prefix: "configmap_test_" });
  const store = new Map<string, V1ConfigMap>();
  const gets: string[] = [];
  const plugin = new ConfigMapPlugin({
    configMaps: {
      get(namespace, name) {
        gets.push(`${namespace}/${name}`);
        return Promise.resolve(namespace === "ns" ? store.get(name) : undefined);
      },
    },
    logger: quiet,
    clock: new FakeClock(),
  });
  const dir = podVolumeDir(join(root, "pods"), "uid-1", CONFIG_MAP_PLUGIN_NAME, "cfg");
  const setUp = (pod: V1Pod) => {
    const volume = pod.spec?.volumes?.[0];
    assert.ok(volume);
    return plugin.setUp({ pod, volume, dir });
  };
  const cleanup = () => Deno.remove(root, { recursive: true });
  return { root, store, gets, plugin, dir, setUp, cleanup };
}

/** The user-visible names in a volume directory (without the writer's `..` entries). */
async function visible(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) if (!e.name.startsWith("..")) names.push(e.name);
  return names.sort();
}

const mode = async (path: string) => ((await Deno.stat(path)).mode ?? 0) & 0o7777;

Deno.test("ConfigMapPlugin handles configMap volumes and must remount on every sync", async () => {
  const f = await fixture();
  try {
    assert.equal(f.plugin.name, "kubernetes.io/configmap");
    assert.equal(f.plugin.requiresRemount, true);
    assert.equal(f.plugin.canSupport({ name: "v", configMap: { name: "x" } }), true);
    assert.equal(f.plugin.canSupport({ name: "v", secret: { secretName: "x" } }), false);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin projects every key with the default mode 0644", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", {
      metadata: { name: "cm" },
      data: { "app.conf": "a=1\n", "ünï": "ß" },
      binaryData: { "blob.bin": btoa("\x00\x01\xff") },
    });
    const mounted = await f.setUp(podWith({ name: "cm" }));
    assert.deepEqual(mounted, { hostPath: f.dir, readOnly: true, selinuxRelabel: true });
    assert.deepEqual(f.gets, ["ns/cm"]);
    assert.deepEqual(await visible(f.dir), ["app.conf", "blob.bin", "ünï"]);
    assert.equal(await Deno.readTextFile(join(f.dir, "app.conf")), "a=1\n");
    assert.equal(await Deno.readTextFile(join(f.dir, "ünï")), "ß");
    assert.deepEqual(await Deno.readFile(join(f.dir, "blob.bin")), new Uint8Array([0, 1, 255]));
    assert.equal(await mode(join(f.dir, "app.conf")), 0o644);
    assert.equal(DEFAULT_VOLUME_MODE, 0o644);
    // The wrapped emptyDir's directory mode, whatever the umask.
    assert.equal(await mode(f.dir), 0o777);
    assert.equal(await Deno.readLink(join(f.dir, "app.conf")), "..data/app.conf");
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin maps items to paths with per-item modes and the source's defaultMode", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { a: "A", b: "B", c: "C" } });
    await f.setUp(podWith({
      name: "cm",
      defaultMode: 0o640,
      items: [{ key: "a", path: "sub/dir/x", mode: 0o600 }, { key: "b", path: "y" }],
    }));
    assert.deepEqual(await visible(f.dir), ["sub", "y"]);
    assert.equal(await Deno.readTextFile(join(f.dir, "sub/dir/x")), "A");
    assert.equal(await Deno.readTextFile(join(f.dir, "y")), "B");
    assert.equal(await mode(join(f.dir, "sub/dir/x")), 0o600);
    assert.equal(await mode(join(f.dir, "y")), 0o640);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin sets up an empty volume for a missing optional ConfigMap", async () => {
  const f = await fixture();
  try {
    await f.setUp(podWith({ name: "absent", optional: true, items: [{ key: "k", path: "k" }] }));
    assert.deepEqual(await visible(f.dir), []);
    assert.ok((await Deno.lstat(join(f.dir, "..data"))).isSymlink);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin fails for a missing required ConfigMap without creating the dir", async () => {
  const f = await fixture();
  try {
    await assert.rejects(f.setUp(podWith({ name: "absent" })), (err: unknown) => {
      assert.ok(err instanceof VolumeSourceError);
      assert.equal(err.message, `configmap "absent" not found`);
      return true;
    });
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin fails for a missing key unless the source is optional", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { a: "A" } });
    const items = [{ key: "a", path: "a" }, { key: "nope", path: "n" }];
    await assert.rejects(f.setUp(podWith({ name: "cm", items })), {
      name: "VolumeSourceError",
      message: "configmap references non-existent config key: nope",
    });
    await f.setUp(podWith({ name: "cm", items, optional: true }));
    assert.deepEqual(await visible(f.dir), ["a"]);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin refuses a key or path that escapes the volume and writes nothing", async () => {
  const f = await fixture();
  try {
    f.store.set("bad", { metadata: { name: "bad" }, data: { "../escape": "x", ok: "y" } });
    await assert.rejects(f.setUp(podWith({ name: "bad" })), (err: unknown) => {
      assert.ok(err instanceof VolumeSourceError);
      assert.match(err.message, /key \.\.\/escape: invalid path: must not contain '\.\.'/);
      return true;
    });
    f.store.set("cm", { metadata: { name: "cm" }, data: { k: "x" } });
    await assert.rejects(
      f.setUp(podWith({ name: "cm", items: [{ key: "k", path: "a/../../escape" }] })),
      /key k: invalid path/,
    );
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
    const parent = join(f.dir, "..");
    await assert.rejects(Deno.lstat(join(parent, "escape")), Deno.errors.NotFound);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin makes an update visible through the same path by swapping ..data", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { k: "v1", gone: "soon" } });
    const pod = podWith({ name: "cm" });
    await f.setUp(pod);
    const path = join(f.dir, "k");
    assert.equal(await Deno.readTextFile(path), "v1");
    const before = await Deno.readLink(join(f.dir, "..data"));
    f.store.set("cm", { metadata: { name: "cm" }, data: { k: "v2" } });
    await f.setUp(pod);
    assert.equal(await Deno.readTextFile(path), "v2");
    assert.notEqual(await Deno.readLink(join(f.dir, "..data")), before);
    assert.deepEqual(await visible(f.dir), ["k"]);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin keeps a working volume when an update cannot be written", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { a: "A", b: "B" } });
    await f.setUp(podWith({ name: "cm" }));
    // "x" as a file and as a directory cannot both be written.
    const clash = [{ key: "a", path: "x" }, { key: "b", path: "x/y" }];
    await assert.rejects(f.setUp(podWith({ name: "cm", items: clash })), /ts data directory/);
    assert.deepEqual(await visible(f.dir), ["a", "b"]);
    assert.equal(await Deno.readTextFile(join(f.dir, "a")), "A");
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin removes the directory it created when the first write fails", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { a: "A", b: "B" } });
    const clash = [{ key: "a", path: "x" }, { key: "b", path: "x/y" }];
    await assert.rejects(f.setUp(podWith({ name: "cm", items: clash })), /ts data directory/);
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin gives the pod's fsGroup group read on every file", async () => {
  if (!needsRoot("fsGroup ownership")) return;
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { k: "v" } });
    await f.setUp(podWith({ name: "cm", defaultMode: 0o600 }, 4321));
    const file = await Deno.stat(join(f.dir, "k"));
    assert.equal(file.gid, 4321);
    assert.equal((file.mode ?? 0) & 0o777, 0o640);
    const link = await Deno.lstat(join(f.dir, "k"));
    assert.equal(link.gid, 4321);
    const dir = await Deno.stat(f.dir);
    assert.equal(dir.gid, 4321);
    assert.equal((dir.mode ?? 0) & 0o2000, 0o2000);
    const ts = await Deno.stat(join(f.dir, "..data"));
    assert.equal(ts.gid, 4321);
    assert.equal((ts.mode ?? 0) & 0o2550, 0o2550);
  } finally {
    await f.cleanup();
  }
});

Deno.test("ConfigMapPlugin tearDown removes the volume directory and accepts a missing one", async () => {
  const f = await fixture();
  try {
    f.store.set("cm", { metadata: { name: "cm" }, data: { k: "v" } });
    await f.setUp(podWith({ name: "cm" }));
    const ctx = { podUid: "uid-1", volumeName: "cfg", dir: f.dir };
    await f.plugin.tearDown(ctx);
    await assert.rejects(Deno.lstat(f.dir), Deno.errors.NotFound);
    await f.plugin.tearDown(ctx);
  } finally {
    await f.cleanup();
  }
});

Deno.test("makeConfigMapPayload serves projected sources with the caller's default mode", () => {
  const cm: V1ConfigMap = { metadata: { name: "cm" }, data: { a: "A" }, binaryData: { b: "Qg==" } };
  const payload = makeConfigMapPayload({ name: "cm" }, cm, 0o400, "ns");
  assert.deepEqual(
    payload,
    new Map([["b", { data: text("B"), mode: 0o400 }], [
      "a",
      { data: text("A"), mode: 0o400 },
    ]]),
  );
  assert.deepEqual(
    makeConfigMapPayload({ name: "x", optional: true }, undefined, 0o644, "ns"),
    new Map(),
  );
  assert.throws(() => makeConfigMapPayload({ name: "x" }, undefined, 0o644, "ns"), {
    message: `configmap "x" not found`,
  });
  assert.throws(
    () => makeConfigMapPayload({ name: "cm" }, { binaryData: { b: "***" } }, 0o644, "ns"),
    /binaryData key b of configmap ns\/cm: invalid base64/,
  );
});

Deno.test("keyToPathPayload follows upstream MakePayload for secrets too", () => {
  const data = new Map([["k", text("v")]]);
  const base = { data, defaultMode: 0o644, kind: "secret" as const, name: "s", namespace: "ns" };
  assert.deepEqual(
    keyToPathPayload({ ...base, items: [], optional: false }),
    new Map([["k", { data: text("v"), mode: 0o644 }]]),
  );
  assert.deepEqual(
    keyToPathPayload({ ...base, items: [{ key: "k", path: "p", mode: 0o400 }], optional: false }),
    new Map([["p", { data: text("v"), mode: 0o400 }]]),
  );
  assert.throws(
    () => keyToPathPayload({ ...base, items: [{ key: "x", path: "x" }], optional: false }),
    { name: "VolumeSourceError", message: "references non-existent secret key: x" },
  );
  assert.deepEqual(
    keyToPathPayload({ ...base, items: [{ key: "x", path: "x" }], optional: true }),
    new Map(),
  );
  assert.throws(
    () => keyToPathPayload({ ...base, items: [{ key: "k", path: "/abs" }], optional: false }),
    { message: `secret "ns/s": key k: invalid path: must be relative path: /abs` },
  );
});
