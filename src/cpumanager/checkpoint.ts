/**
 * @module
 * The CPU manager's checkpoint, `<root-dir>/cpu_manager_state`, in upstream's format so that
 * the Go kubelet and this one read each other's: `{"policyName", "defaultCpuSet", "entries":
 * {podUID: {container: cpuset}} (left out when empty), "checksum"}`.
 *
 * Versions, as upstream v1.36 handles them with its PodLevelResourceManagers gate off (the
 * default; the gate's V3 format with `podEntries` is not read here):
 * - V2 is written. Its checksum is spew's hash of the struct with the checksum zeroed, under
 *   the type name `state.CPUManagerCheckpoint` (upstream renames its CPUManagerCheckpointV2
 *   so that older kubelets accept the file); on reading, either name is accepted, and a
 *   checksum of 0 is accepted unverified ("compatibility with old file backend").
 * - V1, `entries` keyed by container ID (`{containerID: cpuset}`), is read when the file is not
 *   a valid V2 and migrated: each container ID must be known ({@link
 *   DecodeCpuCheckpointOptions.containerRef}, upstream's initial containers) or the read fails.
 *
 * A file that is neither is an error; upstream's NewCheckpointState then fails the kubelet's
 * start with "could not restore state from checkpoint: <error>, please drain this node and
 * delete the CPU manager checkpoint file <path> before restarting Kubelet". Upstream's
 * restoreState also fails when the policy differs from the configured one or a cpuset does not
 * parse; both are the caller's checks, on the decoded value. Where upstream returns the V1
 * attempt's error when both fail, the error here is the one for the format the file has.
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/state/checkpoint.go` and the load and
 * migrate half of state_checkpoint.go.
 */

import { goHashChecksum, verifyChecksum } from "../checkpointmanager/checksum.ts";
import {
  goJsonMarshal,
  GoJsonReader,
  type JsonValue,
  keyPath,
} from "../checkpointmanager/checkpoint_json.ts";
import { CorruptCheckpointError, MalformedCheckpointError } from "../checkpointmanager/errors.ts";
import { go, type GoValue } from "../checkpointmanager/go_value.ts";

/** The checkpoint's file name in the kubelet's root directory (upstream cpuManagerStateFileName). */
export const CPU_MANAGER_STATE_FILE = "cpu_manager_state";

/** The CPU manager's state as checkpointed. */
export interface CpuManagerCheckpoint {
  readonly policyName: string;
  /** The shared pool, in cpuset list form (`0,4-7`). */
  readonly defaultCpuSet: string;
  /** Pod UID -> container name -> its exclusive CPUs, in cpuset list form. */
  readonly entries: ReadonlyMap<string, ReadonlyMap<string, string>>;
}

/** A checkpoint read back, and the format it was in. */
export interface DecodedCpuCheckpoint extends CpuManagerCheckpoint {
  readonly entries: Map<string, Map<string, string>>;
  /** 2, or 1 for a file migrated from V1. */
  readonly version: 1 | 2;
}

/** How a V1 file's container IDs are mapped to pods and containers. */
export interface DecodeCpuCheckpointOptions {
  /** The pod and container of a container ID (upstream ContainerMap.GetContainerRef). */
  readonly containerRef?: (
    containerId: string,
  ) => { readonly podUID: string; readonly containerName: string } | undefined;
}

const TYPE = "state.CPUManagerCheckpoint";
const TYPE_V2 = "state.CPUManagerCheckpointV2";
const NESTED = "map[string]map[string]string";
const FIELDS = [
  ["PolicyName", "policyName"],
  ["DefaultCPUSet", "defaultCpuSet"],
  ["Entries", "entries"],
  ["Checksum", "checksum"],
] as const;

/** The file's content for `cp`, as the Go kubelet (v1.36, gate off) writes it. */
export function encodeCpuManagerCheckpoint(cp: CpuManagerCheckpoint): string {
  const entries = go.map(
    NESTED,
    [...cp.entries].map(([pod, containers]) =>
      [
        go.string(pod),
        go.map(
          "map[string]string",
          [...containers].map(([c, set]) => [go.string(c), go.string(set)] as const),
        ),
      ] as const
    ),
  );
  const checksum = goHashChecksum(value(TYPE, cp.policyName, cp.defaultCpuSet, entries, 0n));
  return goJsonMarshal(value(TYPE, cp.policyName, cp.defaultCpuSet, entries, BigInt(checksum)));
}

/**
 * The checkpoint in `text`, read from `file`: V2, else V1 migrated. Throws a
 * MalformedCheckpointError or CorruptCheckpointError naming the file.
 */
