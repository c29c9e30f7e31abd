/**
 * @module
 * The test suite's own CSI driver, a stand-in for kubernetes-csi/csi-driver-host-path's
 * `hostpathplugin` (its pkg/hostpath): the Go module proxy this suite builds from refuses
 * csi-driver-host-path (and node-driver-registrar, whose stand-in is tests/csi_registrar.ts) at
 * every version (see tests/csi_build.ts), so it cannot be built here. It is a gRPC server
 * (src/cri/grpc_server.ts) on a unix socket speaking the generated CSI v1 definitions
 * (proto/csi/v1/csi.ts).
 *
 * {@link startHostPathDriver} serves Identity, Controller and Node with hostpath's semantics:
 * a volume is the directory `<dir>/volumes/<id>` (raw block: a sparse file of its capacity
 * there, attached to a loop device when published); staging bind-mounts the volume onto the
 * staging path, publishing bind-mounts the staged path (or the volume when the driver does not
 * stage) onto the target, read-only when asked; inline ephemeral volumes are made at publish and
 * removed at unpublish. What it knows is kept in `<dir>/state.json`, as hostpath keeps its
 * state file, so a restarted driver (the handle's stop() and start(), or a new driver on the
 * same `dir`) still knows its volumes and where they are staged and published. Errors carry the
 * CSI spec's gRPC codes and name the field and its value. Mounting needs root.
 *
 * For tests: every call received is recorded in order (`calls`), and `failNext` makes the next
 * calls of a method fail with a given status. Not served: snapshots, ControllerPublish (no
 * PUBLISH_UNPUBLISH_VOLUME, as hostpath without `--enable-attach`), GetCapacity, ListVolumes,
 * the group controller.
 */

import { randomUUID } from "node:crypto";
import { join } from "node:path";
import type { ServiceDefinition } from "../src/cri/connection.ts";
import {
  GrpcCode,
  GrpcServer,
  GrpcStatusError,
  type ServiceHandlers,
  type UnaryHandler,
} from "../src/cri/grpc_server.ts";
import { errorText } from "../src/util/errors.ts";
import {
  ControllerDefinition,
  ControllerServiceCapability_RPC_Type,
  IdentityDefinition,
  NodeDefinition,
  NodeServiceCapability_RPC_Type,
  PluginCapability_Service_Type,
  PluginCapability_VolumeExpansion_Type,
  type Volume,
  type VolumeCapability,
  type VolumeCondition,
  VolumeUsage_Unit,
} from "../proto/csi/v1/csi.ts";

/** The csi-driver-host-path release this driver stands in for. */
export const HOSTPATH_VERSION = "v1.17.0";

/** The volume context key that marks an inline ephemeral volume (set by the kubelet). */
export const EPHEMERAL_CONTEXT_KEY = "csi.storage.k8s.io/ephemeral";

/** The capacity of a raw block volume created without one: 1 GiB (a sparse file). */
export const DEFAULT_BLOCK_BYTES = 1024 * 1024 * 1024;

/** Options of {@link startHostPathDriver}. */
export interface HostPathDriverOptions {
  /** Where volumes (`volumes/<id>`) and the state file go; created. */
  readonly dir: string;
  /** The unix socket to serve on; its directory is created. */
  readonly socket: string;
  /** The driver's name (GetPluginInfo), e.g. `hostpath.csi.k8s.io`. */
  readonly name: string;
  /** NodeGetInfo's node ID. */
  readonly nodeId: string;
  /** Whether the Node service has STAGE_UNSTAGE_VOLUME. @default true */
  readonly stageUnstage?: boolean;
  /** NodeGetInfo's max_volumes_per_node; 0 is no limit. @default 0 */
  readonly maxVolumesPerNode?: number;
  /** The node's topology segments; also makes the plugin advertise accessibility constraints. */
  readonly topology?: Readonly<Record<string, string>>;
  /** Aborting it stops the driver. */
  readonly signal?: AbortSignal;
}

