/**
 * A kubeadm cluster on our kubelet (issue 44), end to end: two nodes on this machine
 * (tests/kubeadm_cluster.ts), `kubeadm init` on the first and `kubeadm join` on the second, our
 * kubelet on both, every image built here under upstream's names (tests/kubeadm_images.ts).
 *
 * - Both nodes Ready, each with a pod CIDR from the controller-manager, which the kubelet hands
 *   to containerd (CRI UpdateRuntimeConfig) and containerd's CNI template turns into the node's
 *   pod network.
 * - The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) runs on
 *   node 1 as static pods with mirror pods; kube-proxy runs on both nodes, CoreDNS is Ready.
 * - A pod on node 2 resolves a service name through CoreDNS, and a pod on node 1
 *   reaches a service backed by a pod on node 2 through kube-proxy's rules.
 * - A kubelet restart on node 1 leaves the control plane running: the static pods are adopted,
 *   no container restarts. A kubelet restart on node 2 during a rolling update of a Deployment
 *   loses no pod (available replicas never below the desired count, maxUnavailable 0).
 * - Drain evicts node 2's pods through the API and the kubelet stops their containers with
 *   SIGTERM (the process's trap writes a file on the node); `kubeadm reset` on node 2 removes its
 *   containers and files.
 *
 * Needs root, containerd, runc, go (kubeadm and the control plane are built from their modules),
 * ip, nsenter and unshare; without them it is skipped loudly, or fails when CI=true.
 * Run it alone: `deno test -A tests/kubeadm_test.ts` (about 4 minutes here once everything is built).
 */

import assert from "node:assert/strict";
import type { V1Deployment, V1Node, V1Pod, V1PodList } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import { ensureControlPlaneBinaries, ensureUpstreamKubelet } from "./control_plane_build.ts";
import { BUSYBOX, BUSYBOX_IMAGE, HTTPD, HTTPD_IMAGE, HTTPD_INDEX, importImages } from "./images.ts";
import {
  hostPath,
  type KubeadmCluster,
  type KubeadmNode,
  nodeLogTails,
  startKubeadmCluster,
  waitForAddons,
  waitForPodCIDRs,
} from "./kubeadm_cluster.ts";
import { ensureKubeadmBinaries } from "./kubeadm_build.ts";
import { ensureKubeadmImages } from "./kubeadm_images.ts";
import { kubeClient, listPods, podReady, poll } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("the kubeadm cluster e2e test", [
  "containerd",
  "ctr",
  "runc",
  "go",
  "ip",
  "nsenter",
  "unshare",
]);

/**
 * The kubelet both nodes run: ours, or with KUBELET_TS_KUBEADM_KUBELET=upstream the Go kubelet,
 * to show the same test passes on it.
 */
const KUBELET = Deno.env.get("KUBELET_TS_KUBEADM_KUBELET") === "upstream" ? "upstream" : "ours";
const CP = "kts-cp";
const WORKER = "kts-w1";
const NS = "default";
const SYSTEM = "kube-system";
const CONTROL_PLANE = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];
const CP_TOLERATION = [{ key: "node-role.kubernetes.io/control-plane", operator: "Exists" }];

interface World {
  readonly dir: string;
  readonly cluster: KubeadmCluster;
  readonly api: KubeClient;
  readonly kubectl: string;
}

let world: Promise<World> | undefined;

async function start(dir: string): Promise<World> {
  const { kubectl } = await ensureControlPlaneBinaries();
  const { kubeadm } = await ensureKubeadmBinaries();
  const cluster = await startKubeadmCluster({
    dir,
    nodes: [CP, WORKER],
    kubeadm,
    kubelet: KUBELET,
    upstreamKubelet: KUBELET === "upstream" ? await ensureUpstreamKubelet() : undefined,
    async importImages(socket, signal) {
      await ensureKubeadmImages({ containerdSocket: socket, signal });
      await importImages({ containerdSocket: socket, images: [BUSYBOX, HTTPD], signal });
    },
  });
  try {
    const api = await kubeClient(cluster.adminKubeconfig, "kubeadm-e2e-test");
    return { dir, cluster, api, kubectl };
  } catch (e) {
    await cluster.stop();
    throw e;
  }
}

/** {@link start}, removing its directory when it fails. */
async function startOrClean(): Promise<World> {
  const dir = await Deno.makeTempDir({ prefix: "ktska-" });
  try {
    return await start(dir);
  } catch (e) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw e;
  }
}

function test(name: string, fn: (w: World) => Promise<void>) {
  Deno.test({
    name: `kubeadm: ${name}`,
    ignore: gate.ignore,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      gate.check();
      world ??= startOrClean();
      const w = await world;
      try {
        await fn(w);
      } catch (e) {
        for (const node of w.cluster.nodes) console.error(await nodeLogTails(node));
        throw e;
      }
    },
  });
}

