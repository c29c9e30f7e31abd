/**
 * @module
 * The plumbing the agent's end-to-end tests and benches share once a control plane and a
 * runtime run: an admin {@link KubeClient}, polling with a bound, reading and waiting for pods,
 * writing the kubelet config file, starting the agent as a node (its "default"
 * ServiceAccount, config and standard flags, up to its sync loop) and registering an e2e
 * suite's tests over one lazily started world with its teardown.
 *
 * It talks to the control plane of tests/control_plane.ts (kubectl and kubeconfigs), starts
 * the agent through tests/agent_process.ts and reads the API with src/client/kube_client.ts.
 * Upstream's counterpart is the node e2e framework (`test/e2e_node/`, `test/e2e/framework/`).
 */

import assert from "node:assert/strict";
import { basename, dirname, join } from "node:path";
import type { V1Node, V1Pod, V1PodList } from "@kubernetes/client-node";
import { FakeClock } from "../src/util/clock.ts";
import { detectCgroupLayout } from "../src/cm/cgroup_layout.ts";
import { CgroupManager } from "../src/cm/cgroup_manager.ts";
import { unmountUnder } from "../src/privilege/host_view.ts";
import { createLogger } from "../src/klog/klog.ts";
import { isStatus, KubeClient } from "../src/client/kube_client.ts";
import { loadKubeconfig } from "../src/client/kubeconfig.ts";
import { type RunningAgent, spawnAgent } from "./agent_process.ts";
import { freePort } from "./child_process.ts";
import { type ControlPlane, dumpLogsOnFailure } from "./control_plane.ts";
import type { Gate } from "./requirements.ts";

/** What the agent logs once it is up: upstream's syncLoop start line. */
export const SYNC_LOOP_STARTED = "Starting kubelet main sync loop";

/** How often {@link waitPod} and {@link waitPodGone} read the pod, in ms. */
export const POD_POLL_MS = 200;

/** A client of the apiserver with the kubeconfig at `kubeconfig`, without rate limits. */
export async function kubeClient(kubeconfig: string, userAgent: string): Promise<KubeClient> {
  return new KubeClient({
    config: await loadKubeconfig(kubeconfig),
    clock: new FakeClock(),
    qps: -1,
    userAgent,
  });
}

/** A client of the control plane as kubernetes-admin (system:masters). */
export function adminClient(cp: ControlPlane, userAgent: string): Promise<KubeClient> {
  return kubeClient(cp.adminKubeconfig, userAgent);
}

/**
 * Calls `fn` every `intervalMs` until it returns a value other than undefined, and returns it;
 * an error thrown by `fn` counts as a miss. After `ms` it throws
 * `timed out after <ms> ms waiting for <what>: <last error>`.
 */
export async function poll<T>(
  what: string,
  fn: () => Promise<T | undefined>,
  ms: number,
  intervalMs = 100,
): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last}` : ""}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Reads pod `ns/name`. */
export function getPod(api: KubeClient, ns: string, name: string): Promise<V1Pod> {
  return api.get<V1Pod>(`/api/v1/namespaces/${ns}/pods/${name}`);
}

/** Lists pods of a namespace, by label selector if given. */
export async function listPods(api: KubeClient, ns: string, selector?: string): Promise<V1Pod[]> {
  const list = await api.request<V1PodList>("GET", `/api/v1/namespaces/${ns}/pods`, {
    query: selector ? { labelSelector: selector } : undefined,
  });
  return list.items;
}

/** Running with its Ready condition True. */
export const podReady = (p: V1Pod): boolean =>
  p.status?.phase === "Running" &&
  (p.status.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");

/** The node's Ready condition is True. */
export const nodeReady = (n: V1Node): boolean =>
  (n.status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");

/** Polls pod `ns/name` until `pred` accepts it (`what` names that in the timeout error). */
export async function waitPod(
  api: KubeClient,
  ns: string,
  name: string,
  what: string,
  pred: (p: V1Pod) => boolean,
  ms = 60_000,
): Promise<V1Pod> {
  return await poll(
    `pod ${name}: ${what}`,
    async () => {
      const p = await getPod(api, ns, name);
      return pred(p) ? p : undefined;
    },
    ms,
    POD_POLL_MS,
  );
}

/**
 * Stops the world's agent with `signal` (SIGKILL: a crash), starts a new one with the same
 * arguments and waits for its sync loop: a kubelet restart as a node sees one.
 */
export async function restartAgent(
  w: { agent: RunningAgent; readonly args: string[] },
  signal: "SIGTERM" | "SIGKILL" = "SIGTERM",
): Promise<void> {
  w.agent.process.kill(signal);
  await w.agent.process.status;
  w.agent = spawnAgent(w.args);
  await w.agent.waitFor(SYNC_LOOP_STARTED, 60_000);
}

/** `kubectl create -f -` of `object`; kubectl's error fails the test. */
export async function createObject(cp: ControlPlane, object: unknown): Promise<void> {
  const r = await cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(object) });
  assert.equal(r.code, 0, r.stderr);
}

/** Deletes pod `ns/name` (kubectl does not wait) and waits until the apiserver has it no more. */
export async function deletePodAndWait(
  cp: ControlPlane,
  api: KubeClient,
  ns: string,
  name: string,
  ms = 90_000,
): Promise<void> {
  const r = await cp.kubectl(["delete", "pod", name, "-n", ns, "--wait=false"]);
  assert.equal(r.code, 0, r.stderr);
  await waitPodGone(api, ns, name, ms);
}

/** Polls pod `ns/name` until the apiserver answers 404 for it. */
export async function waitPodGone(
  api: KubeClient,
  ns: string,
  name: string,
  ms: number,
): Promise<void> {
  await poll(
    `pod ${name} to leave the API`,
    async () => {
      try {
        await getPod(api, ns, name);
        return undefined;
      } catch (e) {
        return isStatus(e, 404) ? true : undefined;
      }
    },
    ms,
    POD_POLL_MS,
  );
}

/** What {@link writeKubeletConfig} writes besides the common header. */
export interface KubeletConfigOptions {
  /** `containerRuntimeEndpoint`, e.g. `unix:///run/containerd/containerd.sock`. */
  readonly endpoint: string;
  /** More KubeletConfiguration lines (YAML), written after the header. @default [] */
  readonly lines?: readonly string[];
}

