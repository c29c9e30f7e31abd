import assert from "node:assert/strict";
import { layoutProblems, relativeImports, type SourceFile } from "./layout.ts";

const ROOT = new URL("../../", import.meta.url);

async function repositoryFiles(): Promise<SourceFile[]> {
  const out = await new Deno.Command("git", {
    args: ["ls-files", "--cached", "--others", "--exclude-standard", "*.ts"],
    cwd: ROOT,
    stdout: "piped",
  }).output();
  assert.equal(out.code, 0, "git ls-files failed");
  // This file's own examples of bad imports are not imports.
  const self = "src/testing/layout_test.ts";
  const paths = new TextDecoder().decode(out.stdout).split("\n").filter((p) =>
    p !== "" && p !== self
  );
  return await Promise.all(
    paths.map(async (path) => ({ path, text: await Deno.readTextFile(new URL(path, ROOT)) })),
  );
}

Deno.test("layoutProblems finds none in the repository", async () => {
  const files = await repositoryFiles();
  assert.ok(files.some((f) => f.path === "src/kubelet.ts"), "the repository was not read");
  assert.deepEqual(layoutProblems(files), []);
});

Deno.test("layoutProblems names a production module that imports test support", () => {
  const files: SourceFile[] = [
    { path: "src/kubelet.ts", text: 'import { x } from "./testing/fake_runtime_service.ts";' },
    { path: "main.ts", text: 'const m = await import("./tests/agent_process.ts");' },
    { path: "src/cri/connection_test.ts", text: 'import { y } from "../testing/fuzz.ts";' },
    { path: "src/testing/fuzz.ts", text: 'import { z } from "../../tests/images.ts";' },
  ];
  assert.deepEqual(layoutProblems(files), [
    "src/kubelet.ts: production module imports test support src/testing/fake_runtime_service.ts",
    "main.ts: production module imports test support tests/agent_process.ts",
  ]);
});

Deno.test("layoutProblems names an import of another folder's private module", () => {
  const files: SourceFile[] = [
    { path: "src/cm/cgroup_manager.ts", text: 'import { a } from "./_tree.ts";' },
    { path: "src/preflight/preflight.ts", text: 'export { b } from "../cm/_tree.ts";' },
    {
      path: "tests/x_test.ts",
      text: 'new Worker(new URL("../src/cm/_tree.ts", import.meta.url));',
    },
  ];
  assert.deepEqual(layoutProblems(files), [
    "src/preflight/preflight.ts: imports ../cm/_tree.ts, private to src/cm/",
    "tests/x_test.ts: imports ../src/cm/_tree.ts, private to src/cm/",
  ]);
});

Deno.test("layoutProblems names a file nested below src/'s one level of folders", () => {
  const files = [{ path: "src/volume/csi/driver.ts", text: "" }];
  assert.deepEqual(layoutProblems(files), [
    "src/volume/csi/driver.ts: src/ is one level of folders, this file is deeper",
  ]);
});

Deno.test("relativeImports reads static, type-only, dynamic and Worker URL specifiers", () => {
  const text = [
    'import { a } from "./a.ts";',
    'import type { B } from "../b/b.ts";',
    'import "./side_effect.ts";',
    "export * from './c.ts';",
    'const d = await import("./d.ts");',
    'new Worker(new URL("./e.ts", import.meta.url), { type: "module" });',
    'const notAnImport = "./f.ts";',
  ].join("\n");
  assert.deepEqual(relativeImports({ path: "src/x/y.ts", text }), [
    "src/x/a.ts",
    "src/b/b.ts",
    "src/x/side_effect.ts",
    "src/x/c.ts",
    "src/x/d.ts",
    "src/x/e.ts",
  ]);
});
