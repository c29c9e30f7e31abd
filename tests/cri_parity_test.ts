/**
 * The CRI container config this agent sends, field by field against the Go kubelet v1.36.3's
 * for the same pods, as the runtime received it. One control plane, two containerd 1.6
 * instances, our agent on one node and the upstream kubelet on the other, both with the bench
 * harness's shared KubeletConfiguration (tests/_bench_agents.ts: `failSwapOn: false`, cgroupfs,
 * a cgroupRoot each). The same pods run in two namespaces, one per node: BestEffort; Burstable
 * with requests and limits, the service account token, a configMap and an emptyDir; Guaranteed;
 * privileged; a restricted security context (read-only root filesystem, user and group,
 * capabilities, no privilege escalation, RuntimeDefault seccomp); secret, downwardAPI, hostPath
 * and memory emptyDir volumes with env from fields, resources, a secret and a configMap, an init
 * container, tty and stdin; host network.
 *
 * For each container `crictl inspect` gives `info.config` (the CRI ContainerConfig containerd
 * stored from CreateContainer) and `info.runtimeSpec` (the OCI spec it built from it). Values
 * that legitimately differ are normalised first: ids, pod UIDs, namespaces, each node's directory
 * and containerd's, the cgroupRoot, process ids in namespace paths, the service account volume's
 * random suffix, the termination-log file's random name. What then differs fails the test, each
 * field path with both values, unless {@link ALLOWED} lists it with its reason.
 *
 * What this cannot see: CRI fields containerd 1.6 does not know are dropped when it decodes the
 * request (e.g. `Mount.image_sub_path`, `supplemental_groups_policy`), so they compare equal.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { RunningAgent } from "./agent_process.ts";
import { type BenchAgent, sharedConfigLines, startUpstreamKubelet } from "./_bench_agents.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { ensureControlPlaneBinaries } from "./control_plane_build.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  startNodeAgent,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("CRI parity e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);

/** Our agent's node and the namespace of its pods. */
const OURS = { node: "kts-cri-ours", ns: "cri-ours", sub: "node-ours", runtime: "c-ours" };
/** The Go kubelet's node and the namespace of its pods. */
const UPSTREAM = { node: "kts-cri-up", ns: "cri-up", sub: "node-up", runtime: "c-up" };
type Side = typeof OURS;

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly crictl: string;
  readonly containerdOurs: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly containerdUpstream: ContainerdHandle;
  readonly upstream: BenchAgent;
}

