/**
 * @module
 * The Dynamic Resource Allocation families of the kubelet's /metrics: how long handling a pod's
 * ResourceClaims took when the pod started or stopped (`dra_operations_duration_seconds`, one
 * observation per PrepareResources or UnprepareResources, claims or not) and the claims in use
 * on the node by driver, read at scrape time from the DRA manager
 * (`dra_resource_claims_in_use`, with `<any>` for the total), and each gRPC call to a DRA
 * driver's kubelet plugin (`dra_grpc_operations_duration_seconds`). The DRA manager
 * (`cm/dra_manager.ts`) and its plugin client (`cm/dra_plugin.ts`) record them. Corresponds to
 * upstream DRAOperationsDuration, DRAGRPCOperationsDuration and DRAResourceClaimsInUseDesc of
 * `pkg/kubelet/metrics/metrics.go`, with the collector of `pkg/kubelet/cm/dra/claiminfo.go`.
 */

import { Histogram, type MetricsRegistry } from "./_registry.ts";
import type { PrometheusText } from "./prometheus.ts";

/** The driver_name of the count over every driver (upstream DRAResourceClaimsInUseAnyDriver). */
export const ANY_DRIVER = "<any>";

/** Frexp: `x` as `f * 2**e` with `0.5 <= |f| < 1`, for a finite, non-zero `x`. */
function frexp(x: number): [number, number] {
  let e = Math.floor(Math.log2(Math.abs(x))) + 1;
  let f = x * 2 ** -e;
  // log2 may be one off near a power of two.
  while (Math.abs(f) < 0.5) [f, e] = [f * 2, e - 1];
  while (Math.abs(f) >= 1) [f, e] = [f / 2, e + 1];
  return [f, e];
}

/**
 * Go's math.Pow for a non-negative integer exponent: repeated squaring of the mantissa, so the
 * bounds print the same digits as upstream's (V8's Math.pow differs in the last bit there).
 */
function goPowInt(x: number, n: number): number {
  let a1 = 1;
  let ae = 0;
  let [x1, xe] = frexp(x);
  for (let i = n; i !== 0; i = Math.floor(i / 2)) {
    if (i % 2 === 1) {
      a1 *= x1;
      ae += xe;
    }
    x1 *= x1;
    xe *= 2;
    if (x1 < 0.5) {
      x1 += x1;
      xe--;
    }
  }
  return a1 * 2 ** ae;
}

/**
 * prometheus.ExponentialBucketsRange: `count` bounds from `min` to `max`, each the same factor
 * above the last.
 */
export function exponentialBucketsRange(min: number, max: number, count: number): number[] {
  if (count < 1 || !(min > 0)) {
    throw new Error(
      `exponentialBucketsRange needs count >= 1 and min > 0: got ${count} and ${min}`,
    );
  }
  if (count === 1) return [min];
  const factor = Math.pow(max / min, 1 / (count - 1));
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(min * goPowInt(factor, i));
  return out;
}

/** Upstream DRADurationBuckets: 0.1 s to 40 s (the DRA gRPC timeout is 45 s). */
export const DRA_DURATION_BUCKETS: readonly number[] = exponentialBucketsRange(0.1, 40, 15);

/** The DRA operations upstream times. */
export type DraOperation = "PrepareResources" | "UnprepareResources";

/** Claims in use by driver name, with {@link ANY_DRIVER} for the total. */
export type ClaimsInUseSource = () => ReadonlyMap<string, number>;

const CLAIMS_IN_USE = "dra_resource_claims_in_use";
const CLAIMS_IN_USE_HELP =
  "[ALPHA] The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.";

/** The DRA families; see the module documentation. */
export class DraMetrics {
  /** dra_operations_duration_seconds{operation_name,is_error}. */
  readonly operationsDuration: Histogram;
  /** dra_grpc_operations_duration_seconds{driver_name,method_name,grpc_status_code}. */
  readonly grpcOperationsDuration: Histogram;
  #claimsInUse: ClaimsInUseSource | undefined;

  constructor(registry: MetricsRegistry) {
    this.operationsDuration = registry.register(
      new Histogram({
        name: "dra_operations_duration_seconds",
        help:
          "Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.",
        buckets: DRA_DURATION_BUCKETS,
        labelNames: ["operation_name", "is_error"],
      }),
    );
    this.grpcOperationsDuration = registry.register(
      new Histogram({
        name: "dra_grpc_operations_duration_seconds",
        help: "Duration in seconds of the DRA gRPC operations",
        buckets: DRA_DURATION_BUCKETS,
        labelNames: ["driver_name", "method_name", "grpc_status_code"],
      }),
    );
    registry.addCollector((out) => this.#collect(out));
  }

  /** Makes `source` the one dra_resource_claims_in_use reads (the DRA manager's claims). */
  setClaimsInUseSource(source: ClaimsInUseSource): void {
    this.#claimsInUse = source;
  }

  /** One PrepareResources or UnprepareResources of a pod, failed or not. */
  observeOperation(operation: DraOperation, seconds: number, failed: boolean): void {
    this.operationsDuration.observe(seconds, {
      operation_name: operation,
      is_error: String(failed),
    });
  }

  /**
   * One gRPC call to a driver: `method` is the full method (`/<service>/<method>`), `code` the
   * status code's Go name ("OK", "Unavailable", ...).
   */
  observeGrpc(driver: string, method: string, code: string, seconds: number): void {
    this.grpcOperationsDuration.observe(seconds, {
      driver_name: driver,
      method_name: method,
      grpc_status_code: code,
    });
  }

  #collect(out: PrometheusText): void {
    const counts = this.#claimsInUse?.();
    if (!counts) return;
    out.family(CLAIMS_IN_USE, CLAIMS_IN_USE_HELP, "gauge");
    for (const [driver, n] of counts) out.sample(CLAIMS_IN_USE, { driver_name: driver }, n);
  }
}
