/**
 * @module
 * Tests of tests/csi_hostpath_driver.ts, called over its socket as the kubelet calls a driver
 * (src/cri/connection.ts's CriConnection): identity, capabilities and node info, the errors and
 * their gRPC codes, provisioning, failNext, a restart, and, as root, staging and publishing
 * mount, read-only, inline ephemeral and raw block volumes with real bind mounts and loop
 * devices (skipped loudly without root; failing under CI=true).
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CriConnection, CriError, criMethods, GrpcCode } from "../src/cri/connection.ts";
import {
  ControllerDefinition,
  ControllerServiceCapability_RPC_Type,
  IdentityDefinition,
  NodeDefinition,
  NodeServiceCapability_RPC_Type,
  PluginCapability_Service_Type,
  type VolumeCapability,
  VolumeUsage_Unit,
} from "../proto/csi/v1/csi.ts";
import {
  EPHEMERAL_CONTEXT_KEY,
  type HostPathDriver,
  type HostPathDriverOptions,
  startHostPathDriver,
} from "./csi_hostpath_driver.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("CSI hostpath driver mount tests", [
  "mount",
  "umount",
  "mountpoint",
  "losetup",
]);

const identity = criMethods(IdentityDefinition);
const controller = criMethods(ControllerDefinition);
const node = criMethods(NodeDefinition);

const MOUNT: VolumeCapability = {
  mount: { fsType: "", mountFlags: [], volumeMountGroup: "" },
};
const BLOCK: VolumeCapability = { block: {} };

interface Env {
  readonly dir: string;
  readonly driver: HostPathDriver;
  readonly conn: CriConnection;
}

/** Runs `fn` with a driver on a temp socket and a connection to it; cleans both up. */
async function withDriver(
  fn: (env: Env) => Promise<void>,
  opts: Partial<HostPathDriverOptions> = {},
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "csi-hostpath-test-" });
  const driver = await startHostPathDriver({
    dir: join(dir, "driver"),
    socket: join(dir, "sock", "csi.sock"),
    name: "hostpath.csi.k8s.io",
    nodeId: "node-a",
    ...opts,
  });
  const conn = new CriConnection({ endpoint: `unix://${driver.socket}` });
  try {
    await fn({ dir, driver, conn });
  } finally {
    conn.close();
    await driver.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

/** The gRPC code a call fails with, and its message. */
async function failure(p: Promise<unknown>): Promise<{ code: number; details: string }> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof CriError, `not a CriError: ${e}`);
    return { code: e.code, details: e.details };
  }
  assert.fail("the call succeeded");
}

async function isMountpoint(path: string): Promise<boolean> {
  return (await new Deno.Command("mountpoint", { args: ["-q", path] }).output()).success;
}

const stageReq = (volumeId: string, stagingTargetPath: string, cap = MOUNT) => ({
  volumeId,
  stagingTargetPath,
  volumeCapability: cap,
  publishContext: {},
  secrets: {},
  volumeContext: {},
});

const publishReq = (
  volumeId: string,
  targetPath: string,
  more: { stagingTargetPath?: string; readonly?: boolean; cap?: VolumeCapability } = {},
  volumeContext: Record<string, string> = {},
) => ({
  volumeId,
  targetPath,
  stagingTargetPath: more.stagingTargetPath ?? "",
  volumeCapability: more.cap ?? MOUNT,
  readonly: more.readonly ?? false,
  publishContext: {},
  secrets: {},
  volumeContext,
});

