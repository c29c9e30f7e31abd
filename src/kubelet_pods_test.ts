import assert from "node:assert/strict";
import { createLogger } from "./klog/klog.ts";
import type { V1ContainerStatus, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import {
  generateAPIPodStatus,
  type GenerateStatusOptions,
  getPhase,
  podIsTerminalPhase,
  sortPodIPs,
} from "./kubelet_pods.ts";
import {
  CONTAINER_RESTART_COUNT_LABEL,
  KUBERNETES_CONTAINER_NAME_LABEL,
} from "./kuberuntime/labels.ts";
import type { PodStatus } from "./container/pod_cache.ts";
import { ReasonCache } from "./reason_cache.ts";
import { fail, PodSyncResult, type SyncErrorReason } from "./container/sync_result.ts";

// --- getPhase ---

function pod(spec: Partial<V1PodSpec>, extra: Partial<V1Pod> = {}): V1Pod {
  return {
    metadata: { name: "p", namespace: "ns", uid: "uid-1" },
    spec: { containers: [{ name: "app", image: "nginx" }], ...spec },
    ...extra,
  };
}

function status(
  name: string,
  state: V1ContainerStatus["state"],
  o: Partial<V1ContainerStatus> = {},
) {
  return { name, image: "i", imageID: "", ready: false, restartCount: 0, state, ...o };
}
const running = (name: string, o: Partial<V1ContainerStatus> = {}) =>
  status(name, { running: {} }, o);
const exited = (name: string, exitCode: number) => status(name, { terminated: { exitCode } });
const waiting = (name: string, lastExit?: number) =>
  status(name, { waiting: { reason: "CrashLoopBackOff" } }, {
    lastState: lastExit === undefined ? {} : { terminated: { exitCode: lastExit } },
  });

Deno.test("getPhase follows the restart policy of exited containers", () => {
  const table: [policy: string, exitCode: number, terminal: boolean, want: string][] = [
    ["Always", 0, false, "Running"],
    ["Always", 1, false, "Running"],
    ["OnFailure", 0, false, "Succeeded"],
    ["OnFailure", 1, false, "Running"],
    ["Never", 0, false, "Succeeded"],
    ["Never", 1, false, "Failed"],
    ["Always", 0, true, "Succeeded"],
    ["Always", 1, true, "Failed"],
    ["OnFailure", 1, true, "Failed"],
    ["Never", 0, true, "Succeeded"],
  ];
  for (const [policy, code, terminal, want] of table) {
    const p = pod({ restartPolicy: policy });
    assert.equal(getPhase(p, [exited("app", code)], [], terminal), want, `${policy} exit ${code}`);
    if (!terminal) {
      // Waiting to restart after that exit counts the same.
      const restarting = policy === "Always" || (policy === "OnFailure" && code !== 0);
      if (restarting) assert.equal(getPhase(p, [waiting("app", code)], [], false), want);
    }
  }
});

Deno.test("getPhase is Pending while containers wait or are unknown, Running when all started", () => {
  const p = pod({
    restartPolicy: "Always",
    containers: [{ name: "a" }, { name: "b" }],
  });
  assert.equal(getPhase(p, [], [], false), "Pending", "nothing known");
  assert.equal(getPhase(p, [running("a")], [], false), "Pending", "b unknown");
  assert.equal(getPhase(p, [running("a"), waiting("b")], [], false), "Pending", "b waiting");
  assert.equal(getPhase(p, [running("a"), exited("b", 0)], [], false), "Running");
  assert.equal(getPhase(p, [running("a"), running("b")], [], false), "Running");
});

Deno.test("getPhase handles init containers and their failures", () => {
  const spec = (restartPolicy: string) => ({
    restartPolicy,
    initContainers: [{ name: "init" }],
    containers: [{ name: "app" }],
  });
  const appWaiting = status("app", { waiting: { reason: "PodInitializing" } });
  assert.equal(getPhase(pod(spec("Never")), [appWaiting], [running("init")], false), "Pending");
  assert.equal(
    getPhase(pod(spec("Never")), [appWaiting], [exited("init", 1)], false),
    "Failed",
    "a failed init container that will not restart fails the pod",
  );
  assert.equal(
    getPhase(pod(spec("OnFailure")), [appWaiting], [exited("init", 1)], false),
    "Pending",
  );
  assert.equal(getPhase(pod(spec("Always")), [appWaiting], [waiting("init", 1)], false), "Pending");
  assert.equal(getPhase(pod(spec("Never")), [appWaiting], [waiting("init", 1)], false), "Failed");
  assert.equal(
    getPhase(pod(spec("Never")), [running("app")], [exited("init", 0)], false),
    "Running",
  );
});

Deno.test("getPhase treats sidecars as upstream", () => {
  const p = pod({
    restartPolicy: "Never",
    initContainers: [{ name: "side", restartPolicy: "Always" }],
    containers: [{ name: "app" }],
  });
  const appWaiting = status("app", { waiting: { reason: "PodInitializing" } });
  assert.equal(getPhase(p, [appWaiting], [running("side", { started: false })], false), "Pending");
  assert.equal(
    getPhase(p, [running("app")], [running("side", { started: true })], false),
    "Running",
  );
  assert.equal(
    getPhase(p, [exited("app", 0)], [running("side", { started: true })], false),
    "Running",
    "a running sidecar keeps the pod running until it is stopped",
  );
  assert.equal(getPhase(p, [exited("app", 0)], [exited("side", 137)], false), "Succeeded");
  assert.equal(getPhase(p, [exited("app", 1)], [waiting("side", 137)], false), "Failed");
  // A restarting sidecar does not send an initialized pod back to Pending.
  const notStarted = running("side", { started: false });
  assert.equal(getPhase(p, [running("app")], [notStarted], false, true), "Running");
  assert.equal(getPhase(p, [running("app")], [notStarted], false, false), "Pending");
});

Deno.test("getPhase applies container restart policies and rules", () => {
  const p = pod({
    restartPolicy: "Never",
    containers: [{
      name: "app",
      restartPolicy: "Never",
      restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "In", values: [42] } }],
    }],
  });
  assert.equal(getPhase(p, [exited("app", 42)], [], false), "Running");
  assert.equal(getPhase(p, [exited("app", 1)], [], false), "Failed");
  // Static pods never get a terminal phase from podIsTerminal.
  const staticPod = pod({ restartPolicy: "Always" }, {
    metadata: { name: "p", uid: "u", annotations: { "kubernetes.io/config.source": "file" } },
  });
  assert.equal(getPhase(staticPod, [exited("app", 0)], [], true), "Running");
});

