/**
 * The kubelet's gRPC client over cleartext TCP (the gRPC probe's, src/cri/h2c_unary.ts) against
 * a real grpc-go server: Debian's containerd 1.6, which serves its gRPC services on a TCP address
 * too when its config names one. The unit tests script the HTTP/2 peer; this shows the client
 * and grpc-go agree on the preface, SETTINGS, flow control, headers and trailers.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../proto/runtime/v1/api.ts";
import { GrpcCode } from "../src/cri/connection.ts";
import { h2cUnary } from "../src/cri/h2c_unary.ts";
import { freePort } from "./child_process.ts";
import { startContainerd } from "./containerd_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("the gRPC TCP client against containerd", ["containerd", "runc"]);

Deno.test({
  name: "the gRPC probe's client calls containerd's grpc-go server over TCP",
  ignore: gate.ignore,
  fn: async () => {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "grpc-tcp-" });
    const port = freePort();
    try {
      // Stopped at the end of this block, before its directory goes.
      await using _containerd = await startContainerd({
        dir,
        socket: join(dir, "containerd.sock"),
        runtime: "containerd",
        grpcTcpAddress: `127.0.0.1:${port}`,
      });
      const reply = await h2cUnary({
        hostname: "127.0.0.1",
        port,
        authority: `127.0.0.1:${port}`,
        path: "/runtime.v1.RuntimeService/Version",
        message: api.VersionRequest.encode({ version: "v1" }).finish(),
        userAgent: "kube-probe/1.36 grpc-go/1.79.3",
        timeoutMs: 10_000,
      });
      assert.equal(reply.kind, "reply", JSON.stringify(reply));
      if (reply.kind !== "reply") return;
      const version = api.VersionResponse.decode(reply.message);
      assert.equal(version.runtimeName, "containerd");
      assert.equal(version.runtimeApiVersion, "v1");

      // containerd serves no health service on TCP: grpc-go's Unimplemented, which the probe
      // words as upstream's (src/prober/_probe_grpc_test.ts).
      const health = await h2cUnary({
        hostname: "127.0.0.1",
        port,
        authority: `127.0.0.1:${port}`,
        path: "/grpc.health.v1.Health/Check",
        message: new Uint8Array(0),
        userAgent: "kube-probe/1.36 grpc-go/1.79.3",
        timeoutMs: 10_000,
      });
      assert.equal(health.kind, "status", JSON.stringify(health));
      if (health.kind !== "status") return;
      assert.deepEqual(
        [health.status.code, health.status.details],
        [GrpcCode.UNIMPLEMENTED, "unknown service grpc.health.v1.Health"],
      );
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
