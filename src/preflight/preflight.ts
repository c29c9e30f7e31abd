/**
 * @module
 * `kubelet --check`: one run over everything that would stop the kubelet on this node, each
 * problem reported with what to do, instead of the first one ending a start-up. Upstream has no
 * such mode (kubeadm's preflight checks cover a part of it, from outside). The checks:
 * - configuration: the file, drop-ins and flags load and validate (what main.ts reports), with
 *   nothing left to lenient decoding (unknown fields, keys given twice), and the per-node flags
 *   pass their checks (--node-ip, --node-labels, ...);
 * - permissions: every configured path is inside the agent's Deno permission set;
 * - runtime: the CRI socket exists, answers `runtime.v1` Version and Status, and its cgroup
 *   driver (RuntimeConfig, where served) is the configured one;
 * - cgroups: cgroup v1 refused by failCgroupV1, the controllers the kubelet needs, the driver;
 * - swap: on while failSwapOn; kernel: ip_forward, br_netfilter, /dev/kmsg;
 * - certificates: the serving certificate and key (readable, matching, valid now and for 30
 *   days), the client CA file, the kubeconfig's client certificate;
 * - apiserver: reachable, and the kubeconfig's credentials accepted (SelfSubjectReview);
 * - cis: the CIS Kubernetes Benchmark's kubelet items (cis_benchmark.ts), as warnings; not
 *   checked when the configuration did not load (the defaults are not the site's).
 * The remote checks live in `_remote.ts`. Host files are read under `root`, so tests
 * plant a host.
 */

import { createPrivateKey, createPublicKey } from "node:crypto";
import { join } from "node:path";
import { detectCgroupLayout } from "../cm/cgroup_layout.ts";
import { cisFileChecks, cisFiles, cisKubeletChecks } from "./cis_benchmark.ts";
import { isCgroup2UnifiedMode } from "../cm/cgroup_mode.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { KubeletFlags } from "../apis/flags.ts";
import { type PathNeed, PermissionSetError } from "../privilege/permissions.ts";
import { checkApiserver, checkRuntime } from "./_remote.ts";
import { errorText } from "../util/errors.ts";
import { type Finding, ok, problem, readPemCertificates, validity, warning } from "./_findings.ts";
import { hostRoot } from "../privilege/host_root.ts";

export type { Finding } from "./_findings.ts";

/** Options of {@link runPreflight}. */
export interface PreflightOptions {
  readonly flags: KubeletFlags;
  /** The loaded configuration; when it failed to load, `configError` and the defaults. */
  readonly config: KubeletConfiguration;
  readonly configError?: Error;
  /**
   * What lenient decoding went past in each file (unknown fields, keys given twice), as
   * app/kubelet_config.ts words it: the kubelet starts, but the file does not say what was meant.
   */
  readonly lenientDecoding?: readonly string[];
  /** Problems with the per-node flags (app/kubelet_flags.ts validateKubeletFlags). */
  readonly flagErrors?: readonly Error[];
  /** The paths the configuration names (app/kubelet_server.ts pathNeeds). */
  readonly pathNeeds: readonly PathNeed[];
  /** Host files are read under this root. @default "/" */
  readonly root?: string;
  /** The system bus, for the systemd cgroup driver. @default DBUS_SYSTEM_BUS_ADDRESS, else the socket */
  readonly systemBusAddress?: string;
  /** Bound of each runtime and apiserver call. @default 5000 */
  readonly timeoutMs?: number;
  /** @default Date.now */
  readonly now?: () => number;
  /** Permission state of one need. @default Deno.permissions.querySync */
  readonly permissionState?: (need: PathNeed) => Deno.PermissionState;
  /** The node name the credentials should belong to. */
  readonly nodeName: string;
}

