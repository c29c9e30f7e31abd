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
import { type EventRecorder, loggingRecorder } from "./client/record.ts";
import type { KubeClient } from "./client/kube_client.ts";
import type { KubeletMetrics } from "./metrics/metrics.ts";
import type { ImageManagerService } from "./cri/remote_image.ts";
import type { RuntimeService } from "./cri/remote_runtime.ts";
import type { ApplyProcessSettingsOptions } from "./app/process_settings.ts";

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
  /**
   * Where the process settings (OOM score, open-files limit, kernel tunables) are applied at
   * start; "launcher" when the launcher has applied them before the sandbox.
   * @default the process's and the host's own (app/process_settings.ts)
   */
  readonly processSettings?: Omit<ApplyProcessSettingsOptions, "logger"> | "launcher";
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
