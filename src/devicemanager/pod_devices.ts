/**
 * @module
 * The devices each pod's containers were given, by resource: the device IDs (grouped by the
 * NUMA node the plugin reported them on, {@link NODE_WITHOUT_TOPOLOGY} for none) and the
 * plugin's Allocate answer for that container, from which the container's run options (env,
 * mounts, device nodes, annotations, CDI devices) are made. What the checkpoint keeps.
 * Corresponds to upstream `pkg/kubelet/cm/devicemanager/pod_devices.go`.
 */

import type { ContainerAllocateResponse, Device } from "../../proto/deviceplugin/v1beta1/api.ts";
import type { Logger } from "../klog/klog.ts";

/** The NUMA node key of devices reported without topology (upstream nodeWithoutTopology). */
export const NODE_WITHOUT_TOPOLOGY = -1;

/** Device IDs by NUMA node (upstream checkpoint.DevicesPerNUMA). */
export type DevicesPerNuma = Map<number, string[]>;

/** The union of a {@link DevicesPerNuma}'s IDs. */
export function deviceSet(devices: DevicesPerNuma): Set<string> {
  const out = new Set<string>();
  for (const ids of devices.values()) for (const id of ids) out.add(id);
  return out;
}

/** One container's devices of one resource and the plugin's answer for them. */
export interface DeviceAllocation {
  readonly deviceIds: DevicesPerNuma;
  readonly allocResp: ContainerAllocateResponse;
}

/** What a container needs to use its devices (upstream DeviceRunContainerOptions). */
export interface DeviceRunContainerOptions {
  readonly envs: { name: string; value: string }[];
  readonly mounts: { containerPath: string; hostPath: string; readOnly: boolean }[];
  readonly devices: { hostPath: string; containerPath: string; permissions: string }[];
  readonly annotations: { name: string; value: string }[];
  readonly cdiDevices: string[];
}

/** Devices by ID (topology only), by resource (upstream ResourceDeviceInstances). */
export type ResourceDeviceInstances = Map<string, Map<string, Pick<Device, "topology">>>;

/** Pod UID -> container name -> resource -> allocation (upstream podDevices). */
export class PodDevices {
  readonly #devs = new Map<string, Map<string, Map<string, DeviceAllocation>>>();

