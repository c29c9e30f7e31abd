/**
 * @module
 * A kubeadm cluster on this machine with a kubelet of our choice on every node (issue 44): the
 * way operators build clusters. Each node is a set of namespaces of its own (network, mount, UTS)
 * with its own containerd; `kubeadm init` on the first makes it the control plane (our kubelet
 * runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler as static pods from the
 * manifests kubeadm writes), kube-proxy and CoreDNS follow through the API, and every other node
 * joins with `kubeadm join` and a bootstrap token (TLS bootstrap, CSR approved by the
 * controller-manager).
 *
 * The node, as kubeadm and the kubelet see it:
 * - network: namespace `ktska-<node>`, `eth0` with the node's address on {@link NODE_SUBNET},
 *   plugged into the host bridge {@link HOST_BRIDGE} (the host is {@link HOST_IP}, so the tests
 *   reach every node's apiserver and kubelet); routes to the other nodes' pod CIDRs through
 *   their addresses, added once the controller-manager gave each node its CIDR;
 * - mounts: a mount namespace of its own in which `/etc/kubernetes`, `/var/lib/kubelet`,
 *   `/var/lib/etcd`, `/var/log/pods`, `/var/log/containers` and `/run/kubelet-ts` are the node's
 *   directories (kubeadm and the kubelet use those fixed paths); everything else is the host's;
 * - hostname: a UTS namespace whose hostname is the node's name, as kubeadm takes it;
 * - containerd: the harness's (tests/containerd_harness.ts) in those namespaces, with an empty
 *   CNI directory and a `conf_template` (bridge `cni0`, host-local addresses from
 *   `{{.PodCIDR}}`): it writes the pod network once the kubelet sends the node's pod CIDR with
 *   CRI UpdateRuntimeConfig, the way a node without a network add-on gets its network;
 * - kubelet: started as kubeadm's systemd drop-in starts it (deploy/systemd/10-kubeadm.conf:
 *   `--bootstrap-kubeconfig`, `--kubeconfig`, `--config` and `$KUBELET_KUBEADM_ARGS` from
 *   `/var/lib/kubelet/kubeadm-flags.env`), once kubeadm says "[kubelet-start] Starting the
 *   kubelet" (PID 1 here is not systemd, so kubeadm's own start attempt only warns); cgroup
 *   driver cgroupfs, under a cgroup root of the node's own (a kubeadm patch), as two kubelets on
 *   one machine must not share `/kubepods`.
 *
 * kube-proxy's KubeProxyConfiguration sets `conntrack.maxPerCore: 0` (kind does the same): in a
 * network namespace other than the host's, nf_conntrack_max cannot be written. Preflight errors
 * are ignored (`all`): a node sharing a machine fails several (swap, ports in use on the host,
 * the systemd service check).
 */

import { REPO_ROOT, type RunningAgent, spawnAgent } from "./agent_process.ts";
import {
  type ContainerdHandle,
  type ContainerdOptions,
  type NodeNamespaces,
  nsenterPrefix,
  type RuntimeKind,
  startContainerd,
} from "./containerd_harness.ts";
import type { V1Node } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import {
  ensureTestCgroupRoot,
  killCgroupTree,
  listPods,
  nodeReady,
  podReady,
  poll,
  removeCgroupTree,
} from "./node_harness.ts";
import { KUBERNETES_VERSION } from "./control_plane_build.ts";
import { lastLines } from "./apt.ts";
import { exists, logTail, must, run, signalChild } from "./child_process.ts";
import { KUBEADM_PAUSE_IMAGE } from "./kubeadm_images.ts";

/** The host bridge every node is plugged into. */
export const HOST_BRIDGE = "ktska0";
/** The host's address on {@link HOST_BRIDGE}. */
export const HOST_IP = "10.201.0.1";
/** The nodes' network: node i (from 0) is 10.201.0.(11 + i). */
export const NODE_SUBNET = "10.201.0.0/24";
/** kubeadm's `networking.podSubnet`: the controller-manager cuts a /24 per node from it. */
export const POD_SUBNET = "10.244.0.0/16";
/** kubeadm's default service subnet. */
export const SERVICE_SUBNET = "10.96.0.0/12";
/** The bootstrap token the cluster is made with and nodes join with. */
export const BOOTSTRAP_TOKEN = "ktsabc.0123456789abcdef";
/** Held while a cluster exists: one at a time on a machine (fixed bridge and names). */
const LOCK_FILE = "/run/ktska.lock";

