import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  codeGraph,
  type DenoInfo,
  moduleUrls,
  packageName,
  ReleaseGraphError,
  runtimeGraph,
} from "./release_graph.ts";

const REPO = "file:///repo/";

type Dependency = { readonly code?: { readonly specifier: string } };
const YAML: Dependency = { code: { specifier: "npm:yaml@2.9.1" } };

/** `deno info --json` of main.ts importing a.ts (code) and client-node (types), a.ts `aDeps`. */
function info(aDeps: Dependency[] = [YAML], extra: DenoInfo["modules"] = []): DenoInfo {
  return {
    roots: [`${REPO}main.ts`],
    modules: [
      {
        specifier: `${REPO}main.ts`,
        dependencies: [
          { code: { specifier: `${REPO}a.ts` } },
          {}, // `import type` from client-node: a "type" edge, no "code"
          { code: { specifier: "node:fs" } },
        ],
      },
      { specifier: `${REPO}a.ts`, dependencies: aDeps },
      { specifier: "npm:/yaml@2.9.1", kind: "npm", npmPackage: "yaml@2.9.1" },
      ...extra,
    ],
    redirects: { "npm:yaml@2.9.1": "npm:/yaml@2.9.1" },
    npmPackages: {
      "yaml@2.9.1": { name: "yaml", version: "2.9.1", dependencies: ["dep@1.0.0_peer@2.0.0"] },
      "dep@1.0.0_peer@2.0.0": { name: "dep", version: "1.0.0" },
      "@kubernetes/client-node@2.0.1": { name: "@kubernetes/client-node", version: "2.0.1" },
    },
  };
}

const IMPORTS = {
  yaml: "npm:yaml@2.9.1",
  "@kubernetes/client-node": "npm:@kubernetes/client-node@2.0.1",
  "@scope/local": "./local.ts",
};

Deno.test("codeGraph follows code imports, not type imports, into files and npm packages", () => {
  const g = codeGraph([info()], REPO, IMPORTS);
  assert.deepEqual(g.files, ["a.ts", "main.ts"]);
  assert.deepEqual(g.packages, ["yaml@2.9.1"]);
  assert.deepEqual(g.allPackages, ["dep@1.0.0", "yaml@2.9.1"]);
  assert.deepEqual(g.imports, { yaml: "npm:yaml@2.9.1", "@scope/local": "./local.ts" });
});

Deno.test("codeGraph names the module that loads client-node as code", () => {
  const clientNode = "npm:/@kubernetes/client-node@2.0.1";
  const graph = info([YAML, { code: { specifier: clientNode } }], [
    { specifier: clientNode, kind: "npm", npmPackage: "@kubernetes/client-node@2.0.1" },
  ]);
  assert.throws(
    () => codeGraph([graph], REPO, IMPORTS),
    (e) =>
      e instanceof ReleaseGraphError &&
      e.message === "a.ts imports @kubernetes/client-node as code: the release must not load it " +
          "(use 'import type' for its types)",
  );
});

Deno.test("codeGraph refuses a module outside the repository", () => {
  const graph = info([{ code: { specifier: "file:///elsewhere/x.ts" } }], [
    { specifier: "file:///elsewhere/x.ts" },
  ]);
  assert.throws(
    () => codeGraph([graph], REPO, IMPORTS),
    /imports file:\/\/\/elsewhere\/x\.ts, outside/,
  );
});

Deno.test("moduleUrls finds the modules named by URL, as Workers are", () => {
  const src = `new Worker(opts.worker ?? new URL("./agent_worker.ts", import.meta.url), {});
    const u = new URL('../x/y.ts', import.meta.url); new URL("./data.json", import.meta.url);`;
  assert.deepEqual(moduleUrls(src, `${REPO}src/privilege/launcher.ts`), [
    `${REPO}src/privilege/agent_worker.ts`,
    `${REPO}src/x/y.ts`,
  ]);
});

Deno.test("packageName keeps a scope", () => {
  assert.equal(packageName("@bufbuild/protobuf@2.17.0"), "@bufbuild/protobuf");
  assert.equal(packageName("yaml@2.9.1"), "yaml");
});

Deno.test("runtimeGraph of the agent holds its Workers and not client-node's runtime", async () => {
  const g = await runtimeGraph(fileURLToPath(new URL("..", import.meta.url)));
  for (const f of ["main.ts", "src/privilege/plan_worker.ts", "src/privilege/agent_worker.ts"]) {
    assert.ok(g.files.includes(f), f);
  }
  assert.ok(!g.files.some((f) => f.endsWith("_test.ts") || f.startsWith("src/testing/")));
  assert.deepEqual(g.packages.map(packageName), ["@bufbuild/protobuf", "yaml"]);
  assert.ok(!g.allPackages.some((p) => p.startsWith("@kubernetes/")), g.allPackages.join(", "));
  assert.equal(g.imports["@kubernetes/client-node"], undefined);
});
