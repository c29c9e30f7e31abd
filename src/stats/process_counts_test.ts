import assert from "node:assert/strict";
import { parseLimits, readProcessCounts } from "./process_counts.ts";

Deno.test("parseLimits reads the soft open-files limit", () => {
  const text = "Limit                     Soft Limit           Hard Limit           Units\n" +
    "Max processes             unlimited            unlimited            processes\n" +
    "Max open files            1024                 524288               files\n";
  assert.deepEqual(parseLimits(text), [{ name: "max_open_files", soft: 1024 }]);
  assert.deepEqual(parseLimits("Max open files unlimited unlimited files\n"), [
    { name: "max_open_files", soft: -1 },
  ]);
});

Deno.test("readProcessCounts counts the cgroup's processes, descriptors and sockets", async () => {
  const root = await Deno.makeTempDir({ prefix: "process-counts-" });
  try {
    await Deno.mkdir(`${root}/cg`);
    await Deno.writeTextFile(`${root}/cg/cgroup.procs`, "10\n11\n");
    await Deno.mkdir(`${root}/proc/10/fd`, { recursive: true });
    await Deno.symlink("/dev/null", `${root}/proc/10/fd/0`);
    await Deno.symlink("socket:[123]", `${root}/proc/10/fd/1`);
    await Deno.writeTextFile(`${root}/proc/10/limits`, "Max open files 64 128 files\n");
    // Pid 11 exited between the two reads: not counted, no error.
    const c = await readProcessCounts(`${root}/cg`, { root, rootPid: 10 });
    assert.deepEqual(c, {
      processes: 2,
      fileDescriptors: 2,
      sockets: 1,
      ulimits: [{ name: "max_open_files", soft: 64 }],
    });
    assert.equal(await readProcessCounts(`${root}/gone`, { root }), undefined);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