Deno.test("HostPathDriver answers identity, capabilities and node info with its topology", async () => {
  await withDriver(async ({ driver, conn }) => {
    const info = await conn.unary(identity.getPluginInfo, {});
    assert.equal(info.name, "hostpath.csi.k8s.io");
    assert.match(info.vendorVersion, /^v1\.17\.0\+kubelet-ts$/);
    const plugin = await conn.unary(identity.getPluginCapabilities, {});
    assert.deepEqual(
      plugin.capabilities.flatMap((c) => c.service ? [c.service.type] : []),
      [
        PluginCapability_Service_Type.CONTROLLER_SERVICE,
        PluginCapability_Service_Type.VOLUME_ACCESSIBILITY_CONSTRAINTS,
      ],
    );
    assert.deepEqual(await conn.unary(identity.probe, {}), { ready: true });
    const ctl = await conn.unary(controller.controllerGetCapabilities, {});
    assert.deepEqual(ctl.capabilities.map((c) => c.rpc?.type), [
      ControllerServiceCapability_RPC_Type.CREATE_DELETE_VOLUME,
      ControllerServiceCapability_RPC_Type.EXPAND_VOLUME,
    ]);
    const caps = await conn.unary(node.nodeGetCapabilities, {});
    assert.deepEqual(caps.capabilities.map((c) => c.rpc?.type), [
      NodeServiceCapability_RPC_Type.STAGE_UNSTAGE_VOLUME,
      NodeServiceCapability_RPC_Type.GET_VOLUME_STATS,
      NodeServiceCapability_RPC_Type.EXPAND_VOLUME,
      NodeServiceCapability_RPC_Type.VOLUME_CONDITION,
    ]);
    assert.deepEqual(await conn.unary(node.nodeGetInfo, {}), {
      nodeId: "node-a",
      maxVolumesPerNode: 5n,
      accessibleTopology: { segments: { "topology.hostpath.csi/node": "node-a" } },
    });
    assert.deepEqual(driver.calls.map((c) => c.method), [
      "GetPluginInfo",
      "GetPluginCapabilities",
      "Probe",
      "ControllerGetCapabilities",
      "NodeGetCapabilities",
      "NodeGetInfo",
    ]);
  }, { maxVolumesPerNode: 5, topology: { "topology.hostpath.csi/node": "node-a" } });
});

Deno.test("HostPathDriver without staging or topology says so", async () => {
  await withDriver(async ({ conn }) => {
    const plugin = await conn.unary(identity.getPluginCapabilities, {});
    assert.deepEqual(plugin.capabilities.flatMap((c) => c.service ? [c.service.type] : []), [
      PluginCapability_Service_Type.CONTROLLER_SERVICE,
    ]);
    const caps = await conn.unary(node.nodeGetCapabilities, {});
    assert.ok(
      !caps.capabilities.some((c) =>
        c.rpc?.type === NodeServiceCapability_RPC_Type.STAGE_UNSTAGE_VOLUME
      ),
    );
    const info = await conn.unary(node.nodeGetInfo, {});
    assert.equal(info.accessibleTopology, undefined);
    assert.equal(info.maxVolumesPerNode, 0n);
  }, { stageUnstage: false });
});

Deno.test("HostPathDriver CreateVolume is idempotent by name; DeleteVolume removes the volume", async () => {
  await withDriver(async ({ driver, conn }) => {
    const req = {
      name: "pvc-1",
      capacityRange: { requiredBytes: 4096n, limitBytes: 0n },
      volumeCapabilities: [MOUNT],
      parameters: {},
      secrets: {},
      mutableParameters: {},
    };
    const first = await conn.unary(controller.createVolume, req);
    const again = await conn.unary(controller.createVolume, req);
    assert.ok(first.volume?.volumeId);
    assert.deepEqual(again, first);
    assert.equal(first.volume.capacityBytes, 4096n);
    const path = driver.volumePath(first.volume.volumeId);
    assert.ok((await Deno.stat(path)).isDirectory);
    // The same name with a capacity it does not have.
    const bigger = await failure(conn.unary(controller.createVolume, {
      ...req,
      capacityRange: { requiredBytes: 8192n, limitBytes: 0n },
    }));
    assert.equal(bigger.code, GrpcCode.ALREADY_EXISTS);
    assert.match(bigger.details, /"pvc-1" exists/);
    await conn.unary(controller.deleteVolume, { volumeId: first.volume.volumeId, secrets: {} });
    await assert.rejects(Deno.stat(path), Deno.errors.NotFound);
    // Deleting again is not an error.
    await conn.unary(controller.deleteVolume, { volumeId: first.volume.volumeId, secrets: {} });
  });
});

