/**
 * @module
 * The memory manager's checkpoint, `<root-dir>/memory_manager_state`, in upstream's format so
 * that the Go kubelet and this one read each other's: `{"policyName", "machineState": {NUMA
 * node: {"numberOfAssignments", "memoryMap": {resource: {"total", "systemReserved",
 * "allocatable", "reserved", "free"}}, "cells": [nodes]}}, "entries": {podUID: {container:
 * [{"numaAffinity", "type", "size"}]}} (left out when empty), "checksum"}`.
 *
 * Versions, as upstream v1.36 handles them with its PodLevelResourceManagers gate off (the
 * default): the V1 struct is written, hashed under its legacy type name
 * `state.MemoryManagerCheckpoint` so that older kubelets accept it; on reading, a checksum
 * under either `state.MemoryManagerCheckpointV1` or the legacy name is accepted, and a checksum
 * of 0 is accepted unverified. The gate's V2 format (with `podEntries`) fails the checksum, as
 * it does upstream with the gate off.
 *
 * A bad file is an error; upstream's NewCheckpointState then fails the kubelet's start with
 * "could not restore state from checkpoint: <error>, please drain this node and delete the
 * memory manager checkpoint file <path> before restarting Kubelet". A policy other than the
 * configured one is also fatal upstream ("[memorymanager] configured policy %q differs from
 * state checkpoint policy %q"): the caller's check on the decoded value. A `null` node state or
 * memory table in a file is read as a zero one; sizes past 2^53 bytes are refused as they
 * cannot be held exactly in a number.
 * Corresponds to upstream `pkg/kubelet/cm/memorymanager/state/checkpoint.go`, state.go's types
 * and the load half of state_checkpoint.go.
 */

import { goHashChecksum, verifyChecksum } from "../checkpointmanager/checksum.ts";
import {
  goJsonMarshal,
  GoJsonReader,
  type JsonValue,
  keyPath,
  safeNumber,
} from "../checkpointmanager/checkpoint_json.ts";
import { go, type GoValue } from "../checkpointmanager/go_value.ts";

/** The checkpoint's file name in the kubelet's root directory (upstream memoryManagerStateFileName). */
export const MEMORY_MANAGER_STATE_FILE = "memory_manager_state";

/** One NUMA node's accounting of one memory type, in bytes (upstream MemoryTable). */
export interface MemoryTable {
  readonly totalMemSize: number;
  readonly systemReserved: number;
  readonly allocatable: number;
  readonly reserved: number;
  readonly free: number;
}

/** One NUMA node's state (upstream NUMANodeState). */
export interface NumaNodeState {
  /** Memory assignments made from this node (memory and hugepages count one each). */
  readonly numberOfAssignments: number;
  /** By resource name: `memory`, `hugepages-2Mi`, ... */
  readonly memoryMap: ReadonlyMap<string, MemoryTable>;
  /** This node and the nodes it is grouped with for multi-NUMA allocations. */
  readonly cells: readonly number[];
}

/** State by NUMA node (upstream NUMANodeMap). */
export type NumaNodeMap = ReadonlyMap<number, NumaNodeState>;

/** An amount of one memory type on a set of NUMA nodes (upstream Block). */
export interface Block {
  readonly numaAffinity: readonly number[];
  readonly type: string;
  readonly size: number;
}

/** Pod UID -> container name -> blocks (upstream ContainerMemoryAssignments). */
export type ContainerMemoryAssignments = ReadonlyMap<string, ReadonlyMap<string, readonly Block[]>>;

/** The memory manager's state as checkpointed. */
export interface MemoryManagerCheckpoint {
  readonly policyName: string;
  readonly machineState: NumaNodeMap;
  readonly entries: ContainerMemoryAssignments;
}

const TYPE = "state.MemoryManagerCheckpoint";
const TYPE_V1 = "state.MemoryManagerCheckpointV1";
const NODE_MAP = "state.NUMANodeMap";
const MEMORY_MAP = "map[v1.ResourceName]*state.MemoryTable";
const ASSIGNMENTS = "state.ContainerMemoryAssignments";
const BLOCKS = "[]state.Block";

/** The file's content for `cp`, as the Go kubelet (v1.36, gate off) writes it. */
export function encodeMemoryManagerCheckpoint(cp: MemoryManagerCheckpoint): string {
  const machine = go.map(
    NODE_MAP,
    [...cp.machineState].map(([node, s]) =>
      [
        go.int(node),
        nodeValue(
          s.numberOfAssignments,
          go.map(
            MEMORY_MAP,
            [...s.memoryMap].map(([res, t]) =>
              [go.string(res, "v1.ResourceName"), tableValue(t)] as const
            ),
          ),
          ints(s.cells),
        ),
      ] as const
    ),
  );
  const entries = go.map(
    ASSIGNMENTS,
    [...cp.entries].map(([pod, containers]) =>
      [
        go.string(pod),
        go.map(
          `map[string]${BLOCKS}`,
          [...containers].map(([c, blocks]) =>
            [
              go.string(c),
              go.slice(BLOCKS, blocks.map((b) => blockValue(ints(b.numaAffinity), b.type, b.size))),
            ] as const
          ),
        ),
      ] as const
    ),
  );
  const checksum = goHashChecksum(value(TYPE, cp.policyName, machine, entries, 0n));
  return goJsonMarshal(value(TYPE, cp.policyName, machine, entries, BigInt(checksum)));
}

