/**
 * @module
 * The two operations the reconciler runs on a plugin socket. Registration dials the socket, asks
 * the plugin for its `PluginInfo` (GetInfo, 1 s), hands it to the handler of its type (validate,
 * then register) and tells the plugin the outcome (NotifyRegistrationStatus, 5 s), also when
 * there is no handler for its type or the handler refused it, with upstream's error text.
 * Deregistration calls the handler's deRegisterPlugin. Corresponds to upstream's
 * `pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`.
 *
 * The connection is `cri/connection.ts`'s (gRPC over Deno's fetch, one HTTP/2 connection on the
 * unix socket). It dials lazily, so the dial upstream makes with `grpc.WithBlock` (retried until
 * its 10 s deadline: a plugin may have bound its socket and not be listening yet) is a plain
 * connect on the socket here, retried the same way, before the first call.
 */

import { CriConnection, criErrorText, criMethods } from "../cri/connection.ts";
import {
  type PluginInfo as PluginInfoMessage,
  RegistrationDefinition,
  type RegistrationStatus,
} from "../../proto/pluginregistration/v1/api.ts";
import type { Logger } from "../klog/klog.ts";
import { type Clock, realClock } from "../util/clock.ts";
import type { ActualStateOfWorld, PluginInfo } from "./cache.ts";
import type { PluginHandler } from "./plugin_handler.ts";

/** Upstream dialTimeoutDuration. */
export const DIAL_TIMEOUT_MS = 10_000;
/** The GetInfo deadline upstream sets (one second). */
export const GET_INFO_TIMEOUT_MS = 1_000;
/** Upstream notifyTimeoutDuration. */
export const NOTIFY_TIMEOUT_MS = 5_000;

/** A call's limits. */
export interface RegistrationCallOptions {
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
}

/** The Registration service of one plugin socket (upstream registerapi.RegistrationClient). */
export interface RegistrationClient {
  getInfo(opts: RegistrationCallOptions): Promise<PluginInfoMessage>;
  notifyRegistrationStatus(
    status: RegistrationStatus,
    opts: RegistrationCallOptions,
  ): Promise<void>;
  /** Closes the connection; idempotent. */
  close(): void;
}

/** Connects to a plugin socket; rejects with the reason when it cannot within `timeoutMs`. */
export type DialFunc = (
  socketPath: string,
  opts: RegistrationCallOptions,
) => Promise<RegistrationClient>;

const REGISTRATION = criMethods(RegistrationDefinition);

/** grpc-go's first reconnect backoff, and its growth, for the blocking dial. */
const DIAL_BACKOFF_MS = 1_000;
const DIAL_BACKOFF_FACTOR = 1.6;

/**
 * The default {@link DialFunc}: connects to the socket (retrying with grpc-go's reconnect
 * backoff until the deadline, as a blocking dial does), then returns a client on it.
 */
export function dialRegistration(clock: Clock = realClock): DialFunc {
  return async (socketPath, opts) => {
    const deadline = clock.now() + opts.timeoutMs;
    let delay = DIAL_BACKOFF_MS;
    for (;;) {
      if (opts.signal?.aborted) {
        throw new Error(`failed to dial socket ${socketPath}, err: context canceled`);
      }
      try {
        const probe = await Deno.connect({ transport: "unix", path: socketPath });
        probe.close();
        break;
      } catch (e) {
        // A missing grant is no transient failure: say so at once.
        if (e instanceof Deno.errors.NotCapable) {
          throw new Error(`failed to dial socket ${socketPath}, err: ${criErrorText(e)}`);
        }
      }
      const left = deadline - clock.now();
      if (left <= 0) {
        throw new Error(`failed to dial socket ${socketPath}, err: context deadline exceeded`);
      }
      try {
        await clock.sleep(Math.min(delay, left), opts.signal);
      } catch {
        throw new Error(`failed to dial socket ${socketPath}, err: context canceled`);
      }
      delay *= DIAL_BACKOFF_FACTOR;
    }
    const conn = new CriConnection({ endpoint: socketPath });
    return {
      getInfo: (o) => conn.unary(REGISTRATION.getInfo, {}, o),
      notifyRegistrationStatus: async (status, o) => {
        await conn.unary(REGISTRATION.notifyRegistrationStatus, status, o);
      },
      close: () => conn.close(),
    };
  };
}

/** What the operations need. */
export interface OperationGeneratorOptions {
  readonly logger: Logger;
  readonly dial: DialFunc;
}

/** Builds the register and unregister operations (upstream operationGenerator). */
export class OperationGenerator {
  readonly #logger: Logger;
  readonly #dial: DialFunc;

  constructor(opts: OperationGeneratorOptions) {
    this.#logger = opts.logger;
    this.#dial = opts.dial;
  }

