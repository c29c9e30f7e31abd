/**
 * Image pull policies end to end: the agent against a real kube-apiserver, a private containerd
 * and two local registries (one open, one behind basic auth) runs pods whose images are absent,
 * imported or in a registry, under imagePullPolicy Never, IfNotPresent and Always, with and
 * without a kubernetes.io/dockerconfigjson pull secret. Each case checks the container's waiting
 * reason and message, the pod phase, the kubelet's events with upstream's reasons and messages
 * (pkg/kubelet/images/image_manager.go), and, by the manifest digest in the container's imageID
 * after new content was pushed under the same tag, whether a pod pulled or used what the node had.
 * Upstream's counterparts are the image pull cases of test/e2e/common/node/runtime.go and
 * test/e2e_node/image_pull_test.go.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { ctrOrThrow, type ImageSpec, importImages, PAUSE } from "./images.ts";
import { e2eSuite, getPod, POD_POLL_MS, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import {
  type PushedImage,
  pushImage,
  type RegistryAuth,
  type RegistryHandle,
  startRegistry,
} from "./registry_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("image pull e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "docker-registry",
  "htpasswd",
]);
const NODE = "kts-pull-e2e";
const NS = "default";
const AUTH: RegistryAuth = { username: "puller", password: "pull-e2e-s3cret" };

/**
 * A busybox image told apart by a label, so each has its own config and manifest digest: the
 * runtime then names a container's image by the one tag it was pulled under, and a digest in a
 * container's imageID says which content it runs.
 */
function variant(name: string): ImageSpec {
  // The name only names the build cache entry; pushes and tags give the registry-local names.
  return {
    name: `kubelet-ts.local/pull-e2e/${name}:1`,
    cmd: ["sh"],
    labels: { "io.kubelet-ts.e2e.variant": name },
  };
}

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  /** Plain HTTP, no auth. */
  readonly open: RegistryHandle;
  /** Plain HTTP behind basic auth ({@link AUTH}). */
  readonly closed: RegistryHandle;
  /** What was pushed to a registry at start, by repository (`e2e/never`, ...). */
  readonly pushed: ReadonlyMap<string, PushedImage>;
  readonly agent: RunningAgent;
}

const suite = e2eSuite<World>({
  name: "image pull",
  gate,
  userAgent: "pull-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "pull-e2e-" });
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    const open = await startRegistry({ dir: join(dir, "registry-open") });
    const closed = await startRegistry({ dir: join(dir, "registry-auth"), auth: AUTH });
    const pushed = new Map<string, PushedImage>();
    const push = async (
      registry: RegistryHandle,
      repo: string,
      image: string,
      auth?: RegistryAuth,
    ) =>
      pushed.set(
        repo,
        await pushImage({ registry, image: variant(image), ref: `${repo}:1`, auth }),
      );
    await push(open, "e2e/never", "never");
    await push(open, "e2e/ifnotpresent", "ifnp-v1");
    await push(open, "e2e/always", "always-v1");
    await push(closed, "e2e/private", "private", AUTH);
    // The sandbox image must be there. The preloaded image is on the node only, under a
    // registry-local name the registry does not have.
    const local = variant("preloaded");
    await importImages({ containerdSocket: socket, images: [PAUSE, local] });
    const ctr = (args: string[], what: string) => ctrOrThrow(socket, "k8s.io", args, { what });
    await ctr(["images", "tag", local.name, preloaded(open)], "tag the preloaded image");
    await ctr(["images", "rm", local.name], "drop the preloaded image's build name");
    const { agent } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
      // A pod in image pull back-off is synced again only at its resync (upstream too): 10 s
      // instead of 1 min lets the back-off show in the status within seconds.
      configLines: ["syncFrequency: 10s"],
    });
    return { dir, cp, containerd, open, closed, pushed, agent };
  },
});
const e2e = suite.test;

/** The image on the node only (imported, then tagged with this name), in no registry. */
function preloaded(open: RegistryHandle): string {
  return `${open.host}/e2e/preloaded:1`;
}

interface PodOptions {
  policy: "Never" | "IfNotPresent" | "Always";
  pullSecret?: string;
}

