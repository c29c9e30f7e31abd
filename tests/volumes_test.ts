/**
 * Pod volumes end to end, on real containerd through the real apiserver: configMap and secret
 * volumes (items, modes, live updates) and env, the service account token the apiserver's
 * ServiceAccount admission adds as `kube-api-access-*` (checked with a TokenReview), downwardAPI
 * files that follow relabelling, emptyDir on disk and in memory shared between containers,
 * hostPath type checks with their FailedMount events, subPath confinement, and the clean-up of
 * mounts and pod directories once pods are deleted. Upstream's counterparts are the
 * `test/e2e/common/storage` suites (configmap_volume.go, secrets_volume.go, downwardapi_volume.go,
 * empty_dir.go, host_path.go, projected_*.go) and `test/e2e/storage/subpath.go`.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type {
  CoreV1Event,
  CoreV1EventList,
  V1ContainerStatus,
  V1Pod,
  V1TokenReview,
} from "@kubernetes/client-node";
import { Mounter } from "../src/util/mount.ts";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  getPod,
  poll,
  startNodeAgent,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("volumes e2e tests", ["containerd", "ctr", "runc", "openssl", "go"]);
const NODE = "kts-volumes-e2e";
const NS = "default";
/** How long a configMap change or a relabel may take to reach a running pod's files. */
const UPDATE_MS = 60_000;

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** The agent's --root-dir: pod volumes live under `<root>/pods/<uid>/volumes/`. */
  readonly root: string;
  /** Where hostPath volumes of the tests point. */
  readonly host: string;
}

const suite = e2eSuite<World>({
  name: "volumes",
  gate,
  userAgent: "volumes-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "volumes-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(
        await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }),
      );
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), socket }),
      );
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      // What kube-controller-manager would make: pods are refused without their service
      // account, and the kube-api-access volume cannot be set up without the root CA ConfigMap.
      await ensureDefaultServiceAccount(cp, NS);
      await ensureRootCAConfigMap(cp, NS);
      const host = join(dir, "host");
      await Deno.mkdir(host, { recursive: true });
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        // Volume contents are refreshed on pod resyncs: upstream's configMap update delay is
        // up to syncFrequency plus the cache TTL.
        configLines: ["syncFrequency: 5s", "clusterDomain: cluster.local"],
      });
      stack.move();
      return { dir, cp, containerd, agent, root: join(dir, "root"), host };
    } catch (e) {
      // Nothing of a world that did not start may outlive the test run.
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

type Json = Record<string, unknown>;

/** A pod bound to the node; each container defaults to busybox sleeping, and is named "main". */
function pod(
  name: string,
  spec: Json,
  containers: Json[] = [{}],
  meta: Json = {},
): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, ...meta },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      ...spec,
      containers: containers.map((c) => ({
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sleep", "3600"],
        ...c,
      })),
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

