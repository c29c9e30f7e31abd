/**
 * @module
 * FakeRuntimeService: an in-memory CRI RuntimeService (pod sandboxes and containers) with one
 * method per RPC, taking and returning the generated messages and failing with
 * {@link FakeRuntimeError} (a gRPC code and containerd's wording); its `stats` answer the stats
 * RPCs and its `images` are the ImageService. `fake_remote_runtime.ts` serves them over a unix
 * socket. Everything is
 * synchronous and O(1) per pod — no timers — so tests and density benchmarks drive container
 * lifetimes themselves: {@link FakeRuntimeService.exitContainer}, or a per-container
 * {@link ContainerBehaviour} chosen by `onCreate`. Corresponds to upstream
 * `cri-api/pkg/apis/testing/fake_runtime_service.go`, with containerd's states, codes and
 * messages wherever a kubelet sees them.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import { type Clock, realClock } from "../util/clock.ts";
import {
  type ContainerBehaviour,
  containerStatuses,
  type FakeContainer,
  joinLogPath,
  newUsage,
  selectContainers,
  toContainer,
  toContainerStatus,
} from "./_fake_containers.ts";
import { invalid, notFound, precondition, unknown } from "./_fake_errors.ts";
import { FakeImageService, normalizeImageRef } from "./_fake_images.ts";
import { FakeStatsService } from "./_fake_stats.ts";
import {
  type FakeSandbox,
  IpPool,
  isHostNetwork,
  lookup,
  newId,
  sandboxMatches,
  sandboxName,
  toPodSandbox,
  toSandboxStatus,
} from "./_fake_sandboxes.ts";

export type { ContainerBehaviour, ContainerUsage, FakeContainer } from "./_fake_containers.ts";
export { FakeRuntimeError } from "./_fake_errors.ts";
export type { Credentials, FakeImage, FakeImageService, PullRecord } from "./_fake_images.ts";
export type { FakeSandbox } from "./_fake_sandboxes.ts";
export type { FakeStatsService } from "./_fake_stats.ts";

const C = api.ContainerState;
const E = api.ContainerEventType;
const READY = api.PodSandboxState.SANDBOX_READY;
const NOT_READY = api.PodSandboxState.SANDBOX_NOTREADY;

/** What a command run by ExecSync produced. */
export interface ExecResult {
  readonly stdout?: string | Uint8Array;
  readonly stderr?: string | Uint8Array;
  /** @default 0 */
  readonly exitCode?: number;
}

/** Runs ExecSync commands (exec probes); the default echoes the command line. */
export type ExecHandler = (
  containerId: string,
  cmd: readonly string[],
) => ExecResult | Promise<ExecResult>;

/** Chooses how a new container behaves. */
export type CreateHook = (
  config: api.ContainerConfig,
  sandbox: api.PodSandboxConfig,
) => ContainerBehaviour | undefined;

/** Options of {@link FakeRuntimeService}. */
export interface FakeRuntimeServiceOptions {
  /** Images present from the start. */
  readonly preloadImages?: readonly string[];
  /** When set, RunPodSandbox fails NotFound unless this image is present (containerd's pause). */
  readonly sandboxImage?: string;
  /** Named runtime handlers besides the default "". @default ["runc"] */
  readonly runtimeHandlers?: readonly string[];
  /** @default CgroupDriver.CGROUPFS */
  readonly cgroupDriver?: api.CgroupDriver;
  /** Source of timestamps. @default realClock */
  readonly clock?: Clock;
  readonly onCreate?: CreateHook;
  readonly execHandler?: ExecHandler;
}

const stateName = (s: api.ContainerState) => api.ContainerState[s] ?? String(s);
const bytes = (v: string | Uint8Array | undefined) =>
  typeof v === "string" ? new TextEncoder().encode(v) : v ?? new Uint8Array();

