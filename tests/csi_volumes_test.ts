/**
 * CSI volumes end to end: our agent on real containerd with the real apiserver and
 * kube-controller-manager (its PersistentVolume binder binds the claims, its attach-detach
 * controller creates and deletes the VolumeAttachments of attachable volumes and records them in
 * node.status.volumesAttached), and a CSI driver registered through the plugin manager.
 *
 * - A claim's data outlives its pod: staged at the global mount, published into the pod, written,
 *   unpublished and unstaged when the pod goes, and there again in the next pod.
 * - An inline CSI ephemeral volume gets the pod's identity in its volume context.
 * - An attachable volume is reported in node.status.volumesInUse, waits for its VolumeAttachment,
 *   gets the attachment metadata as publish context, and is detached after its pod.
 * - A driver away during a mount: FailedMount, then mounted once it is back.
 * - A kubelet restart with a mounted volume keeps it, and its pod's deletion still tears it down.
 *
 * The driver and its registrar are the test's own (tests/csi_hostpath_driver.ts,
 * tests/csi_registrar.ts): the Go module proxy this suite builds from refuses
 * csi-driver-host-path and node-driver-registrar at every version (tests/csi_build.ts). With no
 * csi-attacher the test marks VolumeAttachments attached itself, as external-attacher would.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import type {
  CoreV1Event,
  V1Node,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1Pod,
  V1VolumeAttachment,
} from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { VolumeStats } from "../src/apis/stats_types.ts";
import { isStatus } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import {
  type ControllerManager,
  FAST_VOLUME_CONTROLLER_ARGS,
  startControllerManager,
} from "./controller_manager.ts";
import { type HostPathDriver, startHostPathDriver } from "./csi_hostpath_driver.ts";
import { type Registrar, startRegistrar } from "./csi_registrar.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { CSI_COMPONENTS, ensureCsiImages } from "./csi_build.ts";
import {
  createObject,
  deletePodAndWait,
  e2eSuite,
  getPod,
  poll,
  restartAgent,
  startNodeAgent,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";
import { exists } from "./child_process.ts";

const gate = await requireRoot("CSI volume e2e tests", ["containerd", "runc", "go", "mount"]);
const NODE = "kts-csi-volumes";
const NS = "default";
/** The driver that needs no attachment (its CSIDriver says so) and takes inline volumes. */
const HOSTPATH = "hostpath.csi.kubelet-ts.test";
/** A driver without a CSIDriver object: its volumes are attached first. */
const ATTACHED = "attached.csi.kubelet-ts.test";
/** The audience of the tokens HOSTPATH's CSIDriver asks for. */
const TOKEN_AUDIENCE = "hostpath.kubelet-ts.test";
/** The StorageClass of HOSTPATH's dynamically provisioned volumes. */
const STORAGE_CLASS = "hostpath";
/** The kubernetes-csi sidecars the controller pod runs. */
const SIDECARS = ["csi-provisioner", "csi-attacher", "csi-resizer"];

/**
 * The drivers' controller sidecars as a StatefulSet of one pod on the node, as upstream's e2e
 * deploys them (its statefulset controller makes the pod): csi-provisioner and csi-resizer for
 * HOSTPATH, csi-attacher for ATTACHED, each at its driver's socket. They reach the apiserver on
 * the host's loopback with the admin kubeconfig (hostNetwork; the control plane's files at their
 * own paths).
 */
function sidecars(cp: ControlPlane, rootDir: string): unknown {
  const imageOf = (name: string) => CSI_COMPONENTS.find((c) => c.name === name)!.image;
  const kubeDir = join(cp.adminKubeconfig, "..");
  const sidecar = (name: string, socketVolume: string) => ({
    name,
    image: imageOf(name),
    args: [
      "--csi-address=/csi/csi.sock",
      `--kubeconfig=${cp.adminKubeconfig}`,
      "--leader-election=false",
      "--v=4",
    ],
    volumeMounts: [
      { name: socketVolume, mountPath: "/csi" },
      { name: "kube", mountPath: kubeDir, readOnly: true },
    ],
  });
  const socketVolume = (name: string, driver: string) => ({
    name,
    hostPath: { path: join(rootDir, "plugins", driver), type: "Directory" },
  });
  const labels = { app: "csi-controller" };
  return {
    apiVersion: "apps/v1",
    kind: "StatefulSet",
    metadata: { name: "csi-controller", namespace: "kube-system" },
    spec: {
      replicas: 1,
      serviceName: "csi-controller",
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          nodeName: NODE,
          hostNetwork: true,
          terminationGracePeriodSeconds: 1,
          containers: [
            sidecar("csi-provisioner", "hostpath-socket"),
            sidecar("csi-resizer", "hostpath-socket"),
            sidecar("csi-attacher", "attached-socket"),
          ],
          volumes: [
            socketVolume("hostpath-socket", HOSTPATH),
            socketVolume("attached-socket", ATTACHED),
            { name: "kube", hostPath: { path: kubeDir, type: "Directory" } },
          ],
        },
      },
    },
  };
}

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly kcm: ControllerManager;
  readonly containerd: ContainerdHandle;
  agent: RunningAgent;
  readonly args: string[];
  readonly rootDir: string;
  readonly drivers: Record<string, { driver: HostPathDriver; registrar: Registrar }>;
}

