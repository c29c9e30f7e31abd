/**
 * @module
 * Stats of the fake CRI runtime: ContainerStats, ListContainerStats, PodSandboxStats and
 * ListPodSandboxStats, synthesised from each container's `ContainerUsage` so that values
 * are consistent — CPU time accrues while a container runs, a pod's usage is the sum of its
 * running containers'. Private to the `fake_*` modules; upstream's counterpart is the stats part
 * of `cri-api/pkg/apis/testing/fake_runtime_service.go`, shaped as containerd reports stats.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import { type FakeContainer, selectContainers } from "./_fake_containers.ts";
import { notFound } from "./_fake_errors.ts";
import { MOUNTPOINT } from "./_fake_images.ts";
import { type FakeSandbox, labelsMatch, lookup } from "./_fake_sandboxes.ts";

/** The runtime state stats are read from. */
export interface StatsSource {
  readonly sandboxes: ReadonlyMap<string, FakeSandbox>;
  readonly containers: ReadonlyMap<string, FakeContainer>;
  /** Nanoseconds since the epoch. */
  now(): bigint;
}

const RUNNING = api.ContainerState.CONTAINER_RUNNING;

/** The stats RPCs of the RuntimeService. */
export class FakeStatsService {
  readonly #src: StatsSource;

  constructor(src: StatsSource) {
    this.#src = src;
  }

  containerStats(req: api.ContainerStatsRequest): api.ContainerStatsResponse {
    const c = lookup(this.#src.containers, req.containerId);
    if (!c) throw notFound("failed to find container");
    return { stats: containerStats(c, this.#src.now()) };
  }

  /** Stats of the running containers only, as containerd (no task, no metrics). */
  listContainerStats(req: api.ListContainerStatsRequest): api.ListContainerStatsResponse {
    const now = this.#src.now();
    const selected = selectContainers(this.#src.containers, this.#src.sandboxes, req.filter);
    return {
      stats: selected.filter((c) => c.state === RUNNING).map((c) => containerStats(c, now)),
    };
  }

  podSandboxStats(req: api.PodSandboxStatsRequest): api.PodSandboxStatsResponse {
    const sb = lookup(this.#src.sandboxes, req.podSandboxId);
    if (!sb) throw notFound(`failed to find sandbox "${req.podSandboxId}"`);
    return { stats: this.#podStats(sb, this.#src.now()) };
  }

  /** Stats of the ready sandboxes matching the filter. */
  listPodSandboxStats(req: api.ListPodSandboxStatsRequest): api.ListPodSandboxStatsResponse {
    const f = req.filter;
    const now = this.#src.now();
    const from = f?.id ? [lookup(this.#src.sandboxes, f.id)] : this.#src.sandboxes.values();
    const stats: api.PodSandboxStats[] = [];
    for (const sb of from) {
      const ready = sb?.state === api.PodSandboxState.SANDBOX_READY;
      if (ready && labelsMatch(sb.config.labels, f?.labelSelector)) {
        stats.push(this.#podStats(sb, now));
      }
    }
    return { stats };
  }

  #podStats(sb: FakeSandbox, now: bigint): api.PodSandboxStats {
    const running: FakeContainer[] = [];
    for (const id of sb.containers) {
      const c = this.#src.containers.get(id);
      if (c?.state === RUNNING) running.push(c);
    }
    return sandboxStats(sb, running, now);
  }
}

const u64 = (v: bigint | number): api.UInt64Value => ({ value: BigInt(v) });

/** CPU seconds accrue at `cpuNanoCores` while running, so successive samples stay monotonic. */
function containerStats(c: FakeContainer, now: bigint): api.ContainerStats {
  const running = c.state === api.ContainerState.CONTAINER_RUNNING;
  const end = running ? now : c.finishedAt;
  const ran = c.startedAt > 0n && end > c.startedAt ? end - c.startedAt : 0n;
  const cores = BigInt(c.usage.cpuNanoCores);
  const ws = running ? BigInt(c.usage.memoryBytes) : 0n;
  const limit = c.resources?.memoryLimitInBytes ?? 0n;
  return {
    attributes: {
      id: c.id,
      metadata: c.config.metadata,
      labels: c.config.labels,
      annotations: c.config.annotations,
    },
    cpu: {
      timestamp: now,
      usageCoreNanoSeconds: u64((cores * ran) / 1_000_000_000n),
      usageNanoCores: u64(running ? cores : 0n),
    },
    memory: {
      timestamp: now,
      workingSetBytes: u64(ws),
      availableBytes: limit > ws ? u64(limit - ws) : undefined,
      usageBytes: u64(ws + (running ? 1_048_576n : 0n)),
      rssBytes: u64((ws * 3n) / 4n),
      pageFaults: u64(running ? 1000 : 0),
      majorPageFaults: u64(0),
    },
    writableLayer: {
      timestamp: now,
      fsId: { mountpoint: MOUNTPOINT },
      usedBytes: u64(c.usage.diskBytes),
      inodesUsed: u64(16),
    },
  };
}

/** Pod stats: the sum of its containers', plus network counters for pods with their own IP. */
function sandboxStats(
  sb: FakeSandbox,
  containers: readonly FakeContainer[],
  now: bigint,
): api.PodSandboxStats {
  const stats = containers.map((c) => containerStats(c, now));
  const sum = (f: (s: api.ContainerStats) => api.UInt64Value | undefined) =>
    u64(stats.reduce((n, s) => n + (f(s)?.value ?? 0n), 0n));
  const running = containers.filter((c) => c.state === api.ContainerState.CONTAINER_RUNNING);
  const age = now > sb.createdAt ? (now - sb.createdAt) / 1_000_000n : 0n; // ms
  return {
    attributes: {
      id: sb.id,
      metadata: sb.config.metadata,
      labels: sb.config.labels,
      annotations: sb.config.annotations,
    },
    linux: {
      cpu: {
        timestamp: now,
        usageCoreNanoSeconds: sum((s) => s.cpu?.usageCoreNanoSeconds),
        usageNanoCores: sum((s) => s.cpu?.usageNanoCores),
      },
      memory: {
        timestamp: now,
        workingSetBytes: sum((s) => s.memory?.workingSetBytes),
        usageBytes: sum((s) => s.memory?.usageBytes),
        rssBytes: sum((s) => s.memory?.rssBytes),
        pageFaults: sum((s) => s.memory?.pageFaults),
        majorPageFaults: u64(0),
      },
      network: sb.ip === "" ? undefined : {
        timestamp: now,
        defaultInterface: {
          name: "eth0",
          rxBytes: u64(age * 10n),
          rxErrors: u64(0),
          txBytes: u64(age * 5n),
          txErrors: u64(0),
        },
        interfaces: [],
      },
      process: { timestamp: now, processCount: u64(running.length) },
      containers: stats,
    },
  };
}