/** Runs every check; never throws: a check that cannot run is itself a finding. */
export async function runPreflight(o: PreflightOptions): Promise<Finding[]> {
  const groups = await Promise.all([
    guard("configuration", () => checkConfiguration(o)),
    guard("permissions", () => checkPermissionSet(o)),
    guard("runtime", () => checkRuntime(o)),
    guard("cgroups", () => checkCgroups(o)),
    guard("swap", () => checkSwap(o)),
    guard("kernel", () => checkKernel(o)),
    guard("certificates", () => checkCertificates(o)),
    guard("apiserver", () => checkApiserver(o)),
    guard("cis", () => checkCis(o)),
  ]);
  return groups.flat();
}

async function guard(check: string, fn: () => Promise<Finding[]> | Finding[]): Promise<Finding[]> {
  try {
    return await fn();
  } catch (e) {
    return [problem(check, `the check could not run: ${errorText(e)}`, "see the message")];
  }
}

/** The report `--check` prints: one line per finding, the fix indented under it, a summary. */
export function formatFindings(findings: readonly Finding[]): string {
  const tag = { ok: "[ok]     ", warning: "[warning]", problem: "[PROBLEM]" } as const;
  const lines = findings.map((f) =>
    `${tag[f.level]} ${f.check}: ${f.message}${f.fix ? `\n          fix: ${f.fix}` : ""}`
  );
  const problems = findings.filter((f) => f.level === "problem").length;
  const warnings = findings.filter((f) => f.level === "warning").length;
  lines.push(
    problems === 0
      ? `no problems found (${warnings} warning${warnings === 1 ? "" : "s"})`
      : `${problems} problem${problems === 1 ? "" : "s"} found (${warnings} warning${
        warnings === 1 ? "" : "s"
      }): the kubelet would not run correctly on this node`,
  );
  return lines.join("\n");
}

function checkConfiguration(o: PreflightOptions): Finding[] {
  const out: Finding[] = (o.flagErrors ?? []).map((e) =>
    problem("flags", e.message, "correct or remove the flag named")
  );
  for (const text of o.lenientDecoding ?? []) {
    out.push(problem(
      "configuration",
      `the kubelet would start, but ignoring what strict decoding refuses: ${text}`,
      "remove or correct the field named (a misspelt field is ignored, and of a key given twice " +
        "the last is used)",
    ));
  }
  if (o.configError) {
    out.push(
      problem(
        "configuration",
        o.configError.message,
        "correct the file, drop-in or flag named; the checks below use the defaults in its place",
      ),
    );
    return out;
  }
  if (out.length > 0) return out;
  const file = o.flags.kubeletConfigFile;
  return [
    ok(
      "configuration",
      file ? `${file} loads and validates` : "the built-in defaults and flags load and validate",
    ),
  ];
}

function checkPermissionSet(o: PreflightOptions): Finding[] {
  const state = o.permissionState ??
    ((n: PathNeed) => Deno.permissions.querySync({ name: n.permission, path: n.path }).state);
  const out: Finding[] = [];
  for (const need of o.pathNeeds) {
    if (need.path === "" || state(need) === "granted") continue;
    const e = new PermissionSetError(need);
    const [what, fix] = e.message.split(": add it to ");
    out.push(problem("permissions", what!, `add it to ${fix}`));
  }
  return out.length > 0
    ? out
    : [ok("permissions", "every configured path is in the permission set")];
}

