import assert from "node:assert/strict";
import type { V1ConfigMap, V1Pod, V1Secret } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeApiError, type RequestOptions, type WatchEvent } from "./kube_client.ts";
import {
  type ChangeDetectionStrategy,
  configMapNamesOf,
  envSourceOf,
  ObjectManager,
  secretNamesOf,
} from "./object_manager.ts";

const logger = createLogger({ write: () => {} });

interface FakeWatch {
  readonly path: string;
  readonly fieldSelector: string | undefined;
  readonly resourceVersion: string | undefined;
  readonly signal: AbortSignal;
  push(ev: WatchEvent<unknown>): void;
}

/** The KubeClient methods the managers use, over an in-memory set of objects. */
class FakeClient {
  /** Objects by their path, `/api/v1/namespaces/<ns>/<resource>/<name>`. */
  readonly objects = new Map<string, { metadata?: { name?: string } }>();
  readonly gets: string[] = [];
  readonly lists: string[] = [];
  readonly watches: FakeWatch[] = [];
  /** Makes the next GETs fail with this error. */
  failGets: Error | undefined;
  /** Makes lists hang until aborted. */
  hangLists = false;

  get<T>(path: string, _signal?: AbortSignal): Promise<T> {
    this.gets.push(path);
    if (this.failGets) return Promise.reject(this.failGets);
    const obj = this.objects.get(path.split("?")[0] ?? path);
    if (obj === undefined) {
      return Promise.reject(new KubeApiError("GET", path, 404, "NotFound", "not found"));
    }
    return Promise.resolve(structuredClone(obj) as T);
  }

  request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    assert.equal(method, "GET");
    const selector = String(opts.query?.fieldSelector ?? "");
    this.lists.push(`${path}?fieldSelector=${selector}`);
    if (this.hangLists) {
      return new Promise((_, reject) =>
        opts.signal?.addEventListener("abort", () => reject(opts.signal?.reason))
      );
    }
    const name = selector.replace(/^metadata\.name=/, "");
    const obj = this.objects.get(`${path}/${name}`);
    return Promise.resolve(
      { metadata: { resourceVersion: "10" }, items: obj ? [structuredClone(obj)] : [] } as T,
    );
  }

  async *watch<T>(
    path: string,
    opts: {
      resourceVersion?: string;
      fieldSelector?: string;
      timeoutSeconds?: number;
      signal?: AbortSignal;
    } = {},
  ): AsyncGenerator<WatchEvent<T>> {
    const queue: WatchEvent<unknown>[] = [];
    let wake = () => {};
    const signal = opts.signal ?? new AbortController().signal;
    this.watches.push({
      path,
      fieldSelector: opts.fieldSelector,
      resourceVersion: opts.resourceVersion,
      signal,
      push(ev) {
        queue.push(ev);
        wake();
      },
    });
    signal.addEventListener("abort", () => wake());
    while (!signal.aborted) {
      const ev = queue.shift();
      if (ev !== undefined) {
        yield ev as WatchEvent<T>;
        continue;
      }
      await new Promise<void>((resolve) => wake = resolve);
    }
  }

  /** The watches of one object that are still running. */
  live(name: string): FakeWatch[] {
    return this.watches.filter((w) =>
      w.fieldSelector === `metadata.name=${name}` && !w.signal.aborted
    );
  }
}

function manager<T extends V1ConfigMap | V1Secret>(
  client: FakeClient,
  strategy: ChangeDetectionStrategy,
  clock = new FakeClock(),
  resource: "configmaps" | "secrets" = "configmaps",
): ObjectManager<T> {
  return new ObjectManager<T>({ client, resource, strategy, clock, logger, ttlMs: 60_000 });
}

function cm(name: string, value: string, rv = "10", immutable?: boolean): V1ConfigMap {
  return {
    metadata: { name, namespace: "ns", resourceVersion: rv },
    data: { key: value },
    immutable,
  };
}

function cmPath(name: string): string {
  return `/api/v1/namespaces/ns/configmaps/${name}`;
}

