/**
 * @module
 * The Kubelet: created and initialised from the KubeletServer and its Dependencies, then run
 * until its signal aborts. Corresponds to upstream's `pkg/kubelet/kubelet.go` (NewMainKubelet,
 * setupDataDirs, Run, RunOnce). It owns the data directories, the healthz endpoint and the
 * runtime's health (updateRuntimeUp), and starts the rest in order: node registration, status
 * and lease; the container manager, the pod sources and the pod lifecycle (built in one place,
 * `kubelet_pod_lifecycle.ts` newPodLifecycle: pod manager, workers, PLEG, sync loop, status,
 * probes, volumes); statistics, image and container GC, log rotation, eviction and graceful node
 * shutdown; and the 10250 API. A part that cannot start either stops the kubelet (as upstream's
 * would) or is logged and left out, each as its method says.
 */

import { join } from "node:path";
import type { Dependencies } from "./dependencies.ts";
import { serveHealthz } from "./server/healthz.ts";
import type { KubeletServer } from "./apis/flags.ts";
import type { V1Node, V1Pod, V1PodStatus, V1Taint } from "@kubernetes/client-node";
import { NodeStatusManager } from "./kubelet_node_status.ts";
import { newKubeletServerCertificateManager } from "./certificate/kubelet.ts";
import { filesystemCapacity, readMachineInfo } from "./stats/machine_info.ts";
import { NodeLeaseController } from "./nodestatus/node_lease.ts";
import { NodeInformer } from "./client/node_informer.ts";
import { KUBELET_VERSION } from "./util/version.ts";
import { GrpcCode, isCriCode } from "./cri/connection.ts";
import { RuntimeState } from "./runtime_state.ts";
import { type PodCIDRRuntime, PodCIDRUpdater } from "./kubelet_network.ts";
import { waitForRuntime } from "./cri/runtime_service.ts";
import { kobj, setLogV } from "./klog/klog.ts";
import { formatDuration } from "./util/duration.ts";
import { hostIsCgroup2UnifiedMode } from "./cm/cgroup_mode.ts";
import { serveKubeletAPI } from "./server/server.ts";
import { buildAuth } from "./server/auth.ts";
import { logRoutes } from "./server/logs.ts";
import { podRoutes } from "./server/pods.ts";
import { streamingRoutes } from "./server/streaming.ts";
import { type KubeletStats, newKubeletStats, statsUnavailableRoutes } from "./kubelet_stats.ts";
import { ImageCache } from "./images/image_cache.ts";
import { ImageGCManager } from "./images/image_gc_manager.ts";
import { ContainerGC } from "./kuberuntime/container_gc.ts";
import { ContainerLogManager } from "./logs/container_log_manager.ts";
import { evictionConfigFrom, EvictionManager } from "./eviction/eviction_manager.ts";
import { parseQuantity } from "./util/quantity.ts";
import { hugePageResourceName } from "./nodestatus/node_status.ts";
import { type CgroupLayout, detectCgroupLayout } from "./cm/cgroup_layout.ts";
import { type ContainerManager, newContainerManager } from "./cm/container_manager.ts";
import { readRlimit } from "./stats/process_stats.ts";
import { loadOrGenerateServingCert, tlsSettings } from "./server/tls.ts";
import * as api from "../proto/runtime/v1/api.ts";
import type { MachineInfo } from "./stats/machine_info.ts";
import { initialNode, nodeDeclaredFeatures, nodeStatus } from "./nodestatus/node_status.ts";
import type { PodCache } from "./container/pod_cache.ts";
import type { PodLifecycleEventGenerator } from "./pleg/generic.ts";
import type { PodManager } from "./pod/pod_manager.ts";
import type { PodSyncer } from "./kubelet_pod_sync.ts";
import { newPodLifecycle, type PodLifecycle } from "./kubelet_pod_lifecycle.ts";
import { DEFAULT_SANDBOX_STARTS_PER_CPU } from "./kuberuntime/kuberuntime_manager.ts";
import type { ProberManager } from "./prober/prober_manager.ts";
import { API_SOURCE, FILE_SOURCE, HTTP_SOURCE, PodConfig } from "./config/pod_config.ts";
import type { SyncLoop } from "./kubelet_sync_loop.ts";
import { StaticPodFileSource } from "./config/file.ts";
import { StaticPodURLSource } from "./config/http.ts";
import { newSourceApiserver } from "./config/apiserver.ts";
import { type KubeletMetrics, newKubeletMetrics } from "./metrics/metrics.ts";
import { nodeRef } from "./client/record.ts";
import { checkpointRoutes } from "./server/checkpoint.ts";
import { safeSysctlAllowlist, SysctlAllowlist } from "./sysctl/allowlist.ts";
import { NodeStartupLatencyTracker, readBootTime } from "./util/node_startup_latency_tracker.ts";
import {
  instrumentImageService,
  instrumentRuntimeService,
} from "./kuberuntime/instrumented_services.ts";
import type { InFlight } from "./util/in_flight.ts";
import { awaitStopped, type Running, running, within } from "./util/stopping.ts";
import type { PodStartupLatencyTracker } from "./pod_startup_latency_tracker.ts";
import {
  LOCAL_STORAGE_STATE_FILE,
  NodeShutdownManager,
  shutdownGroups,
} from "./nodeshutdown/nodeshutdown_manager.ts";
import { statPath } from "./privilege/launcher_calls.ts";
import { containerRuntimeVersion } from "./kuberuntime/runtime_version.ts";
import { loadCredentialProviderPlugins } from "./credentialprovider/plugins.ts";
import { handlerSupportsUserNamespaces, UsernsManager } from "./userns/userns_manager.ts";
import { warnFlexVolumeDrivers } from "./volume/flex_volume.ts";
import { initNetworkUtil } from "./kubelet_network_linux.ts";
import { PluginManager, pluginsRegistrationDir } from "./pluginmanager/plugin_manager.ts";
import { CSI_PLUGIN, DEVICE_PLUGIN, DRA_PLUGIN } from "./pluginmanager/plugin_handler.ts";
import { deviceCheckpointMissing, DeviceManager } from "./devicemanager/manager.ts";
import {
  applyReservedSystemCPUs,
  ResourceManagers,
  runtimeContainers,
} from "./cm/resource_managers.ts";
import { newExclusiveCpus } from "./cm/exclusive_cpus.ts";
import { discoverCPUTopology } from "./cpumanager/topology.ts";
import { readMachineTopology } from "./cpumanager/machine_topology.ts";
import {
  dynamicResources,
  POD_RESOURCES_DIR,
  POD_RESOURCES_SOCKET,
  PodResourcesServer,
} from "./podresources/server.ts";
import { CsiDrivers, CsiRegistrationHandler, initializeCSINode } from "./csi/csi_plugin.ts";
import type { VolumeManager } from "./volume/volume_manager.ts";
import { NodeInfoManager } from "./csi/nodeinfo_manager.ts";
import {
  ACTUATED_PODS_STATE_FILE,
  ALLOCATED_PODS_STATE_FILE,
  ResourceState,
} from "./allocation/state_checkpoint.ts";

/** How often updateRuntimeUp asks the runtime for its Status (upstream: 5 s). */
export const RUNTIME_UP_PERIOD_MS = 5_000;

/** Where the kubelet links every container log, for log shippers (upstream ContainerLogsDir). */
export const CONTAINER_LOGS_DIR = "/var/log/containers";

/** What the read-only port serves (upstream InstallDefaultHandlers). */
const READ_ONLY_PATTERN = /^\/(healthz|pods|stats|metrics|spec)(\/|$)/;

/**
 * The node admission sees (upstream getNodeAnyWay): the listed Node once it carries its status;
 * until then (just registered, not listed yet, or standalone) the node as the kubelet computes
 * it, since an empty allocatable would reject every pod with OutOfpods.
 */
