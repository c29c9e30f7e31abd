import assert from "node:assert/strict";
import { join } from "node:path";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { HealthStatus } from "../../proto/dra_health/v1alpha1/api.ts";
import {
  DRA_DEFAULT_HEALTH_TIMEOUT_MS,
  DRA_HEALTH_STATE_FILE,
  DraHealthCache,
  type ReportedDeviceHealth,
  reportedDeviceHealth,
  truncateHealthMessage,
} from "./dra_health.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const DRIVER = "gpu.example.com";

function report(deviceName: string, health: ReportedDeviceHealth["health"], o = {}) {
  return { poolName: "pool", deviceName, health, healthCheckTimeoutMs: 0, message: "", ...o };
}

Deno.test("DraHealthCache says which devices changed, and reads Unknown for devices never or no longer reported", async () => {
  const clock = new FakeClock();
  const cache = await DraHealthCache.load({ clock, logger: quiet });
  assert.equal(cache.get(DRIVER, "pool", "a").health, "Unknown");
  const first = cache.update(DRIVER, [report("a", "Healthy"), report("b", "Healthy")]);
  assert.deepEqual(first.map((d) => d.deviceName), ["a", "b"]);
  assert.equal(cache.get(DRIVER, "pool", "a").health, "Healthy");
  // The same report changes nothing; a new health or message does.
  assert.deepEqual(cache.update(DRIVER, [report("a", "Healthy"), report("b", "Healthy")]), []);
  const second = cache.update(DRIVER, [
    report("a", "Unhealthy", { message: "ECC errors" }),
    report("b", "Healthy"),
  ]);
  assert.deepEqual(second.map((d) => [d.deviceName, d.health, d.message]), [
    ["a", "Unhealthy", "ECC errors"],
  ]);
  assert.equal(cache.get(DRIVER, "pool", "a").message, "ECC errors");
  // A device not reported within its timeout reads Unknown, and the next report that leaves
  // it out says so.
  clock.step(DRA_DEFAULT_HEALTH_TIMEOUT_MS + 1);
  assert.deepEqual(cache.get(DRIVER, "pool", "b").health, "Unknown");
  const third = cache.update(DRIVER, [report("a", "Unhealthy", { message: "ECC errors" })]);
  assert.deepEqual(third.map((d) => [d.deviceName, d.health]), [["b", "Unknown"]]);
  // A driver's own timeout wins over the default.
  cache.update(DRIVER, [report("c", "Healthy", { healthCheckTimeoutMs: 60_000 })]);
  clock.step(DRA_DEFAULT_HEALTH_TIMEOUT_MS + 1);
  assert.equal(cache.get(DRIVER, "pool", "c").health, "Healthy");
  // A driver whose stream ended is forgotten.
  await cache.clearDriver(DRIVER);
  assert.equal(cache.get(DRIVER, "pool", "c").health, "Unknown");
  assert.deepEqual(cache.devices(DRIVER), []);
});

Deno.test("DraHealthCache keeps upstream's dra_health_state file and reads it back", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dra-health-test-" });
  try {
    const clock = new FakeClock(Date.UTC(2026, 0, 1, 0, 0, 0, 250));
    const cache = await DraHealthCache.load({ clock, logger: quiet, stateDirectory: dir });
    cache.update(DRIVER, [
      report("a", "Unhealthy", { message: "hot", healthCheckTimeoutMs: 45_000 }),
    ]);
    await cache.flush();
    const text = await Deno.readTextFile(join(dir, DRA_HEALTH_STATE_FILE));
    assert.equal(
      text,
      `{"${DRIVER}":{"Devices":{"pool/a":{"PoolName":"pool","DeviceName":"a","Health":"Unhealthy",` +
        `"LastUpdated":"2026-01-01T00:00:00.250Z","HealthCheckTimeout":45000000000,"Message":"hot"}}}}`,
    );
    // Go writes local times with nanoseconds; a restarted kubelet reads them.
    await Deno.writeTextFile(
      join(dir, DRA_HEALTH_STATE_FILE),
      `{"${DRIVER}":{"Devices":{"pool/b":{"PoolName":"pool","DeviceName":"b","Health":"Healthy",` +
        `"LastUpdated":"2026-01-01T01:00:00.123456789+01:00","HealthCheckTimeout":0,"Message":""}}}}`,
    );
    const again = await DraHealthCache.load({ clock, logger: quiet, stateDirectory: dir });
    assert.equal(again.get(DRIVER, "pool", "b").health, "Healthy");
    assert.equal(again.get(DRIVER, "pool", "b").lastUpdated, Date.UTC(2026, 0, 1, 0, 0, 0, 123));
    // A file that cannot be read is logged and the cache starts empty.
    await Deno.writeTextFile(join(dir, DRA_HEALTH_STATE_FILE), "{not json");
    const lines: string[] = [];
    const logger = createLogger({ write: (l) => lines.push(l), pid: 1 });
    const empty = await DraHealthCache.load({ clock, logger, stateDirectory: dir });
    assert.equal(empty.get(DRIVER, "pool", "b").health, "Unknown");
    assert.ok(lines.some((l) => l.includes("Failed to load health checkpoint")), lines.join("\n"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("reportedDeviceHealth maps a driver's report as upstream's buildDeviceHealth", () => {
  const d = reportedDeviceHealth({
    device: { poolName: "p", deviceName: "d" },
    health: HealthStatus.UNHEALTHY,
    lastUpdatedTime: 5n,
    healthCheckTimeoutSeconds: -3n,
    message: "x".repeat(2000),
  }, quiet);
  assert.deepEqual({ ...d, message: d.message.length }, {
    poolName: "p",
    deviceName: "d",
    health: "Unhealthy",
    healthCheckTimeoutMs: 0,
    message: 1024,
  });
  const h = reportedDeviceHealth({
    device: undefined,
    health: HealthStatus.UNRECOGNIZED,
    lastUpdatedTime: 0n,
    healthCheckTimeoutSeconds: 90n,
    message: "",
  }, quiet);
  assert.deepEqual([h.health, h.healthCheckTimeoutMs], ["Unknown", 90_000]);
});

Deno.test("truncateHealthMessage keeps 1021 bytes and never half a character", () => {
  assert.equal(truncateHealthMessage("ok"), "ok");
  assert.equal(truncateHealthMessage("x".repeat(1024)), "x".repeat(1024));
  assert.equal(truncateHealthMessage("x".repeat(1025)), "x".repeat(1021) + "...");
  // "é" is 2 bytes: 510 of them are 1020 bytes, the 511th would cross 1021.
  assert.equal(truncateHealthMessage("é".repeat(600)), "é".repeat(510) + "...");
});
