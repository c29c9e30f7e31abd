import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "../client/kube_client.ts";
import { microTime, NodeLeaseController } from "./node_lease.ts";

/** A loopback stand-in for the apiserver's lease endpoints; `failures` answers 500 first. */
function leaseServer() {
  const leases = new Map<string, V1Lease>();
  const state = { failures: 0, requests: [] as string[] };
  let rv = 1;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    state.requests.push(`${req.method} ${url.pathname}`);
    if (state.failures > 0) {
      state.failures--;
      return Response.json({ kind: "Status", reason: "InternalError", message: "etcd is gone" }, {
        status: 500,
      });
    }
    const name = url.pathname.split("/").at(-1) ?? "";
    if (req.method === "GET") {
      const l = leases.get(name);
      return l
        ? Response.json(l)
        : Response.json({ kind: "Status", reason: "NotFound", message: "not found" }, {
          status: 404,
        });
    }
    const body = await req.json() as V1Lease;
    const key = body.metadata?.name ?? "";
    if (req.method === "POST" && leases.has(key)) {
      return Response.json({ reason: "AlreadyExists" }, { status: 409 });
    }
    body.metadata = { ...body.metadata, resourceVersion: String(++rv) };
    leases.set(key, body);
    return Response.json(body, { status: req.method === "POST" ? 201 : 200 });
  });
  const addr = server.addr as Deno.NetAddr;
  return { server, leases, state, url: `http://127.0.0.1:${addr.port}` };
}

function controller(url: string, clock: FakeClock, lines: string[]) {
  const client = new KubeClient({
    config: { server: url, insecureSkipTLSVerify: false, source: "test" },
    clock,
    qps: -1,
    userAgent: "test",
  });
  const lease = new NodeLeaseController({
    client,
    nodeName: "node-a",
    leaseDurationSeconds: 40,
    clock,
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    getNode: () => ({ metadata: { name: "node-a", uid: "uid-1" } }),
  });
  return { client, lease };
}

Deno.test("microTime writes metav1.MicroTime", () => {
  assert.equal(microTime(Date.UTC(2026, 11, 2, 12, 0, 0, 123)), "2026-12-02T12:00:00.123000Z");
});

Deno.test("NodeLeaseController creates the lease with an owner reference, then renews it", async () => {
  const s = leaseServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const { client, lease } = controller(s.url, clock, []);
  try {
    assert.equal(lease.renewIntervalMs, 10_000);
    const created = await lease.sync();
    assert.equal(created.spec?.holderIdentity, "node-a");
    assert.equal(created.spec?.leaseDurationSeconds, 40);
    assert.equal(String(created.spec?.renewTime), "2026-12-02T12:00:00.000000Z");
    assert.deepEqual(created.metadata?.ownerReferences, [{
      apiVersion: "v1",
      kind: "Node",
      name: "node-a",
      uid: "uid-1",
    }]);
    clock.step(10_000);
    const renewed = await lease.sync();
    assert.equal(String(renewed.spec?.renewTime), "2026-12-02T12:00:10.000000Z");
    assert.deepEqual(s.state.requests.map((r) => r.split(" ")[0]), ["GET", "POST", "PUT"]);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeLeaseController logs a failing apiserver once and its recovery once", async () => {
  const s = leaseServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const lines: string[] = [];
  const { client, lease } = controller(s.url, clock, lines);
  const ctl = new AbortController();
  s.state.failures = 4;
  const running = lease.run(ctl.signal);
  try {
    for (let i = 0; i < 20 && s.leases.size === 0; i++) {
      await new Promise((r) => setTimeout(r, 5));
      clock.step(7_000);
    }
    assert.equal(s.leases.size, 1, "the lease exists once the apiserver answers");
    const errors = lines.filter((l) => l.startsWith("E"));
    assert.equal(errors.length, 1, lines.join("\n"));
    assert.match(errors[0] ?? "", /"Failed to update lease; retrying with backoff"/);
    assert.equal(lines.filter((l) => l.includes("Node lease renewed again")).length, 1);
  } finally {
    ctl.abort();
    await running;
    client.close();
    await s.server.shutdown();
  }
});
