/**
 * @module
 * The grpc probe: one `grpc.health.v1.Health/Check` call (plaintext, `kube-probe/<major>.<minor>`
 * user agent) with a hand-written client, as the two messages are a string and an enum. Private
 * helper of `prober.ts`. Corresponds to upstream `pkg/probe/grpc/grpc.go`.
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { BinaryReader, BinaryWriter } from "@bufbuild/protobuf/wire";
import { joinHostPort } from "./probe_http.ts";
import { GRPC_CODE_NAMES } from "../cri/connection.ts";

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
 * upstream grpcProber.Probe: connects within the deadline, calls Health/Check, and succeeds
 * ("service healthy") only on SERVING; every other answer or error is a Failure with upstream's
 * text. Rethrows when `signal` aborts.
 */
export async function doGrpcProbe(opts: GrpcProbeOptions): Promise<GrpcProbeOutcome> {
  const addr = joinHostPort(opts.host, opts.port);
  const service = opts.service ?? "";
  const timeout = goDuration(opts.timeoutMs);
  const deadline = Date.now() + opts.timeoutMs;
  const client = new grpc.Client(addr, grpc.credentials.createInsecure(), {
    "grpc.primary_user_agent": opts.userAgent ?? "kube-probe/1.36",
    // One attempt per probe: the next period is the retry.
    "grpc.enable_retries": 0,
  });
  let call: grpc.ClientUnaryCall | undefined;
  let rejectAbort: (e: unknown) => void = () => {};
  const aborted = new Promise<never>((_, reject) => {
    rejectAbort = reject;
  });
  aborted.catch(() => {});
  const onAbort = () => {
    call?.cancel();
    rejectAbort(opts.signal?.reason);
  };
  opts.signal?.throwIfAborted();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const connected = new Promise<Error | undefined>((resolve) =>
      client.waitForReady(deadline, (e) => resolve(e ?? undefined))
    );
    const connectError = await Promise.race([connected, aborted]);
    if (connectError) {
      return {
        result: "Failure",
        output: `timeout: failed to connect service ${
          JSON.stringify(addr)
        } within ${timeout}: context deadline exceeded`,
      };
    }
    const answer = new Promise<{ error?: grpc.ServiceError; status?: number }>((resolve) => {
      call = client.makeUnaryRequest<string, number>(
        HEALTH_CHECK_METHOD,
        (s) => Buffer.from(encodeHealthCheckRequest(s)),
        (b) => decodeHealthCheckResponse(b),
        service,
        new grpc.Metadata(),
        { deadline },
        (error, status) => resolve({ error: error ?? undefined, status }),
      );
    });
    const { error, status = 0 } = await Promise.race([answer, aborted]);
    if (error) {
      if (error.code === grpc.status.UNIMPLEMENTED) {
        return {
          result: "Failure",
          output:
            `error: this server does not implement the grpc health protocol (grpc.health.v1.Health): ${error.details}`,
        };
      }
      if (error.code === grpc.status.DEADLINE_EXCEEDED) {
        return {
          result: "Failure",
          output: `timeout: health rpc did not complete within ${timeout}`,
        };
      }
      return {
        result: "Failure",
        output: `error: health rpc probe failed: rpc error: code = ${
          GRPC_CODE_NAMES[error.code] ?? `Code(${error.code})`
        } desc = ${error.details}`,
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
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
    client.close();
  }
}
