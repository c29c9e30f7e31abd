/**
 * @module
 * Version of the agent. It reports the upstream kubelet release whose behaviour it implements,
 * with our own version as build metadata, so version-skew checks and tools that parse
 * `kubelet --version` ("Kubernetes vX.Y.Z") keep working. Also apimachinery's generic version
 * parsing (`ParseGeneric`, `HighestSupportedVersion`), for the versions plugins report.
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

/** A version as apimachinery's ParseGeneric reads it: two or more dot-separated numbers. */
export interface GenericVersion {
  readonly components: readonly number[];
  /** What followed the numbers ("-rc.1", "+build"), kept but not compared. */
  readonly extra: string;
}

const GENERIC_VERSION = /^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)$/;

/** apimachinery ParseGeneric; throws with its messages. */
export function parseGenericVersion(str: string): GenericVersion {
  const m = GENERIC_VERSION.exec(str);
  if (!m) throw new Error(`could not parse "${str}" as version`);
  const parts = m[1]!.split(".");
  if (parts.length < 2) throw new Error(`illegal version string "${str}"`);
  if (parts[0]!.startsWith("0") && parts[0] !== "0") {
    throw new Error(`illegal zero-prefixed version component "${parts[0]}" in "${str}"`);
  }
  return { components: parts.map(Number), extra: m[2] ?? "" };
}

/** Whether `a` orders before `b` by their numbers (a missing component counts as 0). */
export function versionLessThan(a: GenericVersion, b: GenericVersion): boolean {
  const n = Math.max(a.components.length, b.components.length);
  for (let i = 0; i < n; i++) {
    const x = a.components[i] ?? 0;
    const y = b.components[i] ?? 0;
    if (x !== y) return x < y;
  }
  return false;
}

/** A version printed as apimachinery's String() prints a generic one: its numbers. */
export function formatGenericVersion(v: GenericVersion): string {
  return v.components.join(".");
}

/**
 * apimachinery HighestSupportedVersion: the highest 1.x of `versions` (2.x and later are left
 * out); throws with upstream's messages when there is none.
 */
export function highestSupportedVersion(versions: readonly string[]): GenericVersion {
  if (versions.length === 0) throw new Error("empty array for supported versions");
  let highest: GenericVersion | undefined;
  let lastError: string | undefined;
  for (let i = versions.length - 1; i >= 0; i--) {
    let v: GenericVersion;
    try {
      v = parseGenericVersion(versions[i]!);
    } catch (e) {
      lastError = e instanceof Error ? e.message : String(e);
      continue;
    }
    if ((v.components[0] ?? 0) > 1) continue;
    if (!highest || versionLessThan(highest, v)) highest = v;
  }
  if (!highest) {
    throw new Error(
      `could not find a highest supported version from versions ([${
        versions.join(" ")
      }]) reported: ${lastError ?? "<nil>"}`,
    );
  }
  if (highest.components[0] !== 1) {
    throw new Error(
      `highest supported version reported is ${formatGenericVersion(highest)}, must be v1.x`,
    );
  }
  return highest;
}