Deno.test("HostPathDriver fails with the spec's codes, naming the field and value", async () => {
  await withDriver(async ({ dir, driver, conn }) => {
    const unknown = await failure(
      conn.unary(node.nodeStageVolume, stageReq("nope", join(dir, "staging"))),
    );
    assert.equal(unknown.code, GrpcCode.NOT_FOUND);
    assert.equal(unknown.details, 'NodeStageVolume: volume_id "nope" not found');
    const missing = await failure(conn.unary(node.nodePublishVolume, publishReq("v1", "")));
    assert.equal(missing.code, GrpcCode.INVALID_ARGUMENT);
    assert.equal(missing.details, "NodePublishVolume: target_path is missing");
    const noCap = await failure(conn.unary(node.nodeStageVolume, {
      ...stageReq("v1", join(dir, "staging")),
      volumeCapability: undefined,
    }));
    assert.equal(noCap.code, GrpcCode.INVALID_ARGUMENT);
    assert.match(noCap.details, /volume_capability is missing/);

    await driver.createVolume("v1");
    const unstaged = await failure(
      conn.unary(
        node.nodePublishVolume,
        publishReq("v1", join(dir, "target"), { stagingTargetPath: join(dir, "staging") }),
      ),
    );
    assert.equal(unstaged.code, GrpcCode.FAILED_PRECONDITION);
    assert.match(unstaged.details, /volume "v1" is not staged at staging_target_path ".*staging"/);
    const noStaging = await failure(
      conn.unary(node.nodePublishVolume, publishReq("v1", join(dir, "target"))),
    );
    assert.equal(noStaging.code, GrpcCode.FAILED_PRECONDITION);
    assert.match(noStaging.details, /staging_target_path is missing/);
    const asBlock = await failure(
      conn.unary(node.nodeStageVolume, stageReq("v1", join(dir, "staging"), BLOCK)),
    );
    assert.equal(asBlock.code, GrpcCode.INVALID_ARGUMENT);
    assert.match(
      asBlock.details,
      /volume "v1" is a mount volume, volume_capability asks for block/,
    );
    const stats = await failure(conn.unary(node.nodeGetVolumeStats, {
      volumeId: "v1",
      volumePath: join(dir, "absent"),
      stagingTargetPath: "",
    }));
    assert.equal(stats.code, GrpcCode.NOT_FOUND);
    assert.match(stats.details, /volume_path ".*absent" of volume "v1" does not exist/);
  });
});

Deno.test("HostPathDriver failNext fails the next calls of a method, then serves again", async () => {
  await withDriver(async ({ driver, conn }) => {
    driver.failNext("NodeGetInfo", GrpcCode.UNAVAILABLE, "driver busy", 2);
    for (let i = 0; i < 2; i++) {
      assert.deepEqual(await failure(conn.unary(node.nodeGetInfo, {})), {
        code: GrpcCode.UNAVAILABLE,
        details: "driver busy",
      });
    }
    assert.equal((await conn.unary(node.nodeGetInfo, {})).nodeId, "node-a");
    assert.deepEqual(driver.calls.map((c) => c.method), [
      "NodeGetInfo",
      "NodeGetInfo",
      "NodeGetInfo",
    ]);
    assert.throws(
      () => driver.failNext("NodeGetInf", GrpcCode.INTERNAL, "x"),
      /'NodeGetInf' is not a CSI method/,
    );
  });
});

Deno.test("HostPathDriver restarted (or started again on its directory) keeps its volumes", async () => {
  await withDriver(async ({ dir, driver, conn }) => {
    const path = await driver.createVolume("kept");
    await Deno.writeTextFile(join(path, "f"), "x");
    const stats = { volumeId: "kept", volumePath: path, stagingTargetPath: "" };
    await driver.stop();
    const down = await failure(conn.unary(node.nodeGetVolumeStats, stats));
    assert.equal(down.code, GrpcCode.UNAVAILABLE);
    await driver.start();
    const res = await conn.unary(node.nodeGetVolumeStats, stats);
    const bytes = res.usage.find((u) => u.unit === VolumeUsage_Unit.BYTES);
    const inodes = res.usage.find((u) => u.unit === VolumeUsage_Unit.INODES);
    assert.ok(bytes && bytes.total > 0n && bytes.used > 0n && bytes.available > 0n);
    assert.ok(bytes.used + bytes.available <= bytes.total);
    assert.ok(inodes && inodes.total > 0n && inodes.used > 0n);
    assert.deepEqual(res.volumeCondition, { abnormal: false, message: "" });
    driver.setVolumeCondition("kept", { abnormal: true, message: "disk on fire" });
    assert.deepEqual(
      (await conn.unary(node.nodeGetVolumeStats, stats)).volumeCondition,
      { abnormal: true, message: "disk on fire" },
    );

    // Another driver process on the same directory: the state file.
    await driver.stop();
    await using other = await startHostPathDriver({
      dir: join(dir, "driver"),
      socket: driver.socket,
      name: "hostpath.csi.k8s.io",
      nodeId: "node-a",
    });
    // The client's pooled connection to the stopped driver can fail the first call ("broken
    // pipe", Unavailable): this client does not retry it as grpc-go's transparent retry would.
    const again = await conn.unary(node.nodeGetVolumeStats, stats).catch((e) => {
      if (!(e instanceof CriError) || e.code !== GrpcCode.UNAVAILABLE) throw e;
      return conn.unary(node.nodeGetVolumeStats, stats);
    });
    assert.equal(again.usage.length, 2);
    assert.deepEqual(other.calls.map((c) => c.method), ["NodeGetVolumeStats"]);
  });
});

