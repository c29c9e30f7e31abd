/**
 * @module
 * The kubelet's credential provider plugins (KEP-2133): {@link loadCredentialProviderPlugins}
 * checks at start what `--image-credential-provider-bin-dir` and
 * `--image-credential-provider-config` name (the directory exists, the configuration reads,
 * decodes and validates, each provider's executable is in the directory), failing with
 * upstream's message; {@link CredentialProviders} then asks every provider, in configuration
 * order, for the credentials of an image a pod pulls, logging (not returning) a provider's
 * failure as upstream does, so that the pull goes on with the other credentials. The image
 * manager merges these after the pod's pull secrets. Corresponds to upstream
 * `RegisterCredentialProviderPlugins` (`plugin.go`) and `plugins.go`
 * (`NewExternalCredentialProviderDockerKeyring`).
 */

import { join } from "node:path";
import type { V1ServiceAccount } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { KubeClient } from "../client/kube_client.ts";
import type { TokenManager } from "../token/token_manager.ts";
import type { Logger } from "../klog/klog.ts";
import { goQuote } from "../klog/encode.ts";
import {
  aggregate,
  type CredentialProviderConfig,
  CredentialProviderConfigError,
  readCredentialProviderConfig,
  validateCredentialProviderConfig,
} from "./config.ts";
import { ExecPlugin, type PluginObserver } from "./exec_plugin.ts";
import {
  PluginProvider,
  type PodCoordinates,
  type ProvidedCredentials,
  type ServiceAccountAccess,
} from "./plugin_provider.ts";

export type { PodCoordinates, ProvidedCredentials, ServiceAccountAccess };

/** A checked configuration: the providers, where their executables are, and the content hash. */
export interface CredentialProviderPlugins {
  readonly config: CredentialProviderConfig;
  /** `sha256:<hex>` of the configuration's files (kubelet_credential_provider_config_info). */
  readonly hash: string;
  readonly binDir: string;
  /** The executable of each provider, in order: `<binDir>/<name>`. */
  readonly executables: readonly string[];
}

/** Options of {@link loadCredentialProviderPlugins}. */
export interface LoadCredentialProviderPluginsOptions {
  /** `--image-credential-provider-config`: a file, or a directory of them. */
  readonly configPath: string;
  /** `--image-credential-provider-bin-dir`. */
  readonly binDir: string;
  /** Feature gate KubeletServiceAccountTokenForCredentialProviders. @default true (beta) */
  readonly serviceAccountTokenGate?: boolean;
}

/**
 * Upstream `RegisterCredentialProviderPlugins` up to the registration: throws
 * {@link CredentialProviderConfigError} with upstream's message (the validation's naming the
 * configuration file too).
 */
export async function loadCredentialProviderPlugins(
  opts: LoadCredentialProviderPluginsOptions,
): Promise<CredentialProviderPlugins> {
  const { binDir, configPath } = opts;
  try {
    await Deno.stat(binDir);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new CredentialProviderConfigError(`plugin binary directory ${binDir} did not exist`);
    }
    throw new CredentialProviderConfigError(
      `error inspecting binary directory ${binDir}: ${(e as Error).message}`,
      { cause: e },
    );
  }
  const { config, hash } = await readCredentialProviderConfig(configPath);
  const errs = validateCredentialProviderConfig(config, opts.serviceAccountTokenGate ?? true);
  if (errs.length > 0) {
    throw new CredentialProviderConfigError(
      `failed to validate credential provider config ${goQuote(configPath)}: ${aggregate(errs)}`,
    );
  }
  const executables: string[] = [];
  for (const p of config.providers) {
    const bin = join(binDir, p.name);
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(bin);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) {
        throw new CredentialProviderConfigError(`plugin binary executable ${bin} did not exist`);
      }
      throw new CredentialProviderConfigError(
        `error inspecting binary executable ${bin}: ${(e as Error).message}`,
        { cause: e },
      );
    }
    // Go's exec.LookPath: a directory or a file without an execute bit is not an executable.
    const why = info.isDirectory
      ? "is a directory"
      : ((info.mode ?? 0o777) & 0o111) === 0
      ? "permission denied"
      : undefined;
    if (why) {
      throw new CredentialProviderConfigError(
        `error inspecting binary executable ${bin}: exec: ${goQuote(bin)}: ${why}`,
      );
    }
    executables.push(bin);
  }
  return { config, hash, binDir, executables };
}