const suite = e2eSuite<World>({
  name: "csi volumes",
  gate,
  userAgent: "csi-volumes-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "csi-volumes-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      await Deno.mkdir(join(dir, "kcm"));
      const kcm = stack.use(
        await startControllerManager({
          cp,
          dir: join(dir, "kcm"),
          extraArgs: FAST_VOLUME_CONTROLLER_ARGS,
        }),
      );
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd"), socket }));
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      // The sidecars, built from their Go modules (about 11 minutes the first time, cached).
      await ensureCsiImages({ components: SIDECARS, containerdSocket: socket });
      const { agent, args } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        // volumesInUse reaches the node status sooner, and a pod sync (which grows a mounted
        // claim) comes sooner, than with upstream's 10 s and 1 min defaults.
        configLines: ["nodeStatusUpdateFrequency: 2s", "syncFrequency: 10s"],
      });
      const rootDir = join(dir, "root");
      const drivers: World["drivers"] = {};
      for (const name of [HOSTPATH, ATTACHED]) {
        const driverSocket = join(rootDir, "plugins", name, "csi.sock");
        const driver = stack.use(
          await startHostPathDriver({
            dir: join(dir, name),
            socket: driverSocket,
            name,
            nodeId: NODE,
          }),
        );
        const registrar = stack.use(
          await startRegistrar({
            socket: join(rootDir, "plugins_registry", `${name}-reg.sock`),
            name,
            endpoint: driverSocket,
          }),
        );
        drivers[name] = { driver, registrar };
      }
      for (const { registrar } of Object.values(drivers)) {
        await poll(
          "the driver registered",
          () => Promise.resolve(registrar.notified.length > 0 || undefined),
          60_000,
          250,
        );
      }
      await createObject(cp, {
        apiVersion: "storage.k8s.io/v1",
        kind: "StorageClass",
        metadata: { name: STORAGE_CLASS },
        provisioner: HOSTPATH,
        allowVolumeExpansion: true,
        reclaimPolicy: "Delete",
        volumeBindingMode: "Immediate",
      });
      await createObject(cp, sidecars(cp, rootDir));
      // The statefulset controller makes pod csi-controller-0 once kube-system's service
      // account exists.
      await poll(
        "the sidecar pod made",
        async () => {
          const r = await cp.kubectl(["get", "pod", "csi-controller-0", "-n", "kube-system"]);
          return r.code === 0 || undefined;
        },
        90_000,
        500,
      );
      const ready = await cp.kubectl([
        "wait",
        "--for=condition=Ready",
        "pod/csi-controller-0",
        "-n",
        "kube-system",
        "--timeout=120s",
      ], { timeoutMs: 130_000 });
      assert.equal(ready.code, 0, `the sidecars are not ready: ${ready.stderr}`);
      await createObject(cp, {
        apiVersion: "storage.k8s.io/v1",
        kind: "CSIDriver",
        metadata: { name: HOSTPATH },
        spec: {
          attachRequired: false,
          podInfoOnMount: true,
          volumeLifecycleModes: ["Persistent", "Ephemeral"],
          fsGroupPolicy: "File",
          // Pods' tokens for the driver, fresh at each republish (every pod sync).
          tokenRequests: [{ audience: TOKEN_AUDIENCE, expirationSeconds: 3600 }],
          requiresRepublish: true,
        },
      });
      stack.move();
      return { dir, cp, kcm, containerd, agent, args, rootDir, drivers };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

