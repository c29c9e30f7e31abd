import assert from "node:assert/strict";
import { MetricsRegistry } from "./_registry.ts";
import { formatValue, parseExposition } from "./prometheus.ts";
import {
  ANY_DRIVER,
  DRA_DURATION_BUCKETS,
  DraMetrics,
  exponentialBucketsRange,
} from "./dra_metrics.ts";

Deno.test("exponentialBucketsRange prints upstream's DRA bounds digit for digit", () => {
  // As the Go kubelet v1.36.3 prints them on /metrics (Go's math.Pow, not V8's).
  assert.deepEqual(DRA_DURATION_BUCKETS.map(formatValue), [
    "0.1",
    "0.1534127404634391",
    "0.23535468936502524",
    "0.36106407876409946",
    "0.5539182980610752",
    "0.849781240983936",
    "1.303672689737678",
    "1.9999999999999993",
    "3.0682548092687805",
    "4.7070937873005025",
    "7.221281575281985",
    "11.078365961221499",
    "16.995624819678714",
    "26.07345379475354",
    "39.99999999999997",
  ]);
  assert.deepEqual(exponentialBucketsRange(1, 8, 4).map(formatValue), ["1", "2", "4", "8"]);
  assert.throws(() => exponentialBucketsRange(0, 1, 3));
});

Deno.test("DraMetrics registers upstream's names, types and labels; claims in use come from the source", async () => {
  const r = new MetricsRegistry();
  const m = new DraMetrics(r);
  m.observeOperation("PrepareResources", 0.002, false);
  m.observeOperation("UnprepareResources", 0.5, true);
  let before = new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
  assert.equal(before.has("dra_resource_claims_in_use"), false);
  m.setClaimsInUseSource(() => new Map([[ANY_DRIVER, 1], ["gpu.example.com", 1]]));
  before = new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
  const ops = before.get("dra_operations_duration_seconds")!;
  assert.equal(ops.type, "histogram");
  assert.match(ops.help, /^\[ALPHA\] Latency histogram in seconds/);
  const counts = ops.samples.filter((s) => s.suffix === "_count").map((s) => s.labels);
  assert.deepEqual(counts, [
    { is_error: "false", operation_name: "PrepareResources" },
    { is_error: "true", operation_name: "UnprepareResources" },
  ]);
  const inUse = before.get("dra_resource_claims_in_use")!;
  assert.equal(inUse.type, "gauge");
  assert.deepEqual(inUse.samples.map((s) => [s.labels.driver_name, s.value]), [
    ["<any>", 1],
    ["gpu.example.com", 1],
  ]);
});

Deno.test("DraMetrics times gRPC calls to drivers by driver, method and status code", async () => {
  const r = new MetricsRegistry();
  const m = new DraMetrics(r);
  const method = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources";
  m.observeGrpc("gpu.example.com", method, "OK", 0.05);
  m.observeGrpc("gpu.example.com", method, "Unavailable", 0.01);
  const f = parseExposition(await r.render()).find((x) =>
    x.name === "dra_grpc_operations_duration_seconds"
  )!;
  assert.equal(f.type, "histogram");
  assert.equal(f.help, "[ALPHA] Duration in seconds of the DRA gRPC operations");
  assert.deepEqual(
    f.samples.filter((s) => s.suffix === "_count").map((s) => [s.labels.grpc_status_code, s.value]),
    [["OK", 1], ["Unavailable", 1]],
  );
});