/** What the image manager asks: every provider's credentials for an image, in order. */
export interface ImageCredentialProvider {
  /**
   * The credentials each provider gives for `image` (a repository, no tag or digest) pulled
   * for `pod`; a provider that fails is logged and left out. Throws only when `signal` aborts.
   */
  provide(image: string, pod: PodCoordinates, signal?: AbortSignal): Promise<ProvidedCredentials[]>;
}

/** Options of {@link CredentialProviders}. */
export interface CredentialProvidersOptions {
  readonly plugins: CredentialProviderPlugins;
  readonly clock: Clock;
  readonly logger: Logger;
  /**
   * The pod's service account and its tokens, for providers with `tokenAttributes`; unset when
   * the gate KubeletServiceAccountTokenForCredentialProviders is off (they are never run in
   * token mode then). @default none
   */
  readonly serviceAccounts?: ServiceAccountAccess;
  /** Each run's duration and errors. @default none */
  readonly observer?: PluginObserver;
  /** One run's time limit, ms. @default PLUGIN_EXEC_TIMEOUT_MS (one minute) */
  readonly execTimeoutMs?: number;
}

/** The registered providers; see the module documentation. */
export class CredentialProviders implements ImageCredentialProvider {
  readonly providers: readonly PluginProvider[];
  readonly #log: Logger;

  constructor(opts: CredentialProvidersOptions) {
    const { plugins, clock, logger } = opts;
    this.#log = logger;
    this.providers = plugins.config.providers.map((p) => {
      const provider = new PluginProvider({
        provider: p,
        clock,
        serviceAccounts: opts.serviceAccounts,
        plugin: new ExecPlugin({
          name: p.name,
          binDir: plugins.binDir,
          apiVersion: p.apiVersion,
          args: p.args,
          env: p.env,
          logger,
          observer: opts.observer,
          timeoutMs: opts.execTimeoutMs,
        }),
      });
      logger.v(4).info("Registered credential provider", { provider: p.name });
      return provider;
    });
  }

  async provide(
    image: string,
    pod: PodCoordinates,
    signal?: AbortSignal,
  ): Promise<ProvidedCredentials[]> {
    const out: ProvidedCredentials[] = [];
    for (const p of this.providers) {
      try {
        out.push(await p.provide(image, pod, signal));
      } catch (e) {
        signal?.throwIfAborted();
        const kv: Record<string, unknown> = { provider: p.name, image };
        if (p.usesServiceAccount) {
          kv.pod = `${pod.namespace}/${pod.name}`;
          kv.podUID = pod.uid;
          kv.serviceAccount = `${pod.namespace}/${pod.serviceAccountName}`;
        }
        this.#log.error(e, "Failed to provide credentials for image", kv);
      }
    }
    return out;
  }
}

/**
 * The service account calls of the kubelet (upstream's getServiceAccount closure and the token
 * manager): a GET of the account from the apiserver, and a token from `tokens`. Without a
 * client (standalone) every call fails, as upstream's.
 */
export function serviceAccountAccess(
  client: Pick<KubeClient, "get"> | undefined,
  tokens: Pick<TokenManager, "getServiceAccountToken">,
): ServiceAccountAccess {
  return {
    getServiceAccount(namespace, name, signal) {
      if (!client) {
        return Promise.reject(
          new Error("cannot get ServiceAccounts when kubelet is in standalone mode"),
        );
      }
      return client.get<V1ServiceAccount>(
        `/api/v1/namespaces/${encodeURIComponent(namespace)}/serviceaccounts/${
          encodeURIComponent(name)
        }`,
        signal,
      );
    },
    async getServiceAccountToken(namespace, name, spec, signal) {
      return (await tokens.getServiceAccountToken(namespace, name, spec, signal)).token;
    },
  };
}
