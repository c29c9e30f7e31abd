import assert from "node:assert/strict";
import { drive } from "../testing/cm_fixtures.ts";
import { join } from "node:path";
import { applyOOMScoreAdj } from "./oom_adjuster.ts";
import { FakeClock } from "./clock.ts";

Deno.test("applyOOMScoreAdj writes the value; a missing file is NotFound at once", async () => {
  const dir = await Deno.makeTempDir({ prefix: "oom-" });
  try {
    const path = join(dir, "oom_score_adj");
    await Deno.writeTextFile(path, "0");
    await applyOOMScoreAdj(-999, { path });
    assert.equal(await Deno.readTextFile(path), "-999");
    await assert.rejects(
      applyOOMScoreAdj(-999, { path: join(dir, "missing", "oom_score_adj") }),
      Deno.errors.NotFound,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("applyOOMScoreAdj tries twice, 100 ms apart, then rejects with the error", async () => {
  const dir = await Deno.makeTempDir({ prefix: "oom-" });
  try {
    // A directory cannot be written as a file: each try fails (not NotFound).
    // The fake clock moves only once the retry waits on it, however slow the failed write is.
    const clock = new FakeClock(0);
    const done = applyOOMScoreAdj(-999, { path: dir, clock }).then(() => "ok", (e) => e);
    const result = await drive(clock, done, 100);
    assert.ok(result instanceof Error, String(result));
    assert.equal(clock.now(), 200);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a process's own oom_score_adj is set (in a child process, raised: lowering needs CAP_SYS_RESOURCE)", async () => {
  const module = new URL("./oom_adjuster.ts", import.meta.url).href;
  const code = `import { applyOOMScoreAdj } from ${JSON.stringify(module)};
await applyOOMScoreAdj(500);
console.log((await Deno.readTextFile("/proc/self/oom_score_adj")).trim());`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--quiet", code],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  assert.equal(new TextDecoder().decode(out.stdout).trim(), "500");
});
