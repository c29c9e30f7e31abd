/**
 * @module
 * The device plugin and pod resources API families of the kubelet's /metrics: registrations and
 * Allocate durations by resource name (recorded by the device manager,
 * `devicemanager/manager.ts`), and requests and errors of the pod resources API by server API
 * version (`podresources/server.ts`). Corresponds to upstream DevicePluginRegistrationCount,
 * DevicePluginAllocationDuration and PodResourcesEndpoint* of `pkg/kubelet/metrics/metrics.go`.
 */

import { Counter, DEF_BUCKETS, Histogram, type MetricsRegistry } from "./_registry.ts";
import type { DeviceManagerMetrics } from "../devicemanager/manager.ts";
import type { PodResourcesMetrics } from "../podresources/server.ts";

/** kubelet_device_plugin_registration_total and kubelet_device_plugin_alloc_duration_seconds. */
export class DevicePluginMetrics implements DeviceManagerMetrics {
  readonly registrations: Counter;
  readonly allocations: Histogram;

  constructor(r: MetricsRegistry) {
    this.registrations = r.register(
      new Counter({
        name: "kubelet_device_plugin_registration_total",
        help: "Cumulative number of device plugin registrations. Broken down by resource name.",
        labelNames: ["resource_name"],
      }),
    );
    this.allocations = r.register(
      new Histogram({
        name: "kubelet_device_plugin_alloc_duration_seconds",
        help:
          "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
        labelNames: ["resource_name"],
        buckets: DEF_BUCKETS,
      }),
    );
  }

  registration(resourceName: string): void {
    this.registrations.inc({ resource_name: resourceName });
  }

  allocationDuration(resourceName: string, seconds: number): void {
    this.allocations.observe(seconds, { resource_name: resourceName });
  }
}

type Endpoint = "list" | "get_allocatable" | "get";

/** kubelet_pod_resources_endpoint_{requests,errors}_*, by server_api_version. */
export class PodResourcesEndpointMetrics implements PodResourcesMetrics {
  readonly requestsTotal: Counter;
  readonly requestsList: Counter;
  readonly requestsGetAllocatable: Counter;
  readonly requestsGet: Counter;
  readonly errorsList: Counter;
  readonly errorsGetAllocatable: Counter;
  readonly errorsGet: Counter;

  constructor(r: MetricsRegistry) {
    const counter = (name: string, help: string) =>
      r.register(
        new Counter({
          name: `kubelet_pod_resources_endpoint_${name}`,
          help: `${help} Broken down by server api version.`,
          labelNames: ["server_api_version"],
        }),
      );
    const requests = (rpc: string) => `Number of requests to the PodResource ${rpc} endpoint.`;
    const errors = (rpc: string) =>
      `Number of requests to the PodResource ${rpc} endpoint which returned error.`;
    this.requestsTotal = counter(
      "requests_total",
      "Cumulative number of requests to the PodResource endpoint.",
    );
    this.requestsList = counter("requests_list", requests("List"));
    this.requestsGetAllocatable = counter(
      "requests_get_allocatable",
      requests("GetAllocatableResources"),
    );
    this.requestsGet = counter("requests_get", requests("Get"));
    this.errorsList = counter("errors_list", errors("List"));
    this.errorsGetAllocatable = counter(
      "errors_get_allocatable",
      errors("GetAllocatableResources"),
    );
    this.errorsGet = counter("errors_get", errors("Get"));
  }

  request(kind: Endpoint): void {
    const v1 = { server_api_version: "v1" };
    this.requestsTotal.inc(v1);
    ({
      list: this.requestsList,
      get_allocatable: this.requestsGetAllocatable,
      get: this.requestsGet,
    })[kind].inc(v1);
  }

  requestV1alpha1(): void {
    this.requestsTotal.inc({ server_api_version: "v1alpha1" });
  }

  error(kind: Endpoint): void {
    ({ list: this.errorsList, get_allocatable: this.errorsGetAllocatable, get: this.errorsGet })[
      kind
    ].inc({ server_api_version: "v1" });
  }
}
