import assert from "node:assert/strict";
import { doTcpProbe } from "./_probe_tcp.ts";

Deno.test("doTcpProbe succeeds when the port accepts", async () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  assert.deepEqual(await doTcpProbe("127.0.0.1", listener.addr.port, 1000), {
    result: "Success",
    output: "",
  });
});

Deno.test("doTcpProbe fails with Go's dial text when refused", async () => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = l.addr.port;
  l.close();
  assert.deepEqual(await doTcpProbe("127.0.0.1", port, 1000), {
    result: "Failure",
    output: `dial tcp 127.0.0.1:${port}: connect: connection refused`,
  });
});

Deno.test("doTcpProbe never blocks beyond its timeout on an unanswered address", async () => {
  const t0 = performance.now();
  // TEST-NET-1 (RFC 5737) is never routed: the dial hangs or fails at once.
  const out = await doTcpProbe("192.0.2.1", 81, 200);
  const elapsed = performance.now() - t0;
  assert.equal(out.result, "Failure");
  assert.match(out.output, /^dial tcp 192\.0\.2\.1:81: /);
  assert.ok(elapsed < 1000, `took ${elapsed} ms`);
});

Deno.test("doTcpProbe rethrows when the caller's signal aborts", async () => {
  const ctl = new AbortController();
  ctl.abort(new Error("stopping"));
  await assert.rejects(doTcpProbe("192.0.2.1", 81, 5000, ctl.signal), /stopping/);
});
