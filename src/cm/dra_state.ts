/**
 * @module
 * The DRA manager's checkpoint, `<root-dir>/dra_manager_state`: the claims the kubelet prepared
 * (or is preparing), with the pods using each and the devices each driver returned, so that a
 * restarted kubelet gives containers their CDI devices again and unprepares what it prepared.
 *
 * The file is upstream's, byte for byte: `{"Data":"<json>","Checksum":<crc32>}`, where Data is
 * `json.Marshal` of `{kind: DRACheckpoint, apiVersion: checkpoint.dra.kubelet.k8s.io/v1,
 * ClaimInfoStateList}` and Checksum the CRC-32 (IEEE) of Data's bytes. Go's nil slices print as
 * `null`; here an empty device, request or CDI list does, as a driver's answer leaves them nil. A
 * checksum that does not match is a CorruptCheckpointError; Data's `apiVersion` is not checked
 * (upstream reads older versions the same way). Corresponds to upstream
 * `pkg/kubelet/cm/dra/state` (checkpoint.go, checkpointer.go, state.go).
 */

import { crc32 } from "node:zlib";
import type { CheckpointCodec } from "../checkpointmanager/checkpoint_manager.ts";
import { CorruptCheckpointError, MalformedCheckpointError } from "../checkpointmanager/errors.ts";
import { goJsonString } from "../util/go_json.ts";

/** The checkpoint's file name under the root directory (upstream draManagerStateFileName). */
export const DRA_MANAGER_STATE_FILE = "dra_manager_state";

const KIND = "DRACheckpoint";
const API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1";

/** One device a driver prepared for a claim (upstream state.Device). */
export interface DraDevice {
  readonly poolName: string;
  readonly deviceName: string;
  /** The share of a device allocated more than once; null when not shared. */
  readonly shareId: string | null;
  /** The claim's requests the device is for; empty for every request. */
  readonly requestNames: readonly string[];
  readonly cdiDeviceIds: readonly string[];
}

/** One claim as the checkpoint records it (upstream state.ClaimInfoState). */
export interface ClaimInfoState {
  readonly claimUid: string;
  readonly claimName: string;
  readonly namespace: string;
  /** The pods using the claim on this node. */
  readonly podUids: Set<string>;
  /** Every driver with allocation results in the claim, with the devices it prepared. */
  readonly driverState: Map<string, DraDevice[]>;
}

const str = (s: string) => goJsonString(s);
const list = (xs: readonly string[]) => xs.length === 0 ? "null" : `[${xs.map(str).join(",")}]`;
const byKey = <T>(m: Iterable<[string, T]>) =>
  [...m].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);

function deviceJson(d: DraDevice): string {
  return `{"PoolName":${str(d.poolName)},"DeviceName":${str(d.deviceName)},"ShareID":${
    d.shareId === null ? "null" : str(d.shareId)
  },"RequestNames":${list(d.requestNames)},"CDIDeviceIDs":${list(d.cdiDeviceIds)}}`;
}

function claimJson(c: ClaimInfoState): string {
  const pods = [...c.podUids].sort().map((uid) => `${str(uid)}:{}`).join(",");
  const drivers = byKey(c.driverState).map(([name, devices]) =>
    `${str(name)}:{"Devices":${
      devices.length === 0 ? "null" : `[${devices.map(deviceJson).join(",")}]`
    }}`
  ).join(",");
  return `{"ClaimUID":${str(c.claimUid)},"ClaimName":${str(c.claimName)},"Namespace":${
    str(c.namespace)
  },"PodUIDs":{${pods}},"DriverState":{${drivers}}}`;
}

/** upstream NewCheckpoint's Data: json.Marshal of the list (null for none at all). */
export function checkpointData(claims: readonly ClaimInfoState[] | null): string {
  const items = claims === null ? "null" : `[${claims.map(claimJson).join(",")}]`;
  return `{"kind":${str(KIND)},"apiVersion":${str(API_VERSION)},"ClaimInfoStateList":${items}}`;
}

/** The file's content for `claims` (upstream MarshalCheckpoint). */
export function encodeDraCheckpoint(claims: readonly ClaimInfoState[] | null): string {
  const data = checkpointData(claims);
  return `{"Data":${str(data)},"Checksum":${crc32(new TextEncoder().encode(data)) >>> 0}}`;
}

type Json = Record<string, unknown>;