// Upstream TestPodPhaseWithContainerRestartPolicy and ...InitContainers, re-expressed.
Deno.test("getPhase applies container-level restart policies as upstream's table", () => {
  const failed = (name: string) => exited(name, -1);
  const table: [string, Partial<V1PodSpec>, V1ContainerStatus[], V1ContainerStatus[], string][] = [
    [
      "container with restart policy Never failed",
      { restartPolicy: "Always", containers: [{ name: "c", restartPolicy: "Never" }] },
      [failed("c")],
      [],
      "Failed",
    ],
    [
      "container with restart policy OnFailure failed",
      { restartPolicy: "Always", containers: [{ name: "c", restartPolicy: "OnFailure" }] },
      [failed("c")],
      [],
      "Running",
    ],
    [
      "container with restart policy Always failed",
      { restartPolicy: "Always", containers: [{ name: "c", restartPolicy: "Always" }] },
      [failed("c")],
      [],
      "Running",
    ],
    [
      "at least one container with a restartable container-level policy failed",
      {
        restartPolicy: "Never",
        containers: [{ name: "a", restartPolicy: "Always" }, { name: "b" }],
      },
      [exited("a", 0), failed("b")],
      [],
      "Running",
    ],
    [
      "all containers without a restartable container-level policy failed",
      {
        restartPolicy: "Always",
        containers: [{ name: "a", restartPolicy: "Never" }, {
          name: "b",
          restartPolicy: "OnFailure",
        }],
      },
      [failed("a"), exited("b", 0)],
      [],
      "Failed",
    ],
    [
      "all containers succeeded",
      {
        restartPolicy: "Always",
        containers: [{ name: "a", restartPolicy: "Never" }, {
          name: "b",
          restartPolicy: "OnFailure",
        }],
      },
      [exited("a", 0), exited("b", 0)],
      [],
      "Succeeded",
    ],
    [
      "init container with restart policy Never failed",
      {
        restartPolicy: "Always",
        initContainers: [{ name: "i", restartPolicy: "Never" }],
        containers: [{ name: "c" }],
      },
      [],
      [failed("i")],
      "Failed",
    ],
    [
      "init container with restart policy OnFailure failed",
      {
        restartPolicy: "Never",
        initContainers: [{ name: "i", restartPolicy: "OnFailure" }],
        containers: [{ name: "c" }],
      },
      [],
      [failed("i")],
      "Pending",
    ],
  ];
  for (const [name, spec, statuses, inits, want] of table) {
    assert.equal(getPhase(pod(spec), statuses, inits, false, true), want, name);
  }
});

// Upstream TestPodPhaseWithRestartAllContainers, re-expressed.
Deno.test("getPhase counts containers removed by RestartAllContainers as restarting", () => {
  const rule = { action: "RestartAllContainers", exitCodes: { operator: "In", values: [42] } };
  const withRule = { name: "c", restartPolicy: "Never", restartPolicyRules: [rule] };
  const sidecarWithRule = { name: "c", restartPolicy: "Always", restartPolicyRules: [rule] };
  const removed = (name: string) =>
    status(name, {
      waiting: {
        reason: "RestartingAllContainers",
        message: "The container is removed because RestartAllContainers in place",
      },
    }, {
      lastState: {
        terminated: {
          reason: "RestartingAllContainers",
          message: "The container is removed because RestartAllContainers in place",
          exitCode: 137,
        },
      },
    });
  const plainWaiting = (name: string) => status(name, { waiting: {} });
  // Statuses are looked up by name among regular and init statuses alike, as upstream does.
  const table: [string, Partial<V1PodSpec>, V1ContainerStatus[], string][] = [
    [
      "regular container triggers RestartAllContainers",
      { containers: [withRule] },
      [exited("c", 42)],
      "Running",
    ],
    [
      "init container triggers RestartAllContainers",
      { initContainers: [withRule], containers: [] },
      [exited("c", 42), plainWaiting("regular")],
      "Pending",
    ],
    [
      "sidecar container triggers RestartAllContainers",
      { initContainers: [sidecarWithRule], containers: [{ name: "regular" }] },
      [exited("c", 42), plainWaiting("regular")],
      "Pending",
    ],
    [
      "regular container triggers RestartAllContainers, cleaned up",
      { containers: [withRule] },
      [removed("c")],
      "Running",
    ],
    [
      "init container triggers RestartAllContainers, cleaned up",
      { initContainers: [withRule], containers: [] },
      [removed("c"), plainWaiting("regular")],
      "Pending",
    ],
    [
      "regular container triggered RestartAllContainers; init container succeeded",
      { initContainers: [{ name: "init" }], containers: [withRule] },
      [exited("init", 0), removed("c")],
      "Running",
    ],
    [
      "regular container triggered RestartAllContainers; init container failed",
      { initContainers: [{ name: "init" }], containers: [withRule] },
      [exited("init", -1), removed("c")],
      "Failed",
    ],
    [
      "init container triggered RestartAllContainers; init container succeeds",
      { initContainers: [withRule], containers: [{ name: "regular" }] },
      [exited("c", 0), plainWaiting("regular")],
      "Pending",
    ],
    [
      "sidecar container triggered RestartAllContainers kills regular container",
      { initContainers: [sidecarWithRule], containers: [{ name: "regular" }] },
      [removed("c"), removed("regular")],
      "Running",
    ],
    [
      "sidecar container triggered RestartAllContainers kills regular container; sidecar running",
      { initContainers: [sidecarWithRule], containers: [{ name: "regular" }] },
      [running("c"), removed("regular")],
      "Running",
    ],
  ];
  for (const [name, spec, statuses, want] of table) {
    const p = pod({ restartPolicy: "Never", ...spec });
    assert.equal(getPhase(p, statuses, [], false, true), want, name);
  }
});

