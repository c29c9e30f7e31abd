import assert from "node:assert/strict";
import { join } from "node:path";
import {
  diskUsage,
  FsStatsError,
  type FsUsage,
  openStatvfs,
  parseDfOutput,
  resetDefaultStatvfs,
  serveStatvfsCall,
  statFilesystems,
  type StatvfsReader,
  usageOfStatvfs,
  type WalkFs,
} from "./fs_stats.ts";
import type { CommandRunner } from "../util/mount.ts";
import {
  answered,
  type HostCall,
  serveHostCall,
  useLauncher,
} from "../privilege/launcher_calls.ts";

const HEADER = "   1B-blocks        Used       Avail   Inodes  IUsed    IFree File\n";

/** A runner that records its calls and answers with `out`. */
function fakeDf(out: string): { run: CommandRunner; calls: string[][] } {
  const calls: string[][] = [];
  return {
    calls,
    run: (cmd, args) => {
      calls.push([cmd, ...args]);
      return Promise.resolve(out);
    },
  };
}

function usage(u: FsUsage | Error | undefined): FsUsage {
  assert.ok(u !== undefined && !(u instanceof Error), `expected a usage, got ${u}`);
  return u;
}

async function withDir(fn: (dir: string) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "fs-stats-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("statFilesystems runs one df for all paths and maps its rows back", async () => {
  const df = fakeDf(
    HEADER +
      "270553174016 17025556480 80767737856 16777216 507151 16270065 /var/lib/kubelet\n" +
      "           0           0           0        0      0        0 /proc\n" +
      " 12637986816      4096 12637982720        -      -        - /mnt/b fs\n" +
      "270553174016 17025556480 80767737856 16777216 507151 16270065 /var/log/pods\n" +
      "df: /gone: No such file or directory\n" +
      "/usr/bin/df: /denied: Permission denied\n",
  );
  const paths = ["/var/lib/kubelet", "/gone", "/proc", "/mnt/b fs", "/denied", "/var/log/pods"];
  const got = await statFilesystems([...paths, "/proc"], { run: df.run, statvfs: null });
  assert.deepEqual(df.calls, [[
    "df",
    "-B1",
    "--output=size,used,avail,itotal,iused,iavail,file",
    "--",
    ...paths,
  ]]);
  assert.deepEqual(usage(got.get("/var/lib/kubelet")), {
    capacityBytes: 270553174016,
    usedBytes: 17025556480,
    availableBytes: 80767737856,
    inodes: 16777216,
    inodesUsed: 507151,
    inodesFree: 16270065,
  });
  assert.deepEqual(usage(got.get("/proc")), { capacityBytes: 0, usedBytes: 0, availableBytes: 0 });
  assert.deepEqual(usage(got.get("/mnt/b fs")), {
    capacityBytes: 12637986816,
    usedBytes: 4096,
    availableBytes: 12637982720,
  });
  assert.equal(usage(got.get("/var/log/pods")).inodesUsed, 507151);
  const gone = got.get("/gone");
  assert.ok(gone instanceof Deno.errors.NotFound, String(gone));
  const denied = got.get("/denied");
  assert.ok(denied instanceof FsStatsError);
  assert.match(denied.message, /\/denied: Permission denied/);
  assert.equal(got.size, 6);
});

Deno.test("parseDfOutput does not trust row order alone", () => {
  // Two paths on the same filesystem, the first failing: its neighbour's row is not its own.
  const got = parseDfOutput(
    HEADER + "100 40 60 10 4 6 /b\ndf: '/a x': No such file or directory\n",
    ["/a x", "/b"],
  );
  assert.ok(got.get("/a x") instanceof Deno.errors.NotFound);
  assert.equal(usage(got.get("/b")).capacityBytes, 100);
  // A row for a path never asked about, and garbage, are ignored; a path with no row or
  // message still gets an Error.
  const odd = parseDfOutput("100 40 60 10 4 6 /elsewhere\nsegfault\n", ["/c"]);
  assert.deepEqual([...odd.keys()], ["/c"]);
  assert.match((odd.get("/c") as Error).message, /no row/);
  // Sizes that are not numbers are an Error for that path only.
  const bad = parseDfOutput(HEADER + "- 1 2 3 4 5 /d\n7 1 6 0 0 0 /e\n", ["/d", "/e"]);
  assert.ok(bad.get("/d") instanceof FsStatsError);
  assert.equal(usage(bad.get("/e")).capacityBytes, 7);
});

