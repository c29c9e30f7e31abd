import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { HandlerRunner, userAgentFor } from "./handlers.ts";

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