Deno.test("podIsTerminalPhase is true for Succeeded and Failed only", () => {
  assert.equal(podIsTerminalPhase({ phase: "Succeeded" }), true);
  assert.equal(podIsTerminalPhase({ phase: "Failed" }), true);
  assert.equal(podIsTerminalPhase({ phase: "Running" }), false);
  assert.equal(podIsTerminalPhase(undefined), false);
});

Deno.test("sortPodIPs puts the node's family first and canonicalises as Go", () => {
  assert.deepEqual(sortPodIPs(["fd00:0:0::0a01", "10.1.0.5", "10.1.0.6"], ["192.168.1.10"]), [
    "10.1.0.5",
    "fd00::a01",
  ]);
  assert.deepEqual(sortPodIPs(["10.1.0.5", "FD00::1"], ["fd00::10"]), ["fd00::1", "10.1.0.5"]);
  assert.deepEqual(sortPodIPs(["::ffff:10.1.0.7", "bogus"], []), ["10.1.0.7"]);
});

// --- generateAPIPodStatus ---

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);
const ns = (sec: number) => BigInt(T0 + sec * 1000) * 1_000_000n;
const at = (sec: number) => new Date(T0 + sec * 1000).toISOString().replace(".000Z", "Z");

interface Ctr {
  attempt?: number;
  state: "created" | "running" | "exited" | "unknown";
  created: number;
  exitCode?: number;
  reason?: string;
  message?: string;
}

function cri(name: string, c: Ctr): api.ContainerStatus {
  const attempt = c.attempt ?? 0;
  const state = {
    created: api.ContainerState.CONTAINER_CREATED,
    running: api.ContainerState.CONTAINER_RUNNING,
    exited: api.ContainerState.CONTAINER_EXITED,
    unknown: api.ContainerState.CONTAINER_UNKNOWN,
  }[c.state];
  return api.ContainerStatus.fromPartial({
    id: `${name}-${attempt}`,
    metadata: { name, attempt },
    state,
    createdAt: ns(c.created),
    startedAt: c.state === "created" ? 0n : ns(c.created + 1),
    finishedAt: c.state === "exited" ? ns(c.created + 5) : 0n,
    exitCode: c.exitCode ?? 0,
    reason: c.reason ?? "",
    message: c.message ?? "",
    image: { image: `docker.io/library/${name}:1` },
    imageRef: `sha256:${name}`,
    labels: { [KUBERNETES_CONTAINER_NAME_LABEL]: name },
    annotations: { [CONTAINER_RESTART_COUNT_LABEL]: String(attempt) },
  });
}

function runtime(containers: api.ContainerStatus[], ips = ["10.1.0.5"]): PodStatus {
  return {
    id: "uid-1",
    name: "p",
    namespace: "ns",
    ips,
    sandboxStatuses: [api.PodSandboxStatus.fromPartial({
      id: "sb",
      metadata: { name: "p", uid: "uid-1", namespace: "ns", attempt: 0 },
      state: api.PodSandboxState.SANDBOX_READY,
      createdAt: ns(0),
      network: { ip: ips[0] ?? "", additionalIps: [] },
    })],
    // Newest first, as the pod cache holds them.
    containerStatuses: [...containers].sort((a, b) => Number(b.createdAt - a.createdAt)),
    timestamp: T0,
  };
}

function failures(...f: [container: string, reason: SyncErrorReason, message: string][]) {
  const cache = new ReasonCache();
  const result = new PodSyncResult();
  for (const [container, reason, message] of f) {
    fail(result.add("StartContainer", container), reason, message);
  }
  cache.update("uid-1", result);
  return cache;
}

function generate(p: V1Pod, rt: PodStatus, o: Partial<GenerateStatusOptions> = {}) {
  return generateAPIPodStatus({
    pod: p,
    podStatus: rt,
    podIsTerminal: false,
    reasons: new ReasonCache(),
    hostIPs: ["192.168.1.10"],
    now: new Date(T0 + 100_000),
    ...o,
  });
}

