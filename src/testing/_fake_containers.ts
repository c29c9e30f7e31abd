/**
 * @module
 * Containers of the fake CRI runtime: the record kept per container, how a test scripts its
 * life ({@link ContainerBehaviour}), its CRI messages (Container, ContainerStatus as containerd
 * words them) and the ListContainers filter. Private to the `fake_*` modules; upstream's
 * counterpart is the container half of `cri-api/pkg/apis/testing/fake_runtime_service.go`.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import type { FakeImage } from "./_fake_images.ts";
import { type FakeSandbox, labelsMatch, lookup } from "./_fake_sandboxes.ts";

/** Resource usage a running container reports in stats. */
export interface ContainerUsage {
  /** @default 10_000_000 (10m CPU) */
  readonly cpuNanoCores: number;
  /** Working set. @default 16 MiB */
  readonly memoryBytes: number;
  /** Writable layer. @default 4096 */
  readonly diskBytes: number;
}

const DEFAULT_USAGE: ContainerUsage = {
  cpuNanoCores: 10_000_000,
  memoryBytes: 16 * 1024 * 1024,
  diskBytes: 4096,
};

/** How a container behaves, chosen per container by the `onCreate` hook. */
export interface ContainerBehaviour {
  /** Exit right after StartContainer succeeds (a crash loop, or a Job's container). */
  readonly exitAfterStart?: boolean;
  /** Exit code of that exit. @default 0 */
  readonly exitCode?: number;
  /** Reason of that exit, e.g. "OOMKilled"; by default "Completed" or "Error" from the code. */
  readonly reason?: string;
  /** Exits 0 on SIGTERM instead of waiting for SIGKILL (137), as PID 1 without a trap does. */
  readonly handlesSigterm?: boolean;
  /** StartContainer fails with this message; the container is left exited, code 128. */
  readonly startError?: string;
  /** Usage reported in stats while running. */
  readonly usage?: Partial<ContainerUsage>;
}

/** What the fake keeps of one container. */
export interface FakeContainer {
  readonly id: string;
  readonly sandboxId: string;
  /** containerd's reserved name: `<container>_<pod>_<namespace>_<uid>_<attempt>`. */
  readonly name: string;
  readonly config: api.ContainerConfig;
  readonly imageId: string;
  /** Sandbox log directory joined with the config's log path; "" when either is empty. */
  readonly logPath: string;
  readonly createdAt: bigint;
  readonly behaviour: ContainerBehaviour;
  state: api.ContainerState;
  startedAt: bigint;
  finishedAt: bigint;
  exitCode: number;
  /** "" means containerd's default: "Completed" for 0, else "Error". */
  reason: string;
  message: string;
  resources: api.LinuxContainerResources | undefined;
  usage: ContainerUsage;
}

export function newUsage(b: ContainerBehaviour): ContainerUsage {
  return b.usage ? { ...DEFAULT_USAGE, ...b.usage } : DEFAULT_USAGE;
}

/** containerd's composition of the log path. */
export function joinLogPath(dir: string, path: string): string {
  if (dir === "" || path === "") return "";
  return `${dir.replace(/\/+$/, "")}/${path.replace(/^\/+/, "")}`;
}

export function toContainer(c: FakeContainer): api.Container {
  return {
    id: c.id,
    podSandboxId: c.sandboxId,
    metadata: c.config.metadata,
    image: c.config.image,
    imageRef: c.imageId,
    state: c.state,
    createdAt: c.createdAt,
    labels: c.config.labels,
    annotations: c.config.annotations,
    imageId: c.imageId,
  };
}

/** The status as containerd reports it: the image's tag and repo digest when it is still present. */
export function toContainerStatus(
  c: FakeContainer,
  image: FakeImage | undefined,
): api.ContainerStatus {
  const S = api.ContainerState;
  const tag = image?.repoTags[0];
  const uid = c.config.linux?.securityContext?.runAsUser?.value ?? 0n;
  const gid = c.config.linux?.securityContext?.runAsGroup?.value ?? 0n;
  return {
    id: c.id,
    metadata: c.config.metadata,
    state: c.state,
    createdAt: c.createdAt,
    startedAt: c.state === S.CONTAINER_CREATED ? 0n : c.startedAt,
    finishedAt: c.state === S.CONTAINER_EXITED ? c.finishedAt : 0n,
    exitCode: c.exitCode,
    image: tag ? api.ImageSpec.create({ image: tag }) : c.config.image,
    imageRef: image?.repoDigests[0] ?? c.imageId,
    reason: c.state !== S.CONTAINER_EXITED
      ? ""
      : c.reason || (c.exitCode === 0 ? "Completed" : "Error"),
    message: c.message,
    labels: c.config.labels,
    annotations: c.config.annotations,
    mounts: c.config.mounts,
    logPath: c.logPath,
    resources: { linux: c.resources },
    imageId: c.imageId,
    user: { linux: { uid, gid, supplementalGroups: [gid] } },
    stopSignal: c.config.stopSignal || api.Signal.SIGTERM,
  };
}

/**
 * The containers a ListContainers or ListContainerStats filter selects; with a pod in the
 * filter only that pod's containers are visited.
 */
export function selectContainers(
  containers: ReadonlyMap<string, FakeContainer>,
  sandboxes: ReadonlyMap<string, FakeSandbox>,
  f: api.ContainerFilter | api.ContainerStatsFilter | undefined,
): FakeContainer[] {
  let from: Iterable<FakeContainer | undefined> = containers.values();
  if (f?.id) {
    from = [lookup(containers, f.id)];
  } else if (f?.podSandboxId) {
    const sb = lookup(sandboxes, f.podSandboxId);
    from = sb ? [...sb.containers].map((id) => containers.get(id)) : [];
  }
  const state = f && "state" in f ? f.state : undefined;
  const out: FakeContainer[] = [];
  for (const c of from) {
    if (!c || (f?.podSandboxId && !c.sandboxId.startsWith(f.podSandboxId))) continue;
    if (state && state.state !== c.state) continue;
    if (labelsMatch(c.config.labels, f?.labelSelector)) out.push(c);
  }
  return out;
}

/** The statuses of a sandbox's containers, as events and PodSandboxStatus carry them. */
export function containerStatuses(
  sb: FakeSandbox,
  containers: ReadonlyMap<string, FakeContainer>,
  imageOf: (id: string) => FakeImage | undefined,
): api.ContainerStatus[] {
  const out: api.ContainerStatus[] = [];
  for (const id of sb.containers) {
    const c = containers.get(id);
    if (c) out.push(toContainerStatus(c, imageOf(c.imageId)));
  }
  return out;
}
