import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { bundleModule, moduleStarts } from "./release_bundle.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url));

Deno.test("moduleStarts reads esbuild's module comments", () => {
  const bundle = [
    "var __x = 1;",
    "",
    "// src/util/clock.ts",
    "var realClock = {};",
    "",
    "// src/klog/klog.ts",
    "function createLogger() {}",
    "  // a comment inside code",
    "// ../../root/.cache/deno/npm/registry.npmjs.org/yaml/2.9.1/dist/log.js",
    "var require_log = 1;",
  ].join("\n");
  const starts = moduleStarts(bundle);
  assert.deepEqual(starts, [
    [3, "src/util/clock.ts"],
    [6, "src/klog/klog.ts"],
    [9, "../../root/.cache/deno/npm/registry.npmjs.org/yaml/2.9.1/dist/log.js"],
  ]);
});

Deno.test("a bundled module's log lines name their own module, and -vmodule matches it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "release-bundle-" });
  try {
    const entry = join(dir, "site_entry.ts");
    const klog = new URL("../src/klog/klog.ts", import.meta.url).href;
    await Deno.writeTextFile(
      entry,
      `import { createLogger } from ${JSON.stringify(klog)};
const log = createLogger({ vmodule: [{ filePattern: "site_entry", verbosity: 4 }] });
log.info("first");
log.v(4).info("verbose");
log.v(5).info("never");
`,
    );
    const out = join(dir, "out", "bundle.js");
    await Deno.mkdir(join(dir, "out"));
    await bundleModule({ repo: REPO, entry, out, modules: ["src/klog/klog.ts"] });
    const run = async () => {
      const r = await new Deno.Command(Deno.execPath(), {
        args: ["run", "--allow-read", out],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
      return new TextDecoder().decode(r.stderr).trim().split("\n");
    };
    // The line within the module's code as the bundle holds it (esbuild reformats it).
    const text = (await Deno.readTextFile(out)).split("\n");
    const start = text.findIndex((l) => /^\/\/ \S*site_entry\.ts$/.test(l));
    const at = (code: string) => text.indexOf(code) - start;
    assert.ok(start >= 0 && at('log.info("first");') > 0);
    const lines = await run();
    assert.match(
      lines[0] ?? "",
      new RegExp(` site_entry\\.ts:${at('log.info("first");')}\\] "first"$`),
    );
    assert.match(
      lines[1] ?? "",
      new RegExp(` site_entry\\.ts:${at('log.v(4).info("verbose");')}\\] "verbose"$`),
    );
    assert.equal(lines.length, 2);

    // Without its table a bundle's lines name the bundle itself.
    await Deno.remove(`${out}.modules.json`);
    assert.match((await run())[0] ?? "", / bundle\.js:\d+\] "first"$/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
