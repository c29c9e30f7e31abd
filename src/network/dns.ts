/**
 * @module
 * Pod DNS: the resolv.conf (servers, search list, options) the runtime writes into each pod
 * sandbox, from the pod's dnsPolicy and dnsConfig, the kubelet's clusterDNS and clusterDomain,
 * and the host's resolv.conf. Reads the host file through an injected reader, reports limit
 * problems as events on the pod (and node), and is called by kuberuntime/kuberuntime_sandbox.ts.
 * Corresponds to upstream `pkg/kubelet/network/dns/dns.go` (Configurer, GetPodDNS,
 * CheckLimitsForResolvConf) with the limits of `pkg/apis/core/validation` (ExpandedDNSConfig
 * is GA: 32 search paths, 2048 characters).
 */

import type { V1Pod, V1PodDNSConfig, V1PodDNSConfigOption } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { type EventRecorder, type ObjectRef, podRef } from "../client/record.ts";
import { createLogger, kobj, type Logger } from "../klog/klog.ts";

/** Most nameservers a resolv.conf may list (upstream `MaxDNSNameservers`). */
export const MAX_DNS_NAMESERVERS = 3;
/** Most search domains (upstream `MaxDNSSearchPaths`). */
export const MAX_DNS_SEARCH_PATHS = 32;
/** Longest search line, in characters (upstream `MaxDNSSearchListChars`). */
export const MAX_DNS_SEARCH_LIST_CHARS = 2048;
/** Longest single search domain (upstream `DNS1123SubdomainMaxLength`). */
export const MAX_DNS_SEARCH_PATH_CHARS = 253;
/** Largest resolv.conf read (upstream `maxResolveConfLength`, 10 MiB). */
export const MAX_RESOLV_CONF_BYTES = 10 * (1 << 20);
/** Options a ClusterFirst pod gets (upstream `defaultDNSOptions`). */
export const DEFAULT_DNS_OPTIONS: readonly string[] = ["ndots:5"];

/** Options of {@link DnsConfigurer}. */
export interface DnsConfigurerOptions {
  /** Cluster DNS server IPs (config clusterDNS). @default [] */
  readonly clusterDNS: readonly string[];
  /** Cluster domain (config clusterDomain); "" adds no cluster search domains. @default "" */
  readonly clusterDomain: string;
  /** Host resolver file (config resolvConf); "" means none. @default "/etc/resolv.conf" */
  readonly resolvConf: string;
  /** Reads the resolver file. @default a synchronous read that refuses all but a regular file */
  readonly readFile?: (path: string, signal?: AbortSignal) => Promise<string>;
  /** Receives DNSConfigForming, MissingClusterDNS and CheckLimitsForResolvConf events. */
  readonly recorder?: EventRecorder;
  readonly logger?: Logger;
  /** The node, for node events; without it they are only logged. @default undefined */
  readonly nodeRef?: ObjectRef;
  /** Node IPs: an IPv6 one makes "::1" the server when resolvConf is "". @default [] */
  readonly nodeIPs?: readonly string[];
}