/** A pod in namespace ns whose volumes use the given ConfigMaps. */
function podUsing(uid: string, ...configMaps: string[]): V1Pod {
  return {
    metadata: { name: `pod-${uid}`, namespace: "ns", uid },
    spec: {
      containers: [{ name: "c" }],
      volumes: configMaps.map((name) => ({ name: `v-${name}`, configMap: { name } })),
    },
  };
}

/** Polls (bounded) until `cond` holds, letting watch events flow. */
async function until(cond: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`timed out waiting for ${what}`);
}

Deno.test("ObjectManager Watch serves the listed object and delivers updates without a GET", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1"));
  const m = manager<V1ConfigMap>(client, "Watch");
  m.registerPod(podUsing("u1", "a"));
  assert.equal((await m.get("ns", "a"))?.data?.key, "v1");
  assert.deepEqual(client.lists, [
    "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name=a",
  ]);
  await until(() => client.live("a").length === 1, "the watch");
  const w = client.live("a")[0]!;
  assert.equal(w.resourceVersion, "10");
  w.push({ type: "MODIFIED", object: cm("a", "v2", "11") });
  await until(async () => (await m.get("ns", "a"))?.data?.key === "v2", "the update");
  w.push({ type: "DELETED", object: cm("a", "v2", "12") });
  await until(async () => (await m.get("ns", "a")) === undefined, "the deletion");
  assert.deepEqual(client.gets, []);
  m.close();
});

Deno.test("ObjectManager Watch sees a missing object appear", async () => {
  const client = new FakeClient();
  const m = manager<V1ConfigMap>(client, "Watch");
  m.registerPod(podUsing("u1", "late"));
  assert.equal(await m.get("ns", "late"), undefined);
  await until(() => client.live("late").length === 1, "the watch");
  client.live("late")[0]!.push({ type: "ADDED", object: cm("late", "here", "11") });
  await until(async () => (await m.get("ns", "late"))?.data?.key === "here", "the object");
  m.close();
});

Deno.test("ObjectManager Watch stops the watch when the last referring pod is unregistered", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1"));
  const m = manager<V1ConfigMap>(client, "Watch");
  const p1 = podUsing("u1", "a");
  const p2 = podUsing("u2", "a");
  m.registerPod(p1);
  m.registerPod(p2);
  await m.get("ns", "a");
  await until(() => client.live("a").length === 1, "the watch");
  const w = client.live("a")[0]!;
  m.unregisterPod(p1);
  assert.equal(w.signal.aborted, false);
  assert.equal((await m.get("ns", "a"))?.data?.key, "v1");
  m.unregisterPod(p2);
  assert.equal(w.signal.aborted, true);
  await assert.rejects(m.get("ns", "a"), { message: `object "ns"/"a" not registered` });
  m.close();
});

Deno.test("ObjectManager Watch keeps shared watches across a pod update and drops stale ones", async () => {
  const client = new FakeClient();
  for (const n of ["a", "b", "c"]) client.objects.set(cmPath(n), cm(n, n));
  const m = manager<V1ConfigMap>(client, "Watch");
  m.registerPod(podUsing("u1", "a", "b"));
  await m.get("ns", "a");
  await m.get("ns", "b");
  await until(() => client.live("a").length === 1 && client.live("b").length === 1, "watches");
  const wa = client.live("a")[0]!;
  const wb = client.live("b")[0]!;
  m.registerPod(podUsing("u1", "a", "c"));
  assert.equal(wa.signal.aborted, false);
  assert.equal(wb.signal.aborted, true);
  assert.equal((await m.get("ns", "c"))?.data?.key, "c");
  await assert.rejects(m.get("ns", "b"), { message: `object "ns"/"b" not registered` });
  assert.equal(client.lists.filter((l) => l.endsWith("=a")).length, 1);
  m.close();
});

Deno.test("ObjectManager Watch get of an object no pod refers to throws not registered", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1"));
  const m = manager<V1ConfigMap>(client, "Watch");
  await assert.rejects(m.get("ns", "a"), { message: `object "ns"/"a" not registered` });
  assert.deepEqual(client.lists, []);
  m.close();
});

