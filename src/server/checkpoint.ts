/**
 * @module
 * The container checkpoint API (`POST /checkpoint/{podNamespace}/{podID}/{containerName}`,
 * KEP-2008, behind the ContainerCheckpoint gate, beta and on by default): checks that the pod and
 * the container exist, then asks the runtime (CRI CheckpointContainer) to write the checkpoint to
 * `<root-dir>/checkpoints/checkpoint-<pod>_<namespace>-<container>-<RFC 3339 time>.tar` and
 * answers `{"items":["<that path>"]}`. The runtime writes the archive; a runtime without
 * checkpoint support (containerd 1.6 answers Unimplemented) makes it a 500 with the runtime's
 * error, as upstream's. Corresponds to upstream `pkg/kubelet/server/server.go` (checkpoint) and
 * `pkg/kubelet/kubelet.go` (CheckpointContainer).
 */

import type { V1Pod } from "@kubernetes/client-node";
import { join } from "node:path";
import type * as api from "../../proto/runtime/v1/api.ts";
import { criErrorText } from "../cri/connection.ts";
import type { Logger } from "../klog/klog.ts";
import { httpError, type Route } from "./server.ts";

/** What {@link checkpointRoutes} needs. */
export interface CheckpointRoutesOptions {
  /** The pod the kubelet runs under this namespace and name (pod manager), or undefined. */
  readonly getPodByName: (namespace: string, name: string) => V1Pod | undefined;
  /** The running container's runtime id for a pod's container name, or undefined. */
  readonly findContainerId: (podUID: string, containerName: string) => string | undefined;
  readonly runtime: {
    checkpointContainer(req: api.CheckpointContainerRequest, signal?: AbortSignal): Promise<void>;
  };
  /** `<root-dir>/checkpoints` (made at start, as upstream's setupDataDirs does). */
  readonly checkpointsDir: string;
  /** Now; names the archive. */
  readonly now: () => Date;
  readonly logger: Logger;
}

/** Go's time.RFC3339 of a UTC time: whole seconds, `Z`. */
function rfc3339Seconds(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** The checkpoint route; see the module documentation. */
export function checkpointRoutes(opts: CheckpointRoutesOptions): Route[] {
  return [{
    pattern: "/checkpoint/:podNamespace/:podID/:containerName",
    methods: ["POST"],
    handler: async (r, res) => {
      const { podNamespace, podID, containerName = "" } = r.params;
      const pod = opts.getPodByName(podNamespace ?? "", podID ?? "");
      if (!pod) return httpError(res, 404, "pod does not exist");
      const spec = pod.spec;
      const known = [
        ...(spec?.containers ?? []),
        ...(spec?.initContainers ?? []),
        ...(spec?.ephemeralContainers ?? []),
      ].some((c) => c.name === containerName);
      if (!known) return httpError(res, 404, `container ${containerName} does not exist`);
      // The last timeout given counts; an unparsable one is upstream's 404.
      const timeouts = r.url.searchParams.getAll("timeout");
      let timeout = 0n;
      if (timeouts.length > 0) {
        const last = timeouts[timeouts.length - 1] ?? "";
        if (!/^[+-]?\d+$/.test(last)) {
          return httpError(res, 404, "cannot parse value of timeout parameter");
        }
        timeout = BigInt(last);
      }
      const fail = (why: string) =>
        httpError(
          res,
          500,
          `checkpointing of ${podNamespace}/${podID}/${containerName} failed (${why})`,
        );
      const id = opts.findContainerId(pod.metadata?.uid ?? "", containerName);
      if (id === undefined) return fail(`container ${containerName} not found`);
      const fullName = `${pod.metadata?.name ?? ""}_${pod.metadata?.namespace ?? ""}`;
      const location = join(
        opts.checkpointsDir,
        `checkpoint-${fullName}-${containerName}-${rfc3339Seconds(opts.now())}.tar`,
      );
      try {
        await opts.runtime.checkpointContainer({ containerId: id, location, timeout }, r.signal);
      } catch (e) {
        if (r.signal.aborted) throw e;
        opts.logger.error(e, "CheckpointContainer from runtime service failed", {
          containerID: id,
        });
        return fail(criErrorText(e));
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ items: [location] }));
    },
  }];
}