function sha256(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

/** A pre-provisioned volume of `driver`, its PV and its claim, bound by the PV binder. */
async function claimFor(
  w: World,
  api: KubeClient,
  driver: string,
  handle: string,
  claim: string,
): Promise<string> {
  await w.drivers[driver]!.driver.createVolume(handle);
  const pv = `pv-${claim}`;
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "PersistentVolume",
    metadata: { name: pv },
    spec: {
      capacity: { storage: "1Gi" },
      accessModes: ["ReadWriteOnce"],
      storageClassName: "",
      persistentVolumeReclaimPolicy: "Retain",
      claimRef: { namespace: NS, name: claim },
      csi: { driver, volumeHandle: handle, volumeAttributes: { kind: "test" } },
    },
  });
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: { name: claim, namespace: NS },
    spec: {
      accessModes: ["ReadWriteOnce"],
      storageClassName: "",
      volumeName: pv,
      resources: { requests: { storage: "1Gi" } },
    },
  });
  await boundClaim(api, claim);
  return pv;
}

/** The claim once the PersistentVolume binder bound it. */
async function boundClaim(api: KubeClient, claim: string): Promise<V1PersistentVolumeClaim> {
  return await poll(
    `claim ${claim} bound`,
    async () => {
      const c = await api.get<V1PersistentVolumeClaim>(
        `/api/v1/namespaces/${NS}/persistentvolumeclaims/${claim}`,
      );
      return c.status?.phase === "Bound" ? c : undefined;
    },
    90_000,
    250,
  );
}

/** A claim of STORAGE_CLASS that csi-provisioner provisions; its PV's name once bound. */
async function provisionedClaim(
  w: World,
  api: KubeClient,
  claim: string,
  storage: string,
  volumeMode = "Filesystem",
): Promise<string> {
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: { name: claim, namespace: NS },
    spec: {
      accessModes: ["ReadWriteOnce"],
      volumeMode,
      storageClassName: STORAGE_CLASS,
      resources: { requests: { storage } },
    },
  });
  const bound = await boundClaim(api, claim);
  return bound.spec?.volumeName ?? "";
}

/** A pod on the node running `script`, with `volume` mounted at /data (its `subPath`, if given). */
async function podWith(
  w: World,
  name: string,
  volume: unknown,
  script: string,
  subPath?: string,
): Promise<void> {
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      terminationGracePeriodSeconds: 1,
      securityContext: { fsGroup: 2000 },
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        command: ["sh", "-c", script],
        volumeMounts: [{ name: "data", mountPath: "/data", ...(subPath ? { subPath } : {}) }],
      }],
      volumes: [{ name: "data", ...(volume as object) }],
    },
  });
}

async function waitRunning(api: KubeClient, name: string): Promise<V1Pod> {
  return await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running", 90_000);
}

function deletePod(w: World, api: KubeClient, name: string): Promise<void> {
  return deletePodAndWait(w.cp, api, NS, name);
}

async function sh(w: World, pod: string, script: string): Promise<string> {
  const r = await w.cp.kubectl(["exec", pod, "-n", NS, "--", "sh", "-c", script]);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout;
}

/** Waits for an event on pod `name` with `reason` and `message` (or a message it matches). */
async function waitEvent(
  api: KubeClient,
  name: string,
  reason: string,
  message: string | RegExp,
): Promise<void> {
  const matches = (m: string) => typeof message === "string" ? m === message : message.test(m);
  await poll(
    `event ${reason} on ${name}`,
    async () => {
      const list = await api.get<{ items: CoreV1Event[] }>(`/api/v1/namespaces/${NS}/events`);
      return list.items.some((e) =>
        e.involvedObject.name === name && e.reason === reason && matches(e.message ?? "")
      ) || undefined;
    },
    60_000,
    500,
  );
}

/**
 * Waits until HOSTPATH's driver has received `count` calls of `method` that `match` (default
 * any), within `ms`.
 */
async function waitCall(
  w: World,
  what: string,
  method: string,
  match: (request: Record<string, unknown>) => boolean = () => true,
  { count = 1, ms = 30_000 }: { count?: number; ms?: number } = {},
): Promise<void> {
  await poll(
    what,
    () => Promise.resolve(calls(w, HOSTPATH, method).filter(match).length >= count || undefined),
    ms,
    250,
  );
}

function calls(w: World, driver: string, method: string): Record<string, unknown>[] {
  return w.drivers[driver]!.driver.calls.filter((c) => c.method === method)
    .map((c) => c.request as Record<string, unknown>);
}

/** CSI mount points under the agent's root dir (global and pods'), from the mount table. */
async function mountsUnder(w: World): Promise<string[]> {
  const table = await Deno.readTextFile("/proc/self/mountinfo");
  return table.split("\n").map((l) => l.split(" ")[4] ?? "").filter((m) =>
    m.startsWith(w.rootDir) &&
    (m.includes("/kubernetes.io~csi/") || m.includes("/kubernetes.io/csi/"))
  );
}