async function kubectlOk(w: World, args: string[]): Promise<string> {
  const r = await w.cp.kubectl(args);
  assert.equal(r.code, 0, `kubectl ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** Runs `script` with `sh -c` in a container of a running pod (kubectl exec) and returns stdout. */
async function sh(w: World, name: string, script: string, container = "main"): Promise<string> {
  return await kubectlOk(w, ["exec", name, "-n", NS, "-c", container, "--", "sh", "-c", script]);
}

/** The environment of a container, from `env` run in it. */
async function envOf(w: World, name: string, container = "main"): Promise<Map<string, string>> {
  const out = await sh(w, name, "env", container);
  return new Map(
    out.split("\n").filter((l) => l.includes("=")).map((l) => {
      const i = l.indexOf("=");
      return [l.slice(0, i), l.slice(i + 1)] as [string, string];
    }),
  );
}

/** `stat -L -c %a`: the octal mode of what `path` (a projected file's symlink) resolves to. */
async function modeIn(w: World, name: string, path: string): Promise<string> {
  return (await sh(w, name, `stat -L -c %a ${path}`)).trim();
}

/** The `/proc/mounts` line of `mountPoint` inside the container, split into its fields. */
async function procMount(w: World, name: string, mountPoint: string, container = "main") {
  const out = await sh(w, name, "cat /proc/mounts", container);
  const line = out.split("\n").map((l) => l.split(" ")).find((f) => f[1] === mountPoint);
  assert.ok(line, `${mountPoint} is a mount point in ${name}/${container}:\n${out}`);
  return { fsType: line[2], options: (line[3] ?? "").split(",") };
}

function containerStatus(p: V1Pod, name = "main"): V1ContainerStatus | undefined {
  return p.status?.containerStatuses?.find((c) => c.name === name);
}

function running(p: V1Pod): boolean {
  return p.status?.phase === "Running" &&
    (p.status.containerStatuses ?? []).every((c) => c.state?.running !== undefined);
}

async function waitRunning(api: KubeClient, name: string): Promise<V1Pod> {
  return await waitPod(api, NS, name, "Running with every container running", running);
}

/** Polls the pod's events until one has `reason` and a message matching `message`. */
async function waitEvent(
  api: KubeClient,
  name: string,
  reason: string,
  message: RegExp,
): Promise<CoreV1Event> {
  return await poll(
    `event ${reason} ${message} on pod ${name}`,
    async () => {
      const list = await api.get<CoreV1EventList>(
        `/api/v1/namespaces/${NS}/events?fieldSelector=involvedObject.name%3D${name}`,
      );
      return list.items.find((e) => e.reason === reason && message.test(e.message ?? ""));
    },
    60_000,
    500,
  );
}

/** Escapes `s` for use inside a RegExp. */
function re(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

e2e(
  "configMap and secret volumes and env: items, modes, envFrom prefixes, live configMap updates",
  async (w, api) => {
    await create(
      w,
      JSON.stringify({
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "app-config", namespace: NS },
        data: { greeting: "hello", color: "blue" },
      }),
    );
    await create(
      w,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "app-secret", namespace: NS },
        stringData: { password: "s3cr3t", token: "t0k3n" },
      }),
    );
    await create(
      w,
      pod("cm-secret", {
        volumes: [
          { name: "cm-all", configMap: { name: "app-config", defaultMode: 0o640 } },
          {
            name: "cm-items",
            configMap: {
              name: "app-config",
              items: [{ key: "greeting", path: "sub/hello.txt", mode: 0o600 }],
            },
          },
          { name: "sec-all", secret: { secretName: "app-secret" } },
          {
            name: "sec-items",
            secret: {
              secretName: "app-secret",
              items: [{ key: "password", path: "pw", mode: 0o400 }],
            },
          },
        ],
      }, [{
        volumeMounts: [
          { name: "cm-all", mountPath: "/etc/cm-all" },
          { name: "cm-items", mountPath: "/etc/cm-items" },
          { name: "sec-all", mountPath: "/etc/sec-all" },
          { name: "sec-items", mountPath: "/etc/sec-items" },
        ],
        env: [
          {
            name: "GREETING",
            valueFrom: { configMapKeyRef: { name: "app-config", key: "greeting" } },
          },
          {
            name: "PASSWORD",
            valueFrom: { secretKeyRef: { name: "app-secret", key: "password" } },
          },
        ],
        envFrom: [
          { prefix: "CM_", configMapRef: { name: "app-config" } },
          { prefix: "SEC_", secretRef: { name: "app-secret" } },
        ],
      }]),
    );
    await waitRunning(api, "cm-secret");

    const files = {
      "/etc/cm-all/greeting": ["hello", "640"],
      "/etc/cm-all/color": ["blue", "640"],
      "/etc/cm-items/sub/hello.txt": ["hello", "600"],
      "/etc/sec-all/password": ["s3cr3t", "644"], // secret defaultMode 0644
      "/etc/sec-all/token": ["t0k3n", "644"],
      "/etc/sec-items/pw": ["s3cr3t", "400"],
    };
    for (const [path, [content, mode]] of Object.entries(files)) {
      assert.equal(await sh(w, "cm-secret", `cat ${path}`), content, path);
      assert.equal(await modeIn(w, "cm-secret", path), mode, `mode of ${path}`);
    }
    // Only the listed items are projected (ls hides the ..data machinery).
    assert.equal((await sh(w, "cm-secret", "ls /etc/cm-items")).trim(), "sub");
    assert.equal((await sh(w, "cm-secret", "ls /etc/sec-items")).trim(), "pw");
    // Secrets never touch the node's disk: upstream backs them with tmpfs.
    assert.equal((await procMount(w, "cm-secret", "/etc/sec-all")).fsType, "tmpfs");

    const env = await envOf(w, "cm-secret");
    for (
      const [k, v] of [
        ["GREETING", "hello"],
        ["PASSWORD", "s3cr3t"],
        ["CM_greeting", "hello"],
        ["CM_color", "blue"],
        ["SEC_password", "s3cr3t"],
        ["SEC_token", "t0k3n"],
      ]
    ) {
      assert.equal(env.get(k!), v, `env ${k}`);
    }

    await kubectlOk(w, [
      ...["patch", "configmap", "app-config", "-n", NS, "--type", "merge"],
      ...["-p", JSON.stringify({ data: { greeting: "bonjour" } })],
    ]);
    await poll(
      "the configMap update in the running container's files",
      async () => {
        const all = await sh(w, "cm-secret", "cat /etc/cm-all/greeting");
        const item = await sh(w, "cm-secret", "cat /etc/cm-items/sub/hello.txt");
        return all === "bonjour" && item === "bonjour" ? true : undefined;
      },
      UPDATE_MS,
      1_000,
    );
    assert.equal(await modeIn(w, "cm-secret", "/etc/cm-items/sub/hello.txt"), "600");
    // Env is fixed when the container starts; the container was not restarted for the update.
    assert.equal((await envOf(w, "cm-secret")).get("GREETING"), "hello");
    assert.equal(containerStatus(await getPod(api, NS, "cm-secret"))?.restartCount, 0);
  },
);

e2e(
  "the kube-api-access projected volume holds a pod-bound token the apiserver authenticates",
  async (w, api) => {
    await create(w, pod("sa-token", { automountServiceAccountToken: undefined }));
    // The harness's part: the ServiceAccount admission plugin added the volume and its mount.
    const admitted = await getPod(api, NS, "sa-token");
    const vol = admitted.spec?.volumes?.find((v) => /^kube-api-access-[a-z0-9]{5}$/.test(v.name));
    assert.ok(
      vol?.projected,
      `a kube-api-access volume: ${JSON.stringify(admitted.spec?.volumes)}`,
    );
    const dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert.equal(
      admitted.spec?.containers[0]?.volumeMounts?.find((m) => m.name === vol.name)?.mountPath,
      dir,
    );
    const p = await waitRunning(api, "sa-token");

    assert.equal(await sh(w, "sa-token", `cat ${dir}/namespace`), NS);
    assert.equal(
      await sh(w, "sa-token", `cat ${dir}/ca.crt`),
      await Deno.readTextFile(w.cp.pki.ca.cert),
    );
    assert.equal(await modeIn(w, "sa-token", `${dir}/token`), "644"); // defaultMode 420
    const token = await sh(w, "sa-token", `cat ${dir}/token`);
    assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/, "a JWT");

    const review = await api.create<V1TokenReview>(
      "/apis/authentication.k8s.io/v1/tokenreviews",
      { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token } },
    );
    assert.equal(review.status?.authenticated, true, JSON.stringify(review.status));
    assert.equal(review.status?.user?.username, `system:serviceaccount:${NS}:default`);
    assert.deepEqual(review.status?.user?.extra?.["authentication.kubernetes.io/pod-name"], [
      "sa-token",
    ]);
    assert.deepEqual(review.status?.user?.extra?.["authentication.kubernetes.io/pod-uid"], [
      p.metadata?.uid,
    ]);
    assert.deepEqual(review.status?.user?.extra?.["authentication.kubernetes.io/node-name"], [
      NODE,
    ]);
  },
);

e2e(
  "downwardAPI volume and env: labels, annotations, name, resource fields; relabelling updates the file",
  async (w, api) => {
    const fieldRef = (fieldPath: string) => ({ fieldRef: { fieldPath } });
    const cpuLimit = {
      resourceFieldRef: { containerName: "main", resource: "limits.cpu", divisor: "1m" },
    };
    const memRequest = {
      resourceFieldRef: { containerName: "main", resource: "requests.memory", divisor: "1Mi" },
    };
    await create(
      w,
      pod(
        "dapi",
        {
          volumes: [{
            name: "podinfo",
            downwardAPI: {
              items: [
                { path: "labels", ...fieldRef("metadata.labels") },
                { path: "annotations", ...fieldRef("metadata.annotations") },
                { path: "name", ...fieldRef("metadata.name") },
                { path: "cpu_limit", ...cpuLimit },
                { path: "mem_request", ...memRequest },
              ],
            },
          }],
        },
        [{
          volumeMounts: [{ name: "podinfo", mountPath: "/etc/podinfo" }],
          resources: {
            requests: { cpu: "100m", memory: "32Mi" },
            limits: { cpu: "250m", memory: "64Mi" },
          },
          env: [
            { name: "POD_NAME", valueFrom: fieldRef("metadata.name") },
            { name: "APP_LABEL", valueFrom: fieldRef("metadata.labels['app']") },
            { name: "BUILDER", valueFrom: fieldRef("metadata.annotations['builder']") },
            { name: "CPU_LIMIT", valueFrom: cpuLimit },
            { name: "MEM_REQUEST", valueFrom: memRequest },
          ],
        }],
        { labels: { app: "dapi", tier: "backend" }, annotations: { builder: "bob" } },
      ),
    );
    await waitRunning(api, "dapi");

    const lines = (s: string) => s.split("\n").filter((l) => l !== "").sort();
    assert.deepEqual(lines(await sh(w, "dapi", "cat /etc/podinfo/labels")), [
      'app="dapi"',
      'tier="backend"',
    ]);
    // The kubelet's own annotations (kubernetes.io/config.seen, ...) may be listed as well.
    assert.ok(lines(await sh(w, "dapi", "cat /etc/podinfo/annotations")).includes('builder="bob"'));
    assert.equal(await sh(w, "dapi", "cat /etc/podinfo/name"), "dapi");
    assert.equal(await sh(w, "dapi", "cat /etc/podinfo/cpu_limit"), "250");
    assert.equal(await sh(w, "dapi", "cat /etc/podinfo/mem_request"), "32");

    const env = await envOf(w, "dapi");
    assert.equal(env.get("POD_NAME"), "dapi");
    assert.equal(env.get("APP_LABEL"), "dapi");
    assert.equal(env.get("BUILDER"), "bob");
    assert.equal(env.get("CPU_LIMIT"), "250");
    assert.equal(env.get("MEM_REQUEST"), "32");

    await kubectlOk(w, ["label", "pod", "dapi", "-n", NS, "tier=frontend", "--overwrite"]);
    const relabelled = await poll(
      "the new label in /etc/podinfo/labels",
      async () => {
        const now = lines(await sh(w, "dapi", "cat /etc/podinfo/labels"));
        return now.includes('tier="frontend"') ? now : undefined;
      },
      UPDATE_MS,
      1_000,
    );
    assert.deepEqual(relabelled, ['app="dapi"', 'tier="frontend"']);
    assert.equal(containerStatus(await getPod(api, NS, "dapi"))?.restartCount, 0);
  },
);

e2e(
  "pod identity: hostname, subdomain and setHostnameAsFQDN; the managed /etc/hosts with hostAliases",
  async (w, api) => {
    await create(
      w,
      pod("identity", {
        hostname: "db-0",
        subdomain: "db",
        setHostnameAsFQDN: true,
        hostAliases: [{ ip: "10.1.2.3", hostnames: ["foo.local", "bar.local"] }],
      }),
    );
    const p = await waitRunning(api, "identity");
    const fqdn = `db-0.db.${NS}.svc.cluster.local`;
    assert.equal((await sh(w, "identity", "hostname")).trim(), fqdn);
    const hosts = await sh(w, "identity", "cat /etc/hosts");
    const podIP = p.status?.podIP;
    assert.ok(podIP, "the pod has an IP");
    // Upstream's managedHostsFileContent, line for line.
    assert.equal(
      hosts,
      [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
        `${podIP}\t${fqdn}\tdb-0`,
        "",
        "# Entries added by HostAliases.",
        "10.1.2.3\tfoo.local\tbar.local",
        "",
      ].join("\n"),
    );
    // The file lives in the pod's directory on the node and is bind-mounted.
    const onNode = join(w.root, "pods", p.metadata!.uid!, "etc-hosts");
    assert.equal(await Deno.readTextFile(onNode), hosts);
    assert.ok((await sh(w, "identity", "cat /proc/mounts")).includes(" /etc/hosts "));
  },
);

e2e(
  "service link env: the namespace's Services with enableServiceLinks, the kubernetes Service always",
  async (w, api) => {
    await create(
      w,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "web-svc", namespace: NS },
        spec: { ports: [{ name: "http", port: 8080, protocol: "TCP" }] },
      }),
    );
    const svc = await api.get<{ spec?: { clusterIP?: string } }>(
      `/api/v1/namespaces/${NS}/services/web-svc`,
    );
    const ip = svc.spec?.clusterIP;
    assert.ok(ip, "the apiserver allocated a cluster IP");
    const master = await api.get<{ spec?: { clusterIP?: string } }>(
      "/api/v1/namespaces/default/services/kubernetes",
    );
    await create(w, pod("links", {}));
    await create(w, pod("nolinks", { enableServiceLinks: false }));
    await waitRunning(api, "links");
    await waitRunning(api, "nolinks");
    const links = await envOf(w, "links");
    assert.equal(links.get("WEB_SVC_SERVICE_HOST"), ip);
    assert.equal(links.get("WEB_SVC_SERVICE_PORT"), "8080");
    assert.equal(links.get("WEB_SVC_SERVICE_PORT_HTTP"), "8080");
    assert.equal(links.get("WEB_SVC_PORT"), `tcp://${ip}:8080`);
    assert.equal(links.get("WEB_SVC_PORT_8080_TCP_ADDR"), ip);
    assert.equal(links.get("KUBERNETES_SERVICE_HOST"), master.spec?.clusterIP);
    const none = await envOf(w, "nolinks");
    assert.equal(none.get("WEB_SVC_SERVICE_HOST"), undefined);
    assert.equal(none.get("KUBERNETES_SERVICE_HOST"), master.spec?.clusterIP);
    await kubectlOk(w, ["delete", "service", "web-svc", "-n", NS]);
  },
);

