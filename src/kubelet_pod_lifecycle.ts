/**
 * @module
 * Builds the managers that run pods and wires them to each other, as upstream's NewMainKubelet
 * does for its pod half: the pod cache and the PLEG, the pod manager, the reason cache, the
 * status manager, the image manager, DNS, the kuberuntime manager, the mirror client, the pod
 * syncer (with its pod workers) and the sync loop. The Kubelet adds the pod sources and starts
 * the loops; benchmarks and tests build the same graph against a fake runtime. Corresponds to
 * the pod parts of upstream `pkg/kubelet/kubelet.go` NewMainKubelet.
 */

import type { KubeletMetrics } from "./metrics/metrics.ts";
import { PodStartupLatencyTracker } from "./pod_startup_latency_tracker.ts";
import { join } from "node:path";
import type { V1ConfigMap, V1Node, V1Pod, V1Secret } from "@kubernetes/client-node";
import type * as api from "../proto/runtime/v1/api.ts";
import type { Clock } from "./util/clock.ts";
import { type EventRecorder, nodeRef } from "./client/record.ts";
import { DnsConfigurer } from "./network/dns.ts";
import { type CredentialVerificationPolicy, ImageManager } from "./images/image_manager.ts";
import type { Logger } from "./klog/klog.ts";
import type { KubeClient } from "./client/kube_client.ts";
import type { KubeletConfiguration } from "./apis/config_types.ts";
import { type PodAdmitHandler, PodSyncer, type PodSyncerOptions } from "./kubelet_pod_sync.ts";
import type { PodCgroups } from "./cm/container_manager.ts";
import { KubeletMounts, runtimeClassSupportsRecursiveReadOnlyMounts } from "./kubelet_mounts.ts";
import { Mounter } from "./util/mount.ts";
import { envSourceOf, ObjectManager } from "./client/object_manager.ts";
import { Prober } from "./prober/prober.ts";
import { ProberManager } from "./prober/prober_manager.ts";
import { SyncLoop } from "./kubelet_sync_loop.ts";
import { KubeRuntimeManager } from "./kuberuntime/kuberuntime_manager.ts";
import { MirrorClient } from "./pod/mirror_client.ts";
import { EventedPLEG } from "./pleg/evented.ts";
import { GenericPLEG, type PodLifecycleEventGenerator } from "./pleg/generic.ts";
import { PodCache } from "./container/pod_cache.ts";
import { isStaticPod } from "./config/pod_config.ts";
import { PodManager } from "./pod/pod_manager.ts";
import { ReasonCache } from "./reason_cache.ts";
import type { ImageManagerService } from "./cri/remote_image.ts";
import type { RuntimeService } from "./cri/remote_runtime.ts";
import { ServiceLister } from "./client/service_lister.ts";
import { RuntimeClassManager } from "./runtimeclass/runtimeclass_manager.ts";
import { StatusManager, type StatusManagerOptions } from "./status/status_manager.ts";
import { TOKEN_GC_PERIOD_MS, TokenManager } from "./token/token_manager.ts";
import {
  type CredentialProviderPlugins,
  CredentialProviders,
  serviceAccountAccess,
} from "./credentialprovider/plugins.ts";
import { CsiDrivers } from "./csi/csi_plugin.ts";
import { CsiVolumePlugin } from "./csi/csi_mounter.ts";
import { VolumeManager, type VolumeManagerOptions } from "./volume/volume_manager.ts";
import type { VolumePlugin } from "./volume/plugin.ts";
import { probeVolumePlugins } from "./volume/plugins.ts";
import { DraManager } from "./cm/dra_manager.ts";
import type { DeviceManager } from "./devicemanager/manager.ts";
import type { InternalContainerLifecycle } from "./cm/internal_container_lifecycle.ts";
import type { ExclusiveCpus } from "./cm/exclusive_cpus.ts";
import { ActiveDeadlineHandler } from "./active_deadline.ts";
import { AllocationManager } from "./allocation/allocation_manager.ts";
import { ResourceState } from "./allocation/state_checkpoint.ts";
import { PodResizeConditions } from "./status/resize_conditions.ts";
import type { UsernsManager } from "./userns/userns_manager.ts";
import { type Running, running } from "./util/stopping.ts";

