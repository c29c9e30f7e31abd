/**
 * @module
 * `deno task conformance`: upstream's own e2e conformance tests (`e2e.test` of
 * k8s.io/kubernetes {@link KUBERNETES_VERSION}, as sonobuoy and CNCF certification run them)
 * against this kubelet on one node, or with `--agent upstream` against the Go kubelet of the
 * same release on the same harness, so that a failure can be told apart from a harness problem.
 *
 * It builds e2e.test, kube-controller-manager, kube-scheduler and the ginkgo CLI from their Go
 * modules (tests/control_plane_build.ts), builds the images the suite names offline under
 * upstream's exact names (tests/conformance_images.ts, which says which are stand-ins), imports
 * them into containerd and pushes those of {@link MIRRORED_REGISTRY} into a local registry
 * (tests/registry_harness.ts, on 127.0.0.1) that serves that host for containerd, so the specs
 * that pull (pullPolicy Always) pull them there and nowhere else. It starts containerd with
 * upstream's `test-handler` runtime handler and that registry mirror, etcd, kube-apiserver, the
 * controller manager (tests/controller_manager.ts: service-account tokens, namespace deletion,
 * CSR signing, the root CA publisher) and the scheduler, then the kubelet, and runs e2e.test
 * through ginkgo in parallel processes. The results go to tests/results/conformance-<date>-<runtime>-<agent>.md (one row
 * per spec that ran: result, seconds, the failure's first line; tests/conformance_report.ts).
 *
 * Options (`deno task conformance --help`): --agent agent|upstream, --focus, --skip, --procs,
 * --out, --keep (leave the work directory for inspection). Runs as root; takes about 20 minutes
 * for the [sig-node] and [sig-storage] focus with 4 processes on 2 CPUs.
 */

import { basename, join } from "node:path";
import { unmountUnder } from "../src/privilege/host_view.ts";
import { parseArgs } from "node:util";
import { type BenchAgent, startOurAgent, startUpstreamKubelet } from "./_bench_agents.ts";
import { REPO_ROOT } from "./agent_process.ts";
import { ensureConformanceImages, parseImageList } from "./conformance_images.ts";
import { isSuiteNode, parseJUnit, renderResults } from "./conformance_report.ts";
import { ensureRuntimePackages, type RuntimeKind, startContainerd } from "./containerd_harness.ts";
import { type Child, startControlPlane } from "./control_plane.ts";
import {
  ensureConformanceBinaries,
  ensureControlPlaneBinaries,
  ensureUpstreamKubelet,
  KUBERNETES_VERSION,
} from "./control_plane_build.ts";
import { startControllerManager, startScheduler } from "./controller_manager.ts";
import { ensureImagePackages, importImages, PAUSE } from "./images.ts";
import { ensureRegistryPackages, type RegistryHandle, startRegistry } from "./registry_harness.ts";
import { HOST_IP, startKubeadmCluster, waitForAddons, waitForPodCIDRs } from "./kubeadm_cluster.ts";
import { ensureKubeadmBinaries } from "./kubeadm_build.ts";
import { ensureKubeadmImages } from "./kubeadm_images.ts";
import { kubeClient } from "./node_harness.ts";

/** The kubelet-facing conformance tests: sig-node's and sig-storage's. */
export const DEFAULT_FOCUS = "\\[sig-(node|storage)\\].*\\[Conformance\\]";
/** What one node cannot run (they reboot, drain or need the whole cluster to themselves). */
export const DEFAULT_SKIP = "\\[Serial\\]|\\[Disruptive\\]";
/** The node the kubelet registers. */
export const NODE_NAME = "conformance-node";
/** The registry host the harness's local registry serves: upstream's, for its test images. */
export const MIRRORED_REGISTRY = "registry.k8s.io";

/** The harness's options, as `--help` lists them. */
export interface ConformanceArgs {
  readonly agent: "agent" | "upstream";
  /**
   * "node": one kubelet beside a control plane the harness starts; "kubeadm": a two-node
   * kubeadm cluster (tests/kubeadm_cluster.ts) whose nodes both run the kubelet under test.
   */
  readonly topology: "node" | "kubeadm";
  /** Debian's containerd 1.6 or containerd 2.x built from its module. */
  readonly runtime: RuntimeKind;
  readonly focus: string;
  readonly skip: string;
  readonly procs: number;
  readonly out?: string;
  readonly keep: boolean;
  readonly help: boolean;
}

