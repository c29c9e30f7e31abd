import assert from "node:assert/strict";
import { GrpcCode, GrpcServer, GrpcStatusError } from "../cri/grpc_server.ts";
import {
  decodeHealthCheckRequest,
  decodeHealthCheckResponse,
  doGrpcProbe,
  encodeHealthCheckRequest,
  encodeHealthCheckResponse,
} from "./_probe_grpc.ts";

/** The health service, its messages coded by hand as the probe codes them. */
const HEALTH = {
  fullName: "grpc.health.v1.Health",
  methods: {
    check: {
      name: "Check",
      requestType: {
        encode: (service: string) => ({ finish: () => encodeHealthCheckRequest(service) }),
        decode: decodeHealthCheckRequest,
      },
      responseType: {
        encode: (status: number) => ({ finish: () => encodeHealthCheckResponse(status) }),
        decode: decodeHealthCheckResponse,
      },
      responseStream: false,
    },
  },
} as const;

/** A server on a TCP port whose Health/Check answers with `answer(service)`. */
function healthServer(
  answer: (service: string) => number | GrpcStatusError | "hang",
  opts: { implement?: boolean } = {},
) {
  const server = GrpcServer.serve(Deno.listen({ hostname: "127.0.0.1", port: 0 }), {
    closeGracePeriodMs: 0,
  });
  const seen: Array<{ service: string; userAgent: string }> = [];
  if (opts.implement ?? true) {
    server.register(HEALTH, {
      check: async (service, ctx) => {
        seen.push({ service, userAgent: ctx.metadata.get("user-agent") ?? "" });
        const a = answer(service);
        if (a instanceof GrpcStatusError) throw a;
        if (a === "hang") {
          await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
          throw ctx.signal.reason;
        }
        return a;
      },
    });
  }
  return { port: server.port!, seen, [Symbol.asyncDispose]: () => server.close() };
}

Deno.test("encodeHealthCheckRequest and decodeHealthCheckResponse round-trip", () => {
  assert.equal(decodeHealthCheckRequest(encodeHealthCheckRequest("svc")), "svc");
  assert.deepEqual([...encodeHealthCheckRequest("ab")], [0x0a, 2, 0x61, 0x62]);
  assert.equal(decodeHealthCheckResponse(new Uint8Array([0x08, 2])), 2);
  assert.equal(decodeHealthCheckResponse(new Uint8Array()), 0);
});

Deno.test("doGrpcProbe succeeds on SERVING and sends the service and user agent", async () => {
  await using s = healthServer((svc) => svc === "db" ? 2 : 1);
  assert.deepEqual(await doGrpcProbe({ host: "127.0.0.1", port: s.port, timeoutMs: 1000 }), {
    result: "Success",
    output: "service healthy",
  });
  assert.deepEqual(
    await doGrpcProbe({ host: "127.0.0.1", port: s.port, service: "db", timeoutMs: 1000 }),
    { result: "Failure", output: 'service unhealthy (responded with "NOT_SERVING")' },
  );
  assert.equal(s.seen[1]?.service, "db");
  // grpc-go adds its own name and version to the kubelet's user agent.
  assert.equal(s.seen[0]?.userAgent, "kube-probe/1.36 grpc-go/1.79.3");
});

Deno.test("doGrpcProbe words unimplemented and failed RPCs as upstream", async () => {
  await using none = healthServer(() => 1, { implement: false });
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
  await using broken = healthServer(() => new GrpcStatusError(GrpcCode.UNAVAILABLE, "down"));
  assert.deepEqual(
    await doGrpcProbe({ host: "127.0.0.1", port: broken.port, timeoutMs: 1000 }),
    {
      result: "Failure",
      output: "error: health rpc probe failed: rpc error: code = Unavailable desc = down",
    },
  );
});

Deno.test("doGrpcProbe never blocks beyond its timeout", async () => {
  await using hung = healthServer(() => "hang");
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