export function nodeForAdmission(
  listed: V1Node | undefined,
  computed: () => V1Node | undefined,
): V1Node | undefined {
  return listed?.status?.allocatable ? listed : computed();
}

/** Upstream runOnceManifestDelay, runOnceMaxRetries and runOnceRetryDelay. */
const RUN_ONCE_MANIFEST_DELAY_MS = 1_000;
const RUN_ONCE_MAX_RETRIES = 10;
const RUN_ONCE_RETRY_DELAY_MS = 1_000;

/** Upstream cm.CgroupV1DeprecatedWarning, the CgroupV1 event's message. */
const CGROUP_V1_DEPRECATED_WARNING = "cgroup v1 detected. cgroup v1 support is deprecated and " +
  "will be removed in a future release. Please migrate to cgroup v2. More information at " +
  "https://git.k8s.io/enhancements/keps/sig-node/5573-remove-cgroup-v1";

/** A requested mode or feature that this build does not implement yet. */
export class NotSupportedError extends Error {
  override name = "NotSupportedError";
}

/** What the Kubelet is built from (upstream NewMainKubelet's parameters, as one object). */
export interface KubeletOptions {
  readonly server: KubeletServer;
  readonly deps: Dependencies;
  readonly nodeName: string;
  readonly hostname: string;
  readonly nodeIPs: readonly string[];
  /** Counts the CRI calls that start pods while in flight (for the event writer to yield to). */
  readonly startCalls?: InFlight;
}

/** The node agent. */
export class Kubelet {
  readonly #opts: KubeletOptions;
  /** The runtime's health as updateRuntimeUp last saw it. */
  readonly runtimeState: RuntimeState;
  /** Gives the runtime the pod CIDR (upstream updatePodCIDR), once the runtime manager exists. */
  readonly #podCIDR: PodCIDRUpdater;
  #podCIDRRuntime: PodCIDRRuntime | undefined;
  /** Node registration and status, in API server mode. */
  nodeStatus: NodeStatusManager | undefined;
  /** The latest copy of this node's Node object (list+watch), in API server mode. */
  nodeInformer: NodeInformer | undefined;
  /** The pod lifecycle, once started. */
  podSyncer: PodSyncer | undefined;
  syncLoop: SyncLoop | undefined;
  pleg: PodLifecycleEventGenerator | undefined;
  #runtimeVersion = "";
  /** The runtime handlers of the last CRI Status, for their user namespace support. */
  #runtimeHandlers: readonly api.RuntimeHandler[] = [];
  #machine: MachineInfo | undefined;
  #firstUpdate: PromiseWithResolvers<V1Pod[]> | undefined;
  #podManager: PodManager | undefined;
  #podCache: PodCache | undefined;
  #startupTracker: PodStartupLatencyTracker | undefined;
  #prober: ProberManager | undefined;
  #volumeManager: VolumeManager | undefined;
  /** The eviction manager (loop mode): node pressure, evictions, admission under pressure. */
  evictionManager: EvictionManager | undefined;
  /** Graceful node shutdown; undefined when no shutdown grace period is configured. */
  shutdownManager: NodeShutdownManager | undefined;
  /** Image garbage collection (loop mode). */
  imageGC: ImageGCManager | undefined;
  /** Container garbage collection (loop mode). */
  containerGC: ContainerGC | undefined;
  /** Container log rotation (loop mode). */
  containerLogManager: ContainerLogManager | undefined;
  /** Plugin registration through `<root-dir>/plugins_registry`; runs in loop mode. */
  readonly pluginManager: PluginManager;
  /** The CSI drivers registered through the plugin manager. */
  readonly csiDrivers = new CsiDrivers();
  /** The node's capacity (cpu, memory, hugepages, and pid with cgroups per QoS), read at start. */
  #capacity: Record<string, string> | undefined;
  /** The topology, CPU and device managers, once the pod lifecycle is built. */
  resourceManagers: ResourceManagers | undefined;
  /** What the resource managers read of the pod lifecycle, once it is built. */
  #lifecycleHooks:
    | {
      activePods(): V1Pod[];
      sourcesReady(): boolean;
      podStatus(uid: string): V1PodStatus | undefined;
      onHealthChange(uids: readonly string[]): void;
    }
    | undefined;
  /** The statistics graph, or why it could not be built (cgroups unreadable). */
  #stats: KubeletStats | Error | undefined;
  #standaloneNode: V1Node | undefined;

  /** The kubelet's own metrics, served on /metrics. */
  readonly metrics: KubeletMetrics;
  readonly #nodeStartupTracker: NodeStartupLatencyTracker;

