import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { runtimePodStatus, sandboxStatus } from "../testing/pod_status_fixtures.ts";
import { podSandboxChanged } from "./sandbox_changed.ts";

function pod(spec: Partial<NonNullable<V1Pod["spec"]>> = {}): V1Pod {
  return {
    metadata: { name: "p", namespace: "ns", uid: "uid-1" },
    spec: { containers: [{ name: "a" }], ...spec },
  };
}

Deno.test("podSandboxChanged asks for a new sandbox as upstream PodSandboxChanged", () => {
  const READY = api.PodSandboxState.SANDBOX_READY;
  const NOT_READY = api.PodSandboxState.SANDBOX_NOTREADY;
  assert.deepEqual(podSandboxChanged(pod(), runtimePodStatus([])), {
    changed: true,
    attempt: 0,
    sandboxId: "",
  });
  assert.deepEqual(
    podSandboxChanged(pod(), runtimePodStatus([sandboxStatus(READY, "10.0.0.5", 2)])),
    {
      changed: false,
      attempt: 2,
      sandboxId: "sb-2",
    },
  );
  assert.deepEqual(
    podSandboxChanged(pod(), runtimePodStatus([sandboxStatus(NOT_READY, "10.0.0.5", 2)])),
    {
      changed: true,
      attempt: 3,
      sandboxId: "sb-2",
    },
  );
  assert.equal(
    podSandboxChanged(
      pod(),
      runtimePodStatus([sandboxStatus(READY, "", 1), sandboxStatus(READY, "", 0)]),
    ).changed,
    true,
    "two ready sandboxes",
  );
  assert.equal(
    podSandboxChanged(pod(), runtimePodStatus([sandboxStatus(READY, "")])).changed,
    true,
    "no IP",
  );
  // A host-network pod needs a sandbox in the node's network namespace, and no IP.
  const hostNet = pod({ hostNetwork: true });
  const podNs = sandboxStatus(READY, "");
  assert.equal(podSandboxChanged(hostNet, runtimePodStatus([podNs])).changed, true);
  podNs.linux = {
    namespaces: {
      options: api.NamespaceOption.fromPartial({ network: api.NamespaceMode.NODE }),
    },
  };
  assert.equal(podSandboxChanged(hostNet, runtimePodStatus([podNs])).changed, false);
});

Deno.test("podSandboxChanged counts the new attempt from the newest sandbox", () => {
  // SyncPod's copy took the highest attempt of any sandbox (4 here), the status code's the
  // newest's (2), as upstream does.
  const NOT_READY = api.PodSandboxState.SANDBOX_NOTREADY;
  const newest = sandboxStatus(NOT_READY, "10.0.0.5", 1);
  const older = sandboxStatus(NOT_READY, "10.0.0.4", 3);
  assert.deepEqual(podSandboxChanged(pod(), runtimePodStatus([newest, older])), {
    changed: true,
    attempt: 2,
    sandboxId: "sb-1",
  });
});
