/**
 * @module
 * The kubelet's client of a CSI driver's Node service, over the unix socket the driver
 * registered (CSI v1 through the same gRPC transport as CRI, `src/cri/connection.ts`): one
 * client, and one connection, per volume operation (upstream dials for each call of an
 * operation), closed by the operation when it ends; the driver's capabilities are asked once per
 * client. Requests are built as upstream builds
 * them: the access mode mapped to CSI's (the multi-writer variants when the driver has
 * SINGLE_NODE_MULTI_WRITER), a block or mount capability with fsType, mount flags and the
 * volume mount group. {@link isFinalCsiError} tells a final failure from one whose outcome is
 * uncertain (the volume may be mounted: it must still be torn down).
 * Corresponds to upstream `pkg/volume/csi/csi_client.go`.
 */

import { CriConnection, CriError, criMethods, GrpcCode } from "../cri/connection.ts";
import {
  NodeDefinition,
  type NodeGetVolumeStatsResponse,
  NodeServiceCapability_RPC_Type as Cap,
  type VolumeCapability,
  VolumeCapability_AccessMode_Mode as Mode,
} from "../../proto/csi/v1/csi.ts";
import { CSI_TIMEOUT_MS, type CsiDrivers } from "./csi_plugin.ts";

/** upstream fsTypeBlockName: the fsType that asks for a block volume. */
export const FS_TYPE_BLOCK = "block";

const NODE = criMethods(NodeDefinition);

/** What NodeStageVolume and NodePublishVolume share. */
export interface CsiVolumeRequest {
  readonly volumeId: string;
  /** A PersistentVolume access mode such as ReadWriteOnce; ReadWriteOnce when absent. */
  readonly accessMode?: string;
  readonly publishContext?: Readonly<Record<string, string>>;
  readonly volumeContext?: Readonly<Record<string, string>>;
  readonly secrets?: Readonly<Record<string, string>>;
  /** {@link FS_TYPE_BLOCK} for a block volume. */
  readonly fsType?: string;
  readonly mountOptions?: readonly string[];
  /** The pod's fsGroup, for a driver with VOLUME_MOUNT_GROUP. */
  readonly fsGroup?: number;
}

/** A NodePublishVolume request. */
export interface CsiPublishRequest extends CsiVolumeRequest {
  readonly targetPath: string;
  /** The global mount of a driver with STAGE_UNSTAGE_VOLUME. */
  readonly stagingTargetPath?: string;
  readonly readOnly: boolean;
}

/** A NodeStageVolume request. */
export interface CsiStageRequest extends CsiVolumeRequest {
  readonly stagingTargetPath: string;
}

/**
 * Calls one registered driver's Node service (upstream csiDriverClient), over one connection
 * opened at the first call; {@link close} (or `using`) ends it.
 */
export class CsiClient implements Disposable {
  readonly driverName: string;
  readonly endpoint: string;
  readonly #timeoutMs: number;
  #conn: CriConnection | undefined;
  #caps: Promise<Set<Cap>> | undefined;

  /** Throws upstream's message when `driverName` is empty or not registered. */
  constructor(drivers: CsiDrivers, driverName: string, timeoutMs = CSI_TIMEOUT_MS) {
    if (driverName === "") throw new Error("driver name is empty");
    const driver = drivers.get(driverName);
    if (!driver) {
      throw new Error(`driver name ${driverName} not found in the list of registered CSI drivers`);
    }
    this.driverName = driverName;
    this.endpoint = driver.endpoint;
    this.#timeoutMs = timeoutMs;
  }

