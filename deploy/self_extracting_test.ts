import assert from "node:assert/strict";
import { join } from "node:path";
import { fill, selfExtracting, SelfExtractingError, shellQuote } from "./self_extracting.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/**
 * A stand-in for deno: prints its PID, working directory, DENO_DIR and arguments; with a last
 * argument `exit=N` it exits N, with `wait` it waits for SIGTERM and exits 42.
 */
const FAKE_DENO = `#!/bin/sh
echo "pid=$$"
echo "cwd=$(pwd)"
echo "DENO_DIR=$DENO_DIR"
for a; do echo "arg=$a"; last=$a; done
case "\${last:-}" in
exit=*) exit "\${last#exit=}" ;;
wait)
	trap 'echo "got TERM"; exit 42' TERM
	echo ready
	while :; do sleep 0.05; done
	;;
esac
`;

function build(app: Record<string, string> = { "main.ts": "// main\n", "src/a.ts": "// a\n" }) {
  return selfExtracting({
    version: "9.9.9",
    platform: "linux-test",
    runtimeName: "a stand-in",
    runtime: enc(FAKE_DENO),
    app: Object.entries(app).map(([path, text]) => ({ path, data: enc(text) })),
    runFlags: ["run", "--allow-all", "--v8-flags=--a,--b"],
  });
}

interface Fixture {
  readonly exe: string;
  readonly base: string;
  readonly dir: string;
  run(
    args: string[],
    opts?: { cwd?: string },
  ): Promise<{ code: number; stdout: string; stderr: string }>;
}

