/**
 * Device plugins end to end: our agent on real containerd with the real apiserver, and
 * upstream's sample device plugin (k8s.io/kubernetes test/images/sample-device-plugin v1.36.3,
 * built into the image upstream's e2e names, tests/device_build.ts) running as a pod on the node
 * with the kubelet's device plugin directory mounted where it expects it.
 *
 * - The plugin registers on `<root-dir>/device-plugins/kubelet.sock`; its two devices become
 *   `example.com/resource` capacity and allocatable of the Node.
 * - A pod asking for one gets it: the plugin's mount (`/tmp/Dev-N`) is in its container, and the
 *   pod resources API (`<root-dir>/pod-resources/kubelet.sock`) lists the assignment.
 * - A pod asking for more than is free is rejected with UnexpectedAdmissionError.
 * - A kubelet restart keeps the pod running with its device (the checkpoint), and the plugin,
 *   seeing the kubelet's socket made again, registers again.
 * - A plugin restarted registers again; a pod gone frees its device for the next pod.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import { CriConnection, criMethods } from "../src/cri/connection.ts";
import { PodResourcesListerDefinition } from "../proto/podresources/v1/api.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  ensureDeviceImages,
  SAMPLE_DEVICE_IDS,
  SAMPLE_DEVICE_PLUGIN_IMAGE,
  SAMPLE_DEVICE_RESOURCE,
} from "./device_build.ts";
import {
  createObject,
  deletePodAndWait,
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  getPod,
  poll,
  restartAgent,
  startNodeAgent,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("device plugin e2e tests", ["containerd", "runc", "go"]);
const NODE = "kts-device-plugins";
const NODE_CDI = "kts-device-plugins-cdi";
const NS = "default";
const LISTER = criMethods(PodResourcesListerDefinition);

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly node: string;
  readonly containerd: ContainerdHandle;
  agent: RunningAgent;
  readonly args: string[];
  readonly rootDir: string;
}

/** A control plane, a containerd (`runtime`) with the images, and the agent: one node. */
async function startWorld(
  node: string,
  runtime?: "containerd2",
): Promise<World> {
  const dir = await Deno.makeTempDir({ prefix: "device-plugin-e2e-" });
  const stack = new AsyncDisposableStack();
  try {
    const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [node] }));
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = stack.use(
      await startContainerd({ dir: join(dir, "containerd"), socket, runtime }),
    );
    await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
    await ensureDeviceImages({ components: ["sampledeviceplugin"], containerdSocket: socket });
    const { agent, args } = await startNodeAgent({
      cp,
      dir,
      nodeName: node,
      endpoint: containerd.endpoint,
      // Devices reach the Node's status sooner than with upstream's 10 s.
      configLines: ["nodeStatusUpdateFrequency: 2s"],
    });
    // No controller manager here: the service accounts and root CA its controllers make.
    for (const ns of [NS, "kube-system"]) {
      await ensureDefaultServiceAccount(cp, ns);
      await ensureRootCAConfigMap(cp, ns);
    }
    stack.move();
    return { dir, node, cp, containerd, agent, args, rootDir: join(dir, "root") };
  } catch (e) {
    await stack.disposeAsync();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw e;
  }
}

const suite = e2eSuite<World>({
  name: "device plugins",
  gate,
  userAgent: "device-plugin-e2e-test",
  start: () => startWorld(NODE),
});
const e2e = suite.test;

/**
 * The sample plugin as upstream's manifests run it, its directory at the kubelet's; with `cdi`,
 * as upstream's node e2e runs it (CDI_ENABLED, its CDI spec written to the host's /var/run/cdi,
 * where containerd 2.x reads CDI specs).
 */
async function startPlugin(w: World, name = "sample-device-plugin", cdi = false): Promise<void> {
  const mounts = [{ name: "device-plugins", mountPath: "/var/lib/kubelet/device-plugins" }];
  const volumes: unknown[] = [{
    name: "device-plugins",
    hostPath: { path: join(w.rootDir, "device-plugins"), type: "Directory" },
  }];
  if (cdi) {
    mounts.push({ name: "cdi", mountPath: "/var/run/cdi" });
    volumes.push({ name: "cdi", hostPath: { path: "/var/run/cdi", type: "DirectoryOrCreate" } });
  }
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: "kube-system" },
    spec: {
      nodeName: w.node,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "plugin",
        image: SAMPLE_DEVICE_PLUGIN_IMAGE,
        ...(cdi ? { env: [{ name: "CDI_ENABLED", value: "1" }] } : {}),
        volumeMounts: mounts,
      }],
      volumes,
    },
  });
}

