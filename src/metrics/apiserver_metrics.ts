/**
 * @module
 * The k8s.io/apiserver families the kubelet's /metrics shows. The kubelet API's delegated
 * authentication and authorization fill theirs (src/server/auth.ts): one TokenReview or
 * SubjectAccessReview call per attempt by code (`<error>` when no answer came) with its latency,
 * the token cache's hits, misses and fetches, and the remaining lifetime of each client
 * certificate a request presents. The others are registered upstream by packages the kubelet
 * links without using them (audit, storage encryption, declarative validation, webhook x509
 * checks of the apiserver's own webhooks, discovery aggregation); they are registered here as upstream's are and are
 * zero for the same reason as upstream's: the kubelet does none of those things. Corresponds to
 * k8s.io/apiserver `pkg/authentication/authenticatorfactory/metrics.go`,
 * `pkg/authorization/authorizerfactory/metrics.go`, `pkg/authentication/token/cache/stats.go`,
 * `pkg/authentication/request/x509/x509.go`, `pkg/util/webhook/metrics.go`,
 * `pkg/audit/metrics.go`, `pkg/storage/value/metrics.go`,
 * `pkg/endpoints/discovery/aggregated/metrics.go`,
 * `pkg/storage/value/encrypt/envelope/metrics`, `pkg/validation/metrics.go`.
 */

import {
  Counter,
  DEF_BUCKETS,
  exponentialBuckets,
  Gauge,
  Histogram,
  type MetricsRegistry,
} from "./_registry.ts";

/** Upstream's delegated authn/authz latency buckets, in seconds. */
export const DELEGATED_AUTH_BUCKETS: readonly number[] = [0.25, 0.5, 0.7, 1, 1.5, 3, 5, 10];

/** Upstream's client certificate lifetime buckets: 0, 30 minutes ... 1 year, in seconds. */
export const CLIENT_CERTIFICATE_EXPIRATION_BUCKETS: readonly number[] = [
  0,
  1800,
  3600,
  7200,
  21600,
  43200,
  86400,
  172800,
  345600,
  604800,
  2592000,
  7776000,
  15552000,
  31104000,
];

/** The result of one webhook call as upstream labels it: the HTTP code, or `<error>`. */
export function webhookCode(status: number): string {
  return status === 0 ? "<error>" : String(status);
}

/** What the kubelet API's authentication and authorization record. */
export class ApiserverMetrics {
  /** apiserver_delegated_authn_request_total{code}: TokenReview calls, each attempt. */
  readonly delegatedAuthnRequests: Counter;
  readonly delegatedAuthnRequestDuration: Histogram;
  /** apiserver_delegated_authz_request_total{code}: SubjectAccessReview calls, each attempt. */
  readonly delegatedAuthzRequests: Counter;
  readonly delegatedAuthzRequestDuration: Histogram;
  /** authentication_token_cache_request_total{status}: hit or miss. */
  readonly tokenCacheRequests: Counter;
  /** authentication_token_cache_request_duration_seconds{status}, whole milliseconds as upstream. */
  readonly tokenCacheRequestDuration: Histogram;
  /** authentication_token_cache_fetch_total{status}: ok or error. */
  readonly tokenCacheFetches: Counter;
  /** authentication_token_cache_active_fetch_count{status}: blocked (waiting) or in_flight. */
  readonly tokenCacheActiveFetches: Gauge;
  /** apiserver_client_certificate_expiration_seconds: per request with a client certificate. */
  readonly clientCertificateExpiration: Histogram;

