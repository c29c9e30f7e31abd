import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { CriConnection, CriError, grpcTarget, rpcName } from "./cri_connection.ts";
import { startFakeRuntime } from "./fake_remote_runtime.ts";
import { RemoteRuntimeService } from "./remote_runtime.ts";

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("grpcTarget and rpcName read the kubelet's endpoint and RPC syntax", () => {
  assert.equal(
    grpcTarget("unix:///run/containerd/containerd.sock"),
    "unix:///run/containerd/containerd.sock",
  );
  assert.equal(grpcTarget("/run/crio/crio.sock"), "unix:///run/crio/crio.sock");
  assert.throws(() => grpcTarget("tcp://127.0.0.1:1234"), /only unix:\/\/ endpoints/);
  assert.equal(rpcName("/runtime.v1.ImageService/PullImage"), "ImageService/PullImage");
});

Deno.test("CriConnection stream with an aborted signal ends without calling the runtime", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cri-conn-" });
  await using fake = await startFakeRuntime({ socket: `${dir}/cri.sock` });
  const conn = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection: conn });
  try {
    const ctl = new AbortController();
    ctl.abort();
    const got = [];
    for await (const e of runtime.getContainerEvents(ctl.signal)) got.push(e);
    assert.deepEqual(got, []);
    assert.equal(fake.callCount("GetContainerEvents"), 0);
  } finally {
    conn.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("CriConnection close ends open streams and refuses new calls", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cri-conn-" });
  await using fake = await startFakeRuntime({ socket: `${dir}/cri.sock` });
  const conn = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection: conn });
  try {
    const reading = (async () => {
      for await (const _ of runtime.getContainerEvents()) { /* no events come */ }
    })();
    await until("the stream to attach", () => fake.service.subscribers === 1);
    conn.close();
    await reading;
    await until("the stream to detach", () => fake.service.subscribers === 0);
    await assert.rejects(
      runtime.version(),
      (e: unknown) => e instanceof CriError && e.code === grpc.status.UNAVAILABLE,
    );
    conn.close(); // idempotent
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
