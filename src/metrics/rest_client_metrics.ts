/**
 * @module
 * The `rest_client_*` families of the kubelet's /metrics, which client-go fills upstream and
 * {@link KubeClient} fills here: per verb and host, request latency (rate limiter wait included),
 * the rate limiter's wait, request and response sizes; per code, method and host, every answer
 * (`<error>` when none came) and every retry; the transports made. Some stay empty for what
 * KubeClient does not do: it never retries a request itself (callers retry with new requests,
 * so rest_client_request_retries_total has no series), keeps no transport cache (every client
 * it makes counts as `uncacheable`, the cache holds 0 entries), reloads no CA file and runs no
 * exec plugin (src/client/kubeconfig.ts ignores an `exec` stanza; the TTL is +Inf, as upstream's
 * without one). Corresponds to component-base `metrics/prometheus/restclient/metrics.go`, fed by
 * client-go's `rest/request.go` and `transport/cache.go`.
 */

import { Counter, Gauge, Histogram, type MetricsRegistry } from "./_registry.ts";

/** Upstream's latency buckets of request and rate limiter durations, in seconds. */
export const REST_CLIENT_LATENCY_BUCKETS: readonly number[] = [
  0.005,
  0.025,
  0.1,
  0.25,
  0.5,
  1,
  2,
  4,
  8,
  15,
  30,
  60,
];

/** Upstream's size buckets: 64 bytes to 16 MiB. */
export const REST_CLIENT_SIZE_BUCKETS: readonly number[] = [
  64,
  256,
  512,
  1024,
  4096,
  16384,
  65536,
  262144,
  1048576,
  4194304,
  16777216,
];

/** Upstream's exec plugin certificate rotation buckets: 10 minutes to 4 years. */
const ROTATION_AGE_BUCKETS = [
  600,
  1800,
  3600,
  14400,
  86400,
  604800,
  2592000,
  7776000,
  15552000,
  31104000,
  124416000,
];

/** client-go's request metrics as one registry holds them. */
export class RestClientMetrics {
  /** rest_client_request_duration_seconds{verb,host}: throttling, the request and its body. */
  readonly requestDuration: Histogram;
  /** rest_client_rate_limiter_duration_seconds{verb,host}: only clients with a rate limit. */
  readonly rateLimiterDuration: Histogram;
  /** rest_client_request_size_bytes{verb,host}: 0 for a request without a body. */
  readonly requestSize: Histogram;
  /** rest_client_response_size_bytes{verb,host}: the body read, not for watches. */
  readonly responseSize: Histogram;
  /** rest_client_requests_total{code,method,host}: every attempt's answer or `<error>`. */
  readonly requests: Counter;
  /** rest_client_request_retries_total{code,verb,host}: attempts after the first. */
  readonly requestRetries: Counter;
  readonly execPluginCertificateRotationAge: Histogram;
  readonly execPluginCalls: Counter;
  /** rest_client_transport_cache_entries: transports kept for reuse (none here). */
  readonly transportCacheEntries: Gauge;
  /** rest_client_transport_create_calls_total{result}: hit, miss, miss-gc or uncacheable. */
  readonly transportCreateCalls: Counter;
  readonly transportCAReloads: Counter;
  readonly transportCertRotationGCCalls: Counter;
  readonly transportCacheGCCalls: Counter;

  constructor(r: MetricsRegistry) {
    const verbHost = ["verb", "host"];
    this.requestDuration = r.register(
      new Histogram({
        name: "rest_client_request_duration_seconds",
        help: "Request latency in seconds. Broken down by verb, and host.",
        buckets: REST_CLIENT_LATENCY_BUCKETS,
        labelNames: verbHost,
      }),
    );
    this.requestSize = r.register(
      new Histogram({
        name: "rest_client_request_size_bytes",
        help: "Request size in bytes. Broken down by verb and host.",
        buckets: REST_CLIENT_SIZE_BUCKETS,
        labelNames: verbHost,
      }),
    );
    this.responseSize = r.register(
      new Histogram({
        name: "rest_client_response_size_bytes",
        help: "Response size in bytes. Broken down by verb and host.",
        buckets: REST_CLIENT_SIZE_BUCKETS,
        labelNames: verbHost,
      }),
    );
    this.rateLimiterDuration = r.register(
      new Histogram({
        name: "rest_client_rate_limiter_duration_seconds",
        help: "Client side rate limiter latency in seconds. Broken down by verb, and host.",
        buckets: REST_CLIENT_LATENCY_BUCKETS,
        labelNames: verbHost,
      }),
    );
    this.requests = r.register(
      new Counter({
        name: "rest_client_requests_total",
        help: "Number of HTTP requests, partitioned by status code, method, and host.",
        labelNames: ["code", "method", "host"],
      }),
    );
    this.requestRetries = r.register(
      new Counter({
        name: "rest_client_request_retries_total",
        help: "Number of request retries, partitioned by status code, verb, and host.",
        labelNames: ["code", "verb", "host"],
      }),
    );
    // A GaugeFunc upstream; no exec plugin ever gives a certificate here.
    const ttl = r.register(
      new Gauge({
        name: "rest_client_exec_plugin_ttl_seconds",
        help:
          "Gauge of the shortest TTL (time-to-live) of the client certificate(s) managed by the auth exec plugin. The value is in seconds until certificate expiry (negative if already expired). If auth exec plugins are unused or manage no TLS certificates, the value will be +INF.",
      }),
    );
    ttl.set(Infinity);
    this.execPluginCertificateRotationAge = r.register(
      new Histogram({
        name: "rest_client_exec_plugin_certificate_rotation_age",
        help:
          "Histogram of the number of seconds the last auth exec plugin client certificate lived before being rotated. If auth exec plugin client certificates are unused, histogram will contain no data.",
        buckets: ROTATION_AGE_BUCKETS,
      }),
    );
    this.execPluginCalls = r.register(
      new Counter({
        name: "rest_client_exec_plugin_call_total",
        help:
          "Number of calls to an exec plugin, partitioned by the type of event encountered (no_error, plugin_execution_error, plugin_not_found_error, client_internal_error) and an optional exit code. The exit code will be set to 0 if and only if the plugin call was successful.",
        labelNames: ["code", "call_status"],
      }),
    );
    this.transportCacheEntries = r.register(
      new Gauge({
        name: "rest_client_transport_cache_entries",
        help: "Number of transport entries in the internal cache.",
      }),
    );
    this.transportCreateCalls = r.register(
      new Counter({
        name: "rest_client_transport_create_calls_total",
        help:
          "Number of calls to get a new transport, partitioned by the result of the operation hit: obtained from the cache, miss: created and added to the cache, miss-gc: recreated and added back to the cache after being garbage collected, uncacheable: created and not cached",
        labelNames: ["result"],
      }),
    );
    this.transportCAReloads = r.register(
      new Counter({
        name: "rest_client_transport_ca_reload_total",
        help:
          "Number of times a CA reload is attempted, partitioned by the result and reason for the reload attempt",
        labelNames: ["result", "reason"],
      }),
    );
    this.transportCertRotationGCCalls = r.register(
      new Counter({
        name: "rest_client_transport_cert_rotation_gc_calls_total",
        help:
          "Number of times a cert rotation goroutine cancel func is called via GC cleanup of the associated transport",
      }),
    );
    this.transportCacheGCCalls = r.register(
      new Counter({
        name: "rest_client_transport_cache_gc_calls_total",
        help:
          "Number of times a GC cleanup attempts to delete a transport cache entry, partitioned by the result: deleted, skipped",
        labelNames: ["result"],
      }),
    );
  }
}