  constructor(opts: KubeletOptions) {
    const { deps } = opts;
    const metrics = deps.metrics ?? newKubeletMetrics(deps.logger);
    this.metrics = metrics;
    metrics.setNodeName(opts.nodeName);
    this.#nodeStartupTracker = new NodeStartupLatencyTracker({
      clock: deps.clock,
      metrics,
      bootTimeMs: readBootTime(deps.clock.now()),
    });
    // Every CRI call is counted, as upstream's instrumented services do.
    this.#opts = {
      ...opts,
      deps: {
        ...deps,
        metrics,
        runtimeService: deps.runtimeService &&
          instrumentRuntimeService(deps.runtimeService, metrics, deps.clock, opts.startCalls),
        imageService: deps.imageService &&
          instrumentImageService(deps.imageService, metrics, deps.clock),
      },
    };
    this.runtimeState = new RuntimeState(opts.deps.clock);
    this.#podCIDR = new PodCIDRUpdater({
      state: this.runtimeState,
      runtime: () => this.#podCIDRRuntime,
      logger: deps.logger,
    });
    this.pluginManager = new PluginManager({
      sockDir: pluginsRegistrationDir(opts.server.flags.rootDirectory),
      logger: deps.logger,
      clock: deps.clock,
      metrics: metrics.pluginManager,
      mkdirAll: (path, mode) => deps.os.mkdirAll(path, mode),
    });
  }

  /** The directories upstream's setupDataDirs creates under the root directory. */
  dataDirs(): string[] {
    const root = this.#opts.server.flags.rootDirectory;
    return [
      root,
      join(root, "pods"),
      join(root, "plugins"),
      join(root, "plugins_registry"),
      join(root, "pod-resources"),
      join(root, "checkpoints"),
    ];
  }

  /**
   * Creates the log directories when missing (0755, as upstream's initializeModules does for
   * /var/log/containers): the legacy container log links and the pod log root.
   */
  async setupLogDirs(): Promise<void> {
    for (const dir of [CONTAINER_LOGS_DIR, this.#opts.server.config.podLogsDir]) {
      try {
        await this.#opts.deps.os.mkdirAll(dir, 0o755);
      } catch (e) {
        throw new Error(
          `failed to create directory ${dir}: ${e instanceof Error ? e.message : String(e)}`,
          { cause: e },
        );
      }
    }
  }

  /** Creates the data directories (0750, as upstream). */
  async setupDataDirs(): Promise<void> {
    for (const dir of this.dataDirs()) {
      try {
        await this.#opts.deps.os.mkdirAll(dir, 0o750);
      } catch (e) {
        throw new Error(
          `error creating directory ${dir}: ${e instanceof Error ? e.message : String(e)}`,
          { cause: e },
        );
      }
    }
  }

  /** Runs until `signal` aborts; resolves once everything it started has stopped. */
  async run(signal: AbortSignal): Promise<void> {
    const { server, deps } = this.#opts;
    const { config } = server;
    const log = deps.logger;
    const stopped: Running[] = [];
    if (config.healthzPort > 0) {
      const healthz = await serveHealthz({
        hostname: config.healthzBindAddress,
        port: config.healthzPort,
        logger: log,
        signal,
        checks: { syncloop: () => this.syncLoop?.healthCheck() },
      });
      log.info("Started healthz server", {
        address: `${config.healthzBindAddress}:${config.healthzPort}`,
      });
      stopped.push(running("healthz server", healthz.finished));
    }
    const runtime = deps.runtimeService;
    if (!runtime) throw new Error("the kubelet needs a runtime service (preInitRuntimeService)");
    // Upstream's run makes the container manager (and its resource managers) before it waits
    // for the runtime: their configuration errors stop the kubelet at once.
    await this.#prepareResourceManagers(signal);
    // Upstream BirthCry, as startKubelet calls it before Run.
    deps.recorder.event(
      nodeRef(this.#opts.nodeName),
      "Normal",
      "Starting",
      "Starting kubelet.",
    );
    if (deps.kubeClient && deps.heartbeatClient) {
      stopped.push(...within("node", this.#startNodeHeartbeats(signal)));
    }
    let version;
    try {
      version = await waitForRuntime({
        runtime,
        endpoint: config.containerRuntimeEndpoint,
        logger: log,
        clock: deps.clock,
        signal,
      });
    } catch (e) {
      if (signal.aborted) {
        await awaitStopped(stopped, deps);
        return;
      }
      throw e;
    }
    this.#runtimeVersion = containerRuntimeVersion(version);
    log.info("Container runtime initialized", {
      containerRuntime: version.runtimeName,
      version: version.runtimeVersion,
      apiVersion: version.runtimeApiVersion,
    });
    await this.setupLogDirs();
    // Upstream Run makes the iptables util chains before the pod lifecycle starts.
    if (config.makeIPTablesUtilChains) {
      const util = await initNetworkUtil({ logger: log, clock: deps.clock, signal });
      stopped.push(running("iptables util chains", util.done));
    }
    stopped.push(...within("pod lifecycle", await this.#startPodLifecycle(signal)));
    // One relist before the first runtime status, so the PLEG's health check does not hold
    // the node NotReady until the next status period.
    await this.pleg!.relist(signal);
    stopped.push(running("runtime status", this.#updateRuntimeUpLoop(signal)));
    if (config.enableServer) {
      stopped.push(running("kubelet server", (await this.#startServer(signal)).finished));
    }
    log.info("Started kubelet", {
      nodeName: this.#opts.nodeName,
      mode: deps.kubeClient ? "apiserver" : "standalone",
    });
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    log.info("Shutting down kubelet");
    await awaitStopped(stopped, deps);
  }

  /**
   * Builds the pod lifecycle (upstream NewMainKubelet's managers and makePodSourceConfig) and
   * starts it: the pod sources, the PLEG, the status manager and the sync loop.
   */
  async #startPodLifecycle(
    signal: AbortSignal,
    mode: "loop" | "once" = "loop",
  ): Promise<Running[]> {
    const { server, deps, nodeName, hostname, nodeIPs } = this.#opts;
    const { config, flags } = server;
    const { clock, logger, recorder } = deps;
    const runtime = deps.runtimeService!;
    const imageService = deps.imageService;
    if (!imageService) {
      throw new Error("the kubelet needs an image service (preInitRuntimeService)");
    }
    // Read with the resource managers, before the runtime was awaited.
    const machine = this.#machine!;

    // The cgroup layout, read once for the container manager and the statistics.
    let layout: CgroupLayout | Error;
    try {
      layout = await detectCgroupLayout();
    } catch (e) {
      layout = e instanceof Error ? e : new Error(String(e));
    }
    // Pods admitted and not terminal (upstream GetActivePods), once the lifecycle exists.
    const built: { lifecycle?: PodLifecycle } = {};
    const activePods = (): V1Pod[] => {
      if (!built.lifecycle) return [];
      const { podManager, statusManager, syncer } = built.lifecycle;
      const { allocation } = built.lifecycle;
      return podManager.getPods().filter((p) => {
        const uid = p.metadata?.uid ?? "";
        const phase = statusManager.getPodPhase(uid) ?? p.status?.phase;
        return phase !== "Failed" && phase !== "Succeeded" &&
          !syncer.workers.isPodKnownTerminated(uid);
      }).map((p) => allocation.updatePodFromAllocation(p).pod);
    };
    let containerManager: ContainerManager | undefined;
    const capacity = this.#capacity!;
    // DisableCPUQuotaWithExclusiveCPUs: pods and containers on exclusive CPUs get no CFS quota
    // (the CPU manager is made below, after the container manager).
    const exclusiveCpus = newExclusiveCpus({
      exclusiveCpus: (uid, name) => this.resourceManagers?.cpu.exclusiveCpus(uid, name) ?? [],
      featureGates: config.featureGates,
    });
    if (config.cgroupsPerQOS ?? true) {
      // Upstream's NewContainerManager and Start: a bad cgroup setup stops the kubelet.
      if (layout instanceof Error) throw layout;
      const rlimit = await readRlimit();
      if (rlimit.maxPid !== undefined) capacity.pid = String(rlimit.maxPid);
      containerManager = await newContainerManager({
        config,
        layout,
        runtime,
        capacity,
        activePods,
        nodeName,
        recorder,
        clock,
        logger,
        signal,
        metrics: this.metrics,
        exclusiveCpus,
      });
    }

    // Upstream cgroupVersionCheck (kubelet_linux.go), as Run's initializeModules runs it
    // (RunOnce does not).
    const cgroupV2 = await hostIsCgroup2UnifiedMode();
    this.metrics.cgroupVersion.set(cgroupV2 ? 2 : 1);
    if (!cgroupV2 && mode === "loop") {
      recorder.event(
        nodeRef(nodeName),
        "Warning",
        "CgroupV1",
        CGROUP_V1_DEPRECATED_WARNING,
      );
      logger.v(2).info("Warning: cgroup check", { error: CGROUP_V1_DEPRECATED_WARNING });
    }
    // Upstream's volume plugin manager probes volumePluginDir's FlexVolume drivers here.
    await warnFlexVolumeDrivers({ volumePluginDir: config.volumePluginDir, logger });

    const sources: string[] = [];
    const podConfig = new PodConfig({
      now: () => clock.now(),
      logger,
      onPodObserved: (pod, when) => built.lifecycle?.startupTracker.observedPodOnWatch(pod, when),
    });
    // The pods' allocated and actuated resources survive restarts; a corrupt file stops the
    // kubelet, as upstream's.
    const [allocatedState, actuatedState] = await Promise.all(
      [ALLOCATED_PODS_STATE_FILE, ACTUATED_PODS_STATE_FILE].map((name) =>
        ResourceState.open({ directory: flags.rootDirectory, name })
      ),
    );
    // Upstream registers the credential provider plugins once the runtime answered; a broken
    // configuration stops the kubelet.
    let credentialProviderPlugins;
    if (
      flags.imageCredentialProviderConfigFile !== "" || flags.imageCredentialProviderBinDir !== ""
    ) {
      try {
        credentialProviderPlugins = await loadCredentialProviderPlugins({
          configPath: flags.imageCredentialProviderConfigFile,
          binDir: flags.imageCredentialProviderBinDir,
          serviceAccountTokenGate:
            config.featureGates?.KubeletServiceAccountTokenForCredentialProviders ?? true,
        });
      } catch (e) {
        logger.error(e, "Failed to register CRI auth plugins");
        throw e;
      }
    }
    // Safe sysctls (as far as this kernel namespaces them) and the allowed unsafe ones; a bad
    // pattern stops the kubelet (upstream NewMainKubelet's sysctl.NewAllowlist).
    const sysctls = new SysctlAllowlist([
      ...safeSysctlAllowlist(
        machine.kernelVersion || undefined,
        (sysctl) =>
          logger.info("kernel version is too old, dropping the sysctl from safe sysctl list", {
            kernelVersion: machine.kernelVersion,
            sysctl,
          }),
      ),
      ...(config.allowedUnsafeSysctls ?? []),
    ]);
    // upstream MakeUserNsManager: an unusable ID range or pod mapping file stops the kubelet.
    let userNamespaces;
    try {
      userNamespaces = await UsernsManager.open({
        podsDirectory: join(flags.rootDirectory, "pods"),
        idsPerPod: config.userNamespaces?.idsPerPod,
        maxPods: config.maxPods,
        handlerSupportsUserNamespaces: (h) =>
          handlerSupportsUserNamespaces(this.#runtimeHandlers, h),
        logger,
      });
    } catch (e) {
      throw new Error(`create user namespace manager: ${(e as Error).message}`, { cause: e });
    }
    // The resource managers (made at start) read the lifecycle through these. Upstream's
    // sourcesReady marks a source seen after its update is handled.
    this.#lifecycleHooks = {
      activePods,
      sourcesReady: () =>
        podConfig.seenAllSources(sources) &&
        (built.lifecycle?.loop.handledAllSources(sources) ?? false),
      podStatus: (uid) => built.lifecycle?.statusManager.getPodStatus(uid),
      onHealthChange: (uids) => built.lifecycle?.loop.pushResourceHealthUpdate(uids),
    };
    const managers = this.resourceManagers!;
    const devices = managers.devices;
    const pods = newPodLifecycle({
      exclusiveCpus,
      devices,
      resourceAllocator: managers,
      internalLifecycle: managers.internalLifecycle,
      userNamespaces,
      runtimeHandlers: () => this.#runtimeHandlers,
      credentialProviderPlugins,
      allocatedState,
      actuatedState,
      config,
      runtime,
      imageService,
      clock,
      logger,
      recorder,
      kubeClient: deps.kubeClient,
      csiDrivers: this.csiDrivers,
      nodeName,
      hostname,
      nodeIPs,
      rootDirectory: flags.rootDirectory,
      containersToKeep: flags.maxPerPodContainerCount,
      memoryCapacityBytes: machine.memoryCapacity,
      cgroupV2,
      getNode: () => this.getNode(),
      runtimeErrors: () => this.runtimeState.runtimeErrors(),
      networkErrors: () => this.runtimeState.networkErrors(),
      sourcesReady: () => podConfig.seenAllSources(sources),
      signal,
      // Upstream's admit handlers after the predicates: the eviction manager's pressure check.
      // and the node shutdown manager's.
      admitHandlers: [
        (pod) => this.evictionManager?.admit(pod) ?? { admit: true },
        (pod) => sysctls.admit(pod),
        (pod) => this.shutdownManager?.admit(pod) ?? { admit: true },
      ],
      podCgroups: containerManager?.podCgroups,
      metrics: this.metrics,
      maxParallelSandboxStarts: flags.maxParallelSandboxStarts ??
        DEFAULT_SANDBOX_STARTS_PER_CPU * Math.max(1, machine.numCores),
      // Upstream ORs the deprecated flag with the field (cmd/kubelet/app/server.go).
      seccompDefault: config.seccompDefault === true || flags.seccompDefault,
    });
    built.lifecycle = pods;
    // Upstream NewMainKubelet gives the runtime the configured pod CIDR once its manager exists.
    this.#podCIDRRuntime = pods.runtimeManager;
    await this.#podCIDR.update(config.podCIDR ?? "", signal).catch((e) => {
      if (!signal.aborted) logger.error(e, "Pod CIDR update failed");
    });
    const { pleg, syncer, loop, podManager, podCache } = pods;
    this.#prober = pods.prober;
    this.#volumeManager = pods.volumeManager;
    // Pull records that cannot be opened stop the kubelet, as upstream.
    await pods.imageManager.start(signal);
    this.pleg = pleg;
    this.runtimeState.addHealthCheck("PLEG", () => {
      const h = pleg.healthy();
      return h.ok ? undefined : h.message;
    });
    this.podSyncer = syncer;
    this.syncLoop = loop;
    const merge = (source: string) => (pods: V1Pod[]) => {
      if (mode === "once") return this.#firstUpdate?.resolve(structuredClone(pods));
      for (const update of podConfig.set(source, pods)) loop.push(update);
    };
    this.#podManager = podManager;
    this.#podCache = podCache;
    this.#startupTracker = pods.startupTracker;

    const parts: Running[] = [];
    if (config.staticPodPath) {
      sources.push(FILE_SOURCE);
      logger.info("Adding static pod path", { path: config.staticPodPath });
      const file = new StaticPodFileSource({
        path: config.staticPodPath,
        nodeName,
        fileCheckFrequencyMs: config.fileCheckFrequency,
        clock,
        logger,
        onUpdate: merge(FILE_SOURCE),
      });
      parts.push(running("file source", file.run(signal)));
    }
    if (config.staticPodURL) {
      sources.push(HTTP_SOURCE);
      logger.info("Adding pod URL with HTTP header", {
        URL: config.staticPodURL,
        header: config.staticPodURLHeader,
      });
      const url = new StaticPodURLSource({
        url: config.staticPodURL,
        header: config.staticPodURLHeader,
        nodeName,
        httpCheckFrequencyMs: config.httpCheckFrequency,
        clock,
        logger,
        onUpdate: merge(HTTP_SOURCE),
      });
      parts.push(running("HTTP source", url.run(signal)));
    }
    if (deps.kubeClient) {
      sources.push(API_SOURCE);
      logger.info("Adding apiserver pod source");
      const api = newSourceApiserver({
        client: deps.kubeClient,
        nodeName,
        clock,
        logger,
        onUpdate: merge(API_SOURCE),
        onEvent: (type, pod) => {
          // In runonce mode only the first list counts.
          if (mode === "once") return;
          for (const update of podConfig.apply(API_SOURCE, type, pod)) loop.push(update);
        },
      });
      parts.push(running("apiserver source", api.run(signal)));
    }
    // The CPU and memory managers give containers their cpusets in both modes; device plugins
    // register only with a running kubelet.
    const initial = await runtimeContainers(runtime, signal);
    const { reconciling } = await managers.start(signal, initial.containers);
    parts.push(running("resource managers", reconciling));
    if (mode === "loop") {
      await devices.start(initial.running);
      parts.push(running(
        "pod resources server",
        this.#servePodResources(signal, managers, pods.dra, podManager, activePods),
      ));
      parts.push(...pods.run(signal));
      if (containerManager) parts.push(running("container manager", containerManager.run(signal)));
      this.containerLogManager = new ContainerLogManager({
        runtime,
        maxSize: config.containerLogMaxSize,
        maxFiles: config.containerLogMaxFiles,
        maxWorkers: config.containerLogMaxWorkers,
        monitorIntervalMs: config.containerLogMonitorInterval,
        clock,
        logger,
        workqueue: this.metrics.workqueue,
      });
      parts.push(running("container log manager", this.containerLogManager.run(signal)));
      // Upstream's CSI volume plugin: with an apiserver the node is NotReady until its CSINode
      // is initialized, and registered drivers are published on the Node and the CSINode.
      const csiNodeInfo = deps.kubeClient
        ? new NodeInfoManager({ client: deps.kubeClient, nodeName, clock, logger })
        : undefined;
      if (csiNodeInfo) {
        parts.push(running(
          "CSINode initialization",
          initializeCSINode({
            nodeInfo: csiNodeInfo,
            setStorageState: (e) => this.runtimeState.setStorageState(e),
            nodeRegistered: () => this.nodeStatus?.registered ?? false,
            clock,
            logger,
            signal,
          }),
        ));
      } else {
        logger.warning("Skipping CSINode initialization, kubelet running in standalone mode");
      }
      // Upstream adds the CSI and DRA handlers here, then starts the plugin manager.
      this.pluginManager.addHandler(
        CSI_PLUGIN,
        new CsiRegistrationHandler({
          drivers: this.csiDrivers,
          logger,
          ...(csiNodeInfo ? { nodeInfo: csiNodeInfo } : {}),
        }),
      );
      this.pluginManager.addHandler(DEVICE_PLUGIN, devices.pluginHandler());
      // The DRA manager (upstream's containerManager.Start): its checkpoint, slice clean-up and
      // reconcile loop; its plugins are the DRAPlugin handler.
      // A DRA checkpoint that cannot be read stops the kubelet here, as upstream's.
      await pods.dra.start();
      parts.push(running("DRA manager", pods.dra.run(signal)));
      this.pluginManager.addHandler(DRA_PLUGIN, pods.dra.plugins);
      logger.v(4).info("Starting plugin manager");
      parts.push(running("plugin manager", this.pluginManager.run(signal)));
      parts.push(running(
        "node shutdown manager",
        this.#startNodeShutdownManager(signal, syncer, activePods),
      ));
      try {
        if (layout instanceof Error) throw layout;
        const stats = await newKubeletStats({
          layout,
          nodeName,
          runtime,
          imageService,
          pods: () =>
            podManager.getPods().map((pod) => ({
              pod,
              status: podCache.get(pod.metadata?.uid ?? "").status,
            })),
          runtimePods: () => pleg.podIds().map((uid) => podCache.get(uid).status),
          rootDirectory: flags.rootDirectory,
          podLogsDirectory: config.podLogsDir,
          machine,
          volumeStatsAggPeriodMs: config.volumeStatsAggPeriod,
          volumesWithMetrics: (uid) => pods.volumeManager.volumesWithMetrics(uid),
          recorder,
          kubeletCgroups: config.kubeletCgroups,
          housekeepingIntervalMs: flags.housekeepingInterval,
          cgroupDriver: config.cgroupDriver,
          cgroupRoot: config.cgroupRoot,
          systemCgroups: config.systemCgroups,
          clock,
          logger,
        });
        this.#stats = stats;
        this.metrics?.volumeStats.setSource((s) => stats.provider.claimVolumeStats(s));
        parts.push(running("statistics", stats.run(signal)));
      } catch (e) {
        // Pods still run; the statistics endpoints answer with this reason, and garbage
        // collection and eviction, which need statistics, do not run.
        this.#stats = e instanceof Error ? e : new Error(String(e));
        logger.error(e, "Failed to start the statistics collection");
      }
      const stats = this.#stats;
      if (stats && !(stats instanceof Error)) {
        parts.push(
          ...this.#startGarbageCollection(
            signal,
            stats,
            pods,
            () => podConfig.seenAllSources(sources),
            activePods,
          ),
        );
      }
    }
    return parts;
  }

  /**
   * Reads the machine's topology (as upstream's cAdvisor, before the container manager is made),
   * applies --reserved-cpus to the cpu reservations (upstream run, before the node status reports
   * allocatable) and makes the device, topology, CPU and memory managers; their configuration
   * errors (a static CPU policy without reserved CPUs, reservedMemory that does not add up, ...)
   * throw, and the kubelet stops, as upstream's NewContainerManager errors stop it. They read the
   * pod lifecycle through {@link #lifecycleHooks} once it exists.
   */
  async #prepareResourceManagers(signal: AbortSignal): Promise<ResourceManagers> {
    if (this.resourceManagers) return this.resourceManagers;
    const { server, deps } = this.#opts;
    const { config, flags } = server;
    const { clock, logger } = deps;
    const machineTopology = await readMachineTopology();
    for (const w of machineTopology.warnings) logger.v(2).info(w);
    const cpuTopology = discoverCPUTopology(machineTopology);
    const reservedCPUs = applyReservedSystemCPUs(config, cpuTopology, logger);
    const machine = await readMachineInfo();
    this.#machine = machine;
    // The node's capacity as the container manager and the memory manager see it.
    const capacity: Record<string, string> = {
      cpu: String(machine.numCores),
      memory: String(machine.memoryCapacity),
    };
    for (const [size, count] of machine.hugePages) {
      capacity[hugePageResourceName(size)] = String(size * count);
    }
    this.#capacity = capacity;
    const hooks = () => this.#lifecycleHooks;
    const activePods = () => hooks()?.activePods() ?? [];
    const sourcesReady = () => hooks()?.sourcesReady() ?? false;
    const devices = new DeviceManager({
      rootDirectory: flags.rootDirectory,
      clock,
      logger,
      activePods,
      sourcesReady,
      signal,
      metrics: this.metrics.devicePlugins,
      numaNodes: machineTopology.nodes.map((n) => n.id),
      featureGates: config.featureGates,
      // A held device's health changed: its pods are synced, their status regenerated.
      onHealthChange: (uids) => hooks()?.onHealthChange(uids),
      affinity: (uid, name) => this.resourceManagers?.topology.getAffinity(uid, name),
    });
    const runtime = deps.runtimeService;
    this.resourceManagers = new ResourceManagers({
      config,
      machine: machineTopology,
      cpuTopology,
      reservedCPUs,
      rootDirectory: flags.rootDirectory,
      capacity,
      devices,
      clock,
      logger,
      metrics: this.metrics,
      activePods,
      sourcesReady,
      podStatus: (uid) => hooks()?.podStatus(uid),
      updateContainerResources: (id, linux, s) => {
        if (!runtime) return Promise.reject(new Error("no runtime service"));
        return runtime.updateContainerResources(id, linux, s);
      },
    });
    return this.resourceManagers;
  }

  /**
   * The pod resources API on `<root-dir>/pod-resources/kubelet.sock` (upstream
   * ListenAndServePodResources; KubeletPodResourcesGet is GA). A socket that cannot be served
   * stops the kubelet, as upstream exits.
   */
  async #servePodResources(
    signal: AbortSignal,
    managers: ResourceManagers,
    dra: PodLifecycle["dra"],
    podManager: PodLifecycle["podManager"],
    activePods: () => V1Pod[],
  ): Promise<void> {
    const { deps, server } = this.#opts;
    // KubeletPodResourcesListUseActivePods (deprecated, on): List gives the active pods only.
    const useActivePods = server.config.featureGates?.KubeletPodResourcesListUseActivePods ?? true;
    const dir = join(server.flags.rootDirectory, POD_RESOURCES_DIR);
    await Deno.mkdir(dir, { recursive: true, mode: 0o750 });
    const podResources = new PodResourcesServer({
      providers: {
        listPods: useActivePods ? activePods : () => podManager.getPods(),
        allPods: () => podManager.getPods(),
        podByName: (namespace, name) => podManager.getPodByName(namespace, name),
        devices: managers.devices,
        cpus: managers.cpusForPodResources,
        memory: managers.memoryForPodResources,
        dynamicResources: {
          getDynamicResources: (pod, container) => {
            try {
              return dynamicResources(dra.containerClaimInfos(pod, container));
            } catch (e) {
              deps.logger.error(e, "Unable to get container claim info state");
              return [];
            }
          },
        },
      },
      clock: deps.clock,
      logger: deps.logger,
      metrics: this.metrics.podResources,
    });
    const grpc = await podResources.serve(join(dir, POD_RESOURCES_SOCKET), signal);
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    await grpc.close();
  }

  /**
   * Graceful node shutdown (upstream shutdownManager.Start): a failure to start (no system bus,
   * no logind, a refused inhibitor) is one error line and the kubelet goes on without it.
   * SIGUSR1 stands for PrepareForShutdown(true), as upstream's manager takes it.
   */
  async #startNodeShutdownManager(
    signal: AbortSignal,
    syncer: PodLifecycle["syncer"],
    activePods: () => V1Pod[],
  ): Promise<void> {
    const { server, deps, nodeName } = this.#opts;
    const { config, flags } = server;
    const { logger } = deps;
    const groups = shutdownGroups(config);
    if (groups.length === 0) {
      logger.info("No graceful configuration specified, node shutdown will be immediate");
      return;
    }
    logger.info("Creating node shutdown manager", {
      shutdownGracePeriodRequested: config.shutdownGracePeriod ?? 0,
      shutdownGracePeriodCriticalPods: config.shutdownGracePeriodCriticalPods ?? 0,
      shutdownGracePeriodByPodPriority: groups,
    });
    const { connectLogind } = await import("./nodeshutdown/logind.ts");
    const manager = new NodeShutdownManager({
      groups,
      connect: (s) => connectLogind({ logger }, s),
      activePods,
      killPod: (pod, grace, status) =>
        syncer.killPodNow(pod, { gracePeriodOverride: grace, status, signal }),
      syncNodeStatus: () => this.nodeStatus?.poke(),
      stateFile: join(flags.rootDirectory, LOCAL_STORAGE_STATE_FILE),
      recorder: deps.recorder,
      nodeRef: nodeRef(nodeName),
      clock: deps.clock,
      logger,
      metrics: this.metrics && {
        start: this.metrics.gracefulShutdownStartTime,
        end: this.metrics.gracefulShutdownEndTime,
      },
    });
    this.shutdownManager = manager;
    let done: Promise<void>;
    try {
      ({ done } = await manager.start(signal));
    } catch (e) {
      if (!signal.aborted) logger.error(e, "Failed to start node shutdown manager");
      return;
    }
    const onUsr1 = () => {
      logger.v(1).info("Received shutdown signal from USR1");
      manager.onShutdownEvent(true);
    };
    Deno.addSignalListener("SIGUSR1", onUsr1);
    try {
      await done;
    } finally {
      Deno.removeSignalListener("SIGUSR1", onUsr1);
    }
  }

  /**
   * Image GC every 5 min and container GC every minute (upstream StartGarbageCollection), with
   * the thresholds and policies of the configuration and flags, and the eviction manager every
   * 10 s (upstream evictionManager.Start) reclaiming through them before it evicts.
   */
  #startGarbageCollection(
    signal: AbortSignal,
    stats: KubeletStats,
    pods: PodLifecycle,
    sourcesReady: () => boolean,
    activePods: () => V1Pod[],
  ): Running[] {
    const { server, deps, nodeName } = this.#opts;
    const { config, flags } = server;
    const { clock, logger, recorder } = deps;
    const ref = nodeRef(nodeName);
    const imageGC = new ImageGCManager({
      imageService: deps.imageService!,
      runtime: deps.runtimeService!,
      imageFsStats: (s) => stats.provider.imageFsCapacity(s),
      policy: {
        highThresholdPercent: config.imageGCHighThresholdPercent,
        lowThresholdPercent: config.imageGCLowThresholdPercent,
        minAgeMs: config.imageMinimumGCAge,
        maxAgeMs: config.imageMaximumGCAge,
      },
      recorder,
      nodeRef: ref,
      clock,
      logger,
    });
    const containerGC = new ContainerGC({
      runtime: deps.runtimeService!,
      podStateProvider: pods.syncer.workers,
      sourcesReady,
      policy: {
        minAgeMs: flags.minimumGCAge,
        maxPerPodContainer: flags.maxPerPodContainerCount,
        maxContainers: flags.maxContainerCount,
      },
      podLogsDirectory: config.podLogsDir,
      internalLifecycle: this.resourceManagers?.internalLifecycle,
      recorder,
      nodeRef: ref,
      clock,
      logger,
    });
    this.imageGC = imageGC;
    this.containerGC = containerGC;
    const { syncer, volumeManager } = pods;
    const eviction = new EvictionManager({
      ...evictionConfigFrom(config, flags),
      summary: (s, opts) => stats.provider.summary(s, opts),
      activePods,
      killPod: (pod, status, grace) =>
        syncer.killPodNow(pod, { evict: true, gracePeriodOverride: grace, status, signal }),
      podCleanedUp: (pod) => {
        const uid = pod.metadata?.uid ?? "";
        return !syncer.workers.couldHaveRunningContainers(uid) &&
          volumeManager.podVolumes(uid).size === 0;
      },
      imageGC,
      containerGC,
      diskInfo: {
        hasDedicatedImageFs: async (s) => {
          const mount = (await deps.imageService!.imageFsInfo(s)).imageFilesystems[0]?.fsId
            ?.mountpoint;
          if (!mount) return false;
          const [a, b] = await Promise.all([statPath(flags.rootDirectory), statPath(mount)]);
          return a.dev !== b.dev;
        },
        // containerd keeps writable layers with its images unless it reports them apart.
        hasDedicatedContainerFs: async (s) =>
          (await deps.imageService!.imageFsInfo(s)).containerFilesystems.length > 0,
      },
      nodeAllocatableMemory: () => {
        const reserved = [config.kubeReserved?.memory, config.systemReserved?.memory]
          .reduce((sum, q) => sum + (q ? parseQuantity(q) : 0), 0);
        const capacity = this.#machine?.memoryCapacity;
        return capacity === undefined ? undefined : capacity - reserved;
      },
      nodeRef: ref,
      recorder,
      clock,
      logger,
      metrics: this.metrics,
    });
    this.evictionManager = eviction;
    deps.reloader?.onChange(
      [
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
        "evictionMinimumReclaim",
        "evictionPressureTransitionPeriod",
        "evictionMaxPodGracePeriod",
      ],
      (c) => eviction.reconfigure(evictionConfigFrom(c, flags)),
    );
    deps.reloader?.onChange(
      [
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "imageMinimumGCAge",
        "imageMaximumGCAge",
      ],
      (c) =>
        imageGC.setPolicy({
          highThresholdPercent: c.imageGCHighThresholdPercent,
          lowThresholdPercent: c.imageGCLowThresholdPercent,
          minAgeMs: c.imageMinimumGCAge,
          maxAgeMs: c.imageMaximumGCAge,
        }),
    );
    deps.reloader?.onChange(
      ["serializeImagePulls", "maxParallelImagePulls"],
      (c) => pods.imageManager.setPullParallelism(c.serializeImagePulls, c.maxParallelImagePulls),
    );
    return [
      running("image garbage collection", imageGC.run(signal)),
      running("container garbage collection", containerGC.run(signal)),
      running("eviction manager", eviction.run(signal)),
    ];
  }

  /**
   * `--runonce` (upstream RunOnce): takes the first pod update of the static sources (within
   * 1 s), admits and runs those pods until every container runs, retrying a pod's sync up to
   * 10 times with a delay of 1 s doubling, and resolves; rejects naming the pods that did not
   * start. The pods are left running.
   */
  async runOnce(signal: AbortSignal): Promise<void> {
    const { server, deps } = this.#opts;
    const { config } = server;
    const log = deps.logger;
    const runtime = deps.runtimeService;
    if (!runtime) throw new Error("the kubelet needs a runtime service (preInitRuntimeService)");
    await this.#prepareResourceManagers(signal);
    const version = await waitForRuntime({
      runtime,
      endpoint: config.containerRuntimeEndpoint,
      logger: log,
      clock: deps.clock,
      signal,
    });
    this.#runtimeVersion = containerRuntimeVersion(version);
    await this.#updateRuntimeUp("", signal);
    await this.setupLogDirs();
    const stop = new AbortController();
    const inner = AbortSignal.any([signal, stop.signal]);
    this.#firstUpdate = Promise.withResolvers<V1Pod[]>();
    const parts = await this.#startPodLifecycle(inner, "once");
    try {
      const timeout = deps.clock.sleep(RUN_ONCE_MANIFEST_DELAY_MS, inner).then(() => {
        throw new Error(
          `no pod manifest update after ${formatDuration(RUN_ONCE_MANIFEST_DELAY_MS)}`,
        );
      });
      const pods = await Promise.race([this.#firstUpdate.promise, timeout]);
      timeout.catch(() => {});
      log.info("Processing manifest with pods", { numPods: pods.length });
      await this.#runOncePods(pods, inner);
      log.info("Finished processing pods", { numPods: pods.length });
    } finally {
      stop.abort();
      await awaitStopped(parts, deps);
    }
  }

  async #runOncePods(pods: V1Pod[], signal: AbortSignal): Promise<void> {
    const log = this.#opts.deps.logger;
    const syncer = this.podSyncer!;
    const admitted: V1Pod[] = [];
    const runs: Promise<{ pod: V1Pod; err?: unknown }>[] = [];
    for (const pod of pods) {
      this.#podManager!.addPod(pod);
      if (!(await syncer.admitWithResourcesAndReject(pod, admitted))) continue;
      admitted.push(pod);
      runs.push(this.#runOncePod(pod, signal).then(() => ({ pod }), (err) => ({ pod, err })));
    }
    log.info("Waiting for pods", { numPods: admitted.length });
    const failed: string[] = [];
    for (const r of await Promise.all(runs)) {
      const name = `${r.pod.metadata?.name}_${r.pod.metadata?.namespace}(${r.pod.metadata?.uid})`;
      if (r.err !== undefined) {
        log.error(r.err, "Unable to start pod", { pod: kobj(r.pod) });
        failed.push(name);
      } else log.info("Started pod", { pod: kobj(r.pod) });
    }
    if (failed.length > 0) {
      throw new Error(`runonce failed: error running pods: [${failed.join(" ")}]`);
    }
    log.info("Pods started", { numPods: pods.length });
  }

  /** Upstream runPod: syncs until every container of the pod runs, or gives up. */
  async #runOncePod(pod: V1Pod, signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#opts.deps;
    const uid = pod.metadata?.uid ?? "";
    let delay = RUN_ONCE_RETRY_DELAY_MS;
    for (let retry = 0;; retry++) {
      await this.pleg!.relist(signal);
      const status = this.#podCache!.get(uid).status;
      const running = (pod.spec?.containers ?? []).every((c) =>
        status.containerStatuses.find((s) => s.metadata?.name === c.name)?.state ===
          api.ContainerState.CONTAINER_RUNNING
      );
      if (running) {
        logger.info("Pod's containers running", { pod: kobj(pod) });
        return;
      }
      logger.info("Pod's containers not running: syncing", { pod: kobj(pod) });
      const terminal = await this.podSyncer!.syncPod(signal, "update", pod, undefined, status);
      if (terminal) return;
      if (retry >= RUN_ONCE_MAX_RETRIES) {
        throw new Error(
          `timeout error: pod ${
            kobj(pod)
          } containers not running after ${RUN_ONCE_MAX_RETRIES} retries`,
        );
      }
      logger.info("Pod's containers synced, waiting", {
        pod: kobj(pod),
        duration: formatDuration(delay),
      });
      await clock.sleep(delay, signal);
      delay *= 2;
    }
  }

  /**
   * The kubelet API on address:port (upstream ListenAndServeKubeletServer): the serving
   * certificate, authentication and authorization from the configuration, and the routes of
   * the pod endpoints, logs and streaming. Resolves once it listens.
   */
  async #startServer(signal: AbortSignal): Promise<{ finished: Promise<void> }> {
    const { server, deps, nodeName, hostname, nodeIPs } = this.#opts;
    const { config, flags } = server;
    const { logger, clock } = deps;
    const podManager = this.#podManager!;
    const podCache = this.#podCache!;
    const pleg = this.pleg!;
    const runtime = deps.runtimeService!;
    // serverTLSBootstrap: the serving certificate comes from the CSR API and is rotated
    // (upstream NewMainKubelet's serverCertificateManager); else files or a self-signed pair.
    const serverCerts = config.serverTLSBootstrap
      ? await newKubeletServerCertificateManager({
        client: deps.kubeClient,
        tlsCertFile: config.tlsCertFile,
        tlsPrivateKeyFile: config.tlsPrivateKeyFile,
        getAddresses: () => this.nodeStatus?.lastObservedNodeAddresses() ?? [],
        certDirectory: flags.certDirectory,
        nodeName,
        clock,
        logger,
      })
      : undefined;
    const cert = serverCerts ? serverCerts.current() : await loadOrGenerateServingCert({
      tlsCertFile: config.tlsCertFile ?? "",
      tlsPrivateKeyFile: config.tlsPrivateKeyFile ?? "",
      certDirectory: flags.certDirectory,
      hostname,
      nodeIPs,
      clock,
      logger,
      signal,
    }).then((c) => ({ certPem: c.cert, keyPem: c.key }));
    const auth = await buildAuth({
      config,
      nodeName,
      client: deps.kubeClient,
      clock,
      logger,
      fineGrainedAuthz: config.featureGates?.KubeletFineGrainedAuthz ?? true,
      metrics: this.metrics,
    });
    const caReload = auth.runClientCAReload(signal);
    const findPod = (namespace: string, name: string) => podManager.getPodByName(namespace, name);
    /** A pod's running container of that name, from the pod cache (upstream findContainer). */
    const runningContainerId = (uid: string, name: string) =>
      podCache.get(uid).status.containerStatuses.find((c) =>
        c.metadata?.name === name && c.state === api.ContainerState.CONTAINER_RUNNING
      )?.id;
    const ownRoutes = podRoutes({
      getPods: () => podManager.getPods(),
      getRunningPods: () => pleg.podIds().map((uid) => podCache.get(uid).status),
      config,
      checks: { syncloop: () => this.syncLoop?.healthCheck() },
      probeMetrics: () => this.#prober!.metricsText(),
      metrics: () => this.metrics.render(),
    });
    const stats = this.#stats;
    const routes = [
      ...(stats instanceof Error || stats === undefined
        ? statsUnavailableRoutes(stats?.message ?? "the pod lifecycle is not running")
        : stats.routes),
      ...ownRoutes,
      ...(await import("./server/debug.ts")).debugPodRoutes({
        timeline: (namespace, name) => this.#startupTracker?.timeline(namespace, name),
        enabled: config.enableDebuggingHandlers,
      }),
      ...(await import("./server/debug.ts")).debugFlagsRoutes({
        enabled: config.enableDebuggingHandlers,
        flagsEnabled: config.enableDebugFlagsHandler,
        setVerbosity: (v) => setLogV(deps.logger, v),
      }),
      ...(await import("./server/pprof.ts")).profilingRoutes({
        enabled: config.enableDebuggingHandlers,
        profilingEnabled: config.enableProfilingHandler,
        signal,
      }),
      ...logRoutes({
        enableSystemLogHandler: config.enableSystemLogHandler,
        enableSystemLogQuery: config.enableSystemLogQuery,
        getPodByName: findPod,
        getPodStatus: (uid) => podCache.get(uid).status,
        runtime,
        logger,
      }),
      ...(config.featureGates?.ContainerCheckpoint ?? true
        ? checkpointRoutes({
          getPodByName: findPod,
          findContainerId: runningContainerId,
          runtime,
          checkpointsDir: join(flags.rootDirectory, "checkpoints"),
          now: () => new Date(deps.clock.now()),
          logger,
        })
        : []),
      ...streamingRoutes({
        getPodByName: findPod,
        findContainerId: runningContainerId,
        findSandboxId: (uid) =>
          podCache.get(uid).status.sandboxStatuses.find((s) =>
            s.state === api.PodSandboxState.SANDBOX_READY
          )?.id,
        runtime,
        logger,
        idleTimeoutMs: config.streamingConnectionIdleTimeout,
      }),
    ];
    const listening = await serveKubeletAPI({
      hostname: config.address,
      port: config.port,
      tls: { cert: cert?.certPem, key: cert?.keyPem, ...tlsSettings(config, logger) },
      authenticator: auth.authenticator,
      authorizer: auth.authorizer,
      attributes: auth.attributes,
      routes,
      logger,
      signal,
      metrics: this.metrics,
    });
    logger.info("Starting to listen", { address: config.address, port: listening.port });
    const finished = [listening.finished, caReload];
    if (serverCerts) {
      serverCerts.onCertificate((c) => listening.setCertificate(c.certPem, c.keyPem));
      finished.push(serverCerts.run(signal));
    }
    const readOnlyPort = config.readOnlyPort ?? 0;
    if (readOnlyPort > 0) {
      // Upstream's read-only server: the default handlers only, no authentication at all.
      const readOnly = await serveKubeletAPI({
        hostname: config.address,
        port: readOnlyPort,
        readOnly: true,
        routes: ownRoutes.filter((r) => READ_ONLY_PATTERN.test(r.pattern)),
        logger,
        signal,
        metrics: this.metrics,
      });
      logger.info("Starting to listen read-only", {
        address: config.address,
        port: readOnly.port,
      });
      finished.push(readOnly.finished);
    }
    return { finished: Promise.all(finished).then(() => {}) };
  }

  /** This node as admission and mirror pods see it (upstream getNodeAnyWay). */
  getNode(): V1Node | undefined {
    const listed = this.#opts.deps.kubeClient
      ? this.nodeInformer?.node ?? this.nodeStatus?.node
      : undefined;
    return nodeForAdmission(listed, () => this.#standaloneNode ??= this.#initialNode());
  }

  /** Upstream initialNode with the status setters applied, for standalone mode. */
  #initialNode(): V1Node | undefined {
    const machine = this.#machine;
    if (!machine) return undefined;
    const { server, nodeName, hostname, nodeIPs } = this.#opts;
    const node = initialNode({
      nodeName,
      hostname,
      nodeLabels: server.flags.nodeLabels,
      registerWithTaints: (server.config.registerWithTaints ?? []) as V1Taint[],
      registerSchedulable: server.flags.registerSchedulable,
      enableControllerAttachDetach: server.config.enableControllerAttachDetach,
      providerID: server.config.providerID,
    });
    node.status = nodeStatus({
      config: server.config,
      machine,
      hostname,
      nodeIPs,
      kubeletVersion: KUBELET_VERSION,
      containerRuntimeVersion: this.#runtimeVersion,
      images: [],
      notReadyReasons: [],
      now: this.#opts.deps.clock.now(),
    });
    return node;
  }

  /** Starts node registration, status updates and the node lease (API server mode). */
  #startNodeHeartbeats(signal: AbortSignal): Running[] {
    const { server, deps, nodeName, hostname, nodeIPs } = this.#opts;
    const { config, flags } = server;
    const kubeClient = deps.kubeClient!;
    const heartbeatClient = deps.heartbeatClient!;
    const machine = readMachineInfo();
    const imageService = deps.imageService;
    // The node status names the images of a list read every 30 s, as upstream's image cache.
    const images = imageService && new ImageCache({
      listImages: (s) => imageService.listImages(undefined, s),
      clock: deps.clock,
      logger: deps.logger,
    });
    const status = new NodeStatusManager({
      client: kubeClient,
      heartbeatClient,
      config,
      nodeName,
      hostname,
      nodeIPs,
      nodeLabels: flags.nodeLabels,
      registerWithTaints: (config.registerWithTaints ?? []) as V1Taint[],
      registerSchedulable: flags.registerSchedulable,
      enableControllerAttachDetach: config.enableControllerAttachDetach,
      providerID: config.providerID,
      kubeletVersion: KUBELET_VERSION,
      clock: deps.clock,
      logger: deps.logger,
      startupTracker: this.#nodeStartupTracker,
      machineInfo: () => machine,
      rootfsCapacity: () => filesystemCapacity(flags.rootDirectory),
      containerRuntimeVersion: () => this.#runtimeVersion,
      declaredFeatures: nodeDeclaredFeatures(config.featureGates ?? {}),
      runtimeHandlers: () =>
        this.#runtimeHandlers.map((h) => ({
          name: h.name,
          features: h.features && {
            recursiveReadOnlyMounts: h.features.recursiveReadOnlyMounts,
            userNamespaces: h.features.userNamespaces,
          },
        })),
      listImages: (s) => images?.list(s) ?? Promise.resolve([]),
      volumes: {
        volumesInUse: () => this.#volumeManager?.volumesInUse(),
        markVolumesReportedInUse: (names) => this.#volumeManager?.markVolumesReportedInUse(names),
      },
      notReadyReasons: () =>
        [
          this.runtimeState.runtimeErrors(),
          this.runtimeState.networkErrors(),
          this.runtimeState.storageErrors(),
          this.shutdownManager?.shutdownStatus(),
        ]
          .filter((e): e is string => e !== undefined),
      pressure: () => {
        const e = this.evictionManager;
        return e && {
          memory: e.isUnderMemoryPressure(),
          disk: e.isUnderDiskPressure(),
          pid: e.isUnderPIDPressure(),
        };
      },
      cachedNode: () => informer.hasSynced ? informer.node : undefined,
      devices: () => this.resourceManagers?.devices.getCapacity(),
      shouldResetExtendedResourceCapacity: () => deviceCheckpointMissing(flags.rootDirectory),
      recorder: deps.recorder,
      updatePodCIDR: (cidr, s) => this.#podCIDR.update(cidr, s),
    });
    this.nodeStatus = status;
    const informer = new NodeInformer({
      client: kubeClient,
      nodeName,
      clock: deps.clock,
      logger: deps.logger,
    });
    this.nodeInformer = informer;
    const lease = new NodeLeaseController({
      client: heartbeatClient,
      nodeName,
      leaseDurationSeconds: config.nodeLeaseDurationSeconds,
      clock: deps.clock,
      logger: deps.logger,
      getNode: () => status.node,
    });
    const parts = [
      running("status", status.run(signal)),
      running("lease", lease.run(signal)),
      running("informer", this.nodeInformer.run(signal)),
    ];
    if (images) parts.push(running("image list", images.run(signal)));
    return parts;
  }

  /**
   * One updateRuntimeUp: CRI Status into the runtime state. Returns the state as text ("" when
   * ready) and logs it when it differs from `last`.
   */
  async #updateRuntimeUp(last: string | undefined, signal: AbortSignal): Promise<string> {
    const { deps } = this.#opts;
    const runtime = deps.runtimeService!;
    let now: string;
    try {
      const res = await runtime.status(false, signal);
      this.#runtimeHandlers = res.runtimeHandlers;
      this.runtimeState.recordStatus(res.status?.conditions ?? []);
      now = [this.runtimeState.runtimeErrors(), this.runtimeState.networkErrors()].filter(Boolean)
        .join("; ");
      if (now !== last) {
        if (now === "") deps.logger.info("Container runtime and network are ready");
        else deps.logger.error(null, "Container runtime not ready", { reason: now });
      }
    } catch (e) {
      if (signal.aborted) return last ?? "";
      now = `sanity check failed: ${e instanceof Error ? e.message : String(e)}`;
      if (now !== last) deps.logger.error(e, "Container runtime sanity check failed");
      // Upstream waits for the 30 s sync threshold before it calls the runtime down; a
      // runtime whose socket does not answer is down now, and the node says so at once.
      if (isCriCode(e, GrpcCode.UNAVAILABLE)) {
        this.runtimeState.setRuntimeState(`container runtime is down: ${e.details}`);
      }
    }
    return now;
  }

  /**
   * upstream's updateRuntimeUp, every 5 s until `signal` aborts: CRI Status into the runtime
   * state. Logs when the state changes rather than on every failing check.
   */
  async #updateRuntimeUpLoop(signal: AbortSignal): Promise<void> {
    const { deps } = this.#opts;
    const runtime = deps.runtimeService;
    if (!runtime) throw new Error("updateRuntimeUp needs a runtime service");
    // Unknown at first: the first state always counts as a change, so the node status that
    // was computed before it (runtime "not yet checked") is redone at once.
    let last: string | undefined;
    while (!signal.aborted) {
      const now = await this.#updateRuntimeUp(last, signal);
      if (signal.aborted) break;
      // A change of readiness is reported now rather than at the next status period.
      if (now !== last) this.nodeStatus?.poke();
      last = now;
      await deps.clock.sleep(RUNTIME_UP_PERIOD_MS, signal).catch(() => {});
    }
  }
}
