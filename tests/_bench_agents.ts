/**
 * @module
 * The two kubelets the benchmark suite (tests/bench_suite.ts) compares, started the same way:
 * this agent (`main.ts`, through tests/node_harness.ts, or the release file of `deno task
 * release` with the same arguments) and the upstream kubelet of the pinned
 * release (`k8s.io/kubernetes/cmd/kubelet` {@link KUBERNETES_VERSION}, built by
 * tests/control_plane_build.ts). Both get the same KubeletConfiguration lines
 * ({@link sharedConfigLines}), the same containerd, the same control plane and a client
 * certificate of their own Node (`system:node:<name>`, from the harness PKI), and each its own
 * root dir, cert dir, pod log dir and cgroupRoot.
 *
 * Deviations from upstream's defaults, and why (the same for both agents where the field exists):
 * - `failCgroupV1: false`: the machine has the v1 hybrid cgroup layout.
 * - `cgroupDriver: cgroupfs` (upstream's default too, written out): no systemd runs here.
 * - `cgroupRoot: /kubelet-ts-e2e/<dir>`: the agents must not share pod cgroups with each other
 *   or with other tests' agents on the machine.
 * - `failSwapOn: false`: no swap is configured, but kubelet-in-a-container setups set it, and it
 *   keeps a host that does have swap from stopping the upstream kubelet.
 * - `localStorageCapacityIsolation: false`: cadvisor's root filesystem view in this container
 *   is not the node's; without it no ephemeral-storage capacity is reported or enforced.
 * - `port`: a free port; `healthzPort: 0` and `readOnlyPort: 0`: no fixed ports that parallel
 *   agents would share.
 * - `authentication.x509.clientCAFile`: the cluster CA, so the apiserver's kubelet client
 *   certificate is accepted (webhook authentication and authorization stay on, as upstream).
 * - `maxPods`: the largest burst when the suite runs more than upstream's default of 110 pods
 *   (250 in the full mode), as operators of denser nodes set it.
 * - `podLogsDir`: a directory of the run; `/var/log/containers` links stay where upstream puts
 *   them and are removed by name at the end.
 * - `protectKernelDefaults` stays false (upstream's default): both kubelets then set
 *   `vm.overcommit_memory=1`, `kernel.panic=10` and `kernel.panic_on_oops=1` on the host when
 *   they start and fail to start if they cannot. This machine is shared, so the harnesses write
 *   the values the suite found back once the kubelet is up and at stop (tests/kernel_tunables.ts).
 * - The upstream kubelet cannot raise its own OOM score (CAP_SYS_RESOURCE is missing here) and
 *   logs that, as our agent does.
 *
 * What the upstream kubelet cannot do on this machine, from its error lines (so it does a little
 * less work than on a real node, which favours it in the CPU figures): cadvisor finds no
 * filesystem for `/dev/vda`, so the eviction manager fails every 10 s before it ranks anything
 * and image GC reports "invalid capacity 0"; it cannot read pods' memory cgroup settings on the
 * v1 hybrid layout ("failed to read memory cgroup config for the pod"); containerd 1.6 has no
 * `RuntimeConfig` RPC. It also writes outside its root dir where upstream hard-codes paths:
 * `/var/lib/kubelet/device-plugins/kubelet.sock` (two upstream kubelets at once would share it)
 * and `/usr/libexec/kubernetes/kubelet-plugins/volume/exec/`.
 */

import { join } from "node:path";
import { ownDenoBinary, REPO_ROOT, type RunningAgent } from "./agent_process.ts";
import { freePort } from "./child_process.ts";
import { residentMiB } from "./_bench_measure.ts";
import { ensureUpstreamKubelet, KUBERNETES_VERSION } from "./control_plane_build.ts";
import type { ControlPlane } from "./control_plane.ts";
import { restoreKernelTunables, saveKernelTunables } from "./kernel_tunables.ts";
import type { V1Node } from "@kubernetes/client-node";
import {
  adminClient,
  ensureDefaultServiceAccount,
  poll,
  startNodeAgent,
  SYNC_LOOP_STARTED,
  writeKubeletConfig,
} from "./node_harness.ts";

