import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import { MEMORY_MANAGER_STATE_FILE } from "./checkpoint.ts";
import { CheckpointedMemoryState, MemoryState } from "./state.ts";

Deno.test("MemoryState hands out copies and drops a pod with its last container", () => {
  const s = new MemoryState();
  s.setMemoryBlocks("p", "c", [{ numaAffinity: [0], type: "memory", size: 1 }]);
  (s.getMemoryBlocks("p", "c")![0]!.numaAffinity as number[]).length = 0;
  assert.deepEqual(s.getMemoryBlocks("p", "c"), [{ numaAffinity: [0], type: "memory", size: 1 }]);
  s.setMachineState(new Map([[0, { numberOfAssignments: 1, memoryMap: new Map(), cells: [0] }]]));
  s.getMachineState().get(0)!.numberOfAssignments = 5;
  assert.equal(s.getMachineState().get(0)!.numberOfAssignments, 1);
  s.delete("p", "c");
  assert.equal(s.getMemoryAssignments().size, 0);
  assert.equal(s.getMemoryBlocks("p", "c"), undefined);
});

Deno.test("CheckpointedMemoryState writes every change and logs a failed write", async () => {
  const dir = await Deno.makeTempDir();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), pid: 1 });
  try {
    const root = join(dir, "root");
    const s = await CheckpointedMemoryState.restore({
      directory: root,
      policyName: "Static",
      logger,
    });
    const file = join(root, MEMORY_MANAGER_STATE_FILE);
    assert.equal(s.path, file);
    for (let i = 1; i <= 3; i++) s.setMemoryBlocks("p", `c${i}`, []);
    await s.flush();
    const again = await CheckpointedMemoryState.restore({
      directory: root,
      policyName: "Static",
      logger,
    });
    assert.deepEqual([...again.getMemoryAssignments().get("p")!.keys()], ["c1", "c2", "c3"]);
    // The directory turned into a file: the write fails, the state in memory goes on.
    await Deno.remove(root, { recursive: true });
    await Deno.writeTextFile(root, "");
    s.delete("p", "c1");
    await s.flush();
    assert.equal(s.getMemoryAssignments().get("p")!.size, 2);
    assert.ok(
      lines.some((l) => l.includes('"Failed to store state to checkpoint"')),
      lines.join("\n"),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
