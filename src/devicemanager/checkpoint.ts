/**
 * @module
 * The device manager's checkpoint, `<root-dir>/device-plugins/kubelet_internal_checkpoint`, in
 * upstream's format so that the Go kubelet and this one read each other's:
 * `{"Data":{"PodDeviceEntries":[{PodUID, ContainerName, ResourceName, DeviceIDs (NUMA node ->
 * device IDs, the node as a JSON string key), AllocResp (the plugin's ContainerAllocateResponse,
 * protobuf, base64)}], "RegisteredDevices":{resource: [IDs]}}, "Checksum": n}`, where the
 * checksum is upstream's spew hash of `Data` ({@link goHashChecksum}).
 *
 * What upstream does with a bad file: `readCheckpoint` returns the error (a JSON error, or
 * "checkpoint is corrupted" when the checksum does not match) and `Start` logs "Continue after
 * failing to read checkpoint file. Device allocation info may NOT be up-to-date" and goes on
 * with no allocations; the next write replaces the file. A missing file is logged and is no
 * error. There is no older format to accept. An entry whose AllocResp is not a valid protobuf
 * is logged and skipped (`fromCheckpointData`); {@link decodeDeviceCheckpoint} reports such
 * entries in `skipped` for the caller to log.
 * Corresponds to upstream `pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go`.
 */

import { ContainerAllocateResponse } from "../../proto/deviceplugin/v1beta1/api.ts";
import { goHashChecksum, verifyChecksum } from "../checkpointmanager/checksum.ts";
import {
  goJsonMarshal,
  GoJsonReader,
  type JsonValue,
  keyPath,
  safeNumber,
} from "../checkpointmanager/checkpoint_json.ts";
import { go, type GoValue } from "../checkpointmanager/go_value.ts";

/** The checkpoint's file name in the device plugin directory (upstream's constant). */
export const CHECKPOINT_FILE = "kubelet_internal_checkpoint";

/** One container's devices of one resource (upstream checkpoint.PodDevicesEntry). */
export interface PodDevicesEntry {
  readonly podUID: string;
  readonly containerName: string;
  readonly resourceName: string;
  /** Device IDs by NUMA node, -1 for devices without topology (upstream DevicesPerNUMA). */
  readonly deviceIds: ReadonlyMap<number, readonly string[]>;
  /** The plugin's answer to Allocate for this container. */
  readonly allocResp: ContainerAllocateResponse;
}

/** What the checkpoint holds. */
export interface DeviceCheckpoint {
  readonly podDeviceEntries: readonly PodDevicesEntry[];
  /** The device IDs of each resource with a plugin (only the resource names are used back). */
  readonly registeredDevices: ReadonlyMap<string, readonly string[]>;
}

/** An entry upstream would skip: its AllocResp does not decode. */
export interface SkippedEntry {
  readonly podUID: string;
  readonly containerName: string;
  readonly resourceName: string;
  readonly error: Error;
}

/** A checkpoint read back, with the entries upstream would log and skip. */
export interface DecodedDeviceCheckpoint extends DeviceCheckpoint {
  readonly podDeviceEntries: PodDevicesEntry[];
  readonly registeredDevices: Map<string, string[]>;
  readonly skipped: SkippedEntry[];
}

const ENTRY_TYPE = "checkpoint.PodDevicesEntry";

/** The file's content for `cp`, as the Go kubelet writes it (entries in the given order). */
export function encodeDeviceCheckpoint(cp: DeviceCheckpoint): string {
  // As upstream's writeCheckpoint builds it: no entries is a nil slice, the rest made.
  const entries = cp.podDeviceEntries.map((e) =>
    entryValue(
      e.podUID,
      e.containerName,
      e.resourceName,
      go.map(
        "checkpoint.DevicesPerNUMA",
        [...e.deviceIds].map(([node, ids]) => [go.int64(node), go.strings(ids)] as const),
      ),
      go.bytes(ContainerAllocateResponse.encode(e.allocResp).finish()),
    )
  );
  const data = dataValue(
    go.slice(`[]${ENTRY_TYPE}`, entries.length === 0 ? null : entries),
    go.map(
      "map[string][]string",
      [...cp.registeredDevices].map(([r, ids]) => [go.string(r), go.strings(ids)] as const),
    ),
  );
  return goJsonMarshal(go.struct("checkpoint.Data", [
    { name: "Data", value: data },
    { name: "Checksum", value: go.uint64(goHashChecksum(data)) },
  ]));
}

/**
 * The checkpoint in `text`, read from `file` as upstream reads it; throws a
 * MalformedCheckpointError or a CorruptCheckpointError naming the file.
 */