/**
 * Writes a KubeletConfiguration to `path`: apiVersion and kind, `failCgroupV1: false` (test
 * machines may be on cgroup v1), the runtime endpoint, `healthzPort: 0` (no fixed port that
 * parallel agents would share), then `opts.lines`.
 */
export async function writeKubeletConfig(path: string, opts: KubeletConfigOptions): Promise<void> {
  // Agents of parallel tests share the host's cgroups: each gets its own cgroupRoot, so none
  // takes another's pod cgroups for orphans.
  const cgroupRoot = await ensureTestCgroupRoot(basename(dirname(path)));
  await Deno.writeTextFile(
    path,
    [
      "apiVersion: kubelet.config.k8s.io/v1beta1",
      "kind: KubeletConfiguration",
      "failCgroupV1: false",
      `containerRuntimeEndpoint: ${opts.endpoint}`,
      "healthzPort: 0",
      `cgroupRoot: ${cgroupRoot}`,
      ...(opts.lines ?? []),
      "",
    ].join("\n"),
  );
}

/** Parent of the test agents' cgroup roots. */
export const TEST_CGROUP_PARENT = "kubelet-ts-e2e";

/** Creates `/kubelet-ts-e2e/<name>` in every cgroup hierarchy and returns it. */
export async function ensureTestCgroupRoot(name: string): Promise<string> {
  const safe = name.replace(/[^A-Za-z0-9_.-]/g, "_");
  const cgroups = new CgroupManager({
    layout: await detectCgroupLayout(),
    driver: "cgroupfs",
    logger: createLogger({ write: () => {} }),
  });
  await cgroups.create([TEST_CGROUP_PARENT, safe]);
  return `/${TEST_CGROUP_PARENT}/${safe}`;
}

/**
 * A pod cgroup's CFS quota, shares and memory limit (cgroup v1 files, or cpu.max and memory.max on
 * v2), of the agent whose directory is `agentDir` (its cgroupRoot is {@link ensureTestCgroupRoot}
 * of the directory's name), for a pod of QoS class `qos` ("" for Guaranteed, else "burstable" or
 * "besteffort").
 */
export async function podCgroupLimits(
  agentDir: string,
  uid: string,
  qos: "" | "burstable" | "besteffort" = "",
): Promise<Record<string, string>> {
  const layout = await detectCgroupLayout();
  const safe = basename(agentDir).replace(/[^A-Za-z0-9_.-]/g, "_");
  const pod = join(`/${TEST_CGROUP_PARENT}/${safe}/kubepods`, qos, `pod${uid}`);
  const read = async (dir: string, file: string) =>
    (await Deno.readTextFile(join(dir, pod, file))).trim();
  const cpuDir = layout.v1.get("cpu");
  const memDir = layout.v1.get("memory");
  if (cpuDir === undefined || memDir === undefined) {
    const dir = layout.unified!;
    return { "cpu.max": await read(dir, "cpu.max"), "memory.max": await read(dir, "memory.max") };
  }
  return {
    "cpu.cfs_quota_us": await read(cpuDir, "cpu.cfs_quota_us"),
    "cpu.shares": await read(cpuDir, "cpu.shares"),
    "memory.limit_in_bytes": await read(memDir, "memory.limit_in_bytes"),
  };
}

