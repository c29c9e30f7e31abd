/**
 * @module
 * Bringing up the container runtime: `preInitRuntimeService` builds the CRI runtime and image
 * services from `containerRuntimeEndpoint` and `imageServiceEndpoint` (which defaults to the
 * runtime's), and `waitForRuntime` negotiates the CRI version, retrying while the runtime is
 * unreachable and failing at once when it does not serve `runtime.v1`. Corresponds to upstream
 * `PreInitRuntimeService` (pkg/kubelet/kubelet.go) and the connection validation of
 * `pkg/kubelet/cri/remote`.
 */

import type { Clock } from "../util/clock.ts";
import { CriConnection, CriError, GrpcCode } from "./connection.ts";
import type { Logger } from "../klog/klog.ts";
import { RemoteImageService } from "./remote_image.ts";
import { CRI_API_VERSION, RemoteRuntimeService, type RuntimeService } from "./remote_runtime.ts";

/** The runtime and image services and what closes their connections. */
export interface RuntimeServices {
  readonly runtimeService: RemoteRuntimeService;
  readonly imageService: RemoteImageService;
  /** Closes every connection; idempotent. */
  close(): void;
}

/** Builds the CRI clients; no call is made yet (upstream dials lazily too). */
export function preInitRuntimeService(opts: {
  readonly containerRuntimeEndpoint: string;
  readonly imageServiceEndpoint?: string;
  /** runtimeRequestTimeout in milliseconds. */
  readonly timeoutMs: number;
}): RuntimeServices {
  const runtimeConn = new CriConnection({ endpoint: opts.containerRuntimeEndpoint });
  const imageEndpoint = opts.imageServiceEndpoint || opts.containerRuntimeEndpoint;
  const imageConn = imageEndpoint === opts.containerRuntimeEndpoint
    ? runtimeConn
    : new CriConnection({ endpoint: imageEndpoint });
  return {
    runtimeService: new RemoteRuntimeService({
      connection: runtimeConn,
      timeoutMs: opts.timeoutMs,
    }),
    imageService: new RemoteImageService({ connection: imageConn, timeoutMs: opts.timeoutMs }),
    close() {
      runtimeConn.close();
      imageConn.close();
    },
  };
}

/** The runtime answers but does not serve the CRI version this kubelet speaks. */
export class RuntimeVersionError extends Error {
  override name = "RuntimeVersionError";
}

/** The runtime's identity, as Version reports it. */
export interface RuntimeVersion {
  readonly runtimeName: string;
  readonly runtimeVersion: string;
  readonly runtimeApiVersion: string;
}

/**
 * Calls Version until the runtime answers. An unreachable runtime is logged once, naming the
 * endpoint, and retried with backoff (100 ms doubling to 5 s) until `signal` aborts; a runtime
 * that answers Unimplemented does not serve CRI v1 and fails with {@link RuntimeVersionError}.
 */
export async function waitForRuntime(opts: {
  readonly runtime: Pick<RuntimeService, "version">;
  readonly endpoint: string;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly signal: AbortSignal;
}): Promise<RuntimeVersion> {
  const { runtime, endpoint, logger, clock, signal } = opts;
  let delay = 100;
  let failing = false;
  for (;;) {
    try {
      const v = await runtime.version(CRI_API_VERSION, signal);
      if (v.runtimeApiVersion !== CRI_API_VERSION) {
        throw new RuntimeVersionError(
          `validate CRI ${CRI_API_VERSION} runtime API for endpoint "${endpoint}": the runtime reports API version ` +
            `'${v.runtimeApiVersion}', expected '${CRI_API_VERSION}'`,
        );
      }
      if (failing) logger.info("Container runtime is reachable again", { endpoint });
      return v;
    } catch (e) {
      if (e instanceof RuntimeVersionError) throw e;
      if (signal.aborted) throw signal.reason;
      if (e instanceof CriError && e.code === GrpcCode.UNIMPLEMENTED) {
        throw new RuntimeVersionError(
          `validate CRI ${CRI_API_VERSION} runtime API for endpoint "${endpoint}": ${e.message}`,
          {
            cause: e,
          },
        );
      }
      if (!failing) {
        logger.error(e, "Container runtime is not reachable; retrying until it is", { endpoint });
        failing = true;
      }
    }
    await clock.sleep(delay, signal);
    delay = Math.min(delay * 2, 5_000);
  }
}
