/**
 * Fuzzing the agent's inputs (src/testing/fuzz.ts): KubeletConfiguration files, static pod manifests,
 * odd but schema-valid API pods through admission, QoS, actions and status generation, CRI
 * replies with missing fields, unknown enums and huge strings, and requests to the kubelet API.
 * Every case must be accepted or rejected with a clear error (a config or manifest error names
 * its file), never crash or hang. Seeds are fixed and printed; a failure prints its seed, case
 * index and input. Short counts by default (FUZZ_CASES overrides); FUZZ_FULL=1 runs 10 000 per
 * target and writes tests/results/fuzz-<date>.md (`deno task fuzz`).
 */

import assert from "node:assert/strict";
import { connect } from "node:tls";
import { connect as connectTcp } from "node:net";
import { join } from "node:path";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import { parse, stringify } from "yaml";
import * as api from "../proto/runtime/v1/api.ts";
import {
  damageText,
  type FuzzReport,
  mutate,
  oddString,
  Rng,
  runFuzz,
} from "../src/testing/fuzz.ts";
import { computePodActions } from "../src/kuberuntime/pod_actions.ts";
import { staticPodFromManifest, StaticPodManifestError } from "../src/config/static_pod_decode.ts";
import { ConfigError } from "../src/apis/config_schema.ts";
import { createLogger } from "../src/klog/klog.ts";
import { loadKubeletConfiguration } from "../src/app/kubelet_config.ts";
import { generateAPIPodStatus } from "../src/kubelet_pods.ts";
import { newContainerLabels } from "../src/kuberuntime/labels.ts";
import { admitPod } from "../src/lifecycle/predicate.ts";
import type { PodStatus } from "../src/container/pod_cache.ts";
import { computePodQOS } from "../src/qos/qos.ts";
import { serveKubeletAPI } from "../src/server/server.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { PodCache } from "../src/container/pod_cache.ts";
import { GenericPLEG } from "../src/pleg/generic.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import { FakeClock } from "../src/util/clock.ts";
import { REPO_ROOT } from "./agent_process.ts";

const FULL = Deno.env.get("FUZZ_FULL") === "1";
const CASES = FULL ? 10_000 : Number(Deno.env.get("FUZZ_CASES") ?? 400);
const SEED = Number(Deno.env.get("FUZZ_SEED") ?? 20261203);
const reports: FuzzReport[] = [];

function assertClean(r: FuzzReport): void {
  reports.push(r);
  console.log(
    `fuzz ${r.target}: seed ${r.seed}, ${r.cases} cases, ${r.accepted} accepted, ` +
      `${r.rejected} rejected, ${r.failures.length} failed, ${Math.round(r.ms)} ms`,
  );
  const f = r.failures[0];
  assert.equal(
    r.failures.length,
    0,
    f &&
      `${r.failures.length} failures; first: case ${f.index} (case seed ${f.seed}, run seed ${r.seed}):\n` +
        `${f.error}\ninput: ${f.input}`,
  );
}

// ---- KubeletConfiguration files --------------------------------------------------------------

const EXAMPLE_CONFIG = parse(await Deno.readTextFile(join(REPO_ROOT, "deploy", "kubelet.yaml")));