Deno.test("statFilesystems turns a failed df into an Error per path and rejects on abort", async () => {
  const failing: CommandRunner = () => Promise.reject(new Error("spawn df ENOENT"));
  const got = await statFilesystems(["/a", "/b", "/a\nb"], { run: failing, statvfs: null });
  assert.match((got.get("/a") as Error).message, /df failed: spawn df ENOENT/);
  assert.ok(got.get("/b") instanceof FsStatsError);
  assert.match((got.get("/a\nb") as Error).message, /not a path df can report/);

  const hanging: CommandRunner = (_cmd, _args, signal) =>
    new Promise((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason)));
  const timedOut = await statFilesystems(["/a"], { run: hanging, statvfs: null, timeoutMs: 10 });
  assert.match((timedOut.get("/a") as Error).message, /df timed out/);

  const ac = new AbortController();
  const pending = statFilesystems(["/a"], {
    run: hanging,
    statvfs: null,
    signal: ac.signal,
  });
  ac.abort(new Error("shutting down"));
  await assert.rejects(pending, /shutting down/);
});

Deno.test("statFilesystems reads this machine's root filesystem with the real df", async () => {
  const missing = "/nonexistent-fs-stats-test-path";
  const quoted = "/nonexistent fs-stats test path";
  const got = await statFilesystems([missing, "/", quoted], { statvfs: null });
  const root = usage(got.get("/"));
  assert.ok(root.capacityBytes > 0);
  assert.ok(root.usedBytes + root.availableBytes <= root.capacityBytes);
  assert.ok(got.get(missing) instanceof Deno.errors.NotFound, String(got.get(missing)));
  assert.ok(got.get(quoted) instanceof Deno.errors.NotFound, String(got.get(quoted)));
});

Deno.test("usageOfStatvfs reads a struct statvfs as upstream's Info reads statfs", () => {
  // f_bsize, f_frsize, f_blocks, f_bfree, f_bavail, f_files, f_ffree, f_favail, f_fsid, ...
  const ext4 = BigUint64Array.of(4096n, 4096n, 1000n, 300n, 250n, 64n, 40n, 40n, 7n, 0n, 255n);
  assert.deepEqual(usageOfStatvfs(ext4), {
    capacityBytes: 4_096_000,
    usedBytes: 700 * 4096,
    availableBytes: 250 * 4096,
    inodes: 64,
    inodesFree: 40,
    inodesUsed: 24,
  });
  // No inode limit (btrfs, some tmpfs): no inode figures; f_frsize 0 falls back to f_bsize.
  const noInodes = BigUint64Array.of(512n, 0n, 10n, 10n, 10n, 0n, 0n);
  assert.deepEqual(usageOfStatvfs(noInodes), {
    capacityBytes: 5120,
    usedBytes: 0,
    availableBytes: 5120,
  });
});

Deno.test("statFilesystems asks statvfs first and df only for the paths statvfs failed on", async () => {
  const fsA: FsUsage = { capacityBytes: 10, usedBytes: 4, availableBytes: 6 };
  const asked: string[][] = [];
  const statvfs: StatvfsReader = (paths) => {
    asked.push([...paths]);
    return Promise.resolve(paths.map((p) => (p === "/a" ? fsA : undefined)));
  };
  const df = fakeDf(HEADER + "df: /gone: No such file or directory\n");
  const got = await statFilesystems(["/a", "/gone", "/a"], { run: df.run, statvfs });
  assert.deepEqual(asked, [["/a", "/gone"]]);
  assert.deepEqual(got.get("/a"), fsA);
  assert.ok(got.get("/gone") instanceof Deno.errors.NotFound, String(got.get("/gone")));
  assert.deepEqual(df.calls.map((c) => c.slice(3)), [["--", "/gone"]]);

  // All answered: no df at all.
  const none = fakeDf("");
  await statFilesystems(["/a"], { run: none.run, statvfs });
  assert.deepEqual(none.calls, []);

  // A statvfs that hangs times out without a df behind it; an abort rejects.
  const hanging: StatvfsReader = (_paths, signal) =>
    new Promise((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason)));
  const slow = fakeDf("");
  const timedOut = await statFilesystems(["/a"], {
    run: slow.run,
    statvfs: hanging,
    timeoutMs: 10,
  });
  assert.match((timedOut.get("/a") as Error).message, /statfs \/a: statvfs timed out/);
  assert.deepEqual(slow.calls, []);
  const ac = new AbortController();
  const pending = statFilesystems(["/a"], { statvfs: hanging, signal: ac.signal });
  ac.abort(new Error("shutting down"));
  await assert.rejects(pending, /shutting down/);
});

