import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { newSourceApiserver } from "./apiserver.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "../client/kube_client.ts";
import { WATCH_BACKOFF_MAX_MS } from "../client/reflector.ts";

const pod = (name: string, rv: string): V1Pod => ({
  metadata: { name, namespace: "default", uid: `uid-${name}`, resourceVersion: rv },
});

Deno.test("newSourceApiserver sends the whole set after each list, each watched change alone, and lists again after 410 Gone", async () => {
  const requests: URLSearchParams[] = [];
  let lists = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const url = new URL(req.url);
    assert.equal(url.pathname, "/api/v1/pods");
    requests.push(url.searchParams);
    if (url.searchParams.get("watch") !== "true") {
      lists++;
      const items = lists === 1 ? [pod("a", "5")] : [pod("a", "5"), pod("c", "9")];
      return Response.json({ metadata: { resourceVersion: lists === 1 ? "5" : "9" }, items });
    }
    if (lists > 1) return new Response(new ReadableStream({ start() {} }));
    const events = [
      { type: "ADDED", object: pod("b", "6") },
      { type: "BOOKMARK", object: { metadata: { resourceVersion: "7" } } },
      { type: "DELETED", object: pod("b", "8") },
      {
        type: "ERROR",
        object: {
          kind: "Status",
          code: 410,
          reason: "Expired",
          message: "too old resource version",
        },
      },
    ];
    return new Response(events.map((e) => JSON.stringify(e) + "\n").join(""));
  });
  const client = new KubeClient({
    config: {
      server: `http://127.0.0.1:${(server.addr as Deno.NetAddr).port}`,
      insecureSkipTLSVerify: false,
      source: "t",
    },
    clock: new FakeClock(),
    qps: -1,
    userAgent: "t",
  });
  const sets: string[][] = [];
  const events: string[] = [];
  const clock = new FakeClock();
  const source = newSourceApiserver({
    client,
    nodeName: "node-a",
    clock,
    logger: createLogger({ write: () => {}, now: () => new Date(0), pid: 1 }),
    onUpdate: (pods) => sets.push(pods.map((p) => p.metadata?.name ?? "").sort()),
    onEvent: (type, p) => events.push(`${type} ${p.metadata?.name}`),
  });
  const ctl = new AbortController();
  const running = source.run(ctl.signal);
  try {
    const end = Date.now() + 5_000;
    while (sets.length < 2 && Date.now() < end) {
      // The reflector backs off after the 410 before it lists again.
      if (clock.waiters > 0) clock.step(WATCH_BACKOFF_MAX_MS * 2);
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.deepEqual(sets, [["a"], ["a", "c"]]);
    assert.deepEqual(events, ["ADDED b", "DELETED b"]);
    assert.ok(requests.every((q) => q.get("fieldSelector") === "spec.nodeName=node-a"));
    assert.equal(requests.find((q) => q.get("watch") === "true")?.get("resourceVersion"), "5");
  } finally {
    ctl.abort();
    await running;
    client.close();
    await server.shutdown();
  }
});