export const USAGE = `Usage: deno task conformance [options]

Runs upstream's e2e conformance tests (e2e.test ${KUBERNETES_VERSION}) against one node.

  --agent agent|upstream  the kubelet under test: this one (default) or the Go kubelet
  --topology node|kubeadm one node beside a control plane the harness starts (default), or a
                          two-node kubeadm cluster (kubeadm init and join, kube-proxy, CoreDNS)
                          with the kubelet under test on both nodes
  --runtime containerd|containerd2
                          Debian's containerd 1.6 (default, or $KUBELET_TS_RUNTIME) or
                          containerd 2.x built from its Go module
  --focus REGEX           ginkgo focus (default ${DEFAULT_FOCUS})
  --skip REGEX            ginkgo skip (default ${DEFAULT_SKIP})
  --procs N               parallel e2e.test processes (default 4)
  --out FILE              results file (default tests/results/conformance-<date>-<runtime>-<agent>.md)
  --keep                  keep the work directory (logs, JUnit report) after the run
  --help                  this text
`;

/** A bad command line: the message names the option and value. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Parses the harness's command line. */
export function parseConformanceArgs(args: readonly string[]): ConformanceArgs {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      options: {
        agent: { type: "string", default: "agent" },
        topology: { type: "string", default: "node" },
        runtime: { type: "string" },
        focus: { type: "string", default: DEFAULT_FOCUS },
        skip: { type: "string", default: DEFAULT_SKIP },
        procs: { type: "string", default: "4" },
        out: { type: "string" },
        keep: { type: "boolean", default: false },
        help: { type: "boolean", default: false },
      },
      strict: true,
      allowPositionals: false,
    });
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
  const v = parsed.values;
  if (v.agent !== "agent" && v.agent !== "upstream") {
    throw new UsageError(`--agent must be 'agent' or 'upstream': current value is '${v.agent}'`);
  }
  if (v.topology !== "node" && v.topology !== "kubeadm") {
    throw new UsageError(
      `--topology must be 'node' or 'kubeadm': current value is '${v.topology}'`,
    );
  }
  const runtime = v.runtime ?? Deno.env.get("KUBELET_TS_RUNTIME") ?? "containerd";
  if (runtime !== "containerd" && runtime !== "containerd2") {
    throw new UsageError(
      `--runtime must be 'containerd' or 'containerd2': current value is '${runtime}'`,
    );
  }
  const procs = Number(v.procs);
  if (!Number.isInteger(procs) || procs < 1 || procs > 32) {
    throw new UsageError(
      `--procs must be a whole number from 1 to 32: current value is '${v.procs}'`,
    );
  }
  for (const [name, re] of [["--focus", v.focus], ["--skip", v.skip]] as const) {
    try {
      new RegExp(re);
    } catch {
      throw new UsageError(`${name} must be a regular expression: current value is '${re}'`);
    }
  }
  return {
    agent: v.agent,
    topology: v.topology,
    runtime,
    focus: v.focus,
    skip: v.skip,
    procs,
    out: v.out,
    keep: v.keep,
    help: v.help,
  };
}

async function output(program: string, args: string[], signal?: AbortSignal): Promise<string> {
  const out = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped", signal })
    .output();
  const dec = new TextDecoder();
  if (!out.success) {
    throw new Error(`${program} ${args.join(" ")} exited ${out.code}: ${dec.decode(out.stderr)}`);
  }
  return dec.decode(out.stdout);
}