Deno.test("libc's statvfs through FFI gives what df gives for this machine's root filesystem", async () => {
  const lib = openStatvfs();
  try {
    const [root, missing] = await lib.read(["/", "/nonexistent-fs-stats-test-path"]);
    assert.equal(missing, undefined);
    const viaDf = usage((await statFilesystems(["/"], { statvfs: null })).get("/"));
    assert.ok(root);
    // Sizes and inode totals are fixed; use moves with other writers on the machine.
    assert.equal(root.capacityBytes, viaDf.capacityBytes);
    assert.equal(root.inodes, viaDf.inodes);
    assert.ok(Math.abs(root.usedBytes - viaDf.usedBytes) < 256 * 2 ** 20);
    assert.ok(root.usedBytes + root.availableBytes <= root.capacityBytes);
  } finally {
    lib.close();
  }
});

Deno.test("diskUsage counts allocated blocks and inodes, not apparent sizes", async () => {
  await withDir(async (dir) => {
    await Deno.mkdir(join(dir, "a/b"), { recursive: true });
    await Deno.writeFile(join(dir, "a/one"), new Uint8Array(10_000).fill(1));
    await Deno.writeFile(join(dir, "a/b/two"), new Uint8Array(5_000).fill(2));
    await Deno.link(join(dir, "a/one"), join(dir, "a/b/one-again"));
    // A sparse file: 1 GiB apparent, nothing allocated.
    const sparse = await Deno.open(join(dir, "sparse"), { create: true, write: true });
    await sparse.truncate(2 ** 30);
    sparse.close();
    let expected = 0;
    for (const p of ["", "a", "a/b", "a/one", "a/b/two", "sparse"]) {
      expected += (await Deno.lstat(join(dir, p))).blocks! * 512;
    }
    const got = await diskUsage(dir);
    assert.ok(!(got instanceof Error), String(got));
    assert.equal(got.inodes, 6, "the hard link is counted once");
    assert.equal(got.bytes, expected);
    assert.ok(got.bytes >= 15_000 && got.bytes < 2 ** 20);
  });
});

Deno.test("diskUsage does not follow symlinks", async () => {
  await withDir(async (dir) => {
    await Deno.mkdir(join(dir, "outside/deep"), { recursive: true });
    await Deno.writeFile(join(dir, "outside/deep/big"), new Uint8Array(100_000));
    await Deno.mkdir(join(dir, "vol"));
    await Deno.symlink(join(dir, "outside"), join(dir, "vol/to-dir"));
    await Deno.symlink(join(dir, "outside/deep/big"), join(dir, "vol/to-file"));
    const got = await diskUsage(join(dir, "vol"));
    assert.ok(!(got instanceof Error), String(got));
    assert.equal(got.inodes, 3);
    assert.ok(got.bytes < 100_000);
  });
});

Deno.test("diskUsage skips entries that vanish and filesystems mounted inside", async () => {
  await withDir(async (dir) => {
    for (const d of ["gone-dir", "mnt", "kept"]) await Deno.mkdir(join(dir, d));
    for (const f of ["gone-file", "mnt/x", "kept/y"]) await Deno.writeTextFile(join(dir, f), "z");
    const fs: WalkFs = {
      stat: Deno.stat,
      async lstat(path) {
        if (path.endsWith("gone-file")) throw new Deno.errors.NotFound(`lstat '${path}'`);
        const info = await Deno.lstat(path);
        return path.endsWith("/mnt") ? { ...info, dev: info.dev + 1 } : info;
      },
      readDir(path) {
        if (path.endsWith("gone-dir")) throw new Deno.errors.NotFound(`readdir '${path}'`);
        return Deno.readDir(path);
      },
    };
    const got = await diskUsage(dir, { fs });
    assert.ok(!(got instanceof Error), String(got));
    // dir, gone-dir (stat'ed before it went), kept, kept/y: not gone-file, mnt or mnt/x.
    assert.equal(got.inodes, 4);
  });
});