/**
 * The checkpoint in `text`, read from `file` as upstream reads it. Throws a
 * MalformedCheckpointError or CorruptCheckpointError naming the file.
 */
export function decodeMemoryManagerCheckpoint(
  text: string,
  file: string,
): MemoryManagerCheckpoint & {
  readonly machineState: Map<number, NumaNodeState>;
  readonly entries: Map<string, Map<string, Block[]>>;
} {
  const r = new GoJsonReader(file);
  const f = r.struct(r.parse(text), "", [
    ["PolicyName", "policyName"],
    ["MachineState", "machineState"],
    ["Entries", "entries"],
    ["Checksum", "checksum"],
  ]);
  const policyName = r.string(f?.get("PolicyName") ?? null, "policyName") ?? "";
  const machineState = new Map<number, NumaNodeState>();
  const entries = new Map<string, Map<string, Block[]>>();
  // Both start made (newMemoryManagerCheckpointV1); JSON null makes them nil.
  let goMachine: (readonly [GoValue, GoValue])[] | null = [];
  let goEntries: (readonly [GoValue, GoValue])[] | null = [];

  const rawMachine = f?.get("MachineState");
  if (rawMachine !== undefined) {
    const m = r.map(rawMachine, "machineState");
    const byNode = new Map<bigint, readonly [GoValue, GoValue]>();
    for (const [key, raw] of m ?? []) {
      const path = `machineState[${JSON.stringify(key)}]`;
      const node = r.intKey(key, path);
      const { value: v, state } = readNode(r, raw, path);
      machineState.set(safeNumber(r, node, path), state);
      byNode.set(node, [go.int(node), v]);
    }
    goMachine = m === null ? null : [...byNode.values()];
  }

  const rawEntries = f?.get("Entries");
  if (rawEntries !== undefined) {
    const pods = r.map(rawEntries, "entries");
    goEntries = pods === null ? null : [...pods].map(([pod, raw]) => {
      const podPath = keyPath("entries", pod);
      const containers = r.map(raw, podPath);
      const typed = new Map<string, Block[]>();
      entries.set(pod, typed);
      const goContainers = containers === null ? null : [...containers].map(([c, rawBlocks]) => {
        const path = keyPath(podPath, c);
        const items = r.array(rawBlocks, path);
        const blocks = items?.map((b, i) => readBlock(r, b, `${path}[${i}]`)) ?? null;
        typed.set(c, blocks?.map((b) => b.block) ?? []);
        return [go.string(c), go.slice(BLOCKS, blocks?.map((b) => b.value) ?? null)] as const;
      });
      return [go.string(pod), go.map(`map[string]${BLOCKS}`, goContainers)] as const;
    });
  }

  const checksum = r.int(f?.get("Checksum") ?? null, "checksum", { unsigned: true }) ?? 0n;
  if (checksum !== 0n) {
    const machine = go.map(NODE_MAP, goMachine), assigned = go.map(ASSIGNMENTS, goEntries);
    const named = goHashChecksum(value(TYPE_V1, policyName, machine, assigned, 0n));
    if (BigInt(named) !== checksum) {
      verifyChecksum(checksum, value(TYPE, policyName, machine, assigned, 0n), file);
    }
  }
  return { policyName, machineState, entries };
}

/** The struct upstream hashes: a pointer to the checkpoint, the checksum zeroed. */
function value(
  type: string,
  policyName: string,
  machine: GoValue,
  entries: GoValue,
  checksum: bigint,
): GoValue {
  return go.pointer(
    type,
    go.struct(type, [
      { name: "PolicyName", value: go.string(policyName), json: "policyName" },
      { name: "MachineState", value: machine, json: "machineState" },
      { name: "Entries", value: entries, json: "entries,omitempty" },
      { name: "Checksum", value: go.int(checksum, "checksum.Checksum"), json: "checksum" },
    ]),
  );
}

function nodeValue(assignments: number | bigint, memoryMap: GoValue, cells: GoValue): GoValue {
  return go.pointer(
    "state.NUMANodeState",
    go.struct("state.NUMANodeState", [
      { name: "NumberOfAssignments", value: go.int(assignments), json: "numberOfAssignments" },
      { name: "MemoryMap", value: memoryMap, json: "memoryMap" },
      { name: "Cells", value: cells, json: "cells" },
    ]),
  );
}

