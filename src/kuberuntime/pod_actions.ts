/**
 * @module
 * computePodActions: what one SyncPod must do to bring the runtime's view of a pod to its spec
 * (kill it, make a new sandbox, which init containers and sidecars and which regular containers
 * to start, which containers to kill and why, and which to remove when the pod restarts all its
 * containers in place). Pure: it reads the pod, the runtime status and the probe results only.
 * Private to `kuberuntime_manager.ts`, which re-exports it. Corresponds to upstream
 * `computePodActions` and `getContainersToReset` (kuberuntime_manager.go),
 * `computeInitContainerActions` and `hasAnyRegularContainerCreated` (kuberuntime_container.go),
 * `PodSandboxChanged` (kuberuntime/util) and `ShouldContainerBeRestarted` (container/helpers.go),
 * with SidecarContainers GA, LegacySidecarContainers off, and ContainerRestartRules and
 * RestartAllContainersOnContainerExits on, as in v1.36.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { hashContainer } from "./labels.ts";
import type { Logger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import {
  type ContainerKillReason,
  findContainerStatus,
  type KubeContainerStatus,
  toKubeContainerStatuses,
} from "./kuberuntime_container.ts";
import {
  containerShouldRestart,
  findMatchingContainerRestartRule,
  isRestartableInitContainer,
} from "../pod/podutil.ts";
import { podSandboxChanged } from "./sandbox_changed.ts";
import {
  type ActuatedLookup,
  type ActuatedPodLevelLookup,
  computeContainerResize,
  computePodLevelResize,
  emptyResizeActions,
  type ResizeActions,
} from "./pod_resize.ts";

/** A container to kill, and why (upstream containerToKillInfo). */
export interface ContainerToKill {
  readonly name: string;
  readonly container?: V1Container;
  readonly message: string;
  readonly reason: ContainerKillReason;
}

/** A container to remove for RestartAllContainers (upstream containerToRemoveInfo). */
export interface ContainerToRemove {
  readonly containerId: string;
  readonly container: V1Container;
  /** It is not exited: stop it (with no grace period) before removing it. */
  readonly kill: boolean;
}

/** What one SyncPod must do (upstream podActions). */
export interface PodActions {
  /** Stop every container and the sandbox. */
  killPod: boolean;
  /** Make a new sandbox (after killing the old one, purging init containers). */
  createSandbox: boolean;
  /** The current sandbox, to start containers in; "" when there is none. */
  sandboxID: string;
  /** The attempt number of the sandbox to create. */
  attempt: number;
  /** Unused since v1.33 (LegacySidecarContainers off): always undefined; kept for parity. */
  nextInitContainerToStart?: V1Container;
  /** Indexes into spec.initContainers, in start order. */
  initContainersToStart: number[];
  /** Indexes into spec.containers, in start order. */
  containersToStart: number[];
  /** Indexes into spec.ephemeralContainers: those never started (they are never restarted). */
  ephemeralContainersToStart: number[];
  /** By container id. */
  containersToKill: Map<string, ContainerToKill>;
  /** Running containers to resize in place, and whether the pod cgroup follows. */
  resize: ResizeActions;
  /**
   * Every instance of every init and regular container, in removal order, when the pod
   * restarts all its containers in place: regular containers, then init containers, then those
   * that exited into RestartAllContainers (regular, then init). Empty otherwise.
   */
  containersToReset: ContainerToRemove[];
}

/** A probe's last result (upstream proberesults.Result). */
export type ProbeResult = "Success" | "Failure" | "Unknown";

/** The prober's results by container id; undefined when the probe has not run yet. */
export interface ProbeResults {
  liveness(containerId: string): ProbeResult | undefined;
  startup(containerId: string): ProbeResult | undefined;
}

/** Options of {@link computePodActions}. */
export interface ComputePodActionsOptions {
  /** Probe results; without them no probe has run, as right after a kubelet start. */
  readonly probeResults?: ProbeResults;
  /**
   * What the runtime was last told of each container's resources (the actuated record), to
   * resize running containers in place. @default none: running containers are not resized
   */
  readonly actuated?: ActuatedLookup;
  /**
   * The actuated pod-level resources (InPlacePodLevelResourcesVerticalScaling): container
   * limits are compared bounded by the pod's, and a pod-level change resizes the pod cgroup.
   * @default none: pod-level resources are not resized
   */
  readonly actuatedPodLevel?: ActuatedPodLevelLookup;
  /** For upstream's "Missing actuated pod level resource record". @default none */
  readonly logger?: Logger;
  /**
   * The pod's API status says AllContainersRestarting: remove every container, keeping the
   * sandbox, so that all start again (upstream SyncPod's restartAllContainers). @default false
   */
  readonly restartAllContainers?: boolean;
}