/** One gRPC call the driver received. */
export interface DriverCall {
  /** The RPC's name, e.g. "NodePublishVolume". */
  readonly method: string;
  readonly request: unknown;
}

/** Options of {@link HostPathDriver.createVolume}. */
export interface CreateVolumeOptions {
  /** A raw block volume (a sparse file) instead of a directory. @default false */
  readonly block?: boolean;
  /** @default 0 for a directory (unknown), {@link DEFAULT_BLOCK_BYTES} for block */
  readonly capacityBytes?: number;
}

/** A running driver. */
export interface HostPathDriver extends AsyncDisposable {
  readonly socket: string;
  /** Every call received, in order, failed ones included. */
  readonly calls: DriverCall[];
  /** Creates a volume with this ID, as a pre-provisioned one; idempotent. Returns its path. */
  createVolume(id: string, opts?: CreateVolumeOptions): Promise<string>;
  /** Where volume `id` lives: its directory, or its file for raw block. */
  volumePath(id: string): string;
  /** The condition NodeGetVolumeStats reports for volume `id` from now on. */
  setVolumeCondition(id: string, condition: VolumeCondition): void;
  /** Makes the next `times` calls of `method` (e.g. "NodeStageVolume") fail with `code`. */
  failNext(method: string, code: GrpcCode, message: string, times?: number): void;
  /** Stops serving and removes the socket; volumes and mounts stay. Idempotent. */
  stop(): Promise<void>;
  /** Serves again on the same socket (a driver restart). */
  start(): Promise<void>;
}

/** The names of the RPCs the driver serves. */
const CSI_METHODS = new Set(
  [IdentityDefinition, ControllerDefinition, NodeDefinition].flatMap((d) =>
    Object.values(d.methods).map((m) => m.name)
  ),
);

/** What the driver knows of one volume (hostpath's state.Volume). */
interface VolumeState {
  readonly id: string;
  readonly name: string;
  readonly block: boolean;
  capacityBytes: number;
  readonly ephemeral: boolean;
  /** Staging paths it is staged at. */
  staged: string[];
  /** Target paths it is published at. */
  published: string[];
  condition?: VolumeCondition;
}

/** Handlers of some of a service's methods. */
type Handlers<D extends ServiceDefinition> = Partial<ServiceHandlers<D>>;

/**
 * Handlers for every method of `definition`: each call goes through `around` (which records it
 * and may fail it), then to its handler; one without a handler is UNIMPLEMENTED, and a failure
 * other than a gRPC status is INTERNAL.
 */
function implementation<D extends ServiceDefinition>(
  definition: D,
  handlers: Handlers<D>,
  around: (method: string, request: unknown, run: () => Promise<unknown>) => Promise<unknown>,
): Handlers<D> {
  const out: Record<string, UnaryHandler<unknown, unknown>> = {};
  for (const [key, m] of Object.entries(definition.methods)) {
    const handler = (handlers as Record<string, UnaryHandler<unknown, unknown> | undefined>)[key];
    out[key] = async (request, ctx) => {
      try {
        return await around(m.name, request, async () => {
          if (!handler) {
            throw new GrpcStatusError(GrpcCode.UNIMPLEMENTED, `${m.name} is not implemented`);
          }
          return await handler(request, ctx);
        });
      } catch (e) {
        throw e instanceof GrpcStatusError
          ? e
          : new GrpcStatusError(GrpcCode.INTERNAL, errorText(e));
      }
    };
  }
  return out as Handlers<D>;
}

/** Runs a program; throws INTERNAL with its stderr when it fails. */
async function run(program: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  if (!out.success) {
    throw new GrpcStatusError(
      GrpcCode.INTERNAL,
      `${program} ${args.join(" ")} exited ${out.code}: ${dec.decode(out.stderr).trim()}`,
    );
  }
  return dec.decode(out.stdout);
}

