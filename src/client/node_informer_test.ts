import assert from "node:assert/strict";
import type { V1Node } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "./kube_client.ts";
import { NodeInformer } from "./node_informer.ts";

Deno.test("NodeInformer lists, follows the watch, and lists again when the watch ends", async () => {
  const requests: string[] = [];
  let lists = 0;
  const node = (rv: string, label: string): V1Node => ({
    metadata: { name: "node-a", resourceVersion: rv, labels: { l: label } },
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const url = new URL(req.url);
    requests.push(`${url.pathname}?${url.searchParams.toString()}`);
    assert.equal(url.searchParams.get("fieldSelector"), "metadata.name=node-a");
    if (url.searchParams.get("watch") !== "true") {
      lists++;
      return Response.json({
        metadata: { resourceVersion: String(lists * 10) },
        items: [node(String(lists * 10), `list${lists}`)],
      });
    }
    if (lists > 1) return new Response(new ReadableStream({ start() {} })); // stays open
    const events = [
      { type: "MODIFIED", object: node("11", "watched") },
      { type: "DELETED", object: node("12", "watched") },
    ];
    const body = events.map((e) => JSON.stringify(e) + "\n").join("");
    return new Response(body, { headers: { "content-type": "application/json" } });
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
  const seen: (string | undefined)[] = [];
  const informer = new NodeInformer({
    client,
    nodeName: "node-a",
    clock: new FakeClock(),
    logger: createLogger({ write: () => {}, now: () => new Date(0), pid: 1 }),
    onChange: (n) => seen.push(n?.metadata?.labels?.l),
  });
  const ctl = new AbortController();
  const running = informer.run(ctl.signal);
  try {
    const end = Date.now() + 5_000;
    while (seen.length < 4 && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(seen, ["list1", "watched", undefined, "list2"]);
    assert.equal(informer.hasSynced, true);
    assert.equal(informer.node?.metadata?.labels?.l, "list2");
    assert.ok(
      requests.some((r) => r.includes("watch=true") && r.includes("resourceVersion=10")),
      requests.join("\n"),
    );
  } finally {
    ctl.abort();
    await running;
    client.close();
    await server.shutdown();
  }
});