/** Directories bind-mounted over the host's inside a node: host path → name under the node dir. */
const NODE_PATHS: readonly (readonly [string, string])[] = [
  ["/etc/kubernetes", "etc-kubernetes"],
  ["/var/lib/kubelet", "var-lib-kubelet"],
  ["/var/lib/etcd", "var-lib-etcd"],
  ["/var/log/pods", "var-log-pods"],
  ["/var/log/containers", "var-log-containers"],
  // The agent's runtime directory (its sandbox's host views): one per node, as two kubelets
  // never share a machine elsewhere, and one removing its view would detach the other's.
  ["/run/kubelet-ts", "run-kubelet-ts"],
];

/** Which kubelet a node runs. */
export type KubeletKind = "ours" | "upstream";

/** Options of {@link startKubeadmCluster}. */
export interface KubeadmClusterOptions {
  /** Holds each node's directories and the logs; removed by the caller. */
  readonly dir: string;
  /** Node names; the first is the control plane. At most 9. */
  readonly nodes: readonly string[];
  /** The kubeadm program (tests/kubeadm_build.ts). */
  readonly kubeadm: string;
  /** The Go kubelet, when `kubelet` is "upstream". */
  readonly upstreamKubelet?: string;
  /** Which kubelet every node runs. @default "ours" */
  readonly kubelet?: KubeletKind;
  /** @default $KUBELET_TS_RUNTIME, else Debian's containerd 1.6 */
  readonly runtime?: RuntimeKind;
  /**
   * Imports images into a node's containerd before kubeadm runs (the control plane's images,
   * tests/kubeadm_images.ts, and whatever the tests run).
   */
  readonly importImages: (socket: string, signal?: AbortSignal) => Promise<void>;
  /**
   * Called once the host bridge is up and before any node is made: what needs {@link HOST_IP}
   * (a registry the nodes pull from). @default nothing
   */
  readonly onHostNetwork?: () => Promise<void>;
  /**
   * More settings of every node's containerd, read as each node is made (after
   * {@link KubeadmClusterOptions.onHostNetwork}). @default none
   */
  readonly containerd?: () => Pick<ContainerdOptions, "registryMirrors" | "runtimeHandlers">;
  readonly signal?: AbortSignal;
  /** Progress lines. @default console.error */
  readonly log?: (line: string) => void;
}

/** One node of the cluster. */
export interface KubeadmNode {
  readonly name: string;
  readonly ip: string;
  /** The node's directory: its bind-mounted paths, containerd and logs. */
  readonly dir: string;
  readonly namespaces: Required<NodeNamespaces>;
  readonly containerd: ContainerdHandle;
  /** The node's cgroup root (kubelet `cgroupRoot`). */
  readonly cgroupRoot: string;
  /** Where the node's `/etc/kubernetes` is on the host. */
  readonly etcKubernetes: string;
  /** Where the node's `/var/lib/kubelet` is on the host. */
  readonly varLibKubelet: string;
  /** The kubelet's log (its stderr), written when it stops and by {@link KubeadmNode.kubeletLog}. */
  readonly kubeletLogFile: string;
  /** Runs a program in the node's namespaces and returns its output; throws on failure. */
  exec(args: readonly string[], opts?: { signal?: AbortSignal; allowFail?: boolean }): Promise<
    { code: number; stdout: string; stderr: string }
  >;
  /** Starts the kubelet as kubeadm's drop-in would (throws when it already runs). */
  startKubelet(): Promise<void>;
  /** Stops the kubelet (SIGTERM, then SIGKILL after 30 s) and keeps its log. */
  stopKubelet(): Promise<void>;
  /** The kubelet's stderr so far (every start of this node). */
  kubeletLog(): string;
  /** The pid of the running kubelet, if any. */
  kubeletPid(): number | undefined;
}

