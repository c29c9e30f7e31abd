/**
 * @module
 * FakeRemoteRuntime: serves a {@link FakeRuntimeService} as the CRI RuntimeService and
 * ImageService on a unix socket, so tests and benchmarks reach it through the real client
 * (`cri/connection.ts`). Adds what a socket makes testable: per-RPC call counters, injected
 * errors, injected latency, and a restart that drops every connection while keeping the state,
 * as a containerd restart does. Corresponds to upstream `pkg/kubelet/cri/remote/fake/`.
 */

import * as grpc from "@grpc/grpc-js";
import * as api from "../../proto/runtime/v1/api.ts";
import {
  type CriMethod,
  type CriMethods,
  MAX_MESSAGE_SIZE,
  type ServiceDefinition,
} from "../cri/connection.ts";
import {
  FakeRuntimeError,
  FakeRuntimeService,
  type FakeRuntimeServiceOptions,
} from "./fake_runtime_service.ts";
import { grpcService } from "./grpc_service.ts";

/** Options of {@link startFakeRuntime}. */
export interface FakeRuntimeOptions extends FakeRuntimeServiceOptions {
  /** Path of the unix socket; a stale socket file there is replaced. */
  readonly socket: string;
}

interface InjectedError {
  readonly code: grpc.status;
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

/** grpc-js handlers for every method of a generated service definition. */
type Handlers<D extends ServiceDefinition> = {
  [K in keyof D["methods"]]: CriMethods<D>[K] extends CriMethod<infer Req, infer Res>
    ? D["methods"][K]["responseStream"] extends true ? grpc.handleServerStreamingCall<Req, Res>
    : grpc.handleUnaryCall<Req, Res>
    : never;
};

function checkRpc(rpc: string, what: string): void {
  if (!RPC_NAMES.has(rpc)) {
    throw new Error(
      `Cannot ${what}: '${rpc}' is not a CRI RPC: expected a name such as 'RunPodSandbox' or 'PullImage'`,
    );
  }
}

function toStatus(e: unknown): Partial<grpc.StatusObject> {
  if (e instanceof FakeRuntimeError) return { code: e.code, details: e.message };
  return { code: grpc.status.UNKNOWN, details: e instanceof Error ? e.message : String(e) };
}

const stopped = () => new FakeRuntimeError(grpc.status.UNAVAILABLE, "the fake runtime stopped");

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
  /** Fails pending latency sleeps and open event streams when the server goes down. */
  readonly #onShutdown = new Set<() => void>();
  /** Ends each open GetContainerEvents stream with the error given. */
  readonly #eventStreams = new Set<(e: FakeRuntimeError) => void>();
  readonly #runtimeImpl: Handlers<typeof api.RuntimeServiceDefinition>;
  readonly #imageImpl: Handlers<typeof api.ImageServiceDefinition>;
  #server: grpc.Server | undefined;
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
      throw new FakeRuntimeError(grpc.status.UNIMPLEMENTED, `method ${rpc} not implemented`);
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
      getContainerEvents: (call) => this.#events(call),
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
  injectError(rpc: string, code: grpc.status, details?: string, times = 1): void {
    checkRpc(rpc, "inject an error");
    const queue = this.#errors.get(rpc) ?? [];
    queue.push({ code, details: details ?? `injected ${rpc} error`, remaining: times });
    this.#errors.set(rpc, queue);
  }

  /**
   * Ends every open GetContainerEvents stream with `code`, as a runtime restart or a broken
   * connection does; returns how many there were. New streams can be opened afterwards.
   */
  cutEventStreams(
    code: grpc.status = grpc.status.UNAVAILABLE,
    details = "event stream cut",
  ): number {
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
    return this.#serial(async () => {
      await this.#shutdown();
      await Deno.remove(this.socket).catch(() => {});
    });
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
    await Deno.remove(this.socket).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
    const server = new grpc.Server({
      "grpc.max_receive_message_length": MAX_MESSAGE_SIZE,
      "grpc.max_send_message_length": MAX_MESSAGE_SIZE,
    });
    server.addService(grpcService(api.RuntimeServiceDefinition), this.#runtimeImpl);
    server.addService(grpcService(api.ImageServiceDefinition), this.#imageImpl);
    try {
      await new Promise<void>((resolve, reject) =>
        server.bindAsync(
          this.endpoint,
          grpc.ServerCredentials.createInsecure(),
          (err) => (err ? reject(err) : resolve()),
        )
      );
    } catch (e) {
      server.forceShutdown();
      throw new Error(`Cannot serve the fake runtime on '${this.socket}': ${e}`, { cause: e });
    }
    this.#server = server;
  }

  /**
   * As a runtime going down looks to clients: calls in flight and event streams fail
   * Unavailable, then connections close (forcibly after 1 s, for handlers still running).
   */
  async #shutdown(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    for (const cancel of [...this.#onShutdown]) cancel();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, 1000);
      server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  #unary<Req, Res>(
    rpc: string,
    fn: (req: Req) => Res | Promise<Res>,
  ): grpc.handleUnaryCall<Req, Res> {
    checkRpc(rpc, "serve");
    return (call, callback) => {
      this.#enter(rpc).then(() => fn(call.request)).then(
        (res) => callback(null, this.#rewrite(rpc, res)),
        (e) => callback(toStatus(e)),
      );
    };
  }

  /** A CRIListStreaming RPC: the whole list in one message. */
  #list<Req, Res>(rpc: string, fn: (req: Req) => Res): grpc.handleServerStreamingCall<Req, Res> {
    checkRpc(rpc, "serve");
    return (call) => {
      this.#enter(rpc).then(() => fn(call.request)).then(
        (res) => {
          call.write(this.#rewrite(rpc, res));
          call.end();
        },
        (e) => call.emit("error", toStatus(e)),
      );
    };
  }

  /** GetContainerEvents: every event from now until the client cancels or the server stops. */
  #events(
    call: grpc.ServerWritableStream<api.GetEventsRequest, api.ContainerEventResponse>,
  ): void {
    this.#enter("GetContainerEvents").then(() => {
      if (call.cancelled) return;
      // A slow reader buffers in memory: a fake never drops an event.
      const unsubscribe = this.service.subscribe((e) => {
        if (!call.cancelled) call.write(e);
      });
      const close = () => {
        unsubscribe();
        this.#onShutdown.delete(shutdown);
        this.#eventStreams.delete(end);
      };
      const end = (e: FakeRuntimeError) => {
        close();
        call.emit("error", toStatus(e));
      };
      const shutdown = () => end(stopped());
      this.#onShutdown.add(shutdown);
      this.#eventStreams.add(end);
      call.on("cancelled", close);
      call.on("close", close);
    }, (e) => call.emit("error", toStatus(e)));
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
    return new Promise((resolve, reject) => {
      const cancel = () => {
        clearTimeout(timer);
        this.#onShutdown.delete(cancel);
        reject(stopped());
      };
      const timer = setTimeout(() => {
        this.#onShutdown.delete(cancel);
        resolve();
      }, ms);
      this.#onShutdown.add(cancel);
    });
  }
}