Deno.test("ObjectManager Watch stops watching an immutable object but keeps serving it", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("frozen"), cm("frozen", "v1", "10", true));
  const m = manager<V1ConfigMap>(client, "Watch");
  m.registerPod(podUsing("u1", "frozen"));
  assert.equal((await m.get("ns", "frozen"))?.data?.key, "v1");
  await until(() => client.watches.length === 1, "the watch");
  assert.equal(client.watches[0]!.signal.aborted, true);
  assert.equal((await m.get("ns", "frozen"))?.data?.key, "v1");
  m.close();
});

Deno.test("ObjectManager Watch get fails when the first list does not finish within a second", async () => {
  const client = new FakeClient();
  client.hangLists = true;
  const clock = new FakeClock();
  const m = manager<V1ConfigMap>(client, "Watch", clock);
  m.registerPod(podUsing("u1", "a"));
  const got = m.get("ns", "a");
  await until(() => clock.waiters === 1, "the sync timer");
  clock.step(999);
  assert.equal(clock.waiters, 1);
  clock.step(1);
  await assert.rejects(got, {
    message: "failed to sync configmap cache: timed out waiting for the condition",
  });
  m.close();
});

Deno.test("ObjectManager close aborts every watch and is idempotent", async () => {
  const client = new FakeClient();
  const m = manager<V1ConfigMap>(client, "Watch");
  m.registerPod(podUsing("u1", "a", "b"));
  await m.get("ns", "a");
  await m.get("ns", "b");
  await until(() => client.watches.length === 2, "watches");
  m.close();
  m.close();
  assert.ok(client.watches.every((w) => w.signal.aborted));
  await assert.rejects(m.get("ns", "a"), /closed/);
});

Deno.test("ObjectManager Cache refetches after the TTL from the apiserver cache", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1", "10"));
  const clock = new FakeClock();
  const m = manager<V1ConfigMap>(client, "Cache", clock);
  m.registerPod(podUsing("u1", "a"));
  assert.equal((await m.get("ns", "a"))?.data?.key, "v1");
  client.objects.set(cmPath("a"), cm("a", "v2", "11"));
  clock.step(59_999);
  assert.equal((await m.get("ns", "a"))?.data?.key, "v1");
  assert.deepEqual(client.gets, [cmPath("a")]);
  clock.step(1);
  assert.equal((await m.get("ns", "a"))?.data?.key, "v2");
  assert.deepEqual(client.gets, [cmPath("a"), `${cmPath("a")}?resourceVersion=0`]);
  m.close();
});

Deno.test("ObjectManager Cache refetches when a pod registers again", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1", "10"));
  const m = manager<V1ConfigMap>(client, "Cache");
  const pod = podUsing("u1", "a");
  m.registerPod(pod);
  await m.get("ns", "a");
  client.objects.set(cmPath("a"), cm("a", "v2", "11"));
  assert.equal((await m.get("ns", "a"))?.data?.key, "v1");
  m.registerPod(pod);
  assert.equal((await m.get("ns", "a"))?.data?.key, "v2");
  assert.equal(client.gets.length, 2);
  m.close();
});

Deno.test("ObjectManager Cache serves the stale copy when a refresh fails, the error otherwise", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1", "10"));
  const clock = new FakeClock();
  const m = manager<V1ConfigMap>(client, "Cache", clock);
  m.registerPod(podUsing("u1", "a", "b"));
  await m.get("ns", "a");
  client.failGets = new KubeApiError("GET", "x", 500, "InternalError", "boom");
  clock.step(60_000);
  assert.equal((await m.get("ns", "a"))?.data?.key, "v1");
  await assert.rejects(m.get("ns", "b"), /boom/);
  m.close();
});

Deno.test("ObjectManager Cache caches a 404 for the TTL and requires registration", async () => {
  const client = new FakeClient();
  const clock = new FakeClock();
  const m = manager<V1ConfigMap>(client, "Cache", clock);
  await assert.rejects(m.get("ns", "gone"), { message: `object "ns"/"gone" not registered` });
  m.registerPod(podUsing("u1", "gone"));
  assert.equal(await m.get("ns", "gone"), undefined);
  assert.equal(await m.get("ns", "gone"), undefined);
  assert.equal(client.gets.length, 1);
  m.unregisterPod(podUsing("u1"));
  await assert.rejects(m.get("ns", "gone"), { message: `object "ns"/"gone" not registered` });
  m.close();
});

