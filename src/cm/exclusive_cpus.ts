/**
 * @module
 * Which pods and containers run on CPUs of their own, for what must not throttle them: with
 * DisableCPUQuotaWithExclusiveCPUs (deprecated, on by default in v1.36) a container that the CPU
 * manager pinned gets no CFS quota, nor does the sandbox or the pod cgroup of a pod with such a
 * container (a quota on pinned CPUs only throttles work that no other pod can take). One
 * {@link ExclusiveCpus} serves the container config, the sandbox config, the pod cgroup and the
 * in-place resize. Corresponds to upstream `PodHasExclusiveCPUs` and `ContainerHasExclusiveCPUs`
 * of `pkg/kubelet/cm/container_manager_linux.go` and their helpers in `container_manager.go`,
 * without the alpha PodLevelResourceManagers path (that gate is refused).
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";

/** Whether a pod, or one of its containers, holds exclusive CPUs whose quota is lifted. */
export interface ExclusiveCpus {
  /** upstream PodHasExclusiveCPUs: an init or regular container of the pod has exclusive CPUs. */
  pod(pod: V1Pod): boolean;
  /** upstream ContainerHasExclusiveCPUs. */
  container(pod: V1Pod, container: V1Container): boolean;
}

/** What {@link newExclusiveCpus} needs. */
export interface ExclusiveCpusOptions {
  /** The CPU manager's exclusive CPUs of a container (upstream GetExclusiveCPUs); [] for none. */
  readonly exclusiveCpus: (podUID: string, container: string) => readonly number[];
  /** The kubelet's featureGates; only DisableCPUQuotaWithExclusiveCPUs is read. */
  readonly featureGates?: Readonly<Record<string, boolean>>;
}

/**
 * The pods and containers whose CFS quota is lifted: those with exclusive CPUs, or none at all
 * (undefined) when featureGates.DisableCPUQuotaWithExclusiveCPUs is false, so that every limit is
 * enforced as before the gate.
 */
export function newExclusiveCpus(o: ExclusiveCpusOptions): ExclusiveCpus | undefined {
  if (!(o.featureGates?.DisableCPUQuotaWithExclusiveCPUs ?? true)) return undefined;
  const container = (pod: V1Pod, c: V1Container) =>
    o.exclusiveCpus(pod.metadata?.uid ?? "", c.name).length > 0;
  return {
    container,
    pod: (pod) =>
      [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].some((c) =>
        container(pod, c)
      ),
  };
}
