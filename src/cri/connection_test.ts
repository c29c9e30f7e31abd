import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import {
  CriConnection,
  CriError,
  criMethods,
  criSocketPath,
  GrpcCode,
  isCriCode,
  rpcName,
} from "./connection.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { serveRawUnary } from "../testing/grpc_raw_server.ts";
import { RemoteRuntimeService } from "./remote_runtime.ts";
import { staticGraph } from "../testing/module_graph.ts";

/** A fake runtime on a socket in a fresh temp dir and a connection to it; both go afterwards. */
async function withFake(
  fn: (fake: FakeRemoteRuntime, conn: CriConnection) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "cri-conn-" });
  try {
    await using fake = await startFakeRuntime({ socket: join(dir, "cri.sock") });
    const conn = new CriConnection({ endpoint: fake.endpoint });
    try {
      await fn(fake, conn);
    } finally {
      conn.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("criSocketPath and rpcName read the kubelet's endpoint and RPC syntax", () => {
  assert.equal(
    criSocketPath("unix:///run/containerd/containerd.sock"),
    "/run/containerd/containerd.sock",
  );
  assert.equal(criSocketPath("/run/crio/crio.sock"), "/run/crio/crio.sock");
  assert.throws(() => criSocketPath("tcp://127.0.0.1:1234"), /only unix:\/\/ endpoints/);
  assert.equal(rpcName("/runtime.v1.ImageService/PullImage"), "ImageService/PullImage");
});

Deno.test("CriConnection stream with an aborted signal ends without calling the runtime", () =>
  withFake(async (fake, conn) => {
    const runtime = new RemoteRuntimeService({ connection: conn });
    const ctl = new AbortController();
    ctl.abort();
    const got = [];
    for await (const e of runtime.getContainerEvents(ctl.signal)) got.push(e);
    assert.deepEqual(got, []);
    assert.equal(fake.callCount("GetContainerEvents"), 0);
  }));

Deno.test("CriConnection close ends open streams and refuses new calls", () =>
  withFake(async (fake, conn) => {
    const runtime = new RemoteRuntimeService({ connection: conn });
    const reading = (async () => {
      for await (const _ of runtime.getContainerEvents()) { /* no events come */ }
    })();
    await until("the stream to attach", () => fake.service.subscribers === 1);
    conn.close();
    await reading;
    await until("the stream to detach", () => fake.service.subscribers === 0);
    await assert.rejects(
      runtime.version(),
      (e: unknown) => e instanceof CriError && e.code === GrpcCode.UNAVAILABLE,
    );
    conn.close(); // idempotent
  }));

Deno.test("criMethods gives each generated method its path and codecs", () => {
  const runtime = criMethods(api.RuntimeServiceDefinition);
  assert.equal(runtime.runPodSandbox.path, "/runtime.v1.RuntimeService/RunPodSandbox");
  assert.equal(runtime.runPodSandbox.responseStream, false);
  assert.equal(runtime.getContainerEvents.path, "/runtime.v1.RuntimeService/GetContainerEvents");
  assert.equal(runtime.getContainerEvents.responseStream, true);
  const images = criMethods(api.ImageServiceDefinition);
  assert.equal(images.pullImage.path, "/runtime.v1.ImageService/PullImage");
  const bytes = images.pullImage.request.encode(
    api.PullImageRequest.create({ image: { image: "busybox:1" } }),
  ).finish();
  assert.equal(api.PullImageRequest.decode(bytes).image?.image, "busybox:1");
});

Deno.test("CriConnection to a socket nobody serves fails Unavailable, worded as Go's dial error", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cri-conn-" });
  const socket = join(dir, "none.sock");
  const conn = new CriConnection({ endpoint: `unix://${socket}` });
  const runtime = new RemoteRuntimeService({ connection: conn });
  try {
    await assert.rejects(runtime.version(), (e: unknown) => {
      assert.ok(isCriCode(e, GrpcCode.UNAVAILABLE), String(e));
      assert.equal(e.rpc, "RuntimeService/Version");
      assert.match(
        e.details,
        new RegExp(
          `^connection error: desc = "transport: Error while dialing: dial unix ${socket}: `,
        ),
      );
      return true;
    });
  } finally {
    conn.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("CriConnection ends a call at its deadline and when its signal aborts", () =>
  withFake(async (fake, conn) => {
    const methods = criMethods(api.RuntimeServiceDefinition);
    fake.setLatency("Version", 5_000);
    await assert.rejects(
      conn.unary(methods.version, api.VersionRequest.create({}), { timeoutMs: 50 }),
      (e: unknown) =>
        isCriCode(e, GrpcCode.DEADLINE_EXCEEDED) && e.details === "context deadline exceeded",
    );
    const ctl = new AbortController();
    const call = conn.unary(methods.version, api.VersionRequest.create({}), {
      signal: ctl.signal,
      timeoutMs: 10_000,
    });
    setTimeout(() => ctl.abort(new Error("pod deleted")), 20);
    await assert.rejects(call, (e: unknown) => {
      assert.ok(isCriCode(e, GrpcCode.CANCELLED), String(e));
      assert.equal(e.details, "context canceled");
      assert.equal((e.cause as Error).message, "pod deleted");
      return true;
    });
    fake.setLatency("Version", 0);
    // The connection is still good for the next call.
    assert.equal(
      (await conn.unary(methods.version, api.VersionRequest.create({}))).runtimeName,
      "fake-runtime",
    );
  }));

Deno.test("CriConnection carries the runtime's code and percent-encoded message", () =>
  withFake(async (fake, conn) => {
    const runtime = new RemoteRuntimeService({ connection: conn });
    fake.injectError("Version", GrpcCode.FAILED_PRECONDITION, '100% full: "ünïcode"\nline');
    await assert.rejects(runtime.version(), (e: unknown) => {
      assert.ok(isCriCode(e, GrpcCode.FAILED_PRECONDITION), String(e));
      assert.equal(e.details, '100% full: "ünïcode"\nline');
      assert.equal(
        e.message,
        'RuntimeService/Version: rpc error: code = FailedPrecondition desc = 100% full: "ünïcode"\nline',
      );
      return true;
    });
  }));

Deno.test("the running kubelet does not load node:http2, gRPC probes included", async () => {
  // What the kubelet's worker loads to run (app/kubelet_command.ts imports the last two when it
  // starts the kubelet) stays for as long as the kubelet runs. node:http2 can abort the process
  // (denoland/deno#36788): the CRI client, the plugin servers and the gRPC probe use our own
  // HTTP/2.
  const loaded = new Set<string>();
  for (
    const entry of [
      "../privilege/agent_worker.ts",
      "../dependencies.ts",
      "../app/kubelet_server.ts",
    ]
  ) {
    for (const s of await staticGraph(new URL(entry, import.meta.url))) loaded.add(s);
  }
  for (
    const used of [
      "/cri/connection.ts",
      "/cri/remote_runtime.ts",
      "/prober/prober.ts",
      "/prober/_probe_grpc.ts",
      "/cri/h2c_unary.ts",
      "/src/kubelet.ts",
    ]
  ) {
    assert.ok([...loaded].some((s) => s.endsWith(used)), `${used} is not in the graph`);
  }
  assert.deepEqual([...loaded].filter((s) => s === "node:http2"), []);
});

Deno.test("CriConnection fails a reply it cannot unmarshal as Internal, as grpc-go does", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cri-conn-" });
  // A runtime that answers Version with a truncated message: field 1, length 5, no bytes.
  const socket = join(dir, "cri.sock");
  await using _server = await serveRawUnary({
    socket,
    method: "/runtime.v1.RuntimeService/Version",
    reply: () => Uint8Array.of(0x0a, 5),
  });
  const conn = new CriConnection({ endpoint: `unix://${socket}` });
  try {
    await assert.rejects(new RemoteRuntimeService({ connection: conn }).version(), (e: unknown) => {
      assert.ok(isCriCode(e, GrpcCode.INTERNAL), String(e));
      assert.match(e.details, /^grpc: failed to unmarshal the received message: /);
      return true;
    });
  } finally {
    conn.close();
    await Deno.remove(dir, { recursive: true });
  }
});
