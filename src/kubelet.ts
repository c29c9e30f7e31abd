/**
 * @module
 * The Kubelet: created and initialised from the KubeletServer and its Dependencies, then run
 * until its signal aborts. Corresponds to upstream's `pkg/kubelet/kubelet.go` (NewMainKubelet,
 * setupDataDirs, Run). This slice owns the data directories, the healthz endpoint and the
 * runtime endpoint check; the pod sources, sync loop, node status and CRI client are added by
 * the issues that build them, and until then the paths that need them fail loudly.
 */

import { join } from "node:path";
import type { Dependencies } from "./dependencies.ts";
import { serveHealthz } from "./healthz.ts";
import type { KubeletServer } from "./kubelet_server.ts";
import { unixSocketPath } from "./permissions.ts";

/** A requested mode or feature that this build does not implement yet. */
export class NotSupportedError extends Error {
  override name = "NotSupportedError";
}

/** What the Kubelet is built from (upstream NewMainKubelet's parameters, as one object). */
export interface KubeletOptions {
  readonly server: KubeletServer;
  readonly deps: Dependencies;
  readonly nodeName: string;
  readonly hostname: string;
  readonly nodeIPs: readonly string[];
}

/** The node agent. */
export class Kubelet {
  readonly #opts: KubeletOptions;

  constructor(opts: KubeletOptions) {
    this.#opts = opts;
  }

  /** The directories upstream's setupDataDirs creates under the root directory. */
  dataDirs(): string[] {
    const root = this.#opts.server.flags.rootDirectory;
    return [
      root,
      join(root, "pods"),
      join(root, "plugins"),
      join(root, "plugins_registry"),
      join(root, "pod-resources"),
      join(root, "checkpoints"),
    ];
  }

  /** Creates the data directories (0750, as upstream). */
  async setupDataDirs(): Promise<void> {
    for (const dir of this.dataDirs()) {
      try {
        await this.#opts.deps.os.mkdirAll(dir, 0o750);
      } catch (e) {
        throw new Error(
          `error creating directory ${dir}: ${e instanceof Error ? e.message : String(e)}`,
          { cause: e },
        );
      }
    }
  }

  /** Runs until `signal` aborts; resolves once everything it started has stopped. */
  async run(signal: AbortSignal): Promise<void> {
    const { server, deps } = this.#opts;
    const { config } = server;
    const log = deps.logger;
    const stopped: Promise<unknown>[] = [];
    if (config.healthzPort > 0) {
      const healthz = await serveHealthz({
        hostname: config.healthzBindAddress,
        port: config.healthzPort,
        logger: log,
        signal,
      });
      log.info("Started healthz server", {
        address: `${config.healthzBindAddress}:${config.healthzPort}`,
      });
      stopped.push(healthz.finished);
    }
    await this.#checkRuntimeEndpoint();
    if (config.staticPodPath) {
      log.error(
        new NotSupportedError("running pods is not supported yet"),
        "Static pods are not run by this build yet; the manifests are left untouched",
        { staticPodPath: config.staticPodPath },
      );
    }
    log.info("Started kubelet", { nodeName: this.#opts.nodeName, mode: "standalone" });
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    log.info("Shutting down kubelet");
    await Promise.allSettled(stopped);
  }

  async #checkRuntimeEndpoint(): Promise<void> {
    const { config } = this.#opts.server;
    const log = this.#opts.deps.logger;
    const path = unixSocketPath(config.containerRuntimeEndpoint);
    if (path === undefined) {
      throw new NotSupportedError(
        `containerRuntimeEndpoint '${config.containerRuntimeEndpoint}' is not supported: only unix:// endpoints are supported on Linux`,
      );
    }
    try {
      const info = await this.#opts.deps.os.stat(path);
      if (!info.isSocket) {
        log.error(null, "Container runtime endpoint is not a socket", {
          endpoint: config.containerRuntimeEndpoint,
        });
      } else {
        log.info("Container runtime endpoint found", { endpoint: config.containerRuntimeEndpoint });
      }
    } catch {
      log.error(null, "Container runtime endpoint does not exist; is the runtime running?", {
        endpoint: config.containerRuntimeEndpoint,
      });
    }
  }
}
