/**
 * Dynamic Resource Allocation end to end: our agent on containerd 2.x (CDI on by default there,
 * its spec dirs `/etc/cdi` and `/var/run/cdi`; Debian's containerd 1.6 has no CDI at all) with
 * the real apiserver and kube-scheduler, which allocates the claims, and upstream's DRA test
 * driver (k8s.io/kubernetes test/e2e/dra/test-driver v1.36.3, tests/device_build.ts) running its
 * `kubelet-plugin` as a host-network pod on the node: its registration and plugin directories
 * are the agent's (mounted at the same paths, so the endpoint it registers is the host's), it
 * writes its CDI specs to the host's /var/run/cdi, and it talks to the apiserver with the admin
 * kubeconfig (no service account token controller runs here).
 *
 * - The driver registers through the plugin watcher and publishes its ResourceSlice.
 * - A pod with a ResourceClaim (a request of a DeviceClass matching the driver, with opaque
 *   parameters) is scheduled, its claim prepared before its sandbox: the driver's CDI file is
 *   written, the container has the env its CDI device sets, and the claim is checkpointed.
 * - A kubelet restart keeps the pod; the claim, known from the checkpoint, is unprepared when the
 *   pod is deleted (the driver's CDI file removed, the checkpoint emptied).
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { ResourceV1ResourceClaim } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type Child, type ControlPlane, startControlPlane } from "./control_plane.ts";
import { startScheduler } from "./controller_manager.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { DRA_TEST_DRIVER_IMAGE, DRA_TEST_DRIVER_NAME, ensureDeviceImages } from "./device_build.ts";
import {
  createObject,
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  poll,
  restartAgent,
  startNodeAgent,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";
import { exists } from "./child_process.ts";

const gate = await requireRoot("DRA e2e tests", ["containerd", "runc", "go"]);
const NODE = "kts-dra";
const NS = "default";
const CDI_DIR = "/var/run/cdi";
const CLASS = "kts-dra-test";
const CLAIM = "gpu-claim";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly scheduler: Child;
  agent: RunningAgent;
  readonly args: string[];
  readonly rootDir: string;
}

const suite = e2eSuite<World>({
  name: "dra",
  gate,
  userAgent: "dra-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "dra-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), socket, runtime: "containerd2" }),
      );
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      await ensureDeviceImages({ components: ["dra-test-driver"], containerdSocket: socket });
      const scheduler = await startScheduler({ cp, dir, verbosity: 2 });
      stack.defer(() => scheduler.stop());
      const { agent, args } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        // For the DRA manager's "Registered DRA plugin" line.
        extraArgs: ["-v=3"],
      });
      for (const ns of [NS, "kube-system"]) {
        await ensureDefaultServiceAccount(cp, ns);
        await ensureRootCAConfigMap(cp, ns);
      }
      stack.move();
      return { dir, cp, containerd, scheduler, agent, args, rootDir: join(dir, "root") };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

/** The driver's kubelet plugin, its directories at the agent's own paths. */
async function startDriver(w: World): Promise<void> {
  const plugins = join(w.rootDir, "plugins");
  const registry = join(w.rootDir, "plugins_registry");
  // The plugin makes only the parent of its data directory.
  await Deno.mkdir(join(plugins, DRA_TEST_DRIVER_NAME), { recursive: true });
  const cpDir = join(w.dir, "cp");
  const hostPath = (name: string, path: string, type = "Directory") => ({
    name,
    hostPath: { path, type },
  });
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "dra-test-driver", namespace: "kube-system" },
    spec: {
      nodeName: NODE,
      hostNetwork: true,
      terminationGracePeriodSeconds: 5,
      containers: [{
        name: "plugin",
        image: DRA_TEST_DRIVER_IMAGE,
        args: [
          "kubelet-plugin",
          `--node-name=${NODE}`,
          `--kubeconfig=${w.cp.adminKubeconfig}`,
          `--datadir=${plugins}`,
          `--plugin-registration-path=${registry}`,
          `--cdi-dir=${CDI_DIR}`,
        ],
        volumeMounts: [
          { name: "plugins", mountPath: plugins },
          { name: "registry", mountPath: registry },
          { name: "cdi", mountPath: CDI_DIR },
          { name: "cp", mountPath: cpDir, readOnly: true },
        ],
      }],
      volumes: [
        hostPath("plugins", plugins),
        hostPath("registry", registry),
        hostPath("cdi", CDI_DIR, "DirectoryOrCreate"),
        hostPath("cp", cpDir),
      ],
    },
  });
}

async function claimOf(api: KubeClient): Promise<ResourceV1ResourceClaim> {
  return await api.get<ResourceV1ResourceClaim>(
    `/apis/resource.k8s.io/v1/namespaces/${NS}/resourceclaims/${CLAIM}`,
  );
}

async function logsOf(w: World, name: string): Promise<string> {
  const r = await w.cp.kubectl(["logs", name, "-n", NS]);
  return r.code === 0 ? r.stdout : "";
}

/** The claims `dra_manager_state` records: name → pod UIDs. */
async function checkpointed(w: World): Promise<Map<string, string[]>> {
  const file = JSON.parse(await Deno.readTextFile(join(w.rootDir, "dra_manager_state")));
  const list = JSON.parse(file.Data).ClaimInfoStateList ?? [];
  return new Map(
    list.map((c: { ClaimName: string; PodUIDs: Record<string, unknown> }) => [
      c.ClaimName,
      Object.keys(c.PodUIDs ?? {}),
    ]),
  );
}

