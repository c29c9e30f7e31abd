/**
 * A fixed subset of upstream's [Conformance] specs through `deno task conformance`'s harness
 * (tests/conformance.ts), in the suite CI runs: one or two specs of each kubelet-facing test file
 * the full focus touches (pods, ephemeral containers, logs and exec over WebSocket, the active
 * deadline, init containers, the container runtime, env and variable expansion, configMap,
 * secret, projected, downward API and emptyDir volumes, security context, lifecycle hooks). The
 * whole focus (about 16 minutes here) is recorded per change in tests/results/. Every spec of
 * the subset must pass.
 */

import assert from "node:assert/strict";
import { DEFAULT_SKIP, runConformance } from "./conformance.ts";
import { requireRoot } from "./requirements.ts";
import { runtimeFromEnv } from "./containerd_harness.ts";

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
];

Deno.test({
  name: "conformance: a fixed subset of upstream's [Conformance] specs passes on this kubelet",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "conformance-subset-" });
    try {
      const out = `${dir}/results.md`;
      const r = await runConformance({
        agent: "agent",
        runtime: runtimeFromEnv(),
        focus: `\\[sig-(node|storage)\\] (${SUBSET.join("|")})`,
        skip: DEFAULT_SKIP,
        procs: 2,
        out,
        keep: false,
        help: false,
      }, AbortSignal.timeout(40 * 60_000));
      const text = await Deno.readTextFile(out);
      assert.equal(r.failed, 0, text);
      assert.equal(r.passed, SUBSET.length, text);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
