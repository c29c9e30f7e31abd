/**
 * @module
 * The agent's injected dependencies: everything a manager reaches outside the process through.
 * Built once by {@link unsecuredDependencies} from the KubeletServer, replaced piecemeal by
 * tests. Corresponds to upstream's `kubelet.Dependencies` and `UnsecuredDependencies`
 * (cmd/kubelet/app/server.go); later pieces (the CRI runtime and image services, the kube
 * client, the mounter) join it as they are built, each behind an interface like these.
 */

import type { ConfigReloader } from "./app/kubelet_config_reload.ts";
import { type Clock, realClock } from "./util/clock.ts";
import type { Logger } from "./klog/klog.ts";
import type { KubeClient } from "./client/kube_client.ts";
import type { KubeletMetrics } from "./metrics/metrics.ts";
import type { ImageManagerService } from "./cri/remote_image.ts";
import type { RuntimeService } from "./cri/remote_runtime.ts";

/** What the kubelet asks of the host's OS (upstream `kubecontainer.OSInterface`). */
export interface OSInterface {
  hostname(): string;
  mkdirAll(path: string, mode?: number): Promise<void>;
}

/** The real host. */
export const realOS: OSInterface = {
  hostname: () => Deno.hostname(),
  mkdirAll: (path, mode = 0o755) => Deno.mkdir(path, { recursive: true, mode }),
};

/** A reference to the object an event is about (upstream `v1.ObjectReference`, trimmed). */
export interface ObjectRef {
  readonly kind: string;
  readonly name: string;
  readonly namespace?: string;
  readonly uid?: string;
  /** @default "v1" */
  readonly apiVersion?: string;
  readonly resourceVersion?: string;
  /** The part of the object, such as `spec.containers{app}` (upstream container references). */
  readonly fieldPath?: string;
}

/** Records events (upstream `record.EventRecorder`). */
export interface EventRecorder {
  event(object: ObjectRef, type: "Normal" | "Warning", reason: string, message: string): void;
}

/** The recorders {@link loggingRecorder} made. */
const LOGGING_ONLY = new WeakSet<EventRecorder>();

/**
 * The recorder of standalone mode: with no apiserver to post to, upstream's broadcaster only
 * logs events, at verbosity 3; so does this one.
 */
export function loggingRecorder(logger: Logger): EventRecorder {
  const recorder: EventRecorder = {
    event(object, type, reason, message) {
      logger.v(3).info("Event occurred", {
        object: object.namespace ? `${object.namespace}/${object.name}` : object.name,
        kind: object.kind,
        type,
        reason,
        message,
      });
    },
  };
  LOGGING_ONLY.add(recorder);
  return recorder;
}

/** Everything the kubelet is given rather than builds. */
export interface Dependencies {
  readonly logger: Logger;
  readonly os: OSInterface;
  readonly clock: Clock;
  readonly recorder: EventRecorder;
  /** The CRI runtime service; set by preInitRuntimeService unless a test injects one. */
  readonly runtimeService?: RuntimeService;
  /** The CRI image service; set by preInitRuntimeService unless a test injects one. */
  readonly imageService?: ImageManagerService;
  /** The apiserver client (kubeAPIQPS/kubeAPIBurst); undefined in standalone mode. */
  readonly kubeClient?: KubeClient;
  /** The unthrottled client for node status and lease heartbeats; undefined in standalone mode. */
  readonly heartbeatClient?: KubeClient;
  /** Reloads the configuration on SIGHUP; components register what they apply live. */
  readonly reloader?: ConfigReloader;
  /** Where the kubelet's own metrics are recorded (/metrics); the Kubelet makes one when unset. */
  readonly metrics?: KubeletMetrics;
}

/**
 * The recorder of API server mode: events go to `api`, which writes them to the apiserver and
 * logs each at v3 as upstream's broadcaster does, and to `given` (the dependencies' recorder,
 * e.g. a test's) unless that is a {@link loggingRecorder}, whose line would repeat api's.
 */
export function withApiserverRecorder(given: EventRecorder, api: EventRecorder): EventRecorder {
  if (LOGGING_ONLY.has(given)) return api;
  return {
    event(object, type, reason, message) {
      given.event(object, type, reason, message);
      api.event(object, type, reason, message);
    },
  };
}

/** Builds the default dependencies (upstream's UnsecuredDependencies: nothing is dialled yet). */
export function unsecuredDependencies(opts: { logger: Logger }): Dependencies {
  return {
    logger: opts.logger,
    os: realOS,
    clock: realClock,
    recorder: loggingRecorder(opts.logger),
  };
}
