import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import { decodeCpuManagerCheckpoint } from "./checkpoint.ts";
import { CPUSet } from "./cpuset.ts";
import {
  CheckpointState,
  type CheckpointStateOptions,
  type CPUManagerState,
  CPUStateRestoreError,
  MemoryState,
} from "./state.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const S = (s: string) => CPUSet.parse(s);

/** The state as plain strings, for deepEqual. */
function dump(s: CPUManagerState) {
  const out: Record<string, Record<string, string>> = {};
  for (const [pod, cs] of s.getCPUAssignments()) {
    out[pod] = Object.fromEntries([...cs].map(([c, set]) => [c, set.toString()]));
  }
  return { defaultCPUSet: s.getDefaultCPUSet().toString(), assignments: out };
}

async function withDir(f: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "cpu_state_test" });
  try {
    await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("MemoryState keeps assignments per pod and container, and forgets an emptied pod", () => {
  const s = new MemoryState();
  assert.equal(s.getCPUSet("pod", "c1"), undefined);
  s.setDefaultCPUSet(S("0-3"));
  s.setCPUSet("pod", "c1", S("4-5"));
  s.setCPUSet("pod", "c2", S("6"));
  assert.equal(s.getCPUSetOrDefault("pod", "c1").toString(), "4-5");
  assert.equal(s.getCPUSetOrDefault("pod", "other").toString(), "0-3");
  // A copy: changing it leaves the state alone.
  s.getCPUAssignments().get("pod")!.delete("c1");
  assert.equal(s.getCPUSet("pod", "c1")?.toString(), "4-5");
  s.delete("pod", "c1");
  assert.deepEqual(dump(s), { defaultCPUSet: "0-3", assignments: { pod: { c2: "6" } } });
  s.delete("pod", "c2");
  assert.equal(s.getCPUAssignments().has("pod"), false);
  s.setCPUAssignments(new Map([["p", new Map([["c", S("1")]])]]));
  assert.deepEqual(dump(s).assignments, { p: { c: "1" } });
  s.clearState();
  assert.deepEqual(dump(s), { defaultCPUSet: "", assignments: {} });
});

// The checkpoints of upstream's TestCheckpointStateRestore (state_checkpoint_test.go), checksums
// as upstream's code computed them.
const RESTORE_CASES: {
  name: string;
  content: string;
  containerRef?: CheckpointStateOptions["containerRef"];
  error?: string;
  want?: ReturnType<typeof dump>;
}[] = [
  {
    name: "default cpu set",
    content: '{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 354655845}',
    want: { defaultCPUSet: "4-6", assignments: {} },
  },
  {
    name: "valid checkpoint",
    content: `{"policyName": "none", "defaultCPUSet": "1-3",
      "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}`,
    want: { defaultCPUSet: "1-3", assignments: { pod: { container1: "4-6", container2: "1-3" } } },
  },
  {
    name: "invalid checksum",
    content: '{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 1337}',
    error: "checkpoint is corrupted",
  },
  {
    name: "invalid JSON",
    content: "{",
    // Upstream's text is encoding/json's "unexpected end of JSON input"; checkpoint_json.ts words it.
    error: "not JSON",
  },
  {
    name: "invalid policy name",
    content:
      '{"policyName": "other", "defaultCPUSet": "1-3", "entries": {}, "checksum": 1394507217}',
    error: 'configured policy "none" differs from state checkpoint policy "other"',
  },
  {
    name: "unparsable default cpu set",
    content:
      '{"policyName": "none", "defaultCPUSet": "1.3", "entries": {}, "checksum": 3021697696}',
    error: 'could not parse default cpu set "1.3": strconv.Atoi: parsing "1.3": invalid syntax',
  },
  {
    name: "unparsable assignment entry",
    content: `{"policyName": "none", "defaultCPUSet": "1-3",
      "entries": {"pod": {"container1": "4-6", "container2": "asd"}}, "checksum": 962272150}`,
    error: 'could not parse cpuset "asd" for container "container2" in pod "pod": ' +
      'strconv.Atoi: parsing "asd": invalid syntax',
  },
  {
    name: "v1 checksum",
    content: '{"policyName": "none", "defaultCPUSet": "1-3", "checksum": 1694838852}',
    want: { defaultCPUSet: "1-3", assignments: {} },
  },
  {
    name: "migration from v1",
    content: `{"policyName": "none", "defaultCPUSet": "1-3",
      "entries": {"containerID1": "4-6", "containerID2": "1-3"}, "checksum": 3680390589}`,
    containerRef: (id) =>
      ({
        containerID1: { podUID: "pod", containerName: "container1" },
        containerID2: { podUID: "pod", containerName: "container2" },
      })[id],
    want: { defaultCPUSet: "1-3", assignments: { pod: { container1: "4-6", container2: "1-3" } } },
  },
  {
    name: "migration from v1 with an unknown container",
    content: `{"policyName": "none", "defaultCPUSet": "1-3",
      "entries": {"containerID1": "4-6", "containerID2": "1-3"}, "checksum": 3680390589}`,
    error: "failed to migrate checkpoint from v1 to v2: containerID 'containerID1' not found",
  },
];

Deno.test("CheckpointState.open restores upstream's checkpoints, with upstream's errors", async () => {
  await withDir(async (dir) => {
    const path = join(dir, "cpu_manager_state");
    for (const tc of RESTORE_CASES) {
      await Deno.writeTextFile(path, tc.content);
      const open = CheckpointState.open({
        directory: dir,
        policyName: "none",
        logger: quiet,
        containerRef: tc.containerRef,
      });
      if (tc.error !== undefined) {
        const err = await open.then(() => undefined, (e) => e);
        assert.ok(err instanceof CPUStateRestoreError, tc.name);
        assert.ok(err.message.startsWith("could not restore state from checkpoint: "), tc.name);
        assert.ok(err.message.includes(tc.error), `${tc.name}: ${err.message}`);
        assert.ok(
          err.message.endsWith(
            `, please drain this node and delete the CPU manager checkpoint file "${path}" ` +
              "before restarting Kubelet",
          ),
          tc.name,
        );
        continue;
      }
      assert.deepEqual(dump(await open), tc.want, tc.name);
    }
  });
});

Deno.test("CheckpointState.open writes a fresh checkpoint when there is none", async () => {
  await withDir(async (dir) => {
    const s = await CheckpointState.open({ directory: dir, policyName: "static", logger: quiet });
    assert.deepEqual(dump(s), { defaultCPUSet: "", assignments: {} });
    // The Go kubelet's bytes for the empty state (checkpoint_test.ts has the "none" one).
    const cp = decodeCpuManagerCheckpoint(await Deno.readTextFile(s.path), s.path);
    assert.equal(cp.policyName, "static");
    assert.equal(cp.defaultCpuSet, "");
    assert.equal(cp.entries.size, 0);
  });
});

// upstream TestCheckpointStateStore and TestCheckpointStateHelpers
Deno.test("CheckpointState writes every change, and a second open reads it back", async () => {
  await withDir(async (dir) => {
    const o = { directory: dir, policyName: "static", logger: quiet };
    const s1 = await CheckpointState.open(o);
    s1.setDefaultCPUSet(S("0-3,8"));
    s1.setCPUSet("pod", "c1", S("4-5"));
    s1.setCPUSet("pod", "c2", S("6-7"));
    await s1.flush();
    assert.deepEqual(dump(await CheckpointState.open(o)), {
      defaultCPUSet: "0-3,8",
      assignments: { pod: { c1: "4-5", c2: "6-7" } },
    });
    s1.delete("pod", "c1");
    await s1.flush();
    assert.deepEqual(dump(await CheckpointState.open(o)).assignments, { pod: { c2: "6-7" } });
    s1.setCPUAssignments(new Map([["p2", new Map([["c", S("1,5,8")]])]]));
    await s1.flush();
    assert.deepEqual(dump(await CheckpointState.open(o)).assignments, { p2: { c: "1,5,8" } });
    s1.clearState();
    await s1.flush();
    assert.deepEqual(dump(await CheckpointState.open(o)), { defaultCPUSet: "", assignments: {} });
    // The Go kubelet reads what is written: a V2 checkpoint with a valid checksum.
    s1.setCPUSet("pod", "c", S("2"));
    await s1.flush();
    const cp = decodeCpuManagerCheckpoint(await Deno.readTextFile(s1.path), s1.path);
    assert.equal(cp.version, 2);
    assert.deepEqual(cp.entries, new Map([["pod", new Map([["c", "2"]])]]));
  });
});

Deno.test("CheckpointState logs a failed write and keeps the change in memory", async () => {
  await withDir(async (dir) => {
    const lines: string[] = [];
    const logger = createLogger({ write: (l) => lines.push(l), pid: 1 });
    const s = await CheckpointState.open({ directory: dir, policyName: "static", logger });
    // A directory where the file should be: the rename over it fails.
    await Deno.remove(s.path);
    await Deno.mkdir(join(s.path, "blocker"), { recursive: true });
    s.setCPUSet("pod", "c", S("3"));
    await s.flush();
    assert.equal(s.getCPUSet("pod", "c")?.toString(), "3");
    assert.ok(
      lines.some((l) => l.includes("Failed to store state to checkpoint") && l.includes('"pod"')),
      lines.join("\n"),
    );
  });
});
