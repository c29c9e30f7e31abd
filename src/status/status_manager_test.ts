import assert from "node:assert/strict";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "../client/kube_client.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import {
  STATUS_SYNC_CONCURRENCY as SLOTS,
  StatusManager,
  StatusManagerError,
  type StatusManagerOptions,
} from "./status_manager.ts";

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const MERGE_KEYS: Record<string, string> = { conditions: "type", podIPs: "ip", hostIPs: "ip" };

/** The apiserver's strategic merge, for the directives the status manager sends. */
function applyStrategicMerge(target: Obj, patch: Obj): void {
  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith("$setElementOrder/")) continue;
    const mergeKey = MERGE_KEYS[key];
    if (value === null) {
      delete target[key];
    } else if (mergeKey !== undefined && Array.isArray(value)) {
      const list = (Array.isArray(target[key]) ? target[key] : []) as Obj[];
      for (const item of value as Obj[]) {
        const i = list.findIndex((e) => e[mergeKey] === item[mergeKey]);
        if (item.$patch === "delete") {
          if (i >= 0) list.splice(i, 1);
        } else if (i >= 0) {
          applyStrategicMerge(list[i] as Obj, item);
        } else list.push({ ...item });
      }
      const order = patch[`$setElementOrder/${key}`];
      if (Array.isArray(order)) {
        const rank = (e: Obj) => order.findIndex((o: Obj) => o[mergeKey] === e[mergeKey]);
        list.sort((a, b) => rank(a) - rank(b));
      }
      target[key] = list;
    } else if (isObj(value) && isObj(target[key])) {
      applyStrategicMerge(target[key] as Obj, value);
    } else {
      target[key] = structuredClone(value);
    }
  }
}

interface Request {
  method: string;
  path: string;
  contentType: string | null;
  body: unknown;
}

/** A loopback stand-in for the apiserver's pod endpoints. */
function podServer() {
  const pods = new Map<string, V1Pod>();
  const requests: Request[] = [];
  let rv = 1;
  const status = (code: number, reason: string, message: string) =>
    Response.json({ kind: "Status", code, reason, message }, { status: code });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    const text = await req.text();
    const body = text === "" ? undefined : JSON.parse(text);
    requests.push({
      method: req.method,
      path: url.pathname,
      contentType: req.headers.get("content-type"),
      body,
    });
    const [, , , , namespace, , name, sub] = url.pathname.split("/");
    const key = `${namespace}/${name}`;
    const pod = pods.get(key);
    if (pod === undefined) return status(404, "NotFound", `pods "${name}" not found`);
    const uid = pod.metadata?.uid;
    if (req.method === "GET") return Response.json(pod);
    if (req.method === "PATCH" && sub === "status") {
      const patch = body as Obj;
      const want = (patch.metadata as Obj | undefined)?.uid;
      if (want !== undefined && want !== uid) {
        return status(409, "Conflict", `Precondition failed: UID in precondition: ${want}`);
      }
      const current = (pod.status ?? {}) as Obj;
      applyStrategicMerge(current, (patch.status ?? {}) as Obj);
      pod.status = current as V1PodStatus;
      pod.metadata = { ...pod.metadata, resourceVersion: String(++rv) };
      return Response.json(pod);
    }
    if (req.method === "DELETE") {
      const want = ((body as Obj | undefined)?.preconditions as Obj | undefined)?.uid;
      if (want !== undefined && want !== uid) return status(409, "Conflict", "uid mismatch");
      pods.delete(key);
      return Response.json(pod);
    }
    return status(405, "MethodNotAllowed", req.method);
  });
  const url = `http://127.0.0.1:${(server.addr as Deno.NetAddr).port}`;
  return {
    server,
    pods,
    requests,
    url,
    put(pod: V1Pod) {
      pods.set(`${pod.metadata?.namespace}/${pod.metadata?.name}`, structuredClone(pod));
    },
    get(name: string) {
      return pods.get(`ns/${name}`);
    },
    calls() {
      const out = requests.map((r) => `${r.method} ${r.path}`);
      requests.length = 0;
      return out;
    },
  };
}

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);

function apiPod(name: string, uid: string, extra: Partial<V1Pod["metadata"]> = {}): V1Pod {
  return {
    metadata: { name, namespace: "ns", uid, ...extra },
    spec: { restartPolicy: "Always", containers: [{ name: "app", image: "nginx" }] },
    status: { phase: "Pending" },
  };
}