Deno.test({
  name: "HostPathDriver stages and publishes a mount volume; data written through the target stays",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    await withDriver(async ({ dir, driver, conn }) => {
      const volume = await driver.createVolume("vol-1");
      const staging = join(dir, "plugins", "globalmount");
      await Deno.mkdir(staging, { recursive: true });
      const target = join(dir, "pods", "uid", "volumes", "mount");
      const roTarget = join(dir, "pods", "uid2", "volumes", "mount");
      try {
        await conn.unary(node.nodeStageVolume, stageReq("vol-1", staging));
        // Staging again is not an error and does not stack a second mount.
        await conn.unary(node.nodeStageVolume, stageReq("vol-1", staging));
        assert.ok(await isMountpoint(staging));
        await conn.unary(
          node.nodePublishVolume,
          publishReq("vol-1", target, { stagingTargetPath: staging }),
        );
        assert.ok(await isMountpoint(target));
        await Deno.writeTextFile(join(target, "hello"), "written by a pod");
        await conn.unary(
          node.nodePublishVolume,
          publishReq("vol-1", roTarget, { stagingTargetPath: staging, readonly: true }),
        );
        assert.equal(await Deno.readTextFile(join(roTarget, "hello")), "written by a pod");
        await assert.rejects(
          Deno.writeTextFile(join(roTarget, "no"), "x"),
          /Read-only file system/,
        );
        const staged = await failure(
          conn.unary(controller.deleteVolume, { volumeId: "vol-1", secrets: {} }),
        );
        assert.equal(staged.code, GrpcCode.FAILED_PRECONDITION);

        for (const t of [target, roTarget]) {
          await conn.unary(node.nodeUnpublishVolume, { volumeId: "vol-1", targetPath: t });
          await assert.rejects(Deno.stat(t), Deno.errors.NotFound);
          // Unpublishing again finds nothing to do.
          await conn.unary(node.nodeUnpublishVolume, { volumeId: "vol-1", targetPath: t });
        }
        await conn.unary(node.nodeUnstageVolume, { volumeId: "vol-1", stagingTargetPath: staging });
        assert.ok(!(await isMountpoint(staging)));
        await conn.unary(node.nodeUnstageVolume, { volumeId: "vol-1", stagingTargetPath: staging });
        assert.equal(await Deno.readTextFile(join(volume, "hello")), "written by a pod");
        assert.deepEqual(driver.calls.map((c) => c.method), [
          "NodeStageVolume",
          "NodeStageVolume",
          "NodePublishVolume",
          "NodePublishVolume",
          "DeleteVolume",
          "NodeUnpublishVolume",
          "NodeUnpublishVolume",
          "NodeUnpublishVolume",
          "NodeUnpublishVolume",
          "NodeUnstageVolume",
          "NodeUnstageVolume",
        ]);
      } finally {
        for (const p of [roTarget, target, staging]) {
          await new Deno.Command("umount", { args: [p], stderr: "null" }).output();
        }
      }
    });
  },
});

