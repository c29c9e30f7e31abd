/**
 * @module
 * The preflight checks that talk to something: the container runtime over CRI (socket, Version,
 * Status, RuntimeConfig's cgroup driver) and the apiserver with the kubeconfig's credentials
 * (reachable, the client certificate valid, SelfSubjectReview accepted). Each call is bounded.
 * Private to preflight.ts.
 */

import { X509Certificate } from "node:crypto";
import * as api from "../../proto/runtime/v1/api.ts";
import { realClock } from "../util/clock.ts";
import { CriConnection, GrpcCode, isCriCode } from "../cri/connection.ts";
import { isStatus, KubeClient } from "../client/kube_client.ts";
import { loadKubeconfig } from "../client/kubeconfig.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { KubeletFlags } from "../apis/flags.ts";
import { unixSocketPath } from "../privilege/permissions.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import { type Finding, ok, problem, validity, warning } from "./_findings.ts";
import { errorText } from "../util/errors.ts";

/** What the remote checks read. */
export interface RemoteCheckOptions {
  readonly flags: KubeletFlags;
  readonly config: KubeletConfiguration;
  readonly nodeName: string;
  /** @default 5000 */
  readonly timeoutMs?: number;
  /** @default Date.now */
  readonly now?: () => number;
}

/** The runtime: socket, CRI v1, readiness and cgroup driver. */
export async function checkRuntime(o: RemoteCheckOptions): Promise<Finding[]> {
  const endpoint = o.config.containerRuntimeEndpoint;
  const socket = unixSocketPath(endpoint);
  if (socket === undefined) {
    return [problem(
      "runtime",
      `containerRuntimeEndpoint ${endpoint} is not a unix socket`,
      "set containerRuntimeEndpoint to unix:///run/containerd/containerd.sock (or your runtime's)",
    )];
  }
  const stat = await Deno.stat(socket).catch((e) => e as Error);
  if (stat instanceof Error) {
    return [problem(
      "runtime",
      `the container runtime's socket ${socket} does not exist`,
      "start the runtime (systemctl start containerd), or set containerRuntimeEndpoint to its socket",
    )];
  }
  const connection = new CriConnection({ endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: o.timeoutMs ?? 5_000 });
  try {
    let version: api.VersionResponse;
    try {
      version = await runtime.version();
    } catch (e) {
      return [problem(
        "runtime",
        isCriCode(e, GrpcCode.UNIMPLEMENTED)
          ? `the runtime at ${endpoint} does not serve CRI runtime.v1 (${errorText(e)})`
          : `the runtime at ${endpoint} does not answer: ${errorText(e)}`,
        isCriCode(e, GrpcCode.UNIMPLEMENTED)
          ? "use a runtime with CRI v1 (containerd 1.6 or later, with its cri plugin enabled)"
          : "check that the runtime runs and its logs (journalctl -u containerd)",
      )];
    }
    const out: Finding[] = [];
    const name = `${version.runtimeName} ${version.runtimeVersion}`;
    if (version.runtimeApiVersion !== "v1") {
      out.push(problem(
        "runtime",
        `${name} speaks CRI ${version.runtimeApiVersion}, not v1`,
        "upgrade the runtime to one that serves CRI v1",
      ));
    } else out.push(ok("runtime", `${name} serves CRI v1 at ${endpoint}`));
    out.push(...await readiness(runtime));
    out.push(...await cgroupDriver(runtime, o.config));
    return out;
  } finally {
    connection.close();
  }
}

async function readiness(runtime: RemoteRuntimeService): Promise<Finding[]> {
  const status = await runtime.status().catch((e) => e as Error);
  if (status instanceof Error) {
    return [
      problem("runtime", `CRI Status failed: ${errorText(status)}`, "check the runtime's logs"),
    ];
  }
  const out: Finding[] = [];
  for (const c of status.status?.conditions ?? []) {
    if (c.status) continue;
    const text = `${c.type} is false: ${c.reason}${c.message ? `: ${c.message}` : ""}`;
    out.push(
      c.type === "NetworkReady"
        ? warning(
          "runtime",
          text,
          "install a CNI network (a config in /etc/cni/net.d); the node stays NotReady without",
        )
        : problem("runtime", text, "check the runtime's logs"),
    );
  }
  return out;
}