function podStatus(phase: string, ready: boolean): V1PodStatus {
  const r = ready ? "True" : "False";
  return {
    phase,
    conditions: [
      { type: "Ready", status: r },
      { type: "ContainersReady", status: r },
      { type: "PodScheduled", status: "True" },
    ],
    containerStatuses: [{
      name: "app",
      image: "nginx",
      imageID: "sha256:1",
      containerID: "containerd://c1",
      ready,
      restartCount: 0,
      state: phase === "Running"
        ? { running: { startedAt: new Date(T0 + 1000) } }
        : { waiting: { reason: "ContainerCreating" } },
    }],
  };
}

function setup(o: Partial<StatusManagerOptions> = {}) {
  const s = podServer();
  const clock = new FakeClock(T0);
  const lines: string[] = [];
  const client = new KubeClient({
    config: { server: s.url, insecureSkipTLSVerify: false, source: "test" },
    clock,
    qps: -1,
    userAgent: "test",
  });
  const state = { couldRun: true, mirrors: new Map<string, string>() };
  const m = new StatusManager({
    client,
    clock,
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    translatePodUID: (uid) => state.mirrors.get(uid),
    podCouldHaveRunningContainers: () => state.couldRun,
    ...o,
  });
  return {
    s,
    clock,
    lines,
    state,
    m,
    async [Symbol.asyncDispose]() {
      client.close();
      await s.server.shutdown();
    },
  };
}

Deno.test("StatusManager patches the status only when it changed, with the UID", async () => {
  await using t = setup();
  const pod = apiPod("web", "uid-1");
  t.s.put(pod);

  t.m.setPodStatus(pod, podStatus("Pending", false));
  assert.equal(await t.m.syncBatch(false), 1);
  assert.deepEqual(t.s.calls(), [
    "GET /api/v1/namespaces/ns/pods/web",
    "PATCH /api/v1/namespaces/ns/pods/web/status",
  ]);
  const onServer = t.s.get("web")?.status;
  assert.equal(onServer?.phase, "Pending");
  assert.equal(String(onServer?.startTime), "2026-01-01T00:00:00Z");
  assert.equal(
    String(onServer?.conditions?.find((c) => c.type === "Ready")?.lastTransitionTime),
    "2026-01-01T00:00:00Z",
  );

  // The same status again is no change: no new version, nothing sent.
  t.clock.step(5_000);
  t.m.setPodStatus(pod, podStatus("Pending", false));
  assert.equal(await t.m.syncBatch(false), 0);
  assert.deepEqual(t.s.calls(), []);

  // A real change goes out as a strategic merge patch of what changed.
  t.m.setPodStatus(pod, podStatus("Running", true));
  assert.equal(await t.m.syncBatch(false), 1);
  const patch = t.s.requests.find((r) => r.method === "PATCH");
  assert.equal(patch?.contentType, "application/strategic-merge-patch+json");
  const body = patch?.body as { metadata: Obj; status: Obj };
  assert.deepEqual(body.metadata, { uid: "uid-1" });
  assert.equal(body.status.phase, "Running");
  assert.equal(body.status.startTime, undefined, "the start time does not change");
  assert.deepEqual(body.status["$setElementOrder/conditions"], [
    { type: "Ready" },
    { type: "ContainersReady" },
    { type: "PodScheduled" },
  ]);
  const sentTypes = (body.status.conditions as Obj[]).map((c) => c.type);
  assert.deepEqual(sentTypes, ["Ready", "ContainersReady"], "unchanged conditions are not sent");
  const server = t.s.get("web")?.status;
  assert.equal(server?.phase, "Running");
  assert.equal(server?.containerStatuses?.[0]?.ready, true);
  const ready = server?.conditions?.find((c) => c.type === "Ready");
  assert.equal(ready?.status, "True");
  assert.equal(String(ready?.lastTransitionTime), "2026-01-01T00:00:05Z");
  const scheduled = server?.conditions?.find((c) => c.type === "PodScheduled");
  assert.equal(String(scheduled?.lastTransitionTime), "2026-01-01T00:00:00Z");
});

