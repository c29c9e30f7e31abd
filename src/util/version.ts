/**
 * @module
 * Version of the agent. It reports the upstream kubelet release whose behaviour it implements,
 * with our own version as build metadata, so version-skew checks and tools that parse
 * `kubelet --version` ("Kubernetes vX.Y.Z") keep working.
 */

/** The upstream Kubernetes release this agent follows. */
export const UPSTREAM_VERSION = "v1.36.3";

/** This project's version. */
export const AGENT_VERSION = "0.1.0";

/** The version the kubelet reports (node status kubeletVersion, --version). */
export const KUBELET_VERSION = `${UPSTREAM_VERSION}+kubelet-ts.${AGENT_VERSION}`;

/** What `--version=raw` prints: upstream's version.Info fields. */
export function versionInfo(): Record<string, string> {
  const [major = "", minor = ""] = UPSTREAM_VERSION.slice(1).split(".");
  return {
    major,
    minor,
    gitVersion: KUBELET_VERSION,
    gitCommit: "",
    gitTreeState: "",
    buildDate: "",
    goVersion: "",
    compiler: "deno",
    // Not upstream's: the Deno runtime the agent runs on (`--version` stays one line, as
    // kubeadm parses it).
    denoVersion: Deno.version.deno,
    platform: `linux/${Deno.build.arch === "x86_64" ? "amd64" : "arm64"}`,
  };
}