async function checkCgroups(o: PreflightOptions): Promise<Finding[]> {
  const root = o.root ?? hostRoot();
  const mountinfo = await Deno.readTextFile(join(root, "proc/self/mountinfo"));
  const out: Finding[] = [];
  const v2 = isCgroup2UnifiedMode(mountinfo);
  if (!v2 && o.config.failCgroupV1) {
    out.push(problem(
      "cgroups",
      "the host runs cgroup v1 and failCgroupV1 is true (the default since v1.35)",
      "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2), or set failCgroupV1: false",
    ));
  }
  if (o.config.cgroupDriver === "systemd" && (o.config.cgroupsPerQOS ?? true)) {
    // The systemd driver starts every kubelet cgroup as a slice through systemd's D-Bus API.
    const { connectSystemd } = await import("../cm/cgroup_systemd.ts");
    try {
      (await connectSystemd(o.systemBusAddress, AbortSignal.timeout(o.timeoutMs ?? 5_000))).close();
    } catch (e) {
      out.push(problem(
        "cgroups",
        `cgroupDriver is systemd but systemd cannot be reached over D-Bus: ${(e as Error).message}`,
        "run the kubelet where systemd is PID 1 with its system bus, or set cgroupDriver: " +
          "cgroupfs (and the runtime's: containerd SystemdCgroup = false)",
      ));
    }
  }
  const layout = await detectCgroupLayout({ root, mountinfo });
  if (layout.mode === "v2") {
    const have = new Set(
      (await Deno.readTextFile(join(layout.unified!, "cgroup.controllers"))).split(/\s+/),
    );
    const missing = ["cpu", "memory", "pids"].filter((c) => !have.has(c));
    if (missing.length > 0) {
      out.push(problem(
        "cgroups",
        `cgroup v2 controllers not enabled at the root: ${missing.join(", ")}`,
        "enable them (cgroup_enable=memory on the kernel command line for memory)",
      ));
    }
  } else {
    const missing = ["cpu", "cpuacct", "cpuset", "memory", "pids"].filter((c) => !layout.v1.has(c));
    if (missing.length > 0) {
      out.push(problem(
        "cgroups",
        `cgroup v1 controllers not mounted: ${missing.join(", ")}`,
        "mount them under /sys/fs/cgroup (systemd does at boot)",
      ));
    }
  }
  if (out.length === 0) {
    out.push(ok("cgroups", `cgroup ${layout.mode}, the controllers the kubelet needs are there`));
  }
  return out;
}

async function checkSwap(o: PreflightOptions): Promise<Finding[]> {
  const text = await Deno.readTextFile(join(o.root ?? hostRoot(), "proc/swaps"));
  const devices = text.split("\n").slice(1).filter((l) => l.trim() !== "");
  if (devices.length === 0) return [ok("swap", "swap is off")];
  const names = devices.map((l) => l.split(/\s+/)[0]).join(", ");
  if (o.config.failSwapOn) {
    return [problem(
      "swap",
      `swap is on (${names}) and failSwapOn is true: the kubelet would refuse to start`,
      "turn swap off (swapoff -a, and remove it from /etc/fstab), or set failSwapOn: false",
    )];
  }
  return [ok("swap", `swap is on (${names}); failSwapOn is false`)];
}

async function checkKernel(o: PreflightOptions): Promise<Finding[]> {
  const root = o.root ?? hostRoot();
  const read = (p: string) => Deno.readTextFile(join(root, p)).then((t) => t.trim(), () => "");
  const out: Finding[] = [];
  if ((await read("proc/sys/net/ipv4/ip_forward")) !== "1") {
    out.push(problem(
      "kernel",
      "/proc/sys/net/ipv4/ip_forward is not 1: pod traffic is not routed",
      "sysctl -w net.ipv4.ip_forward=1 (and set it in /etc/sysctl.d/)",
    ));
  }
  const bridge = await read("proc/sys/net/bridge/bridge-nf-call-iptables");
  if (bridge !== "1") {
    out.push(warning(
      "kernel",
      bridge === ""
        ? "br_netfilter is not loaded: bridged pod traffic bypasses iptables (Services)"
        : "/proc/sys/net/bridge/bridge-nf-call-iptables is not 1",
      "modprobe br_netfilter; sysctl -w net.bridge.bridge-nf-call-iptables=1",
    ));
  }
  const kmsg = await Deno.stat(join(root, "dev/kmsg")).then(() => true, () => false);
  if (!kmsg) {
    out.push(warning(
      "kernel",
      "/dev/kmsg is missing: kernel OOM kills are not seen",
      "run where /dev/kmsg exists (in a container, mount it)",
    ));
  }
  if (out.length === 0) {
    out.push(ok("kernel", "ip_forward, br_netfilter and /dev/kmsg are in place"));
  }
  return out;
}