Deno.test("StatusManager keeps conditions owned by others and replaces its own", async () => {
  await using t = setup();
  const pod = apiPod("web", "uid-1");
  pod.status = {
    phase: "Pending",
    conditions: [
      { type: "example.com/gate", status: "True" },
      { type: "Initialized", status: "False", reason: "ContainersNotInitialized" },
    ],
  };
  t.s.put(pod);
  t.m.setPodStatus(pod, podStatus("Running", true));
  await t.m.syncBatch(false);
  const types = t.s.get("web")?.status?.conditions?.map((c) => c.type);
  assert.deepEqual(types, ["example.com/gate", "Ready", "ContainersReady", "PodScheduled"]);
});

Deno.test("StatusManager sends only the newest version, and never a terminal phase back", async () => {
  await using t = setup();
  const pod = apiPod("web", "uid-1");
  t.s.put(pod);
  t.m.setPodStatus(pod, podStatus("Pending", false));
  t.m.setPodStatus(pod, podStatus("Running", true));
  assert.equal(await t.m.syncBatch(false), 1);
  const patches = t.s.requests.filter((r) => r.method === "PATCH");
  assert.equal(patches.length, 1);
  assert.equal((patches[0]?.body as { status: Obj }).status.phase, "Running");
  t.s.calls();
  assert.equal(await t.m.syncBatch(false), 0, "the written version is not sent again");
  assert.equal(await t.m.syncBatch(true), 0, "nor by the periodic sync");

  t.m.setPodStatus(pod, { ...podStatus("Running", false), phase: "Failed" });
  t.m.setPodStatus(pod, podStatus("Running", false));
  assert.equal(t.m.getPodStatus("uid-1")?.phase, "Failed");
  assert.ok(t.lines.some((l) => l.includes("Pod attempted illegal phase transition")));
});

Deno.test("StatusManager skips a pod recreated with another UID and forgets it", async () => {
  await using t = setup();
  t.s.put(apiPod("web", "uid-new"));
  const old = apiPod("web", "uid-old");
  t.m.setPodStatus(old, podStatus("Running", true));
  await t.m.syncBatch(false);
  assert.deepEqual(t.s.calls(), ["GET /api/v1/namespaces/ns/pods/web"]);
  assert.equal(t.m.getPodStatus("uid-old"), undefined);
  assert.equal(t.s.get("web")?.status?.phase, "Pending");
});

Deno.test("StatusManager forgets a pod the apiserver does not have", async () => {
  await using t = setup();
  t.m.setPodStatus(apiPod("gone", "uid-1"), podStatus("Running", true));
  await t.m.syncBatch(false);
  assert.deepEqual(t.s.calls(), ["GET /api/v1/namespaces/ns/pods/gone"]);
  assert.equal(t.m.getPodStatus("uid-1"), undefined);
  assert.equal(await t.m.syncBatch(true), 0);
});

Deno.test("StatusManager deletes a terminated pod with grace 0 once no container can run", async () => {
  await using t = setup();
  const pod = apiPod("web", "uid-1", { deletionTimestamp: new Date(T0) });
  pod.status = podStatus("Running", true);
  t.s.put(pod);
  t.m.setPodStatus(pod, podStatus("Running", true));
  await t.m.syncBatch(false);
  t.s.calls();

  // Containers may still run: the terminal phase is held back, nothing is deleted.
  t.m.terminatePod(pod);
  assert.equal(t.m.getPodStatus("uid-1")?.phase, "Failed");
  await t.m.syncBatch(false);
  assert.deepEqual(t.s.calls(), [
    "GET /api/v1/namespaces/ns/pods/web",
    "PATCH /api/v1/namespaces/ns/pods/web/status",
  ]);
  assert.equal(t.s.get("web")?.status?.phase, "Running");
  assert.equal(
    t.s.get("web")?.status?.containerStatuses?.[0]?.state?.terminated?.reason,
    "ContainerStatusUnknown",
  );

  // The pod workers are done: the phase goes out, then the pod is deleted.
  t.state.couldRun = false;
  t.m.podTerminated("uid-1");
  await t.m.syncBatch(false);
  const calls = t.s.requests.map((r) => `${r.method} ${r.path}`);
  assert.deepEqual(calls, [
    "GET /api/v1/namespaces/ns/pods/web",
    "PATCH /api/v1/namespaces/ns/pods/web/status",
    "DELETE /api/v1/namespaces/ns/pods/web",
  ]);
  const patch = t.s.requests[1]?.body as { status: Obj };
  assert.equal(patch.status.phase, "Failed");
  const ready = (patch.status.conditions as Obj[]).find((c) => c.type === "Ready");
  assert.equal(ready?.status, "False", "a terminal pod is never reported ready");
  assert.equal(ready?.reason, "PodFailed");
  assert.deepEqual(t.s.requests[2]?.body, {
    kind: "DeleteOptions",
    apiVersion: "v1",
    gracePeriodSeconds: 0,
    preconditions: { uid: "uid-1" },
  });
  assert.equal(t.s.get("web"), undefined);
  assert.equal(t.m.getPodStatus("uid-1"), undefined);
});

