import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from "node:net";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, GrpcCode } from "../cri/connection.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import { serveKubeletAPI, type ServerTLS } from "./server.ts";
import {
  parsePortForwardPorts,
  parseStreamOptions,
  StreamingRequestError,
  streamingRoutes,
} from "./streaming.ts";
import { isLoopbackHost, parseStreamingUrl, StreamingUrlError } from "./_stream_proxy.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const UID = "uid-web";
const SPDY = {
  Connection: "Upgrade",
  Upgrade: "SPDY/3.1",
  "X-Stream-Protocol-Version": ["v4.channel.k8s.io", "v3.channel.k8s.io"],
};
const WEBSOCKET = {
  Connection: "Upgrade",
  Upgrade: "websocket",
  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
  "Sec-WebSocket-Version": "13",
  "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
};
/** How long a test waits for bytes or a close before failing (real time, as a bound only). */
const WAIT_MS = 5000;

// --- A serving certificate, made once with openssl ---

let servingCert: Promise<ServerTLS> | undefined;
function tls(): Promise<ServerTLS> {
  servingCert ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "server-streaming-pki-" });
    try {
      const out = await new Deno.Command("openssl", {
        args: [
          "req",
          "-x509",
          "-newkey",
          "ec",
          "-pkeyopt",
          "ec_paramgen_curve:prime256v1",
          "-nodes",
          "-days",
          "1",
          "-subj",
          "/CN=127.0.0.1",
          "-addext",
          "subjectAltName=IP:127.0.0.1",
          "-keyout",
          join(dir, "key.pem"),
          "-out",
          join(dir, "cert.pem"),
        ],
        stdout: "null",
        stderr: "piped",
      }).output();
      if (!out.success) throw new Error(`openssl: ${new TextDecoder().decode(out.stderr)}`);
      return {
        cert: await Deno.readTextFile(join(dir, "cert.pem")),
        key: await Deno.readTextFile(join(dir, "key.pem")),
      };
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  })();
  return servingCert;
}

// --- A connection that buffers what it receives ---

const text = (b: Uint8Array) => new TextDecoder().decode(b);

class Conn {
  #chunks: Uint8Array[] = [];
  #length = 0;
  #wake: (() => void) | undefined;
  ended = false;
  readonly closed: Promise<void>;

  constructor(readonly socket: Duplex) {
    socket.on("data", (c: Uint8Array) => {
      this.#chunks.push(c);
      this.#length += c.length;
      this.#wake?.();
    });
    socket.on("end", () => {
      this.ended = true;
      this.#wake?.();
    });
    socket.on("error", () => {});
    this.closed = new Promise((resolve) =>
      socket.once("close", () => {
        this.ended = true;
        this.#wake?.();
        resolve();
      })
    );
  }

  /** Everything buffered, as one array. */
  get #buf(): Uint8Array {
    if (this.#chunks.length !== 1) {
      const all = new Uint8Array(this.#length);
      let at = 0;
      for (const c of this.#chunks) {
        all.set(c, at);
        at += c.length;
      }
      this.#chunks = [all];
    }
    return this.#chunks[0] ?? new Uint8Array(0);
  }