const NO_PROBES: ProbeResults = { liveness: () => undefined, startup: () => undefined };

function shouldRestartOnFailure(pod: V1Pod): boolean {
  return pod.spec?.restartPolicy !== "Never";
}

/**
 * upstream ShouldContainerBeRestarted: an exited container restarts as its restart rules, its
 * own restartPolicy and then the pod's say.
 */
export function shouldContainerBeRestarted(
  pod: V1Pod,
  container: V1Container,
  status: KubeContainerStatus | undefined,
): boolean {
  if (pod.metadata?.deletionTimestamp != null) return false;
  if (!status) return true;
  if (status.state === "running") return false;
  if (status.state === "unknown" || status.state === "created") return true;
  return containerShouldRestart(container, pod.spec, status.exitCode);
}

/** upstream isInitContainerFailed. */
function isInitContainerFailed(s: KubeContainerStatus): boolean {
  return s.reason === "OOMKilled" || (s.state === "exited" && s.exitCode !== 0) ||
    s.state === "unknown";
}

function hasAnyRegularContainerCreated(
  pod: V1Pod,
  statuses: readonly KubeContainerStatus[],
): boolean {
  return (pod.spec?.containers ?? []).some((c) => {
    const s = findContainerStatus(statuses, c.name);
    return s !== undefined && s.state !== "unknown";
  });
}

/** Computes the actions of one SyncPod; see the module documentation. */
export function computePodActions(
  pod: V1Pod,
  podStatus: PodStatus,
  opts: ComputePodActionsOptions = {},
): PodActions {
  const statuses = toKubeContainerStatuses(podStatus);
  const probes = opts.probeResults ?? NO_PROBES;
  const sandbox = podSandboxChanged(pod, podStatus);
  const changes: PodActions = {
    killPod: sandbox.changed,
    createSandbox: sandbox.changed,
    sandboxID: sandbox.sandboxId,
    attempt: sandbox.attempt,
    initContainersToStart: [],
    containersToStart: [],
    ephemeralContainersToStart: [],
    containersToKill: new Map(),
    resize: emptyResizeActions(),
    containersToReset: [],
  };
  const containers = pod.spec?.containers ?? [];

  if (opts.restartAllContainers) {
    // Everything goes, the containers that triggered the restart last; the next sync starts
    // the pod's containers again in the same sandbox, init containers first.
    const inits = getContainersToReset(pod.spec?.initContainers ?? [], statuses);
    const regular = getContainersToReset(containers, statuses);
    changes.containersToReset = [
      ...regular.targets,
      ...inits.targets,
      ...regular.sources,
      ...inits.sources,
    ];
    return changes;
  }

  if (sandbox.changed) {
    // A pod that must not restart, whose containers have run, is only killed.
    if (!shouldRestartOnFailure(pod) && sandbox.attempt !== 0 && statuses.length !== 0) {
      changes.createSandbox = false;
      return changes;
    }
    // Containers that succeeded do not run again when they restart only on failure (their own
    // restartPolicy, else the pod's); the others, Never ones included, all start again.
    const toStart = containers.flatMap((c, i) => {
      const s = findContainerStatus(statuses, c.name);
      const succeeded = s?.state === "exited" && s.exitCode === 0;
      const runOnce = (c.restartPolicy ?? pod.spec?.restartPolicy) === "OnFailure";
      return runOnce && succeeded ? [] : [i];
    });
    if (toStart.length === 0 && hasAnyRegularContainerCreated(pod, statuses)) {
      changes.createSandbox = false;
      return changes;
    }
    if ((pod.spec?.initContainers?.length ?? 0) !== 0) {
      changes.initContainersToStart = [0];
      return changes;
    }
    changes.containersToStart = toStart;
    return changes;
  }

  // Ephemeral containers may start before initialization completes; one that ever ran (any
  // status of its name) is never started again.
  (pod.spec?.ephemeralContainers ?? []).forEach((c, i) => {
    if (!findContainerStatus(statuses, c.name)) changes.ephemeralContainersToStart.push(i);
  });

  const initialized = computeInitContainerActions(pod, statuses, changes, probes, opts);
  if (changes.killPod || !initialized) return changes;

  let keepCount = 0;
  containers.forEach((container, idx) => {
    const status = findContainerStatus(statuses, container.name);
    killOlderRunning(statuses, container, status, changes);
    if (!status || status.state !== "running") {
      if (shouldContainerBeRestarted(pod, container, status)) {
        changes.containersToStart.push(idx);
        if (status?.state === "unknown") {
          // It may still run: kill it first so that two never run at once.
          changes.containersToKill.set(status.id, {
            name: status.name,
            container,
            message: `Container is in "unknown" state, try killing it before restart`,
            reason: "Unknown",
          });
        }
      }
      return;
    }
    let message: string;
    let reason: ContainerKillReason = "";
    // A running container has no exit code for its rules: only its restartPolicy counts.
    let restart = container.restartPolicy !== undefined
      ? container.restartPolicy !== "Never"
      : shouldRestartOnFailure(pod);
    if (hashContainer(container) !== status.hash) {
      message = `Container ${container.name} definition changed`;
      // A changed spec restarts whatever the restart policy.
      restart = true;
    } else if (probes.liveness(status.id) === "Failure") {
      message = `Container ${container.name} failed liveness probe`;
      reason = "LivenessProbe";
    } else if (probes.startup(status.id) === "Failure") {
      message = `Container ${container.name} failed startup probe`;
      reason = "StartupProbe";
    } else if (
      opts.actuated &&
      computeContainerResize(
          pod,
          container,
          status,
          opts.actuated,
          changes.resize,
          opts.actuatedPodLevel,
        ) === "restart"
    ) {
      // Its resizePolicy asks for a restart, whatever the pod's restart policy.
      changes.containersToKill.set(status.id, {
        name: status.name,
        container,
        message: `Container ${container.name} resize requires restart`,
        reason: "",
      });
      changes.containersToStart.push(idx);
      return;
    } else {
      keepCount++;
      return;
    }
    if (restart) {
      message = `${message}, will be restarted`;
      changes.containersToStart.push(idx);
    }
    changes.containersToKill.set(status.id, { name: status.name, container, message, reason });
  });

  if (keepCount === 0 && changes.containersToStart.length === 0) {
    changes.killPod = true;
    // Sidecars alone must not keep the pod alive.
    changes.initContainersToStart = [];
  }
  if (opts.actuatedPodLevel) {
    changes.resize.updatePodLevelResources = computePodLevelResize(
      pod,
      opts.actuatedPodLevel,
      opts.logger,
    );
  }
  return changes;
}