/** One kubelet process under test. */
export interface BenchAgent {
  /** "agent" (ours) or "upstream". */
  readonly label: string;
  /** The Node it registers. */
  readonly nodeName: string;
  readonly pid: number;
  /** Spawned → its sync loop started, ms. */
  readonly startMs: number;
  /**
   * From a release file: its first start, which extracted the file and filled Deno's transpile
   * cache (spawned → sync loop; VmHWM then), before the start measured.
   */
  readonly firstStart?: { readonly ms: number; readonly peakMiB: number };
  /** Its `podLogsDir`: `<namespace>_<pod>_<uid>/<container>/<n>.log` for each container. */
  readonly podLogsDir: string;
  /** Its stderr so far (the upstream kubelet's: the last {@link STDERR_KEEP} bytes). */
  stderr(): string;
  /** SIGTERM, SIGKILL after 20 s; resolves to the exit code. Idempotent. */
  stop(): Promise<number>;
}

/** How much of the upstream kubelet's stderr is kept. */
const STDERR_KEEP = 4 * 2 ** 20;

/** Options of {@link startOurAgent} and {@link startUpstreamKubelet}. */
export interface BenchAgentOptions {
  readonly cp: ControlPlane;
  /** The agent's own directory: config, root dir, cert dir, pod logs. */
  readonly dir: string;
  readonly nodeName: string;
  /** containerd's CRI endpoint. */
  readonly endpoint: string;
  readonly signal?: AbortSignal;
  /** `maxPods` of both kubelets: the suite's largest burst when it is over 110. @default 110 */
  readonly maxPods?: number;
  /** Our agent only: its label in the bench's tables. @default "agent" */
  readonly label?: string;
  /**
   * Our agent only: KubeletConfiguration lines after {@link sharedConfigLines}, for a variant
   * of the agent (e.g. `featureGates: {EventedPLEG: false}`). @default []
   */
  readonly configLines?: readonly string[];
  /**
   * Our agent only: the release file (`deno task release`) to run in place of `deno run main.ts`;
   * it extracts itself into {@link releaseExtractDir} of `dir`. @default undefined
   */
  readonly releaseFile?: string;
}

/** Where the release file of {@link BenchAgentOptions.releaseFile} extracts itself. */
export function releaseExtractDir(dir: string): string {
  return join(dir, "extract");
}

/** Where an agent with directory `dir` keeps its pods' logs (`podLogsDir`). */
export function podLogsDir(dir: string): string {
  return join(dir, "pod-logs");
}

/**
 * The cluster DNS both kubelets and the CRI floor give their pods, as kubeadm configures a node
 * (its default service subnet's tenth address). Without it every kubelet sync of a ClusterFirst
 * pod records a MissingClusterDNS event (5.5-6 per pod in a burst), load no real node has. No DNS
 * server answers there; the bench pods resolve nothing.
 */
export const BENCH_CLUSTER_DNS = "10.96.0.10";
/** The cluster domain of {@link BENCH_CLUSTER_DNS}, kubeadm's default. */
export const BENCH_CLUSTER_DOMAIN = "cluster.local";

/**
 * The KubeletConfiguration lines both agents get besides the harness's own; `maxPods` only when
 * it is not upstream's default of 110.
 */
export function sharedConfigLines(dir: string, maxPods = 110): string[] {
  return [
    "cgroupDriver: cgroupfs",
    `clusterDNS: [${BENCH_CLUSTER_DNS}]`,
    `clusterDomain: ${BENCH_CLUSTER_DOMAIN}`,
    "failSwapOn: false",
    "localStorageCapacityIsolation: false",
    "readOnlyPort: 0",
    `podLogsDir: ${podLogsDir(dir)}`,
    ...(maxPods === 110 ? [] : [`maxPods: ${maxPods}`]),
  ];
}