/** The configuration fields the pod lifecycle reads. */
export type PodLifecycleConfig =
  & Pick<
    KubeletConfiguration,
    | "serializeImagePulls"
    | "maxParallelImagePulls"
    | "registryPullQPS"
    | "registryBurst"
    | "clusterDNS"
    | "clusterDomain"
    | "resolvConf"
    | "podLogsDir"
    | "cpuCFSQuota"
    | "cpuCFSQuotaPeriod"
    | "singleProcessOOMKill"
    | "syncFrequency"
    | "imagePullCredentialsVerificationPolicy"
    | "preloadedImagesVerificationAllowlist"
  >
  & Partial<
    Pick<
      KubeletConfiguration,
      | "configMapAndSecretChangeDetectionStrategy"
      | "featureGates"
      | "crashLoopBackOff"
      | "memorySwap"
      | "cpuManagerPolicy"
      | "memoryManagerPolicy"
    >
  >;

/** What {@link newPodLifecycle} needs. */
export interface PodLifecycleOptions {
  readonly config: PodLifecycleConfig;
  readonly runtime: RuntimeService;
  readonly imageService: ImageManagerService;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly recorder: EventRecorder;
  /** Undefined in standalone mode: no statuses sent, no mirror pods, no pull secrets. */
  readonly kubeClient?: KubeClient;
  readonly nodeName: string;
  readonly hostname: string;
  readonly nodeIPs: readonly string[];
  /**
   * Dead instances of a container kept when one dies (`--maximum-dead-containers-per-container`,
   * at least 1). @default 1
   */
  readonly containersToKeep?: number;
  /** `--root-dir`; pods live under `<rootDirectory>/pods`. */
  readonly rootDirectory: string;
  readonly memoryCapacityBytes: number;
  readonly cgroupV2: boolean;
  /** This node as admission and mirror pods see it. */
  readonly getNode: () => V1Node | undefined;
  readonly runtimeErrors: () => string | undefined;
  readonly networkErrors: () => string | undefined;
  /** Every pod source has sent its first set. */
  readonly sourcesReady: () => boolean;
  /** @default "/var/log/containers" */
  readonly legacyContainerLogsDirectory?: string;
  /** Stops the pod workers. */
  readonly signal?: AbortSignal;
  /** Admission checks after the resource and node checks (the eviction manager's). */
  readonly admitHandlers?: readonly PodAdmitHandler[];
  /**
   * The device manager: gives containers their devices' run options, and admission its view
   * of allocatable. @default none: no devices
   */
  readonly devices?: Pick<
    DeviceManager,
    "runContainerOptions" | "sanitizeAllocatable" | "allocatedResourcesStatus"
  >;
  /**
   * Admission by the topology manager and the resource managers (devices, CPUs, memory),
   * before the predicates. @default none
   */
  readonly resourceAllocator?: PodSyncerOptions["resourceAllocator"];
  /** The CPU and memory managers' container hooks. @default none */
  readonly internalLifecycle?: InternalContainerLifecycle;
  /** Which pods and containers have exclusive CPUs (no CFS quota then). @default none */
  readonly exclusiveCpus?: ExclusiveCpus;
  /** Pod cgroups (the container manager's). @default none: the runtime's default cgroups */
  readonly podCgroups?: PodCgroups;
  /** Builds the status manager; benchmarks observe statuses with a subclass. @default new StatusManager */
  readonly newStatusManager?: (opts: StatusManagerOptions) => StatusManager;
  /** Mounts tmpfs volumes. @default new Mounter (mount(8) and umount(8)) */
  readonly mounter?: Mounter;
  /** The volume plugins. @default probeVolumePlugins over this lifecycle's managers, and CSI */
  readonly volumePlugins?: readonly VolumePlugin[];
  /** The CSI drivers registered through the plugin manager. @default none registered */
  readonly csiDrivers?: CsiDrivers;
  /** Builds the volume manager; tests observe it with a subclass. @default new VolumeManager */
  readonly newVolumeManager?: (opts: VolumeManagerOptions) => VolumeManager;
  /** Where the managers record the kubelet's metrics. @default none recorded */
  readonly metrics?: KubeletMetrics;
  /** RunPodSandbox calls in flight at once; 0 = no limit. @default 0 */
  readonly maxParallelSandboxStarts?: number;
  /** RuntimeDefault seccomp for containers naming no profile (seccompDefault). @default false */
  readonly seccompDefault?: boolean;
  /** The checked image credential provider plugins (`--image-credential-provider-*`). @default none */
  readonly credentialProviderPlugins?: CredentialProviderPlugins;
  /** The pods' allocated resources (`allocated_pods_state`). @default in memory */
  readonly allocatedState?: ResourceState;
  /** The containers' actuated resources (`actuated_pods_state`). @default in memory */
  readonly actuatedState?: ResourceState;
  /**
   * The user namespaces of `hostUsers: false` pods (built at start from the kubelet's ID range).
   * @default none: such pods fail as not supported
   */
  readonly userNamespaces?: UsernsManager;
  /** The handlers of the runtime's last CRI Status (recursive read-only support). @default none */
  readonly runtimeHandlers?: () => readonly api.RuntimeHandler[];
}

