/**
 * The permission sandbox changes nothing a pod sees, end to end on real containerd through the
 * real apiserver. Two agents run side by side, each on a containerd of its own: one as it ships
 * (no flag, the kubelet in its computed permission set, docs/least_privilege.md) and one with
 * `--least-privilege=false`. First, an `httpGet` readiness probe with `scheme: HTTPS` against an
 * agnhost `netexec` serving TLS (its certificate from a secret volume) makes the pod Ready in the
 * sandbox, and the same probe on a closed port keeps a pod not Ready: a past bug failed every
 * HTTPS probe there ("Requires sys access to "ca"", node:tls loading the system's trust store).
 * Then the same set of pods runs under both agents (HTTP, HTTPS, TCP and exec probes passing and
 * failing, a liveness restart, HTTPS postStart and preStop hooks and a failing postStart hook,
 * configMap, secret, emptyDir, tmpfs and hostPath volumes, container logs and exec) and what was
 * observed (readiness, restart counts, the prober's results, events, hook effects, logs, exec
 * output and exit code, files on the host) must be the same. Upstream has no counterpart.
 */

import assert from "node:assert/strict";
import { basename, join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { AGNHOST_VERSION, E2E_REGISTRY, ensureConformanceImages } from "./conformance_images.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import {
  BUSYBOX,
  BUSYBOX_IMAGE,
  HTTPD,
  HTTPD_IMAGE,
  HTTPD_PORT,
  importImages,
  PAUSE,
} from "./images.ts";
import { issueCertificate } from "./pki.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  poll,
  startNodeAgent,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("least-privilege parity e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);

const AGNHOST_IMAGE = `${E2E_REGISTRY}/agnhost:${AGNHOST_VERSION}`;
/** The port agnhost netexec serves HTTPS on in every pod here. */
const TLS_PORT = 8443;
/** A port nothing listens on in any pod here. */
const CLOSED_PORT = 8444;
/** What the sandbox refuses says one of these (Deno's permission errors). */
const REFUSED = /NotCapable|Requires (read|write|run|all|net|env|sys|ffi) access/;

/** One agent and what is its own: its node, namespace, runtime and hostPath directory. */
interface Side {
  /** "on": as it ships, in its permission set; "off": `--least-privilege=false`. */
  readonly sandbox: "on" | "off";
  readonly node: string;
  readonly ns: string;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** The host directory its pods' hostPath volume makes a directory in. */
  readonly host: string;
}

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  /** The sandboxed agent (e2eSuite stops it and checks its exit). */
  readonly agent: RunningAgent;
  readonly on: Side;
  readonly off: Side;
}

const suite = e2eSuite<World>({
  name: "least privilege parity",
  gate,
  userAgent: "least-privilege-parity-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "lp-parity-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const nodes = { on: "kts-lp-parity-on", off: "kts-lp-parity-off" };
      const cp = stack.use(
        await startControlPlane({ dir: join(dir, "cp"), nodeNames: Object.values(nodes) }),
      );
      await Deno.mkdir(join(dir, "tls"));
      const tls = await issueCertificate({
        dir: join(dir, "tls"),
        name: "netexec",
        ca: cp.pki.ca,
        subject: { commonName: "netexec" },
        usage: "server",
        sans: ["localhost"],
      });
      const side = async (sandbox: "on" | "off"): Promise<Side> => {
        const ns = `lp-parity-${sandbox}`;
        // Each agent's directory names its cgroupRoot: unique to this run.
        const own = join(dir, `${basename(dir)}-${sandbox}`);
        const socket = join(own, "containerd", "containerd.sock");
        const containerd = stack.use(
          await startContainerd({ dir: join(own, "containerd"), socket }),
        );
        await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE, HTTPD] });
        const report = await ensureConformanceImages({
          names: [AGNHOST_IMAGE],
          ctr: { address: socket },
        });
        const agnhost = report.images[0];
        assert.ok(agnhost && agnhost.status !== "missing", `agnhost: ${agnhost?.reason}`);
        await createNamespace(cp, ns, tls);
        const { agent } = await startNodeAgent({
          cp,
          dir: own,
          nodeName: nodes[sandbox],
          endpoint: containerd.endpoint,
          // No flag for "on": the sandbox is the default, as it ships.
          extraArgs: sandbox === "off" ? ["--least-privilege=false"] : [],
        });
        stack.defer(async () => {
          agent.process.kill("SIGKILL");
          await agent.process.status;
        });
        const host = join(own, "host");
        await Deno.mkdir(host, { recursive: true });
        await Deno.writeTextFile(join(host, "from-host"), "written by the host\n");
        return { sandbox, node: nodes[sandbox], ns, containerd, agent, host };
      };
      const [on, off] = await Promise.all([side("on"), side("off")]);
      stack.move();
      return { dir, cp, agent: on.agent, on, off };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