  /** Registers the plugin at `plugin.socketPath` with the handler of its type. */
  registerPlugin(
    plugin: PluginInfo,
    handlers: ReadonlyMap<string, PluginHandler>,
    asw: ActualStateOfWorld,
    signal?: AbortSignal,
  ): () => Promise<void> {
    const { socketPath } = plugin;
    return async () => {
      let client: RegistrationClient;
      try {
        client = await this.#dial(socketPath, { timeoutMs: DIAL_TIMEOUT_MS, signal });
      } catch (e) {
        throw new Error(
          `RegisterPlugin error -- dial failed at socket ${socketPath}, err: ${criErrorText(e)}`,
        );
      }
      try {
        let info: PluginInfoMessage;
        try {
          info = await client.getInfo({ timeoutMs: GET_INFO_TIMEOUT_MS, signal });
        } catch (e) {
          throw new Error(
            `RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket ${socketPath}, err: ${
              criErrorText(e)
            }`,
          );
        }
        // Upstream wraps a notify of a failure as "failed to send error" whether the notify
        // went through or not (its notifyPlugin returns the error text either way).
        const notifyFailure = async (text: string) => {
          try {
            await this.#notify(client, false, text, signal);
          } catch (e) {
            throw new Error(
              `RegisterPlugin error -- failed to send error at socket ${socketPath}, err: ${
                criErrorText(e)
              }`,
            );
          }
        };
        const handler = handlers.get(info.type);
        if (handler === undefined) {
          const text =
            `RegisterPlugin error -- no handler registered for plugin type: ${info.type} at socket ${socketPath}`;
          await notifyFailure(text);
          throw new Error(text);
        }
        const endpoint = info.endpoint === "" ? socketPath : info.endpoint;
        try {
          await handler.validatePlugin(info.name, endpoint, info.supportedVersions);
        } catch (e) {
          await notifyFailure(
            `RegisterPlugin error -- plugin validation failed with err: ${criErrorText(e)}`,
          );
          throw new Error("RegisterPlugin error -- pluginHandler.ValidatePluginFunc failed");
        }
        // In the actual state before the handler's register, so that a socket deleted
        // meanwhile is deregistered (the deregistration waits for this operation to end).
        try {
          asw.addPlugin({
            socketPath,
            timestamp: plugin.timestamp,
            uuid: plugin.uuid,
            handler,
            name: info.name,
            endpoint,
          });
        } catch (e) {
          this.#logger.error(e, "RegisterPlugin error -- failed to add plugin", {
            path: socketPath,
          });
        }
        try {
          await handler.registerPlugin(info.name, endpoint, info.supportedVersions, undefined);
        } catch (e) {
          asw.removePlugin(socketPath);
          await this.#notify(
            client,
            false,
            `RegisterPlugin error -- plugin registration failed with err: ${criErrorText(e)}`,
            signal,
          );
          return;
        }
        // Notified after the handler's register, so that a failed notify still leaves a
        // register after every validate.
        try {
          await this.#notify(client, true, "", signal);
        } catch (e) {
          asw.removePlugin(socketPath);
          try {
            await handler.deRegisterPlugin(info.name, endpoint);
          } catch (err) {
            this.#logger.error(err, "DeRegisterPlugin failed", { pluginName: info.name });
          }
          throw new Error(
            `RegisterPlugin error -- failed to send registration status at socket ${socketPath}, err: ${
              criErrorText(e)
            }`,
          );
        }
      } finally {
        client.close();
      }
    };
  }

  /** Deregisters a registered plugin from its handler. */
  unregisterPlugin(plugin: PluginInfo, asw: ActualStateOfWorld): () => Promise<void> {
    return async () => {
      const { handler } = plugin;
      if (handler === undefined) {
        throw new Error(
          `UnregisterPlugin error -- failed to get plugin handler for ${plugin.socketPath}`,
        );
      }
      // Out of the actual state first, so that a socket created again meanwhile is registered.
      asw.removePlugin(plugin.socketPath);
      await handler.deRegisterPlugin(plugin.name ?? "", plugin.endpoint ?? "");
      this.#logger.v(4).info("DeRegisterPlugin called", {
        pluginName: plugin.name ?? "",
        pluginHandler: {},
      });
    };
  }

  /**
   * Sends the outcome to the plugin; rejects with `errText` when it is a failure, or with
   * `errText` and the call's error when the call failed (upstream notifyPlugin).
   */
  async #notify(
    client: RegistrationClient,
    registered: boolean,
    errText: string,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    try {
      await client.notifyRegistrationStatus(
        { pluginRegistered: registered, error: errText },
        { timeoutMs: NOTIFY_TIMEOUT_MS, signal },
      );
    } catch (e) {
      throw new Error(`${errText}: ${criErrorText(e)}`);
    }
    if (errText !== "") throw new Error(errText);
  }
}
