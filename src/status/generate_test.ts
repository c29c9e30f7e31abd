import assert from "node:assert/strict";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { runtimePodStatus, sandboxStatus } from "../testing/pod_status_fixtures.ts";
import {
  generateContainersReadyCondition,
  generatePodInitializedCondition,
  generatePodReadyCondition,
  generatePodReadyToStartContainersCondition,
} from "./generate.ts";

function pod(spec: Partial<NonNullable<V1Pod["spec"]>> = {}, generation?: number): V1Pod {
  return {
    metadata: { name: "p", namespace: "ns", uid: "uid-1", generation },
    spec: { containers: [{ name: "a" }, { name: "b" }], ...spec },
  };
}

function cs(name: string, o: Partial<V1ContainerStatus> = {}): V1ContainerStatus {
  return {
    name,
    image: "img",
    imageID: "",
    ready: false,
    restartCount: 0,
    state: { running: {} },
    ...o,
  };
}

Deno.test("generateContainersReadyCondition reports unready and unknown containers as upstream", () => {
  const cases: {
    name: string;
    statuses: V1ContainerStatus[] | undefined;
    phase: string;
    want: Record<string, string>;
  }[] = [
    {
      name: "all ready",
      statuses: [cs("a", { ready: true }), cs("b", { ready: true })],
      phase: "Running",
      want: { status: "True" },
    },
    {
      name: "one unready, one unknown",
      statuses: [cs("b")],
      phase: "Running",
      want: {
        status: "False",
        reason: "ContainersNotReady",
        message: "containers with unknown status: [a], containers with unready status: [b]",
      },
    },
    {
      name: "two unready",
      statuses: [cs("a"), cs("b")],
      phase: "Running",
      want: {
        status: "False",
        reason: "ContainersNotReady",
        message: "containers with unready status: [a b]",
      },
    },
    {
      name: "succeeded",
      statuses: [cs("a"), cs("b")],
      phase: "Succeeded",
      want: { status: "False", reason: "PodCompleted" },
    },
    {
      name: "failed",
      statuses: [cs("a", { ready: true })],
      phase: "Failed",
      want: { status: "False", reason: "PodFailed" },
    },
    {
      name: "nil statuses",
      statuses: undefined,
      phase: "Pending",
      want: { status: "False", reason: "UnknownContainerStatuses" },
    },
  ];
  for (const c of cases) {
    const got = generateContainersReadyCondition(pod(), c.statuses, c.phase);
    assert.deepEqual(got, { type: "ContainersReady", ...c.want }, c.name);
  }
});

Deno.test("generateContainersReadyCondition counts sidecars but not regular init containers", () => {
  const p = pod({
    containers: [{ name: "a" }],
    initContainers: [{ name: "init" }, { name: "side", restartPolicy: "Always" }],
  });
  const got = generateContainersReadyCondition(
    p,
    [cs("init"), cs("a", { ready: true })],
    "Running",
  );
  assert.equal(got.message, "containers with unknown status: [side]");
});

Deno.test("generatePodReadyCondition follows ContainersReady, then the readiness gates", () => {
  const p = pod({
    containers: [{ name: "a" }],
    readinessGates: [{ conditionType: "example.com/lb" }, { conditionType: "example.com/dns" }],
  }, 3);
  const ready = [cs("a", { ready: true })];
  assert.deepEqual(generatePodReadyCondition(p, [], [cs("a")], "Running"), {
    type: "Ready",
    status: "False",
    observedGeneration: 3,
    reason: "ContainersNotReady",
    message: "containers with unready status: [a]",
  });
  assert.deepEqual(
    generatePodReadyCondition(p, [{ type: "example.com/lb", status: "False" }], ready, "Running"),
    {
      type: "Ready",
      status: "False",
      observedGeneration: 3,
      reason: "ReadinessGatesNotReady",
      message: 'the status of pod readiness gate "example.com/lb" is not "True", but False, ' +
        'corresponding condition of pod readiness gate "example.com/dns" does not exist.',
    },
  );
  const gates = [
    { type: "example.com/lb", status: "True" },
    { type: "example.com/dns", status: "True" },
  ];
  assert.deepEqual(generatePodReadyCondition(p, gates, ready, "Running"), {
    type: "Ready",
    status: "True",
    observedGeneration: 3,
  });
});

Deno.test("generatePodInitializedCondition waits for init containers, sidecars to start", () => {
  const p = pod({
    containers: [{ name: "a" }],
    initContainers: [{ name: "init" }, { name: "side", restartPolicy: "Always" }],
  });
  const waitingApp = cs("a", { state: { waiting: { reason: "PodInitializing" } } });
  assert.deepEqual(
    generatePodInitializedCondition(
      p,
      [cs("init", { ready: true }), cs("side", { started: false }), waitingApp],
      "Pending",
    ),
    {
      type: "Initialized",
      status: "False",
      reason: "ContainersNotInitialized",
      message: "containers with incomplete status: [side]",
    },
  );
  assert.deepEqual(
    generatePodInitializedCondition(p, [cs("init"), waitingApp], "Pending"),
    {
      type: "Initialized",
      status: "False",
      reason: "ContainersNotInitialized",
      message: "containers with unknown status: [side], containers with incomplete status: [init]",
    },
  );
  assert.equal(
    generatePodInitializedCondition(
      p,
      [cs("init", { ready: true }), cs("side", { started: true }), waitingApp],
      "Pending",
    ).status,
    "True",
  );
  // A regular container has run: a restarting sidecar does not un-initialize the pod.
  assert.deepEqual(
    generatePodInitializedCondition(p, [cs("init"), cs("side"), cs("a")], "Running"),
    { type: "Initialized", status: "True" },
  );
  assert.deepEqual(
    generatePodInitializedCondition(p, [cs("init"), cs("side"), waitingApp], "Succeeded"),
    { type: "Initialized", status: "True", reason: "PodCompleted" },
  );
});

Deno.test("generatePodReadyToStartContainersCondition is True with a usable sandbox", () => {
  const ready = sandboxStatus(api.PodSandboxState.SANDBOX_READY, "10.0.0.5");
  assert.deepEqual(generatePodReadyToStartContainersCondition(pod(), runtimePodStatus([ready])), {
    type: "PodReadyToStartContainers",
    status: "True",
  });
  assert.deepEqual(generatePodReadyToStartContainersCondition(pod(), runtimePodStatus([])), {
    type: "PodReadyToStartContainers",
    status: "False",
  });
});
