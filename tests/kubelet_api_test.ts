/**
 * The kubelet API on its port, end to end: kubectl through the real apiserver (which reaches the
 * agent with its kubelet client certificate) reads logs, execs, port-forwards and reads the
 * node proxy endpoints; direct requests without a valid identity get 401, identities the
 * SubjectAccessReview denies get 403, and node log paths cannot leave /var/log; /metrics/slis
 * shows the health checks' SLIs, and a request head past Go's limit gets net/http's 431.
 */

import assert from "node:assert/strict";
import { request } from "node:https";
import { connect } from "node:tls";
import { join } from "node:path";
import type { ContainerdHandle } from "./containerd_harness.ts";
import { startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import {
  BUSYBOX,
  BUSYBOX_IMAGE,
  HTTPD,
  HTTPD_IMAGE,
  HTTPD_INDEX,
  HTTPD_PORT,
  importImages,
  PAUSE,
} from "./images.ts";
import { e2eSuite, POD_POLL_MS, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { type CertKeyPair, issueCertificate } from "./pki.ts";
import type { RunningAgent } from "./agent_process.ts";
import { freePort } from "./child_process.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("kubelet API e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-api-e2e";
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly port: number;
  /** The unauthenticated read-only port. */
  readonly readOnlyPort: number;
  /** A client certificate of the cluster CA for a user RBAC gives nothing. */
  readonly nobody: CertKeyPair;
  /** A client certificate from a CA the kubelet does not trust. */
  readonly stranger: CertKeyPair;
}

const suite = e2eSuite<World>({
  name: "kubelet API",
  gate,
  userAgent: "kubelet-api-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "api-e2e-" });
    const cp = await startControlPlane({
      dir: join(dir, "cp"),
      nodeNames: [NODE],
    });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE, HTTPD] });
    const readOnlyPort = freePort();
    const { agent, port } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
      configLines: [`readOnlyPort: ${readOnlyPort}`],
    });
    await Deno.mkdir(join(dir, "certs"), { recursive: true });
    const nobody = await issueCertificate({
      dir: join(dir, "certs"),
      name: "nobody",
      ca: cp.pki.ca,
      subject: { commonName: "nobody" },
      usage: "client",
    });
    const otherCa = await issueCertificate({
      dir: join(dir, "certs"),
      name: "other-ca-leaf",
      ca: await selfSignedCa(join(dir, "certs")),
      subject: { commonName: "kube-apiserver-kubelet-client", organizations: ["system:masters"] },
      usage: "client",
    });
    return { dir, cp, containerd, agent, port, readOnlyPort, nobody, stranger: otherCa };
  },
});
const e2e = suite.test;

/** A CA of its own, for a client certificate the kubelet must refuse. */
async function selfSignedCa(dir: string): Promise<CertKeyPair> {
  await Deno.mkdir(dir, { recursive: true });
  const cert = join(dir, "other-ca.crt");
  const key = join(dir, "other-ca.key");
  const out = await new Deno.Command("openssl", {
    args: [
      ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"],
      ...["-subj", "/CN=kubernetes", "-keyout", key, "-out", cert],
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return { cert, key };
}

function podJson(
  name: string,
  container: Record<string, unknown>,
  restartPolicy = "Always",
  spec: Record<string, unknown> = {},
) {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      restartPolicy,
      containers: [{ name: "main", imagePullPolicy: "Never", ...container }],
      ...spec,
    },
  });
}

async function createRunning(w: World, api: Parameters<typeof waitPod>[0], manifest: string) {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
  const name = JSON.parse(manifest).metadata.name as string;
  return await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running");
}

/** A GET on the kubelet API with an optional client certificate; the server cert is not checked. */
function direct(
  w: World,
  path: string,
  client?: CertKeyPair,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port: w.port,
      path,
      rejectUnauthorized: false,
      ...(client
        ? { cert: Deno.readTextFileSync(client.cert), key: Deno.readTextFileSync(client.key) }
        : {}),
    }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

