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
    const c = readProcessCounts(`${root}/cg`, { root, rootPid: 10 });
    assert.deepEqual(c, {
      processes: 2,
      fileDescriptors: 2,
      sockets: 1,
      ulimits: [{ name: "max_open_files", soft: 64 }],
    });
    assert.equal(readProcessCounts(`${root}/gone`, { root }), undefined);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("readProcessCounts stops listing descriptors once the permission sandbox refuses one", async () => {
  const root = await Deno.makeTempDir({ prefix: "process-counts-" });
  try {
    await Deno.mkdir(`${root}/cg`);
    await Deno.writeTextFile(`${root}/cg/cgroup.procs`, "10\n11\n");
    for (const pid of [10, 11]) {
      await Deno.mkdir(`${root}/proc/${pid}/fd`, { recursive: true });
      await Deno.symlink("/dev/null", `${root}/proc/${pid}/fd/0`);
      await Deno.writeTextFile(`${root}/proc/${pid}/limits`, "Max open files 64 128 files\n");
    }
    // Deno permissions are per process: the check runs in one that may read the cgroup only.
    const script = `${root}/check.ts`;
    await Deno.writeTextFile(
      script,
      `import { readProcessCounts } from ${
        JSON.stringify(import.meta.resolve("./process_counts.ts"))
      };
const list = Deno.readDirSync, read = Deno.readTextFileSync;
let listings = 0, limits = 0;
Deno.readDirSync = (p) => { listings++; return list(p); };
Deno.readTextFileSync = (p) => { if (String(p).endsWith("/limits")) limits++; return read(p); };
const access = {};
const counts = [];
for (let i = 0; i < 3; i++) {
  counts.push(readProcessCounts(${JSON.stringify(`${root}/cg`)}, { root: ${
        JSON.stringify(root)
      }, rootPid: 10, access }));
}
console.log(JSON.stringify({ listings, limits, access, counts }));
`,
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-check", `--allow-read=${root}/cg`, script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    const got = JSON.parse(new TextDecoder().decode(out.stdout));
    assert.deepEqual(got.access, { fdRefused: true, limitsRefused: true });
    assert.equal(got.listings, 1, "one refused listing, none after");
    assert.equal(got.limits, 1, "one refused read of limits, none after");
    assert.deepEqual(got.counts, Array(3).fill({ processes: 2 }));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
