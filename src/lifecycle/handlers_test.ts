import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { HandlerRunner, userAgentFor } from "./handlers.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";

const POD: V1Pod = { metadata: { name: "web", namespace: "default", uid: "u1" } };
const C: V1Container = { name: "main", ports: [{ name: "http", containerPort: 1 }] };
const enc = new TextEncoder();

function runner(execSync: (cmd: readonly string[]) => Promise<api.ExecSyncResponse>) {
  const clock = new FakeClock();
  return {
    clock,
    runner: new HandlerRunner({
      runtime: { execSync: (_id, cmd) => execSync(cmd) },
      logger: createLogger({ write: () => {} }),
      clock,
    }),
  };
}

const ok = (): Promise<api.ExecSyncResponse> =>
  Promise.resolve({ stdout: enc.encode(""), stderr: enc.encode(""), exitCode: 0 });

Deno.test("userAgentFor names the purpose and the upstream minor version", () => {
  assert.equal(userAgentFor("lifecycle"), "kube-lifecycle/1.36");
});

Deno.test("HandlerRunner.run execs the command and words a failure as upstream", async () => {
  const seen: string[][] = [];
  const { runner: r } = runner((cmd) => {
    seen.push([...cmd]);
    return Promise.resolve({ stdout: enc.encode("o"), stderr: enc.encode("e"), exitCode: 2 });
  });
  const msg = await r.run(AbortSignal.timeout(5000), "cid", POD, [], C, {
    exec: { command: ["sh", "-c", "exit 2"] },
  });
  assert.deepEqual(seen, [["sh", "-c", "exit 2"]]);
  assert.equal(
    msg,
    'Exec lifecycle hook ([sh -c exit 2]) for Container "main" in Pod "web_default(u1)" failed - ' +
      "error: command 'sh -c exit 2' exited with 2: e, message: \"oe\"",
  );
  const { runner: good } = runner(ok);
  assert.equal(
    await good.run(AbortSignal.timeout(5000), "cid", POD, [], C, { exec: { command: ["true"] } }),
    undefined,
  );
});

Deno.test("HandlerRunner.run sends httpGet to the pod IP and accepts any response", async () => {
  const seen: Array<[string, string]> = [];
  const server = http.createServer((req, res) => {
    seen.push([req.url ?? "", req.headers["user-agent"] ?? ""]);
    res.writeHead(500).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  try {
    const { runner: r } = runner(ok);
    const handler = { httpGet: { path: "/hook", port } };
    assert.equal(
      await r.run(AbortSignal.timeout(5000), "cid", POD, ["127.0.0.1"], C, handler),
      undefined,
    );
    assert.deepEqual(seen, [["/hook", "kube-lifecycle/1.36"]]);
    assert.equal(
      await r.run(AbortSignal.timeout(5000), "cid", POD, [], C, handler),
      'HTTP lifecycle hook (/hook) for Container "main" in Pod "web_default(u1)" failed - ' +
        "error: failed to find networking container: the pod has no IPs",
    );
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const closed = l.addr.port;
  l.close();
  const { runner: r } = runner(ok);
  assert.match(
    await r.run(AbortSignal.timeout(5000), "cid", POD, ["127.0.0.1"], C, {
      httpGet: { path: "/x", port: closed },
    }) ?? "",
    /^HTTP lifecycle hook \(\/x\) .* failed - error: Get "http:\/\/127\.0\.0\.1:\d+\/x": dial tcp .*connection refused$/,
  );
});

Deno.test("HandlerRunner.run sleeps on the clock and fails when stopped early", async () => {
  const { runner: r, clock } = runner(ok);
  let done = false;
  const p = r.run(AbortSignal.timeout(5000), "cid", POD, [], C, { sleep: { seconds: 3 } })
    .then((m) => {
      done = true;
      return m;
    });
  await Promise.resolve();
  clock.step(2_999);
  await Promise.resolve();
  assert.equal(done, false);
  clock.step(1);
  assert.equal(await p, undefined);

  const ctl = new AbortController();
  const q = r.run(ctl.signal, "cid", POD, [], C, { sleep: { seconds: 3 } });
  ctl.abort();
  assert.equal(
    await q,
    'Sleep lifecycle hook (3) for Container "main" in Pod "web_default(u1)" failed - error: ' +
      "container terminated before sleep hook finished",
  );
});

Deno.test("HandlerRunner.run refuses a handler without an action", async () => {
  const { runner: r } = runner(ok);
  assert.match(
    await r.run(AbortSignal.timeout(5000), "cid", POD, [], C, {}) ?? "",
    /^Cannot run handler: invalid handler: /,
  );
});

Deno.test("HandlerRunner counts an HTTPS hook that an HTTP server answered and a retry in HTTP served, with a Warning event", async () => {
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url ?? "");
    res.writeHead(200).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const metrics = new KubeletMetrics({ process: false });
  const events: string[] = [];
  const r = new HandlerRunner({
    runtime: { execSync: () => ok() },
    logger: createLogger({ write: () => {} }),
    clock: new FakeClock(),
    metrics,
    recorder: {
      event: (ref, type, reason, message) =>
        events.push(`${ref.kind} ${ref.name} ${ref.uid} ${type} ${reason}: ${message}`),
    },
  });
  try {
    const https = { httpGet: { path: "/hook", port, scheme: "HTTPS" } };
    assert.equal(
      await r.run(AbortSignal.timeout(5000), "cid", POD, ["127.0.0.1"], C, https),
      undefined,
    );
    assert.deepEqual(seen, ["/hook"], "served by the retry in plain HTTP");
    assert.equal(metrics.lifecycleHandlerHttpFallbacks.get(), 1);
    assert.deepEqual(events, [
      `Pod web u1 Warning LifecycleHTTPFallback: request to HTTPS lifecycle hook 127.0.0.1:${port} got HTTP response, retry with HTTP succeeded`,
    ]);
    // A hook in plain HTTP is no fallback.
    const plain = { httpGet: { path: "/hook", port } };
    assert.equal(
      await r.run(AbortSignal.timeout(5000), "cid", POD, ["127.0.0.1"], C, plain),
      undefined,
    );
    assert.equal(metrics.lifecycleHandlerHttpFallbacks.get(), 1);
    assert.equal(events.length, 1);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});

Deno.test("HandlerRunner counts a sleep hook stopped before its end, not one that ran out", async () => {
  const clock = new FakeClock();
  const metrics = new KubeletMetrics({ process: false });
  const r = new HandlerRunner({
    runtime: { execSync: () => ok() },
    logger: createLogger({ write: () => {} }),
    clock,
    metrics,
  });
  const full = r.run(AbortSignal.timeout(5000), "cid", POD, [], C, { sleep: { seconds: 1 } });
  await Promise.resolve();
  clock.step(1_000);
  assert.equal(await full, undefined);
  assert.equal(metrics.sleepActionTerminatedEarly.get(), 0);
  const ctl = new AbortController();
  const stopped = r.run(ctl.signal, "cid", POD, [], C, { sleep: { seconds: 30 } });
  ctl.abort();
  assert.match(await stopped ?? "", /container terminated before sleep hook finished$/);
  assert.equal(metrics.sleepActionTerminatedEarly.get(), 1);
});