const TABLE_FIELDS = [
  ["TotalMemSize", "total", "totalMemSize"],
  ["SystemReserved", "systemReserved", "systemReserved"],
  ["Allocatable", "allocatable", "allocatable"],
  ["Reserved", "reserved", "reserved"],
  ["Free", "free", "free"],
] as const;

function tableValue(t: Readonly<Record<(typeof TABLE_FIELDS)[number][2], number | bigint>>) {
  return go.pointer(
    "state.MemoryTable",
    go.struct(
      "state.MemoryTable",
      TABLE_FIELDS.map(([name, json, key]) => ({ name, json, value: go.uint64(t[key]) })),
    ),
  );
}

function blockValue(affinity: GoValue, type: string, size: number | bigint): GoValue {
  return go.struct("state.Block", [
    { name: "NUMAAffinity", value: affinity, json: "numaAffinity" },
    { name: "Type", value: go.string(type, "v1.ResourceName"), json: "type" },
    { name: "Size", value: go.uint64(size), json: "size" },
  ]);
}

function ints(xs: readonly (number | bigint)[] | null): GoValue {
  return go.slice("[]int", xs === null ? null : xs.map((x) => go.int(x)));
}

function readInts(r: GoJsonReader, v: JsonValue, path: string): bigint[] | null {
  const items = r.array(v, path);
  return items === null ? null : items.map((x, i) => r.int(x, `${path}[${i}]`) ?? 0n);
}

function readNode(
  r: GoJsonReader,
  raw: JsonValue,
  path: string,
): { value: GoValue; state: NumaNodeState } {
  if (raw === null) {
    return {
      value: go.pointer("state.NUMANodeState", null),
      state: { numberOfAssignments: 0, memoryMap: new Map(), cells: [] },
    };
  }
  const f = r.struct(raw, path, [
    ["NumberOfAssignments", "numberOfAssignments"],
    ["MemoryMap", "memoryMap"],
    ["Cells", "cells"],
  ]);
  const assignments = r.int(f?.get("NumberOfAssignments") ?? null, `${path}.numberOfAssignments`) ??
    0n;
  const rawMap = r.map(f?.get("MemoryMap") ?? null, `${path}.memoryMap`);
  const memoryMap = new Map<string, MemoryTable>();
  const goMap = rawMap === null ? null : [...rawMap].map(([res, t]) => {
    const tPath = keyPath(`${path}.memoryMap`, res);
    const tf = r.struct(t, tPath, TABLE_FIELDS.map(([name, json]) => [name, json] as const));
    const raw = Object.fromEntries(
      TABLE_FIELDS.map(([name, json, key]) => [
        key,
        r.int(tf?.get(name) ?? null, `${tPath}.${json}`, { unsigned: true }) ?? 0n,
      ]),
    ) as Record<(typeof TABLE_FIELDS)[number][2], bigint>;
    memoryMap.set(
      res,
      Object.fromEntries(
        Object.entries(raw).map(([k, n]) => [k, safeNumber(r, n, `${tPath}.${k}`)]),
      ) as unknown as MemoryTable,
    );
    const v = t === null ? go.pointer("state.MemoryTable", null) : tableValue(raw);
    return [go.string(res, "v1.ResourceName"), v] as const;
  });
  const cells = readInts(r, f?.get("Cells") ?? null, `${path}.cells`);
  return {
    value: nodeValue(assignments, go.map(MEMORY_MAP, goMap), ints(cells)),
    state: {
      numberOfAssignments: safeNumber(r, assignments, `${path}.numberOfAssignments`),
      memoryMap,
      cells: (cells ?? []).map((c) => safeNumber(r, c, `${path}.cells`)),
    },
  };
}

function readBlock(
  r: GoJsonReader,
  raw: JsonValue,
  path: string,
): { value: GoValue; block: Block } {
  const f = r.struct(raw, path, [
    ["NUMAAffinity", "numaAffinity"],
    ["Type", "type"],
    ["Size", "size"],
  ]);
  const affinity = readInts(r, f?.get("NUMAAffinity") ?? null, `${path}.numaAffinity`);
  const type = r.string(f?.get("Type") ?? null, `${path}.type`) ?? "";
  const size = r.int(f?.get("Size") ?? null, `${path}.size`, { unsigned: true }) ?? 0n;
  return {
    value: blockValue(ints(affinity), type, size),
    block: {
      numaAffinity: (affinity ?? []).map((n) => safeNumber(r, n, `${path}.numaAffinity`)),
      type,
      size: safeNumber(r, size, `${path}.size`),
    },
  };
}