/**
 * Not upstream's: an older container of the same name that still runs beside the newest (a
 * StartContainer that was in flight when the kubelet died, and that the runtime finished after
 * the restarted kubelet had started the next attempt) is killed, so that two never run at once.
 */
function killOlderRunning(
  statuses: readonly KubeContainerStatus[],
  container: V1Container,
  newest: KubeContainerStatus | undefined,
  changes: PodActions,
): void {
  for (const s of statuses) {
    if (s.name !== container.name || s === newest || s.state !== "running") continue;
    const newer = newest ? ` (${newest.id.slice(0, 12)})` : "";
    changes.containersToKill.set(s.id, {
      name: s.name,
      container,
      message: `Container ${s.name} has a newer instance${newer}; the older one is killed ` +
        "so that two never run at once",
      reason: "",
    });
  }
}

/**
 * upstream computeInitContainerActions: starts the first init container not yet started, the
 * next one once its predecessor completed (or, for a sidecar, started), keeps sidecars running
 * and restarts them; returns whether the pod is initialized. A failed init container under
 * restartPolicy Never kills the pod.
 */
function computeInitContainerActions(
  pod: V1Pod,
  statuses: readonly KubeContainerStatus[],
  changes: PodActions,
  probes: ProbeResults,
  opts: ComputePodActionsOptions,
): boolean {
  const { actuated, actuatedPodLevel } = opts;
  const inits = pod.spec?.initContainers ?? [];
  if (inits.length === 0) return true;

  // A regular container created or running means initialization finished in the past, even if
  // the init containers have since been removed. Exited ones do not count: after a node reboot
  // every container is exited and the new sandbox starts from scratch.
  let podHasInitialized = (pod.spec?.containers ?? []).some((c) => {
    const s = findContainerStatus(statuses, c.name);
    return s?.state === "created" || s?.state === "running";
  });
  let isPreviouslyInitialized = podHasInitialized;
  const restartOnFailure = shouldRestartOnFailure(pod);
  const toStart: number[] = [];
  const kill = (s: KubeContainerStatus, c: V1Container, message: string, r: ContainerKillReason) =>
    changes.containersToKill.set(s.id, { name: c.name, container: c, message, reason: r });

  // Backwards: completed init containers may have been removed, so the last one seen decides.
  for (let i = inits.length - 1; i >= 0; i--) {
    const container = inits[i]!;
    const sidecar = isRestartableInitContainer(container);
    const status = findContainerStatus(statuses, container.name);
    if (!status) {
      if (isPreviouslyInitialized && sidecar) toStart.push(i);
      continue;
    }
    if (isPreviouslyInitialized && !sidecar) continue;

    switch (status.state) {
      case "created":
        // Created but never started: the start most likely failed; try again.
        toStart.push(i);
        break;
      case "running": {
        if (!sidecar) {
          // A running init container is resized in place (it may not restart for it).
          if (actuated) {
            computeContainerResize(
              pod,
              container,
              status,
              actuated,
              changes.resize,
              actuatedPodLevel,
            );
          }
          break;
        }
        if (container.startupProbe) {
          const startup = probes.startup(status.id);
          if (startup === undefined) break;
          if (startup !== "Success") {
            if (startup === "Failure") {
              kill(
                status,
                container,
                `Init container ${container.name} failed startup probe`,
                "StartupProbe",
              );
              toStart.push(i);
            }
            break;
          }
        }
        if (i === inits.length - 1) podHasInitialized = true;
        else if (!isPreviouslyInitialized) toStart.push(i + 1);
        if (hashContainer(container) !== status.hash) {
          kill(status, container, `Init container ${container.name} definition changed`, "");
          toStart.push(i);
          break;
        }
        if (container.livenessProbe) {
          const liveness = probes.liveness(status.id);
          if (liveness === undefined) break;
          if (liveness === "Failure") {
            kill(
              status,
              container,
              `Init container ${container.name} failed liveness probe`,
              "LivenessProbe",
            );
            toStart.push(i);
            break;
          }
        }
        if (
          actuated &&
          computeContainerResize(
              pod,
              container,
              status,
              actuated,
              changes.resize,
              actuatedPodLevel,
            ) === "restart"
        ) {
          kill(status, container, `Container ${container.name} resize requires restart`, "");
          toStart.push(i);
        }
        break;
      }
      case "exited":
        if (sidecar) {
          toStart.push(i);
        } else if (isInitContainerFailed(status)) {
          if (!shouldContainerBeRestarted(pod, container, status)) {
            changes.killPod = true;
            changes.initContainersToStart = [];
            return false;
          }
          toStart.push(i);
        } else if (i === inits.length - 1) {
          podHasInitialized = true;
        } else {
          toStart.push(i + 1);
        }
        break;
      default: {
        const message = `Init container is in "unknown" state, try killing it before restart`;
        // No exit code for the rules: only the container's restartPolicy counts.
        const restart = container.restartPolicy !== undefined
          ? container.restartPolicy !== "Never"
          : restartOnFailure;
        if (!sidecar && !restart) {
          changes.killPod = true;
          changes.initContainersToStart = [];
          return false;
        }
        kill(status, container, message, "Unknown");
        toStart.push(i);
      }
    }
    isPreviouslyInitialized = true;
  }
  if (!isPreviouslyInitialized) toStart.push(0);
  changes.initContainersToStart = toStart.reverse();
  return podHasInitialized;
}

/**
 * upstream getContainersToReset: every instance of the containers, split into the sources (exited
 * with a code whose first matching rule is RestartAllContainers) and the targets (the rest; those
 * not exited are killed first).
 */
function getContainersToReset(
  containers: readonly V1Container[],
  statuses: readonly KubeContainerStatus[],
): { sources: ContainerToRemove[]; targets: ContainerToRemove[] } {
  const sources: ContainerToRemove[] = [];
  const targets: ContainerToRemove[] = [];
  for (const container of containers) {
    for (const s of statuses) {
      if (s.name !== container.name) continue;
      if (s.state !== "exited") {
        targets.push({ containerId: s.id, container, kill: true });
      } else if (
        findMatchingContainerRestartRule(container, s.exitCode)?.action === "RestartAllContainers"
      ) {
        sources.push({ containerId: s.id, container, kill: false });
      } else {
        targets.push({ containerId: s.id, container, kill: false });
      }
    }
  }
  return { sources, targets };
}
