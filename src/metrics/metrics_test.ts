import assert from "node:assert/strict";
import { join } from "node:path";
import { parseExposition } from "./prometheus.ts";
import { readProcessSample } from "./_process.ts";
import { KubeletMetrics, newKubeletMetrics } from "./metrics.ts";
import { createLogger } from "../klog/klog.ts";

Deno.test("KubeletMetrics exposes upstream's names, types, stability levels and labels", async () => {
  const m = new KubeletMetrics({ process: false });
  m.setNodeName("node-a");
  m.podWorkerDuration.observe(0.2, { operation_type: "create" });
  m.podStartSLIDuration.observe(3, {});
  m.runningContainers.set(2, { container_state: "running" });
  m.runtimeOperations.inc({ operation_type: "version" });
  m.runtimeOperationsDuration.observe(0.001, { operation_type: "version" });
  m.runtimeOperationsErrors.inc({ operation_type: "version" });
  m.evictions.inc({ eviction_signal: "memory.available" });
  m.restClientRequests.inc({ code: "200", method: "GET", host: "10.0.0.1:6443" });
  const families = new Map(parseExposition(await m.render()).map((f) => [f.name, f]));
  const want: [string, string, string[]][] = [
    ["kubelet_node_name", "gauge", ["node"]],
    ["kubelet_pod_worker_duration_seconds", "histogram", ["operation_type"]],
    ["kubelet_pod_start_duration_seconds", "histogram", []],
    ["kubelet_pod_start_sli_duration_seconds", "histogram", []],
    ["kubelet_pleg_relist_duration_seconds", "histogram", []],
    ["kubelet_pleg_relist_interval_seconds", "histogram", []],
    ["kubelet_running_pods", "gauge", []],
    ["kubelet_running_containers", "gauge", ["container_state"]],
    ["kubelet_runtime_operations_total", "counter", ["operation_type"]],
    ["kubelet_runtime_operations_duration_seconds", "histogram", ["operation_type"]],
    ["kubelet_runtime_operations_errors_total", "counter", ["operation_type"]],
    ["kubelet_evictions", "counter", ["eviction_signal"]],
    ["kubelet_started_pods_total", "counter", []],
    ["rest_client_requests_total", "counter", ["code", "host", "method"]],
    ["kubelet_image_volume_requested_total", "counter", []],
    ["kubelet_image_volume_mounted_succeed_total", "counter", []],
    ["kubelet_image_volume_mounted_errors_total", "counter", []],
  ];
  for (const [name, type, labels] of want) {
    const f = families.get(name);
    assert.ok(f, name);
    assert.equal(f.type, type, name);
    assert.match(
      f.help,
      name.startsWith("kubelet_image_volume_") ? /^\[BETA\] / : /^\[ALPHA\] /,
      name,
    );
    for (const s of f.samples) {
      const own = Object.keys(s.labels).filter((k) => k !== "le").sort();
      assert.deepEqual(own, labels, name);
    }
  }
  // Upstream's podStartupDurationBuckets.
  const bounds = families.get("kubelet_pod_start_sli_duration_seconds")!.samples
    .filter((s) => s.suffix === "_bucket").map((s) => s.labels.le);
  assert.deepEqual(bounds, [
    ..."0.5 1 2 3 4 5 6 8 10 20 30 45 60 120 180 240 300 360 480 600 900 1200 1800 2700 3600"
      .split(" "),
    "+Inf",
  ]);
  // Lazy vectors with nothing recorded are left out, as component-base does.
  assert.equal(families.has("kubelet_pod_start_total_duration_seconds"), false);
  assert.equal(families.has("kubelet_run_podsandbox_errors_total"), false);
});

Deno.test("readProcessSample reads /proc/self as client_golang's process collector does", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const self = join(dir, "self");
    await Deno.mkdir(join(self, "fd"), { recursive: true });
    await Deno.mkdir(join(self, "net"), { recursive: true });
    for (const fd of ["0", "1", "2"]) await Deno.writeTextFile(join(self, "fd", fd), "");
    // comm with a space and a parenthesis; utime 250, stime 50, starttime 1000, vsize, rss.
    const fields = ["S", ...Array(10).fill("0"), "250", "50", ...Array(6).fill("0"), "1000"];
    await Deno.writeTextFile(
      join(self, "stat"),
      `42 (deno (x) y) ${fields.join(" ")} 123456789 9999 0 0\n`,
    );
    await Deno.writeTextFile(join(self, "status"), "Name:\tdeno\nVmRSS:\t   2048 kB\n");
    await Deno.writeTextFile(
      join(self, "limits"),
      "Limit                     Soft Limit           Hard Limit           Units\n" +
        "Max open files            1024                 4096                 files\n" +
        "Max address space         unlimited            unlimited            bytes\n",
    );
    await Deno.writeTextFile(
      join(self, "net", "netstat"),
      "IpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 1000 2000\n",
    );
    const stat = join(dir, "stat");
    await Deno.writeTextFile(stat, "cpu 1 2 3\nbtime 1700000000\n");
    const s = await readProcessSample({ procSelf: self, procStat: stat });
    assert.deepEqual(s, {
      cpuSeconds: 3,
      virtualMemoryBytes: 123456789,
      residentMemoryBytes: 2048 * 1024,
      startTimeSeconds: 1700000010,
      openFds: 3,
      maxFds: 1024,
      maxVirtualMemoryBytes: 2 ** 64,
      networkReceiveBytes: 1000,
      networkTransmitBytes: 2000,
    });
    // Nothing readable: nothing reported, nothing thrown.
    assert.deepEqual(await readProcessSample({ procSelf: join(dir, "none"), procStat: stat }), {});
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("KubeletMetrics writes the process families without a stability level", async () => {
  const m = newKubeletMetrics(createLogger({ write: () => {} }));
  const families = new Map(parseExposition(await m.render()).map((f) => [f.name, f]));
  assert.equal(
    families.get("process_resident_memory_bytes")?.help,
    "Resident memory size in bytes.",
  );
  assert.equal(
    families.get("process_cpu_seconds_total")?.help,
    "Total user and system CPU time spent in seconds.",
  );
  assert.ok((families.get("process_resident_memory_bytes")?.samples[0]?.value ?? 0) > 0);
});