Deno.test("StatusManager does not delete a pod that is not being deleted", async () => {
  await using t = setup();
  const pod = apiPod("job", "uid-1");
  t.s.put(pod);
  t.state.couldRun = false;
  t.m.setPodStatus(pod, podStatus("Running", true));
  t.m.terminatePod(pod);
  await t.m.syncBatch(false);
  assert.ok(!t.s.requests.some((r) => r.method === "DELETE"));
  assert.equal(t.s.get("job")?.status?.phase, "Failed");
});

Deno.test("StatusManager writes a static pod's status to its mirror pod", async () => {
  await using t = setup();
  const staticPod = apiPod("etcd-node", "static-1", {
    annotations: { "kubernetes.io/config.source": "file" },
  });
  t.s.put(apiPod("etcd-node", "mirror-1", {
    annotations: { "kubernetes.io/config.mirror": "hash" },
  }));
  t.m.setPodStatus(staticPod, podStatus("Running", true));
  assert.equal(await t.m.syncBatch(false), 0, "no mirror pod yet: skipped");
  assert.deepEqual(t.s.calls(), []);

  t.state.mirrors.set("static-1", "mirror-1");
  assert.equal(await t.m.syncBatch(false), 1);
  const patch = t.s.requests.find((r) => r.method === "PATCH");
  assert.deepEqual((patch?.body as { metadata: Obj }).metadata, { uid: "mirror-1" });
  assert.equal(t.s.get("etcd-node")?.status?.phase, "Running");
  assert.equal(t.m.getPodStatus("mirror-1")?.phase, "Running", "found by the mirror's UID too");
});

Deno.test("StatusManager terminatePod marks containers without a terminated state unknown", () => {
  const clock = new FakeClock(T0);
  const m = new StatusManager({
    clock,
    logger: createLogger({ write: () => {}, now: () => new Date(0), pid: 1 }),
    translatePodUID: () => undefined,
    podCouldHaveRunningContainers: () => false,
  });
  const pod = apiPod("web", "uid-1");
  pod.spec!.initContainers = [{ name: "init1" }, { name: "init2" }];
  pod.spec!.containers = [{ name: "app" }];
  const waiting = { waiting: { reason: "PodInitializing" } };
  const cs = (name: string, state: Obj) => ({
    name,
    image: "i",
    imageID: "",
    ready: false,
    restartCount: 0,
    state,
  });
  m.setPodStatus(pod, {
    phase: "Pending",
    initContainerStatuses: [cs("init1", { running: {} }), cs("init2", waiting)],
    containerStatuses: [cs("app", waiting)],
  });
  m.terminatePod(pod);
  const s = m.getPodStatus("uid-1");
  assert.equal(s?.phase, "Failed");
  assert.deepEqual(s?.initContainerStatuses?.[0]?.state, {
    terminated: {
      reason: "ContainerStatusUnknown",
      message: "The container could not be located when the pod was terminated",
      exitCode: 137,
    },
  });
  assert.deepEqual(s?.initContainerStatuses?.[1]?.state, waiting, "never tried: left waiting");
  assert.deepEqual(s?.containerStatuses?.[0]?.state, waiting, "the pod never initialized");
});

Deno.test("StatusManager run syncs changes at once and reconciles every syncPeriod", async () => {
  const apiPods = new Map<string, V1Pod>();
  await using t = setup({ getAPIPod: (uid) => apiPods.get(uid) });
  const pod = apiPod("web", "uid-1");
  t.s.put(pod);
  const ctl = new AbortController();
  const running = t.m.run(ctl.signal);
  const until = async (what: string, cond: () => boolean) => {
    for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
    assert.ok(cond(), what);
  };
  try {
    t.m.setPodStatus(pod, podStatus("Running", true));
    await until("the change is written", () => t.s.get("web")?.status?.phase === "Running");
    await until("the loop sleeps again", () => t.clock.waiters === 1);

    // Someone else rewrites the status; the pod manager sees it; the periodic sync repairs it.
    const changed = structuredClone(t.s.get("web")!);
    changed.status!.phase = "Pending";
    t.s.put(changed);
    apiPods.set("uid-1", changed);
    t.s.calls();
    t.clock.step(9_000);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(t.s.calls(), [], "nothing before the period");
    t.clock.step(1_000);
    await until("the status is reconciled", () => t.s.get("web")?.status?.phase === "Running");
  } finally {
    ctl.abort();
    await running;
  }
  assert.ok(t.lines.some((l) => l.includes("Starting to sync pod status with apiserver")));
});

