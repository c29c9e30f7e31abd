import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger, setLogVerbosity } from "../klog/klog.ts";
import { loadKubeletConfiguration } from "./kubelet_config.ts";
import { changedFields, ConfigReloader, LIVE_FIELDS } from "./kubelet_config_reload.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import { TokenBucket } from "../client/rate_limiter.ts";
import { FakeClock } from "../util/clock.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/** A config file on disk, loaded as main.ts loads it, and a reloader over it. */
async function fixture(body: string) {
  const dir = await Deno.makeTempDir({ prefix: "reload-" });
  const file = join(dir, "kubelet.yaml");
  await Deno.writeTextFile(file, HEADER + body);
  const load = async () =>
    (await loadKubeletConfiguration({
      configFile: file,
      dropinDir: "",
      flags: [],
      cgroupV1: false,
    }))
      .config;
  const current = await load();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  const reloader = new ConfigReloader({ load, current, logger });
  const applied: KubeletConfiguration[] = [];
  reloader.onChange(["evictionHard", "imageGCHighThresholdPercent"], (c) => applied.push(c));
  return {
    file,
    current,
    lines,
    reloader,
    applied,
    write: (text: string) => Deno.writeTextFile(file, HEADER + text),
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
  };
}

Deno.test("ConfigReloader applies a changed live field and updates the running configuration", async () => {
  await using f = await fixture("evictionHard:\n  memory.available: 100Mi\n");
  await f.write("evictionHard:\n  memory.available: 1Gi\n");
  const r = await f.reloader.reload();
  assert.deepEqual(r, { applied: ["evictionHard"], refused: [] });
  assert.equal(f.applied.length, 1);
  assert.equal(f.applied[0]!.evictionHard?.["memory.available"], "1Gi");
  assert.equal(f.current.evictionHard?.["memory.available"], "1Gi", "what /configz shows");
  // Unchanged: nothing applied again.
  assert.deepEqual(await f.reloader.reload(), { applied: [], refused: [] });
  assert.equal(f.applied.length, 1);
});

Deno.test("ConfigReloader refuses a field that needs a restart, naming it, and still applies the live ones", async () => {
  await using f = await fixture("port: 10250\nimageGCHighThresholdPercent: 85\n");
  await f.write("port: 10260\nimageGCHighThresholdPercent: 90\n");
  const r = await f.reloader.reload();
  assert.deepEqual(r.applied, ["imageGCHighThresholdPercent"]);
  assert.deepEqual(r.refused, ["port"]);
  assert.equal(f.current.port, 10250, "the port keeps its running value");
  assert.equal(f.current.imageGCHighThresholdPercent, 90);
  const refusal = f.lines.find((l) => l.includes("Refusing to change"));
  assert.ok(refusal, f.lines.join("\n"));
  assert.match(refusal, /field="port" running=10250 new=10260/);
});

Deno.test("ConfigReloader changes nothing when the file is broken or invalid, and says where", async () => {
  await using f = await fixture("evictionHard:\n  memory.available: 100Mi\n");
  const before = structuredClone(f.current);
  await f.write("evictionHard:\n  memory.available: [1Gi\n");
  const broken = await f.reloader.reload();
  assert.ok(broken.error);
  assert.deepEqual(f.current, before);
  assert.match(f.lines.at(-1)!, /Failed to reload kubelet configuration; nothing changed/);
  assert.match(f.lines.at(-1)!, /kubelet\.yaml/);

  await f.write("evictionHard:\n  memory.available: 100Mi\nimageGCHighThresholdPercent: 101\n");
  const invalid = await f.reloader.reload();
  assert.match(invalid.error ?? "", /imageGCHighThresholdPercent/);
  assert.deepEqual(f.current, before);
  assert.equal(f.applied.length, 0);
});

Deno.test("ConfigReloader undoes the appliers that ran when one refuses the new values", async () => {
  await using f = await fixture("evictionHard:\n  memory.available: 100Mi\n");
  const seen: string[] = [];
  f.reloader.onChange(["evictionHard"], (c) => {
    seen.push(c.evictionHard?.["memory.available"] ?? "");
    if (c.evictionHard?.["memory.available"] === "2Gi") throw new Error("refused by component");
  });
  await f.write("evictionHard:\n  memory.available: 2Gi\n");
  const r = await f.reloader.reload();
  assert.equal(r.error, "refused by component");
  assert.equal(f.current.evictionHard?.["memory.available"], "100Mi");
  // The first applier got the new value, then the running one back.
  assert.deepEqual(f.applied.map((c) => c.evictionHard?.["memory.available"]), ["2Gi", "100Mi"]);
  assert.deepEqual(seen, ["2Gi", "100Mi"]);
});

Deno.test("changedFields compares deeply and names logging fields by path", async () => {
  await using f = await fixture("");
  const next = structuredClone(f.current);
  next.logging.verbosity = 4;
  next.evictionHard = { ...next.evictionHard, "nodefs.available": "5%" };
  assert.deepEqual(changedFields(f.current, next), ["evictionHard", "logging.verbosity"]);
  assert.deepEqual(changedFields(f.current, structuredClone(f.current)), []);
  assert.ok(LIVE_FIELDS.includes("logging.verbosity"));
  assert.ok(!(LIVE_FIELDS as readonly string[]).includes("logging.format"));
});

Deno.test("setLogVerbosity changes -v for the logger and the loggers derived from it", () => {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  const child = logger.with({ component: "x" });
  child.v(4).info("hidden");
  setLogVerbosity(logger, 4);
  child.v(4).info("shown");
  logger.v(5).info("still hidden");
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /"shown" component="x"/);
  assert.throws(() => setLogVerbosity(logger, -1), /verbosity/);
  assert.throws(() => setLogVerbosity({ ...logger }, 1), /Cannot change the verbosity/);
});

Deno.test("TokenBucket.setRate paces by the new rate from then on", async () => {
  const clock = new FakeClock();
  const bucket = new TokenBucket(clock, 1, 1);
  await bucket.wait();
  bucket.setRate(10, 1);
  let done = false;
  const next = bucket.wait().then(() => (done = true));
  await new Promise((r) => setTimeout(r, 1));
  assert.equal(done, false);
  clock.step(100);
  await next;
  assert.equal(done, true, "one token after 100 ms at 10 qps, not 1 s");
});
