import assert from "node:assert/strict";
import {
  aggregateContainerRequests,
  cmpDec,
  milliValueOf,
  parseDec,
  podLimits,
  podRequests,
  valueOf,
} from "./resource_helpers.ts";
import { QuantitySyntaxError } from "../util/quantity.ts";

Deno.test("parseDec reads decimal, binary and exponent forms exactly", () => {
  assert.equal(valueOf(parseDec("1Gi")), 1073741824n);
  assert.equal(valueOf(parseDec("1G")), 1000000000n);
  assert.equal(valueOf(parseDec("1e3")), 1000n);
  assert.equal(milliValueOf(parseDec("100m")), 100n);
  assert.equal(milliValueOf(parseDec("0.1")), 100n);
  assert.equal(milliValueOf(parseDec(".5")), 500n);
  assert.equal(cmpDec(parseDec("1000m"), parseDec("1")), 0);
  assert.equal(cmpDec(parseDec("1Mi"), parseDec("1M")), 1);
  assert.throws(() => parseDec("1 Gi"), QuantitySyntaxError);
  assert.throws(() => parseDec("abc"), QuantitySyntaxError);
});

Deno.test("valueOf and milliValueOf round up as Go's Quantity does", () => {
  assert.equal(valueOf(parseDec("1.5")), 2n);
  assert.equal(valueOf(parseDec("1500m")), 2n);
  assert.equal(milliValueOf(parseDec("0.1m")), 1n);
  assert.equal(milliValueOf(parseDec("1n")), 1n);
  assert.equal(valueOf(undefined), 0n);
});

Deno.test("podRequests adds overhead unless excluded and prefers pod-level values", () => {
  const pod = {
    spec: {
      containers: [{ name: "a", resources: { requests: { cpu: "100m", memory: "1Mi" } } }],
      overhead: { cpu: "50m" },
      resources: { requests: { memory: "8Mi" } },
    },
  };
  const withOverhead = podRequests(pod);
  assert.equal(milliValueOf(withOverhead.get("cpu")), 150n);
  assert.equal(valueOf(withOverhead.get("memory")), 8n * 1024n * 1024n);
  assert.equal(milliValueOf(podRequests(pod, { excludeOverhead: true }).get("cpu")), 100n);
  const containersOnly = podRequests(pod, { skipPodLevelResources: true });
  assert.equal(valueOf(containersOnly.get("memory")), 1024n * 1024n);
  assert.equal(valueOf(aggregateContainerRequests(pod).get("memory")), 1024n * 1024n);
});

Deno.test("podLimits adds overhead only to limits that are set", () => {
  const pod = {
    spec: {
      containers: [{ name: "a", resources: { limits: { cpu: "1" } } }],
      overhead: { cpu: "100m", memory: "10Mi" },
    },
  };
  const limits = podLimits(pod);
  assert.equal(milliValueOf(limits.get("cpu")), 1100n);
  assert.equal(limits.get("memory"), undefined);
});
