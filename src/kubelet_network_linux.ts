/**
 * @module
 * The kubelet's iptables utility chains, made at start when `makeIPTablesUtilChains` is true (the
 * default): in each family whose iptables works, the KUBE-IPTABLES-HINT chain in the mangle table
 * (other components read from it whether the host uses iptables-legacy or iptables-nft), and for
 * IPv4 the filter table's KUBE-FIREWALL chain, jumped to first from INPUT and OUTPUT, holding the
 * rule that drops packets to 127.0.0.0/8 from elsewhere (kube-proxy's `route_localnet` hole,
 * https://issue.k8s.io/90259). A monitor per family keeps a KUBE-KUBELET-CANARY chain in the mangle,
 * nat and filter tables and makes the chains again when a firewall flush removes it, until the
 * kubelet's signal aborts. Runs the host's `iptables` and `ip6tables` through util/iptables.ts,
 * which the permission set allows only with this setting (privilege/permission_set.ts).
 * Corresponds to upstream `pkg/kubelet/kubelet_network_linux.go` (initNetworkUtil,
 * syncIPTablesRules), called from Run in `kubelet.go`.
 */

import type { Logger } from "./klog/klog.ts";
import type { Clock } from "./util/clock.ts";
import {
  APPEND,
  type IptablesExec,
  type IptablesInterface,
  newBestEffort,
  PREPEND,
} from "./util/iptables.ts";

/** The chain whose presence in iptables-legacy or iptables-nft says which one the host uses. */
export const KUBE_IPTABLES_HINT_CHAIN = "KUBE-IPTABLES-HINT";
/** The kubelet's firewall chain in the filter table (IPv4). */
export const KUBE_FIREWALL_CHAIN = "KUBE-FIREWALL";
/** The chain whose disappearance tells the monitor the tables were flushed. */
export const KUBELET_CANARY_CHAIN = "KUBE-KUBELET-CANARY";
/** How often the monitor looks for its canary (upstream: one minute). */
export const IPTABLES_MONITOR_INTERVAL_MS = 60_000;

/** The DROP rule's match, as upstream (and kube-proxy's identical copy) writes it. */
const LOCALNET_DROP_RULE = [
  ...["-m", "comment", "--comment", "block incoming localnet connections"],
  ...["--dst", "127.0.0.0/8"],
  ...["!", "--src", "127.0.0.0/8"],
  ...["-m", "conntrack"],
  ...["!", "--ctstate", "RELATED,ESTABLISHED,DNAT"],
  ...["-j", "DROP"],
];

/** Options of {@link initNetworkUtil}. */
export interface NetworkUtilOptions {
  readonly logger: Logger;
  /** Stops the monitors. */
  readonly signal: AbortSignal;
  /** The monitors' timers. @default realClock */
  readonly clock?: Clock;
  /** How often the monitors poll. @default IPTABLES_MONITOR_INTERVAL_MS */
  readonly monitorIntervalMs?: number;
  /** Runs iptables and ip6tables. @default util/iptables.ts runIptablesCommand */
  readonly exec?: IptablesExec;
}

/**
 * Makes the chains in each family whose iptables works and starts its monitor; `done` settles once
 * every monitor has stopped (after the signal aborts) and deleted its canaries.
 */
export async function initNetworkUtil(opts: NetworkUtilOptions): Promise<{ done: Promise<void> }> {
  const { logger, signal } = opts;
  const clients = await newBestEffort({ exec: opts.exec, clock: opts.clock, logger });
  if (clients.size === 0) {
    // Not an error: the kubelet makes these for other components, and a host with only
    // nftables has none that would use them.
    logger.info("No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain");
    return { done: Promise.resolve() };
  }
  const monitors: Promise<void>[] = [];
  for (const client of clients.values()) {
    if (await syncIPTablesRules(logger, client)) {
      logger.info("Initialized iptables rules.", { protocol: client.protocol() });
      monitors.push(client.monitor({
        canary: KUBELET_CANARY_CHAIN,
        tables: ["mangle", "nat", "filter"],
        reload: () => syncIPTablesRules(logger, client),
        intervalMs: opts.monitorIntervalMs ?? IPTABLES_MONITOR_INTERVAL_MS,
        signal,
      }));
    } else {
      logger.info("Failed to initialize iptables rules; some functionality may be missing.", {
        protocol: client.protocol(),
      });
    }
  }
  return { done: Promise.all(monitors).then(() => {}) };
}

/**
 * Ensures the hint chain and, for IPv4, KUBE-FIREWALL with its jumps and DROP rule; false, after
 * logging which step failed, when one cannot be made.
 */
export async function syncIPTablesRules(
  logger: Logger,
  ipt: IptablesInterface,
): Promise<boolean> {
  const step = async (what: string, fn: () => Promise<unknown>): Promise<boolean> => {
    try {
      await fn();
      return true;
    } catch (e) {
      logger.error(e, what);
      return false;
    }
  };
  if (
    !(await step(
      "Failed to ensure that iptables hint chain exists",
      () => ipt.ensureChain("mangle", KUBE_IPTABLES_HINT_CHAIN),
    ))
  ) return false;
  // IPv6 has no route_localnet hole.
  if (ipt.isIPv6()) return true;
  // kube-proxy (iptables mode) makes an identical copy of these: a change must keep working
  // beside skewed versions of it.
  return await step(
    "Failed to ensure that filter table KUBE-FIREWALL chain exists",
    () => ipt.ensureChain("filter", KUBE_FIREWALL_CHAIN),
  ) &&
    await step(
      "Failed to ensure that OUTPUT chain jumps to KUBE-FIREWALL",
      () => ipt.ensureRule(PREPEND, "filter", "OUTPUT", "-j", KUBE_FIREWALL_CHAIN),
    ) &&
    await step(
      "Failed to ensure that INPUT chain jumps to KUBE-FIREWALL",
      () => ipt.ensureRule(PREPEND, "filter", "INPUT", "-j", KUBE_FIREWALL_CHAIN),
    ) &&
    await step(
      "Failed to ensure rule to drop invalid localhost packets in filter table KUBE-FIREWALL chain",
      () => ipt.ensureRule(APPEND, "filter", KUBE_FIREWALL_CHAIN, ...LOCALNET_DROP_RULE),
    );
}
