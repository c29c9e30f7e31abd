import assert from "node:assert/strict";
import * as api from "../proto/runtime/v1/api.ts";
import { defaultPodStatus, type PodStatus } from "./container/pod_cache.ts";
import {
  CONTAINER_DELETOR_BUFFER_LIMIT,
  containersToDeleteInPod,
  PodContainerDeletor,
} from "./pod_container_deletor.ts";
import { captureLogger } from "./testing/cm_fixtures.ts";

const { CONTAINER_EXITED: EXITED, CONTAINER_RUNNING: RUNNING } = api.ContainerState;

function status(...cs: [id: string, name: string, state: api.ContainerState, created: number][]) {
  const s: PodStatus = defaultPodStatus("uid-1");
  s.containerStatuses = cs.map(([id, name, state, created]) =>
    api.ContainerStatus.create({ id, metadata: { name }, state, createdAt: BigInt(created) })
  );
  return s;
}

// Two instances of "app" dead, one running; one of "log" dead.
const pod = status(
  ["a1", "app", EXITED, 1],
  ["a3", "app", RUNNING, 3],
  ["a2", "app", EXITED, 2],
  ["l1", "log", EXITED, 1],
);

Deno.test("containersToDeleteInPod keeps the newest dead instances of the died container's name", () => {
  const ids = (cs: api.ContainerStatus[] | undefined) => cs?.map((c) => c.id);
  assert.deepEqual(ids(containersToDeleteInPod("a2", pod, 1)), ["a1"]);
  assert.deepEqual(ids(containersToDeleteInPod("a2", pod, 0)), ["a2", "a1"]);
  assert.deepEqual(ids(containersToDeleteInPod("a2", pod, 2)), []);
  assert.deepEqual(ids(containersToDeleteInPod("l1", pod, 1)), []);
  // Every name, newest first.
  assert.deepEqual(ids(containersToDeleteInPod("", pod, 0)), ["a2", "a1", "l1"]);
  // A sandbox's id is not one of the containers.
  assert.equal(containersToDeleteInPod("sandbox-1", pod, 1), undefined);
});

Deno.test("PodContainerDeletor removes one at a time, at least one dead instance kept, everything with removeAll", async () => {
  const { logger, lines } = captureLogger();
  const removed: string[] = [];
  let running = 0;
  const deletor = new PodContainerDeletor({
    remove: async (id) => {
      assert.equal(++running, 1, "one removal at a time");
      await Promise.resolve();
      removed.push(id);
      running--;
      if (id === "a1") throw new Error("rpc error: code = Unknown desc = busy");
    },
    containersToKeep: 0, // raised to upstream's minimum of 1
    logger,
    signal: new AbortController().signal,
  });
  deletor.deleteContainersInPod("a2", pod, false);
  await deletor.idle();
  assert.deepEqual(removed, ["a1"]);
  assert.ok(lines.some((l) => l.includes("DeleteContainer returned error") && l.includes("a1")));

  deletor.deleteContainersInPod("sandbox-1", pod, false);
  assert.ok(lines.some((l) => l.includes("Container not found in pod's containers")));
  // The pod's content may go: every dead container, whatever id died.
  deletor.deleteContainersInPod("sandbox-1", pod, true);
  await deletor.idle();
  assert.deepEqual(removed, ["a1", "a2", "a1", "l1"]);
});

Deno.test("PodContainerDeletor drops requests past its buffer, and queues a container once", async () => {
  const { logger, lines } = captureLogger();
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const removed: string[] = [];
  const deletor = new PodContainerDeletor({
    remove: async (id) => {
      await gate;
      removed.push(id);
    },
    containersToKeep: 1,
    logger,
    signal: new AbortController().signal,
  });
  const many = status(
    ...Array.from(
      { length: CONTAINER_DELETOR_BUFFER_LIMIT + 3 },
      (_, i) => [`c${i}`, `n${i}`, EXITED, i] as [string, string, api.ContainerState, number],
    ),
  );
  deletor.deleteContainersInPod("", many, true);
  deletor.deleteContainersInPod("", many, true);
  open();
  await deletor.idle();
  assert.equal(removed.length, CONTAINER_DELETOR_BUFFER_LIMIT);
  assert.equal(new Set(removed).size, removed.length);
  assert.equal(
    lines.filter((l) => l.includes("Failed to issue the request to remove container")).length,
    6,
  );
});

Deno.test("PodContainerDeletor stops when its signal aborts", async () => {
  const { logger } = captureLogger();
  const stop = new AbortController();
  const removed: string[] = [];
  const deletor = new PodContainerDeletor({
    remove: (id, signal) => {
      removed.push(id);
      stop.abort();
      return Promise.reject(signal.reason);
    },
    containersToKeep: 1,
    logger,
    signal: stop.signal,
  });
  deletor.deleteContainersInPod("", pod, true);
  await deletor.idle();
  assert.deepEqual(removed, ["a2"]);
  // Asked again once stopped: nothing queued, and idle settles.
  deletor.deleteContainersInPod("", pod, true);
  await deletor.idle();
  assert.deepEqual(removed, ["a2"]);
});
