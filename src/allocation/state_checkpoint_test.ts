import assert from "node:assert/strict";
import { join } from "node:path";
import {
  ALLOCATED_PODS_STATE_FILE,
  checkpointChecksum,
  CheckpointError,
  decodeCheckpoint,
  encodeCheckpoint,
  ResourceState,
} from "./state_checkpoint.ts";

// The checkpoint upstream's state_checkpoint_test.go reads, as the Go kubelet writes it.
const UPSTREAM =
  `{"data":"{\\"entries\\":{\\"pod1\\":{\\"ContainerResources\\":{\\"container1\\":{\\"requests\\":{\\"cpu\\":\\"1Ki\\",\\"memory\\":\\"1Ki\\"}}}}}}","checksum":1178570812}`;

Deno.test("checkpointChecksum is the Go kubelet's: FNV-1a 32 over spew's (string) form", () => {
  const { data } = JSON.parse(UPSTREAM);
  assert.deepEqual(checkpointChecksum(data), 1178570812);
  assert.ok(checkpointChecksum(data + " ") !== 1178570812);
});

Deno.test("decodeCheckpoint reads the Go kubelet's file", () => {
  const { entries, checksum } = decodeCheckpoint(UPSTREAM);
  assert.deepEqual(checksum, 1178570812);
  assert.deepEqual(entries.get("pod1")?.containerResources.get("container1"), {
    requests: { cpu: "1Ki", memory: "1Ki" },
  });
});

Deno.test("encodeCheckpoint writes what Go's encoding/json writes, and reads it back", () => {
  const pods = new Map([
    ["b-uid", {
      containerResources: new Map([
        ["web", { requests: { memory: "35Mi", cpu: "20m" }, limits: { cpu: "30m" } }],
        ["app", {}],
      ]),
    }],
    ["a-uid", { containerResources: new Map() }],
  ]);
  const { text, checksum } = encodeCheckpoint(pods);
  const outer = JSON.parse(text);
  // Keys sorted; ResourceRequirements' fields in declaration order, empty ones left out.
  assert.deepEqual(
    outer.data,
    `{"entries":{"a-uid":{"ContainerResources":{},"PodLevelResources":null},` +
      `"b-uid":{"ContainerResources":{"app":{},"web":{"limits":{"cpu":"30m"},` +
      `"requests":{"cpu":"20m","memory":"35Mi"}}},"PodLevelResources":null}}}`,
  );
  assert.deepEqual(outer.checksum, checksum);
  const back = decodeCheckpoint(text).entries;
  assert.deepEqual(back.get("b-uid")?.containerResources.get("web")?.requests?.cpu, "20m");
  assert.deepEqual(encodeCheckpoint(new Map()).text.includes(`"data":"{}"`), true);
});

Deno.test("ResourceState persists every change and a new one restores it", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const a = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    assert.deepEqual(a.uids(), []);
    await a.set("u1", {
      containerResources: new Map([["c", { requests: { cpu: "1" } }]]),
    });
    await a.setContainer("u1", "d", { limits: { memory: "1Gi" } });
    await a.set("u2", { containerResources: new Map() });
    await a.removeOrphans(new Set(["u1"]));
    const b = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    assert.deepEqual(b.uids(), ["u1"]);
    assert.deepEqual(b.getContainer("u1", "c"), { requests: { cpu: "1" } });
    assert.deepEqual(b.getContainer("u1", "d"), { limits: { memory: "1Gi" } });
    await b.remove("u1");
    const c = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    assert.deepEqual(c.uids(), []);
    // No temporary file is left behind.
    const names = [...Deno.readDirSync(dir)].map((e) => e.name);
    assert.deepEqual(names, [ALLOCATED_PODS_STATE_FILE]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ResourceState writes changes made before its write starts once, all of them", async () => {
  const dir = await Deno.makeTempDir();
  const rename = Deno.rename;
  let renames = 0;
  (Deno as { rename: typeof Deno.rename }).rename = (from, to) => {
    renames++;
    return rename(from, to);
  };
  try {
    const a = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    // A burst of admissions: every change before the write starts goes in its one write.
    const uids = Array.from({ length: 50 }, (_, i) => `u${i}`);
    await Promise.all(uids.map((uid) => a.setContainer(uid, "c", { requests: { cpu: "1" } })));
    assert.equal(renames, 1);
    const b = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    assert.deepEqual(b.uids().sort(), [...uids].sort());
    // A change after that write is written on its own.
    await a.remove("u0");
    assert.equal(renames, 2);
    const c = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    assert.equal(c.uids().length, 49);
  } finally {
    (Deno as { rename: typeof Deno.rename }).rename = rename;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ResourceState writes a change made during a write after it, and resolves only then", async () => {
  const dir = await Deno.makeTempDir();
  const rename = Deno.rename;
  let during: Promise<void> | undefined;
  const a = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
  (Deno as { rename: typeof Deno.rename }).rename = (from, to) => {
    // The first write is under way: a change now must not ride on it.
    during ??= a.setContainer("late", "c", { requests: { cpu: "2" } });
    return rename(from, to);
  };
  try {
    await a.setContainer("early", "c", { requests: { cpu: "1" } });
    await during;
    const b = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    assert.deepEqual(b.uids().sort(), ["early", "late"]);
  } finally {
    (Deno as { rename: typeof Deno.rename }).rename = rename;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ResourceState rejects every change that shared a failed write", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const s = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    await Deno.mkdir(join(dir, ALLOCATED_PODS_STATE_FILE, "x"), { recursive: true });
    const results = await Promise.allSettled([
      s.setContainer("u1", "c", { requests: { cpu: "1" } }),
      s.setContainer("u2", "c", { requests: { cpu: "1" } }),
    ]);
    assert.deepEqual(results.map((r) => r.status), ["rejected", "rejected"]);
    for (const r of results) {
      assert.ok(r.status === "rejected" && r.reason instanceof CheckpointError);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ResourceState.open refuses a corrupt checkpoint, naming the file and what to do", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = join(dir, ALLOCATED_PODS_STATE_FILE);
    await Deno.writeTextFile(path, UPSTREAM.replace("1178570812", "1"));
    await assert.rejects(
      () => ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE }),
      (e: Error) => {
        assert.ok(e instanceof CheckpointError);
        assert.match(e.message, /checksum 1 does not match/);
        assert.match(e.message, /please drain this node and delete/);
        assert.ok(e.message.includes(JSON.stringify(path)), e.message);
        return true;
      },
    );
    await Deno.writeTextFile(path, "{not json");
    await assert.rejects(
      () => ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE }),
      CheckpointError,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ResourceState changes its memory before the write finishes", () => {
  const s = ResourceState.inMemory();
  void s.setContainer("u", "c", { requests: { cpu: "2" } });
  assert.deepEqual(s.getContainer("u", "c"), { requests: { cpu: "2" } });
});

Deno.test("ResourceState leaves no temporary file when a write fails", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const s = await ResourceState.open({ directory: dir, name: ALLOCATED_PODS_STATE_FILE });
    // The checkpoint's path is a directory: the rename fails after the temporary file is written.
    await Deno.mkdir(join(dir, ALLOCATED_PODS_STATE_FILE, "x"), { recursive: true });
    await assert.rejects(
      () => s.set("u", { containerResources: new Map([["c", { requests: { cpu: "1" } }]]) }),
      CheckpointError,
    );
    const names = [...Deno.readDirSync(dir)].map((e) => e.name);
    assert.deepEqual(names, [ALLOCATED_PODS_STATE_FILE]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
