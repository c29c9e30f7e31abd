import assert from "node:assert/strict";
import type { V1Service } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { WATCH_BACKOFF_MAX_MS } from "./reflector.ts";
import { createLogger } from "../klog/klog.ts";
import type { RequestOptions, WatchEvent } from "./kube_client.ts";
import {
  SERVICE_FIELD_SELECTOR,
  ServiceLister,
  type ServiceListerClient,
} from "./service_lister.ts";

const logger = createLogger({ write: () => {}, now: () => new Date(0), pid: 1 });

function svc(namespace: string, name: string, clusterIP: string, port = 80): V1Service {
  return {
    metadata: {
      namespace,
      name,
      uid: `${namespace}-${name}`,
      resourceVersion: "1",
      annotations: { "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(1000) },
      labels: { app: name },
    },
    spec: {
      clusterIP,
      clusterIPs: [clusterIP],
      selector: { app: name },
      type: "NodePort",
      ports: [{ name: "http", port, protocol: "TCP", targetPort: 8080, nodePort: 30080 }],
    },
    status: { loadBalancer: {} },
  };
}

/** The services as the lister should keep them. */
function trimmed(s: V1Service): V1Service {
  return {
    metadata: { name: s.metadata?.name, namespace: s.metadata?.namespace, uid: s.metadata?.uid },
    spec: {
      clusterIP: s.spec?.clusterIP,
      ports: (s.spec?.ports ?? []).map((p) => ({
        name: p.name,
        port: p.port,
        protocol: p.protocol,
      })),
    },
  };
}

interface Step {
  /** What the next list answers, or the error it fails with. */
  list: { rv: string; items: V1Service[] } | Error;
  /** The events of the watch that follows; with `hang`, the watch then stays open. */
  events?: WatchEvent<unknown>[];
  hang?: boolean;
}

/** A client playing `steps` in order; `seen` runs after each watch event was consumed. */
function fakeClient(steps: Step[], seen: (ev: WatchEvent<unknown>) => void = () => {}) {
  const calls: string[] = [];
  let parked!: () => void;
  const hanging = new Promise<void>((r) => parked = r);
  let step: Step | undefined;
  const client: ServiceListerClient = {
    request<T>(method: string, path: string, opts?: RequestOptions): Promise<T> {
      calls.push(`${method} ${path} fieldSelector=${opts?.query?.fieldSelector}`);
      step = steps.shift();
      if (step === undefined) throw new Error("no more steps");
      if (step.list instanceof Error) return Promise.reject(step.list);
      return Promise.resolve(
        { metadata: { resourceVersion: step.list.rv }, items: step.list.items } as T,
      );
    },
    async *watch<T>(
      path: string,
      opts: { resourceVersion?: string; fieldSelector?: string; signal?: AbortSignal } = {},
    ): AsyncGenerator<WatchEvent<T>> {
      calls.push(`WATCH ${path} rv=${opts.resourceVersion} fieldSelector=${opts.fieldSelector}`);
      for (const ev of step?.events ?? []) {
        yield ev as WatchEvent<T>;
        // The consumer asked for the next event: it has applied this one.
        seen(ev);
      }
      if (step?.hang) {
        parked();
        await new Promise((r) => opts.signal?.addEventListener("abort", r, { once: true }));
      }
    },
  };
  return { client, calls, hanging };
}

Deno.test("ServiceLister lists, follows the watch, and lists again after a watch error", async () => {
  const kube = svc("default", "kubernetes", "10.96.0.1", 443);
  const api = svc("prod", "api", "10.0.0.2");
  const web = svc("prod", "web", "10.0.0.3");
  const api2 = svc("prod", "api", "10.0.0.22");
  const cache = svc("dev", "cache", "10.1.0.4");
  const snapshots: string[][] = [];
  const names = (ns?: string) =>
    lister.list(ns).map((s) => `${s.metadata?.namespace}/${s.metadata?.name}@${s.spec?.clusterIP}`);
  const { client, calls, hanging } = fakeClient([
    {
      list: { rv: "10", items: [kube, api] },
      events: [
        { type: "ADDED", object: web },
        { type: "MODIFIED", object: api2 },
        { type: "DELETED", object: kube },
        { type: "BOOKMARK", object: { metadata: { resourceVersion: "15" } } },
        { type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } },
      ],
    },
    { list: { rv: "20", items: [api2, cache] }, hang: true },
  ], (ev) => {
    if (ev.type !== "ERROR") snapshots.push(names(), names("prod"));
  });
  const clock = new FakeClock();
  const lister = new ServiceLister({ client, clock, logger });
  assert.equal(lister.hasSynced(), false);
  assert.deepEqual(lister.list(), []);

  const ctl = new AbortController();
  const running = lister.run(ctl.signal);
  let parkedNow = false;
  void hanging.then(() => parkedNow = true);
  while (!parkedNow) {
    // The reflector backs off after the watch error before it lists again.
    if (clock.waiters > 0) clock.step(WATCH_BACKOFF_MAX_MS * 2);
    await new Promise((r) => setTimeout(r, 1));
  }
  assert.equal(lister.hasSynced(), true);
  assert.deepEqual(snapshots, [
    ["default/kubernetes@10.96.0.1", "prod/api@10.0.0.2", "prod/web@10.0.0.3"],
    ["prod/api@10.0.0.2", "prod/web@10.0.0.3"],
    ["default/kubernetes@10.96.0.1", "prod/api@10.0.0.22", "prod/web@10.0.0.3"],
    ["prod/api@10.0.0.22", "prod/web@10.0.0.3"],
    ["prod/api@10.0.0.22", "prod/web@10.0.0.3"],
    ["prod/api@10.0.0.22", "prod/web@10.0.0.3"],
    ["prod/api@10.0.0.22", "prod/web@10.0.0.3"],
    ["prod/api@10.0.0.22", "prod/web@10.0.0.3"],
  ]);
  assert.deepEqual(names(), ["prod/api@10.0.0.22", "dev/cache@10.1.0.4"]);
  assert.deepEqual(lister.list("prod"), [trimmed(api2)]);
  assert.deepEqual(lister.list("dev"), [trimmed(cache)]);
  assert.deepEqual(lister.list("default"), []);
  assert.deepEqual(calls, [
    `GET /api/v1/services fieldSelector=${SERVICE_FIELD_SELECTOR}`,
    "WATCH /api/v1/services rv=10 fieldSelector=spec.clusterIP!=None",
    `GET /api/v1/services fieldSelector=${SERVICE_FIELD_SELECTOR}`,
    "WATCH /api/v1/services rv=20 fieldSelector=spec.clusterIP!=None",
  ]);
  ctl.abort();
  await running;
});

