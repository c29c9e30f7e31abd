import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1PersistentVolume, V1Pod, V1Volume } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { Mounter } from "../util/mount.ts";
import { TokenManager } from "../token/token_manager.ts";
import { FakeClock } from "../util/clock.ts";
import { probeVolumePlugins, type VolumePluginsOptions } from "./plugins.ts";

const logger = createLogger({ write: () => {} });

/** Plugins over a mounter that records its commands and never mounts. */
function plugins(opts: Partial<VolumePluginsOptions> = {}) {
  const commands: string[][] = [];
  const mounter = new Mounter({
    run: (cmd, args) => {
      commands.push([cmd, ...args]);
      return Promise.resolve("");
    },
    readMountInfo: () => Promise.resolve(""),
  });
  const clock = new FakeClock();
  const list = probeVolumePlugins({
    mounter,
    tokens: new TokenManager({ clock, logger }),
    nodeAllocatable: () => undefined,
    logger,
    ...opts,
  });
  return { list, commands };
}

function podWith(volume: V1Volume, limits?: Record<string, string>): V1Pod {
  return {
    metadata: { name: "p", namespace: "ns", uid: "uid-1" },
    spec: {
      containers: [{
        name: "c",
        volumeMounts: [{ name: volume.name, mountPath: "/v" }],
        resources: limits ? { limits } : undefined,
      }],
      volumes: [volume],
    },
  };
}

Deno.test("probeVolumePlugins has the in-tree plugins, each volume or PV type taken by one", () => {
  const { list } = plugins();
  assert.deepEqual(list.map((p) => p.name), [
    "kubernetes.io/empty-dir",
    "kubernetes.io/host-path",
    "kubernetes.io/secret",
    "kubernetes.io/configmap",
    "kubernetes.io/downward-api",
    "kubernetes.io/projected",
    "kubernetes.io/image",
    "kubernetes.io/local-volume",
    "kubernetes.io/nfs",
  ]);
  const volumes: [V1Volume, string][] = [
    [{ name: "a", emptyDir: {} }, "kubernetes.io/empty-dir"],
    [{ name: "b", hostPath: { path: "/x" } }, "kubernetes.io/host-path"],
    [{ name: "c", secret: { secretName: "s" } }, "kubernetes.io/secret"],
    [{ name: "d", configMap: { name: "c" } }, "kubernetes.io/configmap"],
    [{ name: "e", downwardAPI: {} }, "kubernetes.io/downward-api"],
    [{ name: "f", projected: { sources: [] } }, "kubernetes.io/projected"],
    [{ name: "i", image: { reference: "data:1" } }, "kubernetes.io/image"],
    [{ name: "n", nfs: { server: "s", path: "/e" } }, "kubernetes.io/nfs"],
  ];
  for (const [v, name] of volumes) {
    assert.deepEqual(list.filter((p) => p.canSupport(v)).map((p) => p.name), [name]);
  }
  // PersistentVolumes: hostPath, local and nfs here (CSI's plugin is added by the pod lifecycle).
  const pvs: [V1PersistentVolume, string][] = [
    [{ spec: { hostPath: { path: "/x" } } }, "kubernetes.io/host-path"],
    [{ spec: { local: { path: "/x" } } }, "kubernetes.io/local-volume"],
    [{ spec: { nfs: { server: "s", path: "/e" } } }, "kubernetes.io/nfs"],
  ];
  for (const [pv, name] of pvs) {
    assert.deepEqual(
      list.filter((p) => p.canSupportPersistentVolume?.(pv)).map((p) => p.name),
      [name],
    );
  }
  // A type without a plugin is taken by none: the volume manager fails it loudly.
  const iscsi: V1Volume = {
    name: "g",
    iscsi: { targetPortal: "t", iqn: "i", lun: 0 },
  };
  assert.equal(list.filter((p) => p.canSupport(iscsi)).length, 0);
});

Deno.test("probeVolumePlugins without an apiserver fails configMap, secret and token volumes", async () => {
  const { list } = plugins();
  const dir = await Deno.makeTempDir({ prefix: "volume_plugins_test_" });
  try {
    const cases: [V1Volume, RegExp][] = [
      [
        { name: "cfg", configMap: { name: "settings" } },
        /^couldn't get configMap ns\/settings, no kubeClient defined$/,
      ],
      [
        { name: "sec", secret: { secretName: "creds" } },
        /^couldn't get secret ns\/creds, no kubeClient defined$/,
      ],
      [
        { name: "tok", projected: { sources: [{ serviceAccountToken: { path: "token" } }] } },
        /cannot use TokenManager when kubelet is in standalone mode/,
      ],
    ];
    for (const [volume, message] of cases) {
      const plugin = list.find((p) => p.canSupport(volume))!;
      await assert.rejects(
        plugin.setUp({ pod: podWith(volume), volume, dir: join(dir, volume.name) }),
        (e) => e instanceof Error && message.test(e.message),
        volume.name,
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("probeVolumePlugins bounds a memory emptyDir by the node's allocatable memory", async () => {
  let allocatable: Record<string, string> | undefined = { memory: "1Gi" };
  const { list, commands } = plugins({ nodeAllocatable: () => allocatable });
  const dir = await Deno.makeTempDir({ prefix: "volume_plugins_test_" });
  try {
    const volume: V1Volume = { name: "mem", emptyDir: { medium: "Memory" } };
    const emptyDir = list[0]!;
    await emptyDir.setUp({ pod: podWith(volume), volume, dir: join(dir, "a") });
    // Unknown or unparsable allocatable: only the pod's limit bounds it.
    allocatable = { memory: "lots" };
    await emptyDir.setUp({ pod: podWith(volume, { memory: "64Mi" }), volume, dir: join(dir, "b") });
    const sizes = commands.filter((c) => c[0] === "mount").map((c) =>
      c.find((a) => a.includes("size="))
    );
    assert.deepEqual(sizes.map((o) => /size=(\d+)$/.exec(o ?? "")?.[1]), [
      String(2 ** 30),
      String(64 * 2 ** 20),
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("probeVolumePlugins bounds secret and projected tmpfs by the node's allocatable memory", async () => {
  const { list, commands } = plugins({
    nodeAllocatable: () => ({ memory: "512Mi" }),
    secrets: {
      get: () => Promise.resolve({ metadata: { name: "creds" }, data: { k: btoa("v") } }),
    },
  });
  const dir = await Deno.makeTempDir({ prefix: "volume_plugins_test_" });
  try {
    const volumes: V1Volume[] = [
      { name: "sec", secret: { secretName: "creds" } },
      { name: "proj", projected: { sources: [{ secret: { name: "creds" } }] } },
    ];
    for (const volume of volumes) {
      const plugin = list.find((p) => p.canSupport(volume))!;
      await plugin.setUp({ pod: podWith(volume), volume, dir: join(dir, volume.name) });
    }
    const sizes = commands.filter((c) => c[0] === "mount").map((c) =>
      c.find((a) => a.includes("size="))
    );
    assert.deepEqual(sizes, [`size=${512 * 2 ** 20}`, `size=${512 * 2 ** 20}`]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