e2e("a claim's data outlives its pod: staged, published, unpublished, unstaged", async (w, api) => {
  const pv = await claimFor(w, api, HOSTPATH, "vol-persist", "persist");
  await podWith(
    w,
    "writer",
    { persistentVolumeClaim: { claimName: "persist" } },
    "echo hello > /data/f; mkdir -p /data/sub; echo nested > /data/sub/n; sleep 3600",
  );
  const writer = await waitRunning(api, "writer");
  const uid = writer.metadata!.uid!;
  const staging = join(
    w.rootDir,
    "plugins",
    "kubernetes.io/csi",
    HOSTPATH,
    sha256("vol-persist"),
    "globalmount",
  );
  const target = join(w.rootDir, "pods", uid, "volumes", "kubernetes.io~csi", pv, "mount");
  const [stage] = calls(w, HOSTPATH, "NodeStageVolume");
  assert.equal(stage?.stagingTargetPath, staging);
  assert.deepEqual(stage?.volumeContext, { kind: "test" });
  const publish = calls(w, HOSTPATH, "NodePublishVolume").find((c) => c.targetPath === target);
  assert.ok(publish, `NodePublishVolume into ${target}`);
  assert.equal(publish.stagingTargetPath, staging);
  // podInfoOnMount: the pod's identity joins the PV's attributes.
  const { ["csi.storage.k8s.io/serviceAccount.tokens"]: tokensJson, ...context } = publish
    .volumeContext as Record<string, string>;
  assert.deepEqual(context, {
    kind: "test",
    "csi.storage.k8s.io/pod.name": "writer",
    "csi.storage.k8s.io/pod.namespace": NS,
    "csi.storage.k8s.io/pod.uid": uid,
    "csi.storage.k8s.io/serviceAccount.name": "default",
    "csi.storage.k8s.io/ephemeral": "false",
  });
  // tokenRequests: a token of the pod's service account for the driver's audience.
  const tokens = JSON.parse(tokensJson ?? "{}");
  assert.deepEqual(Object.keys(tokens), [TOKEN_AUDIENCE]);
  const claims = JSON.parse(
    atob(tokens[TOKEN_AUDIENCE].token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")),
  );
  assert.deepEqual(claims.aud, [TOKEN_AUDIENCE]);
  assert.equal(claims["kubernetes.io"].pod.uid, uid);
  // requiresRepublish: published again at a later pod sync (syncFrequency 10s here).
  await waitCall(w, "published again", "NodePublishVolume", (c) => c.targetPath === target, {
    count: 2,
  });
  const volData = JSON.parse(await Deno.readTextFile(join(target, "..", "vol_data.json")));
  assert.equal(volData.volumeHandle, "vol-persist");
  assert.equal(volData.specVolID, pv);
  await poll(
    "the file in the driver's volume",
    async () => {
      const text = await Deno.readTextFile(
        join(w.drivers[HOSTPATH]!.driver.volumePath("vol-persist"), "f"),
      ).catch(() => "");
      return text === "hello\n" || undefined;
    },
    30_000,
    250,
  );
  // fsGroupPolicy File: the kubelet gave the pod's fsGroup the volume.
  assert.equal((await Deno.stat(target)).gid, 2000);

  await deletePod(w, api, "writer");
  await waitCall(w, "unstaged", "NodeUnstageVolume");
  assert.deepEqual(
    calls(w, HOSTPATH, "NodeUnpublishVolume").map((c) => c.targetPath),
    [target],
  );
  assert.equal(await exists(staging), false, "the global mount is removed");
  assert.deepEqual(await mountsUnder(w), [], "no mount is left behind");

  await podWith(w, "reader", { persistentVolumeClaim: { claimName: "persist" } }, "sleep 3600");
  await waitRunning(api, "reader");
  assert.equal(await sh(w, "reader", "cat /data/f"), "hello\n");
  await deletePod(w, api, "reader");
  // A subPath of the CSI volume.
  await podWith(
    w,
    "sub-reader",
    { persistentVolumeClaim: { claimName: "persist" } },
    "sleep 3600",
    "sub",
  );
  await waitRunning(api, "sub-reader");
  assert.equal(await sh(w, "sub-reader", "cat /data/n"), "nested\n");
  await deletePod(w, api, "sub-reader");
  assert.deepEqual(await mountsUnder(w), [], "no mount is left behind");
});

e2e(
  "an inline CSI ephemeral volume is published with the pod's identity and unpublished after it",
  async (w, api) => {
    await podWith(
      w,
      "inline",
      { csi: { driver: HOSTPATH, volumeAttributes: { size: "small" } } },
      "echo x > /data/x; sleep 3600",
    );
    const pod = await waitRunning(api, "inline");
    const uid = pod.metadata!.uid!;
    const handle = `csi-${sha256(`${uid}data`)}`;
    const publish = calls(w, HOSTPATH, "NodePublishVolume").find((c) => c.volumeId === handle);
    assert.ok(publish, "NodePublishVolume of the inline volume");
    assert.equal(
      publish.targetPath,
      join(w.rootDir, "pods", uid, "volumes", "kubernetes.io~csi", "data", "mount"),
    );
    assert.equal(publish.stagingTargetPath, "");
    assert.equal(
      (publish.volumeContext as Record<string, string>)["csi.storage.k8s.io/ephemeral"],
      "true",
    );
    assert.equal((publish.volumeContext as Record<string, string>).size, "small");
    assert.equal(
      calls(w, HOSTPATH, "NodeStageVolume").filter((c) => c.volumeId === handle).length,
      0,
    );
    assert.equal(await sh(w, "inline", "cat /data/x"), "x\n");
    await deletePod(w, api, "inline");
    await waitCall(w, "unpublished", "NodeUnpublishVolume", (c) => c.volumeId === handle);
  },
);

e2e(
  "an attachable volume is reported in use, mounted once csi-attacher attached it, and detached after its pod",
  async (w, api) => {
    const pv = await claimFor(w, api, ATTACHED, "vol-attach", "attach");
    const unique = `kubernetes.io/csi/${ATTACHED}^vol-attach`;
    const vaName = `csi-${sha256(`vol-attach${ATTACHED}${NODE}`)}`;
    await podWith(w, "attached", { persistentVolumeClaim: { claimName: "attach" } }, "sleep 3600");
    await poll(
      "volumesInUse on the node",
      async () => {
        const node = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
        return node.status?.volumesInUse?.includes(unique) || undefined;
      },
      60_000,
      250,
    );
    // The attach-detach controller asks for the attachment.
    const va = await poll(
      "the VolumeAttachment",
      async () => {
        try {
          return await api.get<V1VolumeAttachment>(
            `/apis/storage.k8s.io/v1/volumeattachments/${vaName}`,
          );
        } catch (e) {
          if (isStatus(e, 404)) return undefined;
          throw e;
        }
      },
      60_000,
      250,
    );
    assert.equal(va.spec.source.persistentVolumeName, pv);
    assert.equal(va.spec.attacher, ATTACHED);
    // csi-attacher marks it attached (the driver has no ControllerPublishVolume), the
    // attach-detach controller lists it in volumesAttached, and the kubelet mounts it.
    await waitRunning(api, "attached");
    const attached = await api.get<V1VolumeAttachment>(
      `/apis/storage.k8s.io/v1/volumeattachments/${vaName}`,
    );
    assert.equal(attached.status?.attached, true);
    const [stage] = calls(w, ATTACHED, "NodeStageVolume");
    assert.deepEqual(stage?.publishContext, attached.status?.attachmentMetadata ?? {});
    const node = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
    assert.ok(node.status?.volumesAttached?.some((v) => v.name === unique), "volumesAttached");

    await deletePod(w, api, "attached");
    await poll(
      "volumesInUse cleared",
      async () => {
        const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
        return !(n.status?.volumesInUse ?? []).includes(unique) || undefined;
      },
      60_000,
      250,
    );
    await poll(
      "the VolumeAttachment deleted (detached)",
      async () => {
        try {
          await api.get(`/apis/storage.k8s.io/v1/volumeattachments/${vaName}`);
          return undefined;
        } catch (e) {
          return isStatus(e, 404) || undefined;
        }
      },
      90_000,
      500,
    );
  },
);

e2e(
  "a driver away: the mount fails and is retried; the unmount waits for it, and the pod with it",
  async (w, api) => {
    await claimFor(w, api, HOSTPATH, "vol-restart", "restart");
    const { driver } = w.drivers[HOSTPATH]!;
    // The driver stops (its registrar stays): the mount fails until it is back.
    await driver.stop();
    await podWith(w, "retried", { persistentVolumeClaim: { claimName: "restart" } }, "sleep 3600");
    await waitEvent(
      api,
      "retried",
      "FailedMount",
      /^MountVolume\.SetUp failed for volume "pv-restart" : /,
    );
    await driver.start();
    const pod = await waitRunning(api, "retried");
    const target = join(
      w.rootDir,
      "pods",
      pod.metadata!.uid!,
      "volumes",
      "kubernetes.io~csi",
      "pv-restart",
      "mount",
    );

    // Away again while the pod is deleted: the volume stays, and so does the pod.
    await driver.stop();
    const r = await w.cp.kubectl(["delete", "pod", "retried", "-n", NS, "--wait=false"]);
    assert.equal(r.code, 0, r.stderr);
    await new Promise((resolve) => setTimeout(resolve, 8_000));
    const terminating = await getPod(api, NS, "retried");
    assert.ok(terminating.metadata?.deletionTimestamp, "the pod is being deleted");
    assert.ok(await exists(target), "its volume is still published");
    await driver.start();
    await waitPodGone(api, NS, "retried", 90_000);
    assert.ok(
      calls(w, HOSTPATH, "NodeUnpublishVolume").some((c) => c.targetPath === target),
      "unpublished once the driver is back",
    );
    assert.equal(await exists(target), false);
  },
);

e2e(
  "a kubelet restart keeps a mounted volume, and the pod's deletion still tears it down",
  async (w, api) => {
    await claimFor(w, api, HOSTPATH, "vol-kubelet", "kubelet");
    await podWith(
      w,
      "survivor",
      { persistentVolumeClaim: { claimName: "kubelet" } },
      "echo kept > /data/k; sleep 3600",
    );
    const before = await waitRunning(api, "survivor");
    const unpublishedBefore = calls(w, HOSTPATH, "NodeUnpublishVolume").length;
    await restartAgent(w, "SIGKILL");
    // The pod keeps running with its data; nothing was unpublished.
    await new Promise((r) => setTimeout(r, 5_000));
    const after = await getPod(api, NS, "survivor");
    assert.equal(
      after.status?.containerStatuses?.[0]?.restartCount,
      before.status?.containerStatuses?.[0]?.restartCount,
    );
    assert.equal(await sh(w, "survivor", "cat /data/k"), "kept\n");
    assert.equal(calls(w, HOSTPATH, "NodeUnpublishVolume").length, unpublishedBefore);
    await deletePod(w, api, "survivor");
    await waitCall(
      w,
      "unpublished and unstaged",
      "NodeUnstageVolume",
      (c) => c.volumeId === "vol-kubelet",
    );
    assert.deepEqual(await mountsUnder(w), [], "no mount is left behind");
  },
);

e2e(
  "a claim provisioned by csi-provisioner is mounted, then grown in use by csi-resizer and the node",
  async (w, api) => {
    const claim = "dynamic";
    const pv = await provisionedClaim(w, api, claim, "1Mi");
    const created = calls(w, HOSTPATH, "CreateVolume").find((c) => c.name === pv);
    assert.ok(created, `csi-provisioner asked the driver for ${pv}`);
    await podWith(
      w,
      "grower",
      { persistentVolumeClaim: { claimName: claim } },
      "echo grown > /data/g; sleep 3600",
    );
    await waitRunning(api, "grower");
    assert.equal(await sh(w, "grower", "cat /data/g"), "grown\n");
    // The driver's NodeGetVolumeStats, in the summary with the claim and on /metrics.
    const uid = (await getPod(api, NS, "grower")).metadata!.uid!;
    const summary = JSON.parse(
      await api.getText(`/api/v1/nodes/${NODE}/proxy/stats/summary`),
    ) as { pods: { podRef: { uid: string }; volume?: VolumeStats[] }[] };
    const volume = summary.pods.find((p) => p.podRef.uid === uid)?.volume
      ?.find((v) => v.name === "data");
    assert.deepEqual(volume?.pvcRef, { name: claim, namespace: NS });
    assert.ok((volume?.capacityBytes ?? 0) > 0, JSON.stringify(volume));
    const metrics = await api.getText(`/api/v1/nodes/${NODE}/proxy/metrics`);
    const sample = new RegExp(
      `^kubelet_volume_stats_capacity_bytes\\{namespace="${NS}",persistentvolumeclaim="${claim}"\\} (\\S+)$`,
      "m",
    ).exec(metrics);
    assert.equal(Number(sample?.[1]), volume?.capacityBytes, "kubelet_volume_stats_capacity_bytes");

    // The claim asks for more: csi-resizer grows the volume and leaves the node's part pending;
    // the kubelet grows the file system and finishes the claim.
    await api.patch(`/api/v1/namespaces/${NS}/persistentvolumeclaims/${claim}`, {
      spec: { resources: { requests: { storage: "2Mi" } } },
    }, "merge");
    const grown = await poll(
      "the claim's capacity grown",
      async () => {
        const c = await api.get<V1PersistentVolumeClaim>(
          `/api/v1/namespaces/${NS}/persistentvolumeclaims/${claim}`,
        );
        return c.status?.capacity?.["storage"] === "2Mi" ? c : undefined;
      },
      90_000,
      500,
    );
    assert.equal(grown.status?.allocatedResourceStatuses?.["storage"], undefined);
    const expand = calls(w, HOSTPATH, "NodeExpandVolume").at(-1);
    assert.ok(expand, "NodeExpandVolume");
    assert.equal(
      expand.volumePath,
      join(
        w.rootDir,
        "pods",
        (await getPod(api, NS, "grower")).metadata!.uid!,
        "volumes",
        "kubernetes.io~csi",
        pv,
        "mount",
      ),
    );
    assert.deepEqual(expand.capacityRange, { requiredBytes: 2n * 2n ** 20n, limitBytes: 0n });
    await waitEvent(
      api,
      "grower",
      "FileSystemResizeSuccess",
      `MountVolume.NodeExpandVolume succeeded for volume "${pv}" ${NODE}`,
    );
    await deletePod(w, api, "grower");
  },
);

e2e(
  "a generic ephemeral volume: its claim made for the pod, provisioned, mounted, and gone with the pod",
  async (w, api) => {
    await podWith(w, "scratch", {
      ephemeral: {
        volumeClaimTemplate: {
          spec: {
            accessModes: ["ReadWriteOnce"],
            storageClassName: STORAGE_CLASS,
            resources: { requests: { storage: "1Mi" } },
          },
        },
      },
    }, "echo tmp > /data/t; sleep 3600");
    const pod = await waitRunning(api, "scratch");
    const claim = await api.get<V1PersistentVolumeClaim>(
      `/api/v1/namespaces/${NS}/persistentvolumeclaims/scratch-data`,
    );
    assert.equal(claim.metadata?.ownerReferences?.[0]?.uid, pod.metadata?.uid);
    assert.equal(await sh(w, "scratch", "cat /data/t"), "tmp\n");
    const pv = await api.get<V1PersistentVolume>(
      `/api/v1/persistentvolumes/${claim.spec?.volumeName}`,
    );
    const handle = pv.spec?.csi?.volumeHandle;
    await deletePod(w, api, "scratch");
    // The garbage collector deletes the claim, and csi-provisioner the volume.
    await waitCall(w, "the driver's volume deleted", "DeleteVolume", (c) => c.volumeId === handle, {
      ms: 90_000,
    });
  },
);

e2e(
  "a block-mode claim is a device in the container, its data kept for the next pod",
  async (w, api) => {
    const claim = "raw";
    const pv = await provisionedClaim(w, api, claim, "8Mi", "Block");
    const blockPod = (name: string, script: string) => ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name, namespace: NS },
      spec: {
        nodeName: NODE,
        terminationGracePeriodSeconds: 1,
        containers: [{
          name: "main",
          image: BUSYBOX_IMAGE,
          command: ["sh", "-c", script],
          volumeDevices: [{ name: "disk", devicePath: "/dev/xvda" }],
        }],
        volumes: [{ name: "disk", persistentVolumeClaim: { claimName: claim } }],
      },
    });
    await createObject(
      w.cp,
      blockPod(
        "raw-writer",
        "echo raw-bytes | dd of=/dev/xvda bs=512 count=1 conv=sync; sleep 3600",
      ),
    );
    const writer = await waitRunning(api, "raw-writer");
    const uid = writer.metadata!.uid!;
    // The device, its size, and what was written through it.
    assert.match(await sh(w, "raw-writer", "ls -l /dev/xvda"), /^b/);
    assert.equal(
      (await sh(w, "raw-writer", "blockdev --getsize64 /dev/xvda")).trim(),
      String(8 * 2 ** 20),
    );
    assert.equal(await sh(w, "raw-writer", "head -c 9 /dev/xvda"), "raw-bytes");
    // upstream's layout: the published device, the pod's link to it, the node's bind mount.
    const devices = join(w.rootDir, "plugins", "kubernetes.io/csi", "volumeDevices");
    const publish = join(devices, "publish", pv, uid);
    const link = join(w.rootDir, "pods", uid, "volumeDevices", "kubernetes.io~csi", pv);
    assert.equal(await Deno.readLink(link), publish);
    const published = calls(w, HOSTPATH, "NodePublishVolume").find((c) => c.targetPath === publish);
    assert.ok(published, `NodePublishVolume at ${publish}`);
    assert.equal(published.stagingTargetPath, join(devices, "staging", pv));
    assert.ok((await mountsUnder(w)).includes(join(devices, pv, "dev", uid)), "the bind mount");

    await deletePod(w, api, "raw-writer");
    await waitCall(
      w,
      "unstaged",
      "NodeUnstageVolume",
      (c) => c.stagingTargetPath === join(devices, "staging", pv),
    );
    assert.equal(await exists(link), false, "the pod's link is removed");
    assert.equal(await exists(join(devices, pv)), false, "the volume's files are removed");
    assert.deepEqual(await mountsUnder(w), [], "no mount is left behind");
    const loops = await new Deno.Command("losetup", { args: ["-a"], stdout: "piped" }).output();
    assert.ok(
      !new TextDecoder().decode(loops.stdout).includes(w.rootDir),
      "the kubelet's loop device is detached",
    );

    await createObject(w.cp, blockPod("raw-reader", "sleep 3600"));
    await waitRunning(api, "raw-reader");
    assert.equal(await sh(w, "raw-reader", "head -c 9 /dev/xvda"), "raw-bytes");
    await deletePod(w, api, "raw-reader");
  },
);