  set #buf(b: Uint8Array) {
    this.#chunks = [b];
    this.#length = b.length;
  }

  async #until(done: () => boolean, what: string): Promise<void> {
    while (!done()) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        await new Promise<void>((resolve, reject) => {
          this.#wake = resolve;
          timer = setTimeout(
            () => reject(new Error(`timed out waiting for ${what}; have ${text(this.#buf)}`)),
            WAIT_MS,
          );
        });
      } finally {
        clearTimeout(timer);
        this.#wake = undefined;
      }
    }
  }

  /** Reads an HTTP answer head: the status and the header lines. */
  async readHead(): Promise<{ status: number; headers: string[] }> {
    const end = () => text(this.#buf).indexOf("\r\n\r\n");
    await this.#until(() => end() >= 0 || this.ended, "an answer head");
    const at = end();
    assert.ok(at >= 0, `no answer head before the connection ended: ${text(this.#buf)}`);
    const head = text(this.#buf).slice(0, at);
    this.#buf = this.#buf.subarray(new TextEncoder().encode(head).length + 4);
    const [statusLine = "", ...headers] = head.split("\r\n");
    return { status: Number(statusLine.split(" ")[1]), headers };
  }

  /** Reads exactly `n` bytes as text. */
  async read(n: number): Promise<string> {
    await this.#until(() => this.#length >= n || this.ended, `${n} bytes`);
    assert.ok(this.#buf.length >= n, `connection ended after ${text(this.#buf)}`);
    const out = text(this.#buf.subarray(0, n));
    this.#buf = this.#buf.subarray(n);
    return out;
  }

  /** Reads until the peer closes. */
  async readToEnd(): Promise<string> {
    await this.#until(() => this.ended, "the end of the connection");
    const out = text(this.#buf);
    this.#buf = new Uint8Array(0);
    return out;
  }

  async waitClosed(): Promise<void> {
    await this.#until(() => this.ended, "the connection to close");
    await this.closed;
  }

  close(): void {
    this.socket.destroy();
  }
}

// --- A stand-in for the runtime's streaming server (the fake CRI hands out port 0) ---

interface SeenRequest {
  readonly method: string;
  readonly target: string;
  readonly headers: readonly (readonly [string, string])[];
}

/** What the stand-in answers: an upgrade that echoes, or a plain status and body. */
type StreamAnswer = "upgrade" | { readonly status: number; readonly body: string };

class FakeStreamServer {
  readonly requests: SeenRequest[] = [];
  /** The runtime side of every upgraded connection. */
  readonly upgraded: Conn[] = [];
  answer: StreamAnswer = "upgrade";
  readonly #server: TcpServer;
  readonly #sockets = new Set<Socket>();
  #onUpgrade: (() => void) | undefined;

  constructor() {
    this.#server = createTcpServer((socket) => this.#accept(socket));
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    const address = this.#server.address();
    assert.ok(address && typeof address === "object");
    return address.port;
  }

  /** Connections the stand-in still has open. */
  get open(): number {
    return this.#sockets.size;
  }

  header(i: number, name: string): string[] {
    return (this.requests[i]?.headers ?? []).filter(([k]) => k.toLowerCase() === name)
      .map(([, v]) => v);
  }

  /** The runtime side of the n-th upgraded connection, once it exists. */
  async nth(n: number): Promise<Conn> {
    while (this.upgraded.length <= n) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        await new Promise<void>((resolve, reject) => {
          this.#onUpgrade = resolve;
          timer = setTimeout(() => reject(new Error("no upgraded connection")), WAIT_MS);
        });
      } finally {
        clearTimeout(timer);
      }
    }
    return this.upgraded[n]!;
  }

  #accept(socket: Socket): void {
    this.#sockets.add(socket);
    socket.once("close", () => this.#sockets.delete(socket));
    socket.on("error", () => {});
    let buf = "";
    const onData = (c: Uint8Array) => {
      buf += new TextDecoder().decode(c);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      socket.off("data", onData);
      socket.pause();
      const [line = "", ...lines] = buf.slice(0, end).split("\r\n");
      const [method = "", target = ""] = line.split(" ");
      const headers = lines.map((l) => {
        const i = l.indexOf(":");
        return [l.slice(0, i), l.slice(i + 1).trim()] as const;
      });
      this.requests.push({ method, target, headers });
      const rest = buf.slice(end + 4);
      if (this.answer !== "upgrade") {
        const { status, body } = this.answer;
        socket.end(
          `HTTP/1.1 ${status} Whatever\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}` +
            `\r\nX-From: runtime\r\n\r\n${body}`,
        );
        return;
      }
      const ws = headers.some(([k, v]) => k.toLowerCase() === "upgrade" && v === "websocket");
      socket.write(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n" +
          (ws
            ? "Upgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" +
              "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"
            : "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n") +
          "\r\n" + rest,
      );
      const conn = new Conn(socket);
      // Echo everything back.
      socket.on("data", (c: Uint8Array) => socket.write(c));
      socket.resume();
      this.upgraded.push(conn);
      this.#onUpgrade?.();
    };
    socket.on("data", onData);
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

// --- The harness: fake CRI, stand-in streaming server, kubelet API server ---

interface Harness extends AsyncDisposable {
  readonly fake: FakeRemoteRuntime;
  readonly stream: FakeStreamServer;
  readonly clock: FakeClock;
  readonly port: number;
  readonly containers: ReadonlyMap<string, string>;
  readonly sandboxId: string;
  readonly logs: string[];
  /** The CRI requests seen, and the URLs the fake runtime answered. */
  readonly exec: api.ExecRequest[];
  readonly attach: api.AttachRequest[];
  readonly portForward: api.PortForwardRequest[];
  readonly urls: string[];
  /** When set, replaces the runtime's URL (to test what the kubelet refuses). */
  urlOverride: string | undefined;
  /** Opens an upgrade request and reads the answer head. */
  upgrade(
    method: string,
    path: string,
    headers: Record<string, string | string[]>,
    extra?: string,
  ): Promise<{ conn: Conn; status: number; headers: string[] }>;
  /** A plain request; the whole answer. */
  plain(method: string, path: string): Promise<PlainAnswer>;
}

interface PlainAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

const POD: V1Pod = {
  metadata: { name: "web", namespace: "default", uid: UID },
  spec: {
    containers: [{ name: "main", image: IMAGE }, { name: "term", image: IMAGE, tty: true }],
  },
};

async function harness(opts: { idleTimeoutMs?: number } = {}): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "server-streaming-" });
  const fake = await startFakeRuntime({ preloadImages: [IMAGE], socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const remote = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const labels = {
    "io.kubernetes.pod.name": "web",
    "io.kubernetes.pod.namespace": "default",
    "io.kubernetes.pod.uid": UID,
  };
  const sandboxConfig = api.PodSandboxConfig.create({
    metadata: { name: "web", namespace: "default", uid: UID, attempt: 0 },
    labels,
  });
  const sandboxId = await remote.runPodSandbox(sandboxConfig, "");
  const containers = new Map<string, string>();
  for (const name of ["main", "term"]) {
    const id = await remote.createContainer(
      sandboxId,
      api.ContainerConfig.create({
        metadata: { name, attempt: 0 },
        image: { image: IMAGE },
        labels: { ...labels, "io.kubernetes.container.name": name },
      }),
      sandboxConfig,
    );
    await remote.startContainer(id);
    containers.set(name, id);
  }
  const stream = new FakeStreamServer();
  const streamPort = await stream.listen();
  const clock = new FakeClock();
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l), verbosity: 6 });
  const ctrl = new AbortController();
  const h = {
    fake,
    stream,
    clock,
    port: 0,
    containers,
    sandboxId,
    logs,
    exec: [] as api.ExecRequest[],
    attach: [] as api.AttachRequest[],
    portForward: [] as api.PortForwardRequest[],
    urls: [] as string[],
    urlOverride: undefined as string | undefined,
  };
  /** Points the fake's URL (port 0) at the stand-in, keeping its path. */
  const redirect = (raw: string) => {
    h.urls.push(raw);
    if (h.urlOverride !== undefined) return h.urlOverride;
    const url = new URL(raw);
    url.port = String(streamPort);
    return url.href;
  };
  const server = await serveKubeletAPI({
    hostname: "127.0.0.1",
    port: 0,
    tls: await tls(),
    authenticator: {
      authenticate: () => Promise.resolve({ name: "system:kube-apiserver", groups: [] }),
    },
    authorizer: { authorize: () => Promise.resolve({ allowed: true, reason: "" }) },
    attributes: (user, _req, url) => ({
      user,
      verb: "create",
      resource: "nodes",
      subresource: "proxy",
      name: "node-1",
      apiGroup: "",
      apiVersion: "v1",
      path: url.pathname,
    }),
    routes: streamingRoutes({
      getPodByName: (ns, name) =>
        ns === "default" && name === "web" ? structuredClone(POD) : undefined,
      findContainerId: (uid, name) => (uid === UID ? containers.get(name) : undefined),
      findSandboxId: (uid) => (uid === UID ? sandboxId : undefined),
      runtime: {
        exec: async (req, signal) => {
          h.exec.push(req);
          return redirect(await remote.exec(req, signal));
        },
        attach: async (req, signal) => {
          h.attach.push(req);
          return redirect(await remote.attach(req, signal));
        },
        portForward: async (req, signal) => {
          h.portForward.push(req);
          return redirect(await remote.portForward(req, signal));
        },
        execSync: (id, cmd, timeout, signal) => remote.execSync(id, cmd, timeout, signal),
      },
      logger,
      idleTimeoutMs: opts.idleTimeoutMs,
      clock,
    }),
    logger,
    signal: ctrl.signal,
  });
  h.port = server.port;
  const opened: Conn[] = [];
  return Object.assign(h, {
    async upgrade(
      method: string,
      path: string,
      headers: Record<string, string | string[]>,
      extra = "",
    ) {
      const socket = tlsConnect({ host: "127.0.0.1", port: h.port, rejectUnauthorized: false });
      const conn = new Conn(socket);
      opened.push(conn);
      await new Promise<void>((resolve, reject) => {
        socket.once("secureConnect", resolve);
        socket.once("error", reject);
      });
      const lines = [`${method} ${path} HTTP/1.1`, `Host: 127.0.0.1:${h.port}`];
      for (const [k, v] of Object.entries(headers)) {
        for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
      }
      socket.write(`${lines.join("\r\n")}\r\n\r\n${extra}`);
      const head = await conn.readHead();
      return { conn, ...head };
    },
    plain(method: string, path: string): Promise<PlainAnswer> {
      return new Promise((resolve, reject) => {
        const req = httpsRequest({
          host: "127.0.0.1",
          port: h.port,
          method,
          path,
          rejectUnauthorized: false,
          agent: false,
          headers: { connection: "close" },
        }, (res) => {
          const chunks: Uint8Array[] = [];
          res.on("data", (c: Uint8Array) => chunks.push(c));
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              body: chunks.map(text).join(""),
            }));
          res.on("error", reject);
        });
        req.on("error", reject);
        req.end();
      });
    },
    async [Symbol.asyncDispose]() {
      for (const c of opened) c.close();
      ctrl.abort();
      await server.finished;
      await stream.close();
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  });
}

