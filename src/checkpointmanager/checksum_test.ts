import assert from "node:assert/strict";
import { compareUtf8, dumpForHash, goHashChecksum, verifyChecksum } from "./checksum.ts";
import { CorruptCheckpointError } from "./errors.ts";
import { go } from "./go_value.ts";

// The nil-slice and nil-pointer expectations (and 1400218696) are what `dump.ForHash` printed
// for the same values in the Go program the helper of issue 43 ran against k8s.io/kubernetes
// v1.36.3 (its source is in that helper's report, not in the repository); the other cases follow
// go-spew's format.go rules as written there.

Deno.test("dumpForHash prints nil slices, maps and byte slices as spew does", () => {
  const data = go.struct("checkpoint.checkpointData", [
    {
      name: "PodDeviceEntries",
      value: go.slice("[]checkpoint.PodDevicesEntry", [
        go.struct("checkpoint.PodDevicesEntry", [
          { name: "PodUID", value: go.string("p") },
          { name: "ContainerName", value: go.string("c") },
          { name: "ResourceName", value: go.string("r") },
          { name: "DeviceIDs", value: go.map("checkpoint.DevicesPerNUMA", null) },
          { name: "AllocResp", value: go.bytes(null) },
        ]),
      ]),
    },
    {
      name: "RegisteredDevices",
      value: go.map("map[string][]string", [[go.string("r"), go.strings(null)]]),
    },
  ]);
  assert.equal(
    dumpForHash(data),
    "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:" +
      "(string)p ContainerName:(string)c ResourceName:(string)r DeviceIDs:" +
      "(checkpoint.DevicesPerNUMA)<nil> AllocResp:([]uint8)<nil>}] RegisteredDevices:" +
      "(map[string][]string)map[r:<nil>]}",
  );
  assert.equal(goHashChecksum(data), 1400218696);
});

Deno.test("dumpForHash sorts keys (ints by value, strings by UTF-8) and prints bytes in decimal", () => {
  const v = go.struct("x.T", [
    {
      name: "M",
      value: go.map("x.M", [
        [go.int64(10), go.strings(["a"])],
        [go.int64(-1), go.strings([])],
        [go.int64(2), go.strings(["b", "c"])],
      ]),
    },
    {
      name: "S",
      // U+FF5E sorts before U+1F600 in UTF-8, after it in UTF-16.
      value: go.map("map[string]bool", [
        [go.string("\u{1F600}"), go.bool(true)],
        [go.string("\uFF5E"), go.bool(false)],
      ]),
    },
    { name: "B", value: go.bytes(new Uint8Array([0, 10, 255])) },
    { name: "E", value: go.bytes(new Uint8Array()) },
  ]);
  assert.equal(
    dumpForHash(v),
    "(x.T){M:(x.M)map[-1:[] 2:[b c] 10:[a]] S:(map[string]bool)map[\uFF5E:false \u{1F600}:true] " +
      "B:([]uint8)[0 10 255] E:([]uint8)[]}",
  );
});