  constructor(r: MetricsRegistry) {
    const code = ["code"];
    const status = ["status"];
    this.delegatedAuthnRequests = r.register(
      new Counter({
        name: "apiserver_delegated_authn_request_total",
        help: "Number of HTTP requests partitioned by status code.",
        labelNames: code,
      }),
    );
    this.delegatedAuthnRequestDuration = r.register(
      new Histogram({
        name: "apiserver_delegated_authn_request_duration_seconds",
        help: "Request latency in seconds. Broken down by status code.",
        buckets: DELEGATED_AUTH_BUCKETS,
        labelNames: code,
      }),
    );
    this.delegatedAuthzRequests = r.register(
      new Counter({
        name: "apiserver_delegated_authz_request_total",
        help: "Number of HTTP requests partitioned by status code.",
        labelNames: code,
      }),
    );
    this.delegatedAuthzRequestDuration = r.register(
      new Histogram({
        name: "apiserver_delegated_authz_request_duration_seconds",
        help: "Request latency in seconds. Broken down by status code.",
        buckets: DELEGATED_AUTH_BUCKETS,
        labelNames: code,
      }),
    );
    // Upstream declares the token cache families without help text.
    this.tokenCacheRequestDuration = r.register(
      new Histogram({
        name: "authentication_token_cache_request_duration_seconds",
        help: "",
        buckets: DEF_BUCKETS,
        labelNames: status,
      }),
    );
    this.tokenCacheRequests = r.register(
      new Counter({
        name: "authentication_token_cache_request_total",
        help: "",
        labelNames: status,
      }),
    );
    this.tokenCacheFetches = r.register(
      new Counter({ name: "authentication_token_cache_fetch_total", help: "", labelNames: status }),
    );
    this.tokenCacheActiveFetches = r.register(
      new Gauge({
        name: "authentication_token_cache_active_fetch_count",
        help: "",
        labelNames: status,
      }),
    );
    this.clientCertificateExpiration = r.register(
      new Histogram({
        name: "apiserver_client_certificate_expiration_seconds",
        help:
          "Distribution of the remaining lifetime on the certificate used to authenticate a request.",
        buckets: CLIENT_CERTIFICATE_EXPIRATION_BUCKETS,
      }),
    );
    registerUnusedApiserverFamilies(r);
  }
}

/**
 * Families that linked packages register upstream and nothing in a kubelet feeds: always zero
 * there as here.
 */
function registerUnusedApiserverFamilies(r: MetricsRegistry): void {
  const counters: [string, string, ("ALPHA" | "BETA" | "INTERNAL")?][] = [
    [
      "apiserver_webhooks_x509_missing_san_total",
      "Counts the number of requests to servers missing SAN extension in their serving certificate OR the number of connection failures due to the lack of x509 certificate SAN extension missing (either/or, based on the runtime environment)",
    ],
    [
      "apiserver_webhooks_x509_insecure_sha1_total",
      "Counts the number of requests to servers with insecure SHA1 signatures in their serving certificate OR the number of connection failures due to the insecure SHA1 signatures (either/or, based on the runtime environment)",
    ],
    [
      "apiserver_audit_event_total",
      "Counter of audit events generated and sent to the audit backend.",
    ],
    [
      "apiserver_audit_requests_rejected_total",
      "Counter of apiserver requests rejected due to an error in audit logging backend.",
    ],
    [
      "apiserver_storage_data_key_generation_failures_total",
      "Total number of failed data encryption key(DEK) generation operations.",
    ],
    [
      "apiserver_storage_envelope_transformation_cache_misses_total",
      "Total number of cache misses while accessing key decryption key(KEK).",
    ],
    [
      "apiserver_validation_declarative_validation_mismatch_total",
      "Number of times declarative validation results differed from handwritten validation results for core types.",
      "BETA",
    ],
    [
      "apiserver_validation_declarative_validation_panic_total",
      "Number of times declarative validation has panicked during validation.",
      "BETA",
    ],
    [
      "apiserver_validation_duplicate_validation_error_total",
      "Number of duplicate validation errors during validation.",
      "INTERNAL",
    ],
  ];
  // k8s.io/apiserver pkg/endpoints/discovery/aggregated: the apiserver's discovery merging.
  counters.push(
    [
      "aggregator_discovery_aggregation_count_total",
      "Counter of number of times discovery was aggregated",
    ],
    [
      "aggregator_discovery_nopeer_requests_total",
      "Counter of number of times no-peer (non peer-aggregated) discovery was requested",
    ],
    [
      "aggregator_discovery_peer_aggregated_cache_hits_total",
      "Counter of number of times discovery was served from peer-aggregated cache",
    ],
    [
      "aggregator_discovery_peer_aggregated_cache_misses_total",
      "Counter of number of times discovery was aggregated across all API servers",
    ],
  );
  for (const [name, help, stabilityLevel] of counters) {
    r.register(new Counter({ name, help, stabilityLevel }));
  }
  r.register(
    new Gauge({
      name: "apiserver_envelope_encryption_dek_cache_fill_percent",
      help: "Percent of the cache slots currently occupied by cached DEKs.",
    }),
  );
  r.register(
    new Histogram({
      name: "apiserver_storage_data_key_generation_duration_seconds",
      help: "Latencies in seconds of data encryption key(DEK) generation operations.",
      buckets: exponentialBuckets(5e-6, 2, 14),
    }),
  );
}
