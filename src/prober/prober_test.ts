import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection } from "../cri/connection.ts";
import type { ObjectRef } from "../client/record.ts";
import { startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import { Prober } from "./prober.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";

const IMAGE = "busybox:1.36";

interface Recorded {
  readonly ref: ObjectRef;
  readonly type: string;
  readonly reason: string;
  readonly message: string;
}

/** A fake CRI with one running container, and a Prober over it. */
async function harness() {
  const dir = await Deno.makeTempDir({ prefix: "prober-" });
  const clock = new FakeClock();
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    socket: join(dir, "cri.sock"),
    clock,
  });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const sandboxConfig = api.PodSandboxConfig.create({
    metadata: { name: "web", namespace: "default", uid: "uid-web", attempt: 0 },
  });
  const sandboxId = await runtime.runPodSandbox(sandboxConfig, "");
  const containerId = await runtime.createContainer(
    sandboxId,
    api.ContainerConfig.create({ metadata: { name: "main" }, image: { image: IMAGE } }),
    sandboxConfig,
  );
  await runtime.startContainer(containerId);
  const events: Recorded[] = [];
  const prober = new Prober({
    runtime,
    recorder: {
      event: (ref, type, reason, message) => events.push({ ref, type, reason, message }),
    },
    logger: createLogger({ write: () => {} }),
    clock,
  });
  return {
    fake,
    prober,
    containerId,
    events,
    async [Symbol.asyncDispose]() {
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function pod(container: V1Container): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid: "uid-web" },
    spec: { containers: [container] },
  };
}

const signal = () => AbortSignal.timeout(10_000);

Deno.test("Prober.probe succeeds without a probe of that kind", async () => {
  await using h = await harness();
  const c: V1Container = { name: "main" };
  assert.deepEqual(await h.prober.probe(signal(), "liveness", pod(c), [], c, h.containerId), {
    result: "Success",
    output: "",
  });
});

Deno.test("Prober.probe runs exec probes through ExecSync with static env expansion", async () => {
  await using h = await harness();
  const cmds: string[] = [];
  h.fake.service.execHandler = (_, cmd) => {
    cmds.push(cmd.join(" "));
    return cmd[0] === "fail" ? { stdout: "out ", stderr: "err", exitCode: 1 } : { stdout: "ok" };
  };
  const ok: V1Container = {
    name: "main",
    env: [{ name: "FILE", value: "/tmp/ready" }, {
      name: "REF",
      valueFrom: { fieldRef: { fieldPath: "x" } },
    }],
    readinessProbe: { exec: { command: ["cat", "$(FILE)", "$(REF)"] } },
  };
  assert.deepEqual(await h.prober.probe(signal(), "readiness", pod(ok), [], ok, h.containerId), {
    result: "Success",
    output: "ok",
  });
  assert.deepEqual(cmds, ["cat /tmp/ready $(REF)"]);
  const bad: V1Container = { name: "main", livenessProbe: { exec: { command: ["fail"] } } };
  assert.deepEqual(await h.prober.probe(signal(), "liveness", pod(bad), [], bad, h.containerId), {
    result: "Failure",
    output: "out err",
  });
  assert.deepEqual(h.events.map((e) => [e.type, e.reason, e.message, e.ref.fieldPath]), [
    ["Warning", "Unhealthy", "Liveness probe failed: out err", "spec.containers{main}"],
  ]);
});

Deno.test("Prober.probe fails an exec probe that outlives timeoutSeconds", async () => {
  await using h = await harness();
  let release = () => {};
  h.fake.service.execHandler = () => new Promise((r) => release = () => r({}));
  const c: V1Container = {
    name: "main",
    startupProbe: { exec: { command: ["sleep", "60"] }, timeoutSeconds: 1 },
  };
  const t0 = performance.now();
  const out = await h.prober.probe(signal(), "startup", pod(c), [], c, h.containerId);
  release();
  assert.ok(performance.now() - t0 < 3000);
  assert.deepEqual(out, { result: "Failure", output: 'command "sleep 60" timed out' });
  assert.equal(h.events.at(-1)?.message, 'Startup probe failed: command "sleep 60" timed out');
});