/** A pod bound to the node with one container "main" that runs `image` and sleeps. */
function podManifest(name: string, image: string, o: PodOptions): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { e2e: "pull" } },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 2,
      ...(o.pullSecret ? { imagePullSecrets: [{ name: o.pullSecret }] } : {}),
      containers: [{
        name: "main",
        image,
        imagePullPolicy: o.policy,
        command: ["sh", "-c", "sleep 3600"],
      }],
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

function mainStatus(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.containerStatuses?.find((c) => c.name === "main");
}

/** The parts of a core/v1 Event these tests read. */
interface PodEvent {
  type: string;
  reason: string;
  message: string;
  involvedObject: { kind?: string; name: string; fieldPath?: string };
}

/** The events about pod `name`, from `kubectl get events -o json`. */
async function podEvents(w: World, name: string): Promise<PodEvent[]> {
  const r = await w.cp.kubectl(["get", "events", "-n", NS, "-o", "json"]);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout).items as PodEvent[]).filter((e) => e.involvedObject.name === name);
}

/** Polls the events of pod `name` until one has `reason` (and a message `match` accepts). */
async function waitEvent(
  w: World,
  name: string,
  reason: string,
  match: (message: string) => boolean = () => true,
  ms = 60_000,
): Promise<PodEvent[]> {
  return await poll(
    `a ${reason} event about ${name}`,
    async () => {
      const events = await podEvents(w, name);
      return events.some((e) => e.reason === reason && match(e.message)) ? events : undefined;
    },
    ms,
    POD_POLL_MS,
  );
}

function show(events: readonly PodEvent[]): string {
  return events.map((e) => `${e.type} ${e.reason}: ${e.message}`).join("\n");
}

/** The first event with `reason` whose message `match` accepts, asserted to be of `type`. */
function theEvent(
  events: readonly PodEvent[],
  reason: string,
  type: "Normal" | "Warning",
  match: RegExp,
): PodEvent {
  const found = events.filter((e) => e.reason === reason && match.test(e.message));
  assert.ok(
    found.length >= 1,
    `a ${type} ${reason} event matching ${match}; got:\n${show(events)}`,
  );
  assert.equal(found[0]!.type, type, show(found));
  return found[0]!;
}

function noEvent(events: readonly PodEvent[], reason: string): void {
  assert.ok(!events.some((e) => e.reason === reason), `no ${reason} event; got:\n${show(events)}`);
}