/** Every cgroup hierarchy's root: the v1 mounts and the cgroup2 one (hybrid hosts have both). */
async function cgroupRoots(): Promise<string[]> {
  const layout = await detectCgroupLayout();
  return [...new Set([...layout.v1.values(), ...(layout.unified ? [layout.unified] : [])])];
}

/** SIGKILLs every process in cgroup `path` and below it, in every hierarchy. */
export async function killCgroupTree(path: string, roots?: readonly string[]): Promise<void> {
  const kill = async (dir: string): Promise<void> => {
    try {
      for (const pid of (await Deno.readTextFile(join(dir, "cgroup.procs"))).split("\n")) {
        if (pid.trim() === "") continue;
        try {
          Deno.kill(Number(pid), "SIGKILL");
        } catch {
          // gone already
        }
      }
      for await (const e of Deno.readDir(dir)) {
        if (e.isDirectory) await kill(join(dir, e.name));
      }
    } catch {
      // no such cgroup in this hierarchy
    }
  };
  for (const root of roots ?? await cgroupRoots()) await kill(join(root, path));
}

/** rmdir of `dir` after everything below it, deepest first; busy or gone is left as it is. */
async function rmdirTree(dir: string): Promise<void> {
  try {
    for await (const e of Deno.readDir(dir)) {
      if (e.isDirectory) await rmdirTree(join(dir, e.name));
    }
    await Deno.remove(dir);
  } catch {
    // gone already, or still busy: nothing more to do here
  }
}

/**
 * Removes cgroup `path` ("kubelet-ts-e2e/<name>") and everything below it in every hierarchy
 * (`roots`, found when not given), deepest first; a directory still busy (processes in it)
 * stays, with its parents.
 */
export async function removeCgroupTree(path: string, roots?: readonly string[]): Promise<void> {
  for (const root of roots ?? await cgroupRoots()) await rmdirTree(join(root, path));
}

/** The newest modification time (ms) of `dir` and the directories below it; 0 when gone. */
function newestMtime(dir: string): number {
  let newest = 0;
  try {
    newest = Deno.statSync(dir).mtime?.getTime() ?? 0;
    for (const e of Deno.readDirSync(dir)) {
      if (e.isDirectory) newest = Math.max(newest, newestMtime(join(dir, e.name)));
    }
  } catch {
    // gone meanwhile
  }
  return newest;
}

/**
 * Removes the cgroup roots that earlier runs' agents left below {@link TEST_CGROUP_PARENT}
 * (a suite's pods outlive its agent, and their cgroups with them): those in which nothing
 * changed for `idleMs`, so a run still going on this machine keeps its own. Returns how many
 * went.
 */
export async function removeStaleTestCgroups(idleMs = 30 * 60_000): Promise<number> {
  const roots = await cgroupRoots();
  // A tree may be left in some hierarchies only: gather the names from all of them.
  const names = new Set<string>();
  for (const root of roots) {
    try {
      for (const e of Deno.readDirSync(join(root, TEST_CGROUP_PARENT))) {
        if (e.isDirectory) names.add(e.name);
      }
    } catch {
      // no test cgroups in this hierarchy
    }
  }
  const newest = (name: string) =>
    Math.max(0, ...roots.map((r) => newestMtime(join(r, TEST_CGROUP_PARENT, name))));
  let removed = 0;
  for (const name of names) {
    if (Date.now() - newest(name) < idleMs) continue;
    await removeCgroupTree(`${TEST_CGROUP_PARENT}/${name}`, roots);
    if (newest(name) === 0) removed++;
  }
  return removed;
}