Deno.test("StatusManager without a client keeps statuses and sends nothing", async () => {
  const lines: string[] = [];
  const m = new StatusManager({
    clock: new FakeClock(T0),
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    translatePodUID: () => undefined,
    podCouldHaveRunningContainers: () => false,
  });
  await m.run(new AbortController().signal);
  assert.ok(lines.some((l) => l.includes("Kubernetes client is nil, not starting status manager")));
  const pod = apiPod("web", "uid-1");
  m.setPodStatus(pod, podStatus("Running", true));
  assert.equal(m.getPodStatus("uid-1")?.phase, "Running");
  assert.equal(await m.syncBatch(true), 0);
  m.removeOrphanedStatuses(new Set(["other"]));
  assert.equal(m.getPodStatus("uid-1"), undefined);
});

Deno.test("StatusManager rejects a sync period that is not positive", () => {
  assert.throws(
    () =>
      new StatusManager({
        clock: new FakeClock(T0),
        logger: createLogger({ write: () => {} }),
        translatePodUID: () => undefined,
        podCouldHaveRunningContainers: () => false,
        syncPeriodMs: 0,
      }),
    StatusManagerError,
  );
});

Deno.test("StatusManager patches the watched pod without a GET, based on its last patch's answer", async () => {
  const watched = new Map<string, V1Pod>();
  await using t = setup({ getAPIPod: (uid) => watched.get(uid) });
  const pod = apiPod("web", "uid-1");
  t.s.put(pod);
  // The watch delivered the pod once and then lags behind every write.
  watched.set("uid-1", structuredClone(pod));

  t.m.setPodStatus(pod, podStatus("Pending", false));
  await t.m.syncBatch(false);
  assert.deepEqual(t.s.calls(), ["PATCH /api/v1/namespaces/ns/pods/web/status"]);

  // Version 2 sets a message; version 3 drops it. The stale watched status never had it, so
  // only the last patch's answer as the base makes the third patch remove it.
  t.m.setPodStatus(pod, { ...podStatus("Running", true), message: "warming up" });
  await t.m.syncBatch(false);
  assert.equal(t.s.get("web")?.status?.message, "warming up");
  t.m.setPodStatus(pod, podStatus("Running", true));
  await t.m.syncBatch(false);
  assert.deepEqual(t.s.calls(), [
    "PATCH /api/v1/namespaces/ns/pods/web/status",
    "PATCH /api/v1/namespaces/ns/pods/web/status",
  ]);
  assert.equal(t.s.get("web")?.status?.message, undefined);
  assert.equal(t.s.get("web")?.status?.phase, "Running");
});

Deno.test("StatusManager reads the pod when the watched copy's name now belongs to a new pod", async () => {
  const watched = new Map<string, V1Pod>();
  await using t = setup({ getAPIPod: (uid) => watched.get(uid) });
  const old = apiPod("web", "uid-1");
  watched.set("uid-1", structuredClone(old));
  t.s.put(apiPod("web", "uid-2"));
  t.m.setPodStatus(old, podStatus("Running", true));
  await t.m.syncBatch(false);
  assert.deepEqual(t.s.calls(), [
    "PATCH /api/v1/namespaces/ns/pods/web/status",
    "GET /api/v1/namespaces/ns/pods/web",
  ]);
  assert.equal(t.s.get("web")?.status?.phase, "Pending", "the new pod is left alone");
  assert.equal(t.m.getPodStatus("uid-1"), undefined, "the old pod's status is forgotten");
});

Deno.test("StatusManager writes a batch a few pods at a time", async () => {
  await using t = setup();
  let inFlight = 0;
  let most = 0;
  const fetch = globalThis.fetch;
  globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
    most = Math.max(most, ++inFlight);
    try {
      await new Promise((r) => setTimeout(r, 5));
      return await fetch(...args);
    } finally {
      inFlight--;
    }
  };
  try {
    const count = 3 * SLOTS;
    const pods = Array.from({ length: count }, (_, i) => apiPod(`p${i}`, `uid-${i}`));
    for (const p of pods) {
      t.s.put(p);
      t.m.setPodStatus(p, podStatus("Running", true));
    }
    assert.equal(await t.m.syncBatch(false), count);
    for (const p of pods) assert.equal(t.s.get(p.metadata!.name!)?.status?.phase, "Running");
    assert.equal(most, SLOTS);
  } finally {
    globalThis.fetch = fetch;
  }
});

