import assert from "node:assert/strict";
import {
  type CadvisorEntry,
  type CadvisorMachine,
  renderCadvisorMetrics,
} from "./cadvisor_metrics.ts";
import { compareGo, parseExposition } from "./prometheus.ts";

const ROOT: CadvisorEntry = {
  id: "/",
  name: "",
  image: "",
  container: "",
  pod: "",
  namespace: "",
  timestampMs: 1624396278302,
  cpu: { usageSecondsTotal: 531.060042, userSecondsTotal: 300.5, systemSecondsTotal: 200.25 },
  memory: {
    usageBytes: 2e9,
    workingSetBytes: 1450782720,
    rssBytes: 1e9,
    cacheBytes: 5e8,
    swapBytes: 0,
    failcnt: 0,
    pageFaults: 123456789,
    majorPageFaults: 42,
    hierarchicalPageFaults: 223456789,
    hierarchicalMajorPageFaults: 43,
    limitBytes: Infinity,
  },
  network: [{
    name: "eth0",
    rxBytes: 1e12,
    rxErrors: 0,
    txBytes: 123,
    txErrors: 1,
    rxPackets: 10,
    txPackets: 20,
    rxDropped: 0,
    txDropped: 3,
  }],
  fs: [{
    device: "/dev/vda1",
    usageBytes: 1e10,
    limitBytes: 5e10,
    inodesFree: 1000,
    inodes: 2000,
  }],
  startTimeSeconds: 1624390000,
  processes: 150,
};

const APP: CadvisorEntry = {
  id: "/kubepods/burstable/pod1/abc",
  name: "abc",
  image: "registry.k8s.io/pause:3.10",
  container: "app",
  pod: "web-0",
  namespace: "default",
  timestampMs: 1624396279001,
  cpu: { usageSecondsTotal: 0, userSecondsTotal: 0, systemSecondsTotal: 0 },
  memory: {
    usageBytes: 4096,
    workingSetBytes: 4096,
    rssBytes: 0,
    cacheBytes: 0,
    swapBytes: 0,
    failcnt: 0,
    pageFaults: 7,
    majorPageFaults: 0,
    limitBytes: 268435456,
  },
  startTimeSeconds: 1624390001,
  processes: 1,
};

const MACHINE: CadvisorMachine = {
  numCores: 2,
  memoryBytes: 25769803776,
  machineID: "m1",
  systemUUID: "u1",
  bootID: "b1",
  timestampMs: 1624300000123,
};

const VERSION = {
  kernelVersion: "6.18.0",
  osVersion: "Debian GNU/Linux 12 (bookworm)",
  dockerVersion: "",
  cadvisorVersion: "",
  cadvisorRevision: "",
};

const NOW = 1624396280777;