/** Runs the conformance focus once; resolves to the results file's path. */
export async function runConformance(
  opts: ConformanceArgs,
  signal?: AbortSignal,
): Promise<{ file: string; passed: number; failed: number }> {
  const log = (line: string) => console.error(line);
  const started = new Date();
  // The commit the agent starts from (a commit made while the run lasts is not in it).
  const commit = (await output("git", ["-C", REPO_ROOT, "rev-parse", "--short", "HEAD"])).trim();
  await ensureRuntimePackages();
  await ensureImagePackages();
  await ensureRegistryPackages();
  const cpBins = await ensureControlPlaneBinaries({ signal, log });
  const bins = await ensureConformanceBinaries({ signal, log });
  const dir = await Deno.makeTempDir({ prefix: "kubelet-ts-conformance-" });
  log(`conformance: work directory ${dir}`);
  const stops: (() => Promise<unknown>)[] = [];
  try {
    const names = parseImageList(await output(bins.e2eTest, ["--list-images"], signal));
    const env: TopologyEnv = { opts, dir, names, cpBins, bins, stops, signal, log };
    const cluster = opts.topology === "kubeadm"
      ? await startKubeadmTopology(env)
      : await startNodeTopology(env);
    const { runtime, images } = cluster;
    const pushed = images.images.filter((i) => i.pushed).length;
    log(`conformance: ${opts.agent} on ${cluster.nodes}; running e2e.test`);

    const reportDir = join(dir, "report");
    await Deno.mkdir(reportDir, { recursive: true });
    const ginkgoArgs = [
      `--procs=${opts.procs}`,
      `--focus=${opts.focus}`,
      `--skip=${opts.skip}`,
      "--timeout=3h",
      "--no-color",
      "--silence-skips",
      "--junit-report=junit.xml",
      `--output-dir=${reportDir}`,
      bins.e2eTest,
      "--",
      `--kubeconfig=${cluster.kubeconfig}`,
      "--provider=skeleton",
      `--report-dir=${reportDir}`,
      "--dump-logs-on-failure=false",
    ];
    const run = await new Deno.Command(bins.ginkgo, {
      args: ginkgoArgs,
      cwd: dir,
      stdin: "null",
      stdout: "inherit",
      stderr: "inherit",
      signal,
    }).output();
    log(`conformance: ginkgo exited ${run.code}`);
    const specs = parseJUnit(await Deno.readTextFile(join(reportDir, "junit.xml")));
    const day = started.toISOString().slice(0, 10);
    const file = opts.out ??
      join(
        REPO_ROOT,
        "tests",
        "results",
        // Debian's "1.6.20~ds1" names the file as 1.6.20.
        `conformance-${day}-${opts.topology === "kubeadm" ? "kubeadm-" : ""}containerd-` +
          `${runtime.replace(/~.*$/, "")}-${opts.agent}.md`,
      );
    const text = renderResults({
      agent: opts.agent === "upstream" ? `the Go kubelet ${KUBERNETES_VERSION}` : "kubelet-ts",
      runtime: `containerd ${runtime}`,
      focus: opts.focus,
      skip: opts.skip,
      started: started.toISOString(),
      wallSeconds: (Date.now() - started.getTime()) / 1000,
      commit,
      images: new Map(
        images.images.map((i) => [
          i.name,
          [i.status, i.source, i.reason].filter((x) => x).join(": "),
        ]),
      ),
      command: `deno task conformance --agent ${opts.agent} --topology ${opts.topology} ` +
        `--runtime ${opts.runtime} --procs ${opts.procs}`,
      topology: cluster.topology,
      registry: `${MIRRORED_REGISTRY} is a local registry (Debian's docker-registry on ` +
        `${cluster.registryHost}, tests/registry_harness.ts) holding the ${pushed} images above ` +
        `that were made under it; containerd pulls that host from there alone`,
    }, specs);
    await Deno.writeTextFile(file, text);
    const ran = specs.filter((s) => s.state !== "skipped" && !isSuiteNode(s));
    const passed = ran.filter((s) => s.state === "passed").length;
    return { file, passed, failed: ran.length - passed };
  } finally {
    for (const stop of stops.reverse()) {
      await stop().catch((e) => log(`conformance: stopping: ${e}`));
    }
    // What the kubelets left mounted (projected volumes, the Go kubelet's root) goes first, or
    // the directory cannot be removed; a kept one keeps its logs but not its mounts.
    await unmountUnder(dir);
    if (opts.keep) log(`conformance: kept ${dir}`);
    else {
      await Deno.remove(dir, { recursive: true }).catch((e) =>
        log(`conformance: could not remove ${dir}: ${e}`)
      );
    }
  }
}