/** Options of {@link startNodeAgent}. */
export interface NodeAgentOptions {
  readonly cp: ControlPlane;
  /** Holds the agent's files: `kubelet.yaml`, `root/` (--root-dir) and `pki/` (--cert-dir). */
  readonly dir: string;
  /** The Node: its kubeconfig is `cp.nodeKubeconfig(nodeName)`. */
  readonly nodeName: string;
  /** The runtime's CRI endpoint (`containerRuntimeEndpoint`). */
  readonly endpoint: string;
  /** --kubeconfig (which may not exist yet when bootstrapping). @default cp.nodeKubeconfig(nodeName) */
  readonly kubeconfig?: string;
  /**
   * More KubeletConfiguration lines. Without a `podLogsDir:` line the agent gets its own,
   * `<dir>/pod-logs`: e2e suites run in parallel, and a kubelet's container GC removes the log
   * directories of pods it does not know, so agents sharing /var/log/pods remove each other's
   * logs. @default []
   */
  readonly configLines?: readonly string[];
  /** --hostname-override. @default nodeName */
  readonly hostnameOverride?: string;
  /** Flags after the standard ones. @default [] */
  readonly extraArgs?: readonly string[];
  /** The log text to wait for before returning; null returns at once. @default SYNC_LOOP_STARTED */
  readonly waitFor?: string | null;
  /** How long to wait for it, in ms. @default 60000 */
  readonly waitMs?: number;
  /** Environment of the agent, over the test's own. @default {} */
  readonly env?: Record<string, string>;
  /** The deno binary the agent runs on. @default this process's */
  readonly executable?: string;
  /** What runs in place of `deno run main.ts` (agent_process.ts AgentOptions.command). */
  readonly command?: readonly string[];
}

/** An agent started by {@link startNodeAgent}. */
export interface NodeAgent {
  readonly agent: RunningAgent;
  /** The port of its kubelet API (a free one: agents of parallel tests must not share 10250). */
  readonly port: number;
  /** Its command line, to start it again. */
  readonly args: string[];
  /** Path of its config file. */
  readonly config: string;
  /** Its podLogsDir: the one of `configLines`, else `<dir>/pod-logs`. */
  readonly podLogsDir: string;
}

/** kubectl's stderr says the object exists ("AlreadyExists" in JSON, "already exists" in text). */
function alreadyExists(stderr: string): boolean {
  return /AlreadyExists|already exists/.test(stderr);
}

/** Creates ServiceAccount `default` in `ns` (no controller manager runs to do it). */
export async function ensureDefaultServiceAccount(cp: ControlPlane, ns = "default"): Promise<void> {
  const sa = await cp.kubectl(["create", "serviceaccount", "default", "-n", ns]);
  if (sa.code !== 0 && !alreadyExists(sa.stderr)) {
    throw new Error(`cannot create ServiceAccount ${ns}/default: ${sa.stderr}`);
  }
}

/** The ConfigMap upstream's root CA publisher writes into every namespace. */
export const ROOT_CA_CONFIGMAP = "kube-root-ca.crt";

/**
 * Creates ConfigMap `kube-root-ca.crt` in `ns` with key `ca.crt` = the cluster CA's PEM, as
 * kube-controller-manager's root CA publisher would (none runs here). Pods whose service account
 * token is mounted (the `kube-api-access-*` projected volume) need it to start.
 */
export async function ensureRootCAConfigMap(cp: ControlPlane, ns = "default"): Promise<void> {
  const r = await cp.kubectl([
    ...["create", "configmap", ROOT_CA_CONFIGMAP, "-n", ns],
    `--from-file=ca.crt=${cp.pki.ca.cert}`,
  ]);
  if (r.code !== 0 && !alreadyExists(r.stderr)) {
    throw new Error(`cannot create ConfigMap ${ns}/${ROOT_CA_CONFIGMAP}: ${r.stderr}`);
  }
}

/**
 * Starts the agent as node `nodeName` of `cp`: makes sure the "default" ServiceAccount exists,
 * writes `<dir>/kubelet.yaml` ({@link writeKubeletConfig}; the kubelet API on a free port, with
 * the cluster CA as its client CA so the apiserver's kubelet client certificate is accepted),
 * spawns the agent with `--config
 * --kubeconfig --hostname-override --root-dir <dir>/root --cert-dir <dir>/pki` and waits for
 * {@link SYNC_LOOP_STARTED}. An agent that does not get there is killed.
 */
