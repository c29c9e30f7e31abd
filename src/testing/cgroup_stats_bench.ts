/**
 * @module
 * Benchmarks one full sampling pass as the cAdvisor loop runs it every 10 s at the density the
 * kubelet supports: the node, 110 pod cgroups and 220 container cgroups (synchronous reads, as
 * the loop makes them), on a hybrid (this workplace's machines) and a v2 fixture. Run with
 * `deno bench --allow-all src/testing/cgroup_stats_bench.ts`.
 */

import {
  type CgroupLayout,
  type CgroupMode,
  type CgroupPaths,
  containerCgroupPaths,
  detectCgroupLayout,
  parseProcCgroup,
} from "../cm/cgroup_layout.ts";
import { readCgroupSample, readNodeSample } from "../stats/cgroup_stats.ts";
import { buildCgroupFixture, type FixtureCgroup } from "./cgroup_fixtures.ts";

const PODS = 110;
const CONTAINERS_PER_POD = 2;

function cgroups(): FixtureCgroup[] {
  const out: FixtureCgroup[] = [];
  for (let p = 0; p < PODS; p++) {
    const pod = `/kubepods/burstable/pod${
      p.toString(16).padStart(8, "0")
    }-0000-4000-8000-000000000000`;
    const value = (i: number) => ({
      cpuNs: BigInt(1_000_000 * (p + 1) + i) * 1000n,
      memUsage: (50 + p + i) * 2 ** 20,
      inactiveFile: (5 + i) * 2 ** 20,
      rss: (30 + p) * 2 ** 20,
      limit: 512 * 2 ** 20,
      pids: 3 + i,
      pgfault: 1000 * p,
      pgmajfault: p,
    });
    out.push({ path: pod, ...value(0) });
    for (let c = 1; c <= CONTAINERS_PER_POD; c++) {
      out.push({ path: `${pod}/${c.toString(16).padStart(64, "0")}`, ...value(c) });
    }
  }
  return out;
}

interface Prepared {
  root: string;
  layout: CgroupLayout;
  targets: CgroupPaths[];
}

async function prepare(mode: CgroupMode): Promise<Prepared> {
  const root = await Deno.makeTempDir({ prefix: `cgroup-bench-${mode}-` });
  const fixture = await buildCgroupFixture(root, mode, cgroups());
  const layout = await detectCgroupLayout({ root });
  // Found once per container, as the sampler does; not part of a pass.
  const targets = await Promise.all(
    [...fixture.pids.values()].map(async (pid) =>
      containerCgroupPaths(
        layout,
        parseProcCgroup(await Deno.readTextFile(`${root}/proc/${pid}/cgroup`)),
      )
    ),
  );
  return { root, layout, targets };
}

function samplingPass({ root, layout, targets }: Prepared): void {
  let omitted = 0;
  for (const paths of targets) if (readCgroupSample(paths).missing.length > 0) omitted++;
  const node = readNodeSample(layout, { root });
  if (omitted > 0 || node.missing.length > 0) throw new Error("fixture sample omitted values");
}

const hybrid = await prepare("hybrid");
const v2 = await prepare("v2");
globalThis.addEventListener("unload", () => {
  for (const { root } of [hybrid, v2]) Deno.removeSync(root, { recursive: true });
});

Deno.bench("cgroup sampling pass, hybrid, node + 110 pods + 220 containers", () => {
  samplingPass(hybrid);
});

Deno.bench("cgroup sampling pass, v2, node + 110 pods + 220 containers", () => {
  samplingPass(v2);
});