e2e("kubectl logs: plain, --tail, --timestamps, -f and --previous", async (w, api) => {
  await createRunning(
    w,
    api,
    podJson("talker", {
      image: BUSYBOX_IMAGE,
      command: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"],
    }),
  );
  const plain = await poll(
    "three lines",
    async () => {
      const r = await w.cp.kubectl(["logs", "talker", "-n", NS]);
      return r.code === 0 && r.stdout.includes("line 3\n") ? r.stdout : undefined;
    },
    20_000,
    POD_POLL_MS,
  );
  assert.match(plain, /^line 1\nline 2\nline 3\n/);

  const tail = await w.cp.kubectl(["logs", "talker", "-n", NS, "--tail=2"]);
  assert.equal(tail.code, 0, tail.stderr);
  assert.equal(tail.stdout.trimEnd().split("\n").length, 2, tail.stdout);

  const stamped = await w.cp.kubectl(["logs", "talker", "-n", NS, "--timestamps", "--tail=1"]);
  assert.match(stamped.stdout, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z line \d+\n$/);

  // -f keeps the stream open and shows new lines as they come.
  const follow = await w.cp.kubectl(["logs", "talker", "-n", NS, "-f", "--tail=1"], {
    timeoutMs: 3_000,
  }).catch((e) => ({ code: -1, stdout: String(e), stderr: "" }));
  const followed = follow.stdout.split("\n").filter((l) => l.startsWith("line "));
  assert.ok(followed.length >= 5, `followed ${followed.length} lines in 3 s: ${follow.stdout}`);

  // --previous: the output of the container instance before the restart. Only the first
  // instance exits (a marker on an emptyDir): a second exit would let the container GC, which
  // keeps one dead instance, remove the first one's log while the status still names it.
  await createRunning(
    w,
    api,
    podJson(
      "crasher",
      {
        image: BUSYBOX_IMAGE,
        command: [
          "sh",
          "-c",
          "[ -e /data/ran ] && exec sleep 3600; touch /data/ran; echo started; sleep 1; " +
          "echo exiting; exit 1",
        ],
        volumeMounts: [{ name: "data", mountPath: "/data" }],
      },
      "Always",
      { volumes: [{ name: "data", emptyDir: {} }] },
    ),
  );
  await waitPod(
    api,
    NS,
    "crasher",
    "a restart",
    (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1,
    60_000,
  );
  const previous = await w.cp.kubectl(["logs", "crasher", "-n", NS, "--previous"]);
  assert.equal(previous.code, 0, previous.stderr);
  assert.equal(previous.stdout, "started\nexiting\n");
  const missing = await w.cp.kubectl(["logs", "talker", "-n", NS, "--previous"]);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /previous terminated container "main" in pod "talker" not found/);
});

e2e("kubectl exec: output and exit code, and stdin", async (w, api) => {
  await createRunning(
    w,
    api,
    podJson("shell", { image: BUSYBOX_IMAGE, command: ["sleep", "3600"] }),
  );
  const r = await w.cp.kubectl(["exec", "shell", "-n", NS, "--", "sh", "-c", "echo hi; exit 3"]);
  assert.equal(r.stdout, "hi\n");
  assert.equal(r.code, 3, r.stderr);
  const cat = await w.cp.kubectl(["exec", "-i", "shell", "-n", NS, "--", "cat"], {
    stdin: "from stdin\n",
  });
  assert.equal(cat.code, 0, cat.stderr);
  assert.equal(cat.stdout, "from stdin\n");
});