  /** The driver's Node capabilities (upstream NodeGetCapabilities), asked once per client. */
  nodeCapabilities(signal?: AbortSignal): Promise<Set<Cap>> {
    this.#caps ??= this.#call(
      (conn, opts) => conn.unary(NODE.nodeGetCapabilities, {}, opts),
      signal,
    ).then((res) => {
      const out = new Set<Cap>();
      for (const c of res.capabilities) if (c.rpc) out.add(c.rpc.type);
      return out;
    });
    // A failed ask is asked again next time.
    this.#caps.catch(() => this.#caps = undefined);
    return this.#caps;
  }

  /** Ends the connection; idempotent. */
  close(): void {
    this.#conn?.close();
    this.#conn = undefined;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** upstream NodeStageVolume. */
  async nodeStageVolume(req: CsiStageRequest, signal?: AbortSignal): Promise<void> {
    if (req.volumeId === "") throw new Error("missing volume id");
    if (req.stagingTargetPath === "") throw new Error("missing staging target path");
    const capability = await this.#capability(req, signal);
    await this.#call((conn, opts) =>
      conn.unary(NODE.nodeStageVolume, {
        volumeId: req.volumeId,
        publishContext: { ...req.publishContext },
        stagingTargetPath: req.stagingTargetPath,
        volumeCapability: capability,
        secrets: { ...req.secrets },
        volumeContext: { ...req.volumeContext },
      }, opts), signal);
  }

  /** upstream NodeUnstageVolume. */
  async nodeUnstageVolume(
    volumeId: string,
    stagingTargetPath: string,
    signal?: AbortSignal,
  ): Promise<void> {
    if (volumeId === "") throw new Error("missing volume id");
    if (stagingTargetPath === "") throw new Error("missing staging target path");
    await this.#call(
      (conn, opts) => conn.unary(NODE.nodeUnstageVolume, { volumeId, stagingTargetPath }, opts),
      signal,
    );
  }

  /** upstream NodePublishVolume. */
  async nodePublishVolume(req: CsiPublishRequest, signal?: AbortSignal): Promise<void> {
    if (req.volumeId === "") throw new Error("missing volume id");
    if (req.targetPath === "") throw new Error("missing target path");
    const capability = await this.#capability(req, signal);
    await this.#call((conn, opts) =>
      conn.unary(NODE.nodePublishVolume, {
        volumeId: req.volumeId,
        publishContext: { ...req.publishContext },
        stagingTargetPath: req.stagingTargetPath ?? "",
        targetPath: req.targetPath,
        volumeCapability: capability,
        readonly: req.readOnly,
        secrets: { ...req.secrets },
        volumeContext: { ...req.volumeContext },
      }, opts), signal);
  }

  /** upstream NodeUnpublishVolume. */
  async nodeUnpublishVolume(
    volumeId: string,
    targetPath: string,
    signal?: AbortSignal,
  ): Promise<void> {
    if (volumeId === "") throw new Error("missing volume id");
    if (targetPath === "") throw new Error("missing target path");
    await this.#call(
      (conn, opts) => conn.unary(NODE.nodeUnpublishVolume, { volumeId, targetPath }, opts),
      signal,
    );
  }

  /** upstream NodeExpandVolume: the volume at `volumePath` grows to `newSizeBytes`. */
  async nodeExpandVolume(
    req: CsiVolumeRequest & {
      readonly volumePath: string;
      readonly stagingTargetPath?: string;
      readonly newSizeBytes: number;
    },
    signal?: AbortSignal,
  ): Promise<void> {
    if (req.volumeId === "") throw new Error("missing volume id");
    if (req.volumePath === "") throw new Error("missing volume path");
    if (req.newSizeBytes < 0) throw new Error("size can not be less than 0");
    const capability = await this.#capability(req, signal);
    await this.#call((conn, opts) =>
      conn.unary(NODE.nodeExpandVolume, {
        volumeId: req.volumeId,
        volumePath: req.volumePath,
        capacityRange: { requiredBytes: BigInt(req.newSizeBytes), limitBytes: 0n },
        stagingTargetPath: req.stagingTargetPath ?? "",
        volumeCapability: capability,
        secrets: { ...req.secrets },
      }, opts), signal);
  }

  /** upstream NodeGetVolumeStats. */
  nodeGetVolumeStats(
    volumeId: string,
    volumePath: string,
    signal?: AbortSignal,
  ): Promise<NodeGetVolumeStatsResponse> {
    if (volumeId === "" || volumePath === "") {
      return Promise.reject(new Error("missing volumeId or volumePath"));
    }
    return this.#call(
      (conn, opts) =>
        conn.unary(NODE.nodeGetVolumeStats, { volumeId, volumePath, stagingTargetPath: "" }, opts),
      signal,
    );
  }

  /** The capability of a stage or publish request, with the access mode the driver takes. */
  async #capability(req: CsiVolumeRequest, signal?: AbortSignal): Promise<VolumeCapability> {
    const caps = await this.nodeCapabilities(signal);
    const mode = accessModeOf(
      req.accessMode ?? "ReadWriteOnce",
      caps.has(Cap.SINGLE_NODE_MULTI_WRITER),
    );
    if (req.fsType === FS_TYPE_BLOCK) return { block: {}, accessMode: { mode } };
    return {
      mount: {
        fsType: req.fsType ?? "",
        mountFlags: [...(req.mountOptions ?? [])],
        volumeMountGroup: req.fsGroup === undefined ? "" : String(req.fsGroup),
      },
      accessMode: { mode },
    };
  }

  async #call<T>(
    fn: (conn: CriConnection, opts: { timeoutMs: number; signal?: AbortSignal }) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    this.#conn ??= new CriConnection({ endpoint: this.endpoint });
    try {
      return await fn(this.#conn, { timeoutMs: this.#timeoutMs, ...(signal ? { signal } : {}) });
    } catch (e) {
      // Go's gRPC client text, without our transport's RPC name in front.
      if (e instanceof CriError) throw new CsiCallError(e);
      throw e;
    }
  }
}

/** A failed driver call: Go's gRPC error text, the code kept for {@link isFinalCsiError}. */
export class CsiCallError extends Error {
  override name = "CsiCallError";
  readonly code: number;
  constructor(cause: CriError) {
    super(cause.grpcText, { cause });
    this.code = cause.code;
  }
}

/**
 * upstream isFinalError: whether the driver's call surely failed. Canceled, DeadlineExceeded,
 * Unavailable, ResourceExhausted and Aborted may have done the operation (or still do it), and
 * so does an error without a gRPC status (the connection failed midway).
 */
export function isFinalCsiError(e: unknown): boolean {
  if (!(e instanceof CsiCallError)) return false;
  const uncertain: readonly number[] = [
    GrpcCode.CANCELLED,
    GrpcCode.DEADLINE_EXCEEDED,
    GrpcCode.UNAVAILABLE,
    GrpcCode.RESOURCE_EXHAUSTED,
    GrpcCode.ABORTED,
  ];
  return !uncertain.includes(e.code);
}

/** upstream asCSIAccessModeV1 and asSingleNodeMultiWriterCapableCSIAccessModeV1. */
export function accessModeOf(mode: string, singleNodeMultiWriter: boolean): Mode {
  switch (mode) {
    case "ReadWriteOnce":
      return singleNodeMultiWriter ? Mode.SINGLE_NODE_MULTI_WRITER : Mode.SINGLE_NODE_WRITER;
    case "ReadOnlyMany":
      return Mode.MULTI_NODE_READER_ONLY;
    case "ReadWriteMany":
      return Mode.MULTI_NODE_MULTI_WRITER;
    case "ReadWriteOncePod":
      return singleNodeMultiWriter ? Mode.SINGLE_NODE_SINGLE_WRITER : Mode.SINGLE_NODE_WRITER;
  }
  return Mode.UNKNOWN;
}
