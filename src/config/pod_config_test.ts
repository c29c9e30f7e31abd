import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import {
  API_SOURCE,
  CONFIG_FIRST_SEEN_ANNOTATION,
  CONFIG_SOURCE_ANNOTATION,
  FILE_SOURCE,
  PodConfig,
  podsDifferSemantically,
} from "./pod_config.ts";

function pod(name: string, uid = `uid-${name}`, over: Partial<V1Pod> = {}): V1Pod {
  return {
    metadata: { name, namespace: "default", uid, labels: { app: name } },
    spec: { containers: [{ name: "c", image: "busybox:1.36" }] },
    ...over,
  };
}

const ops = (updates: { op: string; pods: readonly V1Pod[] }[]) =>
  updates.map((u) => `${u.op}:${u.pods.map((p) => p.metadata?.name).join(",")}`);

Deno.test("PodConfig turns whole sets into REMOVE, ADD, UPDATE, DELETE and RECONCILE in order", () => {
  let now = Date.UTC(2026, 11, 2);
  const config = new PodConfig({ now: () => now });
  assert.deepEqual(ops(config.set(API_SOURCE, [pod("a"), pod("b"), pod("c")])), ["ADD:a,b,c"]);
  const a = config.allPods().find((p) => p.metadata?.name === "a");
  assert.equal(a?.metadata?.annotations?.[CONFIG_SOURCE_ANNOTATION], "api");
  assert.equal(
    a?.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION],
    "2026-12-02T00:00:00.000Z",
  );

  now += 60_000;
  const changed = pod("a", "uid-a", {
    spec: { containers: [{ name: "c", image: "busybox:1.37" }] },
  });
  const deleting = pod("b", "uid-b", {
    metadata: {
      ...pod("b").metadata,
      deletionTimestamp: new Date(now),
      deletionGracePeriodSeconds: 30,
    },
  });
  const statusOnly = pod("c", "uid-c", { status: { phase: "Failed" } });
  const updates = config.set(API_SOURCE, [changed, deleting, statusOnly, pod("d")]);
  assert.deepEqual(ops(updates), ["ADD:d", "UPDATE:a", "DELETE:b", "RECONCILE:c"]);
  const updated = updates.find((u) => u.op === "UPDATE")?.pods[0];
  assert.equal(updated?.spec?.containers[0]?.image, "busybox:1.37");
  assert.equal(
    updated?.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION],
    "2026-12-02T00:00:00.000Z",
    "the first-seen time is kept across updates",
  );

  assert.deepEqual(ops(config.set(API_SOURCE, [changed, deleting, statusOnly])), ["REMOVE:d"]);
  assert.deepEqual(
    config.set(API_SOURCE, [changed, deleting, statusOnly]),
    [],
    "nothing changed, nothing sent",
  );
});

Deno.test("PodConfig keeps sources apart and knows which it has seen", () => {
  const config = new PodConfig({ now: () => 0 });
  assert.equal(config.seenAllSources([FILE_SOURCE, API_SOURCE]), false);
  config.set(FILE_SOURCE, [pod("static")]);
  assert.equal(config.seenAllSources([FILE_SOURCE, API_SOURCE]), false);
  assert.deepEqual(ops(config.set(API_SOURCE, [])), []);
  assert.equal(config.seenAllSources([FILE_SOURCE, API_SOURCE]), true);
  assert.deepEqual(ops(config.set(API_SOURCE, [pod("bound")])), ["ADD:bound"]);
  assert.deepEqual(config.allPods().map((p) => p.metadata?.name).sort(), ["bound", "static"]);
});

Deno.test("PodConfig ignores a second pod with the same full name in one source", () => {
  const dupes: string[] = [];
  const config = new PodConfig({
    now: () => 0,
    onDuplicate: (p, s) => dupes.push(`${s}:${p.metadata?.uid}`),
  });
  assert.deepEqual(ops(config.set(FILE_SOURCE, [pod("x", "uid-1"), pod("x", "uid-2")])), ["ADD:x"]);
  assert.deepEqual(dupes, ["file:uid-2"]);
});

Deno.test("podsDifferSemantically ignores the kubelet's own annotations and status", () => {
  const a = pod("a");
  const b = structuredClone(a);
  b.metadata!.annotations = {
    [CONFIG_SOURCE_ANNOTATION]: "api",
    [CONFIG_FIRST_SEEN_ANNOTATION]: "x",
  };
  b.status = { phase: "Running" };
  assert.equal(podsDifferSemantically(a, b), false);
  b.metadata!.annotations.other = "y";
  assert.equal(podsDifferSemantically(a, b), true);
  const c = structuredClone(a);
  c.metadata!.labels = { app: "other" };
  assert.equal(podsDifferSemantically(a, c), true);
});

Deno.test("PodConfig apply gives for one watched change what set gives for the whole set", () => {
  // A seeded sequence of watch events over a few pods; one config takes each event alone, the
  // other the set the reflector's store holds after it. Their updates and pods must agree.
  let seed = 7;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const now = () => Date.UTC(2026, 11, 2);
  const byEvent = new PodConfig({ now });
  const bySet = new PodConfig({ now });
  const store = new Map<string, V1Pod>();
  const seenOps = new Set<string>();
  const render = (c: PodConfig) => c.allPods().map((p) => JSON.stringify(p)).sort();
  for (let i = 0; i < 500; i++) {
    const name = `p${rand(6)}`;
    const uid = `uid-${name}-${rand(2)}`;
    const kind = rand(5);
    let type: "ADDED" | "MODIFIED" | "DELETED";
    let p: V1Pod;
    if (kind === 0 && store.has(uid)) {
      type = "DELETED";
      p = store.get(uid)!;
      store.delete(uid);
    } else {
      if ([...store.values()].some((o) => o.metadata?.name === name && o.metadata?.uid !== uid)) {
        continue; // the apiserver never holds two pods of one name
      }
      type = store.has(uid) ? "MODIFIED" : "ADDED";
      p = pod(name, uid, {
        spec: { containers: [{ name: "c", image: `busybox:1.${30 + rand(3)}` }] },
        status: { phase: ["Pending", "Running"][rand(2)] },
      });
      if (rand(4) === 0) {
        p.metadata!.deletionTimestamp = new Date(Date.UTC(2026, 11, 2, 1));
      }
      store.set(uid, p);
    }
    const updates = byEvent.apply(API_SOURCE, type, p);
    assert.deepEqual(
      ops(updates),
      ops(bySet.set(API_SOURCE, [...store.values()])),
      `event ${i}: ${type} ${name}`,
    );
    assert.deepEqual(render(byEvent), render(bySet));
    for (const u of updates) seenOps.add(u.op);
  }
  assert.deepEqual([...seenOps].sort(), ["ADD", "DELETE", "RECONCILE", "REMOVE", "UPDATE"]);
});

Deno.test("PodConfig apply refuses a second pod of one full name", () => {
  const dups: string[] = [];
  const config = new PodConfig({
    now: () => 0,
    onDuplicate: (p) => dups.push(p.metadata?.uid ?? ""),
  });
  config.set(API_SOURCE, [pod("a")]);
  assert.deepEqual(ops(config.apply(API_SOURCE, "ADDED", pod("a", "uid-other"))), []);
  assert.deepEqual(dups, ["uid-other"]);
  assert.deepEqual(ops(config.apply(API_SOURCE, "DELETED", pod("a"))), ["REMOVE:a"]);
  assert.deepEqual(ops(config.apply(API_SOURCE, "ADDED", pod("a", "uid-other"))), ["ADD:a"]);
});