Deno.test("fuzz KubeletConfiguration files: loaded, or one ConfigError naming the file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fuzz-config-" });
  const file = join(dir, "kubelet.yaml");
  try {
    assertClean(
      await runFuzz({
        target: "KubeletConfiguration",
        seed: SEED,
        cases: CASES,
        generate: (rng) => {
          const cfg = mutate(rng, EXAMPLE_CONFIG);
          const text = rng.chance(0.3) ? JSON.stringify(cfg) : stringify(cfg);
          return rng.chance(0.3) ? damageText(rng, text) : text;
        },
        async run(text): Promise<"accepted"> {
          await Deno.writeTextFile(file, text);
          await loadKubeletConfiguration({
            configFile: file,
            dropinDir: "",
            flags: [],
            cgroupV1: false,
          });
          return "accepted";
        },
        check: (e) =>
          !(e instanceof ConfigError)
            ? `not a ConfigError: ${e.name}: ${e.message}`
            : e.message.startsWith(file)
            ? undefined
            : `does not name the file: ${e.message}`,
        show: (t) => t,
      }),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// ---- Static pod manifests ---------------------------------------------------------------------

const EXAMPLE_POD: V1Pod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: "web", namespace: "default", labels: { app: "web" }, annotations: { a: "b" } },
  spec: {
    restartPolicy: "Always",
    terminationGracePeriodSeconds: 30,
    priority: 0,
    hostNetwork: false,
    dnsPolicy: "ClusterFirst",
    securityContext: {
      runAsUser: 1000,
      fsGroup: 2000,
      sysctls: [{ name: "net.ipv4.ip_local_port_range", value: "1024 65000" }],
    },
    initContainers: [{ name: "init", image: "busybox:1.36", command: ["true"] }],
    containers: [{
      name: "main",
      image: "busybox:1.36",
      imagePullPolicy: "IfNotPresent",
      command: ["sh", "-c", "sleep 3600"],
      args: ["$(X)"],
      env: [{ name: "X", value: "1" }, {
        name: "Y",
        valueFrom: { fieldRef: { fieldPath: "metadata.name" } },
      }],
      ports: [{ containerPort: 80, hostPort: 8080, protocol: "TCP" }],
      resources: {
        requests: { cpu: "100m", memory: "64Mi" },
        limits: { cpu: "1", memory: "128Mi" },
      },
      livenessProbe: { exec: { command: ["true"] }, periodSeconds: 10 },
      readinessProbe: { httpGet: { path: "/", port: 80 } },
      volumeMounts: [{ name: "data", mountPath: "/data" }],
    }],
    volumes: [{ name: "data", emptyDir: { sizeLimit: "1Gi" } }],
    tolerations: [{ key: "k", operator: "Exists", effect: "NoExecute" }],
  },
};

Deno.test("fuzz static pod manifests: a pod, or one error naming the file", async () => {
  const file = "/etc/kubernetes/manifests/web.yaml";
  assertClean(
    await runFuzz({
      target: "static pod manifest",
      seed: SEED + 1,
      cases: CASES,
      generate: (rng) => {
        const pod = mutate(rng, EXAMPLE_POD);
        const text = rng.chance(0.3) ? JSON.stringify(pod) : stringify(pod);
        return rng.chance(0.3) ? damageText(rng, text) : text;
      },
      run(text): "accepted" {
        staticPodFromManifest(text, file, "node-1");
        return "accepted";
      },
      check: (e) =>
        !(e instanceof StaticPodManifestError)
          ? `not a StaticPodManifestError: ${e.name}: ${e.message}`
          : e.message.includes(file)
          ? undefined
          : `does not name the file: ${e.message}`,
      show: (t) => t,
    }),
  );
});

// ---- API pods and CRI replies --------------------------------------------------------------

const NODE: V1Node = {
  metadata: { name: "node-1", labels: { "kubernetes.io/os": "linux" } },
  spec: { taints: [{ key: "k", effect: "NoExecute" }] },
  status: { allocatable: { cpu: "4", memory: "8Gi", pods: "110", "ephemeral-storage": "100Gi" } },
};

/** A schema-valid but odd pod: strings, numbers, lists of the right types, odd values. */
function oddPod(rng: Rng): V1Pod {
  const pod = mutate(rng, EXAMPLE_POD, { sameType: true });
  pod.metadata = { ...pod.metadata, uid: `uid-${rng.int(1e9)}` };
  // Quantities are validated by the apiserver; keep them valid but extreme.
  const q = () => rng.pick(["0", "1", "1m", "1n", "999999999999", "1Ei", "0.5", "1e3", "100Mi"]);
  for (const c of [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])]) {
    if (c?.resources && typeof c.resources === "object") {
      c.resources = { requests: { cpu: q(), memory: q() }, limits: { cpu: q(), memory: q() } };
    }
  }
  return pod;
}

const CRI_STATES = [0, 1, 2, 3, 7, -1];