/** What both topologies are made from. */
interface TopologyEnv {
  readonly opts: ConformanceArgs;
  readonly dir: string;
  /** The images e2e.test names (`--list-images`). */
  readonly names: readonly string[];
  readonly cpBins: Awaited<ReturnType<typeof ensureControlPlaneBinaries>>;
  readonly bins: Awaited<ReturnType<typeof ensureConformanceBinaries>>;
  /** Where each started part's stop goes, run in reverse at the end. */
  readonly stops: (() => Promise<unknown>)[];
  readonly signal?: AbortSignal;
  readonly log: (line: string) => void;
}

/** A cluster e2e.test runs against. */
interface Topology {
  readonly kubeconfig: string;
  /** containerd's version, e.g. "1.6.20~ds1". */
  readonly runtime: string;
  readonly images: Awaited<ReturnType<typeof ensureConformanceImages>>;
  /** The local registry's `host:port`. */
  readonly registryHost: string;
  /** The nodes, for the log. */
  readonly nodes: string;
  /** What the results file says of the cluster. */
  readonly topology: string;
}

/** One kubelet beside etcd, kube-apiserver, the controller manager and the scheduler. */
async function startNodeTopology(env: TopologyEnv): Promise<Topology> {
  const { opts, dir, names, cpBins, bins, stops, signal, log } = env;
  const registry = await startRegistry({ dir: join(dir, "registry"), signal });
  stops.push(() => registry.stop());
  const containerd = await startContainerd({
    dir: join(dir, "containerd"),
    runtimeHandlers: ["test-handler"],
    runtime: opts.runtime,
    registryMirrors: { [MIRRORED_REGISTRY]: registry.url },
    signal,
  });
  stops.push(() => containerd.stop());
  await importImages({ containerdSocket: containerd.socket, images: [PAUSE], signal });
  const images = await ensureConformanceImages({
    names,
    ctr: { address: containerd.socket },
    mirror: { host: MIRRORED_REGISTRY, registry: registry.host },
    signal,
    log,
  });

  const cp = await startControlPlane({
    dir: join(dir, "control-plane"),
    nodeNames: [NODE_NAME],
    binaries: cpBins,
    signal,
    log,
  });
  stops.push(() => cp.stop());
  const kcm = await startControllerManager({ cp, dir, binary: bins.kubeControllerManager });
  stops.push(() => kcm.stop());
  const scheduler = await startScheduler({ cp, dir, binary: bins.kubeScheduler });
  stops.push(() => scheduler.stop());
  await assertRunning([["kube-controller-manager", kcm], ["kube-scheduler", scheduler]], dir);

  const agentOpts = {
    cp,
    // The agent's cgroupRoot is named after this directory: unique, so that two runs on one
    // machine never take each other's pod cgroups for orphans.
    dir: join(dir, `node-${basename(dir).split("-").at(-1)}`),
    nodeName: NODE_NAME,
    endpoint: containerd.endpoint,
    signal,
  };
  const agent: BenchAgent = opts.agent === "upstream"
    ? await startUpstreamKubelet({ ...agentOpts, log })
    : await startOurAgent(agentOpts);
  stops.push(async () => {
    await agent.stop();
    await Deno.writeTextFile(join(dir, "kubelet.log"), agent.stderr());
  });
  return {
    kubeconfig: cp.adminKubeconfig,
    runtime: containerd.version.split(/\s+/)[2]?.replace(/^v/, "") ?? "?",
    images,
    registryHost: registry.host,
    nodes: NODE_NAME,
    topology: `one node (${NODE_NAME}) beside etcd, kube-apiserver, kube-controller-manager ` +
      "and kube-scheduler started by the harness",
  };
}

/** The nodes of the kubeadm topology: the control plane and one worker. */
export const KUBEADM_NODES = ["kts-cp", "kts-w1"] as const;