e2e(
  "POST /checkpoint reaches the runtime's CheckpointContainer; /spec is not served",
  async (w, api) => {
    await createRunning(
      w,
      api,
      podJson("checkpointed", { image: BUSYBOX_IMAGE, command: ["sleep", "3600"] }),
    );
    const base = `/api/v1/nodes/${NODE}/proxy`;
    // containerd 1.6 has no checkpoint support: the runtime's Unimplemented, as upstream answers.
    const r = await w.cp.kubectl([
      "create",
      "--raw",
      `${base}/checkpoint/${NS}/checkpointed/main`,
      "-f",
      "-",
    ], {
      stdin: "",
    });
    assert.notEqual(r.code, 0);
    assert.match(
      r.stderr,
      new RegExp(
        `checkpointing of ${NS}/checkpointed/main failed \\(rpc error: code = Unimplemented`,
      ),
    );
    const missing = await w.cp.kubectl([
      "create",
      "--raw",
      `${base}/checkpoint/${NS}/nope/main`,
      "-f",
      "-",
    ], {
      stdin: "",
    });
    // A 404 (kubectl shows its reason, not the body: "pod does not exist").
    assert.match(missing.stderr, /NotFound/);
    const spec = await w.cp.kubectl(["get", "--raw", `${base}/spec/`]);
    assert.match(spec.stderr, /NotFound|404|not found/i);
  },
);

e2e("kubectl exec -it runs a shell on a terminal", async (w, api) => {
  await createRunning(
    w,
    api,
    podJson("term", { image: BUSYBOX_IMAGE, command: ["sleep", "3600"] }),
  );
  const r = await w.cp.kubectl(["exec", "-it", "term", "-n", NS, "--", "sh"], {
    tty: true,
    stdin: "tty\necho on-tty-$((40+2))\nexit 7\n",
  });
  assert.equal(r.code, 7, r.stdout + r.stderr);
  // The shell's stdin is a terminal of the runtime's, and it ran what was typed.
  assert.match(r.stdout, /^\/dev\/pts\/\d+\r?$/m, r.stdout);
  assert.match(r.stdout, /^on-tty-42\r?$/m, r.stdout);
});

e2e("kubectl attach: -it to a terminal pod, and -i to a stdinOnce pod", async (w, api) => {
  await createRunning(
    w,
    api,
    podJson("attach-tty", {
      image: BUSYBOX_IMAGE,
      command: ["sh"],
      stdin: true,
      tty: true,
    }, "Never"),
  );
  const tty = await w.cp.kubectl(["attach", "-it", "attach-tty", "-n", NS], {
    tty: true,
    stdin: "echo attached-$((1+1))\nexit 0\n",
  });
  assert.equal(tty.code, 0, tty.stdout + tty.stderr);
  assert.match(tty.stdout, /^attached-2\r?$/m, tty.stdout);
  await waitPod(api, NS, "attach-tty", "Succeeded", (p) => p.status?.phase === "Succeeded");

  await createRunning(
    w,
    api,
    podJson("attach-once", {
      image: BUSYBOX_IMAGE,
      command: ["sh", "-c", 'while read l; do echo "got $l"; done; echo done'],
      stdin: true,
      stdinOnce: true,
    }, "Never"),
  );
  const once = await w.cp.kubectl(["attach", "-i", "attach-once", "-n", NS], {
    stdin: "one\ntwo\n",
  });
  assert.equal(once.code, 0, once.stderr);
  assert.equal(once.stdout, "got one\ngot two\ndone\n");
});

e2e("kubectl port-forward reaches an httpd pod's page", async (w, api) => {
  await createRunning(w, api, podJson("web", { image: HTTPD_IMAGE }));
  const local = freePort();
  const ctrl = new AbortController();
  const pf = w.cp.kubectl(["port-forward", "pod/web", "-n", NS, `${local}:${HTTPD_PORT}`], {
    signal: ctrl.signal,
    timeoutMs: 60_000,
  }).catch(() => undefined);
  try {
    const page = await poll(
      "the page through the forwarded port",
      async () => {
        const r = await fetch(`http://127.0.0.1:${local}/`).catch(() => undefined);
        return r ? await r.text() : undefined;
      },
      30_000,
      500,
    );
    assert.equal(page, HTTPD_INDEX);
  } finally {
    ctrl.abort();
    await pf;
  }
});