const cdiFile = (claimUid: string) => join(CDI_DIR, `${DRA_TEST_DRIVER_NAME}-${claimUid}-gpu.json`);

e2e(
  "the DRA test driver registers through the plugin watcher and publishes its devices",
  async (w, api) => {
    await startDriver(w);
    await w.agent.waitFor(
      new RegExp(`Registered DRA plugin.*${DRA_TEST_DRIVER_NAME.replace(/\./g, "\\.")}`),
      90_000,
    );
    assert.match(w.agent.stderr(), /chosenService="?v1\.DRAPlugin/);
    await poll(
      "the driver's ResourceSlice for this node",
      async () => {
        const list = await api.get<{ items: { spec?: { nodeName?: string; driver?: string } }[] }>(
          "/apis/resource.k8s.io/v1/resourceslices",
        );
        return list.items.some((s) =>
            s.spec?.nodeName === NODE && s.spec?.driver === DRA_TEST_DRIVER_NAME
          )
          ? true
          : undefined;
      },
      90_000,
      500,
    );
  },
);

e2e(
  "a pod's ResourceClaim is allocated, prepared before its sandbox, and its CDI env is in the container",
  async (w, api) => {
    await createObject(w.cp, {
      apiVersion: "resource.k8s.io/v1",
      kind: "DeviceClass",
      metadata: { name: CLASS },
      spec: { selectors: [{ cel: { expression: `device.driver == "${DRA_TEST_DRIVER_NAME}"` } }] },
    });
    await createObject(w.cp, {
      apiVersion: "resource.k8s.io/v1",
      kind: "ResourceClaim",
      metadata: { name: CLAIM, namespace: NS },
      spec: {
        devices: {
          requests: [{ name: "gpu", exactly: { deviceClassName: CLASS } }],
          config: [{
            requests: ["gpu"],
            opaque: { driver: DRA_TEST_DRIVER_NAME, parameters: { color: "blue" } },
          }],
        },
      },
    });
    // No nodeName: the scheduler allocates the claim, reserves it for the pod and binds it.
    await createObject(w.cp, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "dra-user", namespace: NS },
      spec: {
        terminationGracePeriodSeconds: 1,
        // The kubelet registers its Node with the not-ready taint, which only the controller
        // manager's node lifecycle controller (not run here) takes off.
        tolerations: [{ key: "node.kubernetes.io/not-ready", operator: "Exists" }],
        resourceClaims: [{ name: "gpu", resourceClaimName: CLAIM }],
        containers: [{
          name: "main",
          image: BUSYBOX_IMAGE,
          command: ["sh", "-c", "env | grep -E '^(claim_|user_)' | sort; sleep 3600"],
          resources: { claims: [{ name: "gpu" }] },
        }],
      },
    });
    const p = await waitPod(
      api,
      NS,
      "dra-user",
      "Running",
      (p) => p.status?.phase === "Running",
      120_000,
    ).catch(async (e) => {
      console.error((await w.cp.kubectl(["describe", "pod", "dra-user", "-n", NS])).stdout);
      console.error(
        (await w.cp.kubectl(["get", "resourceslices,resourceclaims", "-o", "yaml"])).stdout,
      );
      const log = await Deno.readTextFile(join(w.dir, "kube-scheduler.log"));
      console.error(`kube-scheduler.log:\n${log.split("\n").slice(-40).join("\n")}`);
      throw e;
    });
    assert.equal(p.spec?.nodeName, NODE);
    const claim = await claimOf(api);
    assert.equal(claim.status?.allocation?.devices?.results?.[0]?.driver, DRA_TEST_DRIVER_NAME);
    assert.deepEqual(claim.status?.reservedFor?.map((r) => r.uid), [p.metadata?.uid]);
    const uid = claim.metadata!.uid!;
    // The driver's CDI spec, and the env it sets in the container.
    assert.ok(await exists(cdiFile(uid)), `${cdiFile(uid)} written by NodePrepareResources`);
    await poll(
      "the CDI env in the container's output",
      async () => {
        const out = (await logsOf(w, "dra-user")).trim();
        return out === `claim_${CLAIM.replace(/-/g, "_")}_gpu=true\nuser_color=blue`
          ? true
          : undefined;
      },
      30_000,
      500,
    );
    assert.deepEqual((await checkpointed(w)).get(CLAIM), [p.metadata?.uid]);
  },
);

e2e(
  "after a kubelet restart the pod keeps running, and its claim is unprepared when it is deleted",
  async (w, api) => {
    const claim = await claimOf(api);
    const uid = claim.metadata!.uid!;
    await restartAgent(w);
    const p = await waitPod(
      api,
      NS,
      "dra-user",
      "Running",
      (p) => p.status?.phase === "Running",
      60_000,
    );
    assert.equal(p.status?.containerStatuses?.[0]?.restartCount, 0);
    const r = await w.cp.kubectl(["delete", "pod", "dra-user", "-n", NS, "--wait=false"]);
    assert.equal(r.code, 0, r.stderr);
    await waitPodGone(api, NS, "dra-user", 120_000);
    // The pod object goes only once its claim is unprepared (upstream's status manager waits
    // for PodMightNeedToUnprepareResources): NodeUnprepareResources removed the driver's CDI
    // file and the checkpoint forgot the claim by then.
    assert.equal(await exists(cdiFile(uid)), false);
    assert.equal((await checkpointed(w)).has(CLAIM), false);
  },
);

suite.teardown("teardown", async (w) => {
  await w.scheduler.stop();
  await w.containerd.stop();
});