function field(o: Json, name: string): unknown {
  // encoding/json matches field names case-insensitively.
  const key = Object.keys(o).find((k) => k.toLowerCase() === name.toLowerCase());
  return key === undefined ? undefined : o[key];
}

function strings(v: unknown, where: string): string[] {
  if (v == null) return [];
  if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) {
    throw new MalformedCheckpointError(`${where}: expected a list of strings`);
  }
  return v as string[];
}

function text(v: unknown, where: string): string {
  if (v == null) return "";
  if (typeof v !== "string") throw new MalformedCheckpointError(`${where}: expected a string`);
  return v;
}

function object(v: unknown, where: string): Json {
  if (v == null) return {};
  if (typeof v !== "object" || Array.isArray(v)) {
    throw new MalformedCheckpointError(`${where}: expected an object`);
  }
  return v as Json;
}

function parseClaim(v: unknown, where: string): ClaimInfoState {
  const o = object(v, where);
  const driverState = new Map<string, DraDevice[]>();
  for (const [driver, ds] of Object.entries(object(field(o, "DriverState"), where))) {
    const w = `${where}.DriverState[${JSON.stringify(driver)}]`;
    const devices = field(object(ds, w), "Devices");
    if (devices != null && !Array.isArray(devices)) {
      throw new MalformedCheckpointError(`${w}.Devices: expected a list`);
    }
    driverState.set(
      driver,
      (devices ?? []).map((d: unknown, i: number) => {
        const dw = `${w}.Devices[${i}]`;
        const dev = object(d, dw);
        const share = field(dev, "ShareID");
        return {
          poolName: text(field(dev, "PoolName"), `${dw}.PoolName`),
          deviceName: text(field(dev, "DeviceName"), `${dw}.DeviceName`),
          shareId: share == null ? null : text(share, `${dw}.ShareID`),
          requestNames: strings(field(dev, "RequestNames"), `${dw}.RequestNames`),
          cdiDeviceIds: strings(field(dev, "CDIDeviceIDs"), `${dw}.CDIDeviceIDs`),
        };
      }),
    );
  }
  return {
    claimUid: text(field(o, "ClaimUID"), `${where}.ClaimUID`),
    claimName: text(field(o, "ClaimName"), `${where}.ClaimName`),
    namespace: text(field(o, "Namespace"), `${where}.Namespace`),
    podUids: new Set(Object.keys(object(field(o, "PodUIDs"), `${where}.PodUIDs`))),
    driverState,
  };
}

/** The claims in a checkpoint file's `content`, checksum verified (upstream UnmarshalCheckpoint). */
export function decodeDraCheckpoint(content: string, file?: string): ClaimInfoState[] {
  const at = file ?? DRA_MANAGER_STATE_FILE;
  let outer: Json;
  let inner: Json;
  try {
    outer = object(JSON.parse(content), at);
  } catch (e) {
    if (e instanceof MalformedCheckpointError) throw e;
    throw new MalformedCheckpointError(`${at}: ${(e as Error).message}`, { cause: e });
  }
  const data = text(field(outer, "Data"), `${at}: Data`);
  const recorded = field(outer, "Checksum") ?? 0;
  if (typeof recorded !== "number" || !Number.isInteger(recorded)) {
    throw new MalformedCheckpointError(`${at}: Checksum: expected an unsigned integer`);
  }
  const actual = crc32(new TextEncoder().encode(data)) >>> 0;
  if (actual !== recorded) {
    throw new CorruptCheckpointError({
      expected: BigInt(recorded),
      actual: BigInt(actual),
      file,
    });
  }
  try {
    inner = object(JSON.parse(data), `${at}: Data`);
  } catch (e) {
    if (e instanceof MalformedCheckpointError) throw e;
    throw new MalformedCheckpointError(`${at}: Data: ${(e as Error).message}`, { cause: e });
  }
  const items = field(inner, "ClaimInfoStateList");
  if (items == null) return [];
  if (!Array.isArray(items)) {
    throw new MalformedCheckpointError(`${at}: ClaimInfoStateList: expected a list`);
  }
  return items.map((c, i) => parseClaim(c, `${at}: ClaimInfoStateList[${i}]`));
}

/** The codec the checkpoint manager writes and reads `dra_manager_state` with. */
export const DRA_CHECKPOINT_CODEC: CheckpointCodec<readonly ClaimInfoState[] | null> = {
  encode: encodeDraCheckpoint,
  decode: decodeDraCheckpoint,
};
