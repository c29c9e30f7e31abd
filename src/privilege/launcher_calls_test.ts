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

Deno.test("serveHostCall runs a subPath's steps: exists, make inside the volume, resolve refusing an escape", async () => {
  const dir = await Deno.makeTempDir({ prefix: "sandbox-calls-subpath-" });
  try {
    const volume = join(dir, "volume");
    await Deno.mkdir(volume, { mode: 0o750 });
    await Deno.chmod(volume, 0o750);
    await Deno.symlink(dir, join(volume, "escape"));
    const call = (step: "exists" | "make" | "resolve", path: string, subPath = "") =>
      serveHostCall({ call: 1, op: "subPath", step, path, volumePath: volume, subPath }, []);
    assert.equal((await call("exists", join(volume, "a/b"))).text, "false");
    assert.deepEqual(await call("make", "", "a/b"), { call: 1, text: "" });
    assert.equal((await Deno.stat(join(volume, "a/b"))).mode! & 0o777, 0o750, "the volume's mode");
    assert.equal((await call("exists", join(volume, "a/b"))).text, "true");
    assert.equal(
      (await call("resolve", join(volume, "a/b"))).text,
      join(await Deno.realPath(volume), "a/b"),
    );
    const out = await call("resolve", join(volume, "escape"));
    assert.match(out.error?.message ?? "", /not within volume path/);
    const made = await call("make", "", "escape/x");
    assert.match(made.error?.message ?? "", /outside of allowed base/);
    await assert.rejects(Deno.stat(join(dir, "x")), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("serveHostCall reads filesystem sizes with statvfs, null for a path it fails on", async () => {
  const a = await serveHostCall(
    { call: 7, op: "statvfs", paths: ["/", "/nonexistent-sandbox-calls-test"] },
    [],
  );
  assert.equal(a.error, undefined);
  assert.equal(a.fs?.length, 2);
  const [root, missing] = a.fs!;
  assert.ok(root && root.capacityBytes > 0 && root.availableBytes <= root.capacityBytes);
  assert.equal(missing, null);
});
