import assert from "node:assert/strict";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import {
  CONTAINER_GC_PERIOD_MS,
  ContainerGC,
  type ContainerGCOptions,
  ContainerGCPolicyError,
  containerIDFromLegacySymlink,
} from "./container_gc.ts";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import { FakeRuntimeService } from "../testing/fake_runtime_service.ts";
import { createLogger } from "../klog/klog.ts";
import { CriError, GrpcCode } from "../cri/connection.ts";

const NODE: ObjectRef = { kind: "Node", name: "node-a", uid: "node-a" };

interface Pod {
  readonly uid: string;
  readonly name: string;
  readonly namespace: string;
  readonly sandboxId: string;
  /** `<podLogs>/<ns>_<name>_<uid>`. */
  readonly logDir: string;
}

type State = "created" | "running" | "exited";

/** The fake CRI in process, with every removal recorded in order and scripted failures. */
async function harness() {
  const dir = await Deno.makeTempDir({ prefix: "container_gc_test_" });
  const podLogs = `${dir}/pods`;
  const legacy = `${dir}/containers`;
  await Deno.mkdir(podLogs);
  await Deno.mkdir(legacy);
  const clock = new FakeClock();
  const cri = new FakeRuntimeService({ clock, preloadImages: ["busybox:1.36"] });
  const calls: string[] = [];
  const failRemove = new Set<string>();
  /** Containers someone else removes just before the collector's ContainerStatus. */
  const vanish = new Set<string>();
  const gone = new Set<string>();
  const terminated = new Set<string>();
  const events: { reason: string; message: string; object: ObjectRef }[] = [];
  const lines: string[] = [];
  // The fake answers synchronously; its throws become rejections, as over gRPC.
  const call = <T>(fn: () => T) => new Promise<T>((resolve) => resolve(fn()));
  const runtime: ContainerGCOptions["runtime"] = {
    listContainers: (filter) => call(() => cri.listContainers({ filter }).containers),
    containerStatus: (containerId, verbose = false) =>
      call(() => {
        if (vanish.delete(containerId)) {
          cri.removeContainer({ containerId });
          // What the CRI client throws for containerd's answer.
          throw new CriError(
            "RuntimeService/ContainerStatus",
            GrpcCode.NOT_FOUND,
            `an error occurred when try to find container "${containerId}": not found`,
          );
        }
        return cri.containerStatus({ containerId, verbose });
      }),
    removeContainer: (containerId) =>
      call(() => {
        calls.push(`rm ${containerId}`);
        if (failRemove.has(containerId)) throw new Error(`container ${containerId} is busy`);
        cri.removeContainer({ containerId });
      }),
    listPodSandbox: (filter) => call(() => cri.listPodSandbox({ filter }).items),
    stopPodSandbox: (podSandboxId) =>
      call(() => {
        calls.push(`stop ${podSandboxId}`);
        cri.stopPodSandbox({ podSandboxId });
      }),
    removePodSandbox: (podSandboxId) =>
      call(() => {
        calls.push(`rmp ${podSandboxId}`);
        cri.removePodSandbox({ podSandboxId });
      }),
  };
  const recorder: EventRecorder = {
    event: (object, _type, reason, message) => events.push({ object, reason, message }),
  };
  let attempts = 0;

  return {
    dir,
    podLogs,
    legacy,
    clock,
    cri,
    calls,
    failRemove,
    vanish,
    gone,
    terminated,
    events,
    lines,
    gc(opts: Partial<ContainerGCOptions> = {}): ContainerGC {
      return new ContainerGC({
        runtime,
        podStateProvider: {
          shouldPodContentBeRemoved: (uid) => gone.has(uid),
          shouldPodRuntimeBeRemoved: (uid) => gone.has(uid) || terminated.has(uid),
        },
        sourcesReady: () => true,
        podLogsDirectory: podLogs,
        legacyContainerLogsDirectory: legacy,
        recorder,
        nodeRef: NODE,
        clock,
        logger: createLogger({ write: (l) => lines.push(l), verbosity: 5 }),
        ...opts,
      });
    },
    /** A pod's sandbox; `ready: false` stops it. */
    pod(uid: string, name = uid, ready = true): Pod {
      const namespace = "ns";
      const logDir = `${podLogs}/${namespace}_${name}_${uid}`;
      const { podSandboxId } = cri.runPodSandbox(api.RunPodSandboxRequest.create({
        config: {
          metadata: { name, namespace, uid, attempt: attempts++ },
          labels: { "io.kubernetes.pod.uid": uid },
          logDirectory: logDir,
        },
      }));
      if (!ready) cri.stopPodSandbox({ podSandboxId });
      clock.step(1000);
      return { uid, name, namespace, sandboxId: podSandboxId, logDir };
    },
    /** A container created one second after the previous one. */
    container(pod: Pod, name: string, attempt: number, state: State = "exited"): string {
      const wasReady = cri.sandboxes.get(pod.sandboxId)?.state ===
        api.PodSandboxState.SANDBOX_READY;
      const sb = cri.sandboxes.get(pod.sandboxId)!;
      sb.state = api.PodSandboxState.SANDBOX_READY;
      const { containerId } = cri.createContainer(api.CreateContainerRequest.create({
        podSandboxId: pod.sandboxId,
        config: {
          metadata: { name, attempt },
          image: { image: "busybox:1.36" },
          logPath: `${name}/${attempt}.log`,
          labels: {
            "io.kubernetes.pod.uid": pod.uid,
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.container.name": name,
          },
        },
      }));
      if (state !== "created") cri.startContainer({ containerId });
      if (state === "exited") cri.exitContainer(containerId, 0);
      if (!wasReady) sb.state = api.PodSandboxState.SANDBOX_NOTREADY;
      clock.step(1000);
      return containerId;
    },
    has(id: string): boolean {
      return cri.containers.has(id);
    },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

Deno.test("ContainerGC rejects a negative minimum age and defaults as upstream flags", async () => {
  await using h = await harness();
  assert.throws(
    () => h.gc({ policy: { minAgeMs: -1500 } }),
    (e) =>
      e instanceof ContainerGCPolicyError &&
      e.message === "invalid minimum garbage collection age: -1.5s",
  );
  assert.deepEqual(h.gc().policy, { minAgeMs: 0, maxPerPodContainer: 1, maxContainers: -1 });
});

Deno.test("ContainerGC keeps the newest dead containers per container and removes the rest with their logs", async () => {
  await using h = await harness();
  const a = h.pod("uid-a", "a");
  const app0 = h.container(a, "app", 0);
  const app1 = h.container(a, "app", 1);
  const app2 = h.container(a, "app", 2);
  const app3 = h.container(a, "app", 3, "running");
  const side0 = h.container(a, "side", 0);
  await Deno.mkdir(`${a.logDir}/app`, { recursive: true });
  for (const f of ["0.log", "0.log.20260101-000000", "0.log.20251231-000000.gz", "2.log"]) {
    await Deno.writeTextFile(`${a.logDir}/app/${f}`, "log\n");
  }
  const link0 = `${h.legacy}/a_ns_app-${app0}.log`;
  const link2 = `${h.legacy}/a_ns_app-${app2}.log`;
  await Deno.symlink(`${a.logDir}/app/0.log`, link0);
  await Deno.symlink(`${a.logDir}/app/2.log`, link2);

  const postStopped: string[] = [];
  await h.gc({ internalLifecycle: { postStopContainer: (id) => postStopped.push(id) } })
    .garbageCollect(true, false);
  assert.deepEqual(h.calls, [`rm ${app0}`, `rm ${app1}`], "oldest first");
  assert.deepEqual(postStopped, [app0, app1], "the internal post-stop hook before each removal");
  assert.ok(h.has(app2) && h.has(app3) && h.has(side0));
  const left = [...Deno.readDirSync(`${a.logDir}/app`)].map((e) => e.name);
  assert.deepEqual(left, ["2.log"], "a removed container's log and rotated logs go with it");
  assert.equal(await exists(link0), false);
  assert.equal(await exists(link2), true);
});

Deno.test("ContainerGC keeps containers younger than the minimum age", async () => {
  await using h = await harness();
  const a = h.pod("uid-a");
  const app0 = h.container(a, "app", 0);
  const app1 = h.container(a, "app", 1);
  const app2 = h.container(a, "app", 2);
  // app2 was created 1 s ago: with a 60 s minimum age, it is not evictable yet.
  h.clock.step(58_500);
  await h.gc({ policy: { minAgeMs: 60_000 } }).garbageCollect(true, false);
  assert.deepEqual(h.calls, [`rm ${app0}`]);
  assert.ok(h.has(app1) && h.has(app2));
});

Deno.test("ContainerGC removes everything of removed pods once all sources are ready", async () => {
  await using h = await harness();
  const b = h.pod("uid-b", "b");
  const x0 = h.container(b, "x", 0);
  const x1 = h.container(b, "x", 1);
  h.cri.stopPodSandbox({ podSandboxId: b.sandboxId });
  await Deno.mkdir(`${b.logDir}/x`, { recursive: true });
  const c = h.pod("uid-c", "c", false);
  const c0 = h.container(c, "y", 0);
  h.gone.add("uid-b");
  h.terminated.add("uid-c");
  const gc = h.gc();

  await gc.garbageCollect(false, false);
  assert.deepEqual(h.calls, [`rm ${x0}`], "sources not ready: only the per-container limit");
  assert.ok(await exists(b.logDir), "pod logs stay until all sources are ready");

  h.calls.length = 0;
  await gc.garbageCollect(true, false);
  assert.deepEqual(h.calls, [`rm ${x1}`, `stop ${b.sandboxId}`, `rmp ${b.sandboxId}`]);
  assert.equal(await exists(b.logDir), false);
  assert.ok(h.has(c0), "a terminated pod keeps its containers in a normal collection");

  h.calls.length = 0;
  await gc.deleteAllUnusedContainers();
  assert.deepEqual(h.calls, [`rm ${c0}`, `stop ${c.sandboxId}`, `rmp ${c.sandboxId}`]);
  assert.ok(h.lines.some((l) => l.includes('"Attempting to delete unused containers"')));
});

Deno.test("ContainerGC caps the total with an even share per container, then oldest first", async () => {
  await using h = await harness();
  const p = h.pod("uid-p");
  const a = [0, 1, 2, 3].map((i) => h.container(p, "a", i));
  const w = [0, 1, 2].map((i) => h.container(p, "w", i));
  await h.gc({ policy: { maxPerPodContainer: 5, maxContainers: 4 } }).garbageCollect(true, false);
  // 7 > 4: two each (4 / 2 units) leaves a2, a3, w1 and w2.
  assert.deepEqual(h.calls, [`rm ${a[0]}`, `rm ${a[1]}`, `rm ${w[0]}`]);

  await using h2 = await harness();
  const q = h2.pod("uid-q");
  const ids = ["a", "b", "c", "d"].map((n) => h2.container(q, n, 0));
  await h2.gc({ policy: { maxContainers: 2 } }).garbageCollect(true, false);
  // One each is already the minimum share; the two oldest go.
  assert.deepEqual(h2.calls, [`rm ${ids[0]}`, `rm ${ids[1]}`]);
});

Deno.test("ContainerGC removes dead empty sandboxes but the newest of a live pod", async () => {
  await using h = await harness();
  const d0 = h.pod("uid-d", "d", false);
  const d1 = h.pod("uid-d", "d", false);
  const d2 = h.pod("uid-d", "d");
  const e0 = h.pod("uid-e", "e", false);
  const e1 = h.pod("uid-e", "e", false);
  const f0 = h.pod("uid-f", "f", false);
  const f1 = h.pod("uid-f", "f");
  const g0 = h.pod("uid-g", "g", false);
  const g0c = h.container(g0, "app", 0, "created");
  h.gone.add("uid-f");
  h.gone.add("uid-g");
  await h.gc().garbageCollect(false, false);
  assert.deepEqual(h.calls, [
    `stop ${d0.sandboxId}`,
    `rmp ${d0.sandboxId}`,
    `stop ${d1.sandboxId}`,
    `rmp ${d1.sandboxId}`,
    `stop ${e0.sandboxId}`,
    `rmp ${e0.sandboxId}`,
    `stop ${f0.sandboxId}`,
    `rmp ${f0.sandboxId}`,
  ]);
  assert.ok(h.cri.sandboxes.has(d2.sandboxId), "ready");
  assert.ok(h.cri.sandboxes.has(e1.sandboxId), "the newest of a live pod");
  assert.ok(h.cri.sandboxes.has(f1.sandboxId), "ready, even of a removed pod");
  assert.ok(h.cri.sandboxes.has(g0.sandboxId) && h.has(g0c), "still holds a container");
});

Deno.test("ContainerGC removes dangling legacy log symlinks of containers no longer running", async () => {
  await using h = await harness();
  const a = h.pod("uid-a", "a");
  const exited = h.container(a, "exited", 0);
  const running = h.container(a, "running", 0, "running");
  await Deno.mkdir(`${a.logDir}/ok`, { recursive: true });
  await Deno.writeTextFile(`${a.logDir}/ok/0.log`, "");
  const links = {
    exited: `${h.legacy}/a_ns_exited-${exited}.log`,
    running: `${h.legacy}/a_ns_running-${running}.log`,
    unknown: `${h.legacy}/a_ns_gone-0123456789ab.log`,
    short: `${h.legacy}/a_ns_short-abc.log`,
    healthy: `${h.legacy}/a_ns_ok-fedcba987654.log`,
  };
  for (const [k, path] of Object.entries(links)) {
    await Deno.symlink(k === "healthy" ? `${a.logDir}/ok/0.log` : `${h.dir}/missing/${k}`, path);
  }
  await Deno.writeTextFile(`${h.legacy}/notes.txt`, "");
  await Deno.mkdir(`${h.podLogs}/ns_gone_uid-gone`);
  await Deno.mkdir(`${h.podLogs}/ns_live_uid-live`);
  h.gone.add("uid-gone");

  await h.gc().garbageCollect(false, false);
  assert.equal(await exists(links.exited), false);
  assert.equal(await exists(links.unknown), false, "a container the runtime lost");
  assert.equal(await exists(links.short), false, "an id too short to look up");
  assert.equal(await exists(links.running), true, "its log may be rotating");
  assert.equal(await exists(links.healthy), true);
  assert.equal(await exists(`${h.legacy}/notes.txt`), true);
  assert.ok(h.lines.some((l) => l.includes('"Error getting ContainerStatus for containerID"')));
  assert.equal(await exists(`${h.podLogs}/ns_gone_uid-gone`), true, "sources not ready");

  await h.gc().garbageCollect(true, false);
  assert.equal(await exists(`${h.podLogs}/ns_gone_uid-gone`), false);
  assert.equal(await exists(`${h.podLogs}/ns_live_uid-live`), true);
});

Deno.test("ContainerGC kills a container in unknown state before removing it", async () => {
  await using h = await harness();
  const a = h.pod("uid-a");
  const u0 = h.container(a, "u", 0, "running");
  h.container(a, "u", 1);
  h.cri.containers.get(u0)!.state = api.ContainerState.CONTAINER_UNKNOWN;

  await h.gc().garbageCollect(true, false);
  assert.deepEqual(h.calls, [], "no killContainer: skipped");
  assert.ok(
    h.lines.some((l) =>
      l.includes('"Failed to stop container"') && l.includes("is not supported yet")
    ),
  );

  const killed: string[] = [];
  const killContainer = (id: string, name: string) => {
    killed.push(`${id}/${name}`);
    h.cri.containers.get(id)!.state = api.ContainerState.CONTAINER_EXITED;
    return Promise.resolve();
  };
  await h.gc({ killContainer }).garbageCollect(true, false);
  assert.deepEqual(killed, [`${u0}/u`]);
  assert.deepEqual(h.calls, [`rm ${u0}`]);
});

Deno.test("ContainerGC logs a failed removal and goes on", async () => {
  await using h = await harness();
  const a = h.pod("uid-a");
  const ids = [0, 1, 2].map((i) => h.container(a, "app", i));
  h.failRemove.add(ids[0]!);
  await h.gc().garbageCollect(true, false);
  assert.deepEqual(h.calls, [`rm ${ids[0]}`, `rm ${ids[1]}`]);
  assert.ok(h.has(ids[0]!) && !h.has(ids[1]!) && h.has(ids[2]!));
  assert.ok(
    h.lines.some((l) =>
      l.includes('"Failed to remove container"') && l.includes(`container ${ids[0]} is busy`)
    ),
  );
});

Deno.test("ContainerGC takes a container removed meanwhile (by the container deletor) as removed", async () => {
  await using h = await harness();
  const a = h.pod("uid-a");
  const ids = [0, 1, 2].map((i) => h.container(a, "app", i));
  h.vanish.add(ids[0]!);
  await h.gc().garbageCollect(true, false);
  assert.deepEqual(h.calls, [`rm ${ids[1]}`], "the vanished one never reaches RemoveContainer");
  assert.ok(!h.has(ids[0]!) && !h.has(ids[1]!) && h.has(ids[2]!));
  assert.ok(!h.lines.some((l) => l.includes('"Failed to remove container"')), h.lines.join("\n"));
});

Deno.test("ContainerGC run collects at once and every minute, ContainerGCFailed on failure", async () => {
  await using h = await harness();
  const a = h.pod("uid-a");
  const ids = [0, 1].map((i) => h.container(a, "app", i));
  await Deno.remove(h.podLogs);
  const gc = h.gc();
  const ac = new AbortController();
  let ready = false;
  const done = gc.run(ac.signal, () => ready);
  await until(() => h.clock.waiters === 1, "the first pass");
  assert.deepEqual(h.calls, [`rm ${ids[0]}`], "the other steps ran despite the failure");
  assert.equal(h.events.length, 0, "sources not ready: pod logs not read");

  ready = true;
  h.clock.step(CONTAINER_GC_PERIOD_MS);
  await until(() => h.events.length === 1, "ContainerGCFailed");
  assert.equal(h.events[0]?.reason, "ContainerGCFailed");
  assert.deepEqual(h.events[0]?.object, NODE);
  assert.ok(
    h.events[0]?.message.startsWith(`failed to read podLogsDirectory "${h.podLogs}": `),
    h.events[0]?.message,
  );
  assert.ok(h.lines.some((l) => l.includes('"Container garbage collection failed"')));

  await Deno.mkdir(h.podLogs);
  await until(() => h.clock.waiters === 1, "the second sleep");
  const succeeded = () =>
    h.lines.filter((l) => l.includes('"Container garbage collection succeeded"')).length;
  assert.equal(succeeded(), 1, "the first pass");
  h.clock.step(CONTAINER_GC_PERIOD_MS);
  await until(() => succeeded() === 2, "success again");
  assert.equal(h.events.length, 1);
  ac.abort();
  await done;
});

Deno.test("containerIDFromLegacySymlink parses as upstream", () => {
  assert.equal(
    containerIDFromLegacySymlink("/var/log/containers/p_ns_c-0123456789ab.log"),
    "0123456789ab",
  );
  const short = containerIDFromLegacySymlink("/var/log/containers/p_ns_c-abc.log");
  assert.ok(short instanceof Error && short.message === 'container Id "abc" is too short');
  const suffix = containerIDFromLegacySymlink("/var/log/containers/p_ns_c-0123456789ab.txt");
  assert.ok(suffix instanceof Error && suffix.message.endsWith(`doesn't end with ".log"`));
});