async function checkCertificates(o: PreflightOptions): Promise<Finding[]> {
  const { config } = o;
  const now = (o.now ?? Date.now)();
  const out: Finding[] = [];
  const certFile = config.tlsCertFile ?? "";
  const keyFile = config.tlsPrivateKeyFile ?? "";
  if (certFile !== "" || keyFile !== "") {
    out.push(...await servingPair(certFile, keyFile, now));
  }
  const ca = config.authentication?.x509?.clientCAFile ?? "";
  if (ca !== "") {
    const certs = await readPemCertificates(ca).catch((e) => e as Error);
    if (certs instanceof Error || certs.length === 0) {
      out.push(problem(
        "certificates",
        `clientCAFile ${ca}: ${
          certs instanceof Error ? errorText(certs) : "holds no PEM certificate"
        }`,
        "point authentication.x509.clientCAFile at the cluster CA's certificate",
      ));
    } else {
      out.push(...certs.flatMap((c) => validity(`clientCAFile ${ca}`, c, now)));
    }
  }
  if (out.length === 0) {
    const what = certFile === "" ? "no serving certificate configured (one is generated)" : "";
    out.push(ok("certificates", what || "the configured certificates are valid"));
  }
  return out;
}

async function servingPair(certFile: string, keyFile: string, now: number): Promise<Finding[]> {
  if (certFile === "" || keyFile === "") {
    return [problem(
      "certificates",
      "only one of tlsCertFile and tlsPrivateKeyFile is set",
      "set both, or neither (a self-signed certificate is generated in --cert-dir)",
    )];
  }
  const certs = await readPemCertificates(certFile).catch((e) => e as Error);
  if (certs instanceof Error || certs.length === 0) {
    return [problem(
      "certificates",
      `tlsCertFile ${certFile}: ${
        certs instanceof Error ? errorText(certs) : "holds no PEM certificate"
      }`,
      "point tlsCertFile at the node's serving certificate (PEM)",
    )];
  }
  const out = validity(`tlsCertFile ${certFile}`, certs[0]!, now);
  try {
    const key = createPrivateKey(await Deno.readTextFile(keyFile));
    const fromKey = createPublicKey(key).export({ type: "spki", format: "der" });
    const fromCert = certs[0]!.publicKey.export({ type: "spki", format: "der" });
    if (!fromKey.equals(fromCert)) {
      out.push(problem(
        "certificates",
        `tlsPrivateKeyFile ${keyFile} is not the key of tlsCertFile ${certFile}`,
        "give the key the certificate was issued for",
      ));
    }
  } catch (e) {
    out.push(problem(
      "certificates",
      `tlsPrivateKeyFile ${keyFile}: ${errorText(e)}`,
      "point tlsPrivateKeyFile at the serving certificate's PEM private key",
    ));
  }
  return out;
}

/** The CIS items: each failed one a warning with its fix, a single line when all pass. */
async function checkCis(o: PreflightOptions): Promise<Finding[]> {
  if (o.configError) {
    // The defaults in place of a configuration that did not load say nothing of the site's.
    return [warning(
      "cis",
      "not checked: the configuration did not load (see above)",
      "correct the configuration and run --check again",
    )];
  }
  const results = [
    ...cisKubeletChecks(o.config, o.flags),
    ...await cisFileChecks(cisFiles(o.config, o.flags)),
  ];
  const failed = results.filter((r) => !r.pass);
  if (failed.length === 0) {
    return [ok("cis", `the CIS Benchmark's ${results.length} kubelet items checked here pass`)];
  }
  return failed.map((r) => warning("cis", `${r.id} ${r.title}: ${r.detail}`, r.fix));
}