/** The built graph; nothing runs until {@link PodLifecycle.run}. */
export interface PodLifecycle {
  readonly podCache: PodCache;
  readonly pleg: PodLifecycleEventGenerator;
  readonly podManager: PodManager;
  readonly reasonCache: ReasonCache;
  readonly imageManager: ImageManager;
  readonly statusManager: StatusManager;
  readonly runtimeManager: KubeRuntimeManager;
  readonly syncer: PodSyncer;
  /** The pods' allocated resources and pending in-place resizes. */
  readonly allocation: AllocationManager;
  readonly loop: SyncLoop;
  readonly prober: ProberManager;
  readonly volumeManager: VolumeManager;
  readonly tokenManager: TokenManager;
  /** The start-up SLI and the pods' start-up timelines. */
  readonly startupTracker: PodStartupLatencyTracker;
  /** The cluster's Services for service link env; none in standalone mode. */
  readonly serviceLister?: ServiceLister;
  /** The cluster's RuntimeClasses for sandboxes' runtime handlers; none in standalone mode. */
  readonly runtimeClasses?: RuntimeClassManager;
  /** The pods' ResourceClaims (DRA); its plugins are the DRAPlugin registration handler. */
  readonly dra: DraManager;
  /**
   * Starts the PLEG, the status manager, the prober, the sync loop, the Service lister, the
   * RuntimeClass manager and the token clean-up; one named part each. The configMap and secret
   * managers stop with `signal`.
   */
  run(signal: AbortSignal): Running[];
}

