import assert from "node:assert/strict";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { runtimePodStatus, sandboxStatus } from "../testing/pod_status_fixtures.ts";
import {
  allContainersRestartCleanedUp,
  generateAllContainersRestartingCondition,
  generateContainersReadyCondition,
  generatePodInitializedCondition,
  generatePodReadyCondition,
  generatePodReadyToStartContainersCondition,
  type RuntimeContainerState,
  shouldAllContainersRestart,
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

const RESTART_ALL_42 = {
  action: "RestartAllContainers",
  exitCodes: { operator: "In", values: [42] },
};
const RESTARTING_TRUE = { type: "AllContainersRestarting", status: "True" };

// Upstream TestGenerateAllContainersRestartingCondition, re-expressed.
Deno.test("generateAllContainersRestartingCondition is True from the triggering exit until the containers are gone", () => {
  const p = pod({
    containers: [{ name: "container1" }, {
      name: "trigger",
      restartPolicy: "Never",
      restartPolicyRules: [RESTART_ALL_42],
    }],
  });
  const started = {
    type: "AllContainersRestarting",
    status: "True",
    reason: "RestartAllContainersStarted",
    message: "container exited with restart policy rule",
  };
  const table: [string, RuntimeContainerState[], V1Pod["status"], string, object][] = [
    ["pod pending", [], undefined, "Pending", { type: "AllContainersRestarting", status: "False" }],
    ["pod failed", [], undefined, "Failed", {
      type: "AllContainersRestarting",
      status: "False",
      reason: "PodFailed",
    }],
    ["pod succeeded", [], undefined, "Succeeded", {
      type: "AllContainersRestarting",
      status: "False",
      reason: "PodCompleted",
    }],
    [
      "container triggers RestartAllContainers rule",
      [
        { name: "container1", state: "running", exitCode: 0 },
        { name: "trigger", state: "exited", exitCode: 42 },
      ],
      undefined,
      "Running",
      started,
    ],
    [
      "container triggers RestartAllContainers rule, cleaning up",
      [
        { name: "container1", state: "exited", exitCode: 0 },
        { name: "trigger", state: "exited", exitCode: 42 },
      ],
      { conditions: [RESTARTING_TRUE] },
      "Running",
      started,
    ],
    [
      "container triggers RestartAllContainers rule, cleaned up",
      [],
      { conditions: [RESTARTING_TRUE] },
      "Pending",
      { type: "AllContainersRestarting", status: "False" },
    ],
    [
      "another exit code does not trigger it",
      [{ name: "trigger", state: "exited", exitCode: 1 }],
      undefined,
      "Running",
      { type: "AllContainersRestarting", status: "False" },
    ],
  ];
  for (const [name, runtime, old, phase, want] of table) {
    assert.deepEqual(generateAllContainersRestartingCondition(p, runtime, old, phase), want, name);
  }
});

// Upstream TestShouldAllContainersRestart, re-expressed.
Deno.test("shouldAllContainersRestart reads the condition, then exits matching a RestartAllContainers rule", () => {
  const withRule = (name: string, restartPolicy: string) => ({
    name,
    restartPolicy,
    restartPolicyRules: [RESTART_ALL_42],
  });
  const table: [string, V1Pod, RuntimeContainerState[] | undefined, V1Pod["status"], boolean][] = [
    [
      "pod marked with condition",
      pod({ containers: [{ name: "regular", restartPolicy: "Never" }] }),
      [{ name: "regular", state: "running", exitCode: 0 }],
      { conditions: [RESTARTING_TRUE] },
      true,
    ],
    [
      "regular container exited with matching rules",
      pod({ containers: [withRule("regular", "Never")] }),
      [{ name: "regular", state: "exited", exitCode: 42 }],
      undefined,
      true,
    ],
    [
      "init container exited with matching rules",
      pod({ containers: [], initContainers: [withRule("init", "Never")] }),
      [{ name: "init", state: "exited", exitCode: 42 }],
      undefined,
      true,
    ],
    [
      "sidecar container exited with matching rules",
      pod({ containers: [], initContainers: [withRule("init", "Always")] }),
      [{ name: "init", state: "exited", exitCode: 42 }],
      undefined,
      true,
    ],
    [
      "container exited without rules",
      pod({ containers: [{ name: "regular" }] }),
      [{ name: "regular", state: "exited", exitCode: 1 }],
      undefined,
      false,
    ],
    [
      "an API status terminated with a matching code",
      pod({ containers: [withRule("regular", "Never")] }),
      undefined,
      { containerStatuses: [cs("regular", { state: { terminated: { exitCode: 42 } } })] },
      true,
    ],
    [
      "only the newest instance counts",
      pod({ containers: [withRule("regular", "Never")] }),
      [
        { name: "regular", state: "running", exitCode: 0 },
        { name: "regular", state: "exited", exitCode: 42 },
      ],
      undefined,
      false,
    ],
  ];
  for (const [name, p, runtime, apiStatus, want] of table) {
    assert.equal(shouldAllContainersRestart(p, runtime, apiStatus), want, name);
  }
});

Deno.test("allContainersRestartCleanedUp is true once no init or regular container is left", () => {
  const p = pod({ initContainers: [{ name: "i" }] });
  assert.equal(allContainersRestartCleanedUp(p, []), true);
  assert.equal(allContainersRestartCleanedUp(p, [{ name: "other" }]), true, "not the pod's");
  assert.equal(allContainersRestartCleanedUp(p, [{ name: "i" }]), false);
  assert.equal(allContainersRestartCleanedUp(p, [{ name: "b" }]), false);
});

Deno.test("generatePodInitializedCondition stays True once initialized while init containers restart", () => {
  const p = pod({ initContainers: [{ name: "i" }] });
  const waiting = [cs("i", { state: { waiting: { reason: "RestartingAllContainers" } } })];
  assert.equal(generatePodInitializedCondition(p, waiting, "Running").status, "False");
  const old = { conditions: [{ type: "Initialized", status: "True" }] };
  assert.deepEqual(generatePodInitializedCondition(p, waiting, "Running", old), {
    type: "Initialized",
    status: "True",
  });
});