/**
 * Starts this agent (`main.ts`) as node `nodeName`, up to its sync loop and its Node Ready, on a
 * copy of this process's deno binary in `dir` (agent_process.ts {@link ownDenoBinary}), as a node
 * runs it from a binary of its own. Or the release file, whose runtime is a file of its own
 * already: started, stopped once its node is Ready, and started again, so the process measured
 * finds its tree extracted and Deno's transpile cache filled, as after any restart on a node (the
 * agent from the repository finds its cache filled by earlier runs).
 */
export async function startOurAgent(opts: BenchAgentOptions): Promise<BenchAgent> {
  await Deno.mkdir(opts.dir, { recursive: true });
  const run = opts.releaseFile
    ? {
      command: [opts.releaseFile],
      env: { KUBELET_TS_EXTRACT_DIR: releaseExtractDir(opts.dir) },
    }
    : { executable: await ownDenoBinary(opts.dir) };
  const start = async () => {
    const spawned = performance.now();
    const { agent } = await startNodeAgent({
      cp: opts.cp,
      dir: opts.dir,
      nodeName: opts.nodeName,
      endpoint: opts.endpoint,
      configLines: [
        ...sharedConfigLines(opts.dir, opts.maxPods),
        ...(opts.configLines ?? []),
      ],
      ...run,
    });
    const ms = performance.now() - spawned;
    try {
      await waitNodeReady(opts.cp, opts.nodeName, 120_000);
    } catch (e) {
      await stopChild(agent.process);
      throw new Error(
        `${(e as Error).message}\n${opts.label ?? "agent"} stderr (last 40 lines):\n${
          agent.stderr().split("\n").slice(-40).join("\n")
        }`,
        { cause: e },
      );
    }
    return { agent, ms };
  };
  let firstStart: BenchAgent["firstStart"];
  if (opts.releaseFile) {
    const first = await start();
    const { peak } = await residentMiB(first.agent.process.pid);
    const code = await stopChild(first.agent.process);
    if (code !== 0) {
      throw new Error(
        `the release file's first start exited ${code}:\n${
          first.agent.stderr().split("\n").slice(-40).join("\n")
        }`,
      );
    }
    firstStart = { ms: first.ms, peakMiB: peak };
  }
  const { agent, ms } = await start();
  return {
    label: opts.label ?? "agent",
    nodeName: opts.nodeName,
    podLogsDir: podLogsDir(opts.dir),
    pid: agent.process.pid,
    startMs: ms,
    ...(firstStart ? { firstStart } : {}),
    stderr: () => agent.stderr(),
    stop: once(() => stopChild(agent.process)),
  };
}

/** What the upstream kubelet logs once its sync loop runs (the same line as ours). */
const UPSTREAM_STARTED = SYNC_LOOP_STARTED;

/**
 * Builds (or reuses) the upstream kubelet and starts it as node `nodeName` with the same
 * configuration as {@link startOurAgent}, waiting for its sync loop. The host's kernel tunables
 * are restored once it is up; see the module documentation.
 */