Deno.test("generateAPIPodStatus reports ContainerCreating, then the running container", () => {
  const p = pod({ restartPolicy: "Always" });
  const before = generate(p, runtime([]));
  assert.equal(before.phase, "Pending");
  assert.equal(before.qosClass, "BestEffort");
  assert.equal(before.podIP, "10.1.0.5");
  assert.deepEqual(before.podIPs, [{ ip: "10.1.0.5" }]);
  assert.equal(before.hostIP, "192.168.1.10");
  assert.deepEqual(before.hostIPs, [{ ip: "192.168.1.10" }]);
  assert.deepEqual(before.containerStatuses, [{
    name: "app",
    image: "nginx",
    imageID: "",
    ready: false,
    started: false,
    restartCount: 0,
    state: { waiting: { reason: "ContainerCreating" } },
    lastState: {},
  }]);
  const now = at(100);
  assert.deepEqual(before.conditions, [
    { type: "PodReadyToStartContainers", status: "True", lastTransitionTime: now },
    { type: "Initialized", status: "True", lastTransitionTime: now },
    {
      type: "Ready",
      status: "False",
      reason: "ContainersNotReady",
      message: "containers with unready status: [app]",
      lastTransitionTime: now,
    },
    {
      type: "ContainersReady",
      status: "False",
      reason: "ContainersNotReady",
      message: "containers with unready status: [app]",
      lastTransitionTime: now,
    },
    { type: "PodScheduled", status: "True", lastTransitionTime: now },
  ]);

  const after = generate(
    { ...p, status: before },
    runtime([cri("app", { state: "running", created: 10 })]),
    {
      now: new Date(T0 + 200_000),
    },
  );
  assert.equal(after.phase, "Running");
  assert.deepEqual(after.containerStatuses, [{
    name: "app",
    image: "docker.io/library/app:1",
    imageID: "sha256:app",
    containerID: "containerd://app-0",
    ready: true,
    started: true,
    restartCount: 0,
    state: { running: { startedAt: at(11) } },
    lastState: {},
    resources: {},
  }]);
  const ready = after.conditions?.find((c) => c.type === "Ready");
  assert.deepEqual(ready, { type: "Ready", status: "True", lastTransitionTime: at(200) });
  const scheduled = after.conditions?.find((c) => c.type === "PodScheduled");
  assert.equal(
    String(scheduled?.lastTransitionTime),
    at(100),
    "unchanged conditions keep their time",
  );
});

Deno.test("generateAPIPodStatus shows PodInitializing and completed init containers", () => {
  const p = pod({
    restartPolicy: "Always",
    initContainers: [{ name: "init", image: "busybox" }],
  });
  const initializing = generate(p, runtime([cri("init", { state: "running", created: 1 })]));
  assert.equal(initializing.phase, "Pending");
  assert.deepEqual(initializing.containerStatuses?.[0]?.state, {
    waiting: { reason: "PodInitializing" },
  });
  assert.deepEqual(initializing.initContainerStatuses?.[0]?.state, {
    running: { startedAt: at(2) },
  });
  assert.equal(
    initializing.conditions?.find((c) => c.type === "Initialized")?.message,
    "containers with incomplete status: [init]",
  );

  const done = generate(
    p,
    runtime([
      cri("init", { state: "exited", created: 1, exitCode: 0 }),
      cri("app", { state: "running", created: 10 }),
    ]),
  );
  assert.equal(done.phase, "Running");
  const init = done.initContainerStatuses?.[0];
  assert.equal(init?.ready, true);
  assert.deepEqual(init?.state, {
    terminated: {
      exitCode: 0,
      reason: "Completed",
      startedAt: at(2),
      finishedAt: at(6),
      containerID: "containerd://init-0",
    },
  });
  assert.equal(done.conditions?.find((c) => c.type === "Initialized")?.status, "True");

  // The runtime lost the init container after the app was created: it completed.
  const lost = generate(p, runtime([cri("app", { state: "running", created: 10 })]));
  assert.deepEqual(lost.initContainerStatuses?.[0]?.state, {
    terminated: {
      reason: "Completed",
      message:
        "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally",
      exitCode: 0,
    },
  });
});

Deno.test("generateAPIPodStatus takes waiting reasons from the reason cache", () => {
  const p = pod({ restartPolicy: "Always" });
  const crashMessage = "back-off 10s restarting failed container=app pod=p_ns(uid-1)";
  const crashing = generate(
    p,
    runtime([cri("app", { state: "exited", created: 1, exitCode: 1, reason: "Error" })]),
    { reasons: failures(["app", "CrashLoopBackOff", crashMessage]) },
  );
  const s = crashing.containerStatuses?.[0];
  assert.deepEqual(s?.state, { waiting: { reason: "CrashLoopBackOff", message: crashMessage } });
  assert.deepEqual(s?.lastState, {
    terminated: {
      exitCode: 1,
      reason: "Error",
      startedAt: at(2),
      finishedAt: at(6),
      containerID: "containerd://app-0",
    },
  });
  assert.equal(crashing.phase, "Running", "a container waiting to restart keeps the pod running");

  const pulling = generate(p, runtime([]), {
    reasons: failures(["app", "ErrImagePull", "pull access denied for nginx"]),
  });
  assert.deepEqual(pulling.containerStatuses?.[0]?.state, {
    waiting: { reason: "ErrImagePull", message: "pull access denied for nginx" },
  });
  assert.equal(pulling.phase, "Pending");

  const config = generate(p, runtime([]), {
    reasons: failures(["app", "CreateContainerConfigError", 'secret "s" not found']),
  });
  assert.deepEqual(config.containerStatuses?.[0]?.state, {
    waiting: { reason: "CreateContainerConfigError", message: 'secret "s" not found' },
  });
});

Deno.test("generateAPIPodStatus reports the runtime's terminated reasons and messages", () => {
  const never = pod({ restartPolicy: "Never" });
  const table: [exitCode: number, criReason: string, want: string, phase: string][] = [
    [0, "Completed", "Completed", "Succeeded"],
    [1, "Error", "Error", "Failed"],
    [137, "OOMKilled", "OOMKilled", "Failed"],
    [128, "ContainerCannotRun", "ContainerCannotRun", "Failed"],
    [0, "", "Completed", "Succeeded"],
    [2, "", "Error", "Failed"],
  ];
  for (const [exitCode, reason, want, phase] of table) {
    const s = generate(
      never,
      runtime([cri("app", { state: "exited", created: 1, exitCode, reason, message: "cri" })]),
      // A reason cached for a container that will not restart is not shown.
      { reasons: failures(["app", "CrashLoopBackOff", "x"]) },
    );
    const t = s.containerStatuses?.[0]?.state?.terminated;
    assert.equal(t?.reason, want, `exit ${exitCode} ${reason}`);
    assert.equal(t?.exitCode, exitCode);
    assert.equal(t?.message, "cri");
    assert.equal(s.phase, phase);
    const ready = s.conditions?.find((c) => c.type === "Ready");
    assert.equal(ready?.reason, phase === "Succeeded" ? "PodCompleted" : "PodFailed");
  }
  const withMessage = generate(
    never,
    runtime([cri("app", { state: "exited", created: 1, exitCode: 1, reason: "Error" })]),
    { terminationMessages: new Map([["app-0", "disk full"]]) },
  );
  assert.equal(withMessage.containerStatuses?.[0]?.state?.terminated?.message, "disk full");
});