/** A CRI ContainerStatus as a runtime might send it: fields missing, enums unknown, strings huge. */
function oddContainerStatus(rng: Rng, pod: V1Pod): api.ContainerStatus {
  const c = rng.pick(pod.spec?.containers?.length ? pod.spec.containers : [{ name: "x" }]);
  const labels = rng.chance(0.8) ? newContainerLabels(c as never, pod) : {};
  if (rng.chance(0.2)) labels["io.kubernetes.container.name"] = oddString(rng);
  return api.ContainerStatus.create({
    id: rng.chance(0.1) ? "" : rng.chance(0.1) ? oddString(rng) : `c-${rng.int(5)}`,
    state: rng.pick(CRI_STATES) as api.ContainerState,
    exitCode: rng.pick([0, 1, 137, -1, 2147483647]),
    createdAt: BigInt(rng.pick([0, -1, 1, 1e18, 9e15])),
    startedAt: BigInt(rng.pick([0, -5, 1e18])),
    finishedAt: BigInt(rng.pick([0, -5, 1e18])),
    reason: rng.chance(0.5) ? "" : oddString(rng),
    message: rng.chance(0.5) ? "" : oddString(rng),
    labels,
    annotations: rng.chance(0.5) ? {} : { "io.kubernetes.container.restartCount": oddString(rng) },
    image: rng.chance(0.3)
      ? undefined
      : { image: oddString(rng), annotations: {}, userSpecifiedImage: "", runtimeHandler: "" },
    imageRef: oddString(rng),
    metadata: rng.chance(0.2) ? undefined : { name: oddString(rng), attempt: rng.int(5) },
  });
}

function oddSandbox(rng: Rng, pod: V1Pod): api.PodSandboxStatus {
  return api.PodSandboxStatus.create({
    id: rng.chance(0.1) ? "" : `s-${rng.int(3)}`,
    state: rng.pick([0, 1, 5]) as api.PodSandboxState,
    createdAt: BigInt(rng.pick([0, -1, 1e18])),
    metadata: rng.chance(0.2) ? undefined : {
      name: pod.metadata?.name ?? "",
      namespace: "default",
      uid: pod.metadata?.uid ?? "",
      attempt: rng.int(3),
    },
    network: rng.chance(0.3)
      ? undefined
      : { ip: rng.pick(["10.0.0.1", "", "::1", oddString(rng)]), additionalIps: [] },
    linux: rng.chance(0.5)
      ? undefined
      : { namespaces: { options: { network: rng.pick([0, 1, 2, 9]) as api.NamespaceMode } } },
  });
}

Deno.test("fuzz API pods and CRI replies: admission, QoS, actions and status never crash", async () => {
  assertClean(
    await runFuzz({
      target: "API pod + CRI replies",
      seed: SEED + 2,
      cases: CASES,
      generate: (rng) => {
        const pod = oddPod(rng);
        const podStatus: PodStatus = {
          id: pod.metadata?.uid ?? "",
          name: pod.metadata?.name ?? "",
          namespace: pod.metadata?.namespace ?? "",
          ips: rng.chance(0.5) ? [] : [oddString(rng)],
          sandboxStatuses: Array.from({ length: rng.int(3) }, () => oddSandbox(rng, pod)),
          containerStatuses: Array.from({ length: rng.int(4) }, () => oddContainerStatus(rng, pod)),
          timestamp: 0,
        };
        return { pod, podStatus, terminal: rng.chance(0.2) };
      },
      run({ pod, podStatus, terminal }): "accepted" {
        admitPod({ pod, otherPods: [EXAMPLE_POD], node: NODE });
        computePodQOS(pod);
        computePodActions(pod, podStatus);
        generateAPIPodStatus({
          pod,
          podStatus,
          podIsTerminal: terminal,
          reasons: { get: () => undefined },
          hostIPs: ["10.0.0.1"],
          now: new Date(0),
        });
        return "accepted";
      },
      show: (v) => JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x)),
    }),
  );
});

// ---- CRI replies over gRPC, from the fake runtime ---------------------------------------------