/** The in-memory CRI runtime; see the module documentation. */
export class FakeRuntimeService {
  /** The ImageService half, with its own controls (failPull, requireAuth, pulls). */
  readonly images: FakeImageService;
  /** The stats RPCs: synthetic usage, consistent between containers and their pod. */
  readonly stats: FakeStatsService;
  readonly #sandboxes = new Map<string, FakeSandbox>();
  readonly #containers = new Map<string, FakeContainer>();
  /** Names reserved as containerd's name indexes do, so a duplicate create fails. */
  readonly #sandboxNames = new Map<string, string>();
  readonly #containerNames = new Map<string, string>();
  readonly #ips = new IpPool();
  readonly #listeners = new Set<(e: api.ContainerEventResponse) => void>();
  readonly #conditions = new Map<string, api.RuntimeCondition>();
  readonly #handlers: readonly string[];
  readonly #sandboxImage: string | undefined;
  readonly #cgroupDriver: api.CgroupDriver;
  readonly #clock: Clock;
  #lastNs = 0n;
  /** Chooses each new container's behaviour; tests may replace it. */
  onCreate: CreateHook | undefined;
  /** Runs ExecSync; tests may replace it. */
  execHandler: ExecHandler;
  /** The pod CIDR last pushed by UpdateRuntimeConfig. */
  podCidr = "";

  constructor(opts: FakeRuntimeServiceOptions = {}) {
    this.#handlers = opts.runtimeHandlers ?? ["runc"];
    this.#sandboxImage = opts.sandboxImage && normalizeImageRef(opts.sandboxImage);
    this.#cgroupDriver = opts.cgroupDriver ?? api.CgroupDriver.CGROUPFS;
    this.#clock = opts.clock ?? realClock;
    const now = () => this.#now();
    this.images = new FakeImageService({ ...opts, now });
    this.stats = new FakeStatsService({
      sandboxes: this.#sandboxes,
      containers: this.#containers,
      now,
    });
    this.onCreate = opts.onCreate;
    this.execHandler = opts.execHandler ?? ((_, cmd) => ({ stdout: cmd.join(" ") }));
    this.setCondition("RuntimeReady", true);
    this.setCondition("NetworkReady", true);
  }

  // --- Controls for tests and benchmarks ---

  /** Sandboxes by id, for inspection. */
  get sandboxes(): ReadonlyMap<string, FakeSandbox> {
    return this.#sandboxes;
  }

  /** Containers by id, for inspection. */
  get containers(): ReadonlyMap<string, FakeContainer> {
    return this.#containers;
  }

  /** Sets a condition Status reports (RuntimeReady and NetworkReady start true). */
  setCondition(type: string, status: boolean, reason = "", message = ""): void {
    this.#conditions.set(type, { type, status, reason, message });
  }

  /** Ends a running container as if its process exited (reason "OOMKilled" for an OOM kill). */
  exitContainer(id: string, exitCode: number, reason = "", message = ""): void {
    const c = this.#running(id, `Cannot exit container "${id}": `);
    this.#exit(c, exitCode, reason, message);
  }