e2e(
  "local and hostPath PersistentVolumes: a claim's pod writes into the node's directory; nfs is mounted with mount(8)",
  async (w, api) => {
    for (const [kind, source] of [["local", "local"], ["hostpath", "hostPath"]] as const) {
      const hostDir = join(w.dir, `${kind}-disk`);
      await Deno.mkdir(hostDir, { recursive: true });
      const pv = `pv-${kind}`;
      await createObject(w.cp, {
        apiVersion: "v1",
        kind: "PersistentVolume",
        metadata: { name: pv },
        spec: {
          capacity: { storage: "1Gi" },
          accessModes: ["ReadWriteOnce"],
          storageClassName: "",
          claimRef: { namespace: NS, name: `${kind}-claim` },
          ...(source === "local"
            ? {
              local: { path: hostDir },
              nodeAffinity: {
                required: {
                  nodeSelectorTerms: [{
                    matchExpressions: [{
                      key: "kubernetes.io/hostname",
                      operator: "In",
                      values: [NODE],
                    }],
                  }],
                },
              },
            }
            : { hostPath: { path: hostDir, type: "Directory" } }),
        },
      });
      await createObject(w.cp, {
        apiVersion: "v1",
        kind: "PersistentVolumeClaim",
        metadata: { name: `${kind}-claim`, namespace: NS },
        spec: {
          accessModes: ["ReadWriteOnce"],
          storageClassName: "",
          volumeName: pv,
          resources: { requests: { storage: "1Gi" } },
        },
      });
      await podWith(
        w,
        `${kind}-writer`,
        { persistentVolumeClaim: { claimName: `${kind}-claim` } },
        `echo ${kind} > /data/f; sleep 3600`,
      );
      await waitRunning(api, `${kind}-writer`);
      await poll(
        `the file in ${hostDir}`,
        async () => {
          const text = await Deno.readTextFile(join(hostDir, "f")).catch(() => "");
          return text === `${kind}\n` || undefined;
        },
        30_000,
        250,
      );
      await deletePod(w, api, `${kind}-writer`);
    }
    // nfs is mounted with mount(8); this machine's kernel has no NFS client, so mount says so.
    await podWith(w, "nfs-user", { nfs: { server: "127.0.0.1", path: "/exports" } }, "sleep 3600");
    await waitEvent(
      api,
      "nfs-user",
      "FailedMount",
      /^MountVolume\.SetUp failed for volume "data" : mount failed: exit status 32\nMounting command: mount\nMounting arguments: -t nfs 127\.0\.0\.1:\/exports \S+\/volumes\/kubernetes\.io~nfs\/data\nOutput: /,
    );
    await deletePod(w, api, "nfs-user");
  },
);

suite.teardown("teardown", async (w) => {
  for (const { registrar, driver } of Object.values(w.drivers)) {
    await registrar.stop();
    await driver.stop();
  }
  await w.kcm.stop();
  await w.containerd.stop();
  // A mount a failed test left behind would keep w.dir from going.
  const table = await Deno.readTextFile("/proc/self/mountinfo");
  const left = table.split("\n").map((l) => l.split(" ")[4] ?? "")
    .filter((m) => m.startsWith(`${w.dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const point of left) {
    await new Deno.Command("umount", { args: ["-l", point], stdout: "null", stderr: "null" })
      .output();
  }
});