const MAP_FIELDS = new Set(["labels", "annotations", "info", "extra"]);

/** A CRI reply damaged as a runtime might: fields emptied or missing, enums unknown, huge strings. */
function damageReply(rng: Rng, v: unknown, key = ""): unknown {
  if (typeof v === "string") return rng.pick(["", oddString(rng), "x".repeat(100_000), v]);
  if (typeof v === "number") return rng.pick([0, -1, 7, 99, 2147483647, v]);
  if (typeof v === "bigint") return rng.pick([0n, -1n, 2n ** 62n, 1n, v]);
  if (typeof v === "boolean") return !v;
  if (Array.isArray(v)) {
    const r = rng.int(4);
    if (r === 0) return [];
    if (r === 1) return [...v, ...v];
    return v.map((e) => (rng.chance(0.6) ? damageReply(rng, e) : e));
  }
  if (v && typeof v === "object") {
    if (MAP_FIELDS.has(key)) {
      return rng.chance(0.5) ? {} : { ...v, [oddString(rng).slice(0, 50)]: oddString(rng) };
    }
    const out: Record<string, unknown> = { ...(v as Record<string, unknown>) };
    for (const [k, e] of Object.entries(out)) {
      if (!rng.chance(0.4)) continue;
      // A missing sub-message is undefined; everything else keeps its type.
      out[k] = e && typeof e === "object" && !Array.isArray(e) && !MAP_FIELDS.has(k) &&
          rng.chance(0.3)
        ? undefined
        : damageReply(rng, e, k);
    }
    return out;
  }
  return v;
}

const ENGINE_ERROR = /TypeError|RangeError|ReferenceError|is not a function|Cannot read properties/;

