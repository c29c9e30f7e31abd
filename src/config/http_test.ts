import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { decodePods, StaticPodURLError, StaticPodURLSource } from "./http.ts";
import { createLogger } from "../klog/klog.ts";
import { staticPodFromManifest } from "./file.ts";

const URL_ = "http://127.0.0.1:9999/pods";

const POD = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: "web" },
  spec: { containers: [{ name: "app", image: "busybox:1.36" }] },
};

function source(responses: (() => Response)[], lines: string[] = []) {
  const pods: V1Pod[][] = [];
  const requests: Request[] = [];
  const clock = new FakeClock();
  const src = new StaticPodURLSource({
    url: URL_,
    header: { "X-Token": ["a", "b"] },
    nodeName: "node1",
    clock,
    logger: createLogger({ write: (l) => lines.push(l), pid: 1 }),
    onUpdate: (p) => pods.push(p),
    fetch: (input, init) => {
      requests.push(new Request(input, init));
      const next = responses.shift();
      if (!next) return Promise.reject(new Error("connection refused"));
      return Promise.resolve(next());
    },
  });
  return { src, pods, requests, clock };
}

Deno.test("StaticPodURLSource turns a single pod into a set with the node suffix and hash", async () => {
  const h = source([() => new Response(JSON.stringify(POD))]);
  await h.src.extract();
  assert.equal(h.pods.length, 1);
  const pod = h.pods[0]![0]!;
  assert.equal(pod.metadata?.name, "web-node1");
  assert.equal(pod.metadata?.namespace, "default");
  assert.equal(pod.spec?.nodeName, "node1");
  assert.equal(pod.metadata?.annotations?.["kubernetes.io/config.hash"], pod.metadata?.uid);
  assert.deepEqual(h.requests[0]!.headers.get("x-token"), "a, b");
});

Deno.test("StaticPodURLSource UIDs depend on the URL and differ from a file's of that name", () => {
  const [fromUrl] = decodePods(JSON.stringify(POD), URL_, "node1");
  const [other] = decodePods(JSON.stringify(POD), URL_ + "x", "node1");
  const asFile = staticPodFromManifest(JSON.stringify(POD), URL_, "node1").pod;
  assert.notEqual(fromUrl!.metadata?.uid, other!.metadata?.uid);
  assert.notEqual(fromUrl!.metadata?.uid, asFile.metadata?.uid);
});

Deno.test("StaticPodURLSource reads a v1 PodList, in YAML too", async () => {
  const list = {
    apiVersion: "v1",
    kind: "PodList",
    items: [POD, { ...POD, metadata: { name: "db" } }],
  };
  const h = source([() => new Response(JSON.stringify(list))]);
  await h.src.extract();
  assert.deepEqual(h.pods[0]!.map((p) => p.metadata?.name), ["web-node1", "db-node1"]);
  const yaml =
    "apiVersion: v1\nkind: PodList\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec:\n    containers: [{name: c, image: busybox}]\n";
  assert.deepEqual(decodePods(yaml, URL_, "n").map((p) => p.metadata?.name), ["a-n"]);
});

Deno.test("StaticPodURLSource skips an unchanged body and sends a changed one", async () => {
  const body = JSON.stringify(POD);
  const changed = JSON.stringify({ ...POD, metadata: { name: "web2" } });
  const h = source([
    () => new Response(body),
    () => new Response(body),
    () => new Response(changed),
  ]);
  await h.src.extract();
  await h.src.extract();
  await h.src.extract();
  assert.deepEqual(h.pods.map((s) => s.map((p) => p.metadata?.name)), [["web-node1"], [
    "web2-node1",
  ]]);
});

Deno.test("StaticPodURLSource sends an empty set for an empty body and reports it", async () => {
  const h = source([() => new Response("")]);
  await assert.rejects(
    h.src.extract(),
    /zero-length data received from http:\/\/127.0.0.1:9999\/pods/,
  );
  assert.deepEqual(h.pods, [[]]);
});

Deno.test("StaticPodURLSource keeps the set on a bad status or a bad pod and names the problem", async () => {
  const bad = { ...POD, spec: { containers: [{ name: "app" }] } };
  const h = source([
    () => new Response("nope", { status: 503, statusText: "Service Unavailable" }),
    () => new Response(JSON.stringify(bad)),
  ]);
  await assert.rejects(h.src.extract(), (e: Error) => {
    assert.ok(e instanceof StaticPodURLError);
    assert.equal(e.message, `${URL_}: 503 Service Unavailable`);
    return true;
  });
  await assert.rejects(h.src.extract(), /spec\.containers\[0\]\.image/);
  assert.deepEqual(h.pods, []);
});

Deno.test("StaticPodURLSource logs three failures at full verbosity, then drops to v4", async () => {
  const lines: string[] = [];
  const h = source([], lines);
  for (let i = 0; i < 5; i++) await h.src.readOnce();
  assert.equal(lines.filter((l) => l.includes("Failed to read pods from URL")).length, 4);
  assert.ok(lines[3]!.includes("Dropping verbosity of this message to V(4)"));
});

Deno.test("StaticPodURLSource run reads every httpCheckFrequency", async () => {
  const body = () => new Response(JSON.stringify(POD));
  const h = source([body, body, body]);
  const ctrl = new AbortController();
  const done = h.src.run(ctrl.signal);
  const tick = async () => {
    for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
  };
  await tick();
  assert.equal(h.requests.length, 1);
  h.clock.step(19_999);
  await tick();
  assert.equal(h.requests.length, 1);
  h.clock.step(1);
  await tick();
  assert.equal(h.requests.length, 2);
  ctrl.abort();
  await done;
});
