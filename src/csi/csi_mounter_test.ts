import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1PersistentVolume, V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { GrpcServer, GrpcStatusError } from "../cri/grpc_server.ts";
import { FakeKubeGetter } from "../testing/fake_kube_getter.ts";
import {
  NodeDefinition,
  VolumeCapability_AccessMode_Mode as Mode,
} from "../../proto/csi/v1/csi.ts";
import { CsiDrivers } from "./csi_plugin.ts";
import { accessModeOf, CsiCallError, isFinalCsiError } from "./csi_client.ts";
import { CriError } from "../cri/connection.ts";
import { FakeMounter } from "../testing/fake_mounter.ts";
import { parseGenericVersion } from "../util/version.ts";
import {
  attachmentName,
  csiEphemeralVolumeHandle,
  csiUniqueVolumeName,
  CsiVolumePlugin,
  type CsiVolumePluginOptions,
  loadVolumeData,
} from "./csi_mounter.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });

/** A driver's Node service that records its calls and mounts nothing. */
async function fakeDriver(
  socket: string,
  opts: { stage: boolean; failPublish?: number; caps?: number[] },
) {
  const calls: { method: string; request: Record<string, unknown> }[] = [];
  let failPublish = opts.failPublish;
  const ok = <Res>(method: string, reply: Res) => (request: object): Res => {
    calls.push({ method, request: request as Record<string, unknown> });
    if (method === "NodePublishVolume" && failPublish !== undefined) {
      const code = failPublish;
      failPublish = undefined;
      throw new GrpcStatusError(code, "publish failed");
    }
    return reply;
  };
  const server = await GrpcServer.listen({ path: socket });
  server.register(NodeDefinition, {
    nodeGetCapabilities: ok("NodeGetCapabilities", {
      capabilities: [...(opts.stage ? [1] : []), ...(opts.caps ?? [])].map((type) => ({
        rpc: { type },
      })),
    }),
    nodeGetVolumeStats: ok("NodeGetVolumeStats", {
      usage: [
        { unit: 1, total: 1000n, available: 600n, used: 400n },
        { unit: 2, total: 50n, available: 45n, used: 5n },
      ],
      volumeCondition: { abnormal: true, message: "failing" },
    }),
    nodeStageVolume: ok("NodeStageVolume", {}),
    nodeUnstageVolume: ok("NodeUnstageVolume", {}),
    nodePublishVolume: ok("NodePublishVolume", {}),
    nodeUnpublishVolume: ok("NodeUnpublishVolume", {}),
  });
  return { calls, [Symbol.asyncDispose]: () => server.close() };
}

const pod: V1Pod = {
  metadata: { name: "web", namespace: "ns", uid: "pod-1" },
  spec: { containers: [], serviceAccountName: "sa" },
};

function pv(driver: string): V1PersistentVolume {
  return {
    metadata: { name: "pv-1" },
    spec: {
      accessModes: ["ReadOnlyMany"],
      mountOptions: ["noatime"],
      csi: { driver, volumeHandle: "h1", fsType: "ext4", volumeAttributes: { a: "b" } },
    },
  };
}

