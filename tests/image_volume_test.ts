/**
 * Image volumes (`spec.volumes[].image`, GA in v1.36) end to end, through the real apiserver,
 * with the volume's image in a local registry and pulled with pullPolicy Always, as upstream's
 * conformance spec "[sig-node] ImageVolume should succeed with pod and pull policy of Always"
 * (test/e2e/common/node/image_volume.go) does with kitten. On containerd 2.x (built by
 * tests/runtime_build.ts) the pod runs and `kubectl exec cat` reads the image's files at the
 * mount path, and under a subPath, read-only. On Debian's containerd 1.6, which has no image
 * volumes (it drops CRI `Mount.image` and fails on the empty host path), the container stays in
 * CreateContainerError with the runtime's message, and the Go kubelet v1.36.3 on its own
 * containerd 1.6 shows the same reason, message and event for the same pod.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type BenchAgent, startUpstreamKubelet } from "./_bench_agents.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, type ImageSpec, importImages, PAUSE } from "./images.ts";
import { e2eSuite, POD_POLL_MS, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import {
  type PushedImage,
  pushImage,
  type RegistryHandle,
  startRegistry,
} from "./registry_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("image volume e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "docker-registry",
]);
/** Our agent on containerd 2.x. */
const NODE2 = "kts-imgvol-c2";
/** Our agent on Debian's containerd 1.6. */
const NODE16 = "kts-imgvol-c16";
/** The Go kubelet on another containerd 1.6. */
const NODE_UPSTREAM = "kts-imgvol-up";
const NS = "default";

/** What the conformance spec reads from kitten, in files of our own. */
const DATA_JSON = '{"image": "kitten.jpg", "source": "kubelet-ts image volume e2e"}\n';
const OS_RELEASE = 'NAME="kubelet-ts image volume"\nID=kubelet-ts\n';

/** The image the volume mounts: busybox (as every test image) plus the two files. */
const VOLUME_IMAGE: ImageSpec = {
  name: "kubelet-ts.local/image-volume/data:1",
  files: { "/data.json": DATA_JSON, "/etc/os-release": OS_RELEASE },
};

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly registry: RegistryHandle;
  readonly volumeImage: PushedImage;
  /** containerd 2.x and our agent on {@link NODE2}. */
  readonly containerd2: ContainerdHandle;
  readonly agent: RunningAgent;
  /** Debian's containerd 1.6 and our agent on {@link NODE16}. */
  readonly containerd16: ContainerdHandle;
  readonly agent16: RunningAgent;
  /** Another containerd 1.6 and the Go kubelet on {@link NODE_UPSTREAM}. */
  readonly containerdUpstream: ContainerdHandle;
  readonly upstream: BenchAgent;
}

