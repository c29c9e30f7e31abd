import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { asciiSource, bundleModule, moduleStarts } from "./release_bundle.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url));
const isAscii = (text: string) => [...text].every((ch) => ch.charCodeAt(0) < 0x80);

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

Deno.test("asciiSource escapes what is not ASCII, and the code means the same", async () => {
  const code = [
    "/** source → pod UID → pod; O(N²) */",
    'export const units = /^(µs|μs)$/u.test("μs") && /^[µ×]$/.test("×");',
    'export const text = "a → b × 😀";',
    "export const template = `µ${1 + 1}→`;",
    "export const ß = 2;",
    'export const astral = /^\\p{Emoji}$/u.test("😀") && /^[😀]$/u.test("😀");',
  ].join("\n");
  const ascii = asciiSource(code);
  assert.ok(isAscii(ascii));
  assert.equal(ascii.split("\n").length, 6, "no line added or removed");
  assert.ok(ascii.includes("\\u2192") && ascii.includes("\\ud83d\\ude00"));
  const load = (src: string) =>
    import(
      `data:text/javascript;base64,${btoa(String.fromCharCode(...new TextEncoder().encode(src)))}`
    );
  const [was, now] = await Promise.all([load(code), load(ascii)]);
  assert.deepEqual({ ...now }, { ...was });
  assert.equal(now.units, true);
  assert.equal(now.text, "a → b × 😀");
  assert.equal(now.template, "µ2→");
  assert.equal(now["ß"], 2);
  assert.equal(now.astral, true);
  // Where an escape would change the code, the release fails instead.
  assert.throws(
    () => asciiSource('const a = "x";\nconst b = "\\é";'),
    /line 2 .*backslash before U\+00e9/,
  );
  assert.throws(() => asciiSource("// a\u2028b"), /U\+2028/);
});

Deno.test("a bundled module's log lines name their own module, and -vmodule matches it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "release-bundle-" });
  try {
    const entry = join(dir, "site_entry.ts");
    const klog = new URL("../src/klog/klog.ts", import.meta.url).href;
    await Deno.writeTextFile(
      entry,
      `import { createLogger } from ${JSON.stringify(klog)};
class Units {
  /** µs and μs → microseconds (esbuild keeps this comment). */
  static micro = /^(µs|μs)$/;
}
if (!Units.micro.test("μs")) throw new Error("the escaped pattern lost μs");
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
    // One byte a character for V8: nothing outside ASCII is left.
    const source = await Deno.readTextFile(out);
    assert.ok(isAscii(source), "the bundle is ASCII only");
    assert.ok(source.includes("\\u00b5s|\\u03bcs"), "the pattern is escaped, not dropped");
    // The line within the module's code as the bundle holds it (esbuild reformats it).
    const text = source.split("\n");
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