const suite = e2eSuite<World>({
  name: "CRI parity",
  gate,
  userAgent: "cri-parity-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "cri-parity-" });
    const stack = new AsyncDisposableStack();
    try {
      const crictl = (await ensureControlPlaneBinaries()).crictl;
      const cp = stack.use(
        await startControlPlane({ dir: join(dir, "cp"), nodeNames: [OURS.node, UPSTREAM.node] }),
      );
      for (const side of [OURS, UPSTREAM]) {
        const r = await cp.kubectl(["create", "namespace", side.ns]);
        assert.equal(r.code, 0, r.stderr);
        await ensureDefaultServiceAccount(cp, side.ns);
        await ensureRootCAConfigMap(cp, side.ns);
      }
      const runtime = async (side: Side) => {
        const socket = join(dir, side.runtime, "containerd.sock");
        const c = stack.use(
          await startContainerd({ dir: join(dir, side.runtime), socket, runtime: "containerd" }),
        );
        await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
        return c;
      };
      const containerdOurs = await runtime(OURS);
      const containerdUpstream = await runtime(UPSTREAM);
      const nodeDir = join(dir, OURS.sub);
      await Deno.mkdir(nodeDir, { recursive: true });
      const { agent } = await startNodeAgent({
        cp,
        dir: nodeDir,
        nodeName: OURS.node,
        endpoint: containerdOurs.endpoint,
        configLines: sharedConfigLines(nodeDir),
      });
      stack.defer(async () => {
        agent.process.kill("SIGTERM");
        await agent.process.status;
      });
      const upstream = await startUpstreamKubelet({
        cp,
        dir: join(dir, UPSTREAM.sub),
        nodeName: UPSTREAM.node,
        endpoint: containerdUpstream.endpoint,
        log: (line) => console.error(line),
      });
      stack.move();
      return { dir, cp, crictl, containerdOurs, agent, containerdUpstream, upstream };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

const SLEEP = ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"];

/** The pods both nodes run, by name (the namespace and node are the side's). */
function pods(): Record<string, Record<string, unknown>> {
  const container = (extra: Record<string, unknown> = {}) => ({
    name: "main",
    image: BUSYBOX_IMAGE,
    imagePullPolicy: "IfNotPresent",
    command: SLEEP,
    ...extra,
  });
  return {
    "best-effort": {
      automountServiceAccountToken: false,
      containers: [container({ env: [{ name: "GREETING", value: "hello $(HOME)" }] })],
    },
    "burstable": {
      containers: [
        container({
          resources: {
            requests: { cpu: "100m", memory: "32Mi" },
            limits: { cpu: "250m", memory: "64Mi" },
          },
          ports: [{ containerPort: 8080, name: "http" }],
          volumeMounts: [
            { name: "config", mountPath: "/etc/config", readOnly: true },
            { name: "scratch", mountPath: "/scratch" },
            { name: "scratch", mountPath: "/scratch-again", subPath: "again" },
          ],
        }),
        {
          ...container({ name: "sidecar", args: ["ignored"] }),
          resources: { requests: { cpu: "50m" } },
          terminationMessagePolicy: "FallbackToLogsOnError",
          volumeMounts: [{ name: "scratch", mountPath: "/shared" }],
        },
      ],
      volumes: [
        { name: "config", configMap: { name: "cri-parity" } },
        { name: "scratch", emptyDir: {} },
      ],
    },
    "guaranteed": {
      automountServiceAccountToken: false,
      containers: [
        container({
          resources: {
            requests: { cpu: "200m", memory: "48Mi" },
            limits: { cpu: "200m", memory: "48Mi" },
          },
        }),
      ],
    },
    "privileged": {
      automountServiceAccountToken: false,
      containers: [container({ securityContext: { privileged: true } })],
    },
    "restricted": {
      automountServiceAccountToken: false,
      securityContext: { runAsUser: 1000, runAsGroup: 2000, fsGroup: 3000 },
      containers: [
        container({
          securityContext: {
            readOnlyRootFilesystem: true,
            runAsUser: 1001,
            allowPrivilegeEscalation: false,
            capabilities: { add: ["NET_BIND_SERVICE"], drop: ["ALL"] },
            seccompProfile: { type: "RuntimeDefault" },
          },
        }),
      ],
    },
    "volumes": {
      automountServiceAccountToken: false,
      initContainers: [container({ name: "init", command: ["/bin/true"] })],
      containers: [
        container({
          workingDir: "/tmp",
          stdin: true,
          tty: true,
          terminationMessagePath: "/tmp/termination",
          env: [
            { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
            { name: "NODE", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } },
            {
              name: "MEMORY",
              valueFrom: { resourceFieldRef: { resource: "limits.memory", divisor: "1Mi" } },
            },
            {
              name: "FROM_SECRET",
              valueFrom: { secretKeyRef: { name: "cri-parity", key: "key" } },
            },
          ],
          envFrom: [{ configMapRef: { name: "cri-parity" }, prefix: "CM_" }],
          volumeMounts: [
            { name: "secret", mountPath: "/etc/secret" },
            { name: "downward", mountPath: "/etc/podinfo", readOnly: true },
            { name: "host", mountPath: "/host-tmp", readOnly: true },
            { name: "memory", mountPath: "/cache" },
          ],
        }),
      ],
      volumes: [
        { name: "secret", secret: { secretName: "cri-parity", defaultMode: 0o400 } },
        {
          name: "downward",
          downwardAPI: { items: [{ path: "labels", fieldRef: { fieldPath: "metadata.labels" } }] },
        },
        { name: "host", hostPath: { path: "/tmp", type: "Directory" } },
        { name: "memory", emptyDir: { medium: "Memory", sizeLimit: "16Mi" } },
      ],
    },
    "host-network": {
      automountServiceAccountToken: false,
      hostNetwork: true,
      containers: [container()],
    },
  };
}

async function createPods(w: World, side: Side): Promise<void> {
  const cm = await w.cp.kubectl([
    ...["create", "configmap", "cri-parity", "-n", side.ns],
    "--from-literal=key=value",
  ]);
  assert.equal(cm.code, 0, cm.stderr);
  const secret = await w.cp.kubectl([
    ...["create", "secret", "generic", "cri-parity", "-n", side.ns],
    "--from-literal=key=secret-value",
  ]);
  assert.equal(secret.code, 0, secret.stderr);
  const items = Object.entries(pods()).map(([name, spec]) => ({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: side.ns, labels: { e2e: "cri-parity" } },
    spec: { nodeName: side.node, terminationGracePeriodSeconds: 2, ...spec },
  }));
  const r = await w.cp.kubectl(["create", "-f", "-"], {
    stdin: JSON.stringify({ apiVersion: "v1", kind: "List", items }),
  });
  assert.equal(r.code, 0, r.stderr);
}

/** The last lines of `side`'s kubelet log that name pod `name`. */
function kubeletLines(w: World, side: Side, name: string): string {
  const stderr = side === OURS ? w.agent.stderr() : w.upstream.stderr();
  return stderr.split("\n").filter((l) => l.includes(`${side.ns}/${name}`)).slice(-30).join("\n");
}

/** What containerd shows of one container. */
interface CriView {
  readonly config: unknown;
  readonly runtimeSpec: unknown;
}

async function crictl(w: World, endpoint: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(w.crictl, {
    args: ["--runtime-endpoint", endpoint, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  assert.ok(out.success, `crictl ${args.join(" ")}: ${dec.decode(out.stderr)}`);
  return dec.decode(out.stdout);
}

/** Every container of `side`'s namespace on `endpoint`, by "<pod>/<container>". */
async function criViews(w: World, endpoint: string, side: Side): Promise<Map<string, CriView>> {
  const list = JSON.parse(
    await crictl(w, endpoint, [
      ...["ps", "-a", "-o", "json", "--label", `io.kubernetes.pod.namespace=${side.ns}`],
    ]),
  ) as { containers: { id: string; labels: Record<string, string> }[] };
  const views = new Map<string, CriView>();
  for (const c of list.containers) {
    const key = `${c.labels["io.kubernetes.pod.name"]}/${c.labels["io.kubernetes.container.name"]}`;
    const inspected = JSON.parse(await crictl(w, endpoint, ["inspect", "-o", "json", c.id])) as {
      info: { config: unknown; runtimeSpec: unknown };
    };
    views.set(key, { config: inspected.info.config, runtimeSpec: inspected.info.runtimeSpec });
  }
  return views;
}

/** The replacements that make one side's values comparable with the other's. */
function normaliser(w: World, side: Side, uids: readonly string[]): (s: string) => string {
  const rules: Array<[string | RegExp, string]> = [
    [join(w.dir, side.sub), "<node-dir>"],
    [join(w.dir, side.runtime), "<containerd-dir>"],
    // writeKubeletConfig's cgroupRoot: /kubelet-ts-e2e/<basename of the node dir>.
    [`/kubelet-ts-e2e/${side.sub}`, "<cgroup-root>"],
    ...uids.flatMap((uid): Array<[string, string]> => [
      [uid, "<uid>"],
      [uid.replaceAll("-", "_"), "<uid>"],
    ]),
    [side.node, "<node>"],
    [side.ns, "<ns>"],
    [/\b[0-9a-f]{64}\b/g, "<id>"],
    [/\/proc\/\d+\//g, "/proc/<pid>/"],
    [/kube-api-access-[a-z0-9]{5}\b/g, "kube-api-access-<rand>"],
    // upstream makeUID: the termination-log file of each container instance.
    [/(\/containers\/[a-z0-9-]+\/)[0-9a-f]{8}$/g, "$1<rand>"],
  ];
  return (s) => {
    for (const [from, to] of rules) {
      s = typeof from === "string" ? s.replaceAll(from, to) : s.replace(from, to);
    }
    return s;
  };
}

/** `value` with every string (and object key) passed through `f`. */
function mapStrings(value: unknown, f: (s: string) => string): unknown {
  if (typeof value === "string") return f(value);
  if (Array.isArray(value)) return value.map((v) => mapStrings(v, f));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [f(k), mapStrings(v, f)]),
    );
  }
  return value;
}

/** Leaf values by JSON path (`config.linux.resources.cpu_shares`, `...mounts[2].host_path`). */
function leaves(value: unknown, path: string, out: Map<string, string>): Map<string, string> {
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((v, i) => leaves(v, `${path}[${i}]`, out));
  } else if (value !== null && typeof value === "object" && Object.keys(value).length > 0) {
    for (const [k, v] of Object.entries(value)) leaves(v, `${path}.${k}`, out);
  } else {
    out.set(path, JSON.stringify(value));
  }
  return out;
}

/** One field that differs: its path and both sides' values ("<absent>" where missing). */
interface Difference {
  readonly path: string;
  readonly ours: string;
  readonly upstream: string;
}

function differences(ours: unknown, upstream: unknown, root: string): Difference[] {
  const a = leaves(ours, root, new Map());
  const b = leaves(upstream, root, new Map());
  const out: Difference[] = [];
  for (const path of new Set([...a.keys(), ...b.keys()])) {
    const x = a.get(path) ?? "<absent>";
    const y = b.get(path) ?? "<absent>";
    if (x !== y) out.push({ path, ours: x, upstream: y });
  }
  return out;
}

/**
 * The environment in name order, on both sides: upstream appends the service link variables
 * (KUBERNETES_SERVICE_HOST, ...) in Go's map order, which differs from container to container.
 */
function sortEnv(view: CriView): CriView {
  const config = view.config as { envs?: { key: string }[] };
  const spec = view.runtimeSpec as { process?: { env?: string[] } };
  return {
    config: {
      ...config,
      envs: [...(config.envs ?? [])].sort((a, b) => a.key.localeCompare(b.key)),
    },
    runtimeSpec: {
      ...spec,
      process: { ...spec.process, env: [...(spec.process?.env ?? [])].sort() },
    },
  };
}

/**
 * Differences that are expected, each with its reason: a pattern of the whole line
 * ("<pod>/<container> <path>: ours <value>, upstream <value>"), so that only that field of that
 * container with those values passes.
 */
const ALLOWED: ReadonlyArray<{ readonly line: RegExp; readonly reason: string }> = [
  {
    // burstable/main mounts the emptyDir "scratch" a second time with subPath "again".
    line: new RegExp(
      String
        .raw`^burstable/main (config\.mounts\[\d+\]\.host_path|runtimeSpec\.mounts\[\d+\]\.source): ` +
        String
          .raw`ours "<node-dir>/root/pods/<uid>/volumes/kubernetes\.io~empty-dir/scratch/again", ` +
        String.raw`upstream "<node-dir>/root/pods/<uid>/volume-subpaths/scratch/main/\d+"$`,
    ),
    reason: "a subPath: upstream bind-mounts it at volume-subpaths/<volume>/<container>/<index> " +
      "and hands over that mount; ours hands over the checked real path inside the volume",
  },
];

suite.test(
  "CreateContainer configs and OCI specs equal the Go kubelet's",
  async (w, api) => {
    const running = async (side: Side) => {
      await createPods(w, side);
      const uids: string[] = [];
      for (const name of Object.keys(pods())) {
        const p = await waitPod(
          api,
          side.ns,
          name,
          "Running",
          (p) =>
            p.status?.phase === "Running" &&
            (p.status.containerStatuses ?? []).every((c) => c.ready),
          120_000,
        );
        uids.push(p.metadata?.uid ?? "");
        // A restart changes the attempt, the log path and the restart count annotation.
        for (const c of p.status?.containerStatuses ?? []) {
          assert.equal(
            c.restartCount,
            0,
            `${side.ns}/${name}/${c.name} restarted: ${JSON.stringify(c.lastState)}\n` +
              kubeletLines(w, side, name),
          );
        }
      }
      return uids;
    };
    const [oursUids, upstreamUids] = await Promise.all([running(OURS), running(UPSTREAM)]);
    const ours = await criViews(w, w.containerdOurs.endpoint, OURS);
    const theirs = await criViews(w, w.containerdUpstream.endpoint, UPSTREAM);
    assert.deepEqual([...ours.keys()].sort(), [...theirs.keys()].sort());
    // One container per pod, two in burstable, and the init container of volumes.
    assert.equal(ours.size, Object.keys(pods()).length + 2, [...ours.keys()].join(", "));

    const normOurs = normaliser(w, OURS, oursUids);
    const normTheirs = normaliser(w, UPSTREAM, upstreamUids);
    const failures: string[] = [];
    const allowed: string[] = [];
    for (const [key, view] of [...ours].sort(([a], [b]) => a.localeCompare(b))) {
      const other = theirs.get(key)!;
      for (const part of ["config", "runtimeSpec"] as const) {
        for (
          const d of differences(
            mapStrings(sortEnv(view)[part], normOurs),
            mapStrings(sortEnv(other)[part], normTheirs),
            part,
          )
        ) {
          const line = `${key} ${d.path}: ours ${d.ours}, upstream ${d.upstream}`;
          const allow = ALLOWED.find((a) => a.line.test(line));
          if (allow) allowed.push(`${line} (${allow.reason})`);
          else failures.push(line);
        }
      }
    }
    if (allowed.length > 0) console.error(`allowed differences:\n${allowed.join("\n")}`);
    assert.deepEqual(
      failures,
      [],
      `fields that differ from the Go kubelet's:\n${failures.join("\n")}`,
    );
  },
);

suite.teardown("stop", async (w) => {
  const code = await w.upstream.stop();
  if (code !== 0) console.error(`the Go kubelet exited ${code}`);
  await w.containerdUpstream.stop();
  await w.containerdOurs.stop();
});
