import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { ObjectRef } from "../client/record.ts";
import type { EnsureImageRequest, EnsureImageResult } from "../images/image_manager.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import {
  getImageVolumes,
  type ImageVolumeDeps,
  type ImageVolumeMetrics,
  incrementImageVolumeMetrics,
  mountedVolumeNames,
  toKubeContainerImageVolumes,
} from "./image_volumes.ts";

interface Recorded {
  readonly ref: ObjectRef;
  readonly type: string;
  readonly reason: string;
  readonly message: string;
}

/** Deps over an image manager that answers from `results` by reference and records requests. */
function deps(results: Record<string, EnsureImageResult>) {
  const requests: EnsureImageRequest[] = [];
  const events: Recorded[] = [];
  const d: ImageVolumeDeps = {
    imageManager: {
      ensureImageExists: (_signal, req) => {
        requests.push(req);
        const ref = req.imageVolume?.reference ?? "";
        return Promise.resolve(results[ref] ?? { imageRef: `sha256:${ref}` });
      },
    },
    recorder: {
      event: (ref, type, reason, message) => events.push({ ref, type, reason, message }),
    },
    logger: createLogger({ write: () => {} }),
  };
  return { d, requests, events };
}

const app: V1Container = {
  name: "app",
  image: "busybox:1.36",
  volumeMounts: [
    { name: "data", mountPath: "/data" },
    { name: "cache", mountPath: "/cache" },
    { name: "tools", mountPath: "/tools", subPath: "bin" },
  ],
};

function pod(volumes = [
  { name: "data", image: { reference: "data:1", pullPolicy: "Always" } },
  { name: "cache", emptyDir: {} },
  { name: "tools", image: { reference: "tools:2" } },
  { name: "unused", image: { reference: "unused:3", pullPolicy: "IfNotPresent" } },
]): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid: "uid-1", annotations: { a: "b" } },
    spec: { containers: [app], volumes },
  };
}

const signal = () => AbortSignal.timeout(10_000);
const sandboxConfig = api.PodSandboxConfig.create({ hostname: "web" });

Deno.test("getImageVolumes pulls each image volume with its source and the pod's secrets", async () => {
  const { d, requests } = deps({});
  const secret = { metadata: { name: "pull" } };
  const p = pod();
  const pulls = await getImageVolumes(d, signal(), {
    pod: p,
    sandboxConfig,
    pullSecrets: [secret],
  });
  // Every image volume of the pod, in spec order, as upstream SyncPod pulls them.
  assert.deepEqual(requests.map((r) => [r.imageVolume, r.container, r.pullSecrets]), [
    [{ reference: "data:1", pullPolicy: "Always" }, undefined, [secret]],
    [{ reference: "tools:2" }, undefined, [secret]],
    [{ reference: "unused:3", pullPolicy: "IfNotPresent" }, undefined, [secret]],
  ]);
  assert.equal(requests[0]?.sandboxConfig, sandboxConfig);
  assert.deepEqual(pulls.get("data"), {
    spec: {
      image: "sha256:data:1",
      userSpecifiedImage: "data:1",
      runtimeHandler: "",
      annotations: { a: "b" },
      imageRef: "",
    },
  });
  assert.deepEqual([...pulls.keys()], ["data", "tools", "unused"]);

  // Only the named ones when the caller pulls for one container.
  const one = deps({});
  await getImageVolumes(one.d, signal(), {
    pod: p,
    pullSecrets: [],
    volumeNames: mountedVolumeNames(app),
  });
  assert.deepEqual(one.requests.map((r) => r.imageVolume?.reference), ["data:1", "tools:2"]);
});

Deno.test("getImageVolumes keeps a failed pull and refuses an unknown pullPolicy, naming the field", async () => {
  const message = 'Back-off pulling image "data:1"';
  const { d, requests } = deps({ "data:1": { error: { reason: "ImagePullBackOff", message } } });
  const pulls = await getImageVolumes(d, signal(), {
    pod: pod([
      { name: "data", image: { reference: "data:1" } },
      { name: "tools", image: { reference: "tools:2", pullPolicy: "Sometimes" } },
    ]),
    pullSecrets: [],
  });
  assert.deepEqual(pulls.get("data"), { error: { reason: "ImagePullBackOff", message } });
  assert.deepEqual(pulls.get("tools"), {
    error: {
      reason: "CreateContainerConfigError",
      message: 'spec.volumes[1].image.pullPolicy: Unsupported value: "Sometimes": ' +
        'supported values: "Always", "IfNotPresent", "Never"',
    },
  });
  assert.deepEqual(requests.map((r) => r.imageVolume?.reference), ["data:1"], "never pulled");
});

