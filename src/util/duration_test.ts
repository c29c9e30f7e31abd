import assert from "node:assert/strict";
import { DurationSyntaxError, formatDuration, parseDuration } from "./duration.ts";

Deno.test("parseDuration reads Go duration syntax", () => {
  assert.equal(parseDuration("10s"), 10_000);
  assert.equal(parseDuration("1m30s"), 90_000);
  assert.equal(parseDuration("1h2m3.5s"), 3_723_500);
  assert.equal(parseDuration("100ms"), 100);
  assert.equal(parseDuration("1.5h"), 5_400_000);
  assert.equal(parseDuration("250us"), 0.25);
  assert.equal(parseDuration("0"), 0);
  assert.equal(parseDuration("-2s"), -2000);
});

Deno.test("parseDuration rejects what Go rejects", () => {
  for (const bad of ["", "10", "1d", "s", "1m 30s", "1.2.3s", "+", "ten seconds"]) {
    assert.throws(() => parseDuration(bad), DurationSyntaxError, bad);
  }
});

Deno.test("formatDuration prints like Go's Duration.String", () => {
  assert.equal(formatDuration(0), "0s");
  assert.equal(formatDuration(60_000), "1m0s");
  assert.equal(formatDuration(10_000), "10s");
  assert.equal(formatDuration(100), "100ms");
  assert.equal(formatDuration(4 * 3_600_000), "4h0m0s");
  assert.equal(formatDuration(90_500), "1m30.5s");
  assert.equal(formatDuration(0.25), "250µs");
  assert.equal(formatDuration(-1500), "-1.5s");
});