// cAdvisor v0.56.2's collectors with the kubelet's metric sets and label function wrote these
// lines (among others for data an entry does not carry) for ROOT, APP and MACHINE.
const EXPECTED =
  `# HELP cadvisor_version_info A metric with a constant '1' value labeled by kernel version, OS version, docker version, cadvisor version & cadvisor revision.
# TYPE cadvisor_version_info gauge
cadvisor_version_info{cadvisorRevision="",cadvisorVersion="",dockerVersion="",kernelVersion="6.18.0",osVersion="Debian GNU/Linux 12 (bookworm)"} 1
# HELP container_cpu_system_seconds_total Cumulative system cpu time consumed in seconds.
# TYPE container_cpu_system_seconds_total counter
container_cpu_system_seconds_total{container="",id="/",image="",name="",namespace="",pod=""} 200.25 1624396278302
container_cpu_system_seconds_total{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 0 1624396279001
# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="",cpu="total",id="/",image="",name="",namespace="",pod=""} 531.060042 1624396278302
# HELP container_cpu_user_seconds_total Cumulative user cpu time consumed in seconds.
# TYPE container_cpu_user_seconds_total counter
container_cpu_user_seconds_total{container="",id="/",image="",name="",namespace="",pod=""} 300.5 1624396278302
container_cpu_user_seconds_total{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 0 1624396279001
# HELP container_fs_inodes_free Number of available Inodes
# TYPE container_fs_inodes_free gauge
container_fs_inodes_free{container="",device="/dev/vda1",id="/",image="",name="",namespace="",pod=""} 1000 1624396278302
# HELP container_fs_inodes_total Number of Inodes
# TYPE container_fs_inodes_total gauge
container_fs_inodes_total{container="",device="/dev/vda1",id="/",image="",name="",namespace="",pod=""} 2000 1624396278302
# HELP container_fs_limit_bytes Number of bytes that can be consumed by the container on this filesystem.
# TYPE container_fs_limit_bytes gauge
container_fs_limit_bytes{container="",device="/dev/vda1",id="/",image="",name="",namespace="",pod=""} 5e+10 1624396278302
# HELP container_fs_usage_bytes Number of bytes that are consumed by the container on this filesystem.
# TYPE container_fs_usage_bytes gauge
container_fs_usage_bytes{container="",device="/dev/vda1",id="/",image="",name="",namespace="",pod=""} 1e+10 1624396278302
# HELP container_health_state The result of the container's health check
# TYPE container_health_state gauge
container_health_state{container="",id="/",image="",name="",namespace="",pod=""} -1 1624396278302
container_health_state{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} -1 1624396279001
# HELP container_last_seen Last time a container was seen by the exporter
# TYPE container_last_seen gauge
container_last_seen{container="",id="/",image="",name="",namespace="",pod=""} 1.62439628e+09 1624396280777
container_last_seen{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 1.62439628e+09 1624396280777
# HELP container_memory_cache Number of bytes of page cache memory.
# TYPE container_memory_cache gauge
container_memory_cache{container="",id="/",image="",name="",namespace="",pod=""} 5e+08 1624396278302
container_memory_cache{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 0 1624396279001
# HELP container_memory_failcnt Number of memory usage hits limits
# TYPE container_memory_failcnt counter
container_memory_failcnt{container="",id="/",image="",name="",namespace="",pod=""} 0 1624396278302
container_memory_failcnt{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 0 1624396279001
# HELP container_memory_failures_total Cumulative count of memory allocation failures.
# TYPE container_memory_failures_total counter
container_memory_failures_total{container="",failure_type="pgfault",id="/",image="",name="",namespace="",pod="",scope="container"} 1.23456789e+08 1624396278302
container_memory_failures_total{container="",failure_type="pgfault",id="/",image="",name="",namespace="",pod="",scope="hierarchy"} 2.23456789e+08 1624396278302
container_memory_failures_total{container="",failure_type="pgmajfault",id="/",image="",name="",namespace="",pod="",scope="container"} 42 1624396278302
container_memory_failures_total{container="",failure_type="pgmajfault",id="/",image="",name="",namespace="",pod="",scope="hierarchy"} 43 1624396278302
container_memory_failures_total{container="app",failure_type="pgfault",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0",scope="container"} 7 1624396279001
container_memory_failures_total{container="app",failure_type="pgfault",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0",scope="hierarchy"} 7 1624396279001
container_memory_failures_total{container="app",failure_type="pgmajfault",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0",scope="container"} 0 1624396279001
container_memory_failures_total{container="app",failure_type="pgmajfault",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0",scope="hierarchy"} 0 1624396279001
# HELP container_memory_rss Size of RSS in bytes.
# TYPE container_memory_rss gauge
container_memory_rss{container="",id="/",image="",name="",namespace="",pod=""} 1e+09 1624396278302
container_memory_rss{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 0 1624396279001
# HELP container_memory_swap Container swap usage in bytes.
# TYPE container_memory_swap gauge
container_memory_swap{container="",id="/",image="",name="",namespace="",pod=""} 0 1624396278302
container_memory_swap{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 0 1624396279001
# HELP container_memory_usage_bytes Current memory usage in bytes, including all memory regardless of when it was accessed
# TYPE container_memory_usage_bytes gauge
container_memory_usage_bytes{container="",id="/",image="",name="",namespace="",pod=""} 2e+09 1624396278302
container_memory_usage_bytes{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 4096 1624396279001
# HELP container_memory_working_set_bytes Current working set in bytes.
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="",id="/",image="",name="",namespace="",pod=""} 1.45078272e+09 1624396278302
container_memory_working_set_bytes{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 4096 1624396279001
# HELP container_network_receive_bytes_total Cumulative count of bytes received
# TYPE container_network_receive_bytes_total counter
container_network_receive_bytes_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 1e+12 1624396278302
# HELP container_network_receive_errors_total Cumulative count of errors encountered while receiving
# TYPE container_network_receive_errors_total counter
container_network_receive_errors_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 0 1624396278302
# HELP container_network_receive_packets_dropped_total Cumulative count of packets dropped while receiving
# TYPE container_network_receive_packets_dropped_total counter
container_network_receive_packets_dropped_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 0 1624396278302
# HELP container_network_receive_packets_total Cumulative count of packets received
# TYPE container_network_receive_packets_total counter
container_network_receive_packets_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 10 1624396278302
# HELP container_network_transmit_bytes_total Cumulative count of bytes transmitted
# TYPE container_network_transmit_bytes_total counter
container_network_transmit_bytes_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 123 1624396278302
# HELP container_network_transmit_errors_total Cumulative count of errors encountered while transmitting
# TYPE container_network_transmit_errors_total counter
container_network_transmit_errors_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 1 1624396278302
# HELP container_network_transmit_packets_dropped_total Cumulative count of packets dropped while transmitting
# TYPE container_network_transmit_packets_dropped_total counter
container_network_transmit_packets_dropped_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 3 1624396278302
# HELP container_network_transmit_packets_total Cumulative count of packets transmitted
# TYPE container_network_transmit_packets_total counter
container_network_transmit_packets_total{container="",id="/",image="",interface="eth0",name="",namespace="",pod=""} 20 1624396278302
# HELP container_processes Number of processes running inside the container.
# TYPE container_processes gauge
container_processes{container="",id="/",image="",name="",namespace="",pod=""} 150 1624396278302
container_processes{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 1 1624396279001
# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise
# TYPE container_scrape_error gauge
container_scrape_error 0
# HELP container_spec_memory_limit_bytes Memory limit for the container.
# TYPE container_spec_memory_limit_bytes gauge
container_spec_memory_limit_bytes{container="",id="/",image="",name="",namespace="",pod=""} 0
container_spec_memory_limit_bytes{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 2.68435456e+08
# HELP container_start_time_seconds Start time of the container since unix epoch in seconds.
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="",id="/",image="",name="",namespace="",pod=""} 1.62439e+09
container_start_time_seconds{container="app",id="/kubepods/burstable/pod1/abc",image="registry.k8s.io/pause:3.10",name="abc",namespace="default",pod="web-0"} 1.624390001e+09
# HELP machine_cpu_cores Number of logical CPU cores.
# TYPE machine_cpu_cores gauge
machine_cpu_cores{boot_id="b1",machine_id="m1",system_uuid="u1"} 2 1624300000123
# HELP machine_memory_bytes Amount of memory installed on the machine.
# TYPE machine_memory_bytes gauge
machine_memory_bytes{boot_id="b1",machine_id="m1",system_uuid="u1"} 2.5769803776e+10 1624300000123
# HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.
# TYPE machine_scrape_error gauge
machine_scrape_error 0
`;