/** The host resolver file could not be read or parsed. */
export class ResolvConfError extends Error {
  override name = "ResolvConfError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** The parts of a resolv.conf the kubelet uses. */
export interface ResolvConf {
  readonly nameservers: string[];
  readonly searches: string[];
  readonly options: string[];
}

/**
 * Parses resolv.conf text as upstream parseResolvConf does: nameserver lines accumulate, the
 * last search and options lines win, trailing dots of search domains are dropped, `#` lines are
 * comments. A bare `nameserver` line is an error; `domain` lines are ignored, as upstream.
 */
export function parseResolvConf(text: string): ResolvConf {
  let nameservers: string[] = [];
  let searches: string[] = [];
  let options: string[] = [];
  const errors: string[] = [];
  for (const line of text.split("\n")) {
    const trimmed = line.trim();
    if (trimmed.startsWith("#")) continue;
    const fields = trimmed.split(/\s+/).filter((f) => f !== "");
    const [key, ...rest] = fields;
    if (key === "nameserver") {
      if (rest[0] !== undefined) nameservers = [...nameservers, rest[0]];
      else errors.push("nameserver list is empty ");
    } else if (key === "search") {
      searches = rest.map((s) => s.endsWith(".") ? s.slice(0, -1) : s);
    } else if (key === "options") {
      options = rest;
    }
  }
  if (errors.length === 1) throw new ResolvConfError(errors[0] ?? "");
  if (errors.length > 1) throw new ResolvConfError(`[${errors.join(", ")}]`);
  return { nameservers, searches, options };
}

type PodDNSType = "cluster" | "host" | "none";

/** Upstream `format.Pod`: `name_namespace(uid)`. */
function formatPod(pod: V1Pod): string {
  const m = pod.metadata;
  return `${m?.name ?? ""}_${m?.namespace ?? ""}(${m?.uid ?? ""})`;
}

function omitDuplicates(values: readonly string[]): string[] {
  return [...new Set(values)];
}

function byteLength(s: string): number {
  return new TextEncoder().encode(s).length;
}

/**
 * Merges options by name, the pod's winning (upstream mergeDNSOptions). Upstream goes through a
 * Go map, so its order is random; this keeps the existing order and appends new names.
 */
function mergeDNSOptions(
  existing: readonly string[],
  podOptions: readonly V1PodDNSConfigOption[],
): string[] {
  const merged = new Map<string, string>();
  for (const op of existing) {
    const i = op.indexOf(":");
    if (i === -1) merged.set(op, "");
    else merged.set(op.slice(0, i), op.slice(i + 1));
  }
  for (const op of podOptions) merged.set(op.name ?? "", op.value ?? "");
  return [...merged].map(([name, value]) => value === "" ? name : `${name}:${value}`);
}

function appendDNSConfig(base: api.DNSConfig, pod: V1PodDNSConfig): api.DNSConfig {
  return {
    servers: omitDuplicates([...base.servers, ...(pod.nameservers ?? [])]),
    searches: omitDuplicates([...base.searches, ...(pod.searches ?? [])]),
    options: mergeDNSOptions(base.options, pod.options ?? []),
  };
}

function isIPv6(ip: string): boolean {
  return ip.includes(":");
}

/** Builds the DNS configuration of pod sandboxes (upstream `dns.Configurer`). */
export class DnsConfigurer {
  readonly #clusterDNS: readonly string[];
  readonly #clusterDomain: string;
  readonly #resolvConf: string;
  readonly #readFile: (path: string, signal?: AbortSignal) => Promise<string>;
  readonly #recorder: EventRecorder | undefined;
  readonly #logger: Logger;
  readonly #nodeRef: ObjectRef | undefined;
  readonly #nodeIPs: readonly string[];

  constructor(opts: DnsConfigurerOptions) {
    this.#clusterDNS = [...opts.clusterDNS];
    this.#clusterDomain = opts.clusterDomain;
    this.#resolvConf = opts.resolvConf;
    this.#readFile = opts.readFile ?? readRegularFileSync;
    this.#recorder = opts.recorder;
    this.#logger = opts.logger ?? createLogger();
    this.#nodeRef = opts.nodeRef;
    this.#nodeIPs = [...(opts.nodeIPs ?? [])];
  }

  /** The cluster domain pods' FQDNs end in (config clusterDomain). */
  get clusterDomain(): string {
    return this.#clusterDomain;
  }

  /** The host resolver file, "" when there is none (config resolvConf). */
  get resolvConf(): string {
    return this.#resolvConf;
  }