e2e(
  "emptyDir is shared between containers; a Memory emptyDir is a tmpfs of its sizeLimit",
  async (w, api) => {
    const mounts = (data: string) => [
      { name: "shared", mountPath: data },
      { name: "mem", mountPath: "/mem" },
    ];
    await create(
      w,
      pod(
        "emptydir",
        {
          volumes: [
            { name: "shared", emptyDir: {} },
            { name: "mem", emptyDir: { medium: "Memory", sizeLimit: "16Mi" } },
          ],
        },
        [
          {
            name: "writer",
            command: [
              "sh",
              "-c",
              "echo from-writer > /shared/msg; echo in-memory > /mem/m; sleep 3600",
            ],
            volumeMounts: mounts("/shared"),
          },
          { name: "reader", volumeMounts: mounts("/data") },
        ],
      ),
    );
    const p = await waitRunning(api, "emptydir");
    const read = (path: string) => sh(w, "emptydir", `cat ${path}`, "reader");
    assert.equal(
      await poll("the writer's file", async () => (await read("/data/msg")) || undefined, 10_000),
      "from-writer\n",
    );
    assert.equal(await read("/mem/m"), "in-memory\n");
    // Upstream makes a disk emptyDir 0777 for containers running as any user.
    assert.equal((await sh(w, "emptydir", "stat -c %a /data", "reader")).trim(), "777");

    const mem = await procMount(w, "emptydir", "/mem", "reader");
    assert.equal(mem.fsType, "tmpfs");
    assert.ok(mem.options.includes("size=16384k"), `size from sizeLimit 16Mi: ${mem.options}`);
    assert.notEqual((await procMount(w, "emptydir", "/data", "reader")).fsType, "tmpfs");

    // On the node: the volumes' directories under the pod's dir, the Memory one a tmpfs mount.
    const volumes = join(w.root, "pods", p.metadata!.uid!, "volumes", "kubernetes.io~empty-dir");
    assert.equal(await Deno.readTextFile(join(volumes, "shared", "msg")), "from-writer\n");
    const hostMem = await new Mounter().mountAt(join(volumes, "mem"));
    assert.equal(hostMem?.fsType, "tmpfs", `${join(volumes, "mem")} is a tmpfs mount point`);
  },
);

