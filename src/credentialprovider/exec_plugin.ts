/**
 * @module
 * One run of a credential provider plugin: `<bin-dir>/<name> args...` with the agent's
 * environment plus the configured `env`, a CredentialProviderRequest (`image`, and in v1 the
 * service account token and annotations) as JSON on stdin, and a CredentialProviderResponse
 * read strictly from stdout: its apiVersion must be the configured one and its kind
 * CredentialProviderResponse, unknown fields are errors. A run is killed after one minute.
 * Errors carry upstream's text (the plugin's stderr appended) and never the response's content,
 * which may hold credentials. Corresponds to upstream `execPlugin` of
 * `pkg/credentialprovider/plugin/plugin.go` and the types of
 * `k8s.io/kubelet/pkg/apis/credentialprovider/v1`.
 */

import { join } from "node:path";
import { goJsonString } from "../util/go_json.ts";
import { parseDuration } from "../util/duration.ts";
import type { Logger } from "../klog/klog.ts";

/** Upstream's catch-all limit on one run of a plugin. */
export const PLUGIN_EXEC_TIMEOUT_MS = 60_000;

/** The response's `cacheKeyType` values. */
export type PluginCacheKeyType = "Image" | "Registry" | "Global";

/** A registry credential from a plugin (upstream credentialprovider `AuthConfig`). */
export interface PluginAuthConfig {
  readonly username: string;
  readonly password: string;
}

/** What a plugin answers (upstream `CredentialProviderResponse`, any version). */
export interface CredentialProviderResponse {
  /** Not checked here: the provider refuses a value other than Image, Registry or Global. */
  readonly cacheKeyType: string;
  /** Milliseconds; undefined when the response names none. */
  readonly cacheDuration?: number;
  /** Registry patterns (as in `matchImages`) to credentials. */
  readonly auth: Readonly<Record<string, PluginAuthConfig>>;
}

/** What the kubelet asks a plugin (upstream `CredentialProviderRequest`). */
export interface CredentialProviderRequest {
  /** The image's repository, without tag or digest ("registry.io/team/app"). */
  readonly image: string;
  readonly serviceAccountToken?: string;
  readonly serviceAccountAnnotations?: Readonly<Record<string, string>>;
}

/** Receives each run's duration and failures (upstream's plugin metrics). */
export interface PluginObserver {
  /** kubelet_credential_provider_plugin_duration{plugin_name}, seconds. */
  observeDuration(pluginName: string, seconds: number): void;
  /** kubelet_credential_provider_plugin_errors_total{plugin_name}. */
  countError(pluginName: string): void;
}

/** The part of a plugin the provider uses; tests give a fake. */
export interface CredentialPlugin {
  exec(request: CredentialProviderRequest): Promise<CredentialProviderResponse>;
}

/** Options of {@link ExecPlugin}. */
export interface ExecPluginOptions {
  readonly name: string;
  readonly binDir: string;
  /** The provider's `apiVersion`: the request's version and the one the response must have. */
  readonly apiVersion: string;
  readonly args?: readonly string[];
  readonly env?: readonly { readonly name: string; readonly value: string }[];
  readonly logger: Logger;
  /** @default PLUGIN_EXEC_TIMEOUT_MS */
  readonly timeoutMs?: number;
  /** @default none */
  readonly observer?: PluginObserver;
}

/** A run of a plugin that failed; the message is upstream's. */
export class PluginExecError extends Error {
  override name = "PluginExecError";
}

/** Runs one configured plugin; see the module documentation. */
export class ExecPlugin implements CredentialPlugin {
  readonly #o: ExecPluginOptions;

  constructor(opts: ExecPluginOptions) {
    this.#o = opts;
  }