/** Holds every fetch until `release()`; disposing puts the real fetch back. */
function holdFetches() {
  const fetch = globalThis.fetch;
  const gates: PromiseWithResolvers<void>[] = [];
  let holding = true;
  globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
    if (holding) {
      const gate = Promise.withResolvers<void>();
      gates.push(gate);
      await gate.promise;
    }
    return await fetch(...args);
  };
  return {
    /** How many fetches are held. */
    get held() {
      return gates.length;
    },
    release() {
      holding = false;
      for (const g of gates) g.resolve();
    },
    [Symbol.dispose]() {
      globalThis.fetch = fetch;
    },
  };
}

/**
 * `count` pods with Pending statuses and a batch writing them, returned once the batch's
 * {@link SLOTS} write slots are all held by `hold`.
 */
async function pendingBatchHeld(
  t: ReturnType<typeof setup>,
  hold: ReturnType<typeof holdFetches>,
  count: number,
  all = false,
) {
  const pods = Array.from({ length: count }, (_, i) => apiPod(`p${i}`, `uid-${i}`));
  for (const p of pods) {
    t.s.put(p);
    t.m.setPodStatus(p, podStatus("Pending", false));
  }
  const batch = t.m.syncBatch(all);
  while (hold.held < SLOTS) await new Promise((r) => setTimeout(r, 1));
  return { pods, batch };
}

Deno.test("StatusManager writes a pod's newest status when it changed while the batch waited", async () => {
  await using t = setup();
  using hold = holdFetches();
  // More pods than the batch writes at once: the last waits for a slot.
  const { pods, batch } = await pendingBatchHeld(t, hold, SLOTS + 1);
  t.m.setPodStatus(pods[SLOTS]!, podStatus("Running", true));
  hold.release();
  assert.equal(await batch, SLOTS + 1);
  const last = `/p${SLOTS}/status`;
  const patches = t.s.requests.filter((r) => r.method === "PATCH" && r.path.endsWith(last));
  assert.deepEqual(
    patches.map((r) => (r.body as { status: Obj }).status.phase),
    ["Running"],
    "one patch, with the status set after the batch began",
  );
  t.s.calls();
  assert.equal(await t.m.syncBatch(false), 0, "the newer version counts as written");
});

for (const all of [false, true]) {
  const what = all
    ? "StatusManager's periodic sync does not hold a pod that started behind the others"
    : "StatusManager writes statuses that left Pending before those still Pending";
  Deno.test(what, async () => {
    await using t = setup();
    using hold = holdFetches();
    const { pods, batch } = await pendingBatchHeld(t, hold, SLOTS + 2, all);
    // The first pod after the slots waits Pending; the last, Pending when the batch began,
    // started meanwhile.
    t.m.setPodStatus(pods[SLOTS + 1]!, podStatus("Running", true));
    hold.release();
    assert.equal(await batch, SLOTS + 2);
    const patched = t.s.requests.filter((r) => r.method === "PATCH")
      .map((r) => r.path.split("/")[6]);
    assert.deepEqual(
      patched.slice(SLOTS),
      [`p${SLOTS + 1}`, `p${SLOTS}`],
      "the started pod first",
    );
  });
}

/**
 * Pod `a` with its Running status written, then changed on the apiserver by someone else, as
 * the watched copy (`watched`) shows: the periodic sync finds it to reconcile.
 */
async function writtenThenDrifted(t: ReturnType<typeof setup>, watched: Map<string, V1Pod>) {
  const a = apiPod("a", "uid-a");
  t.s.put(a);
  t.m.setPodStatus(a, podStatus("Running", true));
  assert.equal(await t.m.syncBatch(false), 1);
  t.s.get("a")!.status = { phase: "Pending" };
  watched.set("uid-a", structuredClone(t.s.get("a")!));
  t.s.calls();
}