Deno.test("renderCadvisorMetrics writes what cAdvisor writes for the same data", () => {
  const text = renderCadvisorMetrics([APP, ROOT], MACHINE, { nowMs: NOW, versionInfo: VERSION });
  assert.equal(text, EXPECTED);
});

Deno.test("renderCadvisorMetrics reads back with HELP and TYPE before every family's samples", () => {
  const families = parseExposition(renderCadvisorMetrics([ROOT, APP], MACHINE, { nowMs: NOW }));
  const names = families.map((f) => f.name);
  assert.deepEqual(names, [...names].sort(compareGo));
  for (
    const f of families.filter((f) =>
      f.name.startsWith("container_") && f.name !== "container_scrape_error"
    )
  ) {
    for (const s of f.samples) {
      for (const key of ["container", "id", "image", "name", "namespace", "pod"]) {
        assert.ok(key in s.labels, `${f.name} lacks label ${key}`);
      }
    }
  }
  const byName = new Map(families.map((f) => [f.name, f]));
  assert.equal(byName.get("container_network_receive_bytes_total")?.type, "counter");
  assert.equal(byName.get("container_memory_rss")?.type, "gauge");
  assert.ok(!byName.has("cadvisor_version_info"), "no version info unless given");
  const cpu = byName.get("container_cpu_usage_seconds_total")?.samples ?? [];
  assert.deepEqual(cpu.map((s) => [s.labels.id, s.labels.cpu, s.value, s.timestampMs]), [
    ["/", "total", 531.060042, 1624396278302],
  ]);
  const seen = byName.get("container_last_seen")?.samples ?? [];
  assert.deepEqual(seen.map((s) => [s.value, s.timestampMs]), [
    [1624396280, NOW],
    [1624396280, NOW],
  ]);
  for (const name of ["container_start_time_seconds", "container_spec_memory_limit_bytes"]) {
    assert.ok(byName.get(name)?.samples.every((s) => s.timestampMs === undefined), name);
  }
});