Deno.test("dumpForHash drops the next field's type after a nil pointer in a map, as spew does", () => {
  const table = (n: number) =>
    go.pointer(
      "state.MemoryTable",
      go.struct("state.MemoryTable", [
        { name: "TotalMemSize", value: go.uint64(n) },
        { name: "SystemReserved", value: go.uint64(0) },
        { name: "Allocatable", value: go.uint64(n) },
        { name: "Reserved", value: go.uint64(0) },
        { name: "Free", value: go.uint64(n) },
      ]),
    );
  const node = (memoryMap: ReturnType<typeof go.map>, cells: ReturnType<typeof go.slice>) =>
    go.pointer(
      "state.NUMANodeState",
      go.struct("state.NUMANodeState", [
        { name: "NumberOfAssignments", value: go.int(0) },
        { name: "MemoryMap", value: memoryMap },
        { name: "Cells", value: cells },
      ]),
    );
  const mm = "map[v1.ResourceName]*state.MemoryTable";
  const v = go.pointer(
    "state.MemoryManagerCheckpointV1",
    go.struct("state.MemoryManagerCheckpointV1", [
      { name: "PolicyName", value: go.string("Static") },
      {
        name: "MachineState",
        value: go.map("state.NUMANodeMap", [
          [go.int(2), node(go.map(mm, null), go.slice("[]int", null))],
          [go.int(1), go.pointer("state.NUMANodeState", null)],
          [
            go.int(0),
            node(
              go.map(mm, [
                [go.string("z", "v1.ResourceName"), go.pointer("state.MemoryTable", null)],
                [go.string("a", "v1.ResourceName"), table(1)],
              ]),
              go.slice("[]int", [go.int(0)]),
            ),
          ],
        ]),
      },
      {
        name: "Entries",
        value: go.map("state.ContainerMemoryAssignments", [[
          go.string("p"),
          go.map("map[string][]state.Block", [[
            go.string("c"),
            go.slice("[]state.Block", [
              go.struct("state.Block", [
                { name: "NUMAAffinity", value: go.slice("[]int", null) },
                { name: "Type", value: go.string("memory", "v1.ResourceName") },
                { name: "Size", value: go.uint64(1) },
              ]),
            ]),
          ]]),
        ]]),
      },
      { name: "Checksum", value: go.int(0, "checksum.Checksum") },
    ]),
  );
  assert.equal(
    dumpForHash(v),
    "(*state.MemoryManagerCheckpointV1){PolicyName:(string)Static MachineState:" +
      "(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:" +
      "(map[v1.ResourceName]*state.MemoryTable)map[a:<*>{TotalMemSize:(uint64)1 " +
      "SystemReserved:(uint64)0 Allocatable:(uint64)1 Reserved:(uint64)0 Free:(uint64)1} " +
      "z:<nil>] Cells:[0]} 1:<nil> 2:<*>{NumberOfAssignments:(int)0 MemoryMap:" +
      "(map[v1.ResourceName]*state.MemoryTable)<nil> Cells:([]int)<nil>}] Entries:" +
      "(state.ContainerMemoryAssignments)map[p:map[c:[{NUMAAffinity:([]int)<nil> Type:" +
      "(v1.ResourceName)memory Size:(uint64)1}]]] Checksum:(checksum.Checksum)0}",
  );
});

Deno.test("dumpForHash prints a top-level pointer's type and a nil field pointer's", () => {
  const v = go.pointer(
    "x.T",
    go.struct("x.T", [
      { name: "P", value: go.pointer("x.U", null) },
      { name: "Q", value: go.pointer("string", go.string("s")) },
    ]),
  );
  assert.equal(dumpForHash(v), "(*x.T){P:(*x.U)<nil> Q:(*string)s}");
  // The trivial case src/allocation/state_checkpoint.ts hashes.
  assert.equal(dumpForHash(go.string("{}")), "(string){}");
});

Deno.test("goHashChecksum covers integers beyond 2^53 exactly", () => {
  const big = (n: bigint) => go.struct("x.T", [{ name: "N", value: go.uint64(n) }]);
  assert.equal(dumpForHash(big(2n ** 64n - 1n)), "(x.T){N:(uint64)18446744073709551615}");
  assert.notEqual(goHashChecksum(big(2n ** 62n)), goHashChecksum(big(2n ** 62n + 1n)));
});

Deno.test("verifyChecksum throws CorruptCheckpointError with both checksums and the file", () => {
  const v = go.string("x");
  verifyChecksum(goHashChecksum(v), v);
  assert.throws(
    () => verifyChecksum(1, v, "/var/lib/kubelet/f"),
    (e) =>
      e instanceof CorruptCheckpointError && e.expected === 1n &&
      e.actual === BigInt(goHashChecksum(v)) &&
      e.message.startsWith("/var/lib/kubelet/f: checkpoint is corrupted: it records checksum 1"),
  );
});

Deno.test("compareUtf8 orders by code point", () => {
  assert.ok(compareUtf8("\uFF5E", "\u{1F600}") < 0);
  assert.ok(compareUtf8("a", "ab") < 0);
  assert.equal(compareUtf8("é", "é"), 0);
});
