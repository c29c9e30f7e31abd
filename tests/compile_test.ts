/**
 * `deno task compile` as an operator runs it, on a host that cannot reach Deno's download host
 * (a proxy on a closed loopback port stands in for that, so the test never leaves the machine):
 * one message saying so and how to use DENORT_BIN, no executable left behind. A DENORT_BIN that
 * is missing, or is the plain deno binary, is named too. Where the denort of this Deno version
 * is already in Deno's cache, the task must instead produce the agent.
 */

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "./agent_process.ts";
import { freePort } from "./child_process.ts";

/** Runs the task with `env` over this process's environment; an undefined value unsets. */
async function compileTask(env: Record<string, string | undefined>, output: string) {
  const full: Record<string, string> = { ...Deno.env.toObject(), NO_COLOR: "1" };
  for (const [k, v] of Object.entries(env)) v === undefined ? delete full[k] : (full[k] = v);
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "compile", "--output", output],
    cwd: REPO_ROOT,
    clearEnv: true,
    env: full,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

async function denortCached(): Promise<boolean> {
  const info = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json"],
    stdout: "piped",
  })
    .output();
  const denoDir = JSON.parse(new TextDecoder().decode(info.stdout)).denoDir as string;
  const dir = join(denoDir, "dl", "release", `v${Deno.version.deno}`);
  return existsSync(dir) && [...Deno.readDirSync(dir)].some((e) => e.name.startsWith("denort"));
}

async function withOutput(fn: (output: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-compile-" });
  try {
    await fn(join(dir, "kubelet"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("compile task says the download host is out of reach and how to use DENORT_BIN", async () => {
  const cached = await denortCached();
  await withOutput(async (output) => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const r = await compileTask(
      { HTTPS_PROXY: closed, https_proxy: closed, DENORT_BIN: undefined },
      output,
    );
    if (cached) {
      // Nothing to download: the task must build the agent (seen by its --version).
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /kubelet: Kubernetes v\d+\.\d+\.\d+\+kubelet-ts\.[^,]+, [\d.]+ MiB/);
      return;
    }
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(
      r.stderr,
      /^error: deno compile could not download the denort runtime from dl\.deno\.land/m,
    );
    assert.match(r.stderr, /denort-[\w-]+\.zip: .*Connect/);
    assert.match(r.stderr, /DENORT_BIN=\/path\/to\/denort deno task compile/);
    assert.equal(existsSync(output), false, "an executable was left behind");
  });
});

Deno.test("compile task names a DENORT_BIN that does not exist", async () => {
  await withOutput(async (output) => {
    const r = await compileTask({ DENORT_BIN: "/nonexistent/denort" }, output);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^error: DENORT_BIN=\/nonexistent\/denort does not exist/m);
  });
});

Deno.test("compile task removes an executable that is not the agent (DENORT_BIN=deno)", async () => {
  await withOutput(async (output) => {
    const r = await compileTask({ DENORT_BIN: Deno.execPath() }, output);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /is not the agent: '.*kubelet --version' printed "deno \d/);
    assert.match(r.stderr, /DENORT_BIN=.* is probably not a denort binary/);
    assert.equal(existsSync(output), false, "the REPL executable was left behind");
  });
});