/** A running cluster. */
export interface KubeadmCluster extends AsyncDisposable {
  readonly nodes: readonly KubeadmNode[];
  /** The admin kubeconfig on the host (`/etc/kubernetes/admin.conf` of the first node). */
  readonly adminKubeconfig: string;
  /** `kubeadm init`'s output. */
  readonly initOutput: string;
  /** `kubeadm join`'s output per joined node. */
  readonly joinOutputs: ReadonlyMap<string, string>;
  /** Adds the routes between nodes' pod CIDRs (call once every node has one). */
  routePodCIDRs(podCIDRs: ReadonlyMap<string, string>): Promise<void>;
  /** Stops every kubelet and containerd and removes namespaces, bridge and cgroups. */
  stop(): Promise<void>;
}

/** The cluster could not be made. */
export class KubeadmClusterError extends Error {
  override name = "KubeadmClusterError";
}

const dec = new TextDecoder();

/** The value of `KUBELET_KUBEADM_ARGS` in a kubeadm-flags.env, split as systemd splits `$VAR`. */
export function kubeadmFlags(envFile: string): string[] {
  const m = /^KUBELET_KUBEADM_ARGS=(.*)$/m.exec(envFile);
  if (!m) return [];
  let value = m[1]!.trim();
  // kubeadm writes the value with Go's %q: a double-quoted string with backslash escapes.
  if (value.startsWith('"')) value = JSON.parse(value) as string;
  return value.split(/\s+/).filter((w) => w !== "");
}

/** The kubelet's command line as kubeadm's drop-in gives it, flags file included. */
export function dropInArgs(kubeadmFlagsEnv: string): string[] {
  return [
    "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
    "--kubeconfig=/etc/kubernetes/kubelet.conf",
    "--config=/var/lib/kubelet/config.yaml",
    ...kubeadmFlags(kubeadmFlagsEnv),
  ];
}

/** The CNI config template containerd renders with the node's pod CIDR. */
export function cniTemplate(node: string): string {
  return JSON.stringify(
    {
      cniVersion: "1.0.0",
      name: `ktska-${node}`,
      plugins: [
        {
          type: "bridge",
          bridge: "cni0",
          isGateway: true,
          // No masquerade: pod-to-pod traffic between nodes keeps its pod addresses.
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: "host-local",
            ranges: [[{ subnet: "{{.PodCIDR}}" }]],
            routes: [{ dst: "0.0.0.0/0" }],
          },
        },
        { type: "portmap", capabilities: { portMappings: true } },
        { type: "loopback" },
      ],
    },
    null,
    2,
  ) + "\n";
}

/** kubeadm's configuration for `init`: one document each for kubeadm, kubelet and kube-proxy. */
export function initConfig(args: {
  node: string;
  ip: string;
  criSocket: string;
  patches: string;
}): string {
  return `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: ${BOOTSTRAP_TOKEN}
  ttl: 2h0m0s
  groups: [system:bootstrappers:kubeadm:default-node-token]
  usages: [signing, authentication]
localAPIEndpoint:
  advertiseAddress: ${args.ip}
  bindPort: 6443
${nodeRegistration(args)}patches:
  directory: ${args.patches}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: ${KUBERNETES_VERSION}
clusterName: kubelet-ts
controlPlaneEndpoint: ${args.ip}:6443
networking:
  podSubnet: ${POD_SUBNET}
  serviceSubnet: ${SERVICE_SUBNET}
  dnsDomain: cluster.local
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
# This machine runs cgroup v1, which the kubelet refuses by default since 1.35.
failCgroupV1: false
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
conntrack:
  maxPerCore: 0
`;
}

/** kubeadm's configuration for `join` with the token and the CA hash `init` printed. */
export function joinConfig(args: {
  node: string;
  ip: string;
  criSocket: string;
  patches: string;
  apiServer: string;
  caCertHash: string;
}): string {
  return `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: ${args.apiServer}
    token: ${BOOTSTRAP_TOKEN}
    caCertHashes: [${args.caCertHash}]
${nodeRegistration(args)}patches:
  directory: ${args.patches}
`;
}

function nodeRegistration(args: { node: string; ip: string; criSocket: string }): string {
  return `nodeRegistration:
  name: ${args.node}
  criSocket: ${args.criSocket}
  imagePullPolicy: Never
  ignorePreflightErrors: [all]
  kubeletExtraArgs:
  - name: node-ip
    value: ${args.ip}
`;
}