  /**
   * The DNS config of the pod's sandbox (upstream `GetPodDNS`). Rejects with
   * {@link ResolvConfError} when the host resolver file cannot be read or parsed.
   */
  async getPodDNS(pod: V1Pod, signal?: AbortSignal): Promise<api.DNSConfig> {
    let dns = await this.#hostDNSConfig(signal);
    switch (this.#podDNSType(pod)) {
      case "none":
        dns = { servers: [], searches: [], options: [] };
        break;
      case "cluster":
        if (this.#clusterDNS.length > 0) {
          // The cluster DNS server is the pod's only server; it forwards what it cannot answer.
          dns = {
            servers: [...this.#clusterDNS],
            searches: this.#clusterSearches(dns.searches, pod),
            options: [...DEFAULT_DNS_OPTIONS],
          };
          break;
        }
        this.#missingClusterDNS(pod);
        dns = this.#hostFallback(dns);
        break;
      case "host":
        dns = this.#hostFallback(dns);
        break;
    }
    if (pod.spec?.dnsConfig) dns = appendDNSConfig(dns, pod.spec.dnsConfig);
    return {
      servers: this.#fitNameservers(dns.servers, pod),
      searches: this.#fitSearches(dns.searches, pod),
      options: dns.options,
    };
  }

  /**
   * Warns (an event on the node) when the host resolv.conf has more search domains or longer
   * search lines than pods can take (upstream `CheckLimitsForResolvConf`, run periodically).
   */
  async checkLimitsForResolvConf(signal?: AbortSignal): Promise<void> {
    if (this.#resolvConf === "") return;
    let searches: string[];
    try {
      searches = (await this.#readResolvConf(signal)).searches;
    } catch (err) {
      if (signal?.aborted) throw err;
      const message = err instanceof Error ? err.message : String(err);
      this.#nodeEvent("CheckLimitsForResolvConf", message);
      this.#logger.v(4).info("Check limits for resolv.conf failed", { err: message });
      return;
    }
    let domainCountLimit = MAX_DNS_SEARCH_PATHS;
    if (this.#clusterDomain !== "") domainCountLimit -= 3;
    let problem: string | undefined;
    if (searches.length > domainCountLimit) {
      problem =
        `Resolv.conf file '${this.#resolvConf}' contains search line consisting of more than ${domainCountLimit} domains!`;
    } else if (searches.some((s) => byteLength(s) > MAX_DNS_SEARCH_PATH_CHARS)) {
      problem = `Resolv.conf file ${
        JSON.stringify(this.#resolvConf)
      } contains a search path which length is more than allowed ${MAX_DNS_SEARCH_PATH_CHARS} chars!`;
    } else if (byteLength(searches.join(" ")) > MAX_DNS_SEARCH_LIST_CHARS) {
      problem =
        `Resolv.conf file '${this.#resolvConf}' contains search line which length is more than allowed ${MAX_DNS_SEARCH_LIST_CHARS} chars!`;
    }
    if (problem !== undefined) {
      this.#nodeEvent("CheckLimitsForResolvConf", problem);
      this.#logger.v(4).info("Check limits for resolv.conf failed", { eventlog: problem });
    }
  }

  async #readResolvConf(signal?: AbortSignal): Promise<ResolvConf> {
    let text: string;
    try {
      text = await this.#readFile(this.#resolvConf, signal);
    } catch (err) {
      if (signal?.aborted) throw err;
      const why = err instanceof Error ? err.message : String(err);
      throw new ResolvConfError(`open ${this.#resolvConf}: ${why}`, { cause: err });
    }
    if (byteLength(text) > MAX_RESOLV_CONF_BYTES) {
      throw new ResolvConfError(
        `the read limit is reached: ${this.#resolvConf} is larger than ${MAX_RESOLV_CONF_BYTES} bytes`,
      );
    }
    return parseResolvConf(text);
  }

  async #hostDNSConfig(signal?: AbortSignal): Promise<api.DNSConfig> {
    if (this.#resolvConf === "") return { servers: [], searches: [], options: [] };
    const conf = await this.#readResolvConf(signal);
    return { servers: conf.nameservers, searches: conf.searches, options: conf.options };
  }

  #podDNSType(pod: V1Pod): PodDNSType {
    const policy = pod.spec?.dnsPolicy;
    switch (policy) {
      case "None":
        return "none";
      case "ClusterFirstWithHostNet":
        return "cluster";
      case "ClusterFirst":
        // A host-network pod cannot reach cluster DNS through the pod network: use the host's.
        return pod.spec?.hostNetwork === true ? "host" : "cluster";
      case "Default":
        return "host";
    }
    // The apiserver rejects other policies; upstream logs and uses ClusterFirst.
    this.#logger.error(
      new Error(`invalid DNSPolicy=${policy ?? ""}`),
      "Failed to get DNS type for pod. Falling back to DNSClusterFirst policy.",
      { pod: kobj(pod) },
    );
    return "cluster";
  }

  #clusterSearches(hostSearches: readonly string[], pod: V1Pod): string[] {
    const domain = this.#clusterDomain;
    if (domain === "") return [...hostSearches];
    const ns = pod.metadata?.namespace ?? "";
    return omitDuplicates([`${ns}.svc.${domain}`, `svc.${domain}`, domain, ...hostSearches]);
  }

