import assert from "node:assert/strict";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import type { V1Container, V1Pod, V1Secret } from "@kubernetes/client-node";
import { FakeClock } from "./clock.ts";
import { CriConnection } from "./cri_connection.ts";
import type { EventRecorder, ObjectRef } from "./dependencies.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "./fake_remote_runtime.ts";
import { type EnsureImageResult, ImageManager, type ImageManagerOptions } from "./image_manager.ts";
import { type ImageManagerService, RemoteImageService } from "./remote_image.ts";

const PRESENT = "docker.io/library/busybox:1.36";

interface Recorded {
  readonly type: string;
  readonly reason: string;
  readonly message: string;
}

interface Harness extends AsyncDisposable {
  readonly fake: FakeRemoteRuntime;
  readonly images: RemoteImageService;
  readonly events: Recorded[];
  readonly clock: FakeClock;
  manager(opts?: Partial<ImageManagerOptions>): ImageManager;
  /** The object of each event, in order. */
  readonly refs: ObjectRef[];
}

async function harness(): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "image-manager-" });
  const fake = await startFakeRuntime({ preloadImages: [PRESENT], socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const images = new RemoteImageService({ connection, timeoutMs: 10_000 });
  const events: Recorded[] = [];
  const refs: ObjectRef[] = [];
  const recorder: EventRecorder = {
    event: (ref, type, reason, message) => {
      refs.push(ref);
      events.push({ type, reason, message });
    },
  };
  const clock = new FakeClock();
  return {
    fake,
    images,
    events,
    refs,
    clock,
    manager: (opts) => new ImageManager({ imageService: images, recorder, clock, ...opts }),
    async [Symbol.asyncDispose]() {
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function pod(uid = "uid-1"): V1Pod {
  return { metadata: { name: "web", namespace: "default", uid } };
}

function ensure(
  m: ImageManager,
  container: V1Container,
  pullSecrets: V1Secret[] = [],
  p = pod(),
): Promise<EnsureImageResult> {
  return m.ensureImageExists(AbortSignal.timeout(10_000), { pod: p, container, pullSecrets });
}

function dockerSecret(registry: string, username: string, password: string): V1Secret {
  const config = { auths: { [registry]: { auth: btoa(`${username}:${password}`) } } };
  return {
    type: "kubernetes.io/dockerconfigjson",
    data: { ".dockerconfigjson": btoa(JSON.stringify(config)) },
  };
}

const reasons = (events: Recorded[]) => events.map((e) => e.reason);

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("ImageManager IfNotPresent uses a present image without pulling", async () => {
  await using h = await harness();
  const res = await ensure(h.manager(), { name: "c", image: "busybox:1.36" });
  assert.ok("imageRef" in res && res.imageRef.startsWith("sha256:"));
  assert.equal(h.fake.service.images.pulls.length, 0);
  assert.deepEqual(h.events, [{
    type: "Normal",
    reason: "Pulled",
    message: 'Container image "busybox:1.36" already present on machine',
  }]);
});

Deno.test("ImageManager Never fails with ErrImageNeverPull when the image is absent", async () => {
  await using h = await harness();
  const res = await ensure(h.manager(), { name: "c", image: "nginx:1", imagePullPolicy: "Never" });
  const message = 'Container image "nginx:1" is not present with pull policy of Never';
  assert.deepEqual(res, { error: { reason: "ErrImageNeverPull", message } });
  assert.deepEqual(h.events, [{ type: "Warning", reason: "ErrImageNeverPull", message }]);
  assert.equal(h.fake.service.images.pulls.length, 0);
});

Deno.test("ImageManager defaults an untagged image to Always and pulls it with the tag", async () => {
  await using h = await harness();
  h.fake.service.images.add("nginx:latest");
  const res = await ensure(h.manager(), { name: "c", image: "nginx" });
  assert.ok("imageRef" in res);
  assert.deepEqual(h.fake.service.images.pulls.map((p) => [p.image, p.auth]), [[
    "nginx:latest",
    undefined,
  ]]);
  const size = h.fake.service.images.get("nginx")?.size;
  assert.deepEqual(h.events, [
    { type: "Normal", reason: "Pulling", message: 'Pulling image "nginx"' },
    {
      type: "Normal",
      reason: "Pulled",
      message:
        `Successfully pulled image "nginx" in 0s (0s including waiting). Image size: ${size} bytes.`,
    },
  ]);
});

Deno.test("ImageManager rejects an unparsable image as InvalidImageName", async () => {
  await using h = await harness();
  const res = await ensure(h.manager(), { name: "c", image: "Bad Image" });
  assert.ok("error" in res && res.error.reason === "InvalidImageName");
  assert.match(res.error.message, /^Failed to apply default image tag "Bad Image": invalid/);
  assert.deepEqual(reasons(h.events), ["InspectFailed"]);
});

Deno.test("ImageManager backs off 10s after a failed pull, then doubles", async () => {
  await using h = await harness();
  h.fake.service.images.failPull("nginx:1", grpc.status.NOT_FOUND);
  const m = h.manager();
  const c: V1Container = { name: "c", image: "nginx:1" };
  const pulls = () => h.fake.service.images.pulls.length;

  const first = await ensure(m, c);
  assert.ok("error" in first && first.error.reason === "ErrImagePull");
  // Upstream's text of a gRPC error, without our RPC name.
  assert.match(first.error.message, /^rpc error: code = NotFound desc = /);
  assert.deepEqual(reasons(h.events), ["Pulling", "Failed"]);
  assert.equal(h.events[1]?.type, "Warning");
  assert.equal(h.events[1]?.message, `Failed to pull image "nginx:1": ${first.error.message}`);

  h.clock.step(9_999);
  assert.deepEqual(await ensure(m, c), {
    error: {
      reason: "ImagePullBackOff",
      message: `Back-off pulling image "nginx:1": ErrImagePull: ${first.error.message}`,
    },
  });
  assert.deepEqual(h.events.at(-1), {
    type: "Normal",
    reason: "BackOff",
    message: 'Back-off pulling image "nginx:1"',
  });
  assert.equal(pulls(), 1);
  // Another pod's key is independent.
  const other = await ensure(m, c, [], pod("uid-2"));
  assert.ok("error" in other && other.error.reason === "ErrImagePull");
  assert.equal(pulls(), 2);

  h.clock.step(1);
  const second = await ensure(m, c);
  assert.ok("error" in second && second.error.reason === "ErrImagePull");
  assert.equal(pulls(), 3);
  h.clock.step(19_999);
  const third = await ensure(m, c);
  assert.ok("error" in third && third.error.reason === "ImagePullBackOff");
  h.clock.step(1);
  const fourth = await ensure(m, c);
  assert.ok("error" in fourth && fourth.error.reason === "ErrImagePull");
  assert.equal(pulls(), 4);
});

Deno.test("ImageManager sends the pull secret that matches the registry host", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth("quay.io/team/app:1", { username: "bob", password: "pw" });
  const secrets = [dockerSecret("other.io", "eve", "x"), dockerSecret("quay.io", "bob", "pw")];
  const res = await ensure(h.manager(), { name: "c", image: "quay.io/team/app:1" }, secrets);
  assert.ok("imageRef" in res);
  const auths = h.fake.service.images.pulls.map((p) => [p.auth?.username, p.auth?.password]);
  assert.deepEqual(auths, [["bob", "pw"]]);
});

Deno.test("ImageManager tries each matching credential in order until one works", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth("quay.io/app:1", { username: "bob", password: "pw" });
  const secrets = [dockerSecret("quay.io", "old", "x"), dockerSecret("quay.io", "bob", "pw")];
  const res = await ensure(h.manager(), { name: "c", image: "quay.io/app:1" }, secrets);
  assert.ok("imageRef" in res);
  assert.deepEqual(h.fake.service.images.pulls.map((p) => p.auth?.username), ["old", "bob"]);
});

Deno.test("ImageManager pulls anonymously when no secret matches", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth("quay.io/app:1", { username: "bob", password: "pw" });
  const res = await ensure(h.manager(), { name: "c", image: "quay.io/app:1" }, [
    dockerSecret("registry.example.com", "bob", "pw"),
  ]);
  assert.ok("error" in res && res.error.reason === "ErrImagePull");
  assert.match(res.error.message, /401 Unauthorized/);
  assert.deepEqual(h.fake.service.images.pulls.map((p) => p.auth), [undefined]);
});

/** The real image service with each pull held until the test releases it. */
function gated(inner: ImageManagerService) {
  const started: string[] = [];
  const gates: Array<() => void> = [];
  const service: ImageManagerService = {
    listImages: (...a) => inner.listImages(...a),
    imageStatus: (...a) => inner.imageStatus(...a),
    removeImage: (...a) => inner.removeImage(...a),
    imageFsInfo: (...a) => inner.imageFsInfo(...a),
    async pullImage(image, auth, sandbox, signal) {
      started.push(image.image);
      await new Promise<void>((r) => gates.push(r));
      return inner.pullImage(image, auth, sandbox, signal);
    },
  };
  return { service, started, release: () => gates.shift()?.() };
}

Deno.test("ImageManager serialises pulls: the second waits for the first", async () => {
  await using h = await harness();
  const g = gated(h.images);
  const m = h.manager({ imageService: g.service });
  const a = ensure(m, { name: "a", image: "nginx:1" });
  const b = ensure(m, { name: "b", image: "redis:7" });
  await until(() => g.started.length === 1, "the first pull");
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(g.started, ["nginx:1"]);
  g.release();
  assert.ok("imageRef" in await a);
  await until(() => g.started.length === 2, "the second pull");
  g.release();
  assert.ok("imageRef" in await b);
});

Deno.test("ImageManager runs pulls in parallel when serializeImagePulls is false", async () => {
  await using h = await harness();
  const g = gated(h.images);
  const m = h.manager({ imageService: g.service, serializeImagePulls: false });
  const a = ensure(m, { name: "a", image: "nginx:1" });
  const b = ensure(m, { name: "b", image: "redis:7" });
  await until(() => g.started.length === 2, "both pulls");
  g.release();
  g.release();
  assert.ok("imageRef" in await a && "imageRef" in await b);
});

Deno.test("ImageManager events are about the container, as upstream's container reference", async () => {
  await using h = await harness();
  const m = h.manager();
  const p: V1Pod = {
    metadata: { name: "web", namespace: "default", uid: "uid-1", resourceVersion: "42" },
    spec: { initContainers: [{ name: "setup", image: PRESENT }], containers: [] },
  };
  await ensure(m, { name: "setup", image: PRESENT }, [], p);
  await ensure(m, { name: "app", image: PRESENT }, [], p);
  assert.deepEqual(h.refs.map((r) => [r.fieldPath, r.resourceVersion]), [
    ["spec.initContainers{setup}", "42"],
    ["spec.containers{app}", "42"],
  ]);
});
