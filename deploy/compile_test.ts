import assert from "node:assert/strict";
import { AGENT_RUN_FLAGS, compileArgs, explainCompileFailure } from "./compile.ts";

const env = { denoVersion: "2.9.6" };

// deno compile's stderr on this machine, where dl.deno.land does not resolve.
const DNS_FAILURE = `error: Writing deno compile executable to temporary file '/tmp/k.tmp-1'

Caused by:
    0: Setting up base binary.
    1: error sending request for url (https://dl.deno.land/release/v2.9.6/denort-x86_64-unknown-linux-gnu.zip): client error (Connect): dns error: failed to lookup address information: Name or service not known
    2: client error (Connect)
`;

Deno.test("explainCompileFailure names the download host, the URL and DENORT_BIN", () => {
  const msg = explainCompileFailure(DNS_FAILURE, env);
  assert.ok(msg);
  assert.match(msg, /could not download the denort runtime from dl\.deno\.land/);
  assert.match(msg, /denort-x86_64-unknown-linux-gnu\.zip: client error \(Connect\): dns error/);
  assert.match(msg, /DENORT_BIN=\/path\/to\/denort deno task compile/);
});

Deno.test("explainCompileFailure names a DENORT_BIN that does not exist", () => {
  const msg = explainCompileFailure(
    "Caused by:\n    0: Could not find denort at '/opt/denort'\n    1: No such file or directory",
    env,
  );
  assert.equal(
    msg,
    "DENORT_BIN=/opt/denort does not exist: point DENORT_BIN at a denort binary of Deno 2.9.6 " +
      "for the target (denort-<target>.zip from Deno's release page), or unset it to download " +
      "one from dl.deno.land",
  );
});

Deno.test("explainCompileFailure leaves other failures to deno's own message", () => {
  assert.equal(
    explainCompileFailure('error: Module not found "file:///x/main.ts".', env),
    undefined,
  );
});

Deno.test("compileArgs bakes in the agent's run flags and the target", () => {
  assert.deepEqual(compileArgs({ output: "out/kubelet", target: "aarch64-unknown-linux-gnu" }), [
    "compile",
    ...AGENT_RUN_FLAGS,
    "--target",
    "aarch64-unknown-linux-gnu",
    "--output",
    "out/kubelet",
    "main.ts",
  ]);
});

Deno.test("deno task start runs the agent with the same flags as the binary", async () => {
  const json = JSON.parse(
    await Deno.readTextFile(new URL("../deno.json", import.meta.url)),
  ) as { tasks: Record<string, string> };
  assert.equal(json.tasks.start, `deno run ${AGENT_RUN_FLAGS.join(" ")} main.ts`);
});

Deno.test("compileArgs embeds the modules given to include and can skip the type check", () => {
  assert.deepEqual(
    compileArgs({ output: "k", include: ["src/a_worker.ts", "src/b_worker.ts"], noCheck: true }),
    [
      "compile",
      ...AGENT_RUN_FLAGS,
      "--no-check",
      "--include",
      "src/a_worker.ts",
      "--include",
      "src/b_worker.ts",
      "--output",
      "k",
      "main.ts",
    ],
  );
});