  async exec(request: CredentialProviderRequest): Promise<CredentialProviderResponse> {
    const { name, apiVersion, logger } = this.#o;
    logger.v(5).info("Getting image credentials from external exec plugin", {
      pluginName: name,
      image: request.image,
    });
    const stdin = new TextEncoder().encode(encodeRequest(apiVersion, request));
    const { stdout } = await this.#run(request.image, stdin);
    const data = new TextDecoder().decode(stdout);
    let gv: string;
    try {
      gv = groupVersionOf(data);
    } catch (e) {
      throw new PluginExecError(`error reading GVK from response: ${(e as Error).message}`);
    }
    if (gv !== apiVersion) {
      throw new PluginExecError(
        "apiVersion from credential plugin response did not match expected apiVersion:" +
          `${apiVersion}, actual apiVersion:${gv}`,
      );
    }
    try {
      return decodeResponse(data);
    } catch {
      // Not wrapped: the decoder's message may quote credentials.
      throw new PluginExecError("error decoding credential provider plugin response from stdout");
    }
  }

  async #run(
    image: string,
    stdin: Uint8Array,
  ): Promise<{ stdout: Uint8Array; stderr: Uint8Array }> {
    const { name, binDir, observer } = this.#o;
    const start = performance.now();
    const fail = (why: string, stderr: Uint8Array): never => {
      observer?.countError(name);
      throw new PluginExecError(
        `error execing credential provider plugin ${name} for image ${image}: ${why}: ` +
          new TextDecoder().decode(stderr),
      );
    };
    let timedOut = false;
    try {
      let child: Deno.ChildProcess;
      try {
        child = new Deno.Command(join(binDir, name), {
          args: [...(this.#o.args ?? [])],
          // Added to the agent's environment, configured values winning (upstream mergeEnvVars).
          env: Object.fromEntries((this.#o.env ?? []).map((e) => [e.name, e.value])),
          stdin: "piped",
          stdout: "piped",
          stderr: "piped",
        }).spawn();
      } catch (e) {
        return fail(spawnError(join(binDir, name), e), new Uint8Array());
      }
      const timer = setTimeout(() => {
        timedOut = true;
        try {
          child.kill("SIGKILL");
        } catch {
          // Already gone.
        }
      }, this.#o.timeoutMs ?? PLUGIN_EXEC_TIMEOUT_MS);
      try {
        const writer = child.stdin.getWriter();
        // A plugin that exits without reading its input is not an error of the write.
        await writer.write(stdin).catch(() => {});
        await writer.close().catch(() => {});
        const out = await child.output();
        if (timedOut) return fail("context deadline exceeded", out.stderr);
        if (!out.success) {
          const why = out.signal ? `signal: ${signalName(out.signal)}` : `exit status ${out.code}`;
          return fail(why, out.stderr);
        }
        return { stdout: out.stdout, stderr: out.stderr };
      } finally {
        clearTimeout(timer);
      }
    } finally {
      observer?.observeDuration(name, (performance.now() - start) / 1000);
    }
  }
}

/** Go's text for a failed fork/exec. */
function spawnError(path: string, e: unknown): string {
  if (e instanceof Deno.errors.NotFound) return `fork/exec ${path}: no such file or directory`;
  if (e instanceof Deno.errors.PermissionDenied) return `fork/exec ${path}: permission denied`;
  return `fork/exec ${path}: ${e instanceof Error ? e.message : String(e)}`;
}

/** Go's `syscall.Signal.String()` for the signals that end a plugin. */
function signalName(signal: Deno.Signal): string {
  const names: Partial<Record<Deno.Signal, string>> = {
    SIGKILL: "killed",
    SIGTERM: "terminated",
    SIGINT: "interrupt",
    SIGSEGV: "segmentation fault",
    SIGABRT: "aborted",
    SIGPIPE: "broken pipe",
    SIGHUP: "hangup",
  };
  return names[signal] ?? signal;
}

/**
 * The request as upstream's JSON encoder writes it for `apiVersion`: kind, apiVersion, image,
 * then (v1 only, when set) the token and the annotations with sorted keys; one line.
 */
export function encodeRequest(apiVersion: string, request: CredentialProviderRequest): string {
  let out = `{"kind":"CredentialProviderRequest","apiVersion":${goJsonString(apiVersion)},` +
    `"image":${goJsonString(request.image)}`;
  const v1 = apiVersion === "credentialprovider.kubelet.k8s.io/v1";
  if (v1 && request.serviceAccountToken) {
    out += `,"serviceAccountToken":${goJsonString(request.serviceAccountToken)}`;
  }
  const annotations = Object.keys(request.serviceAccountAnnotations ?? {}).sort();
  if (v1 && annotations.length > 0) {
    out += `,"serviceAccountAnnotations":{${
      annotations.map((k) =>
        `${goJsonString(k)}:${goJsonString(request.serviceAccountAnnotations?.[k] ?? "")}`
      ).join(",")
    }}`;
  }
  return `${out}}\n`;
}

/** The group/version of a JSON object's `apiVersion` (upstream's meta factory `Interpret`). */
function groupVersionOf(data: string): string {
  let obj: unknown;
  try {
    obj = JSON.parse(data);
  } catch {
    // Go's message names at most one character: the response may hold credentials.
    const first = data.trimStart()[0];
    if (first === undefined) throw new Error("unexpected end of JSON input");
    if (!/[{["\-0-9tfn]/.test(first)) {
      throw new Error(`invalid character '${first}' looking for beginning of value`);
    }
    throw new Error("invalid JSON");
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) {
    throw new Error("json: cannot unmarshal non-object into Go value of type struct");
  }
  const v = (obj as Record<string, unknown>).apiVersion;
  if (v !== undefined && typeof v !== "string") {
    throw new Error(
      "json: cannot unmarshal non-string into Go struct field .apiVersion of type string",
    );
  }
  return v ?? "";
}

const RESPONSE_GROUP = "credentialprovider.kubelet.k8s.io";
const RESPONSE_VERSIONS = ["v1", "v1beta1", "v1alpha1"];

/**
 * Decodes a CredentialProviderResponse strictly as upstream's universal decoder: a known
 * version of the group, kind CredentialProviderResponse, no unknown field, fields of their
 * types. Throws an Error (whose message may quote the content: do not pass it on).
 */
export function decodeResponse(data: string): CredentialProviderResponse {
  const obj = JSON.parse(data) as Record<string, unknown>;
  const apiVersion = String(obj.apiVersion ?? "");
  const kind = String(obj.kind ?? "");
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (kind === "") throw new Error("Object 'Kind' is missing");
  if (group !== RESPONSE_GROUP || !RESPONSE_VERSIONS.includes(version ?? "")) {
    throw new Error(`no kind ${JSON.stringify(kind)} is registered for version ${apiVersion}`);
  }
  if (kind !== "CredentialProviderResponse") {
    throw new Error(`failed to decode CredentialProviderResponse, unexpected Kind: "${kind}"`);
  }
  const known = ["kind", "apiVersion", "cacheKeyType", "cacheDuration", "auth"];
  for (const k of Object.keys(obj)) if (!known.includes(k)) throw new Error(`unknown field "${k}"`);
  const str = (v: unknown, what: string): string => {
    if (v === undefined || v === null) return "";
    if (typeof v !== "string") throw new Error(`${what} is not a string`);
    return v;
  };
  const cacheKeyType = str(obj.cacheKeyType, "cacheKeyType");
  let cacheDuration: number | undefined;
  if (obj.cacheDuration !== undefined && obj.cacheDuration !== null) {
    cacheDuration = parseDuration(str(obj.cacheDuration, "cacheDuration"));
  }
  const auth: Record<string, PluginAuthConfig> = {};
  if (obj.auth !== undefined && obj.auth !== null) {
    if (typeof obj.auth !== "object" || Array.isArray(obj.auth)) {
      throw new Error("auth is not a map");
    }
    for (const [pattern, entry] of Object.entries(obj.auth as Record<string, unknown>)) {
      if (entry === null) {
        auth[pattern] = { username: "", password: "" };
        continue;
      }
      if (typeof entry !== "object" || Array.isArray(entry)) {
        throw new Error("auth entry is not an object");
      }
      const e = entry as Record<string, unknown>;
      for (const k of Object.keys(e)) {
        if (k !== "username" && k !== "password") throw new Error(`unknown field "auth.${k}"`);
      }
      auth[pattern] = {
        username: str(e.username, "username"),
        password: str(e.password, "password"),
      };
    }
  }
  return { cacheKeyType, ...(cacheDuration === undefined ? {} : { cacheDuration }), auth };
}