Deno.test("renderCadvisorMetrics leaves out values an entry does not carry", () => {
  const bare: CadvisorEntry = {
    id: "/system.slice",
    name: "",
    image: "",
    container: "",
    pod: "",
    namespace: "",
    timestampMs: 1000.9,
    memory: { usageBytes: 5, workingSetBytes: 4 },
    fs: [{ device: "overlay", usageBytes: 3 }],
    network: [{ name: "lo", rxBytes: 1, rxErrors: 0, txBytes: 2, txErrors: 0 }],
  };
  const families = parseExposition(renderCadvisorMetrics([bare], MACHINE, { nowMs: 5000 }));
  const have = new Map(families.map((f) => [f.name, f.samples.length]));
  assert.deepEqual([...have.keys()], [
    "container_fs_usage_bytes",
    "container_health_state",
    "container_last_seen",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_network_receive_bytes_total",
    "container_network_receive_errors_total",
    "container_network_transmit_bytes_total",
    "container_network_transmit_errors_total",
    "container_scrape_error",
    "machine_cpu_cores",
    "machine_memory_bytes",
    "machine_scrape_error",
  ]);
  const usage = families.find((f) => f.name === "container_memory_usage_bytes")?.samples[0];
  assert.equal(usage?.timestampMs, 1000, "timestamps are whole milliseconds");
});

Deno.test('renderCadvisorMetrics writes cpu="total" only for positive usage', () => {
  const zero = { ...ROOT, memory: undefined, network: undefined, fs: undefined };
  const text = renderCadvisorMetrics([{ ...zero, cpu: { usageSecondsTotal: 0 } }], undefined, {
    nowMs: NOW,
  });
  assert.ok(!text.includes("container_cpu_usage_seconds_total"));
  const tiny = renderCadvisorMetrics([{ ...zero, cpu: { usageSecondsTotal: 1e-9 } }], undefined, {
    nowMs: NOW,
  });
  assert.ok(
    tiny.includes(
      'container_cpu_usage_seconds_total{container="",cpu="total",id="/",image="",name="",namespace="",pod=""} 1e-09 1624396278302\n',
    ),
  );
});