Deno.test({
  name: "HostPathDriver publishes an inline ephemeral volume and removes it at unpublish",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    await withDriver(async ({ dir, driver, conn }) => {
      const target = join(dir, "pods", "uid", "volumes", "inline");
      try {
        await conn.unary(
          node.nodePublishVolume,
          publishReq("csi-0123", target, {}, { [EPHEMERAL_CONTEXT_KEY]: "true" }),
        );
        await Deno.writeTextFile(join(target, "f"), "x");
        assert.equal(await Deno.readTextFile(join(driver.volumePath("csi-0123"), "f")), "x");
        await conn.unary(node.nodeUnpublishVolume, { volumeId: "csi-0123", targetPath: target });
        await assert.rejects(Deno.stat(driver.volumePath("csi-0123")), Deno.errors.NotFound);
        await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
        await conn.unary(node.nodeUnpublishVolume, { volumeId: "csi-0123", targetPath: target });
      } finally {
        await new Deno.Command("umount", { args: [target], stderr: "null" }).output();
      }
    }, { stageUnstage: true });
  },
});

Deno.test({
  name: "HostPathDriver publishes a raw block volume through a loop device, expanded first",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    await withDriver(async ({ dir, driver, conn }) => {
      const created = await conn.unary(controller.createVolume, {
        name: "pvc-block",
        capacityRange: { requiredBytes: 4n << 20n, limitBytes: 0n },
        volumeCapabilities: [BLOCK],
        parameters: {},
        secrets: {},
        mutableParameters: {},
      });
      const id = created.volume!.volumeId;
      const file = driver.volumePath(id);
      assert.equal((await Deno.stat(file)).size, 4 << 20);
      const expanded = await conn.unary(controller.controllerExpandVolume, {
        volumeId: id,
        capacityRange: { requiredBytes: 8n << 20n, limitBytes: 0n },
        secrets: {},
        volumeCapability: BLOCK,
      });
      assert.deepEqual(expanded, { capacityBytes: 8n << 20n, nodeExpansionRequired: true });
      assert.equal((await Deno.stat(file)).size, 8 << 20);

      const staging = join(dir, "plugins", "volumeDevices", "staging", id);
      await Deno.mkdir(staging, { recursive: true });
      const target = join(dir, "plugins", "volumeDevices", "publish", id, "pod-uid");
      try {
        await conn.unary(node.nodeStageVolume, stageReq(id, staging, BLOCK));
        await conn.unary(
          node.nodePublishVolume,
          publishReq(id, target, { stagingTargetPath: staging, cap: BLOCK }),
        );
        assert.ok((await Deno.stat(target)).isBlockDevice);
        const loop = await new Deno.Command("losetup", { args: ["-j", file], stdout: "piped" })
          .output();
        assert.match(new TextDecoder().decode(loop.stdout), /^\/dev\/loop\d+:/);
        {
          using dev = await Deno.open(target, { write: true });
          await dev.write(new TextEncoder().encode("raw bytes"));
          await dev.syncData();
        }
        const stats = await conn.unary(node.nodeGetVolumeStats, {
          volumeId: id,
          volumePath: target,
          stagingTargetPath: staging,
        });
        assert.equal(stats.usage[0]?.total, 8n << 20n);
        await conn.unary(node.nodeUnpublishVolume, { volumeId: id, targetPath: target });
        await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
        const after = await new Deno.Command("losetup", { args: ["-j", file], stdout: "piped" })
          .output();
        assert.equal(new TextDecoder().decode(after.stdout), "");
        await conn.unary(node.nodeUnstageVolume, { volumeId: id, stagingTargetPath: staging });
        const head = (await Deno.readFile(file)).subarray(0, 9);
        assert.equal(new TextDecoder().decode(head), "raw bytes");
        await conn.unary(controller.deleteVolume, { volumeId: id, secrets: {} });
        await assert.rejects(Deno.stat(file), Deno.errors.NotFound);
      } finally {
        await new Deno.Command("umount", { args: [target], stderr: "null" }).output();
        const loop = await new Deno.Command("losetup", { args: ["-j", file], stdout: "piped" })
          .output();
        const dev = /^(\/dev\/loop\d+):/.exec(new TextDecoder().decode(loop.stdout))?.[1];
        if (dev) await new Deno.Command("losetup", { args: ["-d", dev] }).output();
      }
    });
  },
});
