/**
 * @module
 * deepCopy against structuredClone on a running pod as the apiserver returns it (the copies the
 * status manager and the pod config make on every update). `deno task bench:micro`.
 */

import { deepCopy } from "../util/deep_copy.ts";

const pod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: {
    name: "web-0",
    namespace: "default",
    uid: "0b9d4e3c-6f0e-4d55-9a47-5c2d9f1e8a10",
    resourceVersion: "12345",
    creationTimestamp: "2026-12-05T12:00:00Z",
    labels: { app: "web", "pod-template-hash": "5d8f7c9b4" },
    managedFields: [{ manager: "kubelet", operation: "Update", fieldsV1: { "f:status": {} } }],
  },
  spec: {
    nodeName: "node-a",
    containers: [{
      name: "main",
      image: "docker.io/library/busybox:1.36",
      command: ["sh", "-c", "sleep 3600"],
      resources: { requests: { cpu: "100m", memory: "64Mi" } },
      terminationMessagePath: "/dev/termination-log",
      imagePullPolicy: "IfNotPresent",
    }],
    tolerations: [
      { key: "node.kubernetes.io/not-ready", operator: "Exists", effect: "NoExecute" },
    ],
  },
  status: {
    phase: "Running",
    podIP: "10.88.0.5",
    podIPs: [{ ip: "10.88.0.5" }],
    conditions: ["Initialized", "Ready", "ContainersReady", "PodScheduled"].map((type) => ({
      type,
      status: "True",
      lastTransitionTime: "2026-12-05T12:00:01Z",
    })),
    containerStatuses: [{
      name: "main",
      ready: true,
      restartCount: 0,
      state: { running: { startedAt: "2026-12-05T12:00:01Z" } },
      containerID: "containerd://" + "a".repeat(64),
    }],
  },
};

Deno.bench("deepCopy of a running pod", { group: "copy", baseline: true }, () => {
  deepCopy(pod);
});

Deno.bench("structuredClone of a running pod", { group: "copy" }, () => {
  structuredClone(pod);
});
