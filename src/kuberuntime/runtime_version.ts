/**
 * @module
 * The runtime's version as the node reports it (`status.nodeInfo.containerRuntimeVersion`):
 * `<runtimeName>://<version>`, the version read as upstream's kuberuntime manager reads it
 * (`newRuntimeVersion`: apimachinery's `ParseSemantic`, else `ParseGeneric`) and printed back.
 * So Debian's `1.6.20~ds1` is reported as `1.6.20` and containerd 2's `v2.4.2` as `2.4.2`, as
 * the Go kubelet reports them.
 */

const VERSION = /^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)$/;
const SEMVER_EXTRA =
  /^(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?\s*$/;

/**
 * A runtime version string printed as apimachinery's `Version.String()` prints what
 * ParseSemantic or else ParseGeneric makes of it: the numbers, and for a semantic version its
 * pre-release and build metadata. Undefined when neither parses it.
 */
export function normalizeRuntimeVersion(version: string): string | undefined {
  const m = VERSION.exec(version);
  if (!m) return undefined;
  const numbers = m[1]!.split(".").map((n) => String(Number(n)));
  const extra = m[2] ?? "";
  if (numbers.length === 3) {
    const sem = SEMVER_EXTRA.exec(extra);
    if (sem) {
      return numbers.join(".") + (sem[1] ? `-${sem[1]}` : "") + (sem[2] ? `+${sem[2]}` : "");
    }
  }
  return numbers.length >= 2 ? numbers.join(".") : undefined;
}

/** `<runtimeName>://<version>`; a version neither parser takes is kept as the runtime gave it. */
export function containerRuntimeVersion(
  v: { readonly runtimeName: string; readonly runtimeVersion: string },
): string {
  return `${v.runtimeName}://${normalizeRuntimeVersion(v.runtimeVersion) ?? v.runtimeVersion}`;
}