const suite = e2eSuite<World>({
  name: "image volume",
  gate,
  userAgent: "image-volume-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "imgvol-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(
        await startControlPlane({
          dir: join(dir, "cp"),
          nodeNames: [NODE2, NODE16, NODE_UPSTREAM],
        }),
      );
      const registry = await startRegistry({ dir: join(dir, "registry") });
      stack.defer(() => registry.stop());
      const volumeImage = await pushImage({ registry, image: VOLUME_IMAGE, ref: "e2e/data:1" });
      const runtime = async (name: string, runtime: "containerd" | "containerd2") => {
        const socket = join(dir, name, "containerd.sock");
        const c = stack.use(await startContainerd({ dir: join(dir, name), socket, runtime }));
        await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
        return c;
      };
      const containerd2 = await runtime("c2", "containerd2");
      const containerd16 = await runtime("c16", "containerd");
      const containerdUpstream = await runtime("cup", "containerd");
      const agentOn = async (nodeName: string, containerd: ContainerdHandle, sub: string) => {
        await Deno.mkdir(join(dir, sub), { recursive: true });
        const { agent } = await startNodeAgent({
          cp,
          dir: join(dir, sub),
          nodeName,
          endpoint: containerd.endpoint,
        });
        stack.defer(async () => {
          agent.process.kill("SIGTERM");
          await agent.process.status;
        });
        return agent;
      };
      const agent = await agentOn(NODE2, containerd2, "node-c2");
      const agent16 = await agentOn(NODE16, containerd16, "node-c16");
      const upstream = await startUpstreamKubelet({
        cp,
        dir: join(dir, "node-up"),
        nodeName: NODE_UPSTREAM,
        endpoint: containerdUpstream.endpoint,
        log: (line) => console.error(line),
      });
      stack.move();
      return {
        dir,
        cp,
        registry,
        volumeImage,
        containerd2,
        agent,
        containerd16,
        agent16,
        containerdUpstream,
        upstream,
      };
    } catch (e) {
      // Nothing of a world that did not start may outlive the test run.
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

/** The conformance spec's pod: busybox looping, the image volume at /volume (and more). */
function podManifest(
  name: string,
  nodeName: string,
  reference: string,
  mounts: { mountPath: string; subPath?: string }[] = [{ mountPath: "/volume" }],
): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { e2e: "image-volume" } },
    spec: {
      nodeName,
      restartPolicy: "Always",
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 2,
      containers: [{
        name: "test-container",
        image: BUSYBOX_IMAGE,
        command: ["/bin/sh", "-c", "while true; do echo test; sleep 1; done"],
        volumeMounts: mounts.map((m) => ({ name: "volume", ...m })),
      }],
      volumes: [{ name: "volume", image: { reference, pullPolicy: "Always" } }],
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

async function exec(w: World, pod: string, command: string[]): Promise<string> {
  const r = await w.cp.kubectl(["exec", pod, "-n", NS, "-c", "test-container", "--", ...command]);
  assert.equal(r.code, 0, `${command.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** The parts of a core/v1 Event these tests read. */
interface PodEvent {
  type: string;
  reason: string;
  message: string;
  involvedObject: { name: string; fieldPath?: string };
}

async function podEvents(w: World, name: string): Promise<PodEvent[]> {
  const r = await w.cp.kubectl(["get", "events", "-n", NS, "-o", "json"]);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout).items as PodEvent[]).filter((e) => e.involvedObject.name === name);
}

function status(p: V1Pod): V1ContainerStatus | undefined {
  return p.status?.containerStatuses?.find((c) => c.name === "test-container");
}

suite.test(
  "on containerd 2.x the image's files are in the container, read-only",
  async (w, api) => {
    const name = "test-pod";
    await create(
      w,
      podManifest(name, NODE2, w.volumeImage.ref, [
        { mountPath: "/volume" },
        { mountPath: "/etc-volume", subPath: "etc" },
      ]),
    );
    await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running", 120_000);

    // What upstream's spec checks, with our image's files.
    assert.match(await exec(w, name, ["/bin/cat", "/volume/data.json"]), /kitten\.jpg/);
    assert.equal(await exec(w, name, ["/bin/cat", "/volume/etc/os-release"]), OS_RELEASE);
    assert.equal(await exec(w, name, ["/bin/cat", "/etc-volume/os-release"]), OS_RELEASE);
    // The subPath mounts only that directory of the image.
    const etc = await exec(w, name, ["/bin/ls", "/etc-volume"]);
    assert.equal(etc, await exec(w, name, ["/bin/ls", "/volume/etc"]));
    assert.match(etc, /^os-release$/m);
    assert.doesNotMatch(etc, /data\.json/);
    // Read-only whatever the volumeMount says.
    const write = await w.cp.kubectl([
      ...["exec", name, "-n", NS, "-c", "test-container", "--"],
      ...["/bin/sh", "-c", "touch /volume/new 2>&1; echo rc=$?"],
    ]);
    assert.match(write.stdout, /Read-only file system[\s\S]*rc=1/, write.stdout + write.stderr);

    // pullPolicy Always pulled the volume image, with events about the pod.
    const events = await podEvents(w, name);
    const pulling = events.find((e) =>
      e.reason === "Pulling" && e.message === `Pulling image "${w.volumeImage.ref}"`
    );
    assert.ok(pulling, JSON.stringify(events, null, 1));
    assert.equal(pulling.involvedObject.fieldPath, undefined, "about the pod, not a container");
    assert.ok(
      events.some((e) =>
        e.reason === "Pulled" &&
        e.message.startsWith(`Successfully pulled image "${w.volumeImage.ref}"`)
      ),
      JSON.stringify(events, null, 1),
    );

    // The image is on the node now; Always pulls it again for the next pod all the same.
    await create(w, podManifest("test-pod-2", NODE2, w.volumeImage.ref));
    await waitPod(api, NS, "test-pod-2", "Running", (p) => p.status?.phase === "Running", 120_000);
    assert.ok(
      (await podEvents(w, "test-pod-2")).some((e) => e.reason === "Pulling"),
      "pulled again",
    );
    assert.match(await exec(w, "test-pod-2", ["/bin/cat", "/volume/data.json"]), /kitten\.jpg/);
  },
);

suite.test(
  "a failed pull of the volume's image is the container's ErrImagePull",
  async (w, api) => {
    const name = "missing-image";
    const missing = `${w.registry.host}/e2e/absent:1`;
    await create(w, podManifest(name, NODE2, missing));
    const p = await waitPod(
      api,
      NS,
      name,
      "ErrImagePull or ImagePullBackOff",
      (p) => ["ErrImagePull", "ImagePullBackOff"].includes(status(p)?.state?.waiting?.reason ?? ""),
    );
    assert.match(status(p)?.state?.waiting?.message ?? "", new RegExp(`absent|not found`));
    const events = await poll(
      "the Failed event of the container",
      async () => {
        const events = await podEvents(w, name);
        return events.some((e) => e.reason === "Failed" && e.message === "Error: ErrImagePull")
          ? events
          : undefined;
      },
      60_000,
      POD_POLL_MS,
    );
    assert.ok(
      events.some((e) =>
        e.reason === "Failed" && e.message.startsWith(`Failed to pull image "${missing}"`)
      ),
    );
  },
);

/** The container's waiting reason, message and Failed event on one node, ids made generic. */
async function createContainerError(
  w: World,
  api: KubeClient,
  name: string,
  nodeName: string,
): Promise<{ reason: string; message: string; event: string }> {
  await create(w, podManifest(name, nodeName, w.volumeImage.ref));
  const p = await waitPod(
    api,
    NS,
    name,
    "CreateContainerError",
    (p) => status(p)?.state?.waiting?.reason === "CreateContainerError",
    120_000,
  );
  assert.equal(p.status?.phase, "Pending");
  const event = await poll(
    `the Failed event of ${name}`,
    async () =>
      (await podEvents(w, name)).find((e) =>
        e.reason === "Failed" && e.message.startsWith("Error: ") &&
        e.involvedObject.fieldPath === "spec.containers{test-container}"
      ),
    60_000,
    POD_POLL_MS,
  );
  const generic = (s: string) => s.replace(/\b[0-9a-f]{64}\b/g, "<id>");
  return {
    reason: "CreateContainerError",
    message: generic(status(p)?.state?.waiting?.message ?? ""),
    event: generic(event.message),
  };
}

suite.test(
  "on containerd 1.6 the pod fails as under the Go kubelet, with the runtime's error",
  async (w, api) => {
    const ours = await createContainerError(w, api, "on-c16", NODE16);
    const theirs = await createContainerError(w, api, "on-upstream", NODE_UPSTREAM);
    console.error(
      `containerd 1.6: ours ${JSON.stringify(ours)}\nGo kubelet ${JSON.stringify(theirs)}`,
    );
    assert.deepEqual(ours, theirs);
    // containerd 1.6 ignores Mount.image and cannot make the empty host path.
    assert.match(ours.message, /failed to mkdir "": mkdir : no such file or directory/);
    assert.equal(ours.event, `Error: ${ours.message}`);
  },
);

suite.teardown("stop", async (w) => {
  const code = await w.upstream.stop();
  if (code !== 0) console.error(`the Go kubelet exited ${code}`);
  w.agent16.process.kill("SIGTERM");
  await w.agent16.process.status;
  await w.containerdUpstream.stop();
  await w.containerd16.stop();
  await w.containerd2.stop();
  await w.registry.stop();
});