async function world(
  stage: boolean,
  objects: Record<string, unknown> = {},
  failPublish?: number,
  extra: {
    caps?: number[];
    volumeHealth?: boolean;
    tokens?: CsiVolumePluginOptions["tokens"];
  } = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "csi-mounter-" });
  const socket = join(dir, "csi.sock");
  const driver = await fakeDriver(socket, { stage, failPublish, caps: extra.caps });
  const drivers = new CsiDrivers();
  drivers.set("d.example.com", {
    endpoint: socket,
    highestSupportedVersion: parseGenericVersion("1.0.0"),
  });
  const client = new FakeKubeGetter(objects);
  const mounter = new FakeMounter();
  const commands = mounter.log;
  const plugin = new CsiVolumePlugin({
    drivers,
    client,
    nodeName: "node-a",
    rootDirectory: dir,
    podsDirectory: join(dir, "pods"),
    mounter,
    run: (cmd: string, args: readonly string[]) => {
      commands.push(`${cmd} ${args.join(" ")}`);
      return Promise.resolve("");
    },
    logger: quiet,
    volumeHealth: extra.volumeHealth ?? false,
    ...(extra.tokens ? { tokens: extra.tokens } : {}),
    now: () => 1234,
  });
  return {
    dir,
    driver,
    plugin,
    client,
    commands,
    async [Symbol.asyncDispose]() {
      await driver[Symbol.asyncDispose]();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("upstream's names: attachment, unique volume name, inline volume handle, access modes", () => {
  assert.equal(
    attachmentName("h1", "d.example.com", "node-a"),
    "csi-56e96c2339834ad8f38ffcbd6ff5f142830c24d75cd610d967becb01de5d8fb1",
  );
  assert.equal(csiUniqueVolumeName("d.example.com", "h1"), "kubernetes.io/csi/d.example.com^h1");
  assert.equal(
    csiEphemeralVolumeHandle(pod, "data"),
    "csi-6944c8dfe48761f20bab978d8831875f41b6aec713e02bf5703169c164beefc4",
  );
  assert.equal(accessModeOf("ReadWriteOnce", false), Mode.SINGLE_NODE_WRITER);
  assert.equal(accessModeOf("ReadWriteOnce", true), Mode.SINGLE_NODE_MULTI_WRITER);
  assert.equal(accessModeOf("ReadWriteOncePod", true), Mode.SINGLE_NODE_SINGLE_WRITER);
  assert.equal(accessModeOf("ReadOnlyMany", false), Mode.MULTI_NODE_READER_ONLY);
  assert.equal(accessModeOf("ReadWriteMany", false), Mode.MULTI_NODE_MULTI_WRITER);
  assert.equal(isFinalCsiError(new CsiCallError(new CriError("x", 14, "gone"))), false);
  assert.equal(isFinalCsiError(new CsiCallError(new CriError("x", 9, "no"))), true);
  assert.equal(isFinalCsiError(new Error("connection reset")), false);
});

Deno.test("CsiVolumePlugin stages once per node, publishes per pod, and unstages after the last pod", async () => {
  await using w = await world(true, {
    "/apis/storage.k8s.io/v1/csidrivers/d.example.com": { spec: { attachRequired: false } },
  });
  const spec = {
    name: "pv-1",
    volume: { name: "data", persistentVolumeClaim: { claimName: "c" } },
    persistentVolume: pv("d.example.com"),
    readOnly: true,
  };
  const dirOf = (uid: string) => join(w.dir, "pods", uid, "volumes", "kubernetes.io~csi", "pv-1");
  const staging = join(
    w.dir,
    "plugins",
    "kubernetes.io/csi",
    "d.example.com",
    "33112ee14ee469c3eb52fe90322ec81dd404a0093d565a6d71ce77cbc8124e3b",
    "globalmount",
  );
  assert.equal(await w.plugin.attachment(spec), undefined);
  for (const uid of ["u1", "u2"]) {
    const p = { ...pod, metadata: { ...pod.metadata, uid } };
    const mounted = await w.plugin.setUp({ pod: p, volume: spec.volume, spec, dir: dirOf(uid) });
    assert.deepEqual(mounted, {
      hostPath: join(dirOf(uid), "mount"),
      readOnly: true,
      selinuxRelabel: false,
    });
  }
  const methods = w.driver.calls.map((c) => c.method).filter((m) => m !== "NodeGetCapabilities");
  assert.deepEqual(methods, ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]);
  const stage = w.driver.calls.find((c) => c.method === "NodeStageVolume")!.request;
  assert.equal(stage.stagingTargetPath, staging);
  assert.deepEqual(stage.volumeCapability, {
    block: undefined,
    mount: { fsType: "ext4", mountFlags: ["noatime"], volumeMountGroup: "" },
    accessMode: { mode: Mode.MULTI_NODE_READER_ONLY },
  });
  const publish = w.driver.calls.find((c) => c.method === "NodePublishVolume")!.request;
  assert.equal(publish.readonly, true);
  assert.equal(publish.stagingTargetPath, staging);
  assert.deepEqual(publish.volumeContext, { a: "b" });
  assert.deepEqual(await loadVolumeData(dirOf("u1")), {
    specVolID: "pv-1",
    volumeHandle: "h1",
    driverName: "d.example.com",
    nodeName: "node-a",
    attachmentID: "csi-56e96c2339834ad8f38ffcbd6ff5f142830c24d75cd610d967becb01de5d8fb1",
    volumeLifecycleMode: "Persistent",
  });

  // The first pod goes: unpublished only, the other pod still publishes the volume.
  await w.plugin.tearDown({ podUid: "u1", volumeName: "pv-1", dir: dirOf("u1") });
  const after1 = w.driver.calls.map((c) => c.method).filter((m) => m !== "NodeGetCapabilities");
  assert.deepEqual(after1.slice(3), ["NodeUnpublishVolume"]);
  assert.equal(await Deno.lstat(dirOf("u1")).then(() => true, () => false), false);
  await w.plugin.tearDown({ podUid: "u2", volumeName: "pv-1", dir: dirOf("u2") });
  const after2 = w.driver.calls.map((c) => c.method).filter((m) => m !== "NodeGetCapabilities");
  assert.deepEqual(after2.slice(4), ["NodeUnpublishVolume", "NodeUnstageVolume"]);
  assert.equal(await Deno.lstat(join(staging, "..")).then(() => true, () => false), false);
});

Deno.test("CsiVolumePlugin: an attaching driver waits for its VolumeAttachment, then publishes with its metadata", async () => {
  const va =
    "/apis/storage.k8s.io/v1/volumeattachments/csi-56e96c2339834ad8f38ffcbd6ff5f142830c24d75cd610d967becb01de5d8fb1";
  await using w = await world(false, {
    [va]: { metadata: { name: "x" }, status: { attached: false } },
  });
  const spec = {
    name: "pv-1",
    volume: { name: "data" },
    persistentVolume: pv("d.example.com"),
    readOnly: false,
  };
  assert.deepEqual(await w.plugin.attachment(spec), {
    uniqueName: "kubernetes.io/csi/d.example.com^h1",
  });
  const ctx = { pod, volume: spec.volume, spec, dir: join(w.dir, "pods", "pod-1", "v") };
  await assert.rejects(w.plugin.setUp(ctx), {
    name: "VolumeOperationError",
    operation: "MountVolume.WaitForAttach",
    message:
      "volume h1 is not attached for volume attachment csi-56e96c2339834ad8f38ffcbd6ff5f142830c24d75cd610d967becb01de5d8fb1",
  });
  // As external-attacher would.
  w.client.objects.set(va, {
    metadata: { name: "x" },
    status: { attached: true, attachmentMetadata: { dev: "/dev/x" } },
  });
  await w.plugin.setUp(ctx);
  const publish = w.driver.calls.find((c) => c.method === "NodePublishVolume")!.request;
  assert.deepEqual(publish.publishContext, { dev: "/dev/x" });
  // Not staging: no staging path.
  assert.equal(publish.stagingTargetPath, "");
});

Deno.test("CsiVolumePlugin: a final NodePublishVolume failure leaves nothing; an uncertain one is kept for tear-down", async () => {
  for (const [code, kept] of [[9, false], [14, true]] as const) {
    await using w = await world(false, {
      "/apis/storage.k8s.io/v1/csidrivers/d.example.com": { spec: { attachRequired: false } },
    }, code);
    const spec = {
      name: "pv-1",
      volume: { name: "data" },
      persistentVolume: pv("d.example.com"),
      readOnly: false,
    };
    const dir = join(w.dir, "pods", "pod-1", "v");
    await assert.rejects(w.plugin.setUp({ pod, volume: spec.volume, spec, dir }), /publish failed/);
    assert.equal(await loadVolumeData(dir).then((d) => d !== undefined), kept, `code ${code}`);
  }
});

Deno.test("CsiVolumePlugin refuses an inline volume of a driver without the Ephemeral mode, and unregistered drivers", async () => {
  await using w = await world(false);
  const volume = { name: "inline", csi: { driver: "d.example.com" } };
  await assert.rejects(
    w.plugin.setUp({ pod, volume, dir: join(w.dir, "v") }),
    {
      message:
        'kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode "Ephemeral" not supported by driver d.example.com (no CSIDriver object)',
    },
  );
  const other = { name: "inline", csi: { driver: "other.example.com" } };
  await assert.rejects(
    w.plugin.setUp({ pod, volume: other, dir: join(w.dir, "v") }),
    {
      message:
        "kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name other.example.com not found in the list of registered CSI drivers",
    },
  );
});

Deno.test("CsiVolumePlugin.getMetrics asks NodeGetVolumeStats of the published volume, its condition with the gate", async () => {
  const objects = {
    "/apis/storage.k8s.io/v1/csidrivers/d.example.com": { spec: { attachRequired: false } },
  };
  const spec = {
    name: "pv-1",
    volume: { name: "data" },
    persistentVolume: pv("d.example.com"),
    readOnly: false,
  };
  // Without GET_VOLUME_STATS: not supported (left out of the summary, nothing logged).
  {
    await using w = await world(false, objects);
    const dir = join(w.dir, "pods", "pod-1", "v");
    await w.plugin.setUp({ pod, volume: spec.volume, spec, dir });
    await assert.rejects(w.plugin.getMetrics(dir), {
      name: "MetricsNotSupportedError",
      message: "metrics are not supported for d.example.com volumes",
    });
  }
  for (const volumeHealth of [false, true]) {
    await using w = await world(false, objects, undefined, { caps: [2, 4], volumeHealth });
    const dir = join(w.dir, "pods", "pod-1", "v");
    await w.plugin.setUp({ pod, volume: spec.volume, spec, dir });
    const usage = await w.plugin.getMetrics(dir);
    assert.deepEqual(usage, {
      time: 1234,
      capacityBytes: 1000,
      availableBytes: 600,
      usedBytes: 400,
      inodes: 50,
      inodesFree: 45,
      inodesUsed: 5,
      ...(volumeHealth ? { abnormal: true, message: "failing" } : {}),
    });
    const req = w.driver.calls.find((c) => c.method === "NodeGetVolumeStats")!.request;
    assert.equal(req.volumeId, "h1");
    assert.equal(req.volumePath, join(dir, "mount"));
  }
});

Deno.test("CsiVolumePlugin maps a block volume as upstream lays it out, and unmaps it", async () => {
  await using w = await world(true, {
    "/apis/storage.k8s.io/v1/csidrivers/d.example.com": { spec: { attachRequired: false } },
  });
  const spec = {
    name: "pv-1",
    volume: { name: "disk", persistentVolumeClaim: { claimName: "c" } },
    persistentVolume: pv("d.example.com"),
    readOnly: false,
    block: true,
  };
  const devices = join(w.dir, "plugins", "kubernetes.io/csi", "volumeDevices");
  const link = join(w.dir, "pods", "pod-1", "volumeDevices", "kubernetes.io~csi", "pv-1");
  const mounted = await w.plugin.mapDevice({ pod, volume: spec.volume, spec, dir: link });
  assert.deepEqual(mounted, { hostPath: link, readOnly: false, selinuxRelabel: false });
  const stage = w.driver.calls.find((c) => c.method === "NodeStageVolume")!.request;
  assert.equal(stage.stagingTargetPath, join(devices, "staging", "pv-1"));
  assert.deepEqual(stage.volumeCapability, {
    block: {},
    mount: undefined,
    accessMode: { mode: Mode.MULTI_NODE_READER_ONLY },
  });
  const publish = w.driver.calls.find((c) => c.method === "NodePublishVolume")!.request;
  const target = join(devices, "publish", "pv-1", "pod-1");
  assert.equal(publish.targetPath, target);
  assert.equal(publish.stagingTargetPath, join(devices, "staging", "pv-1"));
  assert.equal(await Deno.readLink(link), target);
  const data = JSON.parse(await Deno.readTextFile(join(devices, "pv-1", "data", "vol_data.json")));
  assert.equal(data.volumeHandle, "h1");
  const bind = join(devices, "pv-1", "dev", "pod-1");
  assert.deepEqual(w.commands, [
    `mount -o bind ${target} ${bind}`,
    `losetup -j ${bind}`,
    `losetup -f ${bind}`,
  ]);

  await w.plugin.unmapDevice({ podUid: "pod-1", volumeName: "pv-1", dir: link });
  const after = w.driver.calls.map((c) => c.method).filter((m) => m !== "NodeGetCapabilities");
  assert.deepEqual(after.slice(-2), ["NodeUnpublishVolume", "NodeUnstageVolume"]);
  assert.equal(await Deno.lstat(link).then(() => true, () => false), false);
  assert.equal(await Deno.lstat(join(devices, "pv-1")).then(() => true, () => false), false);
  assert.equal(w.commands.at(-1), `umount ${bind}`);
});

Deno.test("CsiVolumePlugin passes tokenRequests' tokens in the volume context or the secrets, and republishes when asked", async () => {
  const asked: string[] = [];
  const tokens = {
    getServiceAccountToken: (
      ns: string,
      sa: string,
      spec: { audiences?: string[]; expirationSeconds?: number; boundObjectRef?: { uid?: string } },
    ) => {
      asked.push(
        `${ns}/${sa} ${
          JSON.stringify(spec.audiences)
        } ${spec.expirationSeconds} ${spec.boundObjectRef?.uid}`,
      );
      return Promise.resolve({
        token: `tok-${spec.audiences?.[0] ?? "api"}`,
        expirationTimestamp: "2026-12-06T18:00:00Z",
      });
    },
  };
  const driverPath = "/apis/storage.k8s.io/v1/csidrivers/d.example.com";
  const csiDriver = (inSecrets: boolean) => ({
    spec: {
      attachRequired: false,
      requiresRepublish: true,
      tokenRequests: [{ audience: "vault" }, { audience: "", expirationSeconds: 3600 }],
      ...(inSecrets ? { serviceAccountTokenInSecrets: true } : {}),
    },
  });
  const spec = {
    name: "pv-1",
    volume: { name: "data" },
    persistentVolume: pv("d.example.com"),
    readOnly: false,
  };
  const expected = JSON.stringify({
    "": { token: "tok-api", expirationTimestamp: "2026-12-06T18:00:00Z" },
    vault: { token: "tok-vault", expirationTimestamp: "2026-12-06T18:00:00Z" },
  });
  for (const inSecrets of [false, true]) {
    await using w = await world(false, { [driverPath]: csiDriver(inSecrets) }, undefined, {
      tokens,
    });
    assert.equal(await w.plugin.requiresRemountFor(spec), true);
    await w.plugin.setUp({ pod, volume: spec.volume, spec, dir: join(w.dir, "v") });
    const publish = w.driver.calls.find((c) => c.method === "NodePublishVolume")!.request;
    const where = (inSecrets ? publish.secrets : publish.volumeContext) as Record<string, string>;
    const other = (inSecrets ? publish.volumeContext : publish.secrets) as Record<string, string>;
    assert.equal(where["csi.storage.k8s.io/serviceAccount.tokens"], expected);
    assert.equal(other["csi.storage.k8s.io/serviceAccount.tokens"], undefined);
  }
  assert.deepEqual(asked.slice(0, 2), [
    'ns/sa ["vault"] undefined pod-1',
    "ns/sa [] 3600 pod-1",
  ]);
  // Without a token manager such a driver's volumes fail; without the flag nothing republishes.
  await using w = await world(false, { [driverPath]: csiDriver(false) });
  await assert.rejects(w.plugin.setUp({ pod, volume: spec.volume, spec, dir: join(w.dir, "v") }), {
    message: "kubernetes.io/csi: ServiceAccountTokenGetter is nil",
  });
  await using plain = await world(false, { [driverPath]: { spec: { attachRequired: false } } });
  assert.equal(await plain.plugin.requiresRemountFor(spec), false);
});