Deno.test("StatusManager's periodic sync reconciles after the started pods' writes, reading the pod first", async () => {
  const watched = new Map<string, V1Pod>();
  await using t = setup({ getAPIPod: (uid) => watched.get(uid) });
  await writtenThenDrifted(t, watched);
  using hold = holdFetches();
  const started = Array.from({ length: SLOTS }, (_, i) => apiPod(`p${i}`, `uid-${i}`));
  for (const p of started) {
    t.s.put(p);
    t.m.setPodStatus(p, podStatus("Running", true));
  }
  const batch = t.m.syncBatch(true);
  while (hold.held < SLOTS) await new Promise((r) => setTimeout(r, 1));
  hold.release();
  assert.equal(await batch, SLOTS + 1);
  // Each write starts with a read here (the test gives no watched copy of the p pods).
  const calls = t.s.calls();
  assert.deepEqual(
    calls.filter((c) => c.startsWith("GET")).map((c) => c.split("/")[6]),
    [...started.map((p) => p.metadata!.name!), "a"],
    "the started pods first, then the reconcile, which reads the pod",
  );
  assert.ok(calls.includes("PATCH /api/v1/namespaces/ns/pods/a/status"));
  assert.equal(t.s.get("a")?.status?.phase, "Running", "reconciled");
  watched.set("uid-a", structuredClone(t.s.get("a")!));
  assert.equal(await t.m.syncBatch(true), 0, "nothing left to reconcile");
});

Deno.test("StatusManager's reconcile waits with the Pending writes, oldest first", async () => {
  const watched = new Map<string, V1Pod>();
  await using t = setup({ getAPIPod: (uid) => watched.get(uid) });
  await writtenThenDrifted(t, watched);
  // Pending pods first seen after a: the reconcile (a's status is older) goes among the first.
  t.clock.step(1_000);
  using hold = holdFetches();
  const { batch } = await pendingBatchHeld(t, hold, SLOTS + 1, true);
  hold.release();
  assert.equal(await batch, SLOTS + 2);
  const gets = t.s.calls().filter((c) => c.startsWith("GET")).map((c) => c.split("/")[6]);
  assert.ok(gets.indexOf("a") < SLOTS, `a among the first ${SLOTS}: ${gets.join(" ")}`);
});

Deno.test("StatusManager keeps a reconcile's read when it fails, for the next pass", async () => {
  const watched = new Map<string, V1Pod>();
  await using t = setup({ getAPIPod: (uid) => watched.get(uid) });
  await writtenThenDrifted(t, watched);
  const fetch = globalThis.fetch;
  globalThis.fetch = () => Promise.reject(new TypeError("connection refused"));
  try {
    await t.m.syncBatch(true);
  } finally {
    globalThis.fetch = fetch;
  }
  t.s.calls();
  assert.equal(await t.m.syncBatch(false), 1);
  assert.deepEqual(t.s.calls(), [
    "GET /api/v1/namespaces/ns/pods/a",
    "PATCH /api/v1/namespaces/ns/pods/a/status",
  ], "read again before the write");
  assert.equal(t.s.get("a")?.status?.phase, "Running");
});

Deno.test("StatusManager tries a version once per pass when its write fails", async () => {
  await using t = setup();
  const fetch = globalThis.fetch;
  let failed = 0;
  // Stops a pass that keeps retrying (it would never yield to a timer).
  const ac = new AbortController();
  globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
    const url = args[0] instanceof Request ? args[0].url : String(args[0]);
    if (url.includes("/pods/broken")) {
      if (++failed > 10) ac.abort();
      return Response.json(
        { kind: "Status", code: 500, reason: "InternalError", message: "etcd is down" },
        { status: 500 },
      );
    }
    return await fetch(...args);
  };
  try {
    const broken = apiPod("broken", "uid-broken");
    const web = apiPod("web", "uid-web");
    t.s.put(broken);
    t.s.put(web);
    t.m.setPodStatus(broken, podStatus("Pending", false));
    t.m.setPodStatus(web, podStatus("Running", true));
    await t.m.syncBatch(false, ac.signal);
    assert.equal(ac.signal.aborted, false, "the pass ended by itself");
    const once = failed;
    assert.ok(once >= 1 && once <= 2, `one try (a write, perhaps a read): ${once} requests`);
    assert.equal(await t.m.syncBatch(false), 1, "the next pass tries it again");
    assert.equal(failed, 2 * once);
  } finally {
    globalThis.fetch = fetch;
  }
});

