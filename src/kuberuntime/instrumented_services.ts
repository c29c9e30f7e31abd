/**
 * @module
 * CRI runtime and image services wrapped to record every call: the count, duration and errors
 * of each operation under upstream's `operation_type` names (`run_podsandbox`,
 * `create_container`, `list_images`, ...), and for RunPodSandbox its own duration and errors
 * by runtime handler. The wrappers change nothing else: same results, same errors. The
 * kubelet wraps its services once, so the pod lifecycle, PLEG, statistics and probes are all
 * counted. Corresponds to upstream `pkg/kubelet/kuberuntime/instrumented_services.go`; this
 * agent also counts the calls that start pods while they are in flight ({@link START_CALLS}),
 * for the event writer to yield to.
 */

import type { KubeletMetrics } from "../metrics/metrics.ts";
import type { ImageManagerService } from "../cri/remote_image.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import type { Clock } from "../util/clock.ts";
import type { InFlight } from "../util/in_flight.ts";

/** The metrics the wrappers record into. */
export type RuntimeOperationMetrics = Pick<
  KubeletMetrics,
  | "runtimeOperations"
  | "runtimeOperationsDuration"
  | "runtimeOperationsErrors"
  | "runPodSandboxDuration"
  | "runPodSandboxErrors"
>;

/** Upstream's operation name of each RuntimeService method. */
export const RUNTIME_OPERATIONS: Readonly<Record<keyof RuntimeService, string>> = {
  version: "version",
  status: "status",
  createContainer: "create_container",
  startContainer: "start_container",
  stopContainer: "stop_container",
  removeContainer: "remove_container",
  listContainers: "list_containers",
  containerStatus: "container_status",
  updateContainerResources: "update_container",
  reopenContainerLog: "reopen_container_log",
  execSync: "exec_sync",
  exec: "exec",
  attach: "attach",
  runPodSandbox: "run_podsandbox",
  stopPodSandbox: "stop_podsandbox",
  removePodSandbox: "remove_podsandbox",
  podSandboxStatus: "podsandbox_status",
  listPodSandbox: "list_podsandbox",
  containerStats: "container_stats",
  listContainerStats: "list_container_stats",
  podSandboxStats: "podsandbox_stats",
  listPodSandboxStats: "list_podsandbox_stats",
  portForward: "port_forward",
  updatePodSandboxResources: "update_podsandbox_resources",
  updateRuntimeConfig: "update_runtime_config",
  checkpointContainer: "checkpoint_container",
  getContainerEvents: "get_container_events",
  listMetricDescriptors: "list_metric_descriptors",
  listPodSandboxMetrics: "list_podsandbox_metrics",
  runtimeConfig: "runtime_config",
};

/** Upstream's operation name of each ImageManagerService method. */
export const IMAGE_OPERATIONS: Readonly<Record<keyof ImageManagerService, string>> = {
  listImages: "list_images",
  imageStatus: "image_status",
  pullImage: "pull_image",
  removeImage: "remove_image",
  imageFsInfo: "image_fs_info",
};

type AnyFn = (...args: unknown[]) => unknown;

/** The RuntimeService methods that start pods, counted in flight by {@link instrumentRuntimeService}. */
export const START_CALLS: ReadonlySet<keyof RuntimeService> = new Set([
  "runPodSandbox",
  "createContainer",
  "startContainer",
]);

/**
 * Wraps each listed method of `service` with the recording of its operation; the
 * {@link START_CALLS} are also counted in `startCalls` while they run.
 */
function instrument<T extends object>(
  service: T,
  operations: Readonly<Record<string, string>>,
  metrics: RuntimeOperationMetrics,
  clock: Pick<Clock, "now">,
  startCalls?: InFlight,
): T {
  const record = (operation: string, startMs: number, failed: boolean) => {
    const labels = { operation_type: operation };
    metrics.runtimeOperations.inc(labels);
    metrics.runtimeOperationsDuration.observe((clock.now() - startMs) / 1000, labels);
    if (failed) metrics.runtimeOperationsErrors.inc(labels);
  };
  const out: Record<string, unknown> = {};
  for (const [method, operation] of Object.entries(operations)) {
    // Looked up at call time, so a service that lacks a method fails only when it is called.
    const call = (...args: unknown[]) => (service as Record<string, AnyFn>)[method]!(...args);
    const counter = START_CALLS.has(method as keyof RuntimeService) ? startCalls : undefined;
    const fn = counter
      ? (...args: unknown[]) => counter.track(async () => await call(...args))
      : call;
    if (method === "getContainerEvents") {
      // A stream: the operation lasts until it ends, as upstream's blocking call does.
      out[method] = async function* (...args: unknown[]) {
        const start = clock.now();
        let failed = false;
        try {
          yield* fn(...args) as AsyncGenerator<unknown>;
        } catch (e) {
          failed = true;
          throw e;
        } finally {
          record(operation, start, failed);
        }
      };
      continue;
    }
    out[method] = async (...args: unknown[]) => {
      const start = clock.now();
      let failed = false;
      try {
        return await fn(...args);
      } catch (e) {
        failed = true;
        throw e;
      } finally {
        record(operation, start, failed);
        if (method === "runPodSandbox") {
          const handler = { runtime_handler: String(args[1] ?? "") };
          metrics.runPodSandboxDuration.observe((clock.now() - start) / 1000, handler);
          if (failed) metrics.runPodSandboxErrors.inc(handler);
        }
      }
    };
  }
  return out as T;
}

/**
 * The runtime service, counted (upstream newInstrumentedRuntimeService); with `startCalls`, the
 * {@link START_CALLS} in flight are counted there too.
 */
export function instrumentRuntimeService(
  service: RuntimeService,
  metrics: RuntimeOperationMetrics,
  clock: Pick<Clock, "now">,
  startCalls?: InFlight,
): RuntimeService {
  return instrument(service, RUNTIME_OPERATIONS, metrics, clock, startCalls);
}

/** The image service, counted (upstream newInstrumentedImageManagerService). */
export function instrumentImageService(
  service: ImageManagerService,
  metrics: RuntimeOperationMetrics,
  clock: Pick<Clock, "now">,
): ImageManagerService {
  return instrument(service, IMAGE_OPERATIONS, metrics, clock);
}