test("both nodes are Ready with a pod CIDR each, routed between them", async (w) => {
  const cidrs = await waitForPodCIDRs(w.cluster, w.api);
  assert.notEqual(cidrs.get(CP), cidrs.get(WORKER));
  // Each kubelet sent its node's CIDR with UpdateRuntimeConfig and containerd wrote the node's
  // pod network from its template with it (the conf directory starts empty).
  for (const node of w.cluster.nodes) {
    assert.match(node.kubeletLog(), /"Updating Pod CIDR"/);
    const confDir = `${node.dir}/containerd/cni/net.d`;
    const files = [...Deno.readDirSync(confDir)].map((e) => e.name);
    assert.equal(files.length, 1, files.join(","));
    const conf = await Deno.readTextFile(`${confDir}/${files[0]}`);
    assert.ok(conf.includes(`"${cidrs.get(node.name)}"`), conf);
  }
});

test("the control plane runs on node 1 as static pods with mirror pods", async (w) => {
  for (const component of CONTROL_PLANE) {
    const pod = await poll(
      `${component} mirror pod Running`,
      async () => {
        const p = await w.api.get<V1Pod>(`/api/v1/namespaces/${SYSTEM}/pods/${component}-${CP}`)
          .catch(() => undefined);
        return p && podReady(p) ? p : undefined;
      },
      120_000,
      1000,
    );
    assert.ok(pod.metadata?.annotations?.["kubernetes.io/config.mirror"], component);
    assert.equal(pod.metadata?.annotations?.["kubernetes.io/config.source"], "file");
    assert.equal(pod.spec?.nodeName, CP);
    assert.ok(
      await Deno.stat(hostPath(w.cluster.nodes[0]!, `/etc/kubernetes/manifests/${component}.yaml`)),
    );
  }
});

test("kube-proxy runs on both nodes and CoreDNS is Ready", async (w) => {
  await waitForAddons(w.cluster, w.api);
  // kube-proxy wrote its rules in each node's network namespace.
  for (const node of w.cluster.nodes) {
    const rules = await poll(
      `KUBE-SERVICES on ${node.name}`,
      async () => {
        const r = await node.exec(["iptables-save", "-t", "nat"]);
        return r.stdout.includes("KUBE-SVC-") ? r.stdout : undefined;
      },
      60_000,
      1000,
    );
    assert.match(rules, /default\/kubernetes:https/);
  }
});

test("a pod on node 2 resolves a service through CoreDNS; a pod on node 1 reaches it", async (w) => {
  await w.api.create(`/api/v1/namespaces/${NS}/pods`, {
    metadata: { name: "web", labels: { app: "web" } },
    spec: {
      nodeName: WORKER,
      containers: [{ name: "httpd", image: HTTPD_IMAGE, ports: [{ containerPort: 80 }] }],
    },
  });
  await w.api.create(`/api/v1/namespaces/${NS}/services`, {
    metadata: { name: "web" },
    spec: { selector: { app: "web" }, ports: [{ port: 80, targetPort: 80 }] },
  });
  await poll(
    "web Ready",
    async () => {
      const p = await w.api.get<V1Pod>(`/api/v1/namespaces/${NS}/pods/web`);
      return podReady(p) ? p : undefined;
    },
    120_000,
    500,
  );

  const client = async (name: string, node: string, script: string) => {
    await w.api.create(`/api/v1/namespaces/${NS}/pods`, {
      metadata: { name },
      spec: {
        nodeName: node,
        restartPolicy: "Never",
        tolerations: CP_TOLERATION,
        containers: [{ name: "c", image: BUSYBOX_IMAGE, command: ["sh", "-c", script] }],
      },
    });
    const p = await poll(
      `${name} finished`,
      async () => {
        const p = await w.api.get<V1Pod>(`/api/v1/namespaces/${NS}/pods/${name}`);
        const phase = p.status?.phase;
        return phase === "Succeeded" || phase === "Failed" ? p : undefined;
      },
      120_000,
      500,
    );
    const logs = await w.api.getText(`/api/v1/namespaces/${NS}/pods/${name}/log`);
    assert.equal(p.status?.phase, "Succeeded", `${name} on ${node}: ${logs}`);
    return logs;
  };
  // Retried inside the pod: CoreDNS's and kube-proxy's first syncs may still be under way.
  const resolved = await client(
    "resolver",
    WORKER,
    "for i in $(seq 30); do nslookup web.default.svc.cluster.local && exit 0; sleep 2; done; exit 1",
  );
  assert.match(resolved, /Name:\s+web\.default\.svc\.cluster\.local/);
  // busybox-static's wget looks the port of "http" up through glibc's NSS, which a static
  // binary cannot load (it crashes, as it does on any failure): nc sends the request itself, to
  // the address nslookup got from CoreDNS.
  const fetched = await client(
    "fetcher",
    CP,
    "for i in $(seq 30); do ip=$(nslookup web.default.svc.cluster.local | " +
      'awk \'/^Address: /{a=$2} END{print a}\'); [ -n "$ip" ] && echo "service $ip" && ' +
      "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $ip 80 | grep . && exit 0; sleep 2; done; exit 1",
  );
  const service = await w.api.get<{ spec?: { clusterIP?: string } }>(
    `/api/v1/namespaces/${NS}/services/web`,
  );
  assert.ok(fetched.includes(`service ${service.spec?.clusterIP}`), fetched);
  assert.ok(fetched.includes(HTTPD_INDEX), fetched);
});