Deno.test("ServiceLister keeps only the fields service links need, read-only", async () => {
  const api = svc("prod", "api", "10.0.0.2");
  let watched: V1Service[] = [];
  const web = svc("prod", "web", "fd00::3");
  const { client, hanging } = fakeClient([
    { list: { rv: "1", items: [api] }, events: [{ type: "ADDED", object: web }], hang: true },
  ], () => watched = lister.list("prod"));
  const lister = new ServiceLister({ client, clock: new FakeClock(), logger });
  const ctl = new AbortController();
  const running = lister.run(ctl.signal);
  await hanging;
  // Both the listed and the watched objects are cut down.
  assert.deepEqual(watched, [trimmed(api), trimmed(web)]);
  const [first] = lister.list("prod");
  assert.equal(first?.metadata?.annotations, undefined);
  assert.equal(first?.spec?.selector, undefined);
  assert.equal(first?.spec?.ports?.[0]?.targetPort, undefined);
  assert.throws(() => {
    first!.spec!.clusterIP = "changed";
  }, TypeError);
  // Callers get their own arrays.
  lister.list("prod").pop();
  assert.equal(lister.list("prod").length, 2);
  ctl.abort();
  await running;
});

Deno.test("ServiceLister is not synced until a list succeeds, and retries after the back-off", async () => {
  const clock = new FakeClock();
  const api = svc("prod", "api", "10.0.0.2");
  const { client, calls, hanging } = fakeClient([
    { list: new Error("connection refused") },
    { list: { rv: "5", items: [api] }, hang: true },
  ]);
  const lister = new ServiceLister({ client, clock, logger });
  const ctl = new AbortController();
  const running = lister.run(ctl.signal);
  for (let i = 0; i < 100 && clock.waiters === 0; i++) await new Promise((r) => setTimeout(r, 0));
  assert.equal(clock.waiters, 1, "the reflector sleeps before listing again");
  assert.equal(lister.hasSynced(), false);
  assert.deepEqual(lister.list(), []);
  clock.step(200);
  await hanging;
  assert.equal(lister.hasSynced(), true);
  assert.deepEqual(lister.list(), [trimmed(api)]);
  assert.equal(calls.filter((c) => c.startsWith("GET")).length, 2);
  ctl.abort();
  await running;
});