Deno.test("generateAPIPodStatus keeps lastState and restartCount across instances", () => {
  const p = pod({ restartPolicy: "Always" });
  const restarted = generate(
    p,
    runtime([
      cri("app", { state: "exited", created: 1, exitCode: 1, reason: "Error", attempt: 0 }),
      cri("app", { state: "running", created: 20, attempt: 1 }),
    ]),
  );
  const s = restarted.containerStatuses?.[0];
  assert.equal(s?.restartCount, 1, "from the newest container's restart count annotation");
  assert.equal(s?.containerID, "containerd://app-1");
  assert.deepEqual(s?.lastState?.terminated?.containerID, "containerd://app-0");
  assert.equal(s?.lastState?.terminated?.reason, "Error");

  // The runtime lost a container that was running: it terminated, and restarted.
  const oldRunning: V1ContainerStatus = {
    name: "app",
    image: "nginx",
    imageID: "sha256:app",
    containerID: "containerd://app-2",
    ready: true,
    restartCount: 2,
    state: { running: { startedAt: at(30) as unknown as Date } },
  };
  const vanished = generate({ ...p, status: { containerStatuses: [oldRunning] } }, runtime([]));
  const v = vanished.containerStatuses?.[0];
  assert.deepEqual(v?.state, { waiting: { reason: "ContainerCreating" } });
  assert.deepEqual(v?.lastState, {
    terminated: {
      reason: "ContainerStatusUnknown",
      message:
        "The container could not be located when the pod was deleted.  The container used to be Running",
      exitCode: 137,
    },
  });
  assert.equal(v?.restartCount, 3);
  assert.equal(vanished.phase, "Running");

  // A container in unknown state that was running is reported terminated.
  const unknown = generate(
    { ...p, status: { containerStatuses: [oldRunning] } },
    runtime([cri("app", { state: "unknown", created: 40, attempt: 2 })]),
  );
  assert.deepEqual(unknown.containerStatuses?.[0]?.state, {
    terminated: {
      reason: "ContainerStatusUnknown",
      message: "The container could not be located when the pod was terminated",
      exitCode: 137,
    },
  });
  assert.equal(unknown.containerStatuses?.[0]?.restartCount, 3);

  // An old terminated status stays when the runtime no longer has the container.
  const oldTerminated: V1ContainerStatus = {
    ...oldRunning,
    ready: false,
    state: { terminated: { exitCode: 0, reason: "Completed" } },
  };
  const gone = generate(
    { ...pod({ restartPolicy: "Never" }), status: { containerStatuses: [oldTerminated] } },
    runtime([]),
  );
  assert.deepEqual(gone.containerStatuses?.[0]?.state, oldTerminated.state);
  assert.equal(gone.containerStatuses?.[0]?.restartCount, 2);
  assert.equal(gone.phase, "Succeeded");
});

Deno.test("generateAPIPodStatus never leaves a terminal phase and keeps its reason", () => {
  const p = pod({ restartPolicy: "Always" }, {
    status: { phase: "Failed", reason: "Evicted", message: "The node was low on memory." },
  });
  const s = generate(p, runtime([cri("app", { state: "running", created: 1 })]));
  assert.equal(s.phase, "Failed");
  assert.equal(s.reason, "Evicted");
  assert.equal(s.message, "The node was low on memory.");
});

Deno.test("generateAPIPodStatus gives host-network pods the node's IPs", () => {
  const p = pod({ hostNetwork: true });
  const s = generate(p, runtime([], []), { hostIPs: ["192.168.1.10", "fd00::10"] });
  assert.equal(s.podIP, "192.168.1.10");
  assert.deepEqual(s.podIPs, [{ ip: "192.168.1.10" }, { ip: "fd00::10" }]);
  assert.deepEqual(s.hostIPs, [{ ip: "192.168.1.10" }, { ip: "fd00::10" }]);
  const standalone = generate(pod({}), runtime([]), { hostIPs: [] });
  assert.equal(standalone.hostIP, undefined);
});

Deno.test("generateAPIPodStatus applies probe results, and no readiness when terminal", () => {
  const p = pod({
    restartPolicy: "Always",
    containers: [
      { name: "a", readinessProbe: { exec: { command: ["true"] } } },
      { name: "b", startupProbe: { exec: { command: ["true"] } } },
    ],
  });
  const rt = runtime([
    cri("a", { state: "running", created: 1 }),
    cri("b", { state: "running", created: 2 }),
  ]);
  const results = new Map<string, boolean>();
  const probes = {
    ready: (id: string) => results.get(`ready/${id}`),
    started: (id: string) => results.get(`started/${id}`),
    startedBeforeKubelet: () => false,
  };
  const byName = (s: ReturnType<typeof generate>, name: string) =>
    s.containerStatuses?.find((c) => c.name === name);

  let s = generate(p, rt, { probes });
  assert.deepEqual([byName(s, "a")?.started, byName(s, "a")?.ready], [true, false]);
  assert.deepEqual([byName(s, "b")?.started, byName(s, "b")?.ready], [false, false]);

  results.set("ready/a-0", true);
  results.set("started/b-0", true);
  s = generate(p, rt, { probes });
  assert.deepEqual([byName(s, "a")?.ready, byName(s, "b")?.ready], [true, true]);
  assert.equal(s.conditions?.find((c) => c.type === "Ready")?.status, "True");

  s = generate(p, rt, { probes, podIsTerminal: true });
  assert.equal(byName(s, "a")?.ready, false);
});