e2e("kubectl get --raw reaches /configz and /pods through the node proxy", async (w) => {
  const configz = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/configz`]);
  assert.equal(configz.code, 0, configz.stderr);
  const cfg = JSON.parse(configz.stdout).kubeletconfig;
  assert.equal(cfg.port, w.port);
  assert.equal(cfg.syncFrequency, "1m0s");
  const pods = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/pods`]);
  assert.equal(pods.code, 0, pods.stderr);
  assert.equal(JSON.parse(pods.stdout).kind, "PodList");
});

e2e("direct requests: 401 without a trusted identity, 403 when denied", async (w) => {
  for (
    const path of ["/pods", "/configz", "/healthz", "/containerLogs/default/x/y", "/exec/a/b/c"]
  ) {
    assert.equal((await direct(w, path)).status, 401, `${path} without a certificate`);
    assert.equal((await direct(w, path, w.stranger)).status, 401, `${path} from another CA`);
  }
  const denied = await direct(w, "/pods", w.nobody);
  assert.equal(denied.status, 403);
  assert.equal(
    denied.body,
    "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
  );
  const admin = {
    cert: w.cp.pki.apiserverKubeletClient.cert,
    key: w.cp.pki.apiserverKubeletClient.key,
  };
  assert.equal((await direct(w, "/pods", admin)).status, 200);
  for (
    const path of [
      "/logs/../../etc/shadow",
      "/logs/%2e%2e/%2e%2e/etc/shadow",
      "/logs/..%2f..%2fetc/shadow",
    ]
  ) {
    const r = await direct(w, path, admin);
    assert.ok(r.status >= 400 && r.status < 500, `${path}: ${r.status}`);
    assert.doesNotMatch(r.body, /root:/, path);
  }
});

e2e(
  "/metrics/slis: the /healthz checks' SLIs through the node proxy, as nodes/metrics",
  async (w) => {
    const raw = (path: string) =>
      w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy${path}`]);
    assert.equal((await raw("/healthz")).stdout, "ok");
    const slis = await raw("/metrics/slis");
    assert.equal(slis.code, 0, slis.stderr);
    for (const check of ["ping", "log", "syncloop"]) {
      assert.match(
        slis.stdout,
        new RegExp(`^kubernetes_healthcheck\\{name="${check}",type="healthz"\\} 1$`, "m"),
      );
      assert.match(
        slis.stdout,
        new RegExp(
          `^kubernetes_healthchecks_total\\{name="${check}",status="success",type="healthz"\\} [1-9]`,
          "m",
        ),
      );
    }
    assert.match(
      slis.stdout,
      /^# HELP kubernetes_healthcheck \[STABLE\] This metric records the result of a single healthcheck\.$/m,
    );
    assert.match(slis.stdout, /^process_start_time_seconds \d/m);
    const denied = await direct(w, "/metrics/slis", w.nobody);
    assert.deepEqual(denied, {
      status: 403,
      body: "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[metrics])\n",
    });
  },
);

e2e(
  "a request head past Go's 1 MiB + 4096 limit gets net/http's 431, before authentication",
  async (w) => {
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port: w.port, rejectUnauthorized: false });
      let got = "";
      socket.on(
        "secureConnect",
        () =>
          socket.write(`GET /pods HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(2 << 20)}\r\n\r\n`),
      );
      socket.on("data", (d) => (got += d));
      socket.on("close", () => resolve(got));
      socket.on("error", reject);
    });
    assert.equal(
      answer,
      "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n" +
        "Connection: close\r\n\r\n431 Request Header Fields Too Large",
    );
  },
);

e2e("the read-only port serves /healthz and /pods over plain HTTP, and nothing else", async (w) => {
  const base = `http://127.0.0.1:${w.readOnlyPort}`;
  const healthz = await fetch(`${base}/healthz`);
  assert.deepEqual([healthz.status, await healthz.text()], [200, "ok"]);
  const pods = await fetch(`${base}/pods`);
  assert.equal(pods.status, 200);
  assert.equal((await pods.json()).kind, "PodList");
  for (const path of ["/configz", "/runningpods/", "/exec/default/shell/main", "/logs/"]) {
    const r = await fetch(`${base}${path}`);
    await r.body?.cancel();
    assert.equal(r.status, 404, path);
  }
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
