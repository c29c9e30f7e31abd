import assert from "node:assert/strict";
import type { V1Container, V1ContainerRestartRule, V1PodSpec } from "@kubernetes/client-node";
import {
  allContainersCouldRestart,
  containerShouldRestart,
  findMatchingContainerRestartRule,
  getContainerStatus,
  isRestartableInitContainer,
} from "./podutil.ts";

Deno.test("isRestartableInitContainer is true for restartPolicy Always alone", () => {
  // One definition for what the status code, the resource arithmetic and the termination order
  // each used to decide with a copy of their own.
  assert.equal(isRestartableInitContainer({ restartPolicy: "Always" }), true);
  for (const restartPolicy of [undefined, "", "Never", "OnFailure", "always"]) {
    assert.equal(isRestartableInitContainer({ restartPolicy }), false, String(restartPolicy));
  }
  assert.equal(isRestartableInitContainer({}), false);
});

Deno.test("getContainerStatus finds the named status or none", () => {
  const statuses = [
    { name: "a", ready: true, restartCount: 0, image: "i", imageID: "" },
    { name: "b", ready: false, restartCount: 2, image: "i", imageID: "" },
  ];
  assert.equal(getContainerStatus(statuses, "b")?.restartCount, 2);
  assert.equal(getContainerStatus(statuses, "c"), undefined);
  assert.equal(getContainerStatus(undefined, "a"), undefined);
});

// Upstream TestFindMatchingContainerRestartRule, re-expressed.
const ruleIn: V1ContainerRestartRule = {
  action: "Restart",
  exitCodes: { operator: "In", values: [42, 50, 60] },
};
const ruleNotIn: V1ContainerRestartRule = {
  action: "Restart",
  exitCodes: { operator: "NotIn", values: [0, 1, 2] },
};
const ruleIn42: V1ContainerRestartRule = {
  action: "Restart",
  exitCodes: { operator: "In", values: [42] },
};

Deno.test("findMatchingContainerRestartRule returns the first rule whose exit codes match", () => {
  const table: [string, V1ContainerRestartRule[] | undefined, number, V1ContainerRestartRule?][] = [
    ["a rule with op In matches", [ruleIn], 42, ruleIn],
    ["a rule with op NotIn matches", [ruleNotIn], 99, ruleNotIn],
    ["matches the first rule if two rules both matched", [ruleIn, ruleIn42], 42, ruleIn],
    ["no rules matched", [ruleIn], 100, undefined],
    ["no rules defined", undefined, 0, undefined],
    ["NotIn does not match a listed code", [ruleNotIn], 1, undefined],
    ["a rule without exit codes never matches", [{ action: "Restart" }], 1, undefined],
  ];
  for (const [name, restartPolicyRules, exitCode, want] of table) {
    assert.equal(findMatchingContainerRestartRule({ restartPolicyRules }, exitCode), want, name);
  }
});

Deno.test("containerShouldRestart checks rules, then the container's, then the pod's policy", () => {
  const c = (o: Partial<V1Container>): V1Container => ({ name: "c", ...o });
  const spec = (restartPolicy?: string): V1PodSpec => ({ containers: [], restartPolicy });
  const table: [string, V1Container, V1PodSpec, number, boolean][] = [
    ["pod default is Always", c({}), spec(), 0, true],
    ["pod Always", c({}), spec("Always"), 0, true],
    ["pod OnFailure, success", c({}), spec("OnFailure"), 0, false],
    ["pod OnFailure, failure", c({}), spec("OnFailure"), 3, true],
    ["pod Never", c({}), spec("Never"), 3, false],
    [
      "container OnFailure overrides pod Never",
      c({ restartPolicy: "OnFailure" }),
      spec("Never"),
      3,
      true,
    ],
    ["container OnFailure, success", c({ restartPolicy: "OnFailure" }), spec("Always"), 0, false],
    [
      "container Never overrides pod Always",
      c({ restartPolicy: "Never" }),
      spec("Always"),
      1,
      false,
    ],
    [
      "container Always overrides pod Never",
      c({ restartPolicy: "Always" }),
      spec("Never"),
      0,
      true,
    ],
    [
      "a Restart rule that matches restarts",
      c({ restartPolicy: "Never", restartPolicyRules: [ruleIn42] }),
      spec("Never"),
      42,
      true,
    ],
    [
      "no rule matches: the container's policy decides",
      c({ restartPolicy: "Never", restartPolicyRules: [ruleIn42] }),
      spec("Always"),
      1,
      false,
    ],
    [
      "a RestartAllContainers rule that matches restarts (the gate is on in v1.36)",
      c({
        restartPolicy: "Never",
        restartPolicyRules: [{
          action: "RestartAllContainers",
          exitCodes: { operator: "In", values: [7] },
        }],
      }),
      spec("Never"),
      7,
      true,
    ],
    [
      "rules are ignored without a container restartPolicy",
      c({ restartPolicyRules: [ruleIn42] }),
      spec("Never"),
      42,
      false,
    ],
    [
      "NotIn 0 restarts on any failure",
      c({
        restartPolicy: "Never",
        restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "NotIn", values: [0] } }],
      }),
      spec("Never"),
      3,
      true,
    ],
  ];
  for (const [name, container, podSpec, exitCode, want] of table) {
    assert.equal(containerShouldRestart(container, podSpec, exitCode), want, name);
  }
});

// Upstream TestAllContainersCouldRestart, re-expressed.
Deno.test("allContainersCouldRestart is true when any init or regular container has a RestartAllContainers rule", () => {
  const rule: V1ContainerRestartRule = {
    action: "RestartAllContainers",
    exitCodes: { operator: "In", values: [42] },
  };
  const withRule = (restartPolicy: string): V1Container => ({
    name: "c",
    restartPolicy,
    restartPolicyRules: [rule],
  });
  assert.equal(
    allContainersCouldRestart({ containers: [], initContainers: [withRule("Never")] }),
    true,
    "init",
  );
  assert.equal(
    allContainersCouldRestart({ containers: [], initContainers: [withRule("Always")] }),
    true,
    "sidecar",
  );
  assert.equal(allContainersCouldRestart({ containers: [withRule("Never")] }), true, "regular");
  assert.equal(allContainersCouldRestart({ containers: [{ name: "c" }] }), false, "no rules");
  assert.equal(
    allContainersCouldRestart({
      containers: [{ name: "c", restartPolicy: "Never", restartPolicyRules: [ruleIn42] }],
    }),
    false,
    "Restart rules only",
  );
  assert.equal(allContainersCouldRestart(undefined), false);
});