Deno.test("Prober.probe reports an errored probe as Unknown with upstream's event", async () => {
  await using h = await harness();
  const c: V1Container = { name: "main", readinessProbe: { tcpSocket: { port: "missing" } } };
  const out = await h.prober.probe(signal(), "readiness", pod(c), ["127.0.0.1"], c, h.containerId);
  assert.deepEqual(out, {
    result: "Unknown",
    output: 'strconv.Atoi: parsing "missing": invalid syntax',
  });
  assert.equal(
    h.events.at(-1)?.message,
    'Readiness probe errored and resulted in unknown state: strconv.Atoi: parsing "missing": invalid syntax',
  );
  // An exec in a container that is gone errors too.
  const gone: V1Container = { name: "main", livenessProbe: { exec: { command: ["true"] } } };
  const res = await h.prober.probe(signal(), "liveness", pod(gone), [], gone, "no-such-container");
  assert.equal(res.result, "Unknown");
  assert.match(res.output, /^rpc error: code = NotFound/);
});

Deno.test("Prober.probe runs httpGet against the pod IP with Unhealthy and ProbeWarning events", async () => {
  await using h = await harness();
  const agents: string[] = [];
  const server = http.createServer((req, res) => {
    agents.push(req.headers["user-agent"] ?? "");
    if (req.url === "/bad") res.writeHead(500).end("no");
    else if (req.url === "/away") res.writeHead(302, { location: "http://localhost:1/" }).end();
    else res.end("ok");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  try {
    const probe = async (path: string) => {
      const c: V1Container = {
        name: "main",
        ports: [{ name: "http", containerPort: port }],
        livenessProbe: { httpGet: { path, port: "http" } },
      };
      return await h.prober.probe(signal(), "liveness", pod(c), ["127.0.0.1"], c, h.containerId);
    };
    assert.deepEqual(await probe("/"), { result: "Success", output: "ok" });
    assert.deepEqual(await probe("/bad"), {
      result: "Failure",
      output: "HTTP probe failed with statuscode: 500",
    });
    assert.equal((await probe("/away")).result, "Success");
    assert.deepEqual(h.events.map((e) => [e.reason, e.message]), [
      ["Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500"],
      ["ProbeWarning", "Liveness probe warning: Probe terminated redirects, Response body: "],
    ]);
    assert.deepEqual(new Set(agents), new Set(["kube-probe/1.36"]));
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});

Deno.test("Prober.probe runs tcpSocket probes against the pod IP", async () => {
  await using h = await harness();
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  const c: V1Container = { name: "main", readinessProbe: { tcpSocket: { port } } };
  assert.equal(
    (await h.prober.probe(signal(), "readiness", pod(c), ["127.0.0.1"], c, h.containerId)).result,
    "Success",
  );
  listener.close();
  assert.deepEqual(
    await h.prober.probe(signal(), "readiness", pod(c), ["127.0.0.1"], c, h.containerId),
    { result: "Failure", output: `dial tcp 127.0.0.1:${port}: connect: connection refused` },
  );
  assert.equal(
    h.events.at(-1)?.message,
    `Readiness probe failed: dial tcp 127.0.0.1:${port}: connect: connection refused`,
  );
});

Deno.test("Prober.probe runs grpc probes and fails within the timeout when nothing answers", async () => {
  await using h = await harness();
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const c: V1Container = {
      name: "main",
      livenessProbe: { grpc: { port: listener.addr.port }, timeoutSeconds: 1 },
    };
    const t0 = performance.now();
    const out = await h.prober.probe(signal(), "liveness", pod(c), ["127.0.0.1"], c, h.containerId);
    assert.ok(performance.now() - t0 < 3000);
    assert.deepEqual(out, {
      result: "Failure",
      output: `timeout: failed to connect service "127.0.0.1:${listener.addr.port}" within 1s: ` +
        "context deadline exceeded",
    });
  } finally {
    listener.close();
  }
});