Deno.test("diskUsage gives an Error for a missing dir, too many entries or a denied read", async () => {
  await withDir(async (dir) => {
    assert.ok((await diskUsage(join(dir, "none"))) instanceof Deno.errors.NotFound);
    for (let i = 0; i < 10; i++) await Deno.writeTextFile(join(dir, `f${i}`), "");
    const limited = await diskUsage(dir, { maxEntries: 5 });
    assert.ok(limited instanceof FsStatsError);
    assert.match(limited.message, /more than 5 entries/);
    assert.equal((await diskUsage(dir, { maxEntries: 11 }) as { inodes: number }).inodes, 11);
    const denied: WalkFs = {
      stat: Deno.stat,
      lstat: () => Promise.reject(new Deno.errors.PermissionDenied("lstat")),
      readDir: Deno.readDir,
    };
    assert.ok((await diskUsage(dir, { fs: denied })) instanceof Deno.errors.PermissionDenied);
    const ac = new AbortController();
    ac.abort(new Error("stop"));
    await assert.rejects(diskUsage(dir, { signal: ac.signal }), /stop/);
  });
});

Deno.test("diskUsage of a single file counts it", async () => {
  await withDir(async (dir) => {
    await Deno.writeFile(join(dir, "f"), new Uint8Array(4096).fill(7));
    const got = await diskUsage(join(dir, "f"));
    assert.deepEqual(got, { bytes: (await Deno.stat(join(dir, "f"))).blocks! * 512, inodes: 1 });
  });
});

Deno.test("in the sandbox statFilesystems asks the launcher's statvfs, and runs df for good once the launcher has none", async () => {
  const missing = "/nonexistent-fs-stats-test-path";
  const calls: HostCall[] = [];
  let serve = (call: HostCall) => serveHostCall(call, [], { statvfs: serveStatvfsCall });
  useLauncher((call) => {
    calls.push(call);
    serve(call).then(answered);
  });
  resetDefaultStatvfs();
  try {
    const df = fakeDf(HEADER + `df: ${missing}: No such file or directory\n`);
    const got = await statFilesystems(["/", missing], { run: df.run });
    assert.ok(usage(got.get("/")).capacityBytes > 0);
    assert.ok(got.get(missing) instanceof Deno.errors.NotFound);
    assert.deepEqual(calls.map((c) => c.op), ["statvfs"]);
    assert.deepEqual(df.calls.map((c) => c.slice(3)), [["--", missing]]);

    // A launcher that cannot open libc's statvfs: df for all paths, and the launcher is not
    // asked again.
    resetDefaultStatvfs();
    calls.length = 0;
    serve = (call) =>
      Promise.resolve({ call: call.call, error: { name: "NotSupported", message: "no libc" } });
    const dfAll = fakeDf(HEADER + "100 40 60 10 4 6 /\n");
    for (let i = 0; i < 2; i++) {
      const all = await statFilesystems(["/"], { run: dfAll.run });
      assert.deepEqual(usage(all.get("/")), {
        capacityBytes: 100,
        usedBytes: 40,
        availableBytes: 60,
        inodes: 10,
        inodesUsed: 4,
        inodesFree: 6,
      });
    }
    assert.equal(calls.length, 1);
    assert.equal(dfAll.calls.length, 2);
  } finally {
    useLauncher(undefined);
    resetDefaultStatvfs();
  }
});

Deno.test("serveStatvfsCall reads filesystem sizes with statvfs, null for a path it fails on", async () => {
  const a = await serveStatvfsCall({
    call: 7,
    op: "statvfs",
    paths: ["/", "/nonexistent-fs-stats-test"],
  });
  assert.equal(a.fs?.length, 2);
  const [root, missing] = a.fs!;
  assert.ok(root && root.capacityBytes > 0 && root.availableBytes <= root.capacityBytes);
  assert.equal(missing, null);
});
