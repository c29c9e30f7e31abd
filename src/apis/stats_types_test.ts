// Cases mutate an untyped JSON document at arbitrary paths.
// deno-lint-ignore-file no-explicit-any
import assert from "node:assert/strict";
import { decodeSummary, StatsSchemaError } from "./stats_types.ts";

const T = "2026-12-03T07:30:00Z";

function sample(): Record<string, unknown> {
  return {
    node: {
      nodeName: "node-1",
      startTime: T,
      systemContainers: [{ name: "pods", startTime: T, cpu: { time: T, usageNanoCores: 5 } }],
      cpu: { time: T, usageNanoCores: 1000, usageCoreNanoSeconds: 123456789 },
      memory: { time: T, availableBytes: 1, usageBytes: 2, workingSetBytes: 2, rssBytes: 1 },
      network: {
        time: T,
        name: "eth0",
        rxBytes: 10,
        interfaces: [{ name: "eth0", rxBytes: 10, txErrors: 0 }],
      },
      fs: { time: T, capacityBytes: 100, usedBytes: 50, inodes: 10 },
      runtime: { imageFs: { time: T, usedBytes: 5 }, containerFs: { time: T } },
      rlimit: { time: T, maxpid: 4194304, curproc: 300 },
      swap: { time: T, swapUsageBytes: 0 },
    },
    pods: [{
      podRef: { name: "web", namespace: "default", uid: "u-1" },
      startTime: T,
      containers: [{
        name: "main",
        startTime: T,
        cpu: { time: T },
        rootfs: { time: T, usedBytes: 4096 },
        logs: { time: T, usedBytes: 0 },
      }],
      volume: [{ time: T, name: "cache", usedBytes: 1 }],
      "ephemeral-storage": { time: T, usedBytes: 4097 },
      process_stats: { process_count: 1 },
    }],
  };
}

Deno.test("decodeSummary accepts a document in upstream's shape", () => {
  const s = decodeSummary(sample());
  assert.equal(s.node.nodeName, "node-1");
  assert.equal(s.pods[0]?.containers[0]?.rootfs?.usedBytes, 4096);
});

Deno.test("decodeSummary rejects unknown fields, wrong types and missing required fields", () => {
  const cases: [(d: Record<string, any>) => void, RegExp][] = [
    [(d) => d.node.cpu.usageNanocores = 1, /^\$\.node\.cpu: unknown field "usageNanocores"/],
    [(d) => d.node.memory.usageBytes = -1, /^\$\.node\.memory\.usageBytes: expected an unsigned/],
    [(d) => d.node.memory.usageBytes = 1.5, /expected an unsigned integer/],
    [(d) => d.node.startTime = "yesterday", /^\$\.node\.startTime: expected an RFC 3339 time/],
    [(d) => delete d.pods[0].podRef.uid, /^\$\.pods\[0\]\.podRef\.uid: required field missing$/],
    [(d) => d.pods[0].containers = {}, /^\$\.pods\[0\]\.containers: expected an array/],
    [(d) => d.node.network.name = 3, /^\$\.node\.network\.name: expected a string/],
    [(d) => d.pods[0]["ephemeral_storage"] = {}, /unknown field "ephemeral_storage"/],
    [(d) => d.node.rlimit.maxpid = "4194304", /^\$\.node\.rlimit\.maxpid: expected an integer/],
  ];
  for (const [mutate, message] of cases) {
    const doc = sample();
    mutate(doc as Record<string, any>);
    assert.throws(
      () => decodeSummary(doc),
      (e) => e instanceof StatsSchemaError && message.test(e.message),
      String(message),
    );
  }
});
