import assert from "node:assert/strict";
import { join } from "node:path";
import { countOpenFds, readProcFile, serveHostCall } from "./launcher_calls.ts";

Deno.test("serveHostCall makes a link only inside a writable directory, also through a link in the way", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-calls-test-" });
  try {
    const mine = join(dir, "mine");
    const other = join(dir, "other");
    await Deno.mkdir(mine);
    await Deno.mkdir(other);
    // A link inside the writable directory that leads out of it.
    await Deno.symlink(other, join(mine, "escape"));
    const ok = await serveHostCall(
      { call: 1, op: "symlink", target: "..data/key", path: join(mine, "key") },
      [mine],
    );
    assert.deepEqual(ok, { call: 1 });
    assert.equal(await Deno.readLink(join(mine, "key")), "..data/key");
    for (
      const [i, path] of [
        join(other, "x"),
        join(mine, "escape", "x"),
        join(mine, "..", "other", "y"),
        "relative/x",
      ].entries()
    ) {
      const a = await serveHostCall({ call: 2 + i, op: "symlink", target: "/etc/shadow", path }, [
        mine,
      ]);
      assert.equal(a.error?.name, "NotCapable", path);
    }
    assert.deepEqual([...Deno.readDirSync(other)], []);
    const exists = await serveHostCall({
      call: 9,
      op: "symlink",
      target: "t",
      path: join(mine, "key"),
    }, [mine]);
    assert.equal(exists.error?.name, "AlreadyExists");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("serveHostCall reads only the named /proc files of a numeric pid", async () => {
  const own = await serveHostCall({ call: 1, op: "procFile", pid: Deno.pid, file: "cgroup" }, []);
  assert.equal(own.text, await Deno.readTextFile(`/proc/${Deno.pid}/cgroup`));
  const net = await serveHostCall({ call: 2, op: "procFile", pid: Deno.pid, file: "net/dev" }, []);
  assert.match(net.text!, /Inter-\|/);
  for (
    const [pid, file] of [
      [Deno.pid, "root/etc/shadow"],
      [Deno.pid, "environ"],
      [Deno.pid, "../self/root/etc/passwd"],
      [0, "cgroup"],
      [-1, "cgroup"],
      [1.5, "cgroup"],
    ] as const
  ) {
    const a = await serveHostCall({ call: 3, op: "procFile", pid, file }, []);
    assert.equal(a.error?.name, "NotCapable", `${pid} ${file}`);
    assert.equal(a.text, undefined);
  }
  const gone = await serveHostCall({ call: 4, op: "procFile", pid: 2 ** 30, file: "cgroup" }, []);
  assert.equal(gone.error?.name, "NotFound");
});

Deno.test("serveHostCall counts the process's open files, which files opened for the test add to", async () => {
  const count = async () => Number((await serveHostCall({ call: 1, op: "openFds" }, [])).text);
  const before = await count();
  assert.ok(Number.isInteger(before) && before >= 3, String(before));
  // Other test files of a --parallel run share the process and open and close files too: hold
  // many, and allow for theirs.
  const files = await Promise.all(
    Array.from({ length: 100 }, () => Deno.open(new URL(import.meta.url).pathname)),
  );
  try {
    const during = await count();
    assert.ok(during - before >= 80, `${before} open before, ${during} with 100 more`);
  } finally {
    for (const f of files) f.close();
  }
});

Deno.test("countOpenFds outside the sandbox counts the fd directory it is given", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-calls-fds-" });
  try {
    await Deno.mkdir(join(dir, "fd"));
    for (const n of ["0", "1", "2", "7"]) await Deno.writeTextFile(join(dir, "fd", n), "");
    assert.equal(await countOpenFds(dir), 4);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("readProcFile outside the sandbox reads under the root it is given", async () => {
  const root = await Deno.makeTempDir({ prefix: "sandbox-calls-root-" });
  try {
    await Deno.mkdir(join(root, "proc", "42"), { recursive: true });
    await Deno.writeTextFile(join(root, "proc", "42", "cgroup"), "0::/kubepods\n");
    assert.equal(await readProcFile(root, 42, "cgroup"), "0::/kubepods\n");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("serveHostCall hands an owned call to its handler and refuses one it has none for", async () => {
  const seen: string[] = [];
  const a = await serveHostCall({ call: 5, op: "statvfs", paths: ["/x"] }, [], {
    statvfs: (c) => {
      seen.push(c.paths.join(","));
      return Promise.resolve({ fs: [null] });
    },
  });
  assert.deepEqual([a, seen], [{ call: 5, fs: [null] }, ["/x"]]);
  const none = await serveHostCall({ call: 6, op: "hostPath", path: "/x", type: "" }, []);
  assert.deepEqual(none, {
    call: 6,
    error: { name: "Error", message: "the launcher serves no hostPath calls" },
  });
});