e2e(
  "hostPath: DirectoryOrCreate creates the directory; Directory and File type mismatches are FailedMount",
  async (w, api) => {
    const created = join(w.host, "created", "deep");
    const missing = join(w.host, "missing");
    const aDir = join(w.host, "a-dir");
    await Deno.mkdir(aDir);
    const hostPod = (name: string, path: string, type: string, script = "sleep 3600") =>
      pod(name, { volumes: [{ name: "host", hostPath: { path, type } }] }, [{
        command: ["sh", "-c", script],
        volumeMounts: [{ name: "host", mountPath: "/host" }],
      }]);
    await create(
      w,
      hostPod("hostpath-create", created, "DirectoryOrCreate", "echo hi > /host/f; sleep 3600"),
    );
    await create(w, hostPod("hostpath-missing", missing, "Directory"));
    await create(w, hostPod("hostpath-file", aDir, "File"));

    await waitRunning(api, "hostpath-create");
    const st = await Deno.stat(created);
    assert.ok(st.isDirectory);
    assert.equal(st.mode! & 0o777, 0o755, "upstream creates DirectoryOrCreate paths 0755");
    assert.equal(
      await poll(
        "the container's file on the host",
        async () => (await Deno.readTextFile(join(created, "f"))) || undefined,
        10_000,
      ),
      "hi\n",
    );

    // Upstream's current messages (pkg/volume/hostpath typeMatchedOrError).
    for (
      const [name, message] of [
        ["hostpath-missing", `hostPath ${missing} doesn't exist`],
        ["hostpath-file", `hostPath type check failed: ${aDir} is not a file, it's a Directory`],
      ] as const
    ) {
      const ev = await waitEvent(
        api,
        name,
        "FailedMount",
        new RegExp(`^MountVolume\\.SetUp failed for volume "host" : ${re(message)}$`),
      );
      assert.equal(ev.type, "Warning");
      const p = await waitPod(
        api,
        NS,
        name,
        "Pending, main waiting in ContainerCreating",
        (p) => containerStatus(p)?.state?.waiting?.reason === "ContainerCreating",
      );
      assert.equal(p.status?.phase, "Pending");
    }
    await assert.rejects(
      Deno.lstat(missing),
      Deno.errors.NotFound,
      "type Directory creates nothing",
    );
  },
);