test("a kubelet restart on node 1 leaves the control plane running", async (w) => {
  const before = await controlPlaneContainers(w.api);
  const node = w.cluster.nodes[0]!;
  await node.stopKubelet();
  await node.startKubelet();
  // The new kubelet has synced the static pods once the node reports Ready again after its
  // start and the mirror pods show the same containers.
  await poll(
    "the restarted kubelet's sync loop",
    () =>
      Promise.resolve(
        node.kubeletLog().split("Starting kubelet main sync loop").length > 2 ? true : undefined,
      ),
    60_000,
    500,
  );
  // For 20 s after the new kubelet's sync loop started (its relists and pod syncs), the node's
  // containers are the ones the old kubelet left, and the mirror pods show them.
  const running = await runningContainers(node);
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await runningContainers(node), running, `after ${i + 1} s`);
  }
  assert.deepEqual(await controlPlaneContainers(w.api), before);
});

/** The ids of the containers (sandboxes included) containerd runs on a node, sorted. */
async function runningContainers(node: KubeadmNode): Promise<string[]> {
  const r = await node.exec([
    "ctr",
    `--address=${node.containerd.socket}`,
    "--namespace=k8s.io",
    "tasks",
    "ls",
  ]);
  return r.stdout.split("\n").slice(1).filter((l) => /\sRUNNING\s*$/.test(l))
    .map((l) => l.split(/\s+/)[0]!).sort();
}

async function controlPlaneContainers(api: KubeClient): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const component of CONTROL_PLANE) {
    const p = await api.get<V1Pod>(`/api/v1/namespaces/${SYSTEM}/pods/${component}-${CP}`);
    const s = p.status?.containerStatuses?.[0];
    assert.ok(s?.state?.running, `${component} running`);
    out[component] = `${s.containerID} restarts=${s.restartCount}`;
  }
  return out;
}

