/**
 * @module
 * Pod sandboxes of the fake CRI runtime: the record kept per sandbox, its CRI messages
 * (PodSandbox, PodSandboxStatus), the ListPodSandbox filter, the pod IP pool, and the ids of
 * sandboxes and containers (containerd's: 64 hex digits, found by unique prefix). Private to
 * `fake_runtime_service.ts`; upstream's counterpart is the sandbox half of
 * `cri-api/pkg/apis/testing/fake_runtime_service.go`, shaped after containerd's sandbox store.
 */

import * as api from "../../proto/runtime/v1/api.ts";

/** What the fake keeps of one sandbox. */
export interface FakeSandbox {
  /** 64 hex digits, as containerd's. */
  readonly id: string;
  /** containerd's reserved name: `<name>_<namespace>_<uid>_<attempt>`. */
  readonly name: string;
  readonly config: api.PodSandboxConfig;
  readonly runtimeHandler: string;
  readonly createdAt: bigint;
  state: api.PodSandboxState;
  /** "" for host-network pods. */
  readonly ip: string;
  /** Ids of the sandbox's containers, for O(1) per-pod work. */
  readonly containers: Set<string>;
  /** As last set by UpdatePodSandboxResources (or the config). */
  overhead: api.LinuxContainerResources | undefined;
  resources: api.LinuxContainerResources | undefined;
}

/** A new sandbox or container id: 64 random hex digits, as containerd's. */
export function newId(): string {
  let s = "";
  for (const b of crypto.getRandomValues(new Uint8Array(32))) s += b.toString(16).padStart(2, "0");
  return s;
}

/** Finds by full id in O(1), else by unique prefix as containerd's truncindex does. */
export function lookup<T>(byId: ReadonlyMap<string, T>, id: string): T | undefined {
  const hit = byId.get(id);
  if (hit || id === "" || id.length >= 64) return hit;
  let found: T | undefined;
  for (const [k, v] of byId) {
    if (!k.startsWith(id)) continue;
    if (found) return undefined; // ambiguous
    found = v;
  }
  return found;
}

/** containerd's sandbox name, reserved while the sandbox exists. */
export function sandboxName(m: api.PodSandboxMetadata): string {
  return `${m.name}_${m.namespace}_${m.uid}_${m.attempt}`;
}

/** True when the sandbox shares the node's network namespace. */
export function isHostNetwork(config: api.PodSandboxConfig): boolean {
  return config.linux?.securityContext?.namespaceOptions?.network === api.NamespaceMode.NODE;
}

export function toPodSandbox(sb: FakeSandbox): api.PodSandbox {
  return {
    id: sb.id,
    metadata: sb.config.metadata,
    state: sb.state,
    createdAt: sb.createdAt,
    labels: sb.config.labels,
    annotations: sb.config.annotations,
    runtimeHandler: sb.runtimeHandler,
  };
}

export function toSandboxStatus(sb: FakeSandbox): api.PodSandboxStatus {
  return {
    id: sb.id,
    metadata: sb.config.metadata,
    state: sb.state,
    createdAt: sb.createdAt,
    // containerd reports the network status with an empty IP for host-network pods.
    network: { ip: sb.ip, additionalIps: [] },
    linux: { namespaces: { options: sb.config.linux?.securityContext?.namespaceOptions } },
    labels: sb.config.labels,
    annotations: sb.config.annotations,
    runtimeHandler: sb.runtimeHandler,
  };
}

/** True when every label of `selector` is on `labels` with the same value. */
export function labelsMatch(
  labels: { readonly [k: string]: string },
  selector: { readonly [k: string]: string } | undefined,
): boolean {
  if (!selector) return true;
  for (const k in selector) if (labels[k] !== selector[k]) return false;
  return true;
}

export function sandboxMatches(sb: FakeSandbox, f: api.PodSandboxFilter | undefined): boolean {
  if (!f) return true;
  if (f.state && f.state.state !== sb.state) return false;
  return labelsMatch(sb.config.labels, f.labelSelector);
}

/**
 * Pod IPs from 10.244.0.0/16 (10.244.0.1 is the bridge), handed out in order and reused once
 * the sandbox that held one is removed.
 */
export class IpPool {
  #next = 2;
  readonly #free: number[] = [];

  /** The next free address, or undefined when all 65533 are taken. */
  allocate(): string | undefined {
    const n = this.#free.pop() ?? (this.#next <= 0xfffe ? this.#next++ : undefined);
    return n === undefined ? undefined : `10.244.${n >> 8}.${n & 0xff}`;
  }

  release(ip: string): void {
    const m = /^10\.244\.(\d+)\.(\d+)$/.exec(ip);
    if (m) this.#free.push(Number(m[1]) * 256 + Number(m[2]));
  }
}