/** A RegExp matching `s` literally. */
function lit(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Go's %q of an image reference (references have no characters %q would escape). */
function q(s: string): string {
  return JSON.stringify(s);
}

/** A Go time.Duration as String() prints it: "0s", "405ms", "1.5s", "1m2.003s". */
const GO_DURATION = String.raw`(?:0s|(?:[0-9]+(?:\.[0-9]+)?(?:h|ms|µs|ns|m|s))+)`;

/** Upstream's Pulled message after a pull: both durations, then the image size. */
function pulledMessage(image: string): RegExp {
  return new RegExp(
    `^Successfully pulled image ${lit(q(image))} in ${GO_DURATION} ` +
      `\\(${GO_DURATION} including waiting\\)\\. Image size: [1-9][0-9]* bytes\\.$`,
  );
}

/**
 * Upstream's Pulled message for an image that is present. With KubeletEnsureSecretPulledImages
 * (beta and on by default since 1.35) it goes on "and can be accessed by the pod"; without the
 * gate it stops after "on machine".
 */
function presentMessage(image: string): RegExp {
  return new RegExp(
    `^Container image ${lit(q(image))} already present on machine` +
      `(?: and can be accessed by the pod)?$`,
  );
}

/** The image names the node's containerd holds (CRI namespace). */
async function nodeImages(w: World): Promise<string[]> {
  const out = await ctrOrThrow(w.containerd.socket, "k8s.io", ["images", "ls", "-q"], {
    what: "list images",
  });
  return out.split("\n").map((l) => l.trim()).filter(Boolean);
}

/** The manifest digest that was pushed to `repo` at start. */
function digestOf(w: World, repo: string): string {
  const p = w.pushed.get(repo);
  assert.ok(p, `nothing was pushed to ${repo}`);
  return p.digest;
}

/**
 * Asserts that the running container of pod `name` runs `image` with manifest `digest`: the
 * runtime (containerd 1.6) reports the image's first repo digest as the container's imageRef,
 * which the kubelet reports as imageID.
 */
async function assertRuns(api: KubeClient, name: string, image: string, digest: string) {
  const s = mainStatus(await getPod(api, NS, name));
  assert.equal(s?.image, image, JSON.stringify(s));
  const repo = image.slice(0, image.lastIndexOf(":"));
  assert.equal(s?.imageID, `${repo}@${digest}`, JSON.stringify(s));
}

/** Waits until pod `name` runs, with Created and Started events; returns its events. */
async function waitRunning(w: World, api: KubeClient, name: string): Promise<PodEvent[]> {
  const pod = await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running");
  assert.ok(mainStatus(pod)?.state?.running, JSON.stringify(mainStatus(pod)));
  const events = await waitEvent(w, name, "Started");
  theEvent(events, "Created", "Normal", /./);
  return events;
}

/**
 * Polls pod `name` until its container waits with `last`, recording every waiting reason seen
 * in between (in order, without repeats); returns them and the pod.
 */
async function waitReasons(
  api: KubeClient,
  name: string,
  last: string,
  ms: number,
): Promise<{ seen: string[]; messages: Map<string, string>; pod: V1Pod }> {
  const seen: string[] = [];
  const messages = new Map<string, string>();
  const pod = await poll(
    `pod ${name}: waiting reason ${last}`,
    async () => {
      const p = await getPod(api, NS, name);
      const waiting = mainStatus(p)?.state?.waiting;
      if (waiting?.reason && seen.at(-1) !== waiting.reason) {
        seen.push(waiting.reason);
        messages.set(waiting.reason, waiting.message ?? "");
      }
      return waiting?.reason === last ? p : undefined;
    },
    ms,
    POD_POLL_MS,
  );
  return { seen, messages, pod };
}

e2e("Never: an absent image fails with ErrImageNeverPull, a present one runs", async (w, api) => {
  // In the registry but not on the node: Never must not pull it.
  const absent = `${w.open.host}/e2e/never:1`;
  await create(w, podManifest("never-absent", absent, { policy: "Never" }));
  const neverMessage = `Container image ${q(absent)} is not present with pull policy of Never`;
  const pod = await waitPod(
    api,
    NS,
    "never-absent",
    "waiting with ErrImageNeverPull",
    (p) => mainStatus(p)?.state?.waiting?.reason === "ErrImageNeverPull",
  );
  assert.equal(mainStatus(pod)?.state?.waiting?.message, neverMessage);
  assert.equal(pod.status?.phase, "Pending");
  assert.equal(mainStatus(pod)?.ready, false);
  let events = await waitEvent(w, "never-absent", "ErrImageNeverPull");
  theEvent(events, "ErrImageNeverPull", "Warning", new RegExp(`^${lit(neverMessage)}$`));
  events = await waitEvent(w, "never-absent", "Failed", (m) => m === "Error: ErrImageNeverPull");
  noEvent(events, "Pulling");
  noEvent(events, "Pulled");
  assert.ok(!(await nodeImages(w)).includes(absent), "Never pulled nothing");

  // On the node only, and in no registry: it runs only if nothing tries to pull it.
  const present = preloaded(w.open);
  await create(w, podManifest("never-present", present, { policy: "Never" }));
  const ran = await waitRunning(w, api, "never-present");
  theEvent(ran, "Pulled", "Normal", presentMessage(present));
  noEvent(ran, "Pulling");
  noEvent(ran, "ErrImageNeverPull");
  assert.equal(mainStatus(await getPod(api, NS, "never-present"))?.image, present);
});

e2e("IfNotPresent: an absent image is pulled once, then found present", async (w, api) => {
  const image = `${w.open.host}/e2e/ifnotpresent:1`;
  assert.ok(!(await nodeImages(w)).includes(image));
  await create(w, podManifest("ifnp-first", image, { policy: "IfNotPresent" }));
  const first = await waitRunning(w, api, "ifnp-first");
  theEvent(first, "Pulling", "Normal", new RegExp(`^Pulling image ${lit(q(image))}$`));
  theEvent(first, "Pulled", "Normal", pulledMessage(image));
  const v1 = digestOf(w, "e2e/ifnotpresent");
  await assertRuns(api, "ifnp-first", image, v1);

  // New content under the same tag: a pod that does not pull keeps running the old one.
  const v2 = await pushImage({ registry: w.open, image: variant("ifnp-v2"), ref: image });
  assert.notEqual(v2.digest, v1);
  await create(w, podManifest("ifnp-second", image, { policy: "IfNotPresent" }));
  const second = await waitRunning(w, api, "ifnp-second");
  theEvent(second, "Pulled", "Normal", presentMessage(image));
  noEvent(second, "Pulling");
  await assertRuns(api, "ifnp-second", image, v1);
});

e2e("Always: every pod pulls, even when the image is present", async (w, api) => {
  const image = `${w.open.host}/e2e/always:1`;
  await create(w, podManifest("always-first", image, { policy: "Always" }));
  const first = await waitRunning(w, api, "always-first");
  theEvent(first, "Pulling", "Normal", new RegExp(`^Pulling image ${lit(q(image))}$`));
  theEvent(first, "Pulled", "Normal", pulledMessage(image));
  await assertRuns(api, "always-first", image, digestOf(w, "e2e/always"));
  assert.ok((await nodeImages(w)).includes(image), `${image} is present for the second pod`);

  // The same content again: pulled all the same.
  await create(w, podManifest("always-again", image, { policy: "Always" }));
  const again = await waitRunning(w, api, "always-again");
  theEvent(again, "Pulling", "Normal", new RegExp(`^Pulling image ${lit(q(image))}$`));
  theEvent(again, "Pulled", "Normal", pulledMessage(image));
  assert.ok(
    !again.some((e) => e.reason === "Pulled" && presentMessage(image).test(e.message)),
    `no "already present" event under Always:\n${show(again)}`,
  );

  // New content under the same tag: the next pod pulls it and runs it.
  const v2 = await pushImage({ registry: w.open, image: variant("always-v2"), ref: image });
  await create(w, podManifest("always-new", image, { policy: "Always" }));
  const fresh = await waitRunning(w, api, "always-new");
  theEvent(fresh, "Pulling", "Normal", new RegExp(`^Pulling image ${lit(q(image))}$`));
  theEvent(fresh, "Pulled", "Normal", pulledMessage(image));
  await assertRuns(api, "always-new", image, v2.digest);
});

e2e("an image missing from the registry: ErrImagePull, then ImagePullBackOff", async (w, api) => {
  const image = `${w.open.host}/e2e/missing:1`;
  await create(w, podManifest("missing", image, { policy: "IfNotPresent" }));
  // The failed pull starts a 10 s image back-off; the sync that the new sandbox's PLEG event
  // brings right after finds the image in it. The status of a sync is made before its work, so
  // ImagePullBackOff shows at the sync after that one: the resync, 10-15 s later.
  const { seen, messages, pod } = await waitReasons(api, "missing", "ImagePullBackOff", 90_000);
  const afterCreating = seen.filter((r) => r !== "ContainerCreating");
  assert.equal(afterCreating[0], "ErrImagePull", `ErrImagePull comes first; saw ${seen}`);
  assert.deepEqual(
    afterCreating.filter((r) => r !== "ErrImagePull" && r !== "ImagePullBackOff"),
    [],
    `only image pull reasons; saw ${seen}`,
  );
  // containerd's error, as the CRI call returned it.
  const pullError = new RegExp(
    `rpc error: code = NotFound desc = failed to pull and unpack image ${lit(q(image))}: ` +
      `failed to resolve reference ${lit(q(image))}: ${lit(image)}: not found$`,
  );
  assert.match(messages.get("ErrImagePull") ?? "", pullError);
  // Upstream 1.36 goes on with ": ErrImagePull: <the previous pull's error>".
  assert.match(
    mainStatus(pod)?.state?.waiting?.message ?? "",
    new RegExp(`^Back-off pulling image ${lit(q(image))}(?:$|: ErrImagePull: )`),
  );
  assert.equal(pod.status?.phase, "Pending");
  assert.equal(mainStatus(pod)?.ready, false);

  const events = await waitEvent(w, "missing", "Failed", (m) => m === "Error: ImagePullBackOff");
  theEvent(events, "Pulling", "Normal", new RegExp(`^Pulling image ${lit(q(image))}$`));
  const failed = theEvent(events, "Failed", "Warning", /^Failed to pull image /);
  assert.match(failed.message, new RegExp(`^Failed to pull image ${lit(q(image))}: `));
  assert.match(failed.message, pullError);
  theEvent(events, "Failed", "Warning", /^Error: ErrImagePull$/);
  theEvent(events, "BackOff", "Normal", new RegExp(`^Back-off pulling image ${lit(q(image))}$`));
  noEvent(events, "Pulled");
});

e2e("a registry behind auth: unauthorized without a pull secret, runs with one", async (w, api) => {
  const image = `${w.closed.host}/e2e/private:1`;
  await create(w, podManifest("private-anonymous", image, { policy: "IfNotPresent" }));
  const anonymous = await waitPod(
    api,
    NS,
    "private-anonymous",
    "waiting with ErrImagePull",
    (p) => mainStatus(p)?.state?.waiting?.reason === "ErrImagePull",
  );
  const unauthorized = new RegExp(
    `rpc error: code = Unknown desc = failed to pull and unpack image ${lit(q(image))}: ` +
      `failed to resolve reference ${lit(q(image))}: pulling from host ${lit(w.closed.host)} ` +
      `failed with status code \\[manifests 1\\]: 401 Unauthorized$`,
  );
  assert.match(mainStatus(anonymous)?.state?.waiting?.message ?? "", unauthorized);
  assert.equal(anonymous.status?.phase, "Pending");
  const denied = await waitEvent(w, "private-anonymous", "Failed", (m) => unauthorized.test(m));
  const failed = theEvent(denied, "Failed", "Warning", unauthorized);
  assert.match(failed.message, new RegExp(`^Failed to pull image ${lit(q(image))}: `));
  noEvent(denied, "Pulled");

  const secret = await w.cp.kubectl([
    ...["create", "secret", "docker-registry", "private-registry", "-n", NS],
    `--docker-server=${w.closed.host}`,
    `--docker-username=${AUTH.username}`,
    `--docker-password=${AUTH.password}`,
  ]);
  assert.equal(secret.code, 0, secret.stderr);
  const type = await w.cp.kubectl([
    ...["get", "secret", "private-registry", "-n", NS, "-o", "jsonpath={.type}"],
  ]);
  assert.equal(type.stdout, "kubernetes.io/dockerconfigjson");
  await create(
    w,
    podManifest("private-secret", image, {
      policy: "IfNotPresent",
      pullSecret: "private-registry",
    }),
  );
  const events = await waitRunning(w, api, "private-secret");
  theEvent(events, "Pulling", "Normal", new RegExp(`^Pulling image ${lit(q(image))}$`));
  theEvent(events, "Pulled", "Normal", pulledMessage(image));
  noEvent(events, "Failed");
  await assertRuns(api, "private-secret", image, digestOf(w, "e2e/private"));

  // The image is on the node now, pulled with the secret: a pod without it may not use it
  // (KEP-2535, imagePullCredentialsVerificationPolicy NeverVerifyPreloadedImages): it must pull
  // with its own credentials, and that fails.
  await create(w, podManifest("private-reuse", image, { policy: "IfNotPresent" }));
  const reuse = await waitPod(
    api,
    NS,
    "private-reuse",
    "waiting with ErrImagePull",
    (p) => mainStatus(p)?.state?.waiting?.reason === "ErrImagePull",
  );
  assert.match(mainStatus(reuse)?.state?.waiting?.message ?? "", unauthorized);
  // A pod with the secret uses it without pulling.
  await create(
    w,
    podManifest("private-secret-2", image, {
      policy: "IfNotPresent",
      pullSecret: "private-registry",
    }),
  );
  const again = await waitRunning(w, api, "private-secret-2");
  theEvent(
    again,
    "Pulled",
    "Normal",
    new RegExp(
      `^Container image ${
        lit(q(image))
      } already present on machine and can be accessed by the pod$`,
    ),
  );
  noEvent(again, "Pulling");
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
  await w.open.stop();
  await w.closed.stop();
});
