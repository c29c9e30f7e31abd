/**
 * @module
 * The grpc probe: one `grpc.health.v1.Health/Check` call (plaintext, `kube-probe/<major>.<minor>`
 * user agent) over {@link h2cUnary}, with the two messages (a string and an enum) coded by hand.
 * Private helper of `prober.ts`. Corresponds to upstream `pkg/probe/grpc/grpc.go`.
 */

import { BinaryReader, BinaryWriter } from "@bufbuild/protobuf/wire";
import { GRPC_CODE_NAMES, GrpcCode } from "../cri/connection.ts";
import { h2cUnary } from "../cri/h2c_unary.ts";
import { errorText } from "../util/errors.ts";
import { joinHostPort } from "./probe_http.ts";

/** The health service's method path. */
export const HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check";

/** grpc.health.v1.HealthCheckResponse.ServingStatus names by number. */
export const SERVING_STATUS_NAMES: Readonly<Record<number, string>> = {
  0: "UNKNOWN",
  1: "SERVING",
  2: "NOT_SERVING",
  3: "SERVICE_UNKNOWN",
};

/** HealthCheckRequest { string service = 1; } */
export function encodeHealthCheckRequest(service: string): Uint8Array {
  const w = new BinaryWriter();
  if (service !== "") w.uint32((1 << 3) | 2).string(service);
  return w.finish();
}

/** HealthCheckResponse { ServingStatus status = 1; } → the status number. */
export function decodeHealthCheckResponse(bytes: Uint8Array): number {
  const r = new BinaryReader(bytes);
  let status = 0;
  while (r.pos < r.len) {
    const [field, wireType] = r.tag();
    if (field === 1 && wireType === 0) status = r.int32();
    else r.skip(wireType);
  }
  return status;
}

/** HealthCheckRequest → bytes, for the server side of tests. */
export function decodeHealthCheckRequest(bytes: Uint8Array): string {
  const r = new BinaryReader(bytes);
  let service = "";
  while (r.pos < r.len) {
    const [field, wireType] = r.tag();
    if (field === 1 && wireType === 2) service = r.string();
    else r.skip(wireType);
  }
  return service;
}

/** HealthCheckResponse bytes, for the server side of tests. */
export function encodeHealthCheckResponse(status: number): Uint8Array {
  const w = new BinaryWriter();
  if (status !== 0) w.uint32(1 << 3).int32(status);
  return w.finish();
}

/** The outcome of a gRPC probe. */
export interface GrpcProbeOutcome {
  readonly result: "Success" | "Failure";
  readonly output: string;
}

/** Options of {@link doGrpcProbe}. */
export interface GrpcProbeOptions {
  readonly host: string;
  readonly port: number;
  /** The `service` field of the request. @default "" */
  readonly service?: string;
  readonly timeoutMs: number;
  /** @default "kube-probe/1.36" */
  readonly userAgent?: string;
  readonly signal?: AbortSignal;
}

/** Go's time.Duration.String for whole and fractional seconds as probes use them. */
function goDuration(ms: number): string {
  return ms < 1000 ? `${ms}ms` : `${ms / 1000}s`;
}

/**
 * The grpc-go release upstream v1.36 vendors: grpc-go adds "grpc-go/<version>" to the user
 * agent the kubelet gives, and a pod's server sees that pair.
 */
const GRPC_GO_VERSION = "1.79.3";

/**
 * upstream grpcProber.Probe: connects within the deadline, calls Health/Check, and succeeds
 * ("service healthy") only on SERVING; every other answer or error is a Failure with upstream's
 * text. Rethrows when `signal` aborts.
 */
export async function doGrpcProbe(opts: GrpcProbeOptions): Promise<GrpcProbeOutcome> {
  const addr = joinHostPort(opts.host, opts.port);
  const timeout = goDuration(opts.timeoutMs);
  const out = await h2cUnary({
    hostname: opts.host,
    port: opts.port,
    authority: addr,
    path: HEALTH_CHECK_METHOD,
    message: encodeHealthCheckRequest(opts.service ?? ""),
    userAgent: `${opts.userAgent ?? "kube-probe/1.36"} grpc-go/${GRPC_GO_VERSION}`,
    timeoutMs: opts.timeoutMs,
    signal: opts.signal,
  });
  switch (out.kind) {
    case "unconnected":
      return {
        result: "Failure",
        output: `timeout: failed to connect service ${
          JSON.stringify(addr)
        } within ${timeout}: ${out.error}`,
      };
    case "status": {
      const { code, details } = out.status;
      if (code === GrpcCode.UNIMPLEMENTED) {
        return {
          result: "Failure",
          output:
            `error: this server does not implement the grpc health protocol (grpc.health.v1.Health): ${details}`,
        };
      }
      if (code === GrpcCode.DEADLINE_EXCEEDED) {
        return {
          result: "Failure",
          output: `timeout: health rpc did not complete within ${timeout}`,
        };
      }
      return {
        result: "Failure",
        output: `error: health rpc probe failed: rpc error: code = ${
          GRPC_CODE_NAMES[code] ?? `Code(${code})`
        } desc = ${details}`,
      };
    }
  }
  let status: number;
  try {
    status = decodeHealthCheckResponse(out.message);
  } catch (e) {
    return {
      result: "Failure",
      output:
        `error: health rpc probe failed: rpc error: code = Internal desc = grpc: failed to unmarshal the received message: ${
          errorText(e)
        }`,
    };
  }
  if (status !== 1) {
    return {
      result: "Failure",
      output: `service unhealthy (responded with ${
        JSON.stringify(SERVING_STATUS_NAMES[status] ?? String(status))
      })`,
    };
  }
  return { result: "Success", output: "service healthy" };
}