async function withRelease(fn: (f: Fixture) => Promise<void>, built = build()): Promise<void> {
  const tmp = await Deno.makeTempDir({ prefix: "kubelet-selfx-" });
  try {
    const exe = join(tmp, "kubelet");
    await Deno.writeFile(exe, built.bytes, { mode: 0o755 });
    const base = join(tmp, "extract");
    await fn({
      exe,
      base,
      dir: join(base, built.id),
      async run(args, opts = {}) {
        const out = await new Deno.Command(exe, {
          args,
          cwd: opts.cwd,
          env: { KUBELET_TS_EXTRACT_DIR: base },
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
        }).output();
        return { code: out.code, stdout: dec(out.stdout), stderr: dec(out.stderr) };
      },
    });
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
}

Deno.test("selfExtracting runs the runtime with its flags, the entry and the arguments as given", async () => {
  await withRelease(async (f) => {
    const r = await f.run(["--config", "it's a file.yaml", "exit=7"], { cwd: "/tmp" });
    assert.equal(r.code, 7, r.stderr);
    const lines = r.stdout.trim().split("\n");
    assert.deepEqual(lines.filter((l) => l.startsWith("arg=")), [
      "arg=run",
      "arg=--allow-all",
      "arg=--v8-flags=--a,--b",
      "arg=--config",
      `arg=${f.dir}/app/deno.json`,
      `arg=${f.dir}/app/main.ts`,
      "arg=--config",
      "arg=it's a file.yaml",
      "arg=exit=7",
    ]);
    assert.ok(lines.includes("cwd=/tmp"), r.stdout);
    assert.ok(lines.includes(`DENO_DIR=${f.dir}/cache`), r.stdout);
    assert.match(r.stderr, /^kubelet-ts: extracting into .*\/9\.9\.9-[0-9a-f]{12}$/m);
  });
});

Deno.test("selfExtracting extracts once and reuses the tree on later starts", async () => {
  await withRelease(async (f) => {
    assert.equal((await f.run(["exit=0"])).code, 0);
    const before = await Deno.stat(join(f.dir, "deno"));
    const r = await f.run(["exit=0"]);
    assert.equal(r.code, 0);
    assert.equal(r.stderr, "");
    assert.equal((await Deno.stat(join(f.dir, "deno"))).ino, before.ino);
    assert.equal(await Deno.readTextFile(join(f.dir, "app/src/a.ts")), "// a\n");
    assert.equal((await Deno.stat(join(f.dir, "deno"))).mode! & 0o777, 0o755);
    assert.equal((await Deno.stat(join(f.dir, "app/main.ts"))).mode! & 0o777, 0o644);
  });
});

Deno.test("selfExtracting finds a changed, missing or added file and extracts again", async () => {
  await withRelease(async (f) => {
    assert.equal((await f.run(["exit=0"])).code, 0);
    const damage: [string, () => Promise<void>, RegExp][] = [
      ["changed", () => Deno.writeTextFile(join(f.dir, "app/src/a.ts"), "// b\n"), /a\.ts: FAILED/],
      ["missing", () => Deno.remove(join(f.dir, "app/main.ts")), /files are not the archive's/],
      [
        "added",
        () => Deno.writeTextFile(join(f.dir, "app/x.ts"), ""),
        /files are not the archive's/,
      ],
      [
        "open to others",
        () => Deno.chmod(join(f.dir, "app/main.ts"), 0o666),
        /main\.ts is a link, writable by others/,
      ],
      ["replaced by a link", async () => {
        await Deno.remove(join(f.dir, "app/main.ts"));
        await Deno.symlink(join(f.dir, "app/src/a.ts"), join(f.dir, "app/main.ts"));
      }, /main\.ts is a link/],
    ];
    for (const [what, act, why] of damage) {
      await act();
      const r = await f.run(["exit=3"]);
      assert.equal(r.code, 3, `${what}: ${r.stderr}`);
      assert.match(r.stderr, /does not match this executable \(/, what);
      assert.match(r.stderr, why, what);
      assert.equal(await Deno.readTextFile(join(f.dir, "app/src/a.ts")), "// a\n", what);
      assert.equal(await Deno.readTextFile(join(f.dir, "app/main.ts")), "// main\n", what);
      assert.equal((await f.run(["exit=0"])).stderr, "", `${what}: repaired for good`);
    }
  });
});

Deno.test("selfExtracting keeps the runtime's cache and leaves no temporary directory", async () => {
  await withRelease(async (f) => {
    await f.run(["exit=0"]);
    await Deno.writeTextFile(join(f.dir, "cache", "gen.js"), "cached");
    const r = await f.run(["exit=0"]);
    assert.equal(r.stderr, "");
    assert.deepEqual([...Deno.readDirSync(f.base)].map((e) => e.name), [
      f.dir.slice(f.base.length + 1),
    ]);
  });
});

Deno.test("selfExtracting passes SIGTERM to the runtime, which is the same process", async () => {
  await withRelease(async (f) => {
    const child = new Deno.Command(f.exe, {
      args: ["wait"],
      env: { KUBELET_TS_EXTRACT_DIR: f.base },
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).spawn();
    const reader = child.stdout.getReader();
    let out = "";
    while (!out.includes("ready")) {
      const { value, done } = await reader.read();
      if (done) break;
      out += dec(value);
    }
    assert.match(out, new RegExp(`^pid=${child.pid}$`, "m"));
    child.kill("SIGTERM");
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      out += dec(value);
    }
    assert.equal((await child.status).code, 42);
    assert.match(out, /got TERM/);
  });
});

Deno.test("selfExtracting says a damaged archive is damaged", async () => {
  const built = build();
  const cut = built.bytes.slice(
    0,
    built.offset + Math.floor((built.bytes.length - built.offset) / 2),
  );
  await withRelease(async (f) => {
    const r = await f.run(["exit=0"]);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /kubelet-ts: error: .*kubelet: its archive (does not extract|is damaged)/,
    );
    assert.match(r.stderr, /SHA256SUMS/);
    assert.deepEqual([...Deno.readDirSync(f.base)], [], "a partial tree was left");
  }, { ...built, bytes: cut });
});

Deno.test("selfExtracting refuses an extraction directory others can write", async () => {
  await withRelease(async (f) => {
    await Deno.mkdir(f.base, { mode: 0o777 });
    await Deno.chmod(f.base, 0o777);
    const r = await f.run(["exit=0"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /must be a directory owned by uid \d+ that only its owner can write/);
  });
});

Deno.test("selfExtracting puts the archive after the script and names the tree by its digest", () => {
  const a = build();
  assert.deepEqual([...a.bytes.subarray(a.offset, a.offset + 2)], [0x1f, 0x8b]);
  const script = dec(a.bytes.subarray(0, a.offset));
  assert.match(script, new RegExp(`^offset=${a.offset} *$`, "m"));
  assert.match(script, /^#!\/bin\/sh\n# kubelet-ts 9\.9\.9 for linux-test/);
  assert.equal(build().id, a.id, "the same input gives the same executable");
  assert.notEqual(build({ "main.ts": "// other\n" }).id, a.id);
  assert.equal(a.treeBytes, FAKE_DENO.length + "// main\n// a\n".length);
});

Deno.test("selfExtracting refuses a path that cannot go into the stub's lists", () => {
  assert.throws(
    () => build({ "src/../x.ts": "" }),
    (e) =>
      e instanceof SelfExtractingError && /'app\/src\/\.\.\/x\.ts' cannot go into/.test(e.message),
  );
  assert.throws(() => build({ "a\nb.ts": "" }), SelfExtractingError);
});

Deno.test("fill names a placeholder without a value", () => {
  assert.equal(fill("a @@X@@ b", { X: "$&" }), "a $& b");
  assert.throws(() => fill("@@Y@@", {}), /@@Y@@, which has no value/);
});

Deno.test("shellQuote leaves plain words alone and quotes the rest", () => {
  assert.equal(shellQuote("--v8-flags=--a,--b"), "--v8-flags=--a,--b");
  assert.equal(shellQuote("it's"), `'it'\\''s'`);
  assert.equal(shellQuote("$HOME"), `'$HOME'`);
});
