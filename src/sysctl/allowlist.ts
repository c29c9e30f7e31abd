/**
 * @module
 * The sysctl admission of pods: a pod whose `securityContext.sysctls` names a sysctl outside the
 * safe set (those the kernel namespaces per pod, as far as the node's kernel does) and the
 * configured `allowedUnsafeSysctls`, or a net or IPC sysctl in a pod that shares the host's
 * network or IPC namespace, is rejected with reason `SysctlForbidden`. Allowed entries are names
 * or prefixes ending in `*`, each of a known namespace; a pattern that is malformed or of no
 * known namespace stops the kubelet at start. Names may use `/` as separator
 * (`net/ipv4/conf/eth0.100/rp_filter`), normalized as the runtime does. Corresponds to upstream
 * `pkg/kubelet/sysctl` (allowlist.go, safe_sysctls.go) and component-helpers'
 * `node/util/sysctl` (namespace.go, NormalizeName).
 */

import type { V1Pod } from "@kubernetes/client-node";

/** The admission reason of a forbidden sysctl. */
export const FORBIDDEN_REASON = "SysctlForbidden";

/** The namespaces sysctls belong to; "" for none known. */
type Namespace = "IPC" | "Net" | "";

const NAME_TO_NAMESPACE: Readonly<Record<string, Namespace>> = {
  "kernel.sem": "IPC",
  "kernel.shmall": "IPC",
  "kernel.shmmax": "IPC",
  "kernel.shmmni": "IPC",
  "kernel.shm_rmid_forced": "IPC",
  "kernel.shm": "IPC",
  "kernel.msgmax": "IPC",
  "kernel.msgmnb": "IPC",
  "kernel.msgmni": "IPC",
  "kernel.msg": "IPC",
};

const PREFIX_TO_NAMESPACE: readonly [string, Namespace][] = [["net", "Net"], ["fs.mqueue", "IPC"]];

/** The safe sysctls, each with the kernel version that namespaces it ("" for any). */
const SAFE_SYSCTLS: readonly (readonly [string, string])[] = [
  ["kernel.shm_rmid_forced", ""],
  ["net.ipv4.ip_local_port_range", ""],
  ["net.ipv4.tcp_syncookies", ""],
  ["net.ipv4.ping_group_range", ""],
  ["net.ipv4.ip_unprivileged_port_start", ""],
  ["net.ipv4.ip_local_reserved_ports", "3.16"],
  ["net.ipv4.tcp_keepalive_time", "4.5"],
  ["net.ipv4.tcp_fin_timeout", "4.6"],
  ["net.ipv4.tcp_keepalive_intvl", "4.5"],
  ["net.ipv4.tcp_keepalive_probes", "4.5"],
  ["net.ipv4.tcp_rmem", "4.15"],
  ["net.ipv4.tcp_wmem", "4.15"],
];

/** apimachinery's sysctl pattern: dot- or slash-separated segments, the last may end in `*`. */
const PATTERN_RE = /^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$/;
const PATTERN_FMT = "([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]";
const MAX_LENGTH = 253;

/**
 * Upstream NormalizeName: a name whose first separator is `/` uses `/` between segments and
 * `.` inside them (`net/ipv4/conf/eno2.100/rp_filter`); swap them to the dotted form.
 */
export function normalizeName(name: string): string {
  const first = name.search(/[./]/);
  if (first === -1 || name[first] === ".") return name;
  return name.replace(/[./]/g, (c) => (c === "." ? "/" : "."));
}

function namespaceOf(name: string): Namespace {
  const ns = NAME_TO_NAMESPACE[name];
  if (ns !== undefined) return ns;
  for (const [prefix, n] of PREFIX_TO_NAMESPACE) if (name.startsWith(`${prefix}.`)) return n;
  return "";
}

/** Compares dotted kernel versions ("5.10.0-28-amd64" ≥ "4.15"). */
function atLeast(kernel: string, min: string): boolean {
  const parts = (v: string) => (/^\d+(\.\d+)*/.exec(v)?.[0] ?? "").split(".").map(Number);
  const a = parts(kernel);
  const b = parts(min);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

/**
 * The safe sysctls the node's kernel namespaces (upstream SafeSysctlAllowlist); those its
 * version is too old for are left out and passed to `dropped`. An unknown version keeps only
 * the ones every kernel has.
 */
export function safeSysctlAllowlist(
  kernelVersion: string | undefined,
  dropped: (sysctl: string) => void = () => {},
): string[] {
  const out: string[] = [];
  for (const [name, min] of SAFE_SYSCTLS) {
    if (min === "" || (kernelVersion !== undefined && atLeast(kernelVersion, min))) out.push(name);
    else dropped(name);
  }
  return out;
}

/** A pattern of `allowedUnsafeSysctls` the kubelet cannot use; stops it at start. */
export class SysctlAllowlistError extends Error {
  override name = "SysctlAllowlistError";
}

/** An admission answer (upstream PodAdmitResult). */
export interface SysctlAdmitResult {
  readonly admit: boolean;
  readonly reason?: string;
  readonly message?: string;
}

/** The allowed sysctls and prefixes; see the module documentation. */
export class SysctlAllowlist {
  readonly #sysctls = new Map<string, Namespace>();
  readonly #prefixes = new Map<string, Namespace>();

  /** Upstream NewAllowlist: throws {@link SysctlAllowlistError} on the first bad pattern. */
  constructor(patterns: readonly string[]) {
    for (const p of patterns) {
      if (p.length > MAX_LENGTH || !PATTERN_RE.test(p)) {
        throw new SysctlAllowlistError(
          `sysctl "${p}" must have at most ${MAX_LENGTH} characters and match regex ${PATTERN_FMT}`,
        );
      }
      let name = normalizeName(p);
      const star = name.indexOf("*");
      const prefixed = star !== -1;
      if (prefixed) name = name.slice(0, star);
      const ns = namespaceOf(name);
      if (ns === "") {
        throw new SysctlAllowlistError(`the sysctls "${name}" are not known to be namespaced`);
      }
      (prefixed ? this.#prefixes : this.#sysctls).set(name, ns);
    }
  }

  #validate(sysctl: string, hostNet: boolean, hostIPC: boolean): string | undefined {
    const name = normalizeName(sysctl);
    const check = (ns: Namespace) => {
      if ((ns === "IPC" && hostIPC) || (ns === "Net" && hostNet)) {
        return `"${name}" not allowed with host ${ns} enabled`;
      }
      return undefined;
    };
    const exact = this.#sysctls.get(name);
    if (exact !== undefined) return check(exact);
    for (const [prefix, ns] of this.#prefixes) if (name.startsWith(prefix)) return check(ns);
    return `"${name}" not allowlisted`;
  }

  /** Upstream patternAllowlist.Admit. */
  admit(pod: V1Pod): SysctlAdmitResult {
    const sysctls = pod.spec?.securityContext?.sysctls ?? [];
    for (const s of sysctls) {
      const why = this.#validate(
        s.name,
        pod.spec?.hostNetwork === true,
        pod.spec?.hostIPC === true,
      );
      if (why !== undefined) {
        return { admit: false, reason: FORBIDDEN_REASON, message: `forbidden sysctl: ${why}` };
      }
    }
    return { admit: true };
  }
}