Deno.test("ObjectManager Get asks the apiserver every time, 404 as undefined", async () => {
  const client = new FakeClient();
  client.objects.set("/api/v1/namespaces/ns/secrets/s", { metadata: { name: "s" } });
  const m = manager<V1Secret>(client, "Get", new FakeClock(), "secrets");
  assert.equal((await m.get("ns", "s"))?.metadata?.name, "s");
  assert.equal((await m.get("ns", "s"))?.metadata?.name, "s");
  assert.equal(await m.get("ns", "missing"), undefined);
  assert.deepEqual(client.gets, [
    "/api/v1/namespaces/ns/secrets/s",
    "/api/v1/namespaces/ns/secrets/s",
    "/api/v1/namespaces/ns/secrets/missing",
  ]);
  m.close();
});

Deno.test("ObjectManager rejects an unknown strategy", () => {
  assert.throws(
    () => manager(new FakeClient(), "Poll" as ChangeDetectionStrategy),
    /strategy must be Watch, Cache or Get: current value is 'Poll'/,
  );
});

const everything: V1Pod = {
  metadata: { name: "p", namespace: "ns", uid: "u" },
  spec: {
    imagePullSecrets: [{ name: "pull" }],
    initContainers: [{
      name: "init",
      envFrom: [{ configMapRef: { name: "cm-init-from" } }, { secretRef: { name: "s-init-from" } }],
    }],
    containers: [{
      name: "c",
      env: [
        { name: "A", valueFrom: { configMapKeyRef: { name: "cm-env", key: "k" } } },
        { name: "B", valueFrom: { secretKeyRef: { name: "s-env", key: "k" } } },
        { name: "C", value: "plain" },
      ],
    }],
    ephemeralContainers: [{
      name: "debug",
      env: [{ name: "D", valueFrom: { configMapKeyRef: { name: "cm-ephemeral", key: "k" } } }],
    }],
    volumes: [
      { name: "v1", configMap: { name: "cm-vol" } },
      { name: "v2", secret: { secretName: "s-vol" } },
      {
        name: "v3",
        projected: {
          sources: [{ configMap: { name: "cm-proj" } }, { secret: { name: "s-proj" } }],
        },
      },
      { name: "v4", csi: { driver: "d", nodePublishSecretRef: { name: "s-csi" } } },
      { name: "v5", cephfs: { monitors: [], secretRef: { name: "s-ceph" } } },
      { name: "v6", azureFile: { secretName: "s-azure", shareName: "x" } },
      { name: "v7", emptyDir: {} },
    ],
  },
};

Deno.test("configMapNamesOf finds volumes, projected sources, env and envFrom of all containers", () => {
  assert.deepEqual(
    [...configMapNamesOf(everything)].sort(),
    ["cm-env", "cm-ephemeral", "cm-init-from", "cm-proj", "cm-vol"],
  );
});

Deno.test("secretNamesOf also finds image pull secrets and other volume sources' references", () => {
  assert.deepEqual(
    [...secretNamesOf(everything)].sort(),
    ["pull", "s-azure", "s-ceph", "s-csi", "s-env", "s-init-from", "s-proj", "s-vol"],
  );
});

Deno.test("envSourceOf reads through the managers and fails without one", async () => {
  const client = new FakeClient();
  client.objects.set(cmPath("a"), cm("a", "v1"));
  const configMaps = manager<V1ConfigMap>(client, "Get");
  const source = envSourceOf(configMaps, undefined);
  assert.equal((await source.getConfigMap("ns", "a"))?.data?.key, "v1");
  await assert.rejects(
    source.getSecret("ns", "s"),
    { message: "couldn't get secret ns/s, no kubeClient defined" },
  );
  await assert.rejects(
    envSourceOf(undefined, undefined).getConfigMap("ns", "a"),
    { message: "couldn't get configMap ns/a, no kubeClient defined" },
  );
  configMaps.close();
});