/** Builds the pod lifecycle; see the module documentation. */
export function newPodLifecycle(o: PodLifecycleOptions): PodLifecycle {
  const { config, clock, logger, recorder, runtime, imageService } = o;
  const { metrics } = o;
  const startupTracker = new PodStartupLatencyTracker({ clock, logger, metrics });
  const podCache = new PodCache();
  const generic = new GenericPLEG({ runtime, cache: podCache, clock, logger, metrics });
  // On unless the EventedPLEG gate is turned off (upstream: alpha, off); a runtime without
  // container events leaves it relisting as the generic PLEG does.
  const pleg: PodLifecycleEventGenerator = config.featureGates?.EventedPLEG === false
    ? generic
    : new EventedPLEG({ runtime, cache: podCache, generic, clock, logger, metrics });
  const podManager = new PodManager();
  const reasonCache = new ReasonCache();
  const draRef: { dra?: DraManager } = {};
  const syncerRef: { syncer?: PodSyncer } = {};
  const statusManager = (o.newStatusManager ?? ((s) => new StatusManager(s)))({
    client: o.kubeClient,
    clock,
    logger,
    metrics,
    // The status of a static pod goes to its mirror pod; other pods have none (the status
    // manager asks for every pod at each pick, so no full name is built for those).
    translatePodUID: (uid) => {
      const pod = podManager.getPodByUID(uid);
      return pod && isStaticPod(pod) ? podManager.getMirrorPodByPod(pod)?.metadata?.uid : undefined;
    },
    getAPIPod: (uid) => {
      const pod = podManager.getPodByUID(uid);
      if (!pod) return undefined;
      return isStaticPod(pod) ? podManager.getMirrorPodByPod(pod) : pod;
    },
    // upstream PodCouldHaveRunningContainers: its containers, or claims not unprepared yet
    // (DynamicResourceAllocation is GA): the pod object stays until they are.
    podCouldHaveRunningContainers: (uid) =>
      (syncerRef.syncer?.workers.couldHaveRunningContainers(uid) ?? true) ||
      (draRef.dra?.podMightNeedToUnprepareResources(uid) ?? false),
    startupLatency: startupTracker,
  });
  const tokenManager = new TokenManager({ client: o.kubeClient, clock, logger });
  const plugins = o.credentialProviderPlugins;
  if (plugins) metrics?.credentialProviderConfigInfo.set(1, { hash: plugins.hash });
  const credentialProviders = plugins && new CredentialProviders({
    plugins,
    clock,
    logger,
    observer: metrics && {
      observeDuration: (name, seconds) =>
        metrics.credentialProviderPluginDuration.observe(seconds, { plugin_name: name }),
      countError: (name) => metrics.credentialProviderPluginErrors.inc({ plugin_name: name }),
    },
    // Token mode only with the KubeletServiceAccountTokenForCredentialProviders gate (beta, on).
    serviceAccounts: config.featureGates?.KubeletServiceAccountTokenForCredentialProviders === false
      ? undefined
      : serviceAccountAccess(o.kubeClient, tokenManager),
  });
  const imageManager = new ImageManager({
    imageService,
    recorder,
    clock,
    serializeImagePulls: config.serializeImagePulls,
    maxParallelImagePulls: config.maxParallelImagePulls,
    registryPullQPS: config.registryPullQPS,
    registryBurst: config.registryBurst,
    // Set only while the KubeletEnsureSecretPulledImages gate is on (defaulting).
    recordsDirectory: config.imagePullCredentialsVerificationPolicy
      ? join(o.rootDirectory, "image_manager")
      : undefined,
    verificationPolicy: config.imagePullCredentialsVerificationPolicy as
      | CredentialVerificationPolicy
      | undefined,
    allowlist: config.preloadedImagesVerificationAllowlist,
    logger,
    pullingTimeRecorder: startupTracker,
    metrics: metrics?.image,
    credentialProviders,
  });
  const dns = new DnsConfigurer({
    clusterDNS: config.clusterDNS ?? [],
    clusterDomain: config.clusterDomain ?? "",
    resolvConf: config.resolvConf,
    recorder,
    nodeRef: nodeRef(o.nodeName),
    logger,
  });
  const podsDirectory = join(o.rootDirectory, "pods");
  const { kubeClient } = o;
  // ConfigMaps and Secrets of this node's pods, with the node's credentials (upstream
  // configMapManager and secretManager); a kubelet without an apiserver has none.
  const strategy = config.configMapAndSecretChangeDetectionStrategy ?? "Watch";
  const configMaps = kubeClient
    ? new ObjectManager<V1ConfigMap>({
      client: kubeClient,
      resource: "configmaps",
      strategy: strategy as "Watch" | "Cache" | "Get",
      clock,
      logger,
    })
    : undefined;
  const secrets = kubeClient
    ? new ObjectManager<V1Secret>({
      client: kubeClient,
      resource: "secrets",
      strategy: strategy as "Watch" | "Cache" | "Get",
      clock,
      logger,
    })
    : undefined;
  const serviceLister = kubeClient
    ? new ServiceLister({ client: kubeClient, clock, logger })
    : undefined;
  // Upstream builds its RuntimeClass manager only with an API client too.
  const runtimeClasses = kubeClient
    ? new RuntimeClassManager({ client: kubeClient, clock, logger })
    : undefined;
  const nodeAllocatable = () => o.getNode()?.status?.allocatable;
  const supportsRecursiveReadOnly = (pod: V1Pod) =>
    runtimeClassSupportsRecursiveReadOnlyMounts(pod, {
      runtimeClasses,
      handlers: o.runtimeHandlers?.() ?? [],
      logger,
    });
  const mounter = o.mounter ?? new Mounter();
  const volumeOptions: VolumeManagerOptions = {
    podsDirectory,
    plugins: o.volumePlugins ?? [
      ...probeVolumePlugins({
        mounter,
        configMaps,
        secrets,
        tokens: tokenManager,
        nodeAllocatable,
        logger,
        clock,
      }),
      new CsiVolumePlugin({
        drivers: o.csiDrivers ?? new CsiDrivers(),
        ...(kubeClient ? { client: kubeClient } : {}),
        nodeName: o.nodeName,
        rootDirectory: o.rootDirectory,
        podsDirectory,
        mounter,
        logger,
        volumeHealth: o.config.featureGates?.CSIVolumeHealth === true,
        tokens: tokenManager,
      }),
    ],
    recorder,
    logger,
    references: [configMaps, secrets].filter((m) => m !== undefined),
    metrics: metrics?.volume,
    clock,
    ...(kubeClient ? { client: kubeClient } : {}),
    nodeName: o.nodeName,
  };
  const volumeManager = (o.newVolumeManager ?? ((v) => new VolumeManager(v)))(volumeOptions);
  const podVolumes = (uid: string) => volumeManager.podVolumes(uid);
  const loopRef: { loop?: SyncLoop } = {};
  const prober = new ProberManager({
    runner: new Prober({ runtime, recorder, logger, clock }),
    // A host-network pod's IPs are the node's (upstream probes the API status' pod IP).
    getPodStatus: (uid) => {
      const status = podCache.get(uid).status;
      if (status.ips.length > 0 || !podManager.getPodByUID(uid)?.spec?.hostNetwork) return status;
      return { ...status, ips: [...o.nodeIPs] };
    },
    clock,
    logger,
    // Probe results reach the pod's worker through the sync loop, as upstream's channels.
    onUpdate: (_kind, podUID) => loopRef.loop?.pushProbeUpdate(podUID),
    startedInStatus: (uid, name) => {
      const status = statusManager.getPodStatus(uid);
      return [...status?.containerStatuses ?? [], ...status?.initContainerStatuses ?? []]
        .some((c) => c.name === name && c.started === true);
    },
  });
  // Claims are read from the apiserver; what was prepared is kept in `<root-dir>/dra_manager_state`.
  draRef.dra = new DraManager({
    clock,
    logger,
    metrics: metrics?.dra,
    kubeClient,
    nodeName: o.nodeName,
    stateDirectory: o.rootDirectory,
    activePods: () => syncerRef.syncer?.activePods() ?? [],
    sourcesReady: () => syncerRef.syncer !== undefined && o.sourcesReady(),
    featureGates: config.featureGates,
    // A device's health changed: the pods using it are synced, their status regenerated.
    onHealthChange: (uids) => loopRef.loop?.pushResourceHealthUpdate(uids),
  });
  const dra = draRef.dra;
  const podLevelResize = config.featureGates?.InPlacePodLevelResourcesVerticalScaling ?? true;
  const runtimeManager = new KubeRuntimeManager({
    runtime,
    imageService,
    imageManager,
    recorder,
    clock,
    logger,
    sandbox: {
      dns,
      podLogsDirectory: config.podLogsDir,
      cgroupParent: o.podCgroups ? (pod) => o.podCgroups!.cgroupParent(pod) : "",
      nodeHostname: o.hostname,
      clusterDomain: config.clusterDomain ?? "",
      cpuCFSQuota: config.cpuCFSQuota,
      cpuCFSQuotaPeriodMs: config.cpuCFSQuotaPeriod,
      cgroupV2: o.cgroupV2,
      singleProcessOOMKill: config.singleProcessOOMKill ?? !o.cgroupV2,
      logger,
    },
    podsDirectory,
    memoryCapacityBytes: o.memoryCapacityBytes,
    legacyContainerLogsDirectory: o.legacyContainerLogsDirectory,
    probeResults: prober,
    // Env from configMaps and secrets through their managers; none in standalone mode.
    envSource: kubeClient ? envSourceOf(configMaps, secrets) : undefined,
    hostIPs: o.nodeIPs,
    nodeAllocatable,
    kubeletMounts: new KubeletMounts({
      podsDirectory,
      podVolumes,
      logger,
      supportsRecursiveReadOnly,
    }),
    services: serviceLister,
    podVolumes,
    startupTracker,
    metrics,
    maxParallelSandboxStarts: o.maxParallelSandboxStarts,
    // Upstream newCrashLoopBackOff: the configured cap, and a first delay no longer than it.
    backOffMaxMs: config.crashLoopBackOff?.maxContainerRestartPeriod,
    backOffInitialMs: Math.min(
      10_000,
      config.crashLoopBackOff?.maxContainerRestartPeriod ?? 10_000,
    ),
    seccompDefault: o.seccompDefault,
    // Upstream's profile root is `<root-dir>/seccomp`; swap as memorySwap.swapBehavior says.
    seccompProfileRoot: join(o.rootDirectory, "seccomp"),
    swapBehavior: config.memorySwap?.swapBehavior,
    actuatedState: o.actuatedState,
    podCgroups: o.podCgroups,
    inPlacePodLevelResourcesVerticalScaling: podLevelResize,
    dra,
    devices: o.devices &&
      ((pod, container, signal) => o.devices!.runContainerOptions(pod, container, signal)),
    internalLifecycle: o.internalLifecycle,
    exclusiveCpus: o.exclusiveCpus,
    runtimeClasses,
    userNamespaces: o.userNamespaces,
  });
  const resizeConditions = new PodResizeConditions(clock, metrics);
  const allocation = new AllocationManager({
    state: o.allocatedState ?? ResourceState.inMemory(),
    // Resizes of Guaranteed pods the static policies pinned are Infeasible (upstream's gates
    // InPlacePodVerticalScalingExclusiveCPUs/Memory are off and refused here).
    resourcePolicies: {
      cpuManagerPolicy: config.cpuManagerPolicy ?? "none",
      memoryManagerPolicy: config.memoryManagerPolicy ?? "None",
    },
    conditions: resizeConditions,
    canAdmit: (pod, others, operation) => {
      const r = syncerRef.syncer?.canAdmit(pod, others, operation);
      return r ? { admit: false, ...r } : { admit: true };
    },
    getActivePods: () => syncerRef.syncer?.activePods() ?? [],
    getPodByUID: (uid) => podManager.getPodByUID(uid),
    triggerPodSync: (pod) => syncerRef.syncer?.handlePodSyncs([pod]),
    sourcesReady: o.sourcesReady,
    recorder,
    clock,
    logger,
    metrics,
    inPlacePodLevelResourcesVerticalScaling: podLevelResize,
  });
  const mirrorClient = o.kubeClient
    ? new MirrorClient({
      client: o.kubeClient,
      nodeName: o.nodeName,
      getNodeUID: () => o.getNode()?.metadata?.uid,
      logger,
    })
    : undefined;
  // Upstream registers the active deadline handler as both kinds of handler.
  const activeDeadline = new ActiveDeadlineHandler({
    clock,
    recorder,
    podStatus: (uid) => statusManager.getPodStatus(uid),
  });
  const syncer = new PodSyncer({
    nodeName: o.nodeName,
    clock,
    logger,
    recorder,
    podManager,
    podCache,
    runtime: runtimeManager,
    statusManager,
    reasonCache,
    mirrorClient,
    kubeClient: o.kubeClient,
    // Admission sees allocatable no lower than the devices already allocated (upstream
    // UpdatePluginResources): a restarted kubelet admits its running pods before their device
    // plugins register again.
    getNode: o.devices ? () => sanitizedNode(o.getNode(), o.devices!) : o.getNode,
    nodeIPs: o.nodeIPs,
    supportsRecursiveReadOnly,
    networkErrors: o.networkErrors,
    podsDirectory,
    runtimePodIds: () => pleg.podIds(),
    relist: (s) => pleg.relist(s),
    runtimeChanged: () => pleg.poke(),
    containersStarted: (uid, syncEnd, signal, sync) =>
      pleg.inspectPod(uid, { after: syncEnd, signal, sync }),
    resyncIntervalMs: config.syncFrequency,
    signal: o.signal,
    containersToKeep: o.containersToKeep,
    prober,
    volumes: volumeManager,
    dra,
    allocatedResourcesStatus: (pod, name) => [
      ...(o.devices?.allocatedResourcesStatus(pod, name) ?? []),
      ...dra.allocatedResourcesStatus(pod, name),
    ],
    admitHandlers: o.admitHandlers,
    resourceAllocator: o.resourceAllocator,
    syncLoopHandlers: [activeDeadline],
    syncHandlers: [activeDeadline],
    podCgroups: o.podCgroups,
    startupTracker,
    metrics,
    allocation,
    resizeConditions,
    userNamespaces: o.userNamespaces,
  });
  syncerRef.syncer = syncer;
  const loop = new SyncLoop({
    handler: syncer,
    pleg,
    runtimeErrors: o.runtimeErrors,
    sourcesReady: o.sourcesReady,
    clock,
    logger,
    resyncIntervalMs: config.syncFrequency,
  });
  loopRef.loop = loop;
  return {
    podCache,
    pleg,
    podManager,
    reasonCache,
    imageManager,
    statusManager,
    runtimeManager,
    syncer,
    allocation,
    loop,
    prober,
    volumeManager,
    tokenManager,
    serviceLister,
    runtimeClasses,
    startupTracker,
    dra,
    run: (signal) => {
      signal.addEventListener("abort", () => {
        configMaps?.close();
        secrets?.close();
      }, { once: true });
      const parts = [
        running("PLEG", pleg.run(signal)),
        running("status manager", statusManager.run(signal)),
        running("prober", prober.run(signal)),
        running("sync loop", loop.run(signal)),
        running("token clean-up", runTokenCleanup(tokenManager, clock, signal)),
        running("allocation", allocation.run(signal)),
        running(
          "volume reconstruction",
          volumeManager.reconstruct(signal).catch((e) => {
            if (!signal.aborted) logger.error(e, "Failed to reconstruct the volumes on disk");
          }),
        ),
      ];
      if (serviceLister) parts.push(running("Service lister", serviceLister.run(signal)));
      if (runtimeClasses) parts.push(running("RuntimeClass manager", runtimeClasses.run(signal)));
      return parts;
    },
  };
}

/** Drops expired tokens every minute (upstream token manager's cleanup goroutine). */
async function runTokenCleanup(
  tokens: TokenManager,
  clock: Clock,
  signal: AbortSignal,
): Promise<void> {
  while (!signal.aborted) {
    try {
      await clock.sleep(TOKEN_GC_PERIOD_MS, signal);
    } catch {
      return;
    }
    tokens.cleanup();
  }
}

/** The node with allocatable as the device manager sanitizes it for admission. */
function sanitizedNode(
  node: V1Node | undefined,
  devices: Pick<DeviceManager, "sanitizeAllocatable">,
): V1Node | undefined {
  if (!node?.status) return node;
  const allocatable = devices.sanitizeAllocatable(node.status.allocatable ?? {});
  return { ...node, status: { ...node.status, allocatable } };
}
