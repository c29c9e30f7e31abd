/**
 * Node log queries end to end (`enableSystemLogQuery`, NodeLogQuery GA in 1.36): kubectl through
 * the real apiserver's node proxy reaches the agent, which runs in its least-privilege sandbox
 * with journalctl granted by its configuration. A service the journal knows is answered by the
 * journalctl the agent finds on its PATH: here a stand-in that records its arguments and prints
 * a fixed entry, since this host has no journal (PID 1 is not systemd, no journald runs). A
 * service the journal lacks is answered from its real file under /var/log, which upstream
 * hard-codes (the test writes uniquely named files there and removes them), and so is a query of
 * one file; bad queries get upstream's 400 and 406 with its words.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { startControlPlane } from "./control_plane.ts";
import { e2eSuite, startNodeAgent } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("node log query e2e tests", ["openssl", "go"]);
const NODE = "kts-log-query";
/** The unit the stand-in journal knows. */
const UNIT = "kts-nlq-unit";
/** Unique names under the real /var/log. */
const TAG = `kts-nlq-${crypto.randomUUID().slice(0, 8)}`;
const VAR_LOG = "/var/log";

const suite = e2eSuite({
  name: "node log query",
  gate,
  userAgent: "node-log-query-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "log-query-e2e-" });
    const bin = join(dir, "bin");
    await Deno.mkdir(bin);
    await Deno.writeTextFile(
      join(bin, "journalctl"),
      `#!/bin/sh
for a in "$@"; do printf '%s\\t' "$a"; done >> "${join(bin, "calls")}"; echo >> "${
        join(bin, "calls")
      }"
if [ "$1" = "--field" ]; then echo "${UNIT}.service"; exit 0; fi
echo "Jan 02 03:04:05.000006 ${NODE} ${UNIT}[42]: the stand-in journal's entry"
`,
      { mode: 0o755 },
    );
    await Deno.writeTextFile(join(VAR_LOG, `${TAG}.log`), "a line of the service's own file\n");
    await Deno.mkdir(join(VAR_LOG, TAG));
    await Deno.writeTextFile(join(VAR_LOG, TAG, "app.log"), "a line of a file asked for by path\n");
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    const runtime = await startFakeRuntime({ socket: join(dir, "cri.sock") });
    const { agent } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: runtime.endpoint,
      configLines: [
        "enableSystemLogHandler: true",
        "enableSystemLogQuery: true",
        // Upstream 1.36 locks the gate on; this agent's validation still wants it named.
        "featureGates:",
        "  NodeLogQuery: true",
      ],
      // The API server listens once its serving certificate is made, after the sync loop starts.
      waitFor: "Starting to listen",
      env: { PATH: `${bin}:${Deno.env.get("PATH") ?? "/usr/sbin:/usr/bin:/sbin:/bin"}` },
    });
    return { dir, cp, agent, runtime, bin };
  },
});
const e2e = suite.test;
const BASE = `/api/v1/nodes/${NODE}/proxy/logs/`;

e2e("a service the journal knows: journalctl's answer, with upstream's arguments", async (w) => {
  const r = await w.cp.kubectl([
    "get",
    "--raw",
    `${BASE}?query=${UNIT}&tailLines=5&pattern=entry&sinceTime=2026-01-02T03:04:05Z&boot=0`,
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(
    r.stdout,
    `Jan 02 03:04:05.000006 ${NODE} ${UNIT}[42]: the stand-in journal's entry\n`,
  );
  const calls = (await Deno.readTextFile(join(w.bin, "calls"))).split("\n")
    .filter((l) => l !== "")
    .map((l) => l.split("\t").slice(0, -1));
  assert.deepEqual(calls.at(-1), [
    ...["--utc", "--no-pager", "--output=short-precise", "--since=2026-1-2 03:4:5"],
    ...["--pager-end", "--lines=5", `--unit=${UNIT}`, "--grep=entry", "--boot", "0"],
  ]);
  assert.deepEqual(calls.at(-2), ["--field", "_SYSTEMD_UNIT"]);
});

e2e(
  "a service the journal lacks: its file under /var/log, and the words for a missing one",
  async (w) => {
    const r = await w.cp.kubectl(["get", "--raw", `${BASE}?query=${TAG}`]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "a line of the service's own file\n");
    const missing = await w.cp.kubectl(["get", "--raw", `${BASE}?query=${TAG}-none`]);
    assert.equal(missing.stdout, `\nlog not found for ${TAG}-none\n`);
    const withOptions = await w.cp.kubectl(["get", "--raw", `${BASE}?query=${TAG}&tailLines=1`]);
    assert.equal(
      withOptions.stdout,
      `\noptions present and query resolved to log files for [${TAG}]\ntry without specifying options\n`,
    );
  },
);

e2e(
  "one file by its path under /var/log; a leading / or a way out is refused with 406",
  async (w) => {
    const r = await w.cp.kubectl(["get", "--raw", `${BASE}?query=${TAG}/app.log`]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "a line of a file asked for by path\n");
    for (const file of [`/${TAG}/app.log`, `../etc/${TAG}`]) {
      const refused = await w.cp.kubectl(["get", "--raw", `${BASE}?query=${file}`, "-v=6"]);
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /406 Not Acceptable/, refused.stderr);
    }
  },
);

e2e("bad queries: 400 for values that do not parse, 406 for invalid ones", async (w) => {
  const cases: [string, RegExp][] = [
    [`?query=${UNIT}&tailLines=many`, /400 Bad Request/],
    [`?query=${UNIT}&boot=1`, /406 Not Acceptable/],
    [`?query=${UNIT}&pattern=(%3F%3Dx)`, /406 Not Acceptable/],
    [`${TAG}/?query=${UNIT}`, /406 Not Acceptable/],
  ];
  for (const [query, status] of cases) {
    const r = await w.cp.kubectl(["get", "--raw", `${BASE}${query}`, "-v=6"]);
    assert.notEqual(r.code, 0, query);
    assert.match(r.stderr, status, `${query}: ${r.stderr}`);
  }
});

suite.teardown("teardown", async (w) => {
  await w.runtime.stop();
  await Deno.remove(join(VAR_LOG, `${TAG}.log`)).catch(() => {});
  await Deno.remove(join(VAR_LOG, TAG), { recursive: true }).catch(() => {});
});