async function isMountpoint(path: string): Promise<boolean> {
  const out = await new Deno.Command("mountpoint", { args: ["-q", path], stderr: "null" })
    .output();
  return out.success;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

/** The loop device `file` is attached to, if any (`losetup -j`). */
async function loopDeviceOf(file: string): Promise<string | undefined> {
  const out = await run("losetup", ["-j", file]);
  return /^(\/dev\/loop\d+):/m.exec(out)?.[1];
}

function required(method: string, field: string, value: string): void {
  if (value === "") {
    throw new GrpcStatusError(GrpcCode.INVALID_ARGUMENT, `${method}: ${field} is missing`);
  }
}

function capabilityRequired(method: string, cap: VolumeCapability | undefined): VolumeCapability {
  if (!cap) {
    throw new GrpcStatusError(GrpcCode.INVALID_ARGUMENT, `${method}: volume_capability is missing`);
  }
  if (cap.block && cap.mount) {
    throw new GrpcStatusError(
      GrpcCode.INVALID_ARGUMENT,
      `${method}: volume_capability has both block and mount access types`,
    );
  }
  return cap;
}

/** The volume's kind must match the capability's access type. */
function accessTypeMatches(method: string, vol: VolumeState, cap: VolumeCapability): void {
  const wantsBlock = cap.block !== undefined;
  if (wantsBlock !== vol.block) {
    throw new GrpcStatusError(
      GrpcCode.INVALID_ARGUMENT,
      `${method}: volume "${vol.id}" is a ${vol.block ? "block" : "mount"} volume, ` +
        `volume_capability asks for ${wantsBlock ? "block" : "mount"} access`,
    );
  }
}

/** Starts the driver on `opts.socket` and resolves once it serves. */
export async function startHostPathDriver(opts: HostPathDriverOptions): Promise<HostPathDriver> {
  opts.signal?.throwIfAborted();
  const stageUnstage = opts.stageUnstage ?? true;
  const volumesDir = join(opts.dir, "volumes");
  const stateFile = join(opts.dir, "state.json");
  await Deno.mkdir(volumesDir, { recursive: true });
  const volumes = new Map<string, VolumeState>();
  try {
    for (const v of JSON.parse(await Deno.readTextFile(stateFile)) as VolumeState[]) {
      volumes.set(v.id, v);
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  const calls: DriverCall[] = [];
  const failures = new Map<string, { code: GrpcCode; message: string; times: number }>();
  // One operation at a time: mounts and the state file are not safe to interleave.
  let queue: Promise<unknown> = Promise.resolve();
  const serialized = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = queue.then(fn);
    queue = next.catch(() => {});
    return next;
  };

  const volumePath = (id: string) => join(volumesDir, id);
  const save = () => Deno.writeTextFile(stateFile, JSON.stringify([...volumes.values()], null, 1));
  const known = (method: string, id: string): VolumeState => {
    const vol = volumes.get(id);
    if (!vol) {
      throw new GrpcStatusError(GrpcCode.NOT_FOUND, `${method}: volume_id "${id}" not found`);
    }
    return vol;
  };

  /** Makes the volume's directory or sparse file and records it. */
  const create = async (
    id: string,
    name: string,
    block: boolean,
    capacityBytes: number,
    ephemeral: boolean,
  ): Promise<VolumeState> => {
    if (id === "" || id === "." || id === ".." || id.includes("/")) {
      throw new GrpcStatusError(
        GrpcCode.INVALID_ARGUMENT,
        `volume_id "${id}" cannot name a directory under ${volumesDir}`,
      );
    }
    const path = volumePath(id);
    if (block) {
      using f = await Deno.open(path, { create: true, write: true });
      await f.truncate(capacityBytes);
    } else {
      await Deno.mkdir(path, { recursive: true });
    }
    const vol: VolumeState = {
      id,
      name,
      block,
      capacityBytes,
      ephemeral,
      staged: [],
      published: [],
    };
    volumes.set(id, vol);
    await save();
    return vol;
  };

  const remove = async (vol: VolumeState): Promise<void> => {
    const loop = vol.block ? await loopDeviceOf(volumePath(vol.id)) : undefined;
    if (loop) await run("losetup", ["-d", loop]);
    await Deno.remove(volumePath(vol.id), { recursive: true }).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
    volumes.delete(vol.id);
    await save();
  };

  const csiVolume = (vol: VolumeState): Volume => ({
    volumeId: vol.id,
    capacityBytes: BigInt(vol.capacityBytes),
    volumeContext: {},
    accessibleTopology: opts.topology ? [{ segments: { ...opts.topology } }] : [],
  });

  const capacityWithin = (
    method: string,
    range: { requiredBytes: bigint; limitBytes: bigint } | undefined,
  ): number => {
    const req = Number(range?.requiredBytes ?? 0n);
    const limit = Number(range?.limitBytes ?? 0n);
    if (req < 0 || limit < 0 || (limit > 0 && req > limit)) {
      throw new GrpcStatusError(
        GrpcCode.OUT_OF_RANGE,
        `${method}: capacity_range required_bytes ${req} and limit_bytes ${limit} cannot be met`,
      );
    }
    return req;
  };

  const identity: Handlers<typeof IdentityDefinition> = {
    getPluginInfo: () => ({
      name: opts.name,
      vendorVersion: `${HOSTPATH_VERSION}+kubelet-ts`,
      manifest: {},
    }),
    getPluginCapabilities: () => ({
      capabilities: [
        { service: { type: PluginCapability_Service_Type.CONTROLLER_SERVICE } },
        ...(opts.topology
          ? [{
            service: { type: PluginCapability_Service_Type.VOLUME_ACCESSIBILITY_CONSTRAINTS },
          }]
          : []),
        { volumeExpansion: { type: PluginCapability_VolumeExpansion_Type.ONLINE } },
      ],
    }),
    probe: () => ({ ready: true }),
  };

  const controller: Handlers<typeof ControllerDefinition> = {
    controllerGetCapabilities: () => ({
      capabilities: [
        ControllerServiceCapability_RPC_Type.CREATE_DELETE_VOLUME,
        ControllerServiceCapability_RPC_Type.EXPAND_VOLUME,
      ].map((type) => ({ rpc: { type } })),
    }),
    createVolume: (req) =>
      serialized(async () => {
        const m = "CreateVolume";
        required(m, "name", req.name);
        if (req.volumeCapabilities.length === 0) {
          throw new GrpcStatusError(
            GrpcCode.INVALID_ARGUMENT,
            `${m}: volume_capabilities is missing`,
          );
        }
        for (const cap of req.volumeCapabilities) capabilityRequired(m, cap);
        const block = req.volumeCapabilities.some((c) => c.block !== undefined);
        if (block && req.volumeCapabilities.some((c) => c.mount !== undefined)) {
          throw new GrpcStatusError(
            GrpcCode.INVALID_ARGUMENT,
            `${m}: volume_capabilities of "${req.name}" ask for both block and mount access`,
          );
        }
        const wanted = capacityWithin(m, req.capacityRange);
        const limit = Number(req.capacityRange?.limitBytes ?? 0n);
        const same = [...volumes.values()].find((v) => v.name === req.name);
        if (same) {
          if (
            same.block !== block || same.capacityBytes < wanted ||
            (limit > 0 && same.capacityBytes > limit)
          ) {
            throw new GrpcStatusError(
              GrpcCode.ALREADY_EXISTS,
              `${m}: volume "${req.name}" exists as ${same.id} with ` +
                `${same.block ? "block" : "mount"} access and ${same.capacityBytes} bytes`,
            );
          }
          return { volume: csiVolume(same) };
        }
        const capacity = block && wanted === 0 ? DEFAULT_BLOCK_BYTES : wanted;
        const vol = await create(randomUUID(), req.name, block, capacity, false);
        return { volume: csiVolume(vol) };
      }),
    deleteVolume: (req) =>
      serialized(async () => {
        const m = "DeleteVolume";
        required(m, "volume_id", req.volumeId);
        const vol = volumes.get(req.volumeId);
        if (!vol) return {};
        if (vol.staged.length > 0 || vol.published.length > 0) {
          throw new GrpcStatusError(
            GrpcCode.FAILED_PRECONDITION,
            `${m}: volume "${vol.id}" is still in use (staged at [${vol.staged}], ` +
              `published at [${vol.published}])`,
          );
        }
        await remove(vol);
        return {};
      }),
    controllerExpandVolume: (req) =>
      serialized(async () => {
        const m = "ControllerExpandVolume";
        required(m, "volume_id", req.volumeId);
        if (!req.capacityRange) {
          throw new GrpcStatusError(GrpcCode.INVALID_ARGUMENT, `${m}: capacity_range is missing`);
        }
        const vol = known(m, req.volumeId);
        const wanted = capacityWithin(m, req.capacityRange);
        if (wanted > vol.capacityBytes) {
          vol.capacityBytes = wanted;
          if (vol.block) {
            await Deno.truncate(volumePath(vol.id), wanted);
            const loop = await loopDeviceOf(volumePath(vol.id));
            if (loop) await run("losetup", ["-c", loop]);
          }
          await save();
        }
        // As csi-driver-host-path: the node grows every volume too (NodeExpandVolume).
        return { capacityBytes: BigInt(vol.capacityBytes), nodeExpansionRequired: true };
      }),
    validateVolumeCapabilities: (req) => {
      const m = "ValidateVolumeCapabilities";
      required(m, "volume_id", req.volumeId);
      if (req.volumeCapabilities.length === 0) {
        throw new GrpcStatusError(
          GrpcCode.INVALID_ARGUMENT,
          `${m}: volume_capabilities is missing`,
        );
      }
      const vol = known(m, req.volumeId);
      const wrong = req.volumeCapabilities.find((c) => (c.block !== undefined) !== vol.block);
      if (wrong) {
        return {
          message: `volume "${vol.id}" is a ${vol.block ? "block" : "mount"} volume`,
        };
      }
      return {
        message: "",
        confirmed: {
          volumeContext: req.volumeContext,
          volumeCapabilities: req.volumeCapabilities,
          parameters: req.parameters,
          mutableParameters: req.mutableParameters,
        },
      };
    },
  };

  const node: Handlers<typeof NodeDefinition> = {
    nodeGetCapabilities: () => ({
      capabilities: [
        ...(stageUnstage ? [NodeServiceCapability_RPC_Type.STAGE_UNSTAGE_VOLUME] : []),
        NodeServiceCapability_RPC_Type.GET_VOLUME_STATS,
        NodeServiceCapability_RPC_Type.EXPAND_VOLUME,
        NodeServiceCapability_RPC_Type.VOLUME_CONDITION,
      ].map((type) => ({ rpc: { type } })),
    }),
    nodeGetInfo: () => ({
      nodeId: opts.nodeId,
      maxVolumesPerNode: BigInt(opts.maxVolumesPerNode ?? 0),
      accessibleTopology: opts.topology ? { segments: { ...opts.topology } } : undefined,
    }),
    nodeStageVolume: (req) =>
      serialized(async () => {
        const m = "NodeStageVolume";
        required(m, "volume_id", req.volumeId);
        required(m, "staging_target_path", req.stagingTargetPath);
        const cap = capabilityRequired(m, req.volumeCapability);
        if (!stageUnstage) {
          throw new GrpcStatusError(
            GrpcCode.UNIMPLEMENTED,
            `${m}: the driver does not have STAGE_UNSTAGE_VOLUME`,
          );
        }
        const vol = known(m, req.volumeId);
        accessTypeMatches(m, vol, cap);
        const path = req.stagingTargetPath;
        // Raw block is staged by record only; a mount volume is bind-mounted there.
        if (!vol.block) {
          if (!(await exists(path))) {
            throw new GrpcStatusError(
              GrpcCode.FAILED_PRECONDITION,
              `${m}: staging_target_path "${path}" does not exist (the CO creates it)`,
            );
          }
          if (!(await isMountpoint(path))) {
            await run("mount", ["--bind", volumePath(vol.id), path]);
          }
        }
        if (!vol.staged.includes(path)) vol.staged.push(path);
        await save();
        return {};
      }),
    nodeUnstageVolume: (req) =>
      serialized(async () => {
        const m = "NodeUnstageVolume";
        required(m, "volume_id", req.volumeId);
        required(m, "staging_target_path", req.stagingTargetPath);
        const vol = known(m, req.volumeId);
        const path = req.stagingTargetPath;
        if (await isMountpoint(path)) await run("umount", [path]);
        vol.staged = vol.staged.filter((p) => p !== path);
        await save();
        return {};
      }),
    nodePublishVolume: (req) =>
      serialized(async () => {
        const m = "NodePublishVolume";
        required(m, "volume_id", req.volumeId);
        required(m, "target_path", req.targetPath);
        const cap = capabilityRequired(m, req.volumeCapability);
        const ephemeral = req.volumeContext[EPHEMERAL_CONTEXT_KEY] === "true";
        let vol = volumes.get(req.volumeId);
        if (ephemeral) {
          if (cap.block) {
            throw new GrpcStatusError(
              GrpcCode.INVALID_ARGUMENT,
              `${m}: inline ephemeral volume "${req.volumeId}" cannot have block access`,
            );
          }
          vol ??= await create(req.volumeId, req.volumeId, false, 0, true);
        }
        if (!vol) vol = known(m, req.volumeId);
        accessTypeMatches(m, vol, cap);
        let source = volumePath(vol.id);
        if (stageUnstage && !vol.ephemeral) {
          if (req.stagingTargetPath === "") {
            throw new GrpcStatusError(
              GrpcCode.FAILED_PRECONDITION,
              `${m}: staging_target_path is missing and the driver stages volumes`,
            );
          }
          if (!vol.staged.includes(req.stagingTargetPath)) {
            throw new GrpcStatusError(
              GrpcCode.FAILED_PRECONDITION,
              `${m}: volume "${vol.id}" is not staged at staging_target_path ` +
                `"${req.stagingTargetPath}" (staged at [${vol.staged}])`,
            );
          }
          if (!vol.block) source = req.stagingTargetPath;
        }
        const target = req.targetPath;
        if (vol.block) {
          source = await loopDeviceOf(source) ??
            (await run("losetup", ["--find", "--show", source])).trim();
          if (!(await exists(target))) {
            await Deno.mkdir(join(target, ".."), { recursive: true });
            await Deno.writeFile(target, new Uint8Array());
          }
        } else {
          await Deno.mkdir(target, { recursive: true });
        }
        if (!(await isMountpoint(target))) {
          await run("mount", ["--bind", source, target]);
          if (req.readonly) await run("mount", ["-o", "remount,bind,ro", target]);
        }
        if (!vol.published.includes(target)) vol.published.push(target);
        await save();
        return {};
      }),
    nodeUnpublishVolume: (req) =>
      serialized(async () => {
        const m = "NodeUnpublishVolume";
        required(m, "volume_id", req.volumeId);
        required(m, "target_path", req.targetPath);
        const target = req.targetPath;
        const vol = volumes.get(req.volumeId);
        // An ephemeral volume is gone after its unpublish: a retry finds nothing to do.
        if (!vol && !(await exists(target))) return {};
        if (!vol) known(m, req.volumeId);
        if (await isMountpoint(target)) await run("umount", [target]);
        // Not recursive: what is left is empty unless the umount did not happen.
        await Deno.remove(target).catch((e) => {
          if (!(e instanceof Deno.errors.NotFound)) throw e;
        });
        if (!vol) return {};
        vol.published = vol.published.filter((p) => p !== target);
        if (vol.block && vol.published.length === 0) {
          const loop = await loopDeviceOf(volumePath(vol.id));
          if (loop) await run("losetup", ["-d", loop]);
        }
        if (vol.ephemeral && vol.published.length === 0) await remove(vol);
        else await save();
        return {};
      }),
    nodeGetVolumeStats: async (req) => {
      const m = "NodeGetVolumeStats";
      required(m, "volume_id", req.volumeId);
      required(m, "volume_path", req.volumePath);
      const vol = known(m, req.volumeId);
      if (!(await exists(req.volumePath))) {
        throw new GrpcStatusError(
          GrpcCode.NOT_FOUND,
          `${m}: volume_path "${req.volumePath}" of volume "${vol.id}" does not exist`,
        );
      }
      const volumeCondition = vol.condition ?? { abnormal: false, message: "" };
      if (vol.block) {
        const total = BigInt((await Deno.stat(volumePath(vol.id))).size);
        return {
          usage: [{ unit: VolumeUsage_Unit.BYTES, total, used: 0n, available: 0n }],
          volumeCondition,
        };
      }
      // Fundamental block size, blocks, free blocks, available blocks, inodes, free inodes.
      const fields = (await run("stat", ["-f", "-c", "%S %b %f %a %c %d", req.volumePath]))
        .trim().split(" ").map((f) => BigInt(f));
      const [bsize = 0n, blocks = 0n, free = 0n, avail = 0n, files = 0n, ffree = 0n] = fields;
      return {
        usage: [
          {
            unit: VolumeUsage_Unit.BYTES,
            total: blocks * bsize,
            used: (blocks - free) * bsize,
            available: avail * bsize,
          },
          { unit: VolumeUsage_Unit.INODES, total: files, used: files - ffree, available: ffree },
        ],
        volumeCondition,
      };
    },
    nodeExpandVolume: (req) =>
      serialized(async () => {
        const m = "NodeExpandVolume";
        required(m, "volume_id", req.volumeId);
        required(m, "volume_path", req.volumePath);
        const vol = known(m, req.volumeId);
        const wanted = capacityWithin(m, req.capacityRange);
        if (wanted > vol.capacityBytes) {
          vol.capacityBytes = wanted;
          await save();
        }
        return { capacityBytes: BigInt(vol.capacityBytes) };
      }),
  };

  const around = async (method: string, request: unknown, call: () => Promise<unknown>) => {
    calls.push({ method, request });
    const fail = failures.get(method);
    if (fail) {
      if (--fail.times <= 0) failures.delete(method);
      throw new GrpcStatusError(fail.code, fail.message);
    }
    return await call();
  };

  let server: GrpcServer | undefined;
  const start = async () => {
    if (server) return;
    // A driver that stops drops its calls, as a killed process does.
    const s = await GrpcServer.listen({ path: opts.socket, closeGracePeriodMs: 0 });
    s.register(IdentityDefinition, implementation(IdentityDefinition, identity, around));
    s.register(ControllerDefinition, implementation(ControllerDefinition, controller, around));
    s.register(NodeDefinition, implementation(NodeDefinition, node, around));
    server = s;
  };
  const stop = async () => {
    const s = server;
    server = undefined;
    await s?.close();
  };
  const onAbort = () => void stop();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  await start();

  return {
    socket: opts.socket,
    calls,
    createVolume: (id, o = {}) =>
      serialized(async () => {
        const existing = volumes.get(id);
        if (!existing) {
          const block = o.block ?? false;
          await create(id, id, block, o.capacityBytes ?? (block ? DEFAULT_BLOCK_BYTES : 0), false);
        }
        return volumePath(id);
      }),
    volumePath,
    setVolumeCondition(id, condition) {
      const vol = volumes.get(id);
      if (!vol) throw new Error(`setVolumeCondition: volume "${id}" not found`);
      vol.condition = condition;
      serialized(save).catch((e) => console.error(`hostpath driver: saving state: ${e}`));
    },
    failNext(method, code, message, times = 1) {
      if (!CSI_METHODS.has(method)) {
        throw new Error(`failNext: '${method}' is not a CSI method (e.g. "NodeStageVolume")`);
      }
      failures.set(method, { code, message, times });
    },
    stop,
    start,
    async [Symbol.asyncDispose]() {
      opts.signal?.removeEventListener("abort", onAbort);
      await stop();
    },
  };
}