function deletePod(w: World, api: KubeClient, name: string, ns = NS): Promise<void> {
  return deletePodAndWait(w.cp, api, ns, name);
}

/** A pod asking for `count` of the plugin's devices, listing the device files it was given. */
async function devicePod(
  w: World,
  name: string,
  count: number,
  script = "ls -d /tmp/Dev-*; sleep 3600",
): Promise<void> {
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: w.node,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        command: ["sh", "-c", script],
        resources: { limits: { [SAMPLE_DEVICE_RESOURCE]: String(count) } },
      }],
    },
  });
}

async function nodeDevices(api: KubeClient, node = NODE): Promise<[string?, string?]> {
  const n = await api.get<V1Node>(`/api/v1/nodes/${node}`);
  return [
    n.status?.capacity?.[SAMPLE_DEVICE_RESOURCE],
    n.status?.allocatable?.[SAMPLE_DEVICE_RESOURCE],
  ];
}

async function waitNodeDevices(
  api: KubeClient,
  want: string,
  what: string,
  node = NODE,
): Promise<void> {
  await poll(
    what,
    async () => {
      const [cap, alloc] = await nodeDevices(api, node);
      return cap === want && alloc === want ? true : undefined;
    },
    90_000,
    500,
  );
}

/** The pod resources API's answer for pod `name`'s container `main`: its device IDs. */
async function assignedDevices(w: World, name: string): Promise<string[]> {
  const conn = new CriConnection({
    endpoint: join(w.rootDir, "pod-resources", "kubelet.sock"),
  });
  try {
    const list = await conn.unary(LISTER.list, {}, { timeoutMs: 10_000 });
    const pod = list.podResources.find((p) => p.name === name && p.namespace === NS);
    assert.ok(pod, `pod ${name} is listed`);
    return pod.containers.find((c) => c.name === "main")!.devices
      .filter((d) => d.resourceName === SAMPLE_DEVICE_RESOURCE)
      .flatMap((d) => d.deviceIds).sort();
  } finally {
    conn.close();
  }
}

function registrations(w: World): number {
  return w.agent.stderr().split("\n").filter((l) =>
    l.includes("Got registration request from device plugin with resource") &&
    l.includes(SAMPLE_DEVICE_RESOURCE)
  ).length;
}

async function logsOf(w: World, name: string): Promise<string> {
  const r = await w.cp.kubectl(["logs", name, "-n", NS]);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout;
}

e2e("the sample device plugin registers and its devices become the Node's", async (w, api) => {
  await startPlugin(w);
  await waitNodeDevices(api, String(SAMPLE_DEVICE_IDS.length), "example.com/resource on the Node");
  assert.equal(registrations(w), 1);
  // The pod resources API lists both as allocatable.
  const conn = new CriConnection({ endpoint: join(w.rootDir, "pod-resources", "kubelet.sock") });
  try {
    const alloc = await conn.unary(LISTER.getAllocatableResources, {}, { timeoutMs: 10_000 });
    assert.deepEqual(
      alloc.devices.filter((d) => d.resourceName === SAMPLE_DEVICE_RESOURCE)
        .flatMap((d) => d.deviceIds).sort(),
      [...SAMPLE_DEVICE_IDS],
    );
  } finally {
    conn.close();
  }
});

e2e(
  "a pod gets a device with the plugin's mount, and the pod resources API lists it",
  async (w, api) => {
    await devicePod(w, "gpu-user", 1);
    await waitPod(api, NS, "gpu-user", "Running", (p) => p.status?.phase === "Running", 90_000);
    const devices = await assignedDevices(w, "gpu-user");
    assert.equal(devices.length, 1);
    assert.ok(SAMPLE_DEVICE_IDS.includes(devices[0]!), devices[0]);
    // The plugin's Allocate answer mounts /tmp/<device> into the container.
    await poll(
      "the device's mount in the logs",
      async () => {
        return (await logsOf(w, "gpu-user")).trim() === `/tmp/${devices[0]}` ? true : undefined;
      },
      30_000,
      500,
    );
    const checkpoint = await Deno.readTextFile(
      join(w.rootDir, "device-plugins", "kubelet_internal_checkpoint"),
    );
    assert.match(
      checkpoint,
      new RegExp(`"ContainerName":"main","ResourceName":"example.com/resource"`),
    );
  },
);