/** The `--discovery-token-ca-cert-hash` of kubeadm init's printed join command. */
export function caCertHash(initOutput: string): string {
  const m = /--discovery-token-ca-cert-hash\s+(sha256:[0-9a-f]{64})/.exec(initOutput);
  if (!m) {
    throw new KubeadmClusterError(
      `kubeadm init printed no join command with a CA hash:\n${lastLines(initOutput, 20)}`,
    );
  }
  return m[1]!;
}

/** Makes the cluster: host bridge, nodes, `kubeadm init` on the first, `kubeadm join` on the rest. */
export async function startKubeadmCluster(opts: KubeadmClusterOptions): Promise<KubeadmCluster> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const signal = opts.signal;
  if (opts.nodes.length === 0 || opts.nodes.length > 9) {
    throw new KubeadmClusterError(`nodes must name 1 to 9 nodes: ${opts.nodes.join(",")}`);
  }
  const undo: (() => Promise<unknown>)[] = [];
  const nodes: NodeImpl[] = [];
  // Another cluster (a test and a conformance run) would share the bridge and the namespaces'
  // names: wait for it to end.
  const lock = await Deno.open(LOCK_FILE, { create: true, write: true });
  if (!(await lock.tryLock(true))) {
    log(`kubeadm-cluster: waiting for another kubeadm cluster on this machine (${LOCK_FILE})`);
    await lock.lock(true);
  }
  undo.push(() => Promise.resolve(lock.close()));
  const joinOutputs = new Map<string, string>();
  let initOutput = "";
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= (async () => {
      for (const n of nodes) await n.stopKubelet().catch(() => {});
      for (const step of undo.reverse()) {
        await step().catch((e) => log(`kubeadm-cluster: clean-up step failed: ${e}`));
      }
    })();
    return stopped;
  };
  try {
    await Deno.mkdir(`${opts.dir}/ns`, { recursive: true });
    // The namespace files must be on a mount of private propagation to be bind-mounted.
    await must(["mount", "--bind", `${opts.dir}/ns`, `${opts.dir}/ns`]);
    undo.push(() => run(["umount", "-l", `${opts.dir}/ns`]));
    await must(["mount", "--make-private", `${opts.dir}/ns`]);

    await run(["ip", "link", "delete", HOST_BRIDGE]); // left by an earlier run
    await must(["ip", "link", "add", HOST_BRIDGE, "type", "bridge"]);
    undo.push(() => run(["ip", "link", "delete", HOST_BRIDGE]));
    await must(["ip", "addr", "add", `${HOST_IP}/24`, "dev", HOST_BRIDGE]);
    await must(["ip", "link", "set", HOST_BRIDGE, "up"]);
    await opts.onHostNetwork?.();

    for (const [i, name] of opts.nodes.entries()) {
      signal?.throwIfAborted();
      const node = await makeNode({ ...opts, name, ip: `10.201.0.${11 + i}`, log, undo });
      nodes.push(node);
    }

    const [first, ...rest] = nodes;
    log(`kubeadm-cluster: kubeadm init on ${first!.name}`);
    initOutput = await first!.kubeadm(
      "init",
      initConfig({
        node: first!.name,
        ip: first!.ip,
        criSocket: first!.containerd.endpoint,
        patches: first!.patchesDir,
      }),
      signal,
    );
    const hash = caCertHash(initOutput);
    for (const node of rest) {
      log(`kubeadm-cluster: kubeadm join on ${node.name}`);
      joinOutputs.set(
        node.name,
        await node.kubeadm(
          "join",
          joinConfig({
            node: node.name,
            ip: node.ip,
            criSocket: node.containerd.endpoint,
            patches: node.patchesDir,
            apiServer: `${first!.ip}:6443`,
            caCertHash: hash,
          }),
          signal,
        ),
      );
    }
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    nodes,
    adminKubeconfig: `${nodes[0]!.etcKubernetes}/admin.conf`,
    initOutput,
    joinOutputs,
    async routePodCIDRs(podCIDRs) {
      for (const node of nodes) {
        for (const other of nodes) {
          const cidr = podCIDRs.get(other.name);
          if (other === node || !cidr) continue;
          await node.exec(["ip", "route", "replace", cidr, "via", other.ip]);
        }
      }
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

interface NodeImpl extends KubeadmNode {
  readonly patchesDir: string;
  /** Runs `kubeadm <verb> --config`, starting the kubelet when kubeadm says so; its output. */
  kubeadm(verb: "init" | "join", config: string, signal?: AbortSignal): Promise<string>;
}

async function makeNode(
  args: KubeadmClusterOptions & {
    name: string;
    ip: string;
    log: (line: string) => void;
    undo: (() => Promise<unknown>)[];
  },
): Promise<NodeImpl> {
  const { name, ip, undo, signal, log } = args;
  const dir = `${args.dir}/${name}`;
  await Deno.mkdir(dir, { recursive: true });

  // Network: namespace, veth to the host bridge, address and default route.
  const netnsName = `ktska-${name}`;
  const netns = `/run/netns/${netnsName}`;
  await run(["ip", "netns", "delete", netnsName]);
  await must(["ip", "netns", "add", netnsName]);
  undo.push(async () => {
    // Whatever still runs in the node (shims, containers) goes with it.
    const pids = (await run(["ip", "netns", "pids", netnsName])).stdout.split("\n").filter((p) =>
      p !== ""
    );
    for (const pid of pids) await run(["kill", "-9", pid]);
    await run(["ip", "netns", "delete", netnsName]);
  });
  const hostIf = `ktska-${name}`.slice(0, 15);
  await run(["ip", "link", "delete", hostIf]);
  await must([
    "ip",
    "link",
    "add",
    hostIf,
    "type",
    "veth",
    "peer",
    "name",
    "eth0",
    "netns",
    netnsName,
  ]);
  await must(["ip", "link", "set", hostIf, "master", HOST_BRIDGE, "up"]);
  const inNet = (cmd: string[]) => must(["nsenter", `--net=${netns}`, "--", ...cmd]);
  await inNet(["ip", "addr", "add", `${ip}/24`, "dev", "eth0"]);
  await inNet(["ip", "link", "set", "eth0", "up"]);
  await inNet(["ip", "link", "set", "lo", "up"]);
  await inNet(["ip", "route", "add", "default", "via", HOST_IP]);
  await inNet(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);

  // Mounts and hostname: namespaces kept by bind mounts of their files.
  const mountNs = `${args.dir}/ns/${name}.mnt`;
  const utsNs = `${args.dir}/ns/${name}.uts`;
  await Deno.writeTextFile(mountNs, "");
  await Deno.writeTextFile(utsNs, "");
  await must([
    "unshare",
    `--mount=${mountNs}`,
    `--uts=${utsNs}`,
    "--propagation",
    "private",
    "true",
  ]);
  undo.push(() => run(["umount", "-l", mountNs]));
  undo.push(() => run(["umount", "-l", utsNs]));
  const namespaces = { net: netns, mount: mountNs, uts: utsNs };
  const prefix = nsenterPrefix(namespaces);
  const script = [`hostname ${name}`];
  const made: string[] = [];
  for (const [target, sub] of NODE_PATHS) {
    await Deno.mkdir(`${dir}/${sub}`, { recursive: true });
    if (!(await exists(target))) made.push(target);
    script.push(`mkdir -p ${target}`, `mount --bind ${dir}/${sub} ${target}`);
  }
  await must([...prefix, "sh", "-ec", script.join("\n")]);
  undo.push(async () => {
    // The mount points this node made on the host, if still empty.
    for (const target of made) await Deno.remove(target).catch(() => {});
  });

  const cgroupRoot = await ensureTestCgroupRoot(`kubeadm-${name}`);
  undo.push(async () => {
    // What containerd left (it may have gone first) goes before its cgroups.
    await killCgroupTree(cgroupRoot);
    await removeCgroupTree(cgroupRoot);
  });

  const patchesDir = `${dir}/patches`;
  await Deno.mkdir(patchesDir, { recursive: true });
  await Deno.writeTextFile(
    `${patchesDir}/kubeletconfiguration+merge.yaml`,
    `cgroupRoot: ${cgroupRoot}\n`,
  );

  const template = `${dir}/cni-template.json`;
  await Deno.writeTextFile(template, cniTemplate(name));
  // host-local's addresses of the node's network (none when no pod got one).
  undo.push(() =>
    Deno.remove(`/var/lib/cni/networks/ktska-${name}`, { recursive: true }).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    })
  );
  // The socket where a kubelet's socket usually is (and deno.json's -P=kubelet reaches it).
  const socketDir = `/run/containerd/ktska-${name}`;
  undo.push(() => Deno.remove(socketDir, { recursive: true }).catch(() => {}));
  const containerd = await startContainerd({
    ...args.containerd?.(),
    dir: `${dir}/containerd`,
    socket: `${socketDir}/containerd.sock`,
    namespaces,
    cniConfTemplate: template,
    sandboxImage: KUBEADM_PAUSE_IMAGE,
    runtime: args.runtime,
    signal,
  });
  undo.push(() => containerd.stop());
  log(`kubeadm-cluster: ${name} (${ip}) has ${containerd.version}`);
  await args.importImages(containerd.socket, signal);

  const kubeletLogFile = `${dir}/kubelet.log`;
  let kubelet: { agent?: RunningAgent; child?: Deno.ChildProcess; log: () => string } | undefined;
  let previousLogs = "";
  const kubeletKind = args.kubelet ?? "ours";
  const exec: KubeadmNode["exec"] = async (cmd, o = {}) => {
    const r = await run([...prefix, ...cmd], { signal: o.signal });
    if (r.code !== 0 && !o.allowFail) {
      throw new KubeadmClusterError(
        `'${cmd.join(" ")}' on ${name} failed with code ${r.code}: ${
          lastLines(r.stderr + r.stdout, 10)
        }`,
      );
    }
    return r;
  };
  const node: NodeImpl = {
    name,
    ip,
    dir,
    namespaces,
    containerd,
    cgroupRoot,
    etcKubernetes: `${dir}/etc-kubernetes`,
    varLibKubelet: `${dir}/var-lib-kubelet`,
    kubeletLogFile,
    patchesDir,
    exec,
    async startKubelet() {
      if (kubelet) throw new KubeadmClusterError(`the kubelet of ${name} runs already`);
      const flags = await Deno.readTextFile(`${dir}/var-lib-kubelet/kubeadm-flags.env`);
      const argv = dropInArgs(flags);
      log(`kubeadm-cluster: starting the ${kubeletKind} kubelet on ${name}: ${argv.join(" ")}`);
      if (kubeletKind === "ours") {
        // As the release file runs it: every permission, narrowed by the agent to what its
        // configuration and pods need (deno.json's static -P=kubelet set lacks the hostPath
        // volumes kubeadm's pods mount, e.g. /etc/ssl/certs and /run/xtables.lock). deno runs
        // main.ts from the repository.
        const agent = spawnAgent(argv, { prefix: nsenterPrefix(namespaces, REPO_ROOT) });
        kubelet = { agent, log: () => agent.stderr() };
      } else {
        if (!args.upstreamKubelet) {
          throw new KubeadmClusterError("kubelet 'upstream' needs upstreamKubelet");
        }
        const [program, ...first] = [...prefix, args.upstreamKubelet];
        const child = new Deno.Command(program!, {
          args: [...first, ...argv],
          stdin: "null",
          stdout: "null",
          stderr: "piped",
        }).spawn();
        let err = "";
        void (async () => {
          for await (const chunk of child.stderr) err += dec.decode(chunk, { stream: true });
        })();
        kubelet = { child, log: () => err };
      }
    },
    async stopKubelet() {
      const k = kubelet;
      if (!k) return;
      const child = k.agent?.process ?? k.child!;
      signalChild(child, "SIGTERM");
      const timer = setTimeout(() => signalChild(child, "SIGKILL"), 30_000);
      try {
        await child.status;
      } finally {
        clearTimeout(timer);
      }
      previousLogs += k.log();
      kubelet = undefined;
      await Deno.writeTextFile(kubeletLogFile, previousLogs);
    },
    kubeletLog: () => previousLogs + (kubelet?.log() ?? ""),
    kubeletPid: () => (kubelet?.agent?.process ?? kubelet?.child)?.pid,
    async kubeadm(verb, config, sig) {
      const configFile = `${dir}/kubeadm-${verb}.yaml`;
      await Deno.writeTextFile(configFile, config);
      const logFile = `${dir}/kubeadm-${verb}.log`;
      const [program, ...first] = [...prefix, args.kubeadm];
      const child = new Deno.Command(program!, {
        args: [...first, verb, `--config=${configFile}`, "--v=1"],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        signal: sig,
      }).spawn();
      let out = "";
      const pump = (stream: ReadableStream<Uint8Array>) =>
        (async () => {
          for await (const chunk of stream) {
            const text = dec.decode(chunk, { stream: true });
            out += text;
            await Deno.writeTextFile(logFile, text, { append: true });
          }
        })();
      const pumped = Promise.all([pump(child.stdout), pump(child.stderr)]);
      let started = false;
      // The kubelet starts when kubeadm says it would start it; if that fails, kubeadm goes.
      const starter = (async () => {
        while (!started) {
          if (out.includes("[kubelet-start] Starting the kubelet")) {
            started = true;
            await node.startKubelet();
            return;
          }
          await new Promise((r) => setTimeout(r, 100));
        }
      })().catch((e) => {
        signalChild(child, "SIGTERM");
        throw e;
      });
      starter.catch(() => {}); // awaited below, once kubeadm has exited
      const status = await child.status;
      started = true;
      await pumped;
      await starter;
      if (!status.success) {
        throw new KubeadmClusterError(
          `kubeadm ${verb} on ${name} failed with code ${status.code} (log ${logFile}):\n` +
            `${lastLines(out, 40)}\n--- kubelet ---\n${lastLines(node.kubeletLog(), 40)}`,
        );
      }
      return out;
    },
  };
  return node;
}

