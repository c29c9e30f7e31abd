import assert from "node:assert/strict";
import { MetricsRegistry } from "./_registry.ts";
import { parseExposition } from "./prometheus.ts";
import { ImageMetrics } from "./image_metrics.ts";

Deno.test("ImageMetrics registers upstream's names, types and labels", async () => {
  const r = new MetricsRegistry();
  const m = new ImageMetrics(r);
  m.recordEnsureImageRequest("IfNotPresent", true, false);
  m.recordMustPullCheck("credentialPolicyAllowed");
  const got = new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
  const want: [string, string, string[]][] = [
    ["kubelet_image_manager_ensure_image_requests_total", "counter", [
      "present_locally",
      "pull_policy",
      "pull_required",
    ]],
    ["kubelet_imagemanager_image_mustpull_checks_total", "counter", ["result"]],
    ["kubelet_imagemanager_inmemory_pulledrecords_usage_percent", "gauge", []],
    ["kubelet_imagemanager_inmemory_pullintents_usage_percent", "gauge", []],
    ["kubelet_imagemanager_ondisk_pulledrecords", "gauge", []],
    ["kubelet_imagemanager_ondisk_pullintents", "gauge", []],
  ];
  assert.deepEqual([...got.keys()].sort(), want.map(([n]) => n));
  for (const [name, type, labels] of want) {
    const f = got.get(name)!;
    assert.equal(f.type, type, name);
    assert.match(f.help, /^\[ALPHA\] /, name);
    assert.equal(f.samples.length, 1, name);
    assert.deepEqual(Object.keys(f.samples[0]!.labels).sort(), labels, name);
  }
});

Deno.test("ImageMetrics lower-cases the pull policy and labels an outcome not reached unknown", () => {
  const m = new ImageMetrics(new MetricsRegistry());
  m.recordEnsureImageRequest("Never", false, undefined);
  m.recordEnsureImageRequest("Always", undefined, true);
  m.recordEnsureImageRequest("Always", undefined, true);
  const c = m.ensureImageRequests;
  assert.equal(
    c.get({ pull_policy: "never", present_locally: "false", pull_required: "unknown" }),
    1,
  );
  assert.equal(
    c.get({ pull_policy: "always", present_locally: "unknown", pull_required: "true" }),
    2,
  );
});
