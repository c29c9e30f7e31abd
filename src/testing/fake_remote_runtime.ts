/**
 * @module
 * FakeRemoteRuntime: serves a {@link FakeRuntimeService} as the CRI RuntimeService and
 * ImageService on a unix socket with the kubelet's own gRPC server (`cri/grpc_server.ts`), so
 * tests and benchmarks reach it through the real client (`cri/connection.ts`). Adds what a
 * socket makes testable: per-RPC call counters, injected errors, injected latency, and a restart
 * that drops every connection while keeping the state, as a containerd restart does.
 * Corresponds to upstream `pkg/kubelet/cri/remote/fake/`.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import { GrpcCode, MAX_MESSAGE_SIZE } from "../cri/connection.ts";
import {
  GrpcServer,
  GrpcStatusError,
  type ServerStreamHandler,
  type ServiceHandlers,
  type UnaryHandler,
} from "../cri/grpc_server.ts";
import {
  FakeRuntimeError,
  FakeRuntimeService,
  type FakeRuntimeServiceOptions,
} from "./fake_runtime_service.ts";

/** Options of {@link startFakeRuntime}. */
export interface FakeRuntimeOptions extends FakeRuntimeServiceOptions {
  /** Path of the unix socket; a stale socket file there is replaced. */
  readonly socket: string;
}

interface InjectedError {
  readonly code: GrpcCode;
  readonly details: string;
  remaining: number;
}

/** Every RPC name of both services, e.g. "RunPodSandbox", "PullImage". */
const RPC_NAMES: ReadonlySet<string> = new Set(
  [
    ...Object.values(api.RuntimeServiceDefinition.methods),
    ...Object.values(api.ImageServiceDefinition.methods),
  ].map((m) => m.name),
);

function checkRpc(rpc: string, what: string): void {
  if (!RPC_NAMES.has(rpc)) {
    throw new Error(
      `Cannot ${what}: '${rpc}' is not a CRI RPC: expected a name such as 'RunPodSandbox' or 'PullImage'`,
    );
  }
}

/**
 * A fake's failure as the status the client gets: a {@link FakeRuntimeError} its code and
 * message; anything else unchanged, which the server answers Unknown with its message.
 */
function toStatus(e: unknown): unknown {
  return e instanceof FakeRuntimeError ? new GrpcStatusError(e.code, e.message) : e;
}

const stopped = () => new FakeRuntimeError(GrpcCode.UNAVAILABLE, "the fake runtime stopped");

/** Starts a fake runtime serving on `opts.socket`. */
export async function startFakeRuntime(opts: FakeRuntimeOptions): Promise<FakeRemoteRuntime> {
  const runtime = new FakeRemoteRuntime(opts);
  await runtime.start();
  return runtime;
}

/** The fake runtime behind a gRPC server; see the module documentation. */
export class FakeRemoteRuntime implements AsyncDisposable {
  readonly socket: string;
  /** `unix://<socket>`, for `new CriConnection({ endpoint })`. */
  readonly endpoint: string;
  /** The state behind the server, for direct inspection and control. */
  readonly service: FakeRuntimeService;
  readonly #calls = new Map<string, number>();
  readonly #errors = new Map<string, InjectedError[]>();
  readonly #latency = new Map<string, number>();
  readonly #rewrites = new Map<string, (reply: unknown) => unknown>();
  /** Ends each open GetContainerEvents stream with the error given. */
  readonly #eventStreams = new Set<(e: FakeRuntimeError) => void>();
  readonly #runtimeImpl: ServiceHandlers<typeof api.RuntimeServiceDefinition>;
  readonly #imageImpl: ServiceHandlers<typeof api.ImageServiceDefinition>;
  #server: GrpcServer | undefined;
  /** Aborted when the server goes down: pending latency sleeps fail Unavailable. */
  #down = new AbortController();
  #stopped = false;
  #lifecycle: Promise<void> = Promise.resolve();