Deno.test("generateAPIPodStatus keeps the readiness of containers that ran before a kubelet restart until probed", () => {
  // Upstream setReadyStateOnKubeletRestart: a container with a readiness probe that started
  // before this kubelet is ready while its pod was Ready and no probe result is cached.
  const spec = {
    restartPolicy: "Always",
    containers: [
      { name: "probed", readinessProbe: { exec: { command: ["true"] } } },
      { name: "plain" },
    ],
  };
  const rt = runtime([
    cri("probed", { state: "running", created: 1 }),
    cri("plain", { state: "running", created: 2 }),
  ]);
  const results = new Map<string, boolean>();
  let before = true;
  const probes = {
    ready: (id: string) => results.get(id),
    started: () => undefined,
    startedBeforeKubelet: (ms: number) => before && ms > 0,
  };
  const readyOf = (s: ReturnType<typeof generate>) =>
    s.containerStatuses?.map((c) => `${c.name}=${c.ready}`).sort();
  const wasReady = pod(spec);
  wasReady.status = { conditions: [{ type: "Ready", status: "True" }] };
  assert.deepEqual(readyOf(generate(wasReady, rt, { probes })), ["plain=true", "probed=true"]);
  // The pod was not Ready before the restart: the probed container waits for its probe.
  const notReady = pod(spec);
  notReady.status = { conditions: [{ type: "Ready", status: "False" }] };
  assert.deepEqual(readyOf(generate(notReady, rt, { probes })), ["plain=true", "probed=false"]);
  // A cached failure wins once the probe has run.
  results.set("probed-0", false);
  assert.deepEqual(readyOf(generate(wasReady, rt, { probes })), ["plain=true", "probed=false"]);
  // A container this kubelet started waits for its probe, as before.
  results.clear();
  before = false;
  assert.deepEqual(readyOf(generate(wasReady, rt, { probes })), ["plain=true", "probed=false"]);
});

Deno.test("generateAPIPodStatus keeps a running container's started across a kubelet restart until its startup probe has a result", () => {
  // Upstream copies the old status' Started onto a running container and isContainerStarted
  // falls back to it when the startup probe has no result.
  const spec = {
    restartPolicy: "Always",
    containers: [{ name: "slow", startupProbe: { exec: { command: ["true"] } } }],
  };
  const rt = runtime([cri("slow", { state: "running", created: 1 })]);
  const results = new Map<string, boolean>();
  const probes = {
    ready: () => undefined,
    started: (id: string) => results.get(id),
    startedBeforeKubelet: () => true,
  };
  const startedOf = (p: ReturnType<typeof pod>) =>
    generate(p, rt, { probes }).containerStatuses?.[0]?.started;
  const before = pod(spec);
  before.status = { containerStatuses: [{ name: "slow", started: true } as V1ContainerStatus] };
  assert.equal(startedOf(before), true);
  // Never started before: it waits for its startup probe.
  assert.equal(startedOf(pod(spec)), false);
  // The probe's own result wins once there is one.
  results.set("slow-0", false);
  assert.equal(startedOf(before), false);
});

Deno.test("generateAPIPodStatus sets observedGeneration and volume mount statuses", () => {
  const p = pod({
    containers: [{
      name: "app",
      image: "nginx",
      volumeMounts: [{ name: "cfg", mountPath: "/etc/cfg", readOnly: true }, {
        name: "data",
        mountPath: "/data",
      }],
    }],
  }, { metadata: { name: "p", namespace: "ns", uid: "uid-1", generation: 4 } });
  const s = generate(p, runtime([]));
  for (const c of s.conditions ?? []) assert.equal(c.observedGeneration, 4, c.type);
  assert.deepEqual(s.containerStatuses?.[0]?.volumeMounts, [
    { name: "cfg", mountPath: "/etc/cfg", readOnly: true, recursiveReadOnly: "Disabled" },
    { name: "data", mountPath: "/data" },
  ]);
});

Deno.test("generateAPIPodStatus: a read-only mount is recursively read-only where the handler can", () => {
  const p = pod({
    containers: [{
      name: "app",
      image: "nginx",
      volumeMounts: [
        { name: "a", mountPath: "/a", readOnly: true, recursiveReadOnly: "IfPossible" },
        { name: "b", mountPath: "/b", readOnly: true, recursiveReadOnly: "Enabled" },
        { name: "c", mountPath: "/c", readOnly: true },
      ],
    }],
  });
  const modes = (o: Partial<GenerateStatusOptions>) =>
    generate(p, runtime([]), o).containerStatuses?.[0]?.volumeMounts?.map((m) =>
      m.recursiveReadOnly
    );
  assert.deepEqual(modes({ supportsRecursiveReadOnly: true }), ["Enabled", "Enabled", "Disabled"]);
  // Enabled on a handler without support: the container cannot start; its status says Disabled
  // and the error is logged, as upstream's.
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  assert.deepEqual(modes({ supportsRecursiveReadOnly: false, logger }), [
    "Disabled",
    "Disabled",
    "Disabled",
  ]);
  assert.equal(lines.length, 1);
  assert.match(
    lines[0]!,
    /"failed to resolve recursive read-only mode" err="volume \\"b\\" requested recursive read-only mode, but it is not supported by the runtime" mode="Enabled"/,
  );
});