/** Namespace `ns` with its default ServiceAccount, the TLS secret and a configMap and secret. */
async function createNamespace(
  cp: ControlPlane,
  ns: string,
  tls: { cert: string; key: string },
): Promise<void> {
  const created = await cp.kubectl(["create", "namespace", ns]);
  assert.equal(created.code, 0, created.stderr);
  await ensureDefaultServiceAccount(cp, ns);
  const b64 = async (path: string) => btoa(await Deno.readTextFile(path));
  await apply(cp, {
    apiVersion: "v1",
    kind: "List",
    items: [
      {
        apiVersion: "v1",
        kind: "Secret",
        type: "kubernetes.io/tls",
        metadata: { name: "netexec-tls", namespace: ns },
        data: { "tls.crt": await b64(tls.cert), "tls.key": await b64(tls.key) },
      },
      {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "cfg", namespace: ns },
        data: { greeting: "from a configMap" },
      },
      {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "sec", namespace: ns },
        stringData: { password: "s3cr3t" },
      },
    ],
  });
}

async function apply(cp: ControlPlane, manifest: unknown): Promise<void> {
  const r = await cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(manifest) });
  assert.equal(r.code, 0, r.stderr);
}

async function kubectl(cp: ControlPlane, args: string[]): Promise<string> {
  const r = await cp.kubectl(args);
  assert.equal(r.code, 0, `kubectl ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** A pod of `side`'s node, grace period 1 s, no service account token. */
function pod(
  side: Side,
  name: string,
  containers: Record<string, unknown>[],
  volumes: unknown[] = [],
): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: side.ns },
    spec: {
      nodeName: side.node,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      // No cluster DNS is configured: "Default" spares each pod a MissingClusterDNS event.
      dnsPolicy: "Default",
      volumes: volumes as never,
      containers: containers.map((c) => ({ imagePullPolicy: "Never", ...c })) as never,
    },
  };
}

/** agnhost netexec serving HTTPS on {@link TLS_PORT} with the secret's certificate. */
function netexec(name: string, probes: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name,
    image: AGNHOST_IMAGE,
    args: [
      "netexec",
      `--http-port=${TLS_PORT}`,
      "--udp-port=-1",
      "--tls-cert-file=/tls/tls.crt",
      "--tls-private-key-file=/tls/tls.key",
    ],
    volumeMounts: [{ name: "tls", mountPath: "/tls", readOnly: true }],
    ...probes,
  };
}

const TLS_VOLUME = { name: "tls", secret: { secretName: "netexec-tls" } };

/** A busybox container that runs `script` and then sleeps, leaving at once on SIGTERM. */
function busybox(name: string, script: string, more: Record<string, unknown> = {}) {
  return {
    name,
    image: BUSYBOX_IMAGE,
    command: ["sh", "-c", `trap 'exit 0' TERM; ${script}; sleep 3600 & wait`],
    ...more,
  };
}

/**
 * A probe every second; three failures in a row count, each may take 5 s: a loaded 2-CPU machine
 * must not fail a probe that should pass.
 */
function probe(handler: Record<string, unknown>, more: Record<string, unknown> = {}) {
  return { ...handler, periodSeconds: 1, failureThreshold: 3, timeoutSeconds: 5, ...more };
}

const https = (port: number, path = "/") => ({ httpGet: { scheme: "HTTPS", port, path } });

function ready(p: V1Pod): string | undefined {
  return p.status?.conditions?.find((c) => c.type === "Ready")?.status;
}

function container(p: V1Pod, name: string) {
  return p.status?.containerStatuses?.find((c) => c.name === name);
}

interface Event {
  reason: string;
  message: string;
  involvedObject: { name: string; fieldPath?: string };
}

async function events(w: World, ns: string): Promise<Event[]> {
  return JSON.parse(await kubectl(w.cp, ["get", "events", "-n", ns, "-o", "json"])).items;
}

/** Waits for an event on pod `name` with `reason` whose message matches; returns the message. */
async function waitEvent(
  w: World,
  ns: string,
  name: string,
  reason: string,
  message: RegExp,
): Promise<string> {
  return await poll(
    `event ${reason} ${message} on ${ns}/${name}`,
    async () =>
      (await events(w, ns)).find((e) =>
        e.involvedObject.name === name && e.reason === reason && message.test(e.message)
      )?.message,
    60_000,
    500,
  );
}

/** The sandboxed agent's stderr lines with a permission error. */
function refusals(agent: RunningAgent): string[] {
  return agent.stderr().split("\n").filter((l) => REFUSED.test(l));
}

suite.test(
  "in the sandbox an HTTPS readiness probe makes a TLS-serving pod Ready; on a closed port it does not",
  async (w, api) => {
    const { on } = w;
    assert.match(on.agent.stderr(), /"Running the kubelet in its permission set"/);
    await apply(
      w.cp,
      pod(on, "https-ready", [netexec("main", { readinessProbe: probe(https(TLS_PORT)) })], [
        TLS_VOLUME,
      ]),
    );
    await apply(
      w.cp,
      pod(on, "https-closed-port", [
        netexec("main", { readinessProbe: probe(https(CLOSED_PORT)) }),
      ], [TLS_VOLUME]),
    );
    const p = await waitPod(api, on.ns, "https-ready", "Ready", (p) => ready(p) === "True");
    assert.equal(container(p, "main")?.ready, true);
    const message = await waitEvent(w, on.ns, "https-closed-port", "Unhealthy", /./);
    assert.match(
      message,
      new RegExp(
        `^Readiness probe failed: Get "https://[\\d.]+:${CLOSED_PORT}/": dial tcp [\\d.]+:${CLOSED_PORT}: connect: connection refused$`,
      ),
    );
    const closed = await waitPod(
      api,
      on.ns,
      "https-closed-port",
      "Running",
      (p) => container(p, "main")?.state?.running !== undefined,
    );
    assert.equal(ready(closed), "False");
    assert.equal(container(closed, "main")?.ready, false);
    // The serving pod stays Ready: its probe keeps passing.
    assert.equal(ready(await waitPod(api, on.ns, "https-ready", "Ready", () => true)), "True");
    assert.deepEqual(refusals(on.agent), []);
  },
);

/** What one side observed, as flat "what: value" pairs, so a difference reads as a diff. */
type Outcome = Record<string, string>;

/**
 * Probes that fail, one pod each: a kubelet's event recorder lets 25 events per object through
 * and then one per 5 minutes (upstream's spam filter), so containers of one pod would crowd out
 * each other's Unhealthy events.
 */
const FAILING = ["https-closed", "http-to-tls", "tcp-closed", "http-404"] as const;

/** An Unhealthy event of a probe that errored (result "unknown"), not failed. */
const UNKNOWN = /probe errored and resulted in unknown state/;

/** Every pod of the set (the hooks pod is deleted on the way). */
const PODS = ["tls", "http", "exec-live", ...FAILING, "volumes", "hooks", "hook-fails"];

/**
 * Runs the pod set on `side` and observes it. Probes of passing pods wait 2 s before the first
 * check, so that no server is probed before it listens (which would fail once, or not).
 */
async function observe(w: World, api: KubeClient, side: Side): Promise<Outcome> {
  const { ns } = side;
  const out: Outcome = {};
  const delay = { initialDelaySeconds: 2 };
  // The HTTPS server, probed over HTTPS and TCP; the hooks' target.
  const tlsPod = pod(side, "tls", [
    netexec("main", {
      readinessProbe: probe(https(TLS_PORT), delay),
      livenessProbe: probe({ tcpSocket: { port: TLS_PORT } }, delay),
    }),
  ], [TLS_VOLUME]);
  // Plain HTTP, with an exec liveness probe.
  const httpPod = pod(side, "http", [{
    name: "main",
    image: HTTPD_IMAGE,
    readinessProbe: probe({ httpGet: { port: HTTPD_PORT, path: "/index.html" } }, delay),
    livenessProbe: probe({ exec: { command: ["test", "-f", "/www/index.html"] } }, delay),
  }]);
  // An exec liveness probe that fails in the first run only (the emptyDir counts the runs):
  // exactly one restart.
  const execPod = pod(side, "exec-live", [
    busybox(
      "main",
      "echo run >> /runs/count; [ $(wc -l < /runs/count) -ge 2 ] && touch /tmp/alive",
      {
        volumeMounts: [{ name: "runs", mountPath: "/runs" }],
        livenessProbe: probe({ exec: { command: ["test", "-f", "/tmp/alive"] } }),
      },
    ),
  ], [{ name: "runs", emptyDir: {} }]);
  // Probes that fail: HTTPS to a closed port, plain HTTP to the TLS server (Go answers 400),
  // TCP to a closed port, an HTTP 404.
  const failing = [
    pod(side, "https-closed", [
      busybox("main", "true", { readinessProbe: probe(https(CLOSED_PORT)) }),
    ]),
    pod(side, "http-to-tls", [
      netexec("main", { readinessProbe: probe({ httpGet: { port: TLS_PORT, path: "/" } }, delay) }),
    ], [TLS_VOLUME]),
    pod(side, "tcp-closed", [
      busybox("main", "true", { readinessProbe: probe({ tcpSocket: { port: CLOSED_PORT } }) }),
    ]),
    pod(side, "http-404", [{
      name: "main",
      image: HTTPD_IMAGE,
      readinessProbe: probe({ httpGet: { port: HTTPD_PORT, path: "/missing" } }, delay),
    }]),
  ];
  // Volumes of every kind the issue names; what the container read goes to its log.
  const volumesPod = pod(side, "volumes", [
    busybox(
      "main",
      [
        "cat /cm/greeting; echo",
        "cat /sec/password; echo",
        "cat /host/from-host",
        "echo on disk > /disk/f; cat /disk/f",
        "echo in memory > /mem/f; cat /mem/f",
        "echo written by the pod > /made/from-pod; cat /made/from-pod",
        "echo done",
      ].join("; "),
      {
        volumeMounts: [
          { name: "cm", mountPath: "/cm" },
          { name: "sec", mountPath: "/sec" },
          { name: "disk", mountPath: "/disk" },
          { name: "mem", mountPath: "/mem" },
          { name: "host", mountPath: "/host", readOnly: true },
          { name: "made", mountPath: "/made" },
        ],
      },
    ),
  ], [
    { name: "cm", configMap: { name: "cfg" } },
    { name: "sec", secret: { secretName: "sec" } },
    { name: "disk", emptyDir: {} },
    { name: "mem", emptyDir: { medium: "Memory" } },
    { name: "host", hostPath: { path: side.host, type: "Directory" } },
    // Made by the type check: in the sandbox by the launcher, else by the kubelet.
    { name: "made", hostPath: { path: join(side.host, "made"), type: "DirectoryOrCreate" } },
  ]);
  await apply(w.cp, {
    apiVersion: "v1",
    kind: "List",
    items: [tlsPod, httpPod, execPod, ...failing, volumesPod],
  });

  const tls = await waitPod(api, ns, "tls", "Ready", (p) => ready(p) === "True");
  const target = tls.status?.podIP;
  assert.ok(target, "the TLS pod's IP");
  // HTTPS hooks against the TLS pod: their requests show in its log.
  const hook = (msg: string, port = TLS_PORT) => ({
    httpGet: { scheme: "HTTPS", host: target, port, path: `/echo?msg=${msg}` },
  });
  await apply(w.cp, {
    apiVersion: "v1",
    kind: "List",
    items: [
      pod(side, "hooks", [
        busybox("main", "true", {
          lifecycle: { postStart: hook("poststart"), preStop: hook("prestop") },
        }),
      ]),
      pod(side, "hook-fails", [
        busybox("main", "true", { lifecycle: { postStart: hook("closed", CLOSED_PORT) } }),
      ]),
    ],
  });

  // Each pod to where it settles.
  await waitPod(api, ns, "http", "Ready", (p) => ready(p) === "True");
  await waitPod(api, ns, "volumes", "Running", (p) => p.status?.phase === "Running");
  await waitPod(api, ns, "hooks", "Running", (p) => p.status?.phase === "Running");
  await waitPod(
    api,
    ns,
    "exec-live",
    "running again after one restart",
    (p) => {
      const c = container(p, "main");
      return c?.restartCount === 1 && c.state?.running !== undefined;
    },
  );
  await waitPod(
    api,
    ns,
    "hook-fails",
    "a restart",
    (p) => (container(p, "main")?.restartCount ?? 0) >= 1,
  );
  for (const name of FAILING) await waitEvent(w, ns, name, "Unhealthy", /./);
  await waitEvent(w, ns, "exec-live", "Killing", /./);
  await waitEvent(w, ns, "hook-fails", "FailedPostStartHook", /./);
  // A second liveness restart of exec-live would come within a few periods.
  await new Promise((r) => setTimeout(r, 3_000));

  // Container logs, exec, the hostPath file written by the pod.
  out["hostPath: the pod's file on the host"] = await Deno.readTextFile(
    join(side.host, "made", "from-pod"),
  );
  out["logs volumes"] = await kubectl(w.cp, ["logs", "-n", ns, "volumes"]);
  const exec = await w.cp.kubectl([
    ...["exec", "-n", ns, "volumes", "--", "sh", "-c"],
    "grep ' /mem ' /proc/mounts | cut -d' ' -f3; ls /cm; ls /sec; echo to stderr >&2; exit 3",
  ]);
  out["exec stdout"] = exec.stdout;
  out["exec exit code"] = String(exec.code);

  // The preStop hook: delete the pod and wait for it to go.
  const del = await w.cp.kubectl(["delete", "pod", "-n", ns, "hooks", "--wait=false"]);
  assert.equal(del.code, 0, del.stderr);
  await waitPodGone(api, ns, "hooks", 60_000);
  const netexecLog = await kubectl(w.cp, ["logs", "-n", ns, "tls"]);
  for (const msg of ["poststart", "prestop"]) {
    out[`hook ${msg} reached the TLS pod`] = String(netexecLog.includes(`GET /echo?msg=${msg}`));
  }

  // Readiness and restarts.
  for (const name of PODS.filter((n) => n !== "hooks" && n !== "hook-fails")) {
    const p = await waitPod(api, ns, name, "read", () => true);
    out[`${name}: Ready`] = ready(p) ?? "";
    for (const c of p.status?.containerStatuses ?? []) {
      out[`${name}/${c.name}: ready, restarts`] = `${c.ready}, ${c.restartCount}`;
    }
  }
  const fails = await waitPod(api, ns, "hook-fails", "read", () => true);
  out["hook-fails/main: restarted"] = String((container(fails, "main")?.restartCount ?? 0) >= 1);

  // Events of the probes and hooks, the addresses and this side's namespace taken out.
  const normal = (s: string) => s.replace(/\d+\.\d+\.\d+\.\d+/g, "<ip>").replaceAll(ns, "<ns>");
  const byPod = new Map<string, Set<string>>();
  for (const e of await events(w, ns)) {
    if (!["Unhealthy", "Killing", "FailedPostStartHook", "FailedPreStopHook"].includes(e.reason)) {
      continue;
    }
    // A probe that runs while its container is being killed errors, or not, by timing.
    if (UNKNOWN.test(e.message)) continue;
    const set = byPod.get(e.involvedObject.name) ?? new Set();
    set.add(`${e.reason}: ${normal(e.message)}`);
    byPod.set(e.involvedObject.name, set);
  }
  for (const name of PODS) out[`events ${name}`] = [...byPod.get(name) ?? []].sort().join(" | ");

  // The prober's results per probe (/metrics/probes): which results each probe has had.
  const metrics = await kubectl(w.cp, [
    "get",
    "--raw",
    `/api/v1/nodes/${side.node}/proxy/metrics/probes`,
  ]);
  const results = new Map<string, Set<string>>();
  for (const line of metrics.split("\n")) {
    const m = /^prober_probe_total\{(.*)\} (\S+)$/.exec(line);
    if (!m || Number(m[2]) === 0) continue;
    const labels = Object.fromEntries(
      [...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]),
    );
    // Only this set's pods: the first test's run in the sandboxed side's namespace too.
    if (labels.namespace !== ns || !PODS.includes(labels.pod!)) continue;
    const key = `probe ${labels.pod}/${labels.container} ${labels.probe_type}`;
    const set = results.get(key) ?? new Set();
    if (labels.result === "unknown") continue; // as UNKNOWN above
    set.add(labels.result!);
    results.set(key, set);
  }
  for (const [key, set] of results) out[key] = [...set].sort().join(",");
  return out;
}

suite.test(
  "the same pods behave the same with the sandbox on and off",
  async (w, api) => {
    const [on, off] = await Promise.all([observe(w, api, w.on), observe(w, api, w.off)]);
    assert.deepEqual(on, off, "what the pods saw differs between the sandbox on and off");
    // And it is what a kubelet should make of these pods, so that both failing alike cannot pass.
    const refused = (port: number, https = false) =>
      `Unhealthy: Readiness probe failed: ${
        https ? `Get "https://<ip>:${port}/": ` : ""
      }dial tcp <ip>:${port}: connect: connection refused`;
    const expect: Outcome = {
      "tls: Ready": "True",
      "tls/main: ready, restarts": "true, 0",
      "http: Ready": "True",
      "http/main: ready, restarts": "true, 0",
      "exec-live: Ready": "True",
      "exec-live/main: ready, restarts": "true, 1",
      "volumes: Ready": "True",
      ...Object.fromEntries(
        FAILING.flatMap((
          n,
        ) => [[`${n}: Ready`, "False"], [`${n}/main: ready, restarts`, "false, 0"]]),
      ),
      "hook-fails/main: restarted": "true",
      "hook poststart reached the TLS pod": "true",
      "hook prestop reached the TLS pod": "true",
      "probe tls/main Readiness": "successful",
      "probe tls/main Liveness": "successful",
      "probe http/main Readiness": "successful",
      "probe http/main Liveness": "successful",
      "probe exec-live/main Liveness": "failed,successful",
      ...Object.fromEntries(FAILING.map((n) => [`probe ${n}/main Readiness`, "failed"])),
      "events tls": "",
      "events http": "",
      "events volumes": "",
      "events hooks": "Killing: Stopping container main",
      "events hook-fails":
        "FailedPostStartHook: PostStartHook failed | Killing: FailedPostStartHook",
      "events exec-live": "Killing: Container main failed liveness probe, will be restarted | " +
        "Unhealthy: Liveness probe failed: ",
      "events https-closed": refused(CLOSED_PORT, true),
      "events http-to-tls":
        "Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 400",
      "events tcp-closed": refused(CLOSED_PORT),
      "events http-404":
        "Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 404",
      "exec stdout": "tmpfs\ngreeting\npassword\n",
      "exec exit code": "3",
      "hostPath: the pod's file on the host": "written by the pod\n",
      "logs volumes":
        "from a configMap\ns3cr3t\nwritten by the host\non disk\nin memory\nwritten by the pod\ndone\n",
    };
    for (const [what, value] of Object.entries(expect)) {
      assert.equal(
        on[what],
        value,
        `${what}; all that was observed: ${JSON.stringify(on, null, 2)}`,
      );
    }
    assert.deepEqual(refusals(w.on.agent), []);
    assert.doesNotMatch(w.off.agent.stderr(), /"Running the kubelet in its permission set"/);
  },
);

suite.teardown("stop", async (w) => {
  // e2eSuite's teardown has stopped the sandboxed agent; the other must exit 0 on SIGTERM too.
  try {
    w.off.agent.process.kill("SIGTERM");
    const st = await w.off.agent.process.status;
    assert.equal(st.code, 0, w.off.agent.stderr().split("\n").slice(-20).join("\n"));
  } finally {
    await Promise.all([w.on.containerd.stop(), w.off.containerd.stop()]);
  }
});
