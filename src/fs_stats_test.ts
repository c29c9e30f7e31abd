import assert from "node:assert/strict";
import { join } from "node:path";
import {
  diskUsage,
  FsStatsError,
  type FsUsage,
  parseDfOutput,
  statFilesystems,
  type WalkFs,
} from "./fs_stats.ts";
import type { CommandRunner } from "./mount.ts";

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
  const got = await statFilesystems([...paths, "/proc"], { run: df.run });
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
  const got = await statFilesystems(["/a", "/b", "/a\nb"], { run: failing });
  assert.match((got.get("/a") as Error).message, /df failed: spawn df ENOENT/);
  assert.ok(got.get("/b") instanceof FsStatsError);
  assert.match((got.get("/a\nb") as Error).message, /not a path df can report/);

  const hanging: CommandRunner = (_cmd, _args, signal) =>
    new Promise((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason)));
  const timedOut = await statFilesystems(["/a"], { run: hanging, timeoutMs: 10 });
  assert.match((timedOut.get("/a") as Error).message, /df timed out/);

  const ac = new AbortController();
  const pending = statFilesystems(["/a"], { run: hanging, signal: ac.signal });
  ac.abort(new Error("shutting down"));
  await assert.rejects(pending, /shutting down/);
});

Deno.test("statFilesystems reads this machine's root filesystem with the real df", async () => {
  const missing = "/nonexistent-fs-stats-test-path";
  const quoted = "/nonexistent fs-stats test path";
  const got = await statFilesystems([missing, "/", quoted]);
  const root = usage(got.get("/"));
  assert.ok(root.capacityBytes > 0);
  assert.ok(root.usedBytes + root.availableBytes <= root.capacityBytes);
  assert.ok(got.get(missing) instanceof Deno.errors.NotFound, String(got.get(missing)));
  assert.ok(got.get(quoted) instanceof Deno.errors.NotFound, String(got.get(quoted)));
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