Deno.test("StatusManager getPodPhase reads the cached phase by the pod's own UID", async () => {
  await using t = setup();
  const pod = apiPod("web", "uid-1");
  assert.equal(t.m.getPodPhase("uid-1"), undefined, "no status yet");
  t.m.setPodStatus(pod, podStatus("Running", true));
  assert.equal(t.m.getPodPhase("uid-1"), "Running");
  t.m.setPodStatus(pod, podStatus("Failed", false));
  assert.equal(t.m.getPodPhase("uid-1"), "Failed");
  // Unlike getPodStatus, a mirror pod's UID is not looked up.
  t.state.mirrors.set("uid-1", "mirror-1");
  assert.equal(t.m.getPodStatus("mirror-1")?.phase, "Failed");
  assert.equal(t.m.getPodPhase("mirror-1"), undefined);
});

Deno.test("StatusManager counts each container's move to terminated once, by type, exit code and reason", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using t = setup({ metrics });
  const pod = apiPod("web", "uid-1");
  pod.spec!.initContainers = [{ name: "init", image: "busybox" }];
  pod.spec!.ephemeralContainers = [{ name: "debug", image: "busybox" }];
  const terminated = (exitCode: number, reason: string) => ({
    terminated: { exitCode, reason, startedAt: new Date(T0), finishedAt: new Date(T0 + 1) },
  });
  const status = (app: object, debug: object): V1PodStatus => ({
    ...podStatus("Running", false),
    initContainerStatuses: [{
      name: "init",
      image: "busybox",
      imageID: "",
      ready: true,
      restartCount: 0,
      state: terminated(0, "Completed"),
    }],
    containerStatuses: [{
      name: "app",
      image: "nginx",
      imageID: "",
      ready: false,
      restartCount: 0,
      state: app,
    }],
    ephemeralContainerStatuses: [{
      name: "debug",
      image: "busybox",
      imageID: "",
      ready: false,
      restartCount: 0,
      state: debug,
    }],
  });
  const counts = async () =>
    (await metrics.render()).split("\n").filter((l) =>
      l.startsWith("kubelet_terminated_containers_total{")
    );
  const running = { running: { startedAt: new Date(T0) } };
  t.m.setPodStatus(pod, status(running, running));
  assert.deepEqual(await counts(), [
    'kubelet_terminated_containers_total{container_type="init_container",exit_code="0",reason="Completed"} 1',
  ]);
  // The same terminated init container again: not a new termination.
  t.clock.step(1_000);
  t.m.setPodStatus(pod, status(running, terminated(137, "Error")));
  t.m.setPodStatus(pod, status(terminated(1, "Error"), terminated(137, "Error")));
  t.m.setPodStatus(pod, status(terminated(1, "Error"), terminated(137, "Error")));
  assert.deepEqual(await counts(), [
    'kubelet_terminated_containers_total{container_type="container",exit_code="1",reason="Error"} 1',
    'kubelet_terminated_containers_total{container_type="ephemeral_container",exit_code="137",reason="Error"} 1',
    'kubelet_terminated_containers_total{container_type="init_container",exit_code="0",reason="Completed"} 1',
  ]);
});

Deno.test("StatusManager observes kubelet_pod_status_sync_duration_seconds from the first unsent status to a successful write", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using t = setup({ metrics });
  const d = metrics.podStatusSyncDuration;
  const sum = async () =>
    Number(
      /^kubelet_pod_status_sync_duration_seconds_sum (\S+)$/m.exec(await metrics.render())?.[1],
    );
  // A pod the apiserver does not have: nothing written, nothing observed.
  t.m.setPodStatus(apiPod("gone", "uid-0"), podStatus("Pending", false));
  await t.m.syncBatch(false);
  assert.equal(d.count(), 0);
  const pod = apiPod("web", "uid-1");
  t.s.put(pod);
  t.m.setPodStatus(pod, podStatus("Pending", false));
  t.clock.step(1_200);
  t.m.setPodStatus(pod, podStatus("Running", false));
  t.clock.step(1_300);
  assert.equal(await t.m.syncBatch(false), 1);
  assert.equal(d.count(), 1);
  assert.equal(await sum(), 2.5, "from the first status the apiserver did not have");
  // Upstream never resets that time: the next write counts from it too.
  t.m.setPodStatus(pod, podStatus("Running", true));
  t.clock.step(1_000);
  assert.equal(await t.m.syncBatch(false), 1);
  assert.equal(d.count(), 2);
  assert.equal(await sum(), 6);
});