export function decodeDeviceCheckpoint(text: string, file: string): DecodedDeviceCheckpoint {
  const r = new GoJsonReader(file);
  const top = r.struct(r.parse(text), "", [["Data", "Data"], ["Checksum", "Checksum"]]);
  // upstream getCheckpoint starts from made (empty, not nil) entries and devices.
  let entries: GoValue[] | null = [];
  let registered: (readonly [GoValue, GoValue])[] | null = [];
  const out: DecodedDeviceCheckpoint = {
    podDeviceEntries: [],
    registeredDevices: new Map(),
    skipped: [],
  };
  const data = r.struct(top?.get("Data") ?? null, "Data", [
    ["PodDeviceEntries", "PodDeviceEntries"],
    ["RegisteredDevices", "RegisteredDevices"],
  ]);
  const rawEntries = data?.get("PodDeviceEntries");
  if (rawEntries !== undefined) {
    const items = r.array(rawEntries, "Data.PodDeviceEntries");
    entries = items === null ? null : items.map((item, i) => {
      const { value, entry } = readEntry(r, item, `Data.PodDeviceEntries[${i}]`);
      try {
        out.podDeviceEntries.push({
          ...entry,
          allocResp: ContainerAllocateResponse.decode(entry.allocResp),
        });
      } catch (e) {
        out.skipped.push({ ...entry, error: e as Error });
      }
      return value;
    });
  }
  const rawRegistered = data?.get("RegisteredDevices");
  if (rawRegistered !== undefined) {
    const m = r.map(rawRegistered, "Data.RegisteredDevices");
    registered = m === null ? null : [...m].map(([resource, v]) => {
      const ids = readStrings(r, v, keyPath("Data.RegisteredDevices", resource));
      out.registeredDevices.set(resource, ids ?? []);
      return [go.string(resource), go.strings(ids)] as const;
    });
  }
  const checksum = r.int(top?.get("Checksum") ?? null, "Checksum", { unsigned: true }) ?? 0n;
  verifyChecksum(
    checksum,
    dataValue(go.slice(`[]${ENTRY_TYPE}`, entries), go.map("map[string][]string", registered)),
    file,
  );
  return out;
}

function dataValue(entries: GoValue, registered: GoValue): GoValue {
  return go.struct("checkpoint.checkpointData", [
    { name: "PodDeviceEntries", value: entries },
    { name: "RegisteredDevices", value: registered },
  ]);
}

function entryValue(
  podUID: string,
  containerName: string,
  resourceName: string,
  deviceIds: GoValue,
  allocResp: GoValue,
): GoValue {
  return go.struct(ENTRY_TYPE, [
    { name: "PodUID", value: go.string(podUID) },
    { name: "ContainerName", value: go.string(containerName) },
    { name: "ResourceName", value: go.string(resourceName) },
    { name: "DeviceIDs", value: deviceIds },
    { name: "AllocResp", value: allocResp },
  ]);
}

function readEntry(r: GoJsonReader, item: JsonValue, path: string): {
  value: GoValue;
  entry: Omit<PodDevicesEntry, "allocResp"> & { allocResp: Uint8Array };
} {
  const f = r.struct(item, path, [
    ["PodUID", "PodUID"],
    ["ContainerName", "ContainerName"],
    ["ResourceName", "ResourceName"],
    ["DeviceIDs", "DeviceIDs"],
    ["AllocResp", "AllocResp"],
  ]);
  const str = (name: string) => r.string(f?.get(name) ?? null, `${path}.${name}`) ?? "";
  const podUID = str("PodUID"), containerName = str("ContainerName");
  const resourceName = str("ResourceName");
  const deviceIds = new Map<number, string[]>();
  const rawIds = r.map(f?.get("DeviceIDs") ?? null, `${path}.DeviceIDs`);
  // "0" and "+0" are one key to Go; the last one wins, as in json.Unmarshal.
  const byNode = new Map<bigint, readonly [GoValue, GoValue]>();
  for (const [key, v] of rawIds ?? []) {
    const where = `${path}.DeviceIDs[${JSON.stringify(key)}]`;
    const node = r.intKey(key, where);
    const ids = readStrings(r, v, where);
    deviceIds.set(safeNumber(r, node, where), ids ?? []);
    byNode.set(node, [go.int64(node), go.strings(ids)]);
  }
  const idEntries = rawIds === null ? null : [...byNode.values()];
  const allocResp = r.bytes(f?.get("AllocResp") ?? null, `${path}.AllocResp`);
  return {
    value: entryValue(
      podUID,
      containerName,
      resourceName,
      go.map("checkpoint.DevicesPerNUMA", idEntries),
      go.bytes(allocResp),
    ),
    entry: {
      podUID,
      containerName,
      resourceName,
      deviceIds,
      allocResp: allocResp ?? new Uint8Array(),
    },
  };
}

/** A `[]string`: null for JSON null, a null item as "" (json.Unmarshal leaves it zero). */
function readStrings(r: GoJsonReader, v: JsonValue, path: string): string[] | null {
  const items = r.array(v, path);
  return items === null ? null : items.map((s, i) => r.string(s, `${path}[${i}]`) ?? "");
}
