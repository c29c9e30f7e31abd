/**
 * @module
 * The raw CRI floor of the benchmark suite (tests/bench_suite.ts): the bench pod's sandbox and
 * container created straight on containerd, with the requests a kubelet sends for that pod.
 * They are built by this agent's own config code (generatePodSandboxConfig,
 * generateContainerConfig, KubeletMounts) from the same pod spec, so the runtime does the work
 * it does under either kubelet: the pod's cgroup as parent, RuntimeDefault seccomp for the
 * sandbox (upstream forces it: kubernetes issue 84623), the host's resolver as DNS, CPU shares
 * and OOM score, the managed /etc/hosts and the termination-log mounts, the service env. A
 * minimal request leaves some of that out: its RunPodSandbox was 16-30 ms quicker here, nearly
 * all of it the sandbox's seccomp profile.
 *
 * Per pod, the clock runs over the runtime's part of a pod start, in the order both kubelets
 * issue it: RunPodSandbox, PodSandboxStatus (the IPs the /etc/hosts file and the env need), the
 * container config (writes the hosts file), CreateContainer, StartContainer. What a kubelet does
 * before that (the pod's cgroup, the sandbox config, its log directory) is done before the
 * clock starts.
 */

import { basename, join } from "node:path";
import type { V1Pod, V1Service } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { detectCgroupLayout } from "../src/cm/cgroup_layout.ts";
import { CgroupManager } from "../src/cm/cgroup_manager.ts";
import { realClock } from "../src/util/clock.ts";
import { loggingRecorder } from "../src/client/record.ts";
import { DnsConfigurer } from "../src/network/dns.ts";
import { createLogger, type Logger } from "../src/klog/klog.ts";
import { KubeletMounts } from "../src/kubelet_mounts.ts";
import {
  type ContainerDeps,
  generateContainerConfig,
} from "../src/kuberuntime/kuberuntime_container.ts";
import { sandboxIPs } from "../src/kuberuntime/kuberuntime_manager.ts";
import {
  generatePodSandboxConfig,
  type SandboxConfigOptions,
} from "../src/kuberuntime/kuberuntime_sandbox.ts";
import type { RemoteImageService } from "../src/cri/remote_image.ts";
import type { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import type { Semaphore } from "../src/util/semaphore.ts";
import { BENCH_CLUSTER_DNS, BENCH_CLUSTER_DOMAIN } from "./_bench_agents.ts";
import { cpuDuring, type StartCpu } from "./_bench_measure.ts";
import { removeCgroupTree, TEST_CGROUP_PARENT } from "./node_harness.ts";

/** What {@link CriFloor} needs. */
export interface CriFloorOptions {
  readonly runtime: RemoteRuntimeService;
  readonly images: RemoteImageService;
  /** Its pods, logs and cgroup (named after its basename); removed by {@link CriFloor.close}. */
  readonly dir: string;
  /**
   * The pod each floor pod is made from, as a kubelet gets it (the API's defaults applied: the
   * bench asks the apiserver with a dry run); one without a uid gets a fresh one.
   */
  readonly pod: (name: string) => V1Pod | Promise<V1Pod>;
  /** The cluster's Services, for the service env both kubelets give the container. */
  readonly services: readonly V1Service[];
}

/** One burst's or one pod's figures. */
export interface FloorStart {
  /** Each pod's time from the start of the burst to its container started, in ms. */
  readonly latency: number[];
  /** Start of the burst → the last container started, in ms. */
  readonly lastMs: number;
  readonly cpu?: StartCpu;
}

/** A floor pod, everything but its CRI calls made. */
export interface FloorPod {
  readonly pod: V1Pod;
  readonly sandbox: api.PodSandboxConfig;
}

const NODE_HOSTNAME = "bench-floor";

/** Starts bench pods straight on the runtime with a kubelet's requests; see the module doc. */
export class CriFloor {
  readonly #o: CriFloorOptions;
  readonly #cgroups: CgroupManager;
  readonly #cgroupRoot: string[];
  readonly #sandboxOpts: SandboxConfigOptions;
  readonly #deps: ContainerDeps;
  readonly #image: api.Image;
  #count = 0;

  private constructor(
    o: CriFloorOptions,
    cgroups: CgroupManager,
    image: api.Image,
    logger: Logger,
  ) {
    this.#o = o;
    this.#cgroups = cgroups;
    this.#image = image;
    this.#cgroupRoot = [TEST_CGROUP_PARENT, basename(o.dir), "kubepods", "besteffort"];
    const cgroupV2 = cgroups.version === 2;
    const podLogsDirectory = join(o.dir, "pod-logs");
    // The bench kubelets' cluster DNS, so the sandboxes get the same DNS config.
    this.#sandboxOpts = {
      dns: new DnsConfigurer({
        clusterDNS: [BENCH_CLUSTER_DNS],
        clusterDomain: BENCH_CLUSTER_DOMAIN,
        resolvConf: "/etc/resolv.conf",
      }),
      podLogsDirectory,
      cgroupParent: (pod) => cgroups.runtimeName(this.#podCgroup(pod)),
      nodeHostname: NODE_HOSTNAME,
      clusterDomain: BENCH_CLUSTER_DOMAIN,
      cgroupV2,
      logger,
    };
    const services = o.services;
    this.#deps = {
      runtime: o.runtime,
      imageService: o.images,
      imageManager: {
        ensureImageExists: () =>
          Promise.reject(new Error("the CRI floor takes the image it was given: no pull")),
      },
      recorder: loggingRecorder(logger),
      logger,
      clock: realClock,
      podsDirectory: join(o.dir, "pods"),
      podLogsDirectory,
      legacyContainerLogsDirectory: join(o.dir, "containers"),
      linux: { memoryCapacityBytes: Deno.systemMemoryInfo().total, cgroupV2 },
      kubeletMounts: new KubeletMounts({
        podsDirectory: join(o.dir, "pods"),
        podVolumes: () => new Map(),
        logger,
      }),
      services: {
        list: (ns) => services.filter((s) => !ns || s.metadata?.namespace === ns),
        hasSynced: () => true,
      },
    };
  }

  /** A floor on `o.runtime` for the image `imageName` (which the runtime must have). */
  static async create(o: CriFloorOptions, imageName: string): Promise<CriFloor> {
    const status = await o.images.imageStatus(api.ImageSpec.create({ image: imageName }));
    if (!status.image) throw new Error(`CRI floor: the runtime has no image ${imageName}`);
    const logger = createLogger({ write: () => {} });
    const cgroups = new CgroupManager({
      layout: await detectCgroupLayout(),
      driver: "cgroupfs",
      logger,
    });
    return new CriFloor(o, cgroups, status.image, logger);
  }

  /** The floor's cgroup below {@link TEST_CGROUP_PARENT}: its directory's basename. */
  get name(): string {
    return this.#cgroupRoot[1]!;
  }

  #podCgroup(pod: V1Pod): string[] {
    return [...this.#cgroupRoot, `pod${pod.metadata?.uid ?? ""}`];
  }

  /** The pod with a uid, its cgroup made, its sandbox config built: a kubelet's part. */
  async prepare(name: string): Promise<FloorPod> {
    const base = await this.#o.pod(name);
    const uid = base.metadata?.uid || crypto.randomUUID();
    const pod: V1Pod = { ...base, metadata: { ...base.metadata, uid } };
    // A BestEffort pod's cgroup, as the kubelet's pod container manager makes it.
    await this.#cgroups.create(this.#podCgroup(pod), { cpuShares: 2n });
    const sandbox = await generatePodSandboxConfig(pod, 0, this.#sandboxOpts);
    await Deno.mkdir(sandbox.logDirectory, { recursive: true });
    return { pod, sandbox };
  }

  /**
   * The runtime's part of the pod's start, its RunPodSandbox through `sandboxStarts` when
   * given; `created` gets the sandbox's id as soon as there is one.
   */
  async start(
    p: FloorPod,
    created: (sandboxId: string) => void,
    sandboxStarts?: Semaphore,
  ): Promise<void> {
    const { runtime } = this.#o;
    const run = () => runtime.runPodSandbox(p.sandbox, "");
    const id = sandboxStarts ? await sandboxStarts.run(run) : await run();
    created(id);
    const { status } = await runtime.podSandboxStatus(id);
    const podIPs = status ? sandboxIPs(status) : [];
    const container = p.pod.spec!.containers[0]!;
    const config = await generateContainerConfig(this.#deps, {
      pod: p.pod,
      container,
      restartCount: 0,
      imageRef: this.#image.id,
      image: this.#image,
      podIPs,
    });
    const containerId = await runtime.createContainer(id, config, p.sandbox);
    await runtime.startContainer(containerId);
  }

  /**
   * `count` pods started at once (each through `sandboxStarts` when given), timed from the
   * first; with `containerdPid`, the CPU spent meanwhile. Their sandboxes go afterwards.
   */
  async burst(
    count: number,
    opts: { sandboxStarts?: Semaphore; containerdPid?: number } = {},
  ): Promise<FloorStart> {
    const pods: FloorPod[] = [];
    for (let i = 0; i < count; i++) pods.push(await this.prepare(`floor-${this.#count++}`));
    const ids: string[] = [];
    const t0 = performance.now();
    try {
      const starts = () =>
        Promise.all(pods.map(async (p) => {
          await this.start(p, (id) => ids.push(id), opts.sandboxStarts);
          return performance.now() - t0;
        }));
      if (opts.containerdPid === undefined) {
        return { latency: await starts(), lastMs: performance.now() - t0 };
      }
      const { result: latency, cpu } = await cpuDuring({ containerd: opts.containerdPid }, starts);
      return { latency, lastMs: performance.now() - t0, cpu };
    } finally {
      for (const id of ids) {
        await this.#o.runtime.stopPodSandbox(id).catch(() => {});
        await this.#o.runtime.removePodSandbox(id).catch(() => {});
      }
      // A cgroup still busy is left; close() sweeps the floor's tree, the next run's sweep the rest.
      for (const p of pods) await this.#cgroups.destroy(this.#podCgroup(p.pod)).catch(() => {});
    }
  }

  /** Removes the floor's cgroups (its pods' went with each burst). */
  async close(): Promise<void> {
    await removeCgroupTree(join(TEST_CGROUP_PARENT, this.name));
  }
}
