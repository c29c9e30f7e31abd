/**
 * @module
 * Checks of the per-node flags (KubeletFlags) before anything starts, as upstream's
 * `ValidateKubeletFlags` (`cmd/kubelet/app/options/options.go`) and the flag checks at the top
 * of `run` and `RunKubelet` (`cmd/kubelet/app/server.go`: --exit-on-lock-contention without
 * --lock-file, `ParseNodeIPArgument`), plus the flags this kubelet cannot honour yet. Start-up
 * (kubelet_server.ts) stops at the first; `--check` reports them all.
 */

import { isIP } from "node:net";
import type { KubeletFlags } from "../apis/flags.ts";

/** A configuration that cannot start; the message names the flag or field and value. */
export class StartError extends Error {
  override name = "StartError";
}

/** The node's name: --hostname-override or the hostname, lower-cased (nodeutil.GetHostname). */
export function nodeHostname(override: string, hostname: () => string): string {
  const name = (override !== "" ? override : hostname()).trim().toLowerCase();
  if (name === "") throw new StartError("empty hostname is invalid");
  return name;
}

/** Parses --node-ip as upstream's ParseNodeIPArgument: one IP or a dual-stack pair. */
export function parseNodeIPs(text: string): string[] {
  if (text === "") return [];
  const ips = text.split(",").map((s) => s.trim());
  for (const ip of ips) {
    if (isIP(ip) === 0) {
      throw new StartError(
        `could not parse --node-ip ${JSON.stringify(text)}: '${ip}' is not an IP address`,
      );
    }
  }
  if (ips.length > 2 || (ips.length === 2 && isIP(ips[0] ?? "") === isIP(ips[1] ?? ""))) {
    throw new StartError(
      `could not parse --node-ip ${
        JSON.stringify(text)
      }: must contain either a single IP or a dual-stack pair of IPs`,
    );
  }
  return ips;
}

/** Labels in the kubernetes.io namespaces the kubelet may set (k8s.io/kubelet well_known_labels). */
const KUBELET_LABELS = [
  "beta.kubernetes.io/arch",
  "beta.kubernetes.io/instance-type",
  "beta.kubernetes.io/os",
  "failure-domain.beta.kubernetes.io/region",
  "failure-domain.beta.kubernetes.io/zone",
  "kubernetes.io/arch",
  "kubernetes.io/hostname",
  "kubernetes.io/os",
  "node.kubernetes.io/instance-type",
  "topology.kubernetes.io/region",
  "topology.kubernetes.io/zone",
];
const KUBELET_LABEL_NAMESPACES = ["kubelet.kubernetes.io", "node.kubernetes.io"];

function labelNamespace(key: string): string {
  const slash = key.indexOf("/");
  return slash < 0 ? "" : key.slice(0, slash);
}

function inNamespace(ns: string, of: string): boolean {
  return ns === of || ns.endsWith(`.${of}`);
}

/** Upstream isKubernetesLabel && !IsKubeletLabel: a label --node-labels may not set. */
function forbiddenNodeLabel(key: string): boolean {
  const ns = labelNamespace(key);
  if (!inNamespace(ns, "kubernetes.io") && !inNamespace(ns, "k8s.io")) return false;
  if (KUBELET_LABELS.includes(key)) return false;
  return !KUBELET_LABEL_NAMESPACES.some((allowed) => inNamespace(ns, allowed));
}

/**
 * Every problem with the flags, in the order start-up meets them; empty when they can start.
 * The syntax of label keys and values is the apiserver's to check when the node registers.
 */
export function validateKubeletFlags(flags: KubeletFlags): StartError[] {
  const out: StartError[] = [];
  const unknown = Object.keys(flags.nodeLabels).filter(forbiddenNodeLabel).sort();
  if (unknown.length > 0) {
    out.push(
      new StartError(
        `unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [${
          unknown.join(" ")
        }]\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (${
          KUBELET_LABEL_NAMESPACES.join(", ")
        }) or be in the specifically allowed set (${KUBELET_LABELS.join(", ")})`,
      ),
    );
  }
  if (flags.exitOnLockContention && flags.lockFilePath === "") {
    out.push(new StartError("cannot exit on lock file contention: no lock file specified"));
  }
  if (flags.lockFilePath !== "") {
    out.push(
      new StartError(
        `--lock-file=${flags.lockFilePath} is not supported yet by this kubelet (no file lock is taken)`,
      ),
    );
  }
  if (flags.experimentalMounterPath !== "") {
    out.push(
      new StartError(
        `--experimental-mounter-path=${flags.experimentalMounterPath} is not supported yet by this kubelet (mounts run the host's mount command from PATH)`,
      ),
    );
  }
  if (flags.cloudProvider !== "" && flags.cloudProvider !== "external") {
    out.push(
      new StartError(
        `--cloud-provider=${flags.cloudProvider} is not supported: only '' and 'external' are (in-tree cloud providers were removed upstream)`,
      ),
    );
  }
  try {
    parseNodeIPs(flags.nodeIP);
  } catch (e) {
    if (!(e instanceof StartError)) throw e;
    out.push(e);
  }
  return out;
}