e2e(
  "a pod asking for more devices than are free is rejected with UnexpectedAdmissionError",
  async (w, api) => {
    await devicePod(w, "greedy", 2);
    const p = await waitPod(
      api,
      NS,
      "greedy",
      "Failed",
      (p) => p.status?.phase === "Failed",
      60_000,
    );
    assert.equal(p.status?.reason, "UnexpectedAdmissionError");
    assert.equal(
      p.status?.message,
      "Pod was rejected: Allocate failed due to requested number of devices unavailable for " +
        "example.com/resource. Requested: 2, Available: 1, which is unexpected",
    );
    await deletePod(w, api, "greedy");
  },
);

e2e("a kubelet restart keeps the pod's device, and the plugin registers again", async (w, api) => {
  const before = await getPod(api, NS, "gpu-user");
  const devices = await assignedDevices(w, "gpu-user");
  await restartAgent(w);
  // The plugin sees kubelet.sock made again and registers again.
  await poll(
    "the plugin registered again",
    () => Promise.resolve(registrations(w) || undefined),
    60_000,
    500,
  );
  await waitNodeDevices(api, "2", "example.com/resource back on the Node");
  const after = await getPod(api, NS, "gpu-user");
  assert.equal(after.status?.phase, "Running");
  assert.equal(
    after.status?.containerStatuses?.[0]?.restartCount,
    before.status?.containerStatuses?.[0]?.restartCount,
  );
  assert.deepEqual(await assignedDevices(w, "gpu-user"), devices);
  // The other device is still the only free one.
  await devicePod(w, "second", 1);
  await waitPod(api, NS, "second", "Running", (p) => p.status?.phase === "Running", 90_000);
  const other = await assignedDevices(w, "second");
  assert.deepEqual([...devices, ...other].sort(), [...SAMPLE_DEVICE_IDS]);
  await deletePod(w, api, "second");
});

e2e(
  "a restarted plugin registers again, and a deleted pod's device goes to the next pod",
  async (w, api) => {
    const seen = registrations(w);
    await deletePod(w, api, "sample-device-plugin", "kube-system");
    await startPlugin(w);
    await poll(
      "the new plugin registered",
      () => Promise.resolve(registrations(w) > seen || undefined),
      60_000,
      500,
    );
    await waitNodeDevices(api, "2", "example.com/resource on the Node");
    await deletePod(w, api, "gpu-user");
    await devicePod(w, "both", 2);
    await waitPod(api, NS, "both", "Running", (p) => p.status?.phase === "Running", 90_000);
    assert.deepEqual(await assignedDevices(w, "both"), [...SAMPLE_DEVICE_IDS]);
    await deletePod(w, api, "both");
  },
);

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});

const cdiSuite = e2eSuite<World>({
  name: "device plugins with CDI (containerd 2.x)",
  gate,
  userAgent: "device-plugin-cdi-e2e-test",
  start: () => startWorld(NODE_CDI, "containerd2"),
});

cdiSuite.test(
  "the plugin's CDI device reaches the container through the runtime: its env and device node",
  async (w, api) => {
    await startPlugin(w, "sample-device-plugin", true);
    await waitNodeDevices(api, String(SAMPLE_DEVICE_IDS.length), "example.com/resource", w.node);
    await devicePod(
      w,
      "cdi-user",
      1,
      'echo "CDI_DEVICE=$CDI_DEVICE"; ls /tmp/; test -b "/tmp/$CDI_DEVICE" && echo block; sleep 3600',
    );
    await waitPod(api, NS, "cdi-user", "Running", (p) => p.status?.phase === "Running", 90_000);
    const [id] = await assignedDevices(w, "cdi-user");
    // containerd applied the CDI spec's edits: the env and the block device node.
    await poll(
      "the CDI edits in the logs",
      async () => {
        const logs = await logsOf(w, "cdi-user");
        return logs.includes(`CDI_DEVICE=CDI-${id}\n`) && logs.includes("block\n")
          ? true
          : undefined;
      },
      30_000,
      500,
    );
    await deletePod(w, api, "cdi-user");
    await deletePod(w, api, "sample-device-plugin", "kube-system");
  },
);

cdiSuite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