async function cgroupDriver(
  runtime: RemoteRuntimeService,
  config: KubeletConfiguration,
): Promise<Finding[]> {
  const configured = config.cgroupDriver || "cgroupfs";
  let reply: api.RuntimeConfigResponse;
  try {
    reply = await runtime.runtimeConfig();
  } catch (e) {
    if (isCriCode(e, GrpcCode.UNIMPLEMENTED)) {
      return [ok(
        "runtime",
        `the runtime does not report its cgroup driver (RuntimeConfig): the configured ${configured} is used; it must match the runtime's`,
      )];
    }
    return [
      problem("runtime", `CRI RuntimeConfig failed: ${errorText(e)}`, "check the runtime's logs"),
    ];
  }
  const driver = reply.linux?.cgroupDriver === api.CgroupDriver.SYSTEMD ? "systemd" : "cgroupfs";
  if (driver !== configured) {
    return [problem(
      "runtime",
      `the runtime's cgroup driver is ${driver} but cgroupDriver is ${configured}`,
      `set cgroupDriver: ${driver}, or change the runtime's (containerd: SystemdCgroup in the runc options)`,
    )];
  }
  return [ok("runtime", `cgroup driver ${driver}, as the runtime's`)];
}

/** The apiserver: the kubeconfig loads, its client certificate is valid, and it is accepted. */
export async function checkApiserver(o: RemoteCheckOptions): Promise<Finding[]> {
  const file = o.flags.kubeConfig;
  if (file === "") {
    return [ok("apiserver", "standalone mode (no --kubeconfig): no apiserver to check")];
  }
  const exists = await Deno.stat(file).then(() => true, () => false);
  if (!exists && o.flags.bootstrapKubeconfig !== "") {
    return [problem(
      "apiserver",
      `--kubeconfig ${file} does not exist yet and TLS bootstrap (--bootstrap-kubeconfig) is not checked`,
      "run the kubelet once to bootstrap, or give a --kubeconfig with credentials",
    )];
  }
  let rest;
  try {
    rest = await loadKubeconfig(file);
  } catch (e) {
    return [problem("apiserver", errorText(e), `correct the kubeconfig ${file}`)];
  }
  const out: Finding[] = [];
  if (rest.certPem) {
    const now = (o.now ?? Date.now)();
    try {
      out.push(
        ...validity(`the client certificate of ${file}`, new X509Certificate(rest.certPem), now),
      );
    } catch (e) {
      out.push(
        problem(
          "apiserver",
          `the client certificate of ${file}: ${errorText(e)}`,
          `correct ${file}`,
        ),
      );
    }
  }
  let client: KubeClient;
  try {
    client = new KubeClient({
      config: rest,
      clock: realClock,
      qps: -1,
      timeoutMs: o.timeoutMs ?? 5_000,
      userAgent: "kubelet-check",
    });
  } catch (e) {
    out.push(problem("apiserver", errorText(e), `correct the kubeconfig ${file}`));
    return out;
  }
  try {
    const version = await client.get<{ gitVersion?: string }>("/version").catch((e) => e as Error);
    if (version instanceof Error && !isStatus(version, 401) && !isStatus(version, 403)) {
      out.push(problem(
        "apiserver",
        `${rest.server} is unreachable: ${errorText(version)}`,
        `check the server address in ${file} and that the apiserver runs and is reachable from this node`,
      ));
      return out;
    }
    const review = await client.create<SelfSubjectReview>(
      "/apis/authentication.k8s.io/v1/selfsubjectreviews",
      { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
    ).catch((e) => e as Error);
    if (review instanceof Error) {
      out.push(
        isStatus(review, 401)
          ? problem(
            "apiserver",
            `${rest.server} refuses the credentials of ${file} (401 Unauthorized)`,
            "renew the client certificate or token (or bootstrap again with --bootstrap-kubeconfig)",
          )
          : problem(
            "apiserver",
            `SelfSubjectReview failed: ${errorText(review)}`,
            "check the apiserver's logs",
          ),
      );
      return out;
    }
    const user = review.status?.userInfo?.username ?? "";
    const v = version instanceof Error ? "" : ` ${version.gitVersion ?? ""}`;
    out.push(ok("apiserver", `${rest.server}${v} accepts ${file} as ${user}`));
    const expected = `system:node:${o.nodeName}`;
    if (user !== expected) {
      out.push(warning(
        "apiserver",
        `the credentials are ${user}, not ${expected}: the Node authorizer will refuse this node's objects`,
        `use credentials for ${expected}, or set --hostname-override to the node name they are for`,
      ));
    }
    return out;
  } finally {
    client.close();
  }
}

interface SelfSubjectReview {
  apiVersion: string;
  kind: string;
  status?: { userInfo?: { username?: string } };
}
