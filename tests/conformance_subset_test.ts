/**
 * A fixed subset of upstream's [Conformance] specs through `deno task conformance`'s harness
 * (tests/conformance.ts), in the suite CI runs: one or two specs of each kubelet-facing test file
 * the full focus touches (pods, ephemeral containers, logs and exec over WebSocket, the active
 * deadline, init containers, the container runtime, env and variable expansion, configMap,
 * secret, projected, downward API and emptyDir volumes, security context, lifecycle hooks,
 * in-place resize), and a second subset on containerd 2.x (image volumes among them). The
 * whole focus (about 16 minutes here) is recorded per change in tests/results/. Every spec of
 * the subset must pass.
 */

import assert from "node:assert/strict";
import { DEFAULT_SKIP, runConformance } from "./conformance.ts";
import { requireRoot } from "./requirements.ts";
import { runtimeFromEnv, type RuntimeKind } from "./containerd_harness.ts";

const gate = await requireRoot("conformance subset", [
  "containerd",
  "ctr",
  "runc",
  "go",
  "openssl",
]);

/** Spec texts (regular-expression quoted) the subset runs; each must match exactly one spec. */
export const SUBSET = [
  "Pods should get a host IP",
  "Pods should support retrieving logs from the container over websockets",
  "Pods should support remote command execution over websockets",
  "Pods should allow activeDeadlineSeconds to be updated",
  "Ephemeral Containers \\[NodeConformance\\] will start an ephemeral container in an existing pod",
  "Kubelet when scheduling a busybox command in a pod should print the output to logs",
  "InitContainer \\[NodeConformance\\] should invoke init containers on a RestartAlways pod",
  "Downward API should provide pod UID as env vars",
  "Variable Expansion should allow composing env vars into new env vars",
  "ConfigMap should be consumable from pods in volume \\[NodeConformance\\]",
  "Secrets should be consumable from pods in volume \\[NodeConformance\\]",
  "Projected combined should project all components that make up the projection API",
  "EmptyDir volumes should support \\(root,0777,tmpfs\\)",
  "Downward API volume should provide container's memory limit",
  "Security Context when creating containers with AllowPrivilegeEscalation should not allow " +
  "privilege escalation when false",
  "Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly",
  "Pod InPlace Resize Container burstable pods - extended resize with equivalents",
  "Pod InPlace Resize Container guaranteed pods with multiple containers 3 containers - " +
  "increase cpu & mem on c1, c2, decrease cpu & mem on c3 - net increase",
];

/**
 * The subset run on containerd 2.x (built from its module, tests/runtime_build.ts): what needs
 * it (image volumes), in-place resize through the replace endpoint, and the specs whose runtime
 * calls differ most between the two versions (logs, exec, the sandbox's host IP).
 */
export const SUBSET_CONTAINERD2 = [
  "ImageVolume should succeed with pod and pull policy of Always",
  "Pod InPlace Resize Container resize pod via the replace endpoint",
  "Pods should get a host IP",
  "Pods should support retrieving logs from the container over websockets",
  "Pods should support remote command execution over websockets",
  "Ephemeral Containers \\[NodeConformance\\] will start an ephemeral container in an existing pod",
];

async function runSubset(runtime: RuntimeKind, subset: readonly string[]): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "conformance-subset-" });
  try {
    const out = `${dir}/results.md`;
    const r = await runConformance({
      agent: "agent",
      topology: "node",
      runtime,
      focus: `\\[sig-(node|storage)\\] (${subset.join("|")})`,
      skip: DEFAULT_SKIP,
      procs: 2,
      out,
      keep: false,
      help: false,
    }, AbortSignal.timeout(40 * 60_000));
    const text = await Deno.readTextFile(out);
    assert.equal(r.failed, 0, text);
    assert.equal(r.passed, subset.length, text);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test({
  name: "conformance: a fixed subset of upstream's [Conformance] specs passes on this kubelet",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    gate.check();
    await runSubset(runtimeFromEnv(), SUBSET);
  },
});

Deno.test({
  name:
    "conformance: the containerd 2.x subset (image volumes, resize, logs, exec) passes on this kubelet",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    gate.check();
    await runSubset("containerd2", SUBSET_CONTAINERD2);
  },
});