Deno.test("toKubeContainerImageVolumes gives the container's image volumes, or fails with the last pull error", async () => {
  const { d, events } = deps({
    "tools:2": {
      error: { reason: "ErrImagePull", message: "rpc error: code = NotFound desc = no tools" },
    },
  });
  const p = pod();
  const pulls = await getImageVolumes(d, signal(), { pod: p, pullSecrets: [] });

  const ok = toKubeContainerImageVolumes(d, pulls, p, {
    ...app,
    volumeMounts: [app.volumeMounts![0]!],
  });
  assert.ok("imageVolumes" in ok);
  assert.deepEqual([...ok.imageVolumes.keys()], ["data"]);
  assert.equal(ok.imageVolumes.get("data")?.image, "sha256:data:1");

  const failed = toKubeContainerImageVolumes(d, pulls, p, app);
  assert.deepEqual(failed, {
    failure: { reason: "ErrImagePull", message: "rpc error: code = NotFound desc = no tools" },
  });
  // One Failed event on the container per mount of a failed volume, with the reason only.
  assert.deepEqual(events.map((e) => [e.ref.fieldPath, e.type, e.reason, e.message]), [
    ["spec.containers{app}", "Warning", "Failed", "Error: ErrImagePull"],
  ]);

  // A container without image volumes, and a pod without any, need nothing.
  const none = toKubeContainerImageVolumes(d, new Map(), p, app);
  assert.ok("imageVolumes" in none && none.imageVolumes.size === 0);
});

Deno.test("incrementImageVolumeMetrics counts requests and each mount's outcome as upstream", () => {
  const counter = () => {
    const c = { value: 0, inc: (_labels?: undefined, by = 1) => void (c.value += by) };
    return c;
  };
  const counters = () => ({
    imageVolumeRequestedTotal: counter(),
    imageVolumeMountedSucceedTotal: counter(),
    imageVolumeMountedErrorsTotal: counter(),
  });
  const values = (m: ReturnType<typeof counters>) => [
    m.imageVolumeRequestedTotal.value,
    m.imageVolumeMountedSucceedTotal.value,
    m.imageVolumeMountedErrorsTotal.value,
  ];
  const spec = api.ImageSpec.create({ image: "sha256:x" });
  const volumes = new Map([["data", spec], ["tools", spec]]);
  const ok = counters();
  incrementImageVolumeMetrics(ok satisfies ImageVolumeMetrics, undefined, app, volumes);
  assert.deepEqual(values(ok), [2, 2, 0]);
  const mountFailed = counters();
  incrementImageVolumeMetrics(
    mountFailed,
    { reason: "CreateContainerError", message: "ImageVolumeMountFailed: no such snapshot" },
    app,
    volumes,
  );
  assert.deepEqual(values(mountFailed), [2, 0, 2]);
  // Any other failure counts the mounts as succeeded, as upstream's does.
  const other = counters();
  incrementImageVolumeMetrics(
    other,
    { reason: "CreateContainerError", message: 'failed to mkdir "": no such file or directory' },
    app,
    volumes,
  );
  assert.deepEqual(values(other), [2, 2, 0]);
});

Deno.test("incrementImageVolumeMetrics updates the kubelet's image volume counters", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const spec = api.ImageSpec.create({ image: "sha256:x" });
  incrementImageVolumeMetrics(metrics, undefined, app, new Map([["data", spec]]));
  const text = await metrics.render();
  assert.match(text, /^kubelet_image_volume_requested_total 1$/m);
  assert.match(text, /^kubelet_image_volume_mounted_succeed_total 1$/m);
  assert.match(text, /^kubelet_image_volume_mounted_errors_total 0$/m);
});
