import assert from "node:assert/strict";
import { isOurs, plegMode, plegTable, relistCount } from "./_bench_pleg.ts";

Deno.test("relistCount reads the relist histogram's count, with or without labels", () => {
  const text = [
    "# TYPE kubelet_pleg_relist_duration_seconds histogram",
    'kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} 40',
    "kubelet_pleg_relist_duration_seconds_sum 0.25",
    "kubelet_pleg_relist_duration_seconds_count 57",
    "kubelet_pleg_relist_interval_seconds_count 56",
  ].join("\n");
  assert.equal(relistCount(text), 57);
  assert.equal(relistCount('kubelet_pleg_relist_duration_seconds_count{x="y"} 3\n'), 3);
  assert.ok(Number.isNaN(relistCount("kubelet_pleg_relist_interval_seconds_count 5\n")));
});

Deno.test("plegMode says which PLEG ran, from the label and our agent's log", () => {
  assert.equal(isOurs("agent-relist"), true);
  assert.equal(isOurs("upstream"), false);
  assert.match(plegMode("upstream", ""), /^generic: relists every 1 s$/);
  assert.match(plegMode("agent-relist", ""), /EventedPLEG=false/);
  assert.match(plegMode("agent", ""), /^evented: container events, relist every 5 min$/);
  assert.match(
    plegMode(
      "agent",
      'I1206 evented.ts:268] "The container runtime does not serve CRI GetContainerEvents; the PLEG relists every 1s"',
    ),
    /no container events: relists every 1 s/,
  );
  const failed = 'E1206 evented.ts:282] "Evented PLEG: Failed to get container events, relisting"';
  assert.match(plegMode("agent", `${failed}\n${failed}\n`), /the stream failed 2 times$/);
});

Deno.test("plegTable puts each measure on a row and each kubelet in a column", () => {
  const kubelet = (label: string, relists: number, cores: number) => ({
    label,
    pleg: plegMode(label, ""),
    relistsPerMinute: relists,
    startupCores: cores * 2,
    idleCores: cores,
    sequential: [100, 200],
    bursts: [{ size: 10, latency: [300, 400, 500], cores: cores * 3 }],
  });
  const lines = plegTable([
    kubelet("agent", 0.5, 0.002),
    kubelet("agent-relist", 60, 0.003),
    kubelet("upstream", NaN, 0.004),
  ]).split("\n");
  assert.match(lines[0]!, /^\|\s+\|\s+agent \|\s+agent-relist \|\s+upstream \|$/);
  assert.equal(lines.length, 2 + 7);
  assert.match(
    lines[3]!,
    /^\| PLEG relists per minute at 0 pods\s+\|\s+0\.5 \|\s+60\.0 \|\s+n\/a \|$/,
  );
  assert.match(lines[5]!, /^\| CPU at 0 pods, steady\s+\|\s+2\.0 m \|\s+3\.0 m \|\s+4\.0 m \|$/);
  assert.match(lines[6]!, /1 pod × 2 sequential\s+\|\s+100 ms \/ 200 ms \|/);
  assert.match(lines[7]!, /burst of 10\s+\|\s+400 ms \/ 500 ms \|/);
  assert.match(lines[8]!, /^\| CPU with the burst of 10 running\s+\|\s+6\.0 m \|/);
});