const EXEC = "/exec/default/web/main?command=sh&command=-c&command=echo%20hi&input=1&output=1";

// --- Option parsing and URL checks ---

Deno.test("parseStreamOptions takes only '1' as on, drops stderr with a TTY, needs a stream", () => {
  const q = (s: string) => new URLSearchParams(s);
  assert.deepEqual(parseStreamOptions(q("input=1&output=true&error=1")), {
    stdin: true,
    stdout: false,
    stderr: true,
    tty: false,
  });
  assert.deepEqual(parseStreamOptions(q("output=1&error=1&tty=1")), {
    stdin: false,
    stdout: true,
    stderr: false,
    tty: true,
  });
  assert.throws(() => parseStreamOptions(q("error=1&tty=1")), {
    name: "StreamingRequestError",
    message: "you must specify at least 1 of stdin, stdout, stderr",
  });
  assert.throws(() => parseStreamOptions(q("output=0")), StreamingRequestError);
});

Deno.test("parsePortForwardPorts reads repeated and comma-separated ports for WebSockets only", () => {
  const q = (s: string) => new URLSearchParams(s);
  assert.deepEqual(parsePortForwardPorts(q(""), false), []);
  assert.deepEqual(parsePortForwardPorts(q("port=80,443&port=8080"), true), [80, 443, 8080]);
  const fails = (s: string, message: string) =>
    assert.throws(() => parsePortForwardPorts(q(s), true), { status: 400, message } as object);
  fails("", 'query parameter "port" is required');
  fails("port=", 'query parameter "port" cannot be empty');
  fails("port=0", 'port "0" must be > 0');
  fails(
    "port=80,x",
    'unable to parse "80,x" as a port: strconv.ParseUint: parsing "x": invalid syntax',
  );
  fails(
    "port=70000",
    'unable to parse "70000" as a port: strconv.ParseUint: parsing "70000": value out of range',
  );
});