Deno.test("fuzz CRI replies from the fake runtime: relist, actions and status never crash", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fuzz-cri-" });
  const image = "busybox:1.36";
  const fake = await startFakeRuntime({ preloadImages: [image], socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const logs: string[] = [];
  const cache = new PodCache();
  const pleg = new GenericPLEG({
    runtime,
    cache,
    clock: new FakeClock(),
    logger: createLogger({ write: (l) => logs.push(l), verbosity: 4 }),
  });
  const pods: V1Pod[] = [];
  try {
    for (let p = 0; p < 3; p++) {
      const pod = structuredClone(EXAMPLE_POD);
      pod.metadata = { ...pod.metadata, name: `web-${p}`, uid: `uid-${p}` };
      pods.push(pod);
      const labels = {
        "io.kubernetes.pod.name": `web-${p}`,
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": `uid-${p}`,
      };
      const config = api.PodSandboxConfig.create({
        metadata: { name: `web-${p}`, namespace: "default", uid: `uid-${p}`, attempt: 0 },
        labels,
      });
      const sandbox = await runtime.runPodSandbox(config, "");
      for (const c of pod.spec!.containers) {
        const id = await runtime.createContainer(
          sandbox,
          api.ContainerConfig.create({
            metadata: { name: c.name, attempt: 0 },
            image: { image },
            command: ["sleep", "3600"],
            labels: newContainerLabels(c, pod),
          }),
          config,
        );
        await runtime.startContainer(id);
      }
    }
    const rpcs = ["ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus"];
    assertClean(
      await runFuzz({
        target: "CRI replies over gRPC",
        seed: SEED + 4,
        cases: FULL ? 10_000 : Math.max(100, Math.floor(CASES / 2)),
        generate: (rng) => ({
          seed: rng.int(2 ** 31),
          damaged: rpcs.filter(() => rng.chance(0.5)),
        }),
        async run({ seed, damaged }): Promise<"accepted" | "rejected"> {
          const rng = new Rng(seed);
          for (const rpc of rpcs) {
            fake.rewriteReplies(
              rpc,
              damaged.includes(rpc) ? (r) => damageReply(rng, r) : undefined,
            );
          }
          const before = logs.length;
          await pleg.relist();
          for (const line of logs.slice(before)) {
            if (ENGINE_ERROR.test(line)) throw new TypeError(`logged: ${line.slice(0, 500)}`);
          }
          for (const pod of pods) {
            const podStatus = cache.get(pod.metadata!.uid!).status;
            computePodActions(pod, podStatus);
            generateAPIPodStatus({
              pod,
              podStatus,
              podIsTerminal: false,
              reasons: { get: () => undefined },
              hostIPs: ["10.0.0.1"],
              now: new Date(0),
            });
          }
          return logs.length > before ? "rejected" : "accepted";
        },
      }),
    );
  } finally {
    connection.close();
    await fake.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

// ---- Requests to the kubelet API ---------------------------------------------------------------

async function servingPair(): Promise<{ cert: string; key: string }> {
  const dir = await Deno.makeTempDir({ prefix: "fuzz-tls-" });
  const out = await new Deno.Command("openssl", {
    args: [
      ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
      ...["-days", "1", "-subj", "/CN=kubelet"],
      ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")],
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const pair = {
    cert: await Deno.readTextFile(join(dir, "cert.pem")),
    key: await Deno.readTextFile(join(dir, "key.pem")),
  };
  await Deno.remove(dir, { recursive: true });
  return pair;
}

const METHODS = [
  "GET",
  "POST",
  "PUT",
  "DELETE",
  "HEAD",
  "OPTIONS",
  "PATCH",
  "CONNECT",
  "TRACE",
  "BREW",
  "get",
  "",
];
const PATHS = [
  "/healthz",
  "/pods",
  "/hello/x",
  "/exec/a/b/c",
  "/logs/../../etc/shadow",
  "/%2e%2e/%2e%2e",
  "//",
  "/containerLogs/ns/pod/c",
  "/stats/summary",
  "*",
  "",
  "http://x/y",
  "/a?b=c&d",
];

/** One raw request line, headers and body, sometimes broken. */
function oddRequest(rng: Rng): string {
  const method = rng.pick(METHODS);
  let path = rng.pick(PATHS);
  if (rng.chance(0.4)) {
    path += encodeURI(oddString(rng).replace(/[\ud800-\udfff]/g, "?")).slice(0, 5000);
  }
  if (rng.chance(0.2)) path += "?" + oddString(rng).replace(/\s/g, "+").slice(0, 3000);
  const headers = ["Host: x"];
  for (let i = rng.int(5); i > 0; i--) {
    headers.push(
      rng.pick([
        "Authorization: Bearer good",
        "Authorization: Bearer denied",
        `Authorization: ${oddString(rng).replace(/[\r\n]/g, "")}`,
        "Connection: Upgrade",
        "Upgrade: SPDY/3.1",
        "Upgrade: websocket",
        "Sec-WebSocket-Protocol: v4.channel.k8s.io",
        "Transfer-Encoding: chunked",
        `Content-Length: ${rng.pick(["0", "5", "-1", "99999999999", "x"])}`,
        `X-Big: ${"a".repeat(rng.int(100_000))}`,
        `${oddString(rng).slice(0, 40)}: ${oddString(rng).slice(0, 40)}`,
      ]),
    );
  }
  const version = rng.pick(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", ""]);
  const body = rng.chance(0.3) ? oddString(rng) : "";
  let raw = `${method} ${path} ${version}\r\n${headers.join("\r\n")}\r\n\r\n${body}`;
  if (rng.chance(0.1)) raw = raw.slice(0, rng.int(raw.length));
  return raw;
}

/** Sends `raw` and resolves with what came back before the server closed or 3 s passed. */
function send(port: number, raw: string, tls: boolean): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    const socket = tls
      ? connect({ host: "127.0.0.1", port, rejectUnauthorized: false })
      : connectTcp({ host: "127.0.0.1", port });
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(got);
    };
    const timer = setTimeout(done, 3_000);
    socket.on(tls ? "secureConnect" : "connect", () => {
      socket.write(raw);
      socket.end();
    });
    socket.on("data", (d: Uint8Array) => {
      got += new TextDecoder().decode(d);
      // The status line is all a case needs; stop at once for streaming answers.
      if (got.includes("\r\n")) done();
    });
    socket.on("error", done);
    socket.on("close", done);
  });
}

Deno.test("fuzz requests to the kubelet API: an HTTP status or a closed connection, and /healthz after", async () => {
  const ctrl = new AbortController();
  const server = await serveKubeletAPI({
    hostname: "127.0.0.1",
    port: 0,
    tls: await servingPair(),
    authenticator: {
      authenticate: (req) => {
        const token = req.headers.authorization?.replace(/^Bearer /, "");
        return Promise.resolve(
          token === "good" || token === "denied" ? { name: token, groups: [] } : undefined,
        );
      },
    },
    authorizer: {
      authorize: (a) => Promise.resolve({ allowed: a.user.name === "good", reason: "" }),
    },
    attributes: (user, req, url) => ({
      user,
      verb: req.method === "POST" ? "create" : "get",
      resource: "nodes",
      subresource: "proxy",
      name: "node-1",
      apiGroup: "",
      apiVersion: "v1",
      path: url.pathname,
    }),
    routes: [
      {
        pattern: "/hello/:who",
        methods: ["GET"],
        handler: (r, res) => void res.end(`hi ${r.params.who}`),
      },
      { pattern: "/healthz", methods: ["GET"], handler: (_r, res) => void res.end("ok") },
    ],
    logger: createLogger({ write: () => {}, pid: 1 }),
    signal: ctrl.signal,
  });
  try {
    const report = await runFuzz({
      target: "kubelet API requests",
      seed: SEED + 3,
      // Each case is a TLS connection: a tenth of the other targets' short count.
      cases: FULL ? 10_000 : Math.max(50, Math.floor(CASES / 4)),
      generate: (rng) => ({ raw: oddRequest(rng), tls: rng.chance(0.9) }),
      async run({ raw, tls }): Promise<"accepted" | "rejected"> {
        const answer = await send(server.port, raw, tls);
        // Whatever came back must be an HTTP status line, nothing (a closed connection), or,
        // to bytes that are not TLS, a TLS alert record.
        const alert = !tls && answer.startsWith("\x15\x03");
        if (answer !== "" && !alert && !/^HTTP\/1\.[01] [1-5]\d\d/.test(answer)) {
          throw new TypeError(`answer is not HTTP: ${JSON.stringify(answer.slice(0, 200))}`);
        }
        return answer === "" ? "rejected" : "accepted";
      },
      show: (v) => JSON.stringify(v).slice(0, 2000),
      timeoutMs: 10_000,
    });
    assertClean(report);
    const after = await send(
      server.port,
      "GET /hello/bob HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n",
      true,
    );
    assert.match(after, /^HTTP\/1\.1 200/);
  } finally {
    ctrl.abort();
    await server.finished;
  }
});

// ---- The record of a full run -------------------------------------------------------------------

Deno.test("fuzz ran every target, and records a full run under FUZZ_FULL=1", async () => {
  assert.deepEqual(reports.map((r) => r.target).sort(), [
    "API pod + CRI replies",
    "CRI replies over gRPC",
    "KubeletConfiguration",
    "kubelet API requests",
    "static pod manifest",
  ]);
  if (!FULL) return;
  const date = new Date().toISOString().slice(0, 10);
  const rows = reports.map((r) =>
    `| ${r.target} | ${r.seed} | ${r.cases} | ${r.accepted} | ${r.rejected} | ${r.failures.length} | ${
      (r.ms / 1000).toFixed(1)
    } s |`
  );
  const text = `# Fuzz run, ${new Date().toISOString()}\n\n` +
    "`FUZZ_FULL=1 deno test --allow-all tests/fuzz_test.ts` (`deno task fuzz`); replay one case " +
    "with its run seed (FUZZ_SEED is the first target's; the others add 1 to 4, as the table shows).\n\n" +
    "| target | seed | cases | accepted | rejected | crashed or hung | time |\n" +
    "|---|---|---|---|---|---|---|\n" + rows.join("\n") + "\n";
  await Deno.writeTextFile(join(REPO_ROOT, "tests", "results", `fuzz-${date}.md`), text);
});