/**
 * `kubeadm init` and `kubeadm join` on two nodes of this machine with the kubelet under test on
 * both; the control-plane taint is removed, so e2e.test has two schedulable nodes.
 */
async function startKubeadmTopology(env: TopologyEnv): Promise<Topology> {
  const { opts, dir, names, stops, signal, log } = env;
  const { kubeadm } = await ensureKubeadmBinaries({ signal, log });
  const upstreamKubelet = opts.agent === "upstream"
    ? await ensureUpstreamKubelet({ signal, log })
    : undefined;
  let registry: RegistryHandle | undefined;
  let images: Topology["images"] | undefined;
  const cluster = await startKubeadmCluster({
    dir: join(dir, "kubeadm"),
    nodes: KUBEADM_NODES,
    kubeadm,
    kubelet: opts.agent === "upstream" ? "upstream" : "ours",
    upstreamKubelet,
    runtime: opts.runtime,
    async onHostNetwork() {
      // The nodes pull from the host's end of their bridge.
      registry = await startRegistry({ dir: join(dir, "registry"), address: HOST_IP, signal });
      stops.push(() => registry!.stop());
    },
    containerd: () => ({
      runtimeHandlers: ["test-handler"],
      registryMirrors: { [MIRRORED_REGISTRY]: registry!.url },
    }),
    async importImages(socket, sig) {
      await ensureKubeadmImages({ containerdSocket: socket, signal: sig, log });
      images = await ensureConformanceImages({
        names,
        ctr: { address: socket },
        mirror: { host: MIRRORED_REGISTRY, registry: registry!.host },
        signal: sig,
        log,
      });
    },
    signal,
    log,
  });
  stops.push(async () => {
    for (const node of cluster.nodes) {
      await Deno.writeTextFile(join(dir, `kubelet-${node.name}.log`), node.kubeletLog());
    }
    await cluster.stop();
  });
  const api = await kubeClient(cluster.adminKubeconfig, "conformance-harness");
  try {
    await waitForPodCIDRs(cluster, api);
    await waitForAddons(cluster, api);
    const cp = cluster.nodes[0]!.name;
    await api.patch(`/api/v1/nodes/${cp}`, {
      spec: { taints: null },
    }, "strategic");
  } finally {
    api.close();
  }
  const runtime = cluster.nodes[0]!.containerd.version.split(/\s+/)[2]?.replace(/^v/, "") ?? "?";
  return {
    kubeconfig: cluster.adminKubeconfig,
    runtime,
    images: images!,
    registryHost: registry!.host,
    nodes: cluster.nodes.map((n) => n.name).join(" and "),
    topology: `kubeadm ${KUBERNETES_VERSION}: \`kubeadm init\` on ${KUBEADM_NODES[0]} (etcd, ` +
      `kube-apiserver, kube-controller-manager and kube-scheduler as static pods), ` +
      `\`kubeadm join\` on ${KUBEADM_NODES[1]}, kube-proxy (iptables) and CoreDNS through the ` +
      "API, each node in network, mount and UTS namespaces of its own with its own containerd " +
      "(tests/kubeadm_cluster.ts); the control-plane taint removed",
  };
}

/** Fails naming the program and its log when one exited within its first seconds. */
async function assertRunning(children: [string, Child][], dir: string): Promise<void> {
  await new Promise((r) => setTimeout(r, 3000));
  for (const [name, child] of children) {
    if (child.exited) {
      throw new Error(`${name} exited at start: see ${join(dir, `${name}.log`)}`);
    }
  }
}

if (import.meta.main) {
  let args: ConformanceArgs;
  try {
    args = parseConformanceArgs(Deno.args);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(`conformance: ${e.message}\n\n${USAGE}`);
    Deno.exit(2);
  }
  if (args.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const ctl = new AbortController();
  Deno.addSignalListener("SIGINT", () => ctl.abort(new Error("interrupted")));
  const r = await runConformance(args, ctl.signal);
  console.log(`conformance: ${r.passed} passed, ${r.failed} failed; results in ${r.file}`);
  Deno.exit(r.failed === 0 ? 0 : 1);
}