export async function startUpstreamKubelet(
  opts: BenchAgentOptions & { log?: (line: string) => void },
): Promise<BenchAgent> {
  const binary = await ensureUpstreamKubelet({ signal: opts.signal, log: opts.log });
  await ensureDefaultServiceAccount(opts.cp);
  const config = join(opts.dir, "kubelet.yaml");
  await Deno.mkdir(opts.dir, { recursive: true });
  await writeKubeletConfig(config, {
    endpoint: opts.endpoint,
    lines: [
      `port: ${freePort()}`,
      "authentication:",
      "  x509:",
      `    clientCAFile: ${opts.cp.pki.ca.cert}`,
      ...sharedConfigLines(opts.dir, opts.maxPods),
    ],
  });
  saveKernelTunables(false);
  const spawned = performance.now();
  const child = new Deno.Command(binary, {
    args: [
      ...["--config", config, "--kubeconfig", opts.cp.nodeKubeconfig(opts.nodeName)],
      ...["--hostname-override", opts.nodeName],
      ...["--root-dir", join(opts.dir, "root"), "--cert-dir", join(opts.dir, "pki")],
    ],
    cwd: REPO_ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let err = "";
  const dec = new TextDecoder();
  const pump = (async () => {
    for await (const chunk of child.stderr) {
      err += dec.decode(chunk, { stream: true });
      if (err.length > STDERR_KEEP * 2) err = err.slice(-STDERR_KEEP);
    }
  })();
  const running: RunningAgent = {
    process: child,
    stderr: () => err,
    async waitFor(text, ms = 60_000) {
      const end = Date.now() + ms;
      const matches = () => typeof text === "string" ? err.includes(text) : text.test(err);
      while (!matches()) {
        if (Date.now() > end) {
          throw new Error(
            `upstream kubelet ${KUBERNETES_VERSION} did not log ${text} within ${ms} ms; ` +
              `stderr tail:\n${err.split("\n").slice(-40).join("\n")}`,
          );
        }
        const done = await Promise.race([
          pump.then(() => true),
          new Promise((r) => setTimeout(() => r(false), 50)),
        ]);
        if (done && !matches()) {
          throw new Error(
            `upstream kubelet ${KUBERNETES_VERSION} exited without logging ${text}; ` +
              `stderr tail:\n${err.split("\n").slice(-40).join("\n")}`,
          );
        }
      }
    },
  };
  const restore = () => {
    const restored = restoreKernelTunables();
    if (restored.length > 0) opts.log?.(`bench: restored sysctls ${restored.join(", ")}`);
  };
  let startMs = NaN;
  try {
    await running.waitFor(UPSTREAM_STARTED, 120_000);
    startMs = performance.now() - spawned;
    // The container manager runs setupKernelTunables before the runtime-dependent modules
    // start; a Ready node has been through it.
    await waitNodeReady(opts.cp, opts.nodeName, 120_000);
  } catch (e) {
    await stopChild(child);
    restore();
    throw e;
  }
  restore();
  return {
    label: "upstream",
    nodeName: opts.nodeName,
    podLogsDir: podLogsDir(opts.dir),
    pid: child.pid,
    startMs,
    stderr: () => err,
    stop: once(async () => {
      const code = await stopChild(child);
      // A process the kubelet started may still hold its stderr open: do not wait for ever.
      await settledWithin(pump.catch(() => {}), 10_000, "the upstream kubelet's stderr");
      restore();
      return code;
    }),
  };
}

/** Waits until Node `name` has condition Ready=True. */
export async function waitNodeReady(cp: ControlPlane, name: string, ms: number): Promise<void> {
  const client = await adminClient(cp, "bench-suite");
  try {
    await poll(
      `node ${name} Ready`,
      async () => {
        const node = await client.get<V1Node>(`/api/v1/nodes/${name}`);
        const ready = node.status?.conditions?.find((c) => c.type === "Ready");
        if (ready?.status === "True") return true;
        // poll reports the last error: the condition's reason and message say why not.
        throw new Error(
          ready ? `Ready=${ready.status} ${ready.reason}: ${ready.message}` : "no Ready condition",
        );
      },
      ms,
      200,
    );
  } finally {
    client.close();
  }
}

async function stopChild(child: Deno.ChildProcess): Promise<number> {
  try {
    child.kill("SIGTERM");
  } catch {
    // already exited
  }
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // already exited
    }
  }, 20_000);
  const status = await child.status;
  clearTimeout(timer);
  return status.code;
}

/**
 * Waits for `p` at most `ms`; past that, says on stderr what did not end and goes on (a bench
 * run once hung after the upstream kubelet's last burst, in its teardown).
 */
export async function settledWithin(p: Promise<unknown>, ms: number, what: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"late">((r) => timer = setTimeout(() => r("late"), ms));
  const r = await Promise.race([p.then(() => "done" as const), late]);
  clearTimeout(timer);
  if (r === "late") console.error(`bench: ${what} did not end within ${ms / 1000} s; going on`);
}

function once<T>(fn: () => Promise<T>): () => Promise<T> {
  let p: Promise<T> | undefined;
  return () => p ??= fn();
}