// A configMap or secret item cannot escape its volume through the API: keys such as `../escape`
// fail the apiserver's validation (and so do item paths with `..`), so that case is covered by the
// atomic writer's unit tests only. A symlink inside a hostPath volume is what can leave it.
e2e(
  "subPath: a directory inside the volume is mounted; a symlink out of the volume is CreateContainerConfigError",
  async (w, api) => {
    const vol = join(w.host, "subpath");
    await Deno.mkdir(join(vol, "inside"), { recursive: true });
    await Deno.writeTextFile(join(vol, "inside", "hello"), "inside\n");
    await Deno.symlink("/etc", join(vol, "escape"));
    const subPathPod = (name: string, subPath: string) =>
      pod(name, { volumes: [{ name: "host", hostPath: { path: vol, type: "Directory" } }] }, [{
        volumeMounts: [{ name: "host", mountPath: "/mnt/sub", subPath }],
      }]);
    await create(w, subPathPod("subpath-ok", "inside"));
    await create(w, subPathPod("subpath-escape", "escape"));

    await waitRunning(api, "subpath-ok");
    assert.equal((await sh(w, "subpath-ok", "ls /mnt/sub")).trim(), "hello");
    assert.equal(await sh(w, "subpath-ok", "cat /mnt/sub/hello"), "inside\n");

    const p = await waitPod(
      api,
      NS,
      "subpath-escape",
      "main waiting in CreateContainerConfigError",
      (p) => containerStatus(p)?.state?.waiting?.reason === "CreateContainerConfigError",
    );
    // Upstream does not tell the user more (it would describe the host's filesystem).
    assert.equal(
      containerStatus(p)?.state?.waiting?.message,
      'failed to prepare subPath for volumeMount "host" of container "main"',
    );
    assert.equal(p.status?.phase, "Pending");
    await waitEvent(
      api,
      "subpath-escape",
      "Failed",
      /^Error: failed to prepare subPath for volumeMount "host" of container "main"$/,
    );
  },
);