  constructor(opts: FakeRuntimeOptions) {
    this.socket = opts.socket;
    this.endpoint = `unix://${opts.socket}`;
    this.service = new FakeRuntimeService(opts);
    const s = this.service;
    const i = s.images;
    const st = s.stats;
    const u = <Req, Res>(rpc: string, fn: (req: Req) => Res | Promise<Res>) => this.#unary(rpc, fn);
    const l = <Req, Res>(rpc: string, fn: (req: Req) => Res) => this.#list(rpc, fn);
    const no = (rpc: string) => () => {
      throw new FakeRuntimeError(GrpcCode.UNIMPLEMENTED, `method ${rpc} not implemented`);
    };
    this.#runtimeImpl = {
      version: u("Version", (r) => s.version(r)),
      runPodSandbox: u("RunPodSandbox", (r) => s.runPodSandbox(r)),
      stopPodSandbox: u("StopPodSandbox", (r) => s.stopPodSandbox(r)),
      removePodSandbox: u("RemovePodSandbox", (r) => s.removePodSandbox(r)),
      podSandboxStatus: u("PodSandboxStatus", (r) => s.podSandboxStatus(r)),
      listPodSandbox: u("ListPodSandbox", (r) => s.listPodSandbox(r)),
      streamPodSandboxes: l("StreamPodSandboxes", (r) => ({
        podSandboxes: s.listPodSandbox(r).items,
      })),
      createContainer: u("CreateContainer", (r) => s.createContainer(r)),
      startContainer: u("StartContainer", (r) => s.startContainer(r)),
      stopContainer: u("StopContainer", (r) => s.stopContainer(r)),
      removeContainer: u("RemoveContainer", (r) => s.removeContainer(r)),
      listContainers: u("ListContainers", (r) => s.listContainers(r)),
      streamContainers: l("StreamContainers", (r) => s.listContainers(r)),
      containerStatus: u("ContainerStatus", (r) => s.containerStatus(r)),
      updateContainerResources: u("UpdateContainerResources", (r) => s.updateContainerResources(r)),
      reopenContainerLog: u("ReopenContainerLog", (r) => s.reopenContainerLog(r)),
      execSync: u("ExecSync", (r) => s.execSync(r)),
      exec: u("Exec", (r) => s.exec(r)),
      attach: u("Attach", (r) => s.attach(r)),
      portForward: u("PortForward", (r) => s.portForward(r)),
      containerStats: u("ContainerStats", (r) => st.containerStats(r)),
      listContainerStats: u("ListContainerStats", (r) => st.listContainerStats(r)),
      streamContainerStats: l("StreamContainerStats", (r) => ({
        containerStats: st.listContainerStats(r).stats,
      })),
      podSandboxStats: u("PodSandboxStats", (r) => st.podSandboxStats(r)),
      listPodSandboxStats: u("ListPodSandboxStats", (r) => st.listPodSandboxStats(r)),
      streamPodSandboxStats: l("StreamPodSandboxStats", (r) => ({
        podSandboxStats: st.listPodSandboxStats(r).stats,
      })),
      updateRuntimeConfig: u("UpdateRuntimeConfig", (r) => s.updateRuntimeConfig(r)),
      status: u("Status", (r) => s.status(r)),
      checkpointContainer: u("CheckpointContainer", no("CheckpointContainer")),
      getContainerEvents: (_req, ctx) => this.#events(ctx.signal),
      listMetricDescriptors: u("ListMetricDescriptors", no("ListMetricDescriptors")),
      listPodSandboxMetrics: u("ListPodSandboxMetrics", no("ListPodSandboxMetrics")),
      streamPodSandboxMetrics: l("StreamPodSandboxMetrics", no("StreamPodSandboxMetrics")),
      runtimeConfig: u("RuntimeConfig", (r) => s.runtimeConfig(r)),
      updatePodSandboxResources: u(
        "UpdatePodSandboxResources",
        (r) => s.updatePodSandboxResources(r),
      ),
    };
    this.#imageImpl = {
      listImages: u("ListImages", (r) => i.listImages(r)),
      streamImages: l("StreamImages", (r) => i.listImages(r)),
      imageStatus: u("ImageStatus", (r) => i.imageStatus(r)),
      pullImage: u("PullImage", (r) => i.pullImage(r)),
      removeImage: u("RemoveImage", (r) => i.removeImage(r)),
      imageFsInfo: u("ImageFsInfo", (r) => i.imageFsInfo(r)),
    };
  }

  /** Calls received per RPC name ("RunPodSandbox"), failed and injected ones included. */
  get calls(): ReadonlyMap<string, number> {
    return this.#calls;
  }

  /** Calls of one RPC so far. */
  callCount(rpc: string): number {
    return this.#calls.get(rpc) ?? 0;
  }

  /** Makes the next `times` calls of `rpc` fail with `code`, after any errors already queued. */
  injectError(rpc: string, code: GrpcCode, details?: string, times = 1): void {
    checkRpc(rpc, "inject an error");
    const queue = this.#errors.get(rpc) ?? [];
    queue.push({ code, details: details ?? `injected ${rpc} error`, remaining: times });
    this.#errors.set(rpc, queue);
  }

  /**
   * Ends every open GetContainerEvents stream with `code`, as a runtime restart or a broken
   * connection does; returns how many there were. New streams can be opened afterwards.
   */
  cutEventStreams(code: GrpcCode = GrpcCode.UNAVAILABLE, details = "event stream cut"): number {
    const n = this.#eventStreams.size;
    for (const end of [...this.#eventStreams]) end(new FakeRuntimeError(code, details));
    return n;
  }

  /** Open GetContainerEvents streams. */
  get eventStreams(): number {
    return this.#eventStreams.size;
  }

  /**
   * Passes every reply of `rpc` through `fn` before it is sent (a runtime answering with
   * missing fields, unknown enum values or huge strings); `undefined` removes the rewrite.
   */
  rewriteReplies(rpc: string, fn: ((reply: unknown) => unknown) | undefined): void {
    checkRpc(rpc, "rewrite replies");
    if (fn) this.#rewrites.set(rpc, fn);
    else this.#rewrites.delete(rpc);
  }

  /** Drops every injected error not yet returned. */
  clearErrors(): void {
    this.#errors.clear();
  }

  /** Delays every call of `rpc` by `ms` real milliseconds (0 removes the delay). */
  setLatency(rpc: string, ms: number): void {
    checkRpc(rpc, "set a latency");
    if (ms > 0) this.#latency.set(rpc, ms);
    else this.#latency.delete(rpc);
  }

  /** True while the server accepts connections. */
  get serving(): boolean {
    return this.#server !== undefined;
  }

  /** Binds the socket; a no-op while serving. */
  start(): Promise<void> {
    return this.#serial(async () => {
      if (this.#stopped) throw new Error("Cannot start: the fake runtime was stopped for good");
      await this.#bind();
    });
  }

  /** Drops every connection and binds the same socket again, keeping all state. */
  restart(): Promise<void> {
    return this.#serial(async () => {
      if (this.#stopped) throw new Error("Cannot restart: the fake runtime was stopped for good");
      await this.#shutdown();
      await this.#bind();
    });
  }

  /** Shuts the server down and removes the socket; idempotent. */
  stop(): Promise<void> {
    this.#stopped = true;
    return this.#serial(() => this.#shutdown());
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  #serial(fn: () => Promise<void>): Promise<void> {
    const next = this.#lifecycle.then(fn);
    this.#lifecycle = next.catch(() => {});
    return next;
  }

  async #bind(): Promise<void> {
    if (this.#server) return;
    let server: GrpcServer;
    try {
      server = await GrpcServer.listen({
        path: this.socket,
        maxReceiveMessageBytes: MAX_MESSAGE_SIZE,
      });
    } catch (e) {
      throw new Error(`Cannot serve the fake runtime on '${this.socket}': ${e}`, { cause: e });
    }
    server.register(api.RuntimeServiceDefinition, this.#runtimeImpl);
    server.register(api.ImageServiceDefinition, this.#imageImpl);
    this.#down = new AbortController();
    this.#server = server;
  }

  /**
   * As a runtime going down looks to clients: latency sleeps and event streams fail Unavailable
   * at once, other calls in flight get 1 s to finish, then connections close and the socket is
   * removed.
   */
  async #shutdown(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    this.#down.abort();
    await server.close();
  }

  #unary<Req, Res>(rpc: string, fn: (req: Req) => Res | Promise<Res>): UnaryHandler<Req, Res> {
    checkRpc(rpc, "serve");
    return async (req) => {
      try {
        await this.#enter(rpc);
        return this.#rewrite(rpc, await fn(req));
      } catch (e) {
        throw toStatus(e);
      }
    };
  }

  /** A CRIListStreaming RPC: the whole list in one message. */
  #list<Req, Res>(rpc: string, fn: (req: Req) => Res): ServerStreamHandler<Req, Res> {
    const unary = this.#unary(rpc, fn);
    return async function* (req, ctx) {
      yield await unary(req, ctx);
    };
  }

  /**
   * GetContainerEvents: every event from now until the client cancels or the server stops
   * (`signal`), or {@link cutEventStreams} ends the stream with an error.
   */
  async *#events(signal: AbortSignal): AsyncGenerator<api.ContainerEventResponse> {
    try {
      await this.#enter("GetContainerEvents");
      if (signal.aborted) return;
      let events!: ReadableStreamDefaultController<api.ContainerEventResponse>;
      // A slow reader buffers in memory: a fake never drops an event.
      const stream = new ReadableStream<api.ContainerEventResponse>({
        start: (c) => void (events = c),
      });
      const unsubscribe = this.service.subscribe((e) => events.enqueue(e));
      const detach = () => {
        unsubscribe();
        this.#eventStreams.delete(cut);
        signal.removeEventListener("abort", cancel);
      };
      const cut = (e: FakeRuntimeError) => {
        detach();
        events.error(e);
      };
      const cancel = () => {
        detach();
        events.close();
      };
      this.#eventStreams.add(cut);
      signal.addEventListener("abort", cancel, { once: true });
      try {
        yield* stream;
      } finally {
        detach();
      }
    } catch (e) {
      throw toStatus(e);
    }
  }

  #rewrite<Res>(rpc: string, res: Res): Res {
    const fn = this.#rewrites.get(rpc);
    return fn ? fn(res) as Res : res;
  }

  /** Counts the call, waits any injected latency, then throws any injected error. */
  async #enter(rpc: string): Promise<void> {
    this.#calls.set(rpc, (this.#calls.get(rpc) ?? 0) + 1);
    const ms = this.#latency.get(rpc);
    if (ms !== undefined) await this.#sleep(ms);
    const queue = this.#errors.get(rpc);
    const head = queue?.[0];
    if (!queue || !head) return;
    if (--head.remaining <= 0) queue.shift();
    if (queue.length === 0) this.#errors.delete(rpc);
    throw new FakeRuntimeError(head.code, head.details);
  }

  /** Sleeps `ms`, or rejects as Unavailable when the server shuts down first. */
  #sleep(ms: number): Promise<void> {
    const down = this.#down.signal;
    if (down.aborted) return Promise.reject(stopped());
    return new Promise((resolve, reject) => {
      const cancel = () => {
        clearTimeout(timer);
        reject(stopped());
      };
      const timer = setTimeout(() => {
        down.removeEventListener("abort", cancel);
        resolve();
      }, ms);
      down.addEventListener("abort", cancel, { once: true });
    });
  }
}