test("a kubelet restart on node 2 during a rolling update loses no pod", async (w) => {
  const name = "rolling";
  const replicas = 2;
  const template = (generation: string) => ({
    metadata: { labels: { app: name }, annotations: { generation } },
    spec: {
      nodeSelector: { "kubernetes.io/hostname": WORKER },
      terminationGracePeriodSeconds: 5,
      containers: [{
        name: "c",
        image: BUSYBOX_IMAGE,
        command: ["sh", "-c", "trap 'exit 0' TERM; touch /tmp/ready; while :; do sleep 1; done"],
        readinessProbe: { exec: { command: ["cat", "/tmp/ready"] }, periodSeconds: 1 },
      }],
    },
  });
  await w.api.create(`/apis/apps/v1/namespaces/${NS}/deployments`, {
    metadata: { name },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      strategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
      minReadySeconds: 2,
      template: template("1"),
    },
  });
  const path = `/apis/apps/v1/namespaces/${NS}/deployments/${name}`;
  const complete = (d: V1Deployment) =>
    (d.status?.observedGeneration ?? 0) >= (d.metadata?.generation ?? 1) &&
    d.status?.updatedReplicas === replicas && d.status?.availableReplicas === replicas &&
    (d.status?.replicas ?? 0) === replicas;
  const completed = (what: string) =>
    poll(
      what,
      async () => {
        const d = await w.api.get<V1Deployment>(path);
        return complete(d) ? d : undefined;
      },
      180_000,
      500,
    );
  await completed("the Deployment available");

  let lowest = replicas;
  let watching = true;
  const watcher = (async () => {
    while (watching) {
      const d = await w.api.get<V1Deployment>(path).catch(() => undefined);
      lowest = Math.min(lowest, d?.status?.availableReplicas ?? lowest);
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  // The kubelet goes down, the rollout starts (its first new pod is bound to a node whose
  // kubelet is down) and the kubelet comes back. The old pods have run for more than upstream's
  // 10 s grace before the kubelet's start, so they stay Ready across the restart (a container
  // started within it waits for its readiness probe, on either kubelet).
  const node = w.cluster.nodes[1]!;
  await new Promise((r) => setTimeout(r, 12_000));
  await node.stopKubelet();
  let done: V1Deployment;
  try {
    await w.api.patch(path, { spec: { template: template("2") } }, "strategic");
    await new Promise((r) => setTimeout(r, 3_000));
    await node.startKubelet();
    done = await completed("the rolling update complete");
  } finally {
    watching = false;
    await watcher;
  }
  assert.equal(done.status?.availableReplicas, replicas);
  assert.equal(lowest, replicas, "available replicas dropped during the rollout");
  const pods = (await listPods(w.api, NS, `app=${name}`)).filter((p) =>
    !p.metadata?.deletionTimestamp
  );
  assert.equal(pods.length, replicas);
  for (const p of pods) {
    assert.equal(p.metadata?.annotations?.generation, "2");
    for (const s of p.status?.containerStatuses ?? []) {
      assert.equal(s.restartCount, 0, `${p.metadata?.name} restarted`);
    }
  }
});

test("drain evicts node 2's pods through the API; kubeadm reset cleans the node", async (w) => {
  const node = w.cluster.nodes[1]!;
  // A pod whose process says on the node's disk that it got SIGTERM.
  await w.api.create(`/api/v1/namespaces/${NS}/pods`, {
    metadata: { name: "graceful" },
    spec: {
      nodeName: WORKER,
      terminationGracePeriodSeconds: 30,
      volumes: [{
        name: "out",
        hostPath: { path: "/var/lib/kubelet/kts-drain", type: "DirectoryOrCreate" },
      }],
      containers: [{
        name: "c",
        image: BUSYBOX_IMAGE,
        command: [
          "sh",
          "-c",
          "trap 'echo TERM > /out/graceful; exit 0' TERM; while :; do sleep 1; done",
        ],
        volumeMounts: [{ name: "out", mountPath: "/out" }],
      }],
    },
  });
  await poll(
    "graceful Running",
    async () => {
      const p = await w.api.get<V1Pod>(`/api/v1/namespaces/${NS}/pods/graceful`);
      return p.status?.phase === "Running" ? p : undefined;
    },
    60_000,
    500,
  );
  const drained = await new Deno.Command(w.kubectl, {
    args: [
      `--kubeconfig=${w.cluster.adminKubeconfig}`,
      "drain",
      WORKER,
      "--ignore-daemonsets",
      "--delete-emptydir-data",
      "--force",
      "--timeout=120s",
    ],
  }).output();
  const out = new TextDecoder().decode(drained.stdout) + new TextDecoder().decode(drained.stderr);
  assert.ok(drained.success, out);
  assert.match(out, /evicting pod default\/web/);
  assert.match(out, /evicting pod default\/graceful/);
  const n = await w.api.get<V1Node>(`/api/v1/nodes/${WORKER}`);
  assert.equal(n.spec?.unschedulable, true);
  // Only DaemonSet pods stay on the node, in any namespace.
  await poll(
    "only kube-proxy left on node 2",
    async () => {
      const pods = await w.api.request<V1PodList>("GET", "/api/v1/pods", {
        query: { fieldSelector: `spec.nodeName=${WORKER}` },
      });
      const left = pods.items.filter((p) =>
        !p.metadata?.ownerReferences?.some((o) => o.kind === "DaemonSet")
      );
      return left.length === 0 && pods.items.length > 0 ? true : undefined;
    },
    120_000,
    500,
  );
  assert.equal(
    (await Deno.readTextFile(hostPath(node, "/var/lib/kubelet/kts-drain/graceful"))).trim(),
    "TERM",
  );

  await node.stopKubelet(); // what `systemctl stop kubelet` would do before a reset
  const reset = await node.exec([
    (await ensureKubeadmBinaries()).kubeadm,
    "reset",
    "--force",
    `--cri-socket=${node.containerd.endpoint}`,
  ]);
  assert.match(
    reset.stdout,
    /\[reset\] Deleting contents of directories: \[[^\]]*\/var\/lib\/kubelet/,
  );
  // kubeadm removed every pod the kubelet had left (kube-proxy's among them) through CRI, and
  // the node's kubeconfig and the kubelet's files.
  const containers = await node.exec([
    "ctr",
    `--address=${node.containerd.socket}`,
    "--namespace=k8s.io",
    "containers",
    "ls",
    "--quiet",
  ]);
  assert.equal(containers.stdout.trim(), "");
  const left = await node.exec(["ls", "-A", "/etc/kubernetes", "/var/lib/kubelet"]);
  assert.doesNotMatch(left.stdout, /kubelet\.conf|config\.yaml|pods/);
});

Deno.test({
  name: "kubeadm: teardown",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const w = await world?.catch(() => undefined);
    if (!w) return;
    w.api.close();
    await w.cluster.stop();
    await Deno.remove(w.dir, { recursive: true }).catch(() => {});
  },
});
