import assert from "node:assert/strict";
import { request } from "node:https";
import type { IncomingHttpHeaders } from "node:http";
import { join } from "node:path";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, GrpcCode } from "../cri/connection.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import { serveKubeletAPI, type UserInfo } from "./server.ts";
import {
  logRoutes,
  type LogRoutesOptions,
  parseContainerLogQuery,
  selectLogContainer,
} from "./logs.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const UID = "uid-web";

/** A self-signed serving certificate made with openssl. */
async function selfSigned(dir: string): Promise<{ cert: string; key: string }> {
  const key = join(dir, "tls.key");
  const cert = join(dir, "tls.crt");
  const out = await new Deno.Command("openssl", {
    args: [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
  return { cert: await Deno.readTextFile(cert), key: await Deno.readTextFile(key) };
}

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One request with the path sent as is (no client-side normalization). */
function call(
  port: number,
  path: string,
  opts: { method?: string; headers?: Record<string, string>; onData?: (text: string) => void } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: opts.method ?? "GET",
        headers: opts.headers,
        rejectUnauthorized: false,
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => {
          body += d;
          opts.onData?.(body);
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/** Polls a condition that depends on real I/O, with a bound. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2500; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`timed out waiting for ${what}`);
}

interface Harness extends AsyncDisposable {
  readonly dir: string;
  readonly port: number;
  readonly fake: FakeRemoteRuntime;
  readonly runtime: RemoteRuntimeService;
  readonly clock: FakeClock;
  readonly pods: Map<string, V1Pod>;
  readonly logs: string[];
  /** The node log directory. */
  readonly varLog: string;
  /** The pod's log directory, as the sandbox's logDirectory. */
  readonly podLogs: string;
  sandbox: string;
  /** Re-reads the runtime's view of the pod, as the PLEG would. */
  refresh(): Promise<void>;
  /** Creates (and starts) an instance of a container whose log file is `<name>/<attempt>.log`. */
  container(name: string, attempt: number, lines: string, start?: boolean): Promise<string>;
}

function pod(spec: Partial<V1Pod["spec"]> = {}, status?: V1PodStatus): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid: UID },
    spec: { containers: [{ name: "main" }, { name: "side" }], ...spec },
    status,
  };
}

async function harness(extra: Partial<LogRoutesOptions> = {}): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "server-logs-" });
  const clock = new FakeClock();
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    socket: join(dir, "cri.sock"),
    clock,
  });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const varLog = join(dir, "var-log");
  const podLogs = join(varLog, "pods", `default_web_${UID}`);
  await Deno.mkdir(podLogs, { recursive: true });
  const pods = new Map<string, V1Pod>([["default/web", pod()]]);
  let status: PodStatus = {
    id: UID,
    name: "web",
    namespace: "default",
    ips: [],
    sandboxStatuses: [],
    containerStatuses: [],
    timestamp: 0,
  };
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l) });
  const ctrl = new AbortController();
  const user: UserInfo = { name: "admin", groups: ["system:masters"] };
  const server = await serveKubeletAPI({
    hostname: "127.0.0.1",
    port: 0,
    tls: await selfSigned(dir),
    authenticator: { authenticate: () => Promise.resolve(user) },
    authorizer: { authorize: () => Promise.resolve({ allowed: true, reason: "" }) },
    attributes: (u, _req, url) => ({
      user: u,
      verb: "get",
      resource: "nodes",
      subresource: "log",
      name: "node",
      apiGroup: "",
      apiVersion: "v1",
      path: url.pathname,
    }),
    routes: logRoutes({
      getPodByName: (ns, name) => pods.get(`${ns}/${name}`),
      getPodStatus: (uid) => uid === UID ? status : { ...status, id: uid, containerStatuses: [] },
      runtime,
      nodeLogDirectory: varLog,
      logger,
      clock,
      watchLogFiles: false,
      ...extra,
    }),
    logger,
    signal: ctrl.signal,
  });
  const config = api.PodSandboxConfig.create({
    metadata: { name: "web", namespace: "default", uid: UID, attempt: 0 },
    logDirectory: podLogs,
  });
  const h: Harness = {
    dir,
    port: server.port,
    fake,
    runtime,
    clock,
    pods,
    logs,
    varLog,
    podLogs,
    sandbox: "",
    async refresh() {
      const list = await runtime.listContainers(undefined);
      const all = await Promise.all(list.map((c) => runtime.containerStatus(c.id)));
      status = {
        ...status,
        containerStatuses: all.flatMap((r) => (r.status ? [r.status] : [])),
        timestamp: clock.now(),
      };
    },
    async container(name, attempt, lines, start = true) {
      if (h.sandbox === "") h.sandbox = await runtime.runPodSandbox(config, "");
      await Deno.mkdir(join(podLogs, name), { recursive: true });
      await Deno.writeTextFile(join(podLogs, name, `${attempt}.log`), lines);
      clock.step(1000);
      const id = await runtime.createContainer(
        h.sandbox,
        api.ContainerConfig.create({
          metadata: { name, attempt },
          image: { image: IMAGE },
          logPath: `${name}/${attempt}.log`,
          labels: {
            "io.kubernetes.pod.name": "web",
            "io.kubernetes.pod.namespace": "default",
            "io.kubernetes.pod.uid": UID,
            "io.kubernetes.container.name": name,
          },
        }),
        config,
      );
      if (start) await runtime.startContainer(id);
      await h.refresh();
      return id;
    },
    async [Symbol.asyncDispose]() {
      ctrl.abort();
      await server.finished;
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
  return h;
}

/** One CRI log line. */
function cri(sec: number, content: string, stream = "stdout", tag = "F"): string {
  return `2026-01-01T00:00:${
    String(sec).padStart(2, "0")
  }.000000001Z ${stream} ${tag} ${content}\n`;
}

// --- container logs ---

Deno.test("logRoutes /containerLogs streams the running container's log", async () => {
  await using h = await harness();
  await h.container("main", 0, cri(1, "hello") + cri(2, "wor", "stderr", "P") + cri(2, "ld"));
  const r = await call(h.port, "/containerLogs/default/web/main");
  assert.equal(r.status, 200);
  assert.equal(r.headers["content-type"], "text/plain; charset=utf-8");
  assert.equal(r.body, "hello\nworld\n");
});

Deno.test("logRoutes /containerLogs applies tailLines, timestamps, limitBytes and since", async () => {
  await using h = await harness();
  await h.container("main", 0, cri(1, "one") + cri(2, "two") + cri(3, "three"));
  const get = async (q: string) =>
    (await call(h.port, `/containerLogs/default/web/main?${q}`)).body;
  assert.equal(await get("tailLines=1&timestamps=true"), "2026-01-01T00:00:03.000000001Z three\n");
  assert.equal(await get("tail=2"), "two\nthree\n");
  assert.equal(await get("tail=all&tailLines=1"), "one\ntwo\nthree\n");
  assert.equal(await get("limitBytes=6"), "one\ntw");
  assert.equal(await get("sinceTime=2026-01-01T00:00:02Z"), "two\nthree\n");
  // sinceSeconds counts back from the kubelet's clock: 00:00:10 - 7s is the third line's second.
  h.clock.step(Date.UTC(2026, 0, 1, 0, 0, 10) - h.clock.now());
  assert.equal(await get("sinceSeconds=7"), "three\n");
  assert.equal(await get("sinceSeconds=8"), "two\nthree\n");
  assert.equal(await get("timestamps=false&follow=0"), "one\ntwo\nthree\n");
});

Deno.test("logRoutes /containerLogs previous reads the last terminated instance", async () => {
  await using h = await harness();
  const first = await h.container("main", 0, cri(1, "first run"));
  h.fake.service.exitContainer(first, 1);
  await h.container("main", 1, cri(2, "second run"));
  assert.equal((await call(h.port, "/containerLogs/default/web/main")).body, "second run\n");
  const prev = await call(h.port, "/containerLogs/default/web/main?previous=true");
  assert.equal(prev.status, 200);
  assert.equal(prev.body, "first run\n");
});

Deno.test("logRoutes /containerLogs previous without an earlier instance is a 400", async () => {
  await using h = await harness();
  await h.container("main", 0, cri(1, "only run"));
  const r = await call(h.port, "/containerLogs/default/web/main?previous=1");
  assert.equal(r.status, 400);
  assert.equal(r.body, 'previous terminated container "main" in pod "web" not found');
});

Deno.test("logRoutes /containerLogs in CrashLoopBackOff: current and previous are the last crash", async () => {
  await using h = await harness();
  const first = await h.container("main", 0, cri(1, "crash 1"));
  h.fake.service.exitContainer(first, 1);
  const second = await h.container("main", 1, cri(2, "crash 2"));
  h.fake.service.exitContainer(second, 1);
  await h.refresh();
  // Restarted and exited again: without the back-off reason the exited instance is current.
  assert.equal((await call(h.port, "/containerLogs/default/web/main")).body, "crash 2\n");
  assert.equal(
    (await call(h.port, "/containerLogs/default/web/main?previous=true")).body,
    "crash 1\n",
  );
  h.pods.set(
    "default/web",
    pod({}, {
      containerStatuses: [{
        name: "main",
        image: IMAGE,
        imageID: "",
        ready: false,
        restartCount: 1,
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: { terminated: { exitCode: 1, containerID: `containerd://${second}` } },
      }],
    }),
  );
  assert.equal((await call(h.port, "/containerLogs/default/web/main")).body, "crash 2\n");
  assert.equal(
    (await call(h.port, "/containerLogs/default/web/main?previous=true")).body,
    "crash 2\n",
  );
});

Deno.test("logRoutes /containerLogs answers 400 for a container waiting to start", async () => {
  await using h = await harness();
  const r = await call(h.port, "/containerLogs/default/web/side");
  assert.equal(r.status, 400);
  assert.equal(r.headers["content-type"], "text/plain; charset=utf-8");
  assert.equal(r.body, 'container "side" in pod "web" is waiting to start: ContainerCreating');
  h.pods.set("default/web", pod({ initContainers: [{ name: "init" }] }));
  assert.equal(
    (await call(h.port, "/containerLogs/default/web/side")).body,
    'container "side" in pod "web" is waiting to start: PodInitializing',
  );
  for (
    const [reason, text] of [
      ["ErrImagePull", "image can't be pulled"],
      ["ImagePullBackOff", "trying and failing to pull image"],
      ["CreateContainerConfigError", "CreateContainerConfigError"],
    ]
  ) {
    h.pods.set(
      "default/web",
      pod({}, {
        containerStatuses: [{
          name: "side",
          image: IMAGE,
          imageID: "",
          ready: false,
          restartCount: 0,
          state: { waiting: { reason } },
        }],
      }),
    );
    const w = await call(h.port, "/containerLogs/default/web/side");
    assert.equal(w.status, 400);
    assert.equal(w.body, `container "side" in pod "web" is waiting to start: ${text}`);
  }
});

Deno.test("logRoutes /containerLogs answers 404 for an unknown pod or container", async () => {
  await using h = await harness();
  const p = await call(h.port, "/containerLogs/default/nope/main");
  assert.equal(p.status, 404);
  assert.equal(p.body, 'pod "nope" does not exist');
  const other = await call(h.port, "/containerLogs/other/web/main");
  assert.equal(other.status, 404);
  const c = await call(h.port, "/containerLogs/default/web/nope");
  assert.equal(c.status, 404);
  assert.equal(c.body, 'container "nope" not found in pod "web"');
});

Deno.test("logRoutes /containerLogs refuses bad queries with upstream's codes", async () => {
  await using h = await harness();
  await h.container("main", 0, cri(1, "x"));
  const check = async (q: string, status: number, body: string) => {
    const r = await call(h.port, `/containerLogs/default/web/main?${q}`);
    assert.equal(r.status, status, q);
    assert.equal(r.body, body, q);
  };
  const undecodable = `{"message": "Unable to decode query."}`;
  const invalid = `{"message": "Invalid request."}`;
  await check("tailLines=abc", 400, undecodable);
  await check("limitBytes=", 400, undecodable);
  await check("sinceTime=yesterday", 400, undecodable);
  await check("tailLines=-1", 422, invalid);
  await check("limitBytes=0", 422, invalid);
  await check("sinceSeconds=0", 422, invalid);
  await check("sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", 422, invalid);
  await check("stream=Bogus", 422, invalid);
  await check("stream=Stderr&tailLines=1", 422, invalid);
  await check(
    "stream=Stdout",
    400,
    'unable to return the given log stream: "Stdout". Please enable PodLogsQuerySplitStreams feature gate in kubelet',
  );
  await check("stream=All", 200, "x\n");
});

Deno.test("logRoutes /containerLogs answers only GET", async () => {
  await using h = await harness();
  const r = await call(h.port, "/containerLogs/default/web/main", { method: "POST" });
  assert.equal(r.status, 405);
  assert.equal(r.headers.allow, "GET");
  assert.equal(r.body, "Method Not Allowed");
});

Deno.test("logRoutes /containerLogs reports a failed ContainerStatus after the 200", async () => {
  await using h = await harness();
  const id = await h.container("main", 0, cri(1, "x"));
  h.fake.injectError("ContainerStatus", GrpcCode.UNAVAILABLE, "down");
  const r = await call(h.port, "/containerLogs/default/web/main");
  assert.equal(r.status, 200);
  assert.equal(r.body, `unable to retrieve container logs for containerd://${id}`);
});

Deno.test("logRoutes /containerLogs reports a missing log file after the 200", async () => {
  await using h = await harness();
  await h.container("main", 0, cri(1, "x"));
  await Deno.remove(join(h.podLogs, "main", "0.log"));
  const r = await call(h.port, "/containerLogs/default/web/main");
  assert.equal(r.status, 200);
  assert.match(r.body, /^failed to try resolving symlinks in path ".*main\/0\.log": /);
});

Deno.test("logRoutes /containerLogs follow streams until the container exits", async () => {
  await using h = await harness();
  const id = await h.container("main", 0, cri(1, "started"));
  const log = join(h.podLogs, "main", "0.log");
  let seen = "";
  const reply = call(h.port, "/containerLogs/default/web/main?follow=true", {
    onData: (t) => (seen = t),
  });
  await until(() => seen === "started\n" && h.clock.waiters === 1, "the first line");
  await Deno.writeTextFile(log, cri(2, "working"), { append: true });
  h.clock.step(1000);
  await until(() => seen === "started\nworking\n", "the appended line");
  await until(() => h.clock.waiters === 1, "the follower to sleep again");
  await Deno.writeTextFile(log, cri(3, "exiting"), { append: true });
  h.fake.service.exitContainer(id, 0);
  h.clock.step(1000);
  const r = await reply;
  assert.equal(r.status, 200);
  assert.equal(r.body, "started\nworking\nexiting\n");
});

Deno.test("logRoutes /containerLogs follow of an exited container ends at the end", async () => {
  await using h = await harness();
  const id = await h.container("main", 0, cri(1, "done"));
  h.fake.service.exitContainer(id, 0);
  await h.refresh();
  const r = await call(h.port, "/containerLogs/default/web/main?follow=true");
  assert.equal(r.body, "done\n");
});

Deno.test("logRoutes disabled handlers answer 405", async () => {
  {
    await using h = await harness({ enableDebuggingHandlers: false });
    for (const path of ["/containerLogs/default/web/main", "/logs/"]) {
      const r = await call(h.port, path);
      assert.equal(r.status, 405);
      assert.equal(r.body, "Debug endpoints are disabled.\n");
    }
  }
  {
    await using h = await harness({ enableSystemLogHandler: false });
    const r = await call(h.port, "/logs/");
    assert.equal(r.status, 405);
    assert.equal(r.body, "logs endpoint is disabled.\n");
  }
});

Deno.test("parseContainerLogQuery reads booleans as upstream and prefers the later since", () => {
  const now = Date.UTC(2026, 0, 1, 0, 1, 0);
  const q = parseContainerLogQuery(
    new URLSearchParams("follow=&timestamps=FALSE&previous=yes"),
    now,
  );
  assert.ok(!("status" in q));
  assert.equal(q.options.follow, true);
  assert.equal(q.options.timestamps, false);
  assert.equal(q.previous, true);
  const s = parseContainerLogQuery(new URLSearchParams("sinceSeconds=30"), now);
  assert.ok(!("status" in s));
  assert.equal(s.options.since?.toISOString(), "2026-01-01T00:00:30.000Z");
});

Deno.test("selectLogContainer uses the last termination when the terminated state has no ID", () => {
  const status: PodStatus = {
    id: UID,
    name: "web",
    namespace: "default",
    ips: [],
    sandboxStatuses: [],
    containerStatuses: [],
    timestamp: 0,
  };
  const base = {
    name: "main",
    image: IMAGE,
    imageID: "",
    ready: false,
    restartCount: 1,
  };
  const chosen = selectLogContainer({
    pod: pod({}, {
      containerStatuses: [{
        ...base,
        state: { terminated: { exitCode: 1 } },
        lastState: { terminated: { exitCode: 1, containerID: "cri-o://abc" } },
      }],
    }),
    podStatus: status,
    containerName: "main",
    previous: false,
  });
  assert.deepEqual(chosen, { id: "abc", containerID: "cri-o://abc" });
  const none = selectLogContainer({
    pod: pod({}, { containerStatuses: [{ ...base, state: { terminated: { exitCode: 1 } } }] }),
    podStatus: status,
    containerName: "main",
    previous: false,
  });
  assert.ok(none instanceof Error);
  assert.equal(none.message, 'container "main" in pod "web" is terminated');
});

// --- node logs ---

async function nodeLogFiles(h: Harness): Promise<void> {
  await Deno.writeTextFile(join(h.varLog, "syslog"), "system log\n");
  await Deno.mkdir(join(h.varLog, "sub"));
  await Deno.writeTextFile(join(h.varLog, "sub", "app.log"), "app\n");
  await Deno.writeTextFile(join(h.varLog, "a&b <c>.txt"), "odd name\n");
  await Deno.writeTextFile(join(h.dir, "secret.txt"), "TOP SECRET\n");
  await Deno.symlink("syslog", join(h.varLog, "inside-link"));
  await Deno.symlink(join(h.dir, "secret.txt"), join(h.varLog, "escape"));
  await Deno.symlink(h.dir, join(h.varLog, "outdir"));
}

Deno.test("logRoutes /logs/ lists the node log directory as Go's FileServer does", async () => {
  await using h = await harness();
  await nodeLogFiles(h);
  const r = await call(h.port, "/logs/");
  assert.equal(r.status, 200);
  assert.equal(r.headers["content-type"], "text/html; charset=utf-8");
  assert.equal(
    r.body,
    `<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n` +
      `<a href="a&b%20%3Cc%3E.txt">a&amp;b &lt;c&gt;.txt</a>\n` +
      `<a href="escape">escape</a>\n` +
      `<a href="inside-link">inside-link</a>\n` +
      `<a href="outdir">outdir</a>\n` +
      `<a href="pods/">pods/</a>\n` +
      `<a href="sub/">sub/</a>\n` +
      `<a href="syslog">syslog</a>\n` +
      `</pre>\n`,
  );
  const sub = await call(h.port, "/logs/sub/");
  assert.match(sub.body, /<a href="app.log">app.log<\/a>/);
});

Deno.test("logRoutes /logs/ serves files with length, type and ranges", async () => {
  await using h = await harness();
  await nodeLogFiles(h);
  const r = await call(h.port, "/logs/syslog");
  assert.equal(r.status, 200);
  assert.equal(r.body, "system log\n");
  assert.equal(r.headers["content-type"], "text/plain; charset=utf-8");
  assert.equal(r.headers["content-length"], "11");
  assert.equal(r.headers["accept-ranges"], "bytes");
  const modified = r.headers["last-modified"];
  assert.ok(modified);
  assert.equal((await call(h.port, "/logs/sub/app.log")).body, "app\n");
  assert.equal((await call(h.port, "/logs/inside-link")).body, "system log\n");
  const range = await call(h.port, "/logs/syslog", { headers: { range: "bytes=0-5" } });
  assert.equal(range.status, 206);
  assert.equal(range.body, "system");
  assert.equal(range.headers["content-range"], "bytes 0-5/11");
  const suffix = await call(h.port, "/logs/syslog", { headers: { range: "bytes=-4" } });
  assert.equal(suffix.body, "log\n");
  const bad = await call(h.port, "/logs/syslog", { headers: { range: "bytes=100-" } });
  assert.equal(bad.status, 416);
  assert.equal(bad.headers["content-range"], "bytes */11");
  const cached = await call(h.port, "/logs/syslog", { headers: { "if-modified-since": modified } });
  assert.equal(cached.status, 304);
  assert.equal(cached.body, "");
});

Deno.test("logRoutes /logs/ streams a large file whole", async () => {
  await using h = await harness();
  const line = "0123456789abcdef".repeat(63) + "\n";
  await Deno.writeTextFile(join(h.varLog, "big.log"), line.repeat(3000));
  const r = await call(h.port, "/logs/big.log");
  assert.equal(r.status, 200);
  assert.equal(r.body.length, line.length * 3000);
  assert.equal(r.headers["content-length"], String(line.length * 3000));
});

Deno.test("logRoutes /logs/ redirects directories and files as Go's FileServer does", async () => {
  await using h = await harness();
  await nodeLogFiles(h);
  const dir = await call(h.port, "/logs/sub?x=1");
  assert.equal(dir.status, 301);
  assert.equal(dir.headers.location, "sub/?x=1");
  const file = await call(h.port, "/logs/syslog/");
  assert.equal(file.status, 301);
  assert.equal(file.headers.location, "../syslog");
  const index = await call(h.port, "/logs/sub/index.html");
  assert.equal(index.status, 301);
  assert.equal(index.headers.location, "./");
});

Deno.test("logRoutes /logs/ answers 404 for missing paths and 405 for other methods", async () => {
  await using h = await harness();
  await nodeLogFiles(h);
  for (const path of ["/logs/missing", "/logs/syslog/x", "/logs"]) {
    const r = await call(h.port, path);
    assert.equal(r.status, 404, path);
    assert.equal(r.body, "404 page not found\n", path);
  }
  const post = await call(h.port, "/logs/syslog", { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.allow, "GET");
});

Deno.test("logRoutes /logs/ refuses traversal out of the node log directory", async () => {
  await using h = await harness();
  await nodeLogFiles(h);
  for (
    const path of [
      "/logs/../secret.txt",
      "/logs/%2e%2e/secret.txt",
      "/logs/..%2fsecret.txt",
      "/logs/sub/..%2F..%2Fsecret.txt",
      "/logs/%2e%2e%2fsecret.txt",
      "/logs/escape",
      "/logs/outdir/secret.txt",
      "/logs/outdir/",
    ]
  ) {
    const r = await call(h.port, path);
    assert.equal(r.status, 404, path);
    assert.ok(!r.body.includes("TOP SECRET"), path);
  }
  // A cleaned `..` stays inside: /logs/sub/../syslog is /logs/syslog.
  assert.equal((await call(h.port, "/logs/sub/..%2fsyslog")).body, "system log\n");
});

// --- node log queries ---

/** A journalctl stand-in that knows the kubelet unit and prints one entry for any query. */
async function fakeJournalctl(dir: string): Promise<string> {
  const program = join(dir, "journalctl");
  await Deno.writeTextFile(
    program,
    `#!/bin/sh\nif [ "$1" = "--field" ]; then echo kubelet.service; exit 0; fi\necho "journal: $*"\n`,
    { mode: 0o755 },
  );
  return program;
}

/** One GET whose body is kept as bytes (for a gzip answer). */
function callRaw(
  port: number,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Uint8Array<ArrayBuffer> }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, path, headers, rejectUnauthorized: false },
      (res) => {
        const chunks: Uint8Array[] = [];
        res.on("data", (d: Uint8Array) => chunks.push(d));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: new Uint8Array(Buffer.concat(chunks)),
          }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

Deno.test("logRoutes /logs/?query= streams journalctl's answer for a service, plain or gzip", async () => {
  const dir = await Deno.makeTempDir({ prefix: "nlq-bin-" });
  try {
    await using h = await harness({
      enableSystemLogQuery: true,
      journalctl: await fakeJournalctl(dir),
    });
    const r = await call(h.port, "/logs/?query=kubelet&tailLines=2&sinceTime=2026-01-02T03:04:05Z");
    assert.equal(r.status, 200);
    assert.equal(r.headers["content-type"], "text/plain;charset=UTF-8");
    assert.equal(
      r.body,
      "journal: --utc --no-pager --output=short-precise --since=2026-1-2 03:4:5 --pager-end --lines=2 --unit=kubelet\n",
    );
    const z = await callRaw(h.port, "/logs/?query=kubelet", { "accept-encoding": "gzip" });
    assert.equal(z.status, 200);
    assert.equal(z.headers["content-encoding"], "gzip");
    const plain = await new Response(
      new Blob([z.body]).stream().pipeThrough(new DecompressionStream("gzip")),
    ).text();
    assert.equal(plain, "journal: --utc --no-pager --output=short-precise --unit=kubelet\n");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("logRoutes /logs/?query= refuses bad queries with upstream's statuses and words", async () => {
  await using h = await harness({
    enableSystemLogQuery: true,
    journalctl: "/nonexistent/journalctl",
  });
  await nodeLogFiles(h);
  const cases: [string, number, string][] = [
    [
      "/logs/?query=kubelet&tailLines=x",
      400,
      'tailLines: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax',
    ],
    ["/logs/?query=%20", 400, 'query: Invalid value: [" "]: may not be empty'],
    ["/logs/sub/?query=kubelet", 406, "path not allowed in query mode"],
    ["/logs/?query=kubelet&boot=1", 406, "boot: Invalid value: 1: must be less than 1"],
    ["/logs/?tailLines=3", 406, "query: Required value: cannot be empty with options"],
    [
      "/logs/?query=/sub/app.log",
      406,
      'query: Invalid value: ["/sub/app.log"]: statat /sub/app.log: path escapes from parent',
    ],
    [
      "/logs/?query=./escape",
      406,
      'query: Invalid value: ["./escape"]: statat ./escape: path escapes from parent',
    ],
  ];
  for (const [path, status, body] of cases) {
    const r = await call(h.port, path);
    assert.equal(r.status, status, path);
    assert.equal(r.headers["content-type"], "text/plain; charset=utf-8", path);
    assert.equal(r.body, `${body}\n`, path);
  }
});

Deno.test("logRoutes /logs/?query= serves one file, and a service's file when the journal lacks it", async () => {
  await using h = await harness({
    enableSystemLogQuery: true,
    journalctl: "/nonexistent/journalctl",
  });
  await nodeLogFiles(h);
  const file = await call(h.port, "/logs/?query=sub/app.log");
  assert.equal(file.status, 200);
  assert.equal(file.body, "app\n");
  assert.equal(file.headers["content-length"], "4");
  const service = await call(h.port, "/logs/?query=syslog");
  assert.equal(service.status, 200);
  assert.equal(service.headers["content-type"], "text/plain;charset=UTF-8");
  assert.equal(service.body, "system log\n");
  const missing = await call(h.port, "/logs/?query=nope");
  assert.equal(missing.body, "\nlog not found for nope\n");
  // Without a query, /logs/ is still the file server.
  assert.equal((await call(h.port, "/logs/sub/app.log")).body, "app\n");
  assert.equal(
    (await call(h.port, "/logs/?unknown=1")).headers["content-type"],
    "text/html; charset=utf-8",
  );
});

Deno.test("logRoutes /logs/ ignores a query while enableSystemLogQuery is off", async () => {
  await using h = await harness();
  await nodeLogFiles(h);
  const r = await call(h.port, "/logs/sub/app.log?query=syslog");
  assert.equal(r.status, 200);
  assert.equal(r.body, "app\n");
  const listing = await call(h.port, "/logs/?query=syslog");
  assert.equal(listing.headers["content-type"], "text/html; charset=utf-8");
});
