/**
 * @module
 * `deno task release` as an operator runs it, and its self-extracting `kubelet` as a node runs
 * it: built into a temporary directory, with `SHA256SUMS` beside it; `--version`, `--help` and
 * a bad flag answer exactly as `deno run` of main.ts with the agent's flags does; the second
 * start reuses the extracted tree; a changed file (one that would change `--version`'s answer)
 * and a partial tree (half a runtime, a missing module) are found and extracted again; the tree
 * carries the npm packages the agent loads and not `@kubernetes/client-node`. As root, with
 * `unshare`, the first start and a module the agent imports only when used (the pprof routes,
 * with node:inspector) run in a network namespace with no interface but loopback (skipped loudly
 * without them, a failure when CI=true); tests/release_offline_test.ts runs a whole node from the
 * file that way. Only the host's platform (linux-amd64) is built.
 */

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, runAgent } from "./agent_process.ts";
import { requireRoot } from "./requirements.ts";

const dec = new TextDecoder();

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function run(cmd: string, args: string[], env: Record<string, string> = {}): Promise<Run> {
  const out = await new Deno.Command(cmd, {
    args,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(180_000),
  }).output();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** The one extracted tree under `base`. */
function treeOf(base: string): string {
  const dirs = [...Deno.readDirSync(base)].filter((e) => e.isDirectory).map((e) => e.name);
  assert.equal(dirs.length, 1, `one tree in ${base}: ${dirs.join(", ")}`);
  return join(base, dirs[0]!);
}

/** The size of the files under `dir`. */
async function treeBytes(dir: string): Promise<number> {
  let n = 0;
  for await (const e of Deno.readDir(dir)) {
    const p = join(dir, e.name);
    if (e.isDirectory) n += await treeBytes(p);
    else n += (await Deno.stat(p)).size;
  }
  return n;
}

const offline = await requireRoot("the release file's start without a network", ["unshare"]);

const mib = (n: number) => `${(n / (1 << 20)).toFixed(1)} MiB`;

Deno.test("the release file runs the agent offline, reuses and repairs its extracted tree", async (t) => {
  const tmp = await Deno.makeTempDir({ prefix: "kubelet-release-test-" });
  try {
    const dist = join(tmp, "dist");
    const exe = join(dist, "linux-amd64", "kubelet");
    const base = join(tmp, "extract");
    const release = (args: string[]) => run(exe, args, { KUBELET_TS_EXTRACT_DIR: base });

    await t.step("deno task release builds kubelet and SHA256SUMS beside it", async () => {
      const r = await run(Deno.execPath(), [
        "task",
        "--quiet",
        "--cwd",
        REPO_ROOT,
        "release",
        "--outdir",
        dist,
        "--platform",
        "linux-amd64",
      ]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(
        r.stdout,
        /kubelet: self-extracting, [\d.]+ MiB \(\d+ bytes\), extracts to [\d.]+ MiB, Kubernetes v/,
      );
      const check = await new Deno.Command("sha256sum", {
        args: ["-c", "SHA256SUMS"],
        cwd: join(dist, "linux-amd64"),
        stdout: "piped",
      }).output();
      assert.equal(dec.decode(check.stdout), "kubelet: OK\n");
    });

    await t.step(
      "--version, --help and a bad flag answer as deno run of main.ts does",
      async () => {
        for (const args of [["--version"], ["--help"]]) {
          const want = await runAgent(args);
          const got = await release(args);
          assert.equal(got.code, want.code, args[0]);
          assert.equal(got.stdout, want.stdout, args[0]);
        }
        const want = await runAgent(["--no-such-flag"]);
        const got = await release(["--no-such-flag"]);
        assert.equal(got.code, want.code);
        assert.notEqual(got.code, 0);
        assert.match(
          got.stderr,
          /"Failed to parse kubelet flag" err="unknown flag: --no-such-flag"/,
        );
      },
    );

    const dir = treeOf(base);
    const file = (await Deno.stat(exe)).size;
    const tree = await treeBytes(dir) - await treeBytes(join(dir, "cache"));
    console.log(
      `release file ${mib(file)} (${file} bytes), extracted tree ${mib(tree)} (${tree} bytes)`,
    );

    await t.step("a second start reuses the extracted tree", async () => {
      const before = await Deno.stat(join(dir, "deno"));
      const r = await release(["--version"]);
      assert.equal(r.code, 0);
      assert.equal(r.stderr, "");
      assert.equal((await Deno.stat(join(dir, "deno"))).ino, before.ino);
    });

    const version = (await release(["--version"])).stdout;

    await t.step("a changed module is found and extracted again", async () => {
      const path = join(dir, "app/src/util/version.ts");
      const text = await Deno.readTextFile(path);
      assert.match(text, /AGENT_VERSION = "/);
      await Deno.writeTextFile(
        path,
        text.replace(/AGENT_VERSION = "[^"]*"/, 'AGENT_VERSION = "0.0.0-changed"'),
      );
      const r = await release(["--version"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, version);
      assert.match(
        r.stderr,
        /does not match this executable \(\.\/app\/src\/util\/version\.ts: FAILED/,
      );
      assert.equal((await release(["--version"])).stderr, "");
    });

    await t.step("a partial tree is found and extracted again", async () => {
      const deno = join(dir, "deno");
      await Deno.truncate(deno, (await Deno.stat(deno)).size >> 1);
      await Deno.remove(join(dir, "app/main.ts"));
      const r = await release(["--version"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, version);
      assert.match(r.stderr, /does not match this executable \(its files are not the archive's\)/);
      assert.equal((await release(["--version"])).stderr, "");
    });

    await t.step("the tree carries the npm packages the agent loads, not client-node", () => {
      const modules = join(dir, "app/node_modules");
      for (const p of ["yaml", "@bufbuild/protobuf"]) {
        assert.ok(existsSync(join(modules, p, "package.json")), p);
      }
      assert.equal(existsSync(join(modules, "@kubernetes")), false);
      assert.equal(existsSync(join(modules, "@grpc")), false);
      // The kubelet's Worker runs from one bundle, with the table of its modules for klog.
      const bundle = join(dir, "app/src/privilege/agent_worker.js");
      assert.ok(existsSync(bundle));
      const starts = JSON.parse(Deno.readTextFileSync(`${bundle}.modules.json`)) as [
        number,
        string,
      ][];
      assert.ok(starts.some(([, p]) => p === "src/kubelet.ts"));
      assert.equal(existsSync(join(modules, "@types")), false);
    });

    await t.step({
      name: "with no network at all it starts, and loads a module imported when used from its tree",
      ignore: offline.ignore,
      fn: async () => {
        offline.check();
        const fresh = join(tmp, "extract-offline");
        const r = await run("unshare", ["--net", exe, "--version"], {
          KUBELET_TS_EXTRACT_DIR: fresh,
        });
        assert.equal(r.code, 0, r.stderr);
        assert.equal(r.stdout, version);
        const tree = treeOf(fresh);
        const probe = await run("unshare", [
          "--net",
          join(tree, "deno"),
          "run",
          "--cached-only",
          "--allow-all",
          "--config",
          join(tree, "app/deno.json"),
          join(tree, "app/src/server/pprof.ts"),
        ], { DENO_DIR: join(tree, "cache"), DENO_NO_UPDATE_CHECK: "1" });
        assert.equal(probe.code, 0, probe.stderr);
      },
    });
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});