/** The last lines of a node's kubelet log and containerd log, for a failure message. */
export async function nodeLogTails(node: KubeadmNode, lines = 60): Promise<string> {
  return `--- ${node.name} kubelet ---\n${lastLines(node.kubeletLog(), lines)}\n` +
    `--- ${node.name} containerd ---\n${await logTail(node.containerd.logFile, 20)}`;
}

/** Where a file of the node's `/etc/kubernetes` or `/var/lib/kubelet` is on the host. */
export function hostPath(node: KubeadmNode, path: string): string {
  for (const [target, sub] of NODE_PATHS) {
    if (path === target || path.startsWith(`${target}/`)) {
      return `${node.dir}/${sub}${path.slice(target.length)}`;
    }
  }
  return path;
}

/**
 * Waits until every node is Ready with a pod CIDR, then routes the CIDRs between the nodes and
 * returns them by node name.
 */
export async function waitForPodCIDRs(
  cluster: KubeadmCluster,
  api: KubeClient,
  ms = 240_000,
): Promise<Map<string, string>> {
  const cidrs = await poll(
    "every node Ready with a pod CIDR",
    async () => {
      const m = new Map<string, string>();
      for (const node of cluster.nodes) {
        const n = await api.get<V1Node>(`/api/v1/nodes/${node.name}`);
        if (!nodeReady(n) || !n.spec?.podCIDR) return undefined;
        m.set(node.name, n.spec.podCIDR);
      }
      return m;
    },
    ms,
    1000,
  );
  await cluster.routePodCIDRs(cidrs);
  return cidrs;
}

/** Waits until kube-proxy is Ready on every node and CoreDNS has a Ready pod. */
export async function waitForAddons(
  cluster: KubeadmCluster,
  api: KubeClient,
  ms = 240_000,
): Promise<void> {
  await poll(
    "kube-proxy Ready on every node",
    async () => {
      const pods = (await listPods(api, "kube-system", "k8s-app=kube-proxy")).filter(podReady);
      const on = new Set(pods.map((p) => p.spec?.nodeName));
      return cluster.nodes.every((n) => on.has(n.name)) ? true : undefined;
    },
    ms,
    1000,
  );
  await poll(
    "CoreDNS Ready",
    async () => {
      const pods = (await listPods(api, "kube-system", "k8s-app=kube-dns")).filter(podReady);
      return pods.length >= 1 ? true : undefined;
    },
    ms,
    1000,
  );
}