  /** Calls `listener` with every container event; returns the unsubscribe function. */
  subscribe(listener: (e: api.ContainerEventResponse) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** How many event listeners (GetContainerEvents streams) are attached. */
  get subscribers(): number {
    return this.#listeners.size;
  }

  // --- Runtime ---

  version(_: api.VersionRequest): api.VersionResponse {
    return {
      version: "0.1.0",
      runtimeName: "fake-runtime",
      runtimeVersion: "0.1.0",
      runtimeApiVersion: "v1",
    };
  }

  status(req: api.StatusRequest): api.StatusResponse {
    const features = { recursiveReadOnlyMounts: true, userNamespaces: true };
    return {
      status: { conditions: [...this.#conditions.values()] },
      info: req.verbose ? { config: JSON.stringify({ runtimeHandlers: this.#handlers }) } : {},
      runtimeHandlers: ["", ...this.#handlers].map((name) => ({ name, features })),
      features: { supplementalGroupsPolicy: true, userNamespacesHostNetwork: false },
    };
  }

  runtimeConfig(_: api.RuntimeConfigRequest): api.RuntimeConfigResponse {
    return { linux: { cgroupDriver: this.#cgroupDriver } };
  }

  updateRuntimeConfig(req: api.UpdateRuntimeConfigRequest): api.UpdateRuntimeConfigResponse {
    this.podCidr = req.runtimeConfig?.networkConfig?.podCidr ?? "";
    return {};
  }

  // --- Pod sandboxes ---

  runPodSandbox(req: api.RunPodSandboxRequest): api.RunPodSandboxResponse {
    const { config, runtimeHandler } = req;
    if (!config?.metadata) throw invalid("sandbox config must include metadata");
    if (runtimeHandler !== "" && !this.#handlers.includes(runtimeHandler)) {
      throw unknown(
        `failed to get sandbox runtime: no runtime for "${runtimeHandler}" is configured`,
      );
    }
    if (this.#sandboxImage && !this.images.get(this.#sandboxImage)) {
      throw notFound(`failed to get sandbox image "${this.#sandboxImage}"`);
    }
    const name = reserve(this.#sandboxNames, "sandbox", sandboxName(config.metadata));
    const ip = isHostNetwork(config) ? "" : this.#ips.allocate();
    if (ip === undefined) {
      throw unknown(
        `failed to setup network for sandbox: plugin type="host-local" failed (add): no IP ` +
          `addresses available in range set: 10.244.0.1-10.244.255.254`,
      );
    }
    const sb: FakeSandbox = {
      id: newId(),
      name,
      config,
      runtimeHandler,
      createdAt: this.#now(),
      state: READY,
      ip,
      containers: new Set(),
      overhead: config.linux?.overhead,
      resources: config.linux?.resources,
    };
    this.#sandboxes.set(sb.id, sb);
    this.#sandboxNames.set(name, sb.id);
    this.#emit(sb.id, E.CONTAINER_CREATED_EVENT, sb);
    this.#emit(sb.id, E.CONTAINER_STARTED_EVENT, sb);
    return { podSandboxId: sb.id };
  }

  /** Kills the sandbox's running containers (137) and marks it not ready; idempotent. */
  stopPodSandbox(req: api.StopPodSandboxRequest): api.StopPodSandboxResponse {
    const id = req.podSandboxId;
    this.#stopSandbox(this.#sandbox(id, `an error occurred when try to find sandbox "${id}"`));
    return {};
  }

  /** Removes the sandbox and its containers, forcibly; a missing sandbox is not an error. */
  removePodSandbox(req: api.RemovePodSandboxRequest): api.RemovePodSandboxResponse {
    if (req.podSandboxId === "") throw invalid("sandbox id must not be empty");
    const sb = lookup(this.#sandboxes, req.podSandboxId);
    if (!sb) return {};
    for (const id of [...sb.containers]) this.#removeContainer(id);
    this.#stopSandbox(sb);
    this.#sandboxes.delete(sb.id);
    this.#sandboxNames.delete(sb.name);
    if (sb.ip !== "") this.#ips.release(sb.ip);
    this.#emit(sb.id, E.CONTAINER_DELETED_EVENT, sb);
    return {};
  }

  /** Also carries the containers' statuses and a timestamp, for the evented PLEG. */
  podSandboxStatus(req: api.PodSandboxStatusRequest): api.PodSandboxStatusResponse {
    const sb = this.#sandbox(req.podSandboxId, "an error occurred when try to find sandbox");
    const info = { pid: 0, runtimeHandler: sb.runtimeHandler, ip: sb.ip };
    return {
      status: toSandboxStatus(sb),
      info: req.verbose ? { info: JSON.stringify(info) } : {},
      containersStatuses: this.#statuses(sb),
      timestamp: this.#now(),
    };
  }

  listPodSandbox(req: api.ListPodSandboxRequest): api.ListPodSandboxResponse {
    const f = req.filter;
    const from = f?.id ? [lookup(this.#sandboxes, f.id)] : this.#sandboxes.values();
    const items: api.PodSandbox[] = [];
    for (const sb of from) if (sb && sandboxMatches(sb, f)) items.push(toPodSandbox(sb));
    return { items };
  }

  updatePodSandboxResources(
    req: api.UpdatePodSandboxResourcesRequest,
  ): api.UpdatePodSandboxResourcesResponse {
    const sb = this.#sandbox(req.podSandboxId, `failed to find sandbox "${req.podSandboxId}"`);
    sb.overhead = req.overhead ?? sb.overhead;
    sb.resources = req.resources ?? sb.resources;
    return {};
  }

  portForward(req: api.PortForwardRequest): api.PortForwardResponse {
    const sb = this.#sandbox(req.podSandboxId, `failed to find sandbox "${req.podSandboxId}"`);
    if (sb.state !== READY) throw precondition(`sandbox container "${sb.id}" is not running`);
    return { url: streamUrl("portforward") };
  }

  // --- Containers ---

  createContainer(req: api.CreateContainerRequest): api.CreateContainerResponse {
    const sb = this.#sandbox(req.podSandboxId, `failed to find sandbox id "${req.podSandboxId}"`);
    if (sb.state !== READY) throw precondition(`sandbox container "${sb.id}" is not running`);
    const config = req.config;
    if (!config?.metadata) throw invalid("container config must include metadata");
    const ref = config.image?.image ?? "";
    const image = this.images.get(ref);
    if (!image) throw notFound(`failed to resolve image "${ref}"`);
    const { name: pod, namespace, uid } = sb.config.metadata ?? {};
    const m = config.metadata;
    const name = reserve(
      this.#containerNames,
      "container",
      `${m.name}_${pod}_${namespace}_${uid}_${m.attempt}`,
    );
    const behaviour = this.onCreate?.(config, sb.config) ?? {};
    const c: FakeContainer = {
      id: newId(),
      sandboxId: sb.id,
      name,
      config,
      imageId: image.id,
      logPath: joinLogPath(sb.config.logDirectory, config.logPath),
      createdAt: this.#now(),
      behaviour,
      state: C.CONTAINER_CREATED,
      startedAt: 0n,
      finishedAt: 0n,
      exitCode: 0,
      reason: "",
      message: "",
      resources: config.linux?.resources,
      usage: newUsage(behaviour),
    };
    this.#containers.set(c.id, c);
    this.#containerNames.set(name, c.id);
    sb.containers.add(c.id);
    this.#emit(c.id, E.CONTAINER_CREATED_EVENT, sb);
    return { containerId: c.id };
  }

  /** Runs the container, and ends it at once if its behaviour says so. */
  startContainer(req: api.StartContainerRequest): api.StartContainerResponse {
    const c = this.#container(req.containerId);
    if (c.state !== C.CONTAINER_CREATED) {
      const state = stateName(c.state);
      throw precondition(
        `failed to set starting state for container "${c.id}": container is in ${state} state`,
      );
    }
    const sb = this.#sandboxes.get(c.sandboxId);
    const failure = sb?.state !== READY
      ? precondition(`sandbox container "${c.sandboxId}" is not running`)
      : c.behaviour.startError !== undefined
      ? unknown(`failed to create containerd task: ${c.behaviour.startError}`)
      : undefined;
    if (failure) {
      // As containerd: a failed start leaves the container exited, code 128, no event.
      this.#setExited(c, 128, "StartError", failure.message);
      throw failure;
    }
    c.state = C.CONTAINER_RUNNING;
    c.startedAt = this.#now();
    this.#emit(c.id, E.CONTAINER_STARTED_EVENT, sb);
    const b = c.behaviour;
    if (b.exitAfterStart) this.#exit(c, b.exitCode ?? 0, b.reason ?? "", "");
    return {};
  }

  /** Exits 0 if the container handles SIGTERM and has a grace period, else 137; idempotent. */
  stopContainer(req: api.StopContainerRequest): api.StopContainerResponse {
    const c = this.#container(req.containerId);
    if (c.state === C.CONTAINER_RUNNING) {
      this.#exit(c, req.timeout > 0n && c.behaviour.handlesSigterm ? 0 : 137, "", "");
    }
    return {};
  }

  /** Removes a container, killing it if it runs; a missing container is not an error. */
  removeContainer(req: api.RemoveContainerRequest): api.RemoveContainerResponse {
    if (req.containerId === "") throw invalid("container id must not be empty");
    const c = lookup(this.#containers, req.containerId);
    if (c) this.#removeContainer(c.id);
    return {};
  }

  listContainers(req: api.ListContainersRequest): api.ListContainersResponse {
    return {
      containers: selectContainers(this.#containers, this.#sandboxes, req.filter).map(toContainer),
    };
  }

  containerStatus(req: api.ContainerStatusRequest): api.ContainerStatusResponse {
    const c = this.#container(req.containerId);
    const info = { sandboxID: c.sandboxId, pid: 0, removing: false, logPath: c.logPath };
    return {
      status: toContainerStatus(c, this.images.get(c.imageId)),
      info: req.verbose ? { info: JSON.stringify(info) } : {},
    };
  }

  updateContainerResources(
    req: api.UpdateContainerResourcesRequest,
  ): api.UpdateContainerResourcesResponse {
    const c = this.#container(req.containerId);
    c.resources = req.linux ?? c.resources;
    return {};
  }

  reopenContainerLog(req: api.ReopenContainerLogRequest): api.ReopenContainerLogResponse {
    const c = this.#container(req.containerId);
    if (c.state !== C.CONTAINER_RUNNING) throw precondition("container is not running");
    return {};
  }

  async execSync(req: api.ExecSyncRequest): Promise<api.ExecSyncResponse> {
    const c = this.#running(req.containerId, "failed to exec in container: ");
    const r = await this.execHandler(c.id, req.cmd);
    return { stdout: bytes(r.stdout), stderr: bytes(r.stderr), exitCode: r.exitCode ?? 0 };
  }

  exec(req: api.ExecRequest): api.ExecResponse {
    this.#running(req.containerId, "");
    return { url: streamUrl("exec") };
  }

  attach(req: api.AttachRequest): api.AttachResponse {
    this.#running(req.containerId, "");
    return { url: streamUrl("attach") };
  }

  // --- Internals ---

  /**
   * Nanoseconds since the epoch, strictly increasing (by a microsecond, which survives the
   * conversion to milliseconds the evented PLEG makes) so that creations and exits order.
   */
  #now(): bigint {
    const ns = BigInt(Math.trunc(this.#clock.now())) * 1_000_000n;
    this.#lastNs = ns > this.#lastNs ? ns : this.#lastNs + 1_000n;
    return this.#lastNs;
  }

  #sandbox(id: string, what: string): FakeSandbox {
    if (id === "") throw invalid(`${what}: sandbox id must not be empty`);
    const sb = lookup(this.#sandboxes, id);
    if (!sb) throw notFound(what);
    return sb;
  }

  #container(id: string, what = `an error occurred when try to find container "${id}"`) {
    if (id === "") throw invalid(`${what}: container id must not be empty`);
    const c = lookup(this.#containers, id);
    if (!c) throw notFound(what);
    return c;
  }

  #running(id: string, prefix: string): FakeContainer {
    const c = this.#container(id);
    if (c.state !== C.CONTAINER_RUNNING) {
      throw precondition(`${prefix}container is in ${stateName(c.state)} state`);
    }
    return c;
  }

  #setExited(c: FakeContainer, exitCode: number, reason: string, message: string): void {
    c.state = C.CONTAINER_EXITED;
    c.finishedAt = this.#now();
    c.exitCode = exitCode;
    c.reason = reason;
    c.message = message;
  }

  #exit(c: FakeContainer, exitCode: number, reason: string, message: string): void {
    this.#setExited(c, exitCode, reason, message);
    this.#emit(c.id, E.CONTAINER_STOPPED_EVENT, this.#sandboxes.get(c.sandboxId));
  }

  #stopSandbox(sb: FakeSandbox): void {
    for (const id of sb.containers) {
      const c = this.#containers.get(id);
      if (c?.state === C.CONTAINER_RUNNING) this.#exit(c, 137, "", "");
    }
    if (sb.state === NOT_READY) return;
    sb.state = NOT_READY;
    this.#emit(sb.id, E.CONTAINER_STOPPED_EVENT, sb);
  }

  #removeContainer(id: string): void {
    const c = this.#containers.get(id);
    if (!c) return;
    if (c.state === C.CONTAINER_RUNNING) this.#exit(c, 137, "", "");
    this.#containers.delete(id);
    this.#containerNames.delete(c.name);
    const sb = this.#sandboxes.get(c.sandboxId);
    sb?.containers.delete(id);
    this.#emit(id, E.CONTAINER_DELETED_EVENT, sb);
  }

  #statuses(sb: FakeSandbox): api.ContainerStatus[] {
    return containerStatuses(sb, this.#containers, (id) => this.images.get(id));
  }

  /** Builds an event only when someone listens, so benchmarks without streams pay nothing. */
  #emit(id: string, type: api.ContainerEventType, sb: FakeSandbox | undefined): void {
    if (this.#listeners.size === 0 || !sb) return;
    const event: api.ContainerEventResponse = {
      containerId: id,
      containerEventType: type,
      createdAt: this.#now(),
      podSandboxStatus: toSandboxStatus(sb),
      containersStatuses: this.#statuses(sb),
    };
    for (const listener of this.#listeners) listener(event);
  }
}

/** Returns `name` if no one holds it in `index`; fails as containerd's registrar does. */
function reserve(index: ReadonlyMap<string, string>, kind: string, name: string): string {
  const holder = index.get(name);
  if (holder) {
    throw unknown(
      `failed to reserve ${kind} name "${name}": name "${name}" is reserved for "${holder}"`,
    );
  }
  return name;
}

/** A URL on a streaming server the fake does not run. */
function streamUrl(kind: string): string {
  const token = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(6))));
  return `http://127.0.0.1:0/${kind}/${token.replace(/[+/]/g, "_")}`;
}
