/**
 * @module
 * The cost of statistics at the kubelet's density, on fixture cgroup trees (v1 hybrid as on
 * these machines, and v2): 110 pods, each a sandbox and 2 containers, sampled by the real
 * {@link Cadvisor} (cgroups found once from each process, then a few small reads per cgroup).
 * Prints, per mode, the time of one full housekeeping pass (p50, max over 20) and the heap
 * allocated per pass (exact with `--v8-flags=--expose-gc`), then `deno bench` times a pass and
 * a `/stats/summary`-shaped build of CPU and memory for the 110 pods. Run with
 * `deno bench --allow-all --v8-flags=--expose-gc src/testing/cadvisor_bench.ts`.
 */

import { buildCgroupFixture, type FixtureCgroup } from "./cgroup_fixtures.ts";
import { Cadvisor, type SampleTarget } from "../stats/cadvisor.ts";
import { type CgroupMode, detectCgroupLayout } from "../cm/cgroup_layout.ts";
import { realClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import { StatsProvider } from "../stats/provider.ts";
import * as api from "../../proto/runtime/v1/api.ts";

const PODS = 110;
const CONTAINERS = 2;
const PASSES = 20;

/** V8's gc(), exposed by `--v8-flags=--expose-gc`. */
const gc = (globalThis as { gc?: () => void }).gc;

interface World {
  readonly cadvisor: Cadvisor;
  readonly provider: StatsProvider;
}

async function world(mode: CgroupMode): Promise<World> {
  const root = await Deno.makeTempDir({ prefix: `cadvisor-bench-${mode}-` });
  const cgroups: FixtureCgroup[] = [];
  const targets: SampleTarget[] = [];
  const statuses: PodStatus[] = [];
  for (let p = 0; p < PODS; p++) {
    const uid = `${p.toString(16).padStart(8, "0")}-0000-4000-8000-000000000000`;
    const ids = [`sb-${p}`, ...Array.from({ length: CONTAINERS }, (_, c) => `c-${p}-${c}`)];
    for (const [i, id] of ids.entries()) {
      cgroups.push({
        path: `/k8s.io/${id}`,
        cpuNs: BigInt(1_000_000 * (p + 1) + i) * 1000n,
        memUsage: (50 + i) * 2 ** 20,
        inactiveFile: 4 * 2 ** 20,
        rss: 30 * 2 ** 20,
        pids: 2,
      });
      targets.push({ id, kind: i === 0 ? "sandbox" : "container", podUid: uid });
    }
    statuses.push({
      id: uid,
      name: `pod-${p}`,
      namespace: "default",
      ips: [],
      timestamp: 0,
      sandboxStatuses: [api.PodSandboxStatus.create({
        id: ids[0],
        state: api.PodSandboxState.SANDBOX_READY,
      })],
      containerStatuses: ids.slice(1).map((id, c) =>
        api.ContainerStatus.create({
          id,
          metadata: { name: `c${c}`, attempt: 0 },
          state: api.ContainerState.CONTAINER_RUNNING,
        })
      ),
    });
  }
  const fixture = await buildCgroupFixture(root, mode, cgroups);
  const logger = createLogger({ write: () => {} });
  const cadvisor = new Cadvisor({
    layout: await detectCgroupLayout({ root }),
    root,
    clock: realClock,
    logger,
    targets: () => targets,
    pidOf: (t) => Promise.resolve(fixture.pids.get(`/k8s.io/${t.id}`)),
  });
  const provider = new StatsProvider({
    nodeName: "bench",
    cadvisor,
    pods: () =>
      statuses.map((status) => ({
        pod: { metadata: { name: status.name, namespace: status.namespace, uid: status.id } },
        status,
      })),
    runtime: { listContainerStats: () => Promise.resolve([]) },
    imageService: { imageFsInfo: () => Promise.resolve(api.ImageFsInfoResponse.create({})) },
    rootDirectory: root,
    podLogsDirectory: root,
    memoryCapacityBytes: 8 * 2 ** 30,
    clock: realClock,
    logger,
  });
  // The first pass finds every cgroup; the ones measured are the steady state.
  await cadvisor.housekeep();
  return { cadvisor, provider };
}

const worlds = new Map<CgroupMode, World>();
for (const mode of ["hybrid", "v2"] as const) {
  const w = await world(mode);
  worlds.set(mode, w);
  const times: number[] = [];
  let allocated = 0;
  for (let i = 0; i < PASSES; i++) {
    gc?.();
    const heap = Deno.memoryUsage().heapUsed;
    const t0 = performance.now();
    await w.cadvisor.housekeep();
    times.push(performance.now() - t0);
    allocated += Math.max(0, Deno.memoryUsage().heapUsed - heap);
  }
  times.sort((a, b) => a - b);
  console.log(
    `cadvisor ${mode}: ${PODS} pods x (sandbox + ${CONTAINERS} containers) = ` +
      `${w.cadvisor.trackedCount} cgroups; pass p50 ${times[PASSES / 2]!.toFixed(1)} ms, ` +
      `max ${times.at(-1)!.toFixed(1)} ms; heap allocated per pass ~${
        (allocated / PASSES / 1024).toFixed(0)
      } KiB${gc ? "" : " (no gc(): run with --v8-flags=--expose-gc for exact figures)"}`,
  );
}

for (const [mode, w] of worlds) {
  Deno.bench(`cadvisor housekeeping pass, ${PODS} pods, ${mode}`, async () => {
    await w.cadvisor.housekeep();
  });
  Deno.bench(`CPU and memory summary of ${PODS} pods, ${mode}`, () => {
    w.provider.cpuAndMemory();
  });
}