Deno.test("generateAPIPodStatus reports the resources a running container has, and what is allocated", () => {
  const p = pod({
    containers: [{
      name: "web",
      image: "web:1",
      resources: {
        requests: { cpu: "25m", memory: "40Mi" },
        limits: { cpu: "35m", memory: "50Mi" },
      },
    }, {
      name: "tiny",
      image: "tiny:1",
      resources: { requests: { cpu: "1m" }, limits: { cpu: "5m" } },
    }],
  });
  p.metadata!.uid = "uid-1";
  const web = cri("web", { state: "running", created: 1 });
  // The runtime still runs web at its old size: status.resources says so.
  web.resources = api.ContainerResources.fromPartial({
    linux: { cpuShares: 20n, cpuQuota: 3000n, cpuPeriod: 100_000n, memoryLimitInBytes: 47185920n },
  });
  const tiny = cri("tiny", { state: "running", created: 1 });
  // 1m and 2m both give the kernel's minimum shares, 5m and 10m its minimum quota.
  tiny.resources = api.ContainerResources.fromPartial({
    linux: { cpuShares: 2n, cpuQuota: 1000n, cpuPeriod: 100_000n },
  });
  const actuated = (_uid: string, name: string) =>
    name === "web" ? { requests: { cpu: "20m", memory: "35Mi" } } : undefined;
  const s = generate(p, runtime([web, tiny]), { actuated });
  const byName = new Map(s.containerStatuses!.map((c) => [c.name, c]));
  assert.deepEqual(byName.get("web")?.resources, {
    requests: { cpu: "20m", memory: "35Mi" },
    limits: { cpu: "30m", memory: "45Mi" },
  });
  assert.deepEqual(byName.get("web")?.allocatedResources, { cpu: "25m", memory: "40Mi" });
  assert.deepEqual(byName.get("tiny")?.resources, {
    requests: { cpu: "1m" },
    limits: { cpu: "5m" },
  });
  // A container that does not run shows its allocation.
  const exitedWeb = cri("web", { state: "exited", created: 1 });
  exitedWeb.resources = web.resources;
  const s2 = generate(p, runtime([exitedWeb]), { actuated });
  assert.deepEqual(
    s2.containerStatuses!.find((c) => c.name === "web")?.resources,
    p.spec!.containers[0]!.resources,
  );
});

Deno.test("generateAPIPodStatus carries the resize conditions until the pod is terminal", () => {
  const p = pod({ containers: [{ name: "web", image: "web:1" }] });
  const pending = {
    type: "PodResizePending",
    status: "True",
    reason: "Deferred",
    message: "Node didn't have enough resource: cpu",
    lastTransitionTime: at(50) as unknown as Date,
  };
  const s = generate(p, runtime([cri("web", { state: "running", created: 1 })]), {
    resizeConditions: [pending],
  });
  assert.deepEqual(s.conditions?.find((c) => c.type === "PodResizePending"), pending);
  const t = generate(p, runtime([cri("web", { state: "exited", created: 1 })]), {
    resizeConditions: [pending],
    podIsTerminal: true,
  });
  assert.equal(t.conditions?.some((c) => c.type === "PodResizePending"), false);
});

Deno.test("generateAPIPodStatus reports a RestartAllContainers restart in place as upstream", () => {
  const p = pod({
    restartPolicy: "Never",
    containers: [
      {
        name: "app",
        image: "app:1",
        restartPolicy: "Never",
        restartPolicyRules: [{
          action: "RestartAllContainers",
          exitCodes: { operator: "In", values: [42] },
        }],
      },
      { name: "side", image: "side:1" },
    ],
  });
  const restarting = (s: ReturnType<typeof generate>) =>
    s.conditions?.find((c) => c.type === "AllContainersRestarting");
  const byName = (s: ReturnType<typeof generate>, name: string) =>
    s.containerStatuses?.find((c) => c.name === name);

  const before = generate(
    p,
    runtime([
      cri("app", { state: "running", created: 1 }),
      cri("side", { state: "running", created: 1 }),
    ]),
  );
  assert.deepEqual(restarting(before), {
    type: "AllContainersRestarting",
    status: "False",
    lastTransitionTime: at(100),
  });

  // app exits 42: the action starts, the pod stays Running.
  const exited42 = generate(
    { ...p, status: before },
    runtime([
      cri("app", { state: "exited", created: 1, exitCode: 42, reason: "Error" }),
      cri("side", { state: "running", created: 1 }),
    ]),
    { now: new Date(T0 + 110_000) },
  );
  assert.equal(exited42.phase, "Running");
  assert.deepEqual(restarting(exited42), {
    type: "AllContainersRestarting",
    status: "True",
    reason: "RestartAllContainersStarted",
    message: "container exited with restart policy rule",
    lastTransitionTime: at(110),
  });
  assert.equal(byName(exited42, "app")?.state?.terminated?.exitCode, 42);

  // Every container removed: they wait to run again, each counted as restarted once.
  const removed = generate({ ...p, status: exited42 }, runtime([]), {
    now: new Date(T0 + 120_000),
  });
  const gone = {
    reason: "RestartingAllContainers",
    message: "The container is removed because RestartAllContainers in place",
  };
  for (const name of ["app", "side"]) {
    const s = byName(removed, name);
    assert.deepEqual(s?.state, { waiting: gone }, name);
    assert.deepEqual(s?.lastState, { terminated: { ...gone, exitCode: 137 } }, name);
    assert.equal(s?.restartCount, 1, name);
  }
  assert.equal(removed.phase, "Running");
  assert.deepEqual(restarting(removed), {
    type: "AllContainersRestarting",
    status: "False",
    lastTransitionTime: at(120),
  });
  assert.equal(removed.conditions?.find((c) => c.type === "Initialized")?.status, "True");

  // Started again (restart count 1 from the kept logs): the last state is carried over.
  const again = generate(
    { ...p, status: removed },
    runtime([
      cri("app", { state: "running", created: 30, attempt: 1 }),
      cri("side", { state: "running", created: 30, attempt: 1 }),
    ]),
    { now: new Date(T0 + 130_000) },
  );
  assert.equal(again.phase, "Running");
  for (const name of ["app", "side"]) {
    const s = byName(again, name);
    assert.equal(s?.restartCount, 1, name);
    assert.deepEqual(s?.state, { running: { startedAt: at(31) } }, name);
    assert.deepEqual(s?.lastState, { terminated: { ...gone, exitCode: 137 } }, name);
  }
  assert.equal(restarting(again)?.status, "False");
});