e2e("deleted pods leave no volume mounts and no pod directories behind", async (w, api) => {
  const pods = await api.get<{ items: V1Pod[] }>(`/api/v1/namespaces/${NS}/pods`);
  const names = pods.items.map((p) => p.metadata!.name!);
  const uids = pods.items.map((p) => p.metadata!.uid!);
  assert.ok(names.length > 0, "the earlier tests left pods to delete");
  await kubectlOk(w, ["delete", "pods", "--all", "-n", NS, "--wait=false"]);
  for (const name of names) await waitPodGone(api, NS, name, 60_000);
  const podsDir = join(w.root, "pods");
  await poll(
    "no mounts under the pods' directories",
    async () => {
      const left = (await new Mounter().list()).filter((m) =>
        m.mountPoint.startsWith(`${podsDir}/`)
      );
      if (left.length > 0) {
        throw new Error(`still mounted: ${left.map((m) => m.mountPoint).join(", ")}`);
      }
      return true;
    },
    30_000,
    500,
  );
  await poll(
    "the pods' directories to be removed",
    async () => {
      const left: string[] = [];
      for (const uid of uids) {
        try {
          await Deno.lstat(join(podsDir, uid));
          left.push(uid);
        } catch (e) {
          if (!(e instanceof Deno.errors.NotFound)) throw e;
        }
      }
      if (left.length > 0) throw new Error(`still there: ${left.join(", ")}`);
      return true;
    },
    30_000,
    500,
  );
  // A hostPath's content is the node's, not the pod's: it stays.
  assert.equal(await Deno.readTextFile(join(w.host, "created", "deep", "f")), "hi\n");
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
  // Whatever the agent left mounted (tmpfs volumes, bind mounts) would keep w.dir from going.
  const mounter = new Mounter();
  const left = (await mounter.list())
    .map((m) => m.mountPoint)
    .filter((p) => p.startsWith(`${w.dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const point of left) {
    await new Deno.Command("umount", { args: ["-l", point], stdout: "null", stderr: "null" })
      .output();
  }
});