  // With no resolver file, point at the local machine and search nothing, as the resolver
  // library does without a nameserver line.
  #hostFallback(dns: api.DNSConfig): api.DNSConfig {
    if (this.#resolvConf !== "") return dns;
    const servers = this.#nodeIPs.map((ip) => isIPv6(ip) ? "::1" : "127.0.0.1");
    return {
      servers: servers.length > 0 ? [...dns.servers, ...servers] : [...dns.servers, "127.0.0.1"],
      searches: ["."],
      options: dns.options,
    };
  }

  #missingClusterDNS(pod: V1Pod): void {
    const nodeMsg =
      `kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`;
    this.#nodeEvent("MissingClusterDNS", nodeMsg);
    this.#recorder?.event(
      podRef(pod),
      "Warning",
      "MissingClusterDNS",
      `pod: ${JSON.stringify(formatPod(pod))}. ${nodeMsg}`,
    );
  }

  #fitNameservers(servers: string[], pod: V1Pod): string[] {
    if (servers.length <= MAX_DNS_NAMESERVERS) return servers;
    const kept = servers.slice(0, MAX_DNS_NAMESERVERS);
    const message =
      `Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: ${
        kept.join(" ")
      }`;
    this.#recorder?.event(podRef(pod), "Warning", "DNSConfigForming", message);
    this.#logger.error(new Error(message), "Nameserver limits exceeded", { pod: kobj(pod) });
    return kept;
  }

  #fitSearches(searches: string[], pod: V1Pod): string[] {
    let exceeded = false;
    let kept = searches;
    if (kept.length > MAX_DNS_SEARCH_PATHS) {
      kept = kept.slice(0, MAX_DNS_SEARCH_PATHS);
      exceeded = true;
    }
    // Some resolvers (glibc 2.28) abort() on a search path longer than 255 characters.
    const short = kept.filter((s) => byteLength(s) <= MAX_DNS_SEARCH_PATH_CHARS);
    if (short.length !== kept.length) exceeded = true;
    kept = short;
    const lineLength = byteLength(kept.join(" "));
    if (lineLength > MAX_DNS_SEARCH_LIST_CHARS) {
      // Drop domains from the end until the line fits.
      let cut = 0;
      let cutLength = 0;
      for (let i = kept.length - 1; i >= 0; i--) {
        cutLength += byteLength(kept[i] ?? "") + 1;
        cut++;
        if (lineLength - cutLength <= MAX_DNS_SEARCH_LIST_CHARS) break;
      }
      kept = kept.slice(0, kept.length - cut);
      exceeded = true;
    }
    if (exceeded) {
      const message =
        `Search Line limits were exceeded, some search paths have been omitted, the applied search line is: ${
          kept.join(" ")
        }`;
      this.#recorder?.event(podRef(pod), "Warning", "DNSConfigForming", message);
      this.#logger.error(new Error(message), "Search Line limits exceeded", { pod: kobj(pod) });
    }
    return kept;
  }

  #nodeEvent(reason: string, message: string): void {
    if (this.#nodeRef) this.#recorder?.event(this.#nodeRef, "Warning", reason, message);
  }
}

/**
 * Reads a regular file synchronously: resolv.conf is read for every pod sandbox, a small local
 * file read in microseconds where an asynchronous read costs a thread-pool round trip. Anything
 * else (a FIFO would block the kubelet's thread) is refused.
 */
function readRegularFileSync(path: string): Promise<string> {
  try {
    if (!Deno.statSync(path).isFile) {
      return Promise.reject(new Error(`${path} is not a regular file`));
    }
    return Promise.resolve(Deno.readTextFileSync(path));
  } catch (e) {
    return Promise.reject(e);
  }
}