Deno.test("renderCadvisorMetrics writes 0 for an unlimited memory limit", () => {
  const limit = (limitBytes: number) =>
    parseExposition(
      renderCadvisorMetrics(
        [{ ...APP, memory: { usageBytes: 1, workingSetBytes: 1, limitBytes } }],
        {
          ...MACHINE,
        },
        { nowMs: NOW },
      ),
    ).find((f) => f.name === "container_spec_memory_limit_bytes")?.samples[0]?.value;
  assert.equal(limit(Infinity), 0);
  assert.equal(limit(2 ** 62 + 4096), 0);
  assert.equal(limit(2 ** 62), 2 ** 62);
  assert.equal(limit(1024), 1024);
});

Deno.test("renderCadvisorMetrics reports scrape errors in their gauges", () => {
  const noMachine = renderCadvisorMetrics([], undefined, { nowMs: NOW });
  assert.equal(
    noMachine,
    `# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise
# TYPE container_scrape_error gauge
container_scrape_error 0
# HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.
# TYPE machine_scrape_error gauge
machine_scrape_error 1
`,
  );
  const failed = parseExposition(
    renderCadvisorMetrics([ROOT, APP], MACHINE, { nowMs: NOW, scrapeError: true }),
  );
  assert.deepEqual(failed.map((f) => [f.name, f.samples[0]?.value]), [
    ["container_scrape_error", 1],
    ["machine_cpu_cores", 2],
    ["machine_memory_bytes", 25769803776],
    ["machine_scrape_error", 0],
  ]);
});

Deno.test("renderCadvisorMetrics writes spec, CFS only with a quota, zero load and gated pressure", () => {
  const entry = (quota: number): CadvisorEntry => ({
    ...APP,
    id: `/q${quota}`,
    cpu: {
      usageSecondsTotal: 1,
      cfs: { periods: 10, throttledPeriods: 2, throttledSecondsTotal: 0.5 },
    },
    loadStats: true,
    spec: {
      cpuShares: 2,
      cpuPeriod: 100000,
      cpuQuota: quota,
      memoryLimit: 2 ** 63,
      memorySwapLimit: 2 ** 63,
      memoryReservation: 0,
    },
    blkio: [{
      device: "/dev/vda",
      major: 254,
      minor: 0,
      readBytes: 5,
      writeBytes: 6,
      reads: 1,
      writes: 2,
    }],
    threads: 3,
    threadsMax: 0,
    ulimits: [{ name: "max_open_files", soft: 1024 }],
    pressure: { cpu: { someUs: 2_000_000, fullUs: 1_000_000 } },
  });
  const text = renderCadvisorMetrics([entry(0), entry(50000)], MACHINE, { nowMs: NOW });
  const lines = (name: string) => text.split("\n").filter((l) => l.startsWith(`${name}{`));
  assert.deepEqual(
    lines("container_cpu_cfs_throttled_periods_total").map((l) => l.includes('id="/q50000"')),
    [true],
  );
  assert.equal(lines("container_spec_cpu_quota").length, 1);
  assert.equal(lines("container_spec_cpu_shares").length, 2);
  assert.match(text, /^container_spec_memory_swap_limit_bytes\{.*id="\/q0".*\} 0$/m);
  assert.equal(lines("container_tasks_state").length, 10);
  assert.ok(lines("container_cpu_load_average_10s").every((l) => / 0 \d+$/.test(l)));
  assert.match(
    text,
    /^container_blkio_device_usage_total\{.*major="254",minor="0",.*operation="Write".*\} 6 /m,
  );
  assert.match(text, /^container_ulimits_soft\{.*ulimit="max_open_files"\} 1024 /m);
  assert.equal(lines("container_pressure_cpu_waiting_seconds_total").length, 0, "no PSI set");
  const withPsi = renderCadvisorMetrics([entry(0)], MACHINE, { nowMs: NOW, pressure: true });
  assert.match(withPsi, /^container_pressure_cpu_waiting_seconds_total\{.*\} 2 /m);
  assert.match(
    withPsi,
    /^# HELP container_pressure_cpu_stalled_seconds_total Total time duration no tasks in the container could make progress due to CPU congestion\.$/m,
  );
});