export async function startNodeAgent(opts: NodeAgentOptions): Promise<NodeAgent> {
  const { cp, dir, nodeName } = opts;
  await ensureDefaultServiceAccount(cp);
  const config = join(dir, "kubelet.yaml");
  const port = freePort();
  const lines = opts.configLines ?? [];
  const given = lines.map((l) => /^podLogsDir:\s*(\S+)\s*$/.exec(l)?.[1]).find((v) => v);
  const podLogsDir = given ?? join(dir, "pod-logs");
  await writeKubeletConfig(config, {
    endpoint: opts.endpoint,
    lines: [
      `port: ${port}`,
      "authentication:",
      "  x509:",
      `    clientCAFile: ${cp.pki.ca.cert}`,
      ...(given === undefined ? [`podLogsDir: ${podLogsDir}`] : []),
      ...lines,
    ],
  });
  const args = [
    ...["--config", config, "--kubeconfig", opts.kubeconfig ?? cp.nodeKubeconfig(nodeName)],
    ...["--hostname-override", opts.hostnameOverride ?? nodeName],
    ...["--root-dir", join(dir, "root"), "--cert-dir", join(dir, "pki")],
    ...(opts.extraArgs ?? []),
  ];
  const agent = spawnAgent(args, {
    env: opts.env,
    executable: opts.executable,
    command: opts.command,
  });
  const waitFor = opts.waitFor === undefined ? SYNC_LOOP_STARTED : opts.waitFor;
  if (waitFor !== null) {
    try {
      await agent.waitFor(waitFor, opts.waitMs ?? 60_000);
    } catch (e) {
      agent.process.kill("SIGKILL");
      await agent.process.status;
      throw e;
    }
  }
  return { agent, args, config, port, podLogsDir };
}

/** What an e2e suite's world holds for {@link e2eSuite}. */
export interface AgentWorld {
  /** Removed at teardown. */
  readonly dir: string;
  readonly cp: ControlPlane;
  /** Read at each use, so a test may replace it (restart the agent). */
  readonly agent: RunningAgent;
}

/** Options of {@link e2eSuite}. */
export interface E2eSuiteOptions<W extends AgentWorld> {
  /** Prefix of the test names: "<name>: <test>". */
  readonly name: string;
  readonly gate: Gate;
  /** Builds the world; called once, by the first test that runs. */
  readonly start: () => Promise<W>;
  /** User agent of the admin client each test gets. */
  readonly userAgent: string;
  /** How many of the agent's last stderr lines a failing test prints. @default 60 */
  readonly stderrLines?: number;
}

/** The registration functions of one e2e suite. */
export interface E2eSuite<W extends AgentWorld> {
  /** Registers test "<suite>: <name>", run with the world and an admin client. */
  test(name: string, fn: (w: W, api: KubeClient) => Promise<void>): void;
  /**
   * Registers test "<suite>: <name>" that ends the world, if it was started: SIGTERM to the
   * agent (which must exit 0), then, whether it did or not, `stop` (what the suite started
   * besides the control plane), the control plane and the directory.
   */
  teardown(name: string, stop: (w: W) => Promise<void>): void;
}

/**
 * Tests over one world shared by a file's tests: each runs behind the gate with an admin
 * client, and on failure prints the control plane's log tails and the agent's stderr tail.
 */
export function e2eSuite<W extends AgentWorld>(opts: E2eSuiteOptions<W>): E2eSuite<W> {
  let world: Promise<W> | undefined;
  const common = { ignore: opts.gate.ignore, sanitizeResources: false, sanitizeOps: false };
  const tail = (agent: RunningAgent, lines: number) =>
    agent.stderr().split("\n").slice(-lines).join("\n");
  return {
    test(name, fn) {
      Deno.test({
        ...common,
        name: `${opts.name}: ${name}`,
        async fn() {
          opts.gate.check();
          world ??= opts.start();
          const w = await world;
          const api = await adminClient(w.cp, opts.userAgent);
          try {
            await dumpLogsOnFailure(w.cp, () => fn(w, api));
          } catch (e) {
            console.error(`agent stderr:\n${tail(w.agent, opts.stderrLines ?? 60)}`);
            throw e;
          } finally {
            api.close();
          }
        },
      });
    },
    teardown(name, stop) {
      Deno.test({
        ...common,
        name: `${opts.name}: ${name}`,
        async fn() {
          if (!world) return;
          const w = await world;
          w.agent.process.kill("SIGTERM");
          const st = await w.agent.process.status;
          // The world goes even when the agent did not exit cleanly: a runtime left behind
          // keeps its pods, addresses and mounts.
          try {
            assert.equal(st.code, 0, tail(w.agent, 20));
          } finally {
            await stop(w);
            await w.cp.stop();
            // Pods outlive the agent, as upstream's do, and so do their volumes' mounts (tmpfs,
            // secrets) under its root dir: unmount them, or the directory stays, mounts and all.
            await unmountUnder(w.dir);
            await Deno.remove(w.dir, { recursive: true }).catch(() => {});
          }
        },
      });
    },
  };
}