export function decodeCpuManagerCheckpoint(
  text: string,
  file: string,
  opts: DecodeCpuCheckpointOptions = {},
): DecodedCpuCheckpoint {
  const r = new GoJsonReader(file);
  const json = r.parse(text);
  let v2Error: Error;
  try {
    return readV2(r, json);
  } catch (e) {
    v2Error = e as Error;
  }
  let v1: DecodedCpuCheckpoint & { ids: Map<string, string> };
  try {
    v1 = readV1(r, json);
  } catch (e) {
    // Report the attempt that got as far as the checksum: that is the file's format.
    const shapedAsV2 = v2Error instanceof CorruptCheckpointError;
    throw shapedAsV2 || !(e instanceof Error) ? v2Error : e;
  }
  const entries = new Map<string, Map<string, string>>();
  for (const [id, set] of v1.ids) {
    const ref = opts.containerRef?.(id);
    if (ref === undefined) {
      throw new MalformedCheckpointError(
        `${file}: failed to migrate checkpoint from v1 to v2: containerID '${id}' not found in ` +
          "initial containers list",
      );
    }
    const pod = entries.get(ref.podUID) ?? new Map<string, string>();
    pod.set(ref.containerName, set);
    entries.set(ref.podUID, pod);
  }
  return { version: 1, policyName: v1.policyName, defaultCpuSet: v1.defaultCpuSet, entries };
}

/** The struct upstream hashes: a pointer to the checkpoint, the checksum zeroed. */
function value(
  type: string,
  policyName: string,
  defaultCpuSet: string,
  entries: GoValue,
  checksum: bigint,
): GoValue {
  return go.pointer(
    type,
    go.struct(type, [
      { name: "PolicyName", value: go.string(policyName), json: "policyName" },
      { name: "DefaultCPUSet", value: go.string(defaultCpuSet), json: "defaultCpuSet" },
      { name: "Entries", value: entries, json: "entries,omitempty" },
      { name: "Checksum", value: go.int(checksum, "checksum.Checksum"), json: "checksum" },
    ]),
  );
}

function readCommon(r: GoJsonReader, json: JsonValue) {
  const f = r.struct(json, "", FIELDS);
  return {
    policyName: r.string(f?.get("PolicyName") ?? null, "policyName") ?? "",
    defaultCpuSet: r.string(f?.get("DefaultCPUSet") ?? null, "defaultCpuSet") ?? "",
    rawEntries: f?.get("Entries"),
    checksum: r.int(f?.get("Checksum") ?? null, "checksum", { unsigned: true }) ?? 0n,
  };
}

function readV2(r: GoJsonReader, json: JsonValue): DecodedCpuCheckpoint {
  const { policyName, defaultCpuSet, rawEntries, checksum } = readCommon(r, json);
  const entries = new Map<string, Map<string, string>>();
  // Starts made (newCPUManagerCheckpointV2); JSON null makes it nil.
  let goEntries: (readonly [GoValue, GoValue])[] | null = [];
  if (rawEntries !== undefined) {
    const pods = r.map(rawEntries, "entries");
    goEntries = pods === null ? null : [...pods].map(([pod, raw]) => {
      const containers = readStringMap(r, raw, keyPath("entries", pod));
      entries.set(pod, new Map(containers ?? []));
      return [go.string(pod), stringMapValue(containers)] as const;
    });
  }
  if (checksum !== 0n) {
    const g = go.map(NESTED, goEntries);
    const named = goHashChecksum(value(TYPE_V2, policyName, defaultCpuSet, g, 0n));
    if (BigInt(named) !== checksum) {
      verifyChecksum(checksum, value(TYPE, policyName, defaultCpuSet, g, 0n), r.file);
    }
  }
  return { version: 2, policyName, defaultCpuSet, entries };
}

function readV1(
  r: GoJsonReader,
  json: JsonValue,
): DecodedCpuCheckpoint & { ids: Map<string, string> } {
  const { policyName, defaultCpuSet, rawEntries, checksum } = readCommon(r, json);
  let ids: [string, string][] | null = [];
  if (rawEntries !== undefined) ids = readStringMap(r, rawEntries, "entries");
  if (checksum !== 0n) {
    // V1 is only ever hashed under the legacy name.
    verifyChecksum(
      checksum,
      value(TYPE, policyName, defaultCpuSet, stringMapValue(ids), 0n),
      r.file,
    );
  }
  return { version: 1, policyName, defaultCpuSet, entries: new Map(), ids: new Map(ids ?? []) };
}

/** A map[string]string: null for JSON null, a null value as "". */
function readStringMap(r: GoJsonReader, v: JsonValue, path: string): [string, string][] | null {
  const m = r.map(v, path);
  return m === null
    ? null
    : [...m].map(([k, s]) => [k, r.string(s, keyPath(path, k)) ?? ""] as [string, string]);
}

function stringMapValue(entries: readonly (readonly [string, string])[] | null): GoValue {
  return go.map(
    "map[string]string",
    entries === null ? null : entries.map(([k, s]) => [go.string(k), go.string(s)] as const),
  );
}
