/**
 * @module
 * Hand-built Summaries and pods for the eviction manager's tests: a node sample in a few
 * numbers, pods with requests, limits, priorities and volumes, and their usage. Times come
 * from the test's FakeClock, rounded to seconds as metav1.Time is. Test support only.
 */

import type { V1Container, V1Pod, V1Volume } from "@kubernetes/client-node";
import type { ContainerStats, FsStats, PodStats, Summary } from "../apis/stats_types.ts";

/** 1 MiB. */
export const Mi = 2 ** 20;
/** 1 GiB. */
export const Gi = 2 ** 30;

/** metav1.Time of a clock reading. */
export function iso(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

/** A filesystem sample: bytes and optionally inodes. */
export interface FsSample {
  readonly available: number;
  readonly capacity: number;
  readonly inodesFree?: number;
  readonly inodes?: number;
}

/** The node-level numbers of a Summary; omitted parts are left out of it. */
export interface NodeSample {
  readonly memory?: { readonly available: number; readonly workingSet: number };
  /** The "pods" system container; without `available` it has no limit. */
  readonly pods?: { readonly available?: number; readonly workingSet: number };
  readonly nodeFs?: FsSample;
  readonly imageFs?: FsSample;
  readonly containerFs?: FsSample;
  readonly pids?: { readonly max: number; readonly current: number };
}

function fs(time: string, s: FsSample | undefined): FsStats | undefined {
  if (!s) return undefined;
  return {
    time,
    availableBytes: s.available,
    capacityBytes: s.capacity,
    usedBytes: s.capacity - s.available,
    ...(s.inodes === undefined ? {} : {
      inodesFree: s.inodesFree,
      inodes: s.inodes,
      inodesUsed: s.inodes - (s.inodesFree ?? 0),
    }),
  };
}

/** A Summary sampled at `ms`. */
export function summaryAt(ms: number, node: NodeSample, pods: readonly PodStats[] = []): Summary {
  const time = iso(ms);
  const imageFs = fs(time, node.imageFs);
  const containerFs = fs(time, node.containerFs) ?? imageFs;
  return {
    node: {
      nodeName: "node-a",
      startTime: iso(0),
      ...(node.memory
        ? {
          memory: {
            time,
            availableBytes: node.memory.available,
            workingSetBytes: node.memory.workingSet,
          },
        }
        : {}),
      ...(node.pods
        ? {
          systemContainers: [{
            name: "pods",
            startTime: iso(0),
            memory: {
              time,
              availableBytes: node.pods.available,
              workingSetBytes: node.pods.workingSet,
            },
          }],
        }
        : {}),
      fs: fs(time, node.nodeFs),
      runtime: imageFs ? { imageFs, containerFs } : undefined,
      rlimit: node.pids ? { time, maxpid: node.pids.max, curproc: node.pids.current } : undefined,
    },
    pods: [...pods],
  };
}

/** A container's usage. */
export interface ContainerUsage {
  readonly name: string;
  readonly memory?: number;
  readonly rootfs?: number;
  readonly logs?: number;
  readonly rootfsInodes?: number;
}

/** A pod's usage; memory defaults to the containers' sum. */
export interface PodUsage {
  readonly containers: readonly ContainerUsage[];
  readonly memory?: number;
  readonly volumes?: Readonly<Record<string, number>>;
  readonly ephemeral?: number;
  readonly processes?: number;
}

/** The pod's entry in a Summary sampled at `ms`. */
export function podStatsOf(pod: V1Pod, usage: PodUsage, ms: number): PodStats {
  const time = iso(ms);
  const containers: ContainerStats[] = usage.containers.map((c) => ({
    name: c.name,
    startTime: iso(0),
    ...(c.memory === undefined ? {} : { memory: { time, workingSetBytes: c.memory } }),
    ...(c.rootfs === undefined
      ? {}
      : { rootfs: { time, usedBytes: c.rootfs, inodesUsed: c.rootfsInodes ?? 0 } }),
    ...(c.logs === undefined ? {} : { logs: { time, usedBytes: c.logs, inodesUsed: 0 } }),
  }));
  const memory = usage.memory ?? usage.containers.reduce((a, c) => a + (c.memory ?? 0), 0);
  return {
    podRef: {
      name: pod.metadata?.name ?? "",
      namespace: pod.metadata?.namespace ?? "",
      uid: pod.metadata?.uid ?? "",
    },
    startTime: iso(0),
    containers,
    memory: { time, workingSetBytes: memory },
    ...(usage.volumes
      ? {
        volume: Object.entries(usage.volumes).map(([name, used]) => ({
          time,
          name,
          usedBytes: used,
        })),
      }
      : {}),
    ...(usage.ephemeral === undefined
      ? {}
      : { "ephemeral-storage": { time, usedBytes: usage.ephemeral } }),
    ...(usage.processes === undefined ? {} : { process_stats: { process_count: usage.processes } }),
  };
}

/** What a test pod asks for. */
export interface PodSpecOptions {
  readonly containers?: readonly V1Container[];
  readonly priority?: number;
  readonly terminationGracePeriodSeconds?: number;
  readonly volumes?: readonly V1Volume[];
  readonly annotations?: Readonly<Record<string, string>>;
  readonly tolerations?: NonNullable<V1Pod["spec"]>["tolerations"];
}

/** A pod named `name` (uid `uid-<name>`) in namespace "default"; one container "main". */
export function testPod(name: string, opts: PodSpecOptions = {}): V1Pod {
  return {
    metadata: {
      name,
      namespace: "default",
      uid: `uid-${name}`,
      ...(opts.annotations ? { annotations: { ...opts.annotations } } : {}),
    },
    spec: {
      containers: [...(opts.containers ?? [{ name: "main", image: "busybox" }])],
      ...(opts.priority === undefined ? {} : { priority: opts.priority }),
      ...(opts.terminationGracePeriodSeconds === undefined
        ? {}
        : { terminationGracePeriodSeconds: opts.terminationGracePeriodSeconds }),
      ...(opts.volumes ? { volumes: [...opts.volumes] } : {}),
      ...(opts.tolerations ? { tolerations: [...opts.tolerations] } : {}),
    },
  };
}

/** A container "main" with the given requests and limits. */
export function container(
  requests: Readonly<Record<string, string>> = {},
  limits: Readonly<Record<string, string>> = {},
  name = "main",
): V1Container {
  return {
    name,
    image: "busybox",
    resources: { requests: { ...requests }, limits: { ...limits } },
  };
}
