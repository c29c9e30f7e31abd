import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import {
  decodeHealthCheckRequest,
  decodeHealthCheckResponse,
  doGrpcProbe,
  encodeHealthCheckRequest,
  encodeHealthCheckResponse,
} from "./_probe_grpc.ts";

/** A grpc-js server whose Health/Check answers with `answer(service)`. */
async function healthServer(
  answer: (service: string) => number | grpc.ServiceError | "hang",
  opts: { implement?: boolean } = {},
) {
  const server = new grpc.Server();
  const seen: Array<{ service: string; userAgent: string }> = [];
  if (opts.implement ?? true) {
    server.addService({
      Check: {
        path: "/grpc.health.v1.Health/Check",
        requestStream: false,
        responseStream: false,
        requestSerialize: (r: { service: string }) =>
          Buffer.from(encodeHealthCheckRequest(r.service)),
        // An object, as grpc-js takes a falsy request for a missing one.
        requestDeserialize: (b: Buffer) => ({ service: decodeHealthCheckRequest(b) }),
        responseSerialize: (n: number) => Buffer.from(encodeHealthCheckResponse(n)),
        responseDeserialize: (b: Buffer) => decodeHealthCheckResponse(b),
      },
    }, {
      Check: (
        call: grpc.ServerUnaryCall<{ service: string }, number>,
        cb: grpc.sendUnaryData<number>,
      ) => {
        seen.push({
          service: call.request.service,
          userAgent: String(call.metadata.get("user-agent")[0] ?? ""),
        });
        const a = answer(call.request.service);
        if (a === "hang") return;
        if (typeof a === "number") cb(null, a);
        else cb(a);
      },
    });
  }
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      "127.0.0.1:0",
      grpc.ServerCredentials.createInsecure(),
      (e, p) => e ? reject(e) : resolve(p),
    )
  );
  return { port, seen, [Symbol.dispose]: () => server.forceShutdown() };
}

Deno.test("encodeHealthCheckRequest and decodeHealthCheckResponse round-trip", () => {
  assert.equal(decodeHealthCheckRequest(encodeHealthCheckRequest("svc")), "svc");
  assert.deepEqual([...encodeHealthCheckRequest("ab")], [0x0a, 2, 0x61, 0x62]);
  assert.equal(decodeHealthCheckResponse(new Uint8Array([0x08, 2])), 2);
  assert.equal(decodeHealthCheckResponse(new Uint8Array()), 0);
});

Deno.test("doGrpcProbe succeeds on SERVING and sends the service and user agent", async () => {
  using s = await healthServer((svc) => svc === "db" ? 2 : 1);
  assert.deepEqual(await doGrpcProbe({ host: "127.0.0.1", port: s.port, timeoutMs: 1000 }), {
    result: "Success",
    output: "service healthy",
  });
  assert.deepEqual(
    await doGrpcProbe({ host: "127.0.0.1", port: s.port, service: "db", timeoutMs: 1000 }),
    { result: "Failure", output: 'service unhealthy (responded with "NOT_SERVING")' },
  );
  assert.equal(s.seen[1]?.service, "db");
  assert.match(s.seen[0]?.userAgent ?? "", /^kube-probe\/1\.36/);
});

Deno.test("doGrpcProbe words unimplemented and failed RPCs as upstream", async () => {
  using none = await healthServer(() => 1, { implement: false });
  const unimplemented = await doGrpcProbe({
    host: "127.0.0.1",
    port: none.port,
    timeoutMs: 1000,
  });
  assert.equal(unimplemented.result, "Failure");
  assert.match(
    unimplemented.output,
    /^error: this server does not implement the grpc health protocol \(grpc\.health\.v1\.Health\): /,
  );
  using broken = await healthServer(() =>
    Object.assign(new Error("down"), {
      code: grpc.status.UNAVAILABLE,
      details: "down",
    }) as grpc.ServiceError
  );
  assert.deepEqual(
    await doGrpcProbe({ host: "127.0.0.1", port: broken.port, timeoutMs: 1000 }),
    {
      result: "Failure",
      output: "error: health rpc probe failed: rpc error: code = Unavailable desc = down",
    },
  );
});

Deno.test("doGrpcProbe never blocks beyond its timeout", async () => {
  using hung = await healthServer(() => "hang");
  let t0 = performance.now();
  assert.deepEqual(await doGrpcProbe({ host: "127.0.0.1", port: hung.port, timeoutMs: 300 }), {
    result: "Failure",
    output: "timeout: health rpc did not complete within 300ms",
  });
  assert.ok(performance.now() - t0 < 1500);

  // A TCP listener that never speaks HTTP/2: the connection is never ready.
  using silent = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  t0 = performance.now();
  assert.deepEqual(
    await doGrpcProbe({ host: "127.0.0.1", port: silent.addr.port, timeoutMs: 300 }),
    {
      result: "Failure",
      output: `timeout: failed to connect service "127.0.0.1:${silent.addr.port}" within 300ms: ` +
        "context deadline exceeded",
    },
  );
  assert.ok(performance.now() - t0 < 1500);

  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = l.addr.port;
  l.close();
  t0 = performance.now();
  const refused = await doGrpcProbe({ host: "127.0.0.1", port, timeoutMs: 300 });
  assert.equal(refused.result, "Failure");
  assert.match(refused.output, /^timeout: failed to connect service/);
  assert.ok(performance.now() - t0 < 1500);
});
