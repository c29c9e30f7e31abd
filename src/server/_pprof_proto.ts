/**
 * @module
 * V8's profiles as pprof profiles: a CPU profile (`Profiler.stop`) and a sampling heap profile
 * (`HeapProfiler.getSamplingProfile`) turned into the `Profile` message of
 * github.com/google/pprof/proto/profile.proto, which `go tool pprof` reads (gzipped). Each V8
 * call frame becomes a function (name, file, the line its definition starts on) and a location
 * at that line; there are no mappings or addresses, so nothing needs symbolizing. The lines
 * are those of the JavaScript V8 runs (Deno's transpiled output for a .ts module, no source
 * map applied), so `pprof -list` may not line up with the TypeScript source. Private
 * helper of `pprof.ts`. Corresponds to the encoder of Go's runtime/pprof (proto.go), which
 * writes the same message for the Go kubelet's /debug/pprof/.
 */

import { fileURLToPath } from "node:url";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/** A V8 call frame (Runtime.CallFrame): positions are 0-based, -1 when there is none. */
export interface V8CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
  readonly columnNumber: number;
}

/** Profiler.Profile, the fields read here. */
export interface V8CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: V8CallFrame;
    readonly children?: readonly number[];
  }[];
  /** Monotonic microseconds. */
  readonly startTime: number;
  readonly endTime: number;
  /** The node sampled, one a sample. */
  readonly samples?: readonly number[];
  /** Microseconds since the previous sample (the first: since startTime). */
  readonly timeDeltas?: readonly number[];
}

/** HeapProfiler.SamplingHeapProfileNode. */
export interface V8HeapNode {
  readonly callFrame: V8CallFrame;
  /** Bytes of the live objects sampled here, scaled to the unsampled estimate by V8. */
  readonly selfSize: number;
  readonly id: number;
  readonly children: readonly V8HeapNode[];
}

/** HeapProfiler.SamplingHeapProfile. */
export interface V8SamplingHeapProfile {
  readonly head: V8HeapNode;
  readonly samples: readonly { readonly size: number; readonly nodeId: number }[];
}

/** One stack (leaf first) and its values, one a sample type. */
export interface StackValues {
  readonly frames: readonly V8CallFrame[];
  readonly values: number[];
}

/** V8's pseudo frames that stand for no code: the tree's root, and time the thread slept. */
const ROOT = "(root)";
const IDLE = "(idle)";

/** The key two equal stacks share. */
function stackKey(frames: readonly V8CallFrame[]): string {
  return frames.map((f) => `${f.functionName}\0${f.url}\0${f.lineNumber}\0${f.columnNumber}`)
    .join("\n");
}

/** A node's frames, leaf first, without the root, given each node's parent. */
function framesOf<N extends { callFrame: V8CallFrame }>(
  node: N,
  parent: ReadonlyMap<N, N>,
): V8CallFrame[] {
  const frames: V8CallFrame[] = [];
  for (let n: N | undefined = node; n; n = parent.get(n)) {
    if (n.callFrame.functionName !== ROOT || n.callFrame.url !== "") frames.push(n.callFrame);
  }
  return frames;
}

/**
 * A CPU profile's samples by stack: [samples, cpu nanoseconds]. A sample's time is the time to
 * the next one (to the profile's end for the last), as measured by V8's sampler; samples of
 * "(idle)", where the thread waited for work, are left out, as Go's CPU profile has no time of
 * a thread that does not run.
 */