Deno.test("parseStreamingUrl accepts only plain HTTP on a loopback address", () => {
  assert.equal(parseStreamingUrl("http://127.0.0.1:4242/exec/tok").port, "4242");
  assert.equal(parseStreamingUrl("http://[::1]:4242/attach/tok").hostname, "[::1]");
  assert.ok(isLoopbackHost("::ffff:127.0.0.1"));
  assert.ok(!isLoopbackHost("localhost"));
  assert.ok(!isLoopbackHost("::ffff:10.0.0.1"));
  assert.throws(() => parseStreamingUrl("http://10.1.2.3:4242/exec/tok"), {
    name: "StreamingUrlError",
    message:
      `refusing to proxy to the container runtime's streaming server at "10.1.2.3:4242": its ` +
      "host is not a loopback address (configure the runtime to stream on 127.0.0.1)",
  });
  assert.throws(() => parseStreamingUrl("https://127.0.0.1:1/exec/t"), /not supported yet/);
  assert.throws(() => parseStreamingUrl("/exec/tok"), StreamingUrlError);
});

// --- Through the kubelet API server ---

Deno.test("streamingRoutes proxies an exec SPDY upgrade to the runtime's URL and echoes both ways", async () => {
  await using h = await harness();
  const { conn, status, headers } = await h.upgrade("POST", EXEC, SPDY);
  assert.equal(status, 101);
  assert.ok(headers.includes("X-Stream-Protocol-Version: v4.channel.k8s.io"), String(headers));
  assert.ok(headers.includes("Upgrade: SPDY/3.1"));
  assert.deepEqual(h.exec, [{
    containerId: h.containers.get("main"),
    cmd: ["sh", "-c", "echo hi"],
    stdin: true,
    stdout: true,
    stderr: false,
    tty: false,
  }]);
  // The runtime saw the client's request, aimed at the path of the URL it handed out.
  const seen = h.stream.requests[0]!;
  assert.equal(seen.method, "POST");
  assert.equal(seen.target, new URL(h.urls[0]!).pathname);
  assert.match(seen.target, /^\/exec\//);
  assert.deepEqual(h.stream.header(0, "x-stream-protocol-version"), [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
  ]);
  assert.deepEqual(h.stream.header(0, "upgrade"), ["SPDY/3.1"]);
  assert.deepEqual(h.stream.header(0, "connection"), ["Upgrade"]);
  assert.deepEqual(h.stream.header(0, "x-forwarded-for"), ["127.0.0.1"]);
  assert.deepEqual(h.stream.header(0, "host"), [`127.0.0.1:${h.port}`]);
  // Client to runtime (echoed back), then runtime to client unprompted.
  conn.socket.write("ping");
  assert.equal(await conn.read(4), "ping");
  const runtimeSide = await h.stream.nth(0);
  runtimeSide.socket.write("hello from the runtime");
  assert.equal(await conn.read(22), "hello from the runtime");
  assert.equal(await runtimeSide.read(4), "ping");
  conn.close();
  await runtimeSide.waitClosed();
});

Deno.test("streamingRoutes forwards bytes the client sent with its upgrade request", async () => {
  await using h = await harness();
  const { conn, status } = await h.upgrade("GET", EXEC, SPDY, "early");
  assert.equal(status, 101);
  assert.equal(await conn.read(5), "early");
});

Deno.test("streamingRoutes proxies an attach WebSocket upgrade with the container spec's TTY", async () => {
  await using h = await harness();
  const { conn, status, headers } = await h.upgrade(
    "GET",
    `/attach/default/web/${UID}/term?input=1&output=1&tty=0`,
    WEBSOCKET,
  );
  assert.equal(status, 101);
  assert.ok(headers.includes("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
  assert.ok(headers.includes("Sec-WebSocket-Protocol: v4.channel.k8s.io"));
  assert.deepEqual(h.attach, [{
    containerId: h.containers.get("term"),
    stdin: true,
    stdout: true,
    stderr: false,
    tty: true,
  }]);
  assert.equal(h.stream.requests[0]!.method, "GET");
  assert.match(h.stream.requests[0]!.target, /^\/attach\//);
  assert.deepEqual(h.stream.header(0, "sec-websocket-key"), ["dGhlIHNhbXBsZSBub25jZQ=="]);
  assert.deepEqual(h.stream.header(0, "sec-websocket-version"), ["13"]);
  assert.deepEqual(h.stream.header(0, "sec-websocket-protocol"), ["v4.channel.k8s.io"]);
  conn.socket.write("\x00ls\n");
  assert.equal(await conn.read(4), "\x00ls\n");
});

Deno.test("streamingRoutes proxies a port-forward upgrade to the pod's sandbox, with or without its UID", async () => {
  await using h = await harness();
  for (const path of ["/portForward/default/web", `/portForward/default/web/${UID}`]) {
    const { conn, status } = await h.upgrade("POST", path, {
      ...SPDY,
      "X-Stream-Protocol-Version": "portforward.k8s.io",
    });
    assert.equal(status, 101);
    conn.socket.write("data");
    assert.equal(await conn.read(4), "data");
    conn.close();
  }
  assert.deepEqual(h.portForward, [
    { podSandboxId: h.sandboxId, port: [] },
    { podSandboxId: h.sandboxId, port: [] },
  ]);
  assert.deepEqual(h.stream.header(1, "x-stream-protocol-version"), ["portforward.k8s.io"]);
  assert.match(h.stream.requests[1]!.target, /^\/portforward\//);
});

Deno.test("streamingRoutes reads WebSocket port-forward ports and refuses bad ones with 400", async () => {
  await using h = await harness();
  const ok = await h.upgrade("GET", "/portForward/default/web?port=80,443", WEBSOCKET);
  assert.equal(ok.status, 101);
  assert.deepEqual(h.portForward, [{ podSandboxId: h.sandboxId, port: [80, 443] }]);
  const missing = await h.upgrade("GET", "/portForward/default/web", WEBSOCKET);
  assert.equal(missing.status, 400);
  assert.equal(await missing.conn.readToEnd(), 'query parameter "port" is required');
  const zero = await h.upgrade("GET", "/portForward/default/web?port=0", WEBSOCKET);
  assert.equal(zero.status, 400);
  assert.equal(await zero.conn.readToEnd(), 'port "0" must be > 0');
  assert.equal(h.portForward.length, 1);
});

Deno.test("streamingRoutes checks exec streams as upstream: none is 400, a TTY drops stderr, no command passes", async () => {
  await using h = await harness();
  const none = await h.upgrade("POST", "/exec/default/web/main?command=ls", SPDY);
  assert.equal(none.status, 400);
  assert.ok(none.headers.includes("Content-Type: text/plain; charset=utf-8"));
  assert.equal(await none.conn.readToEnd(), "you must specify at least 1 of stdin, stdout, stderr");
  const plainNone = await h.plain("POST", "/exec/default/web/main?command=ls&input=0");
  assert.equal(plainNone.status, 400);
  assert.equal(plainNone.body, "you must specify at least 1 of stdin, stdout, stderr");
  assert.equal(h.exec.length, 0);

  const tty = await h.upgrade(
    "POST",
    "/exec/default/web/main?command=sh&input=1&output=1&error=1&tty=1",
    SPDY,
  );
  assert.equal(tty.status, 101);
  assert.equal(h.exec[0]!.stderr, false);
  assert.equal(h.exec[0]!.tty, true);

  // Upstream's kubelet leaves an empty command to the runtime (the apiserver's client checks it).
  const noCommand = await h.upgrade("POST", "/exec/default/web/main?output=1", SPDY);
  assert.equal(noCommand.status, 101);
  assert.deepEqual(h.exec[1]!.cmd, []);
});

Deno.test("streamingRoutes answers unknown pods and containers with upstream's status and text", async () => {
  await using h = await harness();
  const cases: [string, number, string][] = [
    ["/exec/default/nope/main?output=1", 404, "pod does not exist"],
    ["/exec/other/web/main?output=1", 404, "pod does not exist"],
    ["/exec/default/web/nope?output=1", 500, 'container not found ("nope")'],
    ["/attach/default/nope/main?output=1", 404, "pod does not exist"],
    ["/attach/default/web/nope?output=1", 500, "container nope not found in pod web_default"],
    ["/attach/default/web/other-uid/main?output=1", 500, "pod web_default not found"],
    ["/portForward/default/nope", 404, "pod does not exist"],
    ["/portForward/default/web/other-uid", 404, "pod not found"],
  ];
  for (const [path, status, body] of cases) {
    const up = await h.upgrade("POST", path, SPDY);
    assert.equal(up.status, status, path);
    assert.equal(await up.conn.readToEnd(), body, path);
    const plain = await h.plain("GET", path);
    assert.equal(plain.status, status, path);
    assert.equal(plain.body, body, path);
  }
  assert.equal(h.exec.length + h.attach.length + h.portForward.length, 0);
  assert.equal(h.stream.requests.length, 0);
});

Deno.test("streamingRoutes answers a plain exec, attach or port-forward 500 Upgrade request required", async () => {
  await using h = await harness();
  for (const path of [EXEC, "/attach/default/web/main?output=1", "/portForward/default/web"]) {
    const res = await h.plain("POST", path);
    assert.equal(res.status, 500, path);
    assert.equal(res.body, "Upgrade request required\n");
    assert.equal(res.headers["x-content-type-options"], "nosniff");
  }
  // As upstream, the runtime was asked for a URL before the missing upgrade was noticed.
  assert.equal(h.exec.length + h.attach.length + h.portForward.length, 3);
  assert.equal(h.stream.requests.length, 0);
});

Deno.test("streamingRoutes refuses a streaming URL that is not on loopback", async () => {
  await using h = await harness();
  h.urlOverride = "http://10.1.2.3:4242/exec/token";
  const up = await h.upgrade("POST", EXEC, SPDY);
  assert.equal(up.status, 500);
  assert.equal(
    await up.conn.readToEnd(),
    `refusing to proxy to the container runtime's streaming server at "10.1.2.3:4242": its host ` +
      "is not a loopback address (configure the runtime to stream on 127.0.0.1)\n",
  );
  const plain = await h.plain("POST", EXEC);
  assert.equal(plain.status, 500);
  assert.match(plain.body, /not a loopback address/);
  assert.equal(h.exec.length, 2);
  assert.equal(h.stream.requests.length, 0);
  assert.ok(h.logs.some((l) => l.includes("Error while proxying request")));
});

Deno.test("streamingRoutes maps CRI errors as streaming.WriteError: NotFound 404, ResourceExhausted 429, else 500", async () => {
  await using h = await harness();
  h.fake.injectError("Exec", GrpcCode.NOT_FOUND, "token cache miss");
  const notFound = await h.upgrade("POST", EXEC, SPDY);
  assert.equal(notFound.status, 404);
  assert.equal(
    await notFound.conn.readToEnd(),
    "rpc error: code = NotFound desc = token cache miss",
  );
  h.fake.injectError(
    "Attach",
    GrpcCode.RESOURCE_EXHAUSTED,
    "maximum number of in-flight requests exceeded [Retry-After:7]",
  );
  const busy = await h.upgrade("POST", "/attach/default/web/main?output=1", SPDY);
  assert.equal(busy.status, 429);
  assert.ok(busy.headers.includes("Retry-After: 7"), String(busy.headers));
  h.fake.service.exitContainer(h.containers.get("main")!, 0);
  const exited = await h.plain("POST", EXEC);
  assert.equal(exited.status, 500);
  assert.equal(
    exited.body,
    "rpc error: code = FailedPrecondition desc = container is in CONTAINER_EXITED state",
  );
  assert.equal(h.stream.requests.length, 0);
});

Deno.test("streamingRoutes relays the runtime's refusal and rejects a non-101 success", async () => {
  await using h = await harness();
  h.stream.answer = { status: 404, body: "404 page not found\n" };
  const refused = await h.upgrade("POST", EXEC, SPDY);
  assert.equal(refused.status, 404);
  assert.ok(refused.headers.includes("X-From: runtime"));
  assert.equal(await refused.conn.readToEnd(), "404 page not found\n");
  h.stream.answer = { status: 200, body: "ok" };
  const ok = await h.upgrade("POST", EXEC, SPDY);
  assert.equal(ok.status, 500);
  assert.equal(await ok.conn.readToEnd(), "invalid upgrade response: status code 200\n");
});

Deno.test("streamingRoutes answers 500 when the runtime's streaming server cannot be dialled", async () => {
  await using h = await harness();
  const closed = createTcpServer();
  await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const address = closed.address();
  assert.ok(address && typeof address === "object");
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  h.urlOverride = `http://127.0.0.1:${address.port}/exec/token`;
  const up = await h.upgrade("POST", EXEC, SPDY);
  assert.equal(up.status, 500);
  assert.match(await up.conn.readToEnd(), /^error dialing backend: .*\n$/);
});

Deno.test("streamingRoutes closes the runtime side when the client goes away mid-stream", async () => {
  await using h = await harness();
  const { conn } = await h.upgrade("POST", EXEC, SPDY);
  conn.socket.write("x");
  assert.equal(await conn.read(1), "x");
  const runtimeSide = await h.stream.nth(0);
  conn.close();
  await runtimeSide.waitClosed();
  assert.equal(h.stream.open, 0);
});

Deno.test("streamingRoutes delivers the runtime's last bytes, then closes the client when it hangs up", async () => {
  await using h = await harness();
  const { conn } = await h.upgrade("POST", EXEC, SPDY);
  const runtimeSide = await h.stream.nth(0);
  // Large enough to make the proxy wait for the client to drain (back-pressure) before the end.
  const last = "x".repeat(4 << 20) + "exit status 0";
  runtimeSide.socket.end(last);
  const got = await conn.readToEnd();
  assert.equal(got.length, last.length);
  assert.ok(got.endsWith("exit status 0"));
  await conn.waitClosed();
  await runtimeSide.waitClosed();
  assert.equal(h.stream.open, 0);
});

Deno.test("streamingRoutes closes a stream idle for streamingConnectionIdleTimeout, activity resets it", async () => {
  await using h = await harness({ idleTimeoutMs: 1000 });
  const { conn } = await h.upgrade("POST", EXEC, SPDY);
  const runtimeSide = await h.stream.nth(0);
  h.clock.step(600);
  conn.socket.write("a");
  assert.equal(await conn.read(1), "a"); // activity at t=600
  h.clock.step(600); // t=1200: 600 ms idle
  conn.socket.write("b");
  assert.equal(await conn.read(1), "b"); // activity at t=1200
  h.clock.step(999);
  conn.socket.write("c");
  assert.equal(await conn.read(1), "c"); // still open; activity at t=2199
  h.clock.step(1000);
  await conn.waitClosed();
  await runtimeSide.waitClosed();
  assert.ok(h.logs.some((l) => l.includes("Streaming connection idle, closing it")));
});

Deno.test("streamingRoutes closes proxied streams when the server stops", async () => {
  const h = await harness();
  const { conn } = await h.upgrade("POST", EXEC, SPDY);
  const runtimeSide = await h.stream.nth(0);
  await h[Symbol.asyncDispose]();
  await conn.waitClosed();
  await runtimeSide.waitClosed();
});

Deno.test("streamingRoutes /run answers the command's output from ExecSync", async () => {
  await using h = await harness();
  const seen: string[][] = [];
  h.fake.service.execHandler = (_, cmd) => {
    seen.push([...cmd]);
    return cmd[0] === "quiet" ? {} : { stdout: "out:", stderr: "err" };
  };
  const res = await h.plain("POST", `/run/default/web/${UID}/main?cmd=echo%20hello%20world`);
  assert.equal(res.status, 200);
  assert.equal(res.headers["content-type"], "application/json");
  assert.equal(res.body, "out:err");
  assert.deepEqual(seen, [["echo", "hello", "world"]]);
  const quiet = await h.plain("POST", "/run/default/web/main?cmd=quiet");
  assert.equal(quiet.status, 200);
  assert.equal(quiet.headers["content-type"], undefined);
  assert.equal(quiet.body, "");
});

Deno.test("streamingRoutes /run fails with upstream's texts", async () => {
  await using h = await harness();
  h.fake.service.execHandler = () => ({ stdout: "partial", stderr: "boom", exitCode: 2 });
  const failed = await h.plain("POST", "/run/default/web/main?cmd=false%20now");
  assert.equal(failed.status, 500);
  assert.equal(failed.body, "command 'false now' exited with 2: boom");
  const noPod = await h.plain("POST", "/run/default/nope/main?cmd=ls");
  assert.deepEqual([noPod.status, noPod.body], [404, "pod does not exist"]);
  const noContainer = await h.plain("POST", "/run/default/web/nope?cmd=ls");
  assert.deepEqual([noContainer.status, noContainer.body], [500, 'container not found ("nope")']);
  h.fake.service.exitContainer(h.containers.get("main")!, 0);
  const exited = await h.plain("POST", "/run/default/web/main?cmd=ls");
  assert.equal(exited.status, 500);
  assert.equal(
    exited.body,
    "rpc error: code = FailedPrecondition desc = failed to exec in container: container is in " +
      "CONTAINER_EXITED state",
  );
});
