import assert from "node:assert/strict";
import { join } from "node:path";
import { sharedSLIMetrics, SLIMetrics } from "./slis.ts";

/** A /proc/self whose stat says the process started 12.34 s after boot, and a /proc/stat. */
async function procFixture(dir: string): Promise<{ procSelf: string; procStat: string }> {
  const self = join(dir, "self");
  await Deno.mkdir(self);
  // Fields 3 (state) to 22 (starttime, in clock ticks).
  const fields = ["S", ...Array(18).fill("0"), "1234"];
  await Deno.writeTextFile(join(self, "stat"), `7 (kubelet) ${fields.join(" ")} 0 0\n`);
  const procStat = join(dir, "stat");
  await Deno.writeTextFile(procStat, "cpu 1 2 3\nbtime 1700000000\n");
  return { procSelf: self, procStat };
}

Deno.test("SLIMetrics writes component-base's SLI families with their HELP, types and labels", async () => {
  const dir = await Deno.makeTempDir({ prefix: "slis-" });
  try {
    const slis = new SLIMetrics({ process: await procFixture(dir) });
    slis.observeHealthcheck("ping", "healthz", "success");
    slis.observeHealthcheck("syncloop", "healthz", "success");
    slis.observeHealthcheck("syncloop", "healthz", "error");
    assert.equal(
      await slis.render(),
      [
        "# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.",
        "# TYPE kubernetes_healthcheck gauge",
        'kubernetes_healthcheck{name="ping",type="healthz"} 1',
        // The gauge holds the last result; the counter every one.
        'kubernetes_healthcheck{name="syncloop",type="healthz"} 0',
        "# HELP kubernetes_healthchecks_total [STABLE] This metric records the results of all healthcheck.",
        "# TYPE kubernetes_healthchecks_total counter",
        'kubernetes_healthchecks_total{name="ping",status="success",type="healthz"} 1',
        'kubernetes_healthchecks_total{name="syncloop",status="error",type="healthz"} 1',
        'kubernetes_healthchecks_total{name="syncloop",status="success",type="healthz"} 1',
        "# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        "process_start_time_seconds 1.70000001234e+09",
        "",
      ].join("\n"),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("SLIMetrics reset empties every family, the start time's too, as KubeRegistry.Reset", async () => {
  const dir = await Deno.makeTempDir({ prefix: "slis-" });
  try {
    const slis = new SLIMetrics({ process: await procFixture(dir) });
    slis.observeHealthcheck("ping", "healthz", "success");
    await slis.reset();
    assert.equal(await slis.render(), "");
    slis.observeHealthcheck("log", "healthz", "success");
    assert.deepEqual(
      (await slis.render()).split("\n").filter((l) => !l.startsWith("#") && l !== ""),
      [
        'kubernetes_healthcheck{name="log",type="healthz"} 1',
        'kubernetes_healthchecks_total{name="log",status="success",type="healthz"} 1',
      ],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("SLIMetrics falls back to the current second when the start time cannot be read", async () => {
  const slis = new SLIMetrics({
    process: { procSelf: "/nonexistent/self", procStat: "/nonexistent/stat" },
    now: () => 1_700_000_123_999,
  });
  assert.match(await slis.render(), /^process_start_time_seconds 1\.700000123e\+09$/m);
});

Deno.test("sharedSLIMetrics is one registry for the process", () => {
  assert.equal(sharedSLIMetrics(), sharedSLIMetrics());
});