export function cpuStacks(profile: V8CpuProfile): StackValues[] {
  type Node = V8CpuProfile["nodes"][number];
  const byId = new Map<number, Node>(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<Node, Node>();
  for (const n of profile.nodes) {
    for (const c of n.children ?? []) {
      const child = byId.get(c);
      if (child) parent.set(child, n);
    }
  }
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  const stacks = new Map<number, StackValues>();
  let at = profile.startTime;
  for (let i = 0; i < samples.length; i++) {
    at += deltas[i] ?? 0;
    const next = i + 1 < samples.length ? at + (deltas[i + 1] ?? 0) : profile.endTime;
    const node = byId.get(samples[i]!);
    if (!node || node.callFrame.functionName === IDLE) continue;
    let s = stacks.get(node.id);
    if (!s) stacks.set(node.id, s = { frames: framesOf(node, parent), values: [0, 0] });
    s.values[0]! += 1;
    s.values[1]! += Math.max(0, Math.round((next - at) * 1000));
  }
  return [...stacks.values()];
}

/**
 * A sampling heap profile's live objects by stack: [samples, bytes]. The samples are the
 * sampled objects still alive; the bytes are V8's estimate of all live objects allocated there
 * (each sample scaled by the sampling interval, as Go's inuse_space is).
 */
export function heapStacks(profile: V8SamplingHeapProfile): StackValues[] {
  const parent = new Map<V8HeapNode, V8HeapNode>();
  const nodes: V8HeapNode[] = [];
  const walk: V8HeapNode[] = [profile.head];
  while (walk.length > 0) {
    const n = walk.pop()!;
    nodes.push(n);
    for (const c of n.children) {
      parent.set(c, n);
      walk.push(c);
    }
  }
  const count = new Map<number, number>();
  for (const s of profile.samples) count.set(s.nodeId, (count.get(s.nodeId) ?? 0) + 1);
  return nodes.filter((n) => n.selfSize > 0 || count.has(n.id)).map((n) => ({
    frames: framesOf(n, parent),
    values: [count.get(n.id) ?? 0, n.selfSize],
  }));
}

/** `later` minus `earlier`, stack by stack (Go's delta profiles); stacks that net to zero go. */
export function subtractStacks(
  later: readonly StackValues[],
  earlier: readonly StackValues[],
): StackValues[] {
  const out = new Map<string, StackValues>();
  for (const s of later) out.set(stackKey(s.frames), { frames: s.frames, values: [...s.values] });
  for (const s of earlier) {
    const key = stackKey(s.frames);
    let d = out.get(key);
    if (!d) out.set(key, d = { frames: s.frames, values: s.values.map(() => 0) });
    s.values.forEach((v, i) => (d!.values[i] = (d!.values[i] ?? 0) - v));
  }
  return [...out.values()].filter((s) => s.values.some((v) => v !== 0));
}

/** A frame's function name as pprof shows it. */
export function frameName(f: V8CallFrame): string {
  return f.functionName === "" ? "(anonymous)" : f.functionName;
}

/** A frame's file: a path for file: URLs, else the URL as V8 gives it (`ext:`, `node:`). */
export function frameFile(f: V8CallFrame): string {
  if (!f.url.startsWith("file:")) return f.url;
  try {
    return fileURLToPath(f.url);
  } catch {
    return f.url;
  }
}

/** What {@link encodeProfile} writes besides the stacks. */
export interface ProfileHeader {
  /** [type, unit] of each value of a sample, e.g. ["cpu", "nanoseconds"]. */
  readonly sampleTypes: readonly (readonly [string, string])[];
  /** [type, unit] of the sampling period and the period itself. */
  readonly periodType: readonly [string, string];
  readonly period: number;
  /** Milliseconds since the epoch when the profile was taken (or began). */
  readonly timeMs: number;
  readonly durationNanos?: number;
  /** The sample type pprof shows when none is asked for. @default the last */
  readonly defaultSampleType?: string;
}

/** `stacks` as an (uncompressed) profile.proto Profile. */
export function encodeProfile(header: ProfileHeader, stacks: readonly StackValues[]): Uint8Array {
  const strings = new Map<string, number>([["", 0]]);
  const str = (s: string) => {
    let i = strings.get(s);
    if (i === undefined) strings.set(s, i = strings.size);
    return i;
  };
  const functions = new Map<string, { id: number; name: number; file: number; line: number }>();
  const locations = new Map<string, { id: number; fn: number; line: number }>();
  const locationOf = (f: V8CallFrame): number => {
    const line = f.lineNumber >= 0 ? f.lineNumber + 1 : 0;
    const name = frameName(f);
    const file = frameFile(f);
    const fkey = `${name}\0${file}\0${line}`;
    let fn = functions.get(fkey);
    if (!fn) {
      functions.set(fkey, fn = { id: functions.size + 1, name: str(name), file: str(file), line });
    }
    let loc = locations.get(fkey);
    if (!loc) locations.set(fkey, loc = { id: locations.size + 1, fn: fn.id, line });
    return loc.id;
  };
  const w = new BinaryWriter();
  const valueType = (field: number, [type, unit]: readonly [string, string]) => {
    w.tag(field, WireType.LengthDelimited).fork()
      .tag(1, WireType.Varint).int64(str(type))
      .tag(2, WireType.Varint).int64(str(unit))
      .join();
  };
  for (const t of header.sampleTypes) valueType(1, t);
  for (const s of stacks) {
    const ids = s.frames.map(locationOf);
    w.tag(2, WireType.LengthDelimited).fork();
    w.tag(1, WireType.LengthDelimited).fork();
    for (const id of ids) w.uint64(id);
    w.join();
    w.tag(2, WireType.LengthDelimited).fork();
    for (const v of s.values) w.int64(v);
    w.join();
    w.join();
  }
  for (const loc of locations.values()) {
    w.tag(4, WireType.LengthDelimited).fork()
      .tag(1, WireType.Varint).uint64(loc.id)
      .tag(4, WireType.LengthDelimited).fork()
      .tag(1, WireType.Varint).uint64(loc.fn)
      .tag(2, WireType.Varint).int64(loc.line)
      .join()
      .join();
  }
  for (const fn of functions.values()) {
    w.tag(5, WireType.LengthDelimited).fork()
      .tag(1, WireType.Varint).uint64(fn.id)
      .tag(2, WireType.Varint).int64(fn.name)
      .tag(3, WireType.Varint).int64(fn.name)
      .tag(4, WireType.Varint).int64(fn.file)
      .tag(5, WireType.Varint).int64(fn.line)
      .join();
  }
  // The strings the header names go in before the table is written.
  const period = str(header.periodType[0]);
  const periodUnit = str(header.periodType[1]);
  const defaultType = header.defaultSampleType === undefined ? 0 : str(header.defaultSampleType);
  for (const s of strings.keys()) w.tag(6, WireType.LengthDelimited).string(s);
  w.tag(9, WireType.Varint).int64(BigInt(Math.round(header.timeMs)) * 1_000_000n);
  if (header.durationNanos !== undefined) {
    w.tag(10, WireType.Varint).int64(Math.round(header.durationNanos));
  }
  w.tag(11, WireType.LengthDelimited).fork()
    .tag(1, WireType.Varint).int64(period)
    .tag(2, WireType.Varint).int64(periodUnit)
    .join();
  w.tag(12, WireType.Varint).int64(header.period);
  if (defaultType !== 0) w.tag(14, WireType.Varint).int64(defaultType);
  return w.finish();
}