  /** UIDs of the pods with devices. */
  pods(): Set<string> {
    return new Set(this.#devs.keys());
  }

  hasPod(podUID: string): boolean {
    return this.#devs.has(podUID);
  }

  insert(
    podUID: string,
    container: string,
    resource: string,
    deviceIds: DevicesPerNuma,
    allocResp: ContainerAllocateResponse,
  ): void {
    let containers = this.#devs.get(podUID);
    if (!containers) this.#devs.set(podUID, containers = new Map());
    let resources = containers.get(container);
    if (!resources) containers.set(container, resources = new Map());
    resources.set(resource, { deviceIds, allocResp });
  }

  delete(podUIDs: Iterable<string>): void {
    for (const uid of podUIDs) this.#devs.delete(uid);
  }

  /** The container's devices of `resource`; undefined when it has no allocation of it. */
  containerDevices(podUID: string, container: string, resource: string): Set<string> | undefined {
    const a = this.#devs.get(podUID)?.get(container)?.get(resource);
    return a ? deviceSet(a.deviceIds) : undefined;
  }

  /**
   * The pods a container of which holds one of `ids` of `resource` (upstream
   * getPodAndContainerForDevice, for every device and every pod holding it).
   */
  podsHolding(resource: string, ids: ReadonlySet<string>): Set<string> {
    const out = new Set<string>();
    for (const [podUID, containers] of this.#devs) {
      for (const resources of containers.values()) {
        const a = resources.get(resource);
        if (a && [...deviceSet(a.deviceIds)].some((id) => ids.has(id))) out.add(podUID);
      }
    }
    return out;
  }

  /** Adds the container's devices to `into` (upstream addContainerAllocatedResources). */
  addContainerAllocated(podUID: string, container: string, into: Map<string, Set<string>>): void {
    for (const [resource, a] of this.#devs.get(podUID)?.get(container) ?? []) {
      const set = into.get(resource) ?? new Set();
      for (const id of deviceSet(a.deviceIds)) set.add(id);
      into.set(resource, set);
    }
  }

  /** Takes the container's devices out of `from` (upstream removeContainerAllocatedResources). */
  removeContainerAllocated(
    podUID: string,
    container: string,
    from: Map<string, Set<string>>,
  ): void {
    for (const [resource, a] of this.#devs.get(podUID)?.get(container) ?? []) {
      const set = from.get(resource);
      if (!set) continue;
      for (const id of deviceSet(a.deviceIds)) set.delete(id);
    }
  }

  /** Every allocated device by resource (upstream devices()). */
  devices(): Map<string, Set<string>> {
    const out = new Map<string, Set<string>>();
    for (const containers of this.#devs.values()) {
      for (const resources of containers.values()) {
        for (const [resource, a] of resources) {
          const set = out.get(resource) ?? new Set();
          for (const id of deviceSet(a.deviceIds)) set.add(id);
          out.set(resource, set);
        }
      }
    }
    return out;
  }

  /** Every allocation, for the checkpoint. */
  *entries(): Generator<
    { podUID: string; containerName: string; resourceName: string } & DeviceAllocation
  > {
    for (const [podUID, containers] of this.#devs) {
      for (const [containerName, resources] of containers) {
        for (const [resourceName, a] of resources) {
          yield { podUID, containerName, resourceName, ...a };
        }
      }
    }
  }

  /**
   * The container's run options from its allocations (upstream deviceRunContainerOptions): the
   * first resource to set an env, device, mount or annotation wins; a conflicting later value is
   * logged. Undefined when the container has no devices.
   */
  runContainerOptions(
    podUID: string,
    container: string,
    logger: Logger,
  ): DeviceRunContainerOptions | undefined {
    const resources = this.#devs.get(podUID)?.get(container);
    if (!resources) return undefined;
    const opts: DeviceRunContainerOptions = {
      envs: [],
      mounts: [],
      devices: [],
      annotations: [],
      cdiDevices: [],
    };
    const envs = new Map<string, string>();
    const devs = new Map<string, string>();
    const mounts = new Map<string, string>();
    const annotations = new Map<string, string>();
    const cdi = new Set<string>();
    for (const { allocResp: resp } of resources.values()) {
      for (const [name, value] of Object.entries(resp.envs)) {
        const had = envs.get(name);
        if (had !== undefined) {
          if (had !== value) {
            logger.error(null, "Environment variable has conflicting setting", {
              envKey: name,
              expected: value,
              got: had,
            });
          }
          continue;
        }
        envs.set(name, value);
        opts.envs.push({ name, value });
      }
      for (const d of resp.devices) {
        const had = devs.get(d.containerPath);
        if (had !== undefined) {
          if (had !== d.hostPath) {
            logger.error(null, "Container device has conflicting mapping host devices", {
              containerPath: d.containerPath,
              got: had,
              expected: d.hostPath,
            });
          }
          continue;
        }
        devs.set(d.containerPath, d.hostPath);
        opts.devices.push({
          hostPath: d.hostPath,
          containerPath: d.containerPath,
          permissions: d.permissions,
        });
      }
      for (const m of resp.mounts) {
        const had = mounts.get(m.containerPath);
        if (had !== undefined) {
          if (had !== m.hostPath) {
            logger.error(null, "Container mount has conflicting mapping host mounts", {
              containerPath: m.containerPath,
              conflictingPath: had,
              hostPath: m.hostPath,
            });
          }
          continue;
        }
        mounts.set(m.containerPath, m.hostPath);
        opts.mounts.push({
          containerPath: m.containerPath,
          hostPath: m.hostPath,
          readOnly: m.readOnly,
        });
      }
      for (const [name, value] of Object.entries(resp.annotations)) {
        const had = annotations.get(name);
        if (had !== undefined) {
          if (had !== value) {
            logger.error(null, "Annotation has conflicting setting", {
              annotationKey: name,
              expected: had,
              got: value,
            });
          }
          continue;
        }
        annotations.set(name, value);
        opts.annotations.push({ name, value });
      }
      for (const d of resp.cdiDevices) {
        if (cdi.has(d.name)) continue;
        cdi.add(d.name);
        opts.cdiDevices.push(d.name);
      }
    }
    return opts;
  }

  /**
   * The container's devices by resource, each with the NUMA nodes it was allocated on (upstream
   * getContainerDevices, for the pod resources API); undefined when it has none.
   */
  containerDeviceInstances(podUID: string, container: string): ResourceDeviceInstances | undefined {
    const resources = this.#devs.get(podUID)?.get(container);
    if (!resources) return undefined;
    const out: ResourceDeviceInstances = new Map();
    for (const [resource, a] of resources) {
      if (a.deviceIds.size === 0) continue;
      const byId = new Map<string, Pick<Device, "topology">>();
      for (const [numa, ids] of a.deviceIds) {
        for (const id of ids) {
          if (numa === NODE_WITHOUT_TOPOLOGY) {
            byId.set(id, { topology: undefined });
            continue;
          }
          const nodes = [{ ID: BigInt(numa) }, ...(byId.get(id)?.topology?.nodes ?? [])];
          byId.set(id, { topology: { nodes } });
        }
      }
      out.set(resource, byId);
    }
    return out;
  }
}