Deno.test("generateAPIPodStatus keeps a container with restart rules Running after a matching exit, Failed after another", () => {
  const p = pod({
    restartPolicy: "Never",
    containers: [{
      name: "app",
      image: "app:1",
      restartPolicy: "Never",
      restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "In", values: [42] } }],
    }],
  });
  const s42 = generate(p, runtime([cri("app", { state: "exited", created: 1, exitCode: 42 })]));
  assert.equal(s42.phase, "Running");
  assert.equal(
    s42.conditions?.some((c) => c.type === "AllContainersRestarting"),
    false,
    "only pods with a RestartAllContainers rule carry the condition",
  );
  const s1 = generate(p, runtime([cri("app", { state: "exited", created: 1, exitCode: 1 })]));
  assert.equal(s1.phase, "Failed");
});

Deno.test("generateAPIPodStatus reports pod-level resources as allocated, then as the pod cgroup runs them", () => {
  // Resized from 200m / 64Mi limits: allocated, not actuated yet.
  const p = pod({
    containers: [{ name: "app", image: "app:1" }],
    resources: {
      requests: { cpu: "200m", memory: "64Mi" },
      limits: { cpu: "400m", memory: "128Mi" },
    },
  });
  const rt = runtime([cri("app", { state: "running", created: 1 })]);
  // Not Running yet (the last status says Pending): as allocated.
  const first = generate({ ...p, status: { phase: "Pending" } }, rt);
  assert.deepEqual(first.resources, p.spec!.resources);
  assert.deepEqual(first.allocatedResources, { cpu: "200m", memory: "64Mi" });
  // Running: what the pod cgroup runs with (the old limits), the memory request as allocated.
  const oldCgroup = {
    cpu: { cpuShares: 204n, cpuQuota: 20_000n, cpuPeriod: 100_000n },
    memory: { memory: 64n * 2n ** 20n },
  };
  const second = generate({ ...p, status: first }, rt, { podCgroup: oldCgroup });
  assert.deepEqual(second.resources, {
    requests: { cpu: "200m", memory: "64Mi" },
    limits: { cpu: "200m", memory: "64Mi" },
  });
  // Actuated: the new limits.
  const newCgroup = {
    cpu: { cpuShares: 204n, cpuQuota: 40_000n, cpuPeriod: 100_000n },
    memory: { memory: 128n * 2n ** 20n },
  };
  const third = generate({ ...p, status: second }, rt, { podCgroup: newCgroup });
  assert.deepEqual(third.resources, p.spec!.resources);
  assert.deepEqual(third.allocatedResources, { cpu: "200m", memory: "64Mi" });
  // Not read (no pod cgroups, or a failed read): the last status's values stay.
  const fourth = generate({ ...p, status: second }, rt);
  assert.deepEqual(fourth.resources, second.resources);
});

Deno.test("generateAPIPodStatus sums containers into the pod-level status as Go formats quantities", () => {
  const p = pod({
    containers: [
      { name: "a", image: "a:1", resources: { requests: { cpu: "100m", memory: "64Mi" } } },
      {
        name: "b",
        image: "b:1",
        resources: { requests: { cpu: "900m", memory: "32Mi" }, limits: { memory: "100M" } },
      },
    ],
  });
  const rt = runtime([
    cri("a", { state: "running", created: 1 }),
    cri("b", { state: "running", created: 1 }),
  ]);
  const s = generate({ ...p, status: { phase: "Pending" } }, rt);
  assert.equal(s.phase, "Running");
  assert.deepEqual(s.allocatedResources, { cpu: "1", memory: "96Mi" });
  assert.deepEqual(s.resources, {
    requests: { cpu: "1", memory: "96Mi" },
    limits: { memory: "100M" },
  });
  // Running without a pod memory limit: cgroup v1's "unlimited" is reported, as upstream.
  const running = generate({ ...p, status: s }, rt, {
    podCgroup: {
      cpu: { cpuShares: 1024n, cpuQuota: -1n, cpuPeriod: 100_000n },
      memory: { memory: 9223372036854771712n },
    },
  });
  assert.deepEqual(running.resources, {
    requests: { cpu: "1", memory: "96Mi" },
    limits: { memory: "9007199254740988Ki" },
  });
});

Deno.test("generateAPIPodStatus puts the devices' health in each regular container's allocatedResourcesStatus", () => {
  const p = pod({
    restartPolicy: "Always",
    initContainers: [{ name: "init", image: "busybox" }],
    containers: [{ name: "app", image: "nginx" }, { name: "plain", image: "nginx" }],
  });
  const asked: string[] = [];
  const s = generate(
    p,
    runtime([
      cri("init", { state: "exited", created: 1 }),
      cri("app", { state: "running", created: 2 }),
    ]),
    {
      allocatedResourcesStatus: (pd, name) => {
        asked.push(`${pd.metadata?.uid}/${name}`);
        return name === "plain" ? [] : [{
          name: "example.com/gpu",
          resources: [{ resourceID: "dev-1", health: "Unhealthy" }],
        }];
      },
    },
  );
  // Regular containers only, as upstream's UpdateAllocatedResourcesStatus.
  assert.deepEqual(asked.sort(), ["uid-1/app", "uid-1/plain"]);
  const byName = new Map((s.containerStatuses ?? []).map((c) => [c.name, c]));
  assert.deepEqual(byName.get("app")?.allocatedResourcesStatus, [
    { name: "example.com/gpu", resources: [{ resourceID: "dev-1", health: "Unhealthy" }] },
  ]);
  assert.equal("allocatedResourcesStatus" in byName.get("plain")!, false);
  assert.equal("allocatedResourcesStatus" in (s.initContainerStatuses ?? [])[0]!, false);
});
