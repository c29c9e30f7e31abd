import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type AgentFigures,
  filesBytes,
  type ReleaseFigures,
  releaseSection,
  withExtracted,
} from "./_bench_release.ts";

const MiB = 2 ** 20;

Deno.test("withExtracted measures the tree, its runtime and Deno's cache apart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bench-release-test-" });
  try {
    const tree = join(dir, "0.1.0-abcdef012345");
    await Deno.mkdir(join(tree, "app/src"), { recursive: true });
    await Deno.mkdir(join(tree, "cache/gen"), { recursive: true });
    await Deno.writeFile(join(tree, "deno"), new Uint8Array(1000));
    await Deno.writeFile(join(tree, "app/src/a.ts"), new Uint8Array(30));
    await Deno.writeFile(join(tree, "app/main.ts"), new Uint8Array(12));
    await Deno.writeFile(join(tree, "cache/gen/a.js"), new Uint8Array(7));
    await Deno.symlink("main.ts", join(tree, "app/link.ts"));
    assert.equal(await filesBytes(tree), 1049, "links are not counted");
    const built: ReleaseFigures = {
      path: "/x/dist/linux-amd64/kubelet",
      bytes: 500,
      treeBytes: 1042,
      runtimeBytes: NaN,
      cacheBytes: NaN,
    };
    assert.deepEqual(await withExtracted(built, dir), {
      ...built,
      treeBytes: 1042,
      runtimeBytes: 1000,
      cacheBytes: 7,
    });
    await Deno.mkdir(join(dir, "0.0.9-000000000000"));
    await assert.rejects(withExtracted(built, dir), /one extracted tree expected in .*: found/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("releaseSection puts the file's sizes and both agents' start, RSS and CPU side by side", () => {
  const figures: ReleaseFigures = {
    path: "/tmp/run/release/linux-amd64/kubelet",
    bytes: 43384310,
    treeBytes: 99.4 * MiB,
    runtimeBytes: 91.2 * MiB,
    cacheBytes: 3.2 * MiB,
  };
  const agent = (label: string, rss: number, firstStart?: AgentFigures["firstStart"]) => ({
    label,
    startMs: rss * 40,
    ...(firstStart ? { firstStart } : {}),
    windows: [{ what: "0 pods", rssMiB: rss, cores: 0.003 }, {
      what: "10 pods",
      rssMiB: rss + 10,
      cores: 0.005,
    }],
    peakMiB: rss + 20,
  } satisfies AgentFigures);
  const release = agent("agent-release", 88, { ms: 4321, peakMiB: 150 });
  const text = releaseSection(figures, agent("agent", 80), release).join("\n");
  assert.match(text, /^### The release file: agent-release .* beside agent /m);
  assert.match(text, /file `linux-amd64\/kubelet`: 41\.4 MiB \(43384310 bytes\)/);
  assert.match(
    text,
    /extracted tree: 99\.4 MiB \(runtime 91\.2 MiB, agent 8\.2 MiB\), plus 3\.2 MiB/,
  );
  assert.match(text, /^\|\s+\|\s+agent \|\s+agent-release \|\s+agent-release\/agent \|$/m);
  assert.match(
    text,
    /first start \(it extracted the file; .*\): spawned → sync loop started 4321 ms, peak RSS 150\.0 MiB; the process measured below is its second start/,
  );
  assert.match(
    text,
    /^\| spawned → sync loop started\s+\|\s+3200 ms \|\s+3520 ms \|\s+1\.10× \|$/m,
  );
  assert.match(text, /^\| RSS, 0 pods\s+\|\s+80\.0 MiB \|\s+88\.0 MiB \|\s+1\.10× \|$/m);
  assert.match(text, /^\| RSS, 10 pods\s+\|\s+90\.0 MiB \|\s+98\.0 MiB \|\s+1\.09× \|$/m);
  assert.match(text, /^\| RSS peak \(VmHWM, whole run\)\s+\|\s+100\.0 MiB \|\s+108\.0 MiB \|/m);
  assert.match(text, /^\| CPU, 10 pods\s+\|\s+5\.0 m \|\s+5\.0 m \|\s+1\.00× \|$/m);

  const alone = releaseSection(figures, undefined, agent("agent-release", 88)).join("\n");
  assert.match(alone, /the process measured is its first start/);
  assert.match(alone, /^\|\s+\|\s+agent-release \|$/m);
  assert.match(alone, /^\| RSS, 0 pods\s+\|\s+88\.0 MiB \|$/m);
});
