import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1ImageVolumeSource, V1Pod, V1Secret } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, GrpcCode } from "../cri/connection.ts";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import {
  type EnsureImageResult,
  ImageManager,
  type ImageManagerOptions,
  ImageManagerOptionsError,
} from "./image_manager.ts";
import { createLogger } from "../klog/klog.ts";
import { type ImageManagerService, RemoteImageService } from "../cri/remote_image.ts";
import { cacheFilename, PullRecordsStore } from "./_pull_records.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { ImageMetrics } from "../metrics/image_metrics.ts";
import type {
  ImageCredentialProvider,
  PodCoordinates,
  ProvidedCredentials,
} from "../credentialprovider/plugins.ts";

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
  /** A manager that verifies pull credentials, with its records under {@link records}. */
  verifying(opts?: Partial<ImageManagerOptions>): ImageManager;
  /** The object of each event, in order. */
  readonly refs: ObjectRef[];
  /** `<rootDirectory>/image_manager` of {@link verifying} managers. */
  readonly records: string;
  /** The log lines of {@link verifying} managers. */
  readonly lines: string[];
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
  const records = join(dir, "image_manager");
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  return {
    fake,
    images,
    events,
    refs,
    clock,
    records,
    lines,
    manager: (opts) => new ImageManager({ imageService: images, recorder, clock, ...opts }),
    verifying: (opts) =>
      new ImageManager({
        imageService: images,
        recorder,
        clock,
        recordsDirectory: records,
        logger,
        ...opts,
      }),
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

function dockerSecret(
  registry: string,
  username: string,
  password: string,
  name = "pull-secret",
): V1Secret {
  const config = { auths: { [registry]: { auth: btoa(`${username}:${password}`) } } };
  return {
    metadata: { name, namespace: "default", uid: `${name}-uid` },
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
  h.fake.service.images.failPull("nginx:1", GrpcCode.NOT_FOUND);
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

Deno.test("ImageManager fails the pull, naming the secret, when a pull secret does not parse", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth("quay.io/app:1", { username: "bob", password: "pw" });
  const broken: V1Secret = {
    metadata: { name: "broken", namespace: "default" },
    type: "kubernetes.io/dockerconfigjson",
    data: { ".dockerconfigjson": btoa("{not json") },
  };
  // The good secret would work; upstream's keyring fails as a whole, so nothing is pulled.
  const res = await ensure(h.manager(), { name: "c", image: "quay.io/app:1" }, [
    dockerSecret("quay.io", "bob", "pw"),
    broken,
  ]);
  assert.ok("error" in res && res.error.reason === "ErrImagePull", JSON.stringify(res));
  assert.match(
    res.error.message,
    /^pull secret default\/broken: .dockerconfigjson does not parse: /,
  );
  assert.deepEqual(h.fake.service.images.pulls, []);
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

Deno.test("ImageManager ensures an image volume's image with the volume's pullPolicy, events on the pod", async () => {
  await using h = await harness();
  const m = h.manager();
  const p: V1Pod = {
    metadata: { name: "web", namespace: "default", uid: "uid-1", resourceVersion: "7" },
    spec: { containers: [{ name: "app", image: PRESENT }] },
  };
  const volume = (imageVolume: V1ImageVolumeSource) =>
    m.ensureImageExists(AbortSignal.timeout(10_000), { pod: p, imageVolume, pullSecrets: [] });

  // Always pulls although the image is present (the container's policy plays no part).
  const always = await volume({ reference: "busybox:1.36", pullPolicy: "Always" });
  assert.ok("imageRef" in always && always.imageRef.startsWith("sha256:"));
  assert.deepEqual(h.fake.service.images.pulls.map((x) => x.image), ["busybox:1.36"]);
  assert.deepEqual(reasons(h.events), ["Pulling", "Pulled"]);
  assert.equal(h.events[0]?.message, 'Pulling image "busybox:1.36"');
  // The events are about the pod, with no container in them (upstream's pod reference).
  assert.deepEqual(h.refs[0], {
    kind: "Pod",
    apiVersion: "v1",
    name: "web",
    namespace: "default",
    uid: "uid-1",
    resourceVersion: "7",
  });

  // IfNotPresent, and an unset policy on a tagged reference, use what is there.
  h.events.length = 0;
  await volume({ reference: "busybox:1.36", pullPolicy: "IfNotPresent" });
  await volume({ reference: "busybox:1.36" });
  assert.equal(h.fake.service.images.pulls.length, 1);
  assert.deepEqual(h.events.map((e) => e.message), [
    'Container image "busybox:1.36" already present on machine',
    'Container image "busybox:1.36" already present on machine',
  ]);

  // Never with an absent image, and a volume with no reference, fail with the image reasons.
  assert.deepEqual(await volume({ reference: "data:2", pullPolicy: "Never" }), {
    error: {
      reason: "ErrImageNeverPull",
      message: 'Container image "data:2" is not present with pull policy of Never',
    },
  });
  const empty = await volume({ pullPolicy: "IfNotPresent" });
  assert.ok("error" in empty && empty.error.reason === "InvalidImageName", Deno.inspect(empty));
  assert.match(empty.error.message, /^Failed to apply default image tag "": /);
});

// Credential verification for images already on the node (KEP-2535).

const PRIVATE = "quay.io/team/app:1";
const ACCESSIBLE = (image: string) =>
  `Container image "${image}" already present on machine and can be accessed by the pod`;

/** A verifying manager after pod uid-1 pulled {@link PRIVATE} with bob's secret. */
async function pulledPrivate(h: Harness, opts?: Partial<ImageManagerOptions>) {
  h.fake.service.images.requireAuth(PRIVATE, { username: "bob", password: "pw" });
  const m = h.verifying(opts);
  const res = await ensure(m, { name: "c", image: PRIVATE }, [
    dockerSecret("quay.io", "bob", "pw"),
  ]);
  assert.ok("imageRef" in res, Deno.inspect(res));
  assert.deepEqual(reasons(h.events), ["Pulling", "Pulled"]);
  h.events.length = 0;
  return { m, imageRef: res.imageRef };
}

const pullsOf = (h: Harness) => h.fake.service.images.pulls.map((p) => p.auth?.username ?? null);

Deno.test("ImageManager without recordsDirectory lets any pod use a present image", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth(PRIVATE, { username: "bob", password: "pw" });
  const m = h.manager();
  await ensure(m, { name: "c", image: PRIVATE }, [dockerSecret("quay.io", "bob", "pw")]);
  h.events.length = 0;
  const res = await ensure(m, { name: "c", image: PRIVATE }, [], pod("uid-2"));
  assert.ok("imageRef" in res);
  assert.deepEqual(h.events.map((e) => e.message), [
    `Container image "${PRIVATE}" already present on machine`,
  ]);
});

Deno.test("ImageManager makes a pod without the secret pull a private image again, which fails", async () => {
  await using h = await harness();
  const { m } = await pulledPrivate(h);
  const res = await ensure(m, { name: "c", image: PRIVATE }, [], pod("uid-2"));
  assert.ok("error" in res && res.error.reason === "ErrImagePull", Deno.inspect(res));
  assert.match(res.error.message, /401 Unauthorized/);
  assert.deepEqual(reasons(h.events), ["Pulling", "Failed"]);
  assert.deepEqual(pullsOf(h), ["bob", null]);
  // The intent of the failed pull is gone.
  assert.deepEqual(await Array.fromAsync(Deno.readDir(join(h.records, "pulling"))), []);
});

Deno.test("ImageManager lets a pod with the same credentials use a private image without pulling", async () => {
  await using h = await harness();
  const { m, imageRef } = await pulledPrivate(h);
  // Another pod, another secret object with the same credentials.
  const secrets = [dockerSecret("quay.io", "bob", "pw", "copy")];
  const res = await ensure(m, { name: "c", image: PRIVATE }, secrets, pod("uid-3"));
  assert.ok("imageRef" in res && res.imageRef === imageRef, Deno.inspect(res));
  // The status read to find it present comes along, for the container's default user.
  assert.equal(res.image?.id, imageRef);
  assert.deepEqual(h.events, [{ type: "Normal", reason: "Pulled", message: ACCESSIBLE(PRIVATE) }]);
  assert.deepEqual(pullsOf(h), ["bob"]);
  // Other credentials for the registry are not enough.
  const wrong = [dockerSecret("quay.io", "eve", "x", "eve")];
  const denied = await ensure(m, { name: "c", image: PRIVATE }, wrong, pod("uid-4"));
  assert.ok("error" in denied && denied.error.reason === "ErrImagePull");
  assert.deepEqual(pullsOf(h), ["bob", "eve"]);
});

Deno.test("ImageManager lets every pod use an image pulled anonymously", async () => {
  await using h = await harness();
  const m = h.verifying();
  const first = await ensure(m, { name: "c", image: "nginx:1" });
  assert.ok("imageRef" in first);
  h.events.length = 0;
  const other = [dockerSecret("quay.io", "eve", "x", "eve")];
  const second = await ensure(m, { name: "c", image: "nginx:1" }, other, pod("uid-2"));
  assert.ok("imageRef" in second && second.imageRef === first.imageRef, Deno.inspect(second));
  assert.deepEqual(h.events.map((e) => e.message), [ACCESSIBLE("nginx:1")]);
  assert.equal(h.fake.service.images.pulls.length, 1);
});

Deno.test("ImageManager trusts a preloaded image under NeverVerifyPreloadedImages only", async () => {
  await using h = await harness();
  const res = await ensure(h.verifying(), { name: "c", image: "busybox:1.36" });
  assert.ok("imageRef" in res);
  assert.deepEqual(h.events.map((e) => e.message), [ACCESSIBLE("busybox:1.36")]);
  assert.equal(h.fake.service.images.pulls.length, 0);
  h.events.length = 0;

  // AlwaysVerify: even a preloaded image must be pulled with the pod's credentials.
  h.fake.service.images.requireAuth(PRESENT, { username: "bob", password: "pw" });
  const always = h.verifying({ verificationPolicy: "AlwaysVerify" });
  const denied = await ensure(always, { name: "c", image: "busybox:1.36" });
  assert.ok("error" in denied && denied.error.reason === "ErrImagePull");
  assert.match(denied.error.message, /401 Unauthorized/);
  const secrets = [dockerSecret("docker.io", "bob", "pw")];
  const allowed = await ensure(always, { name: "c", image: "busybox:1.36" }, secrets, pod("uid-2"));
  assert.ok("imageRef" in allowed);
  assert.deepEqual(pullsOf(h), [null, "bob"]);
  assert.match(h.events.at(-1)?.message ?? "", /^Successfully pulled image "busybox:1.36"/);
});

Deno.test("ImageManager under NeverVerifyAllowlistedImages verifies only images off the list", async () => {
  await using h = await harness();
  h.fake.service.images.add("quay.io/vendor/tool:2");
  h.fake.service.images.add("quay.io/team/app:1");
  const m = h.verifying({
    verificationPolicy: "NeverVerifyAllowlistedImages",
    allowlist: ["docker.io/library/busybox", "quay.io/vendor/*"],
  });
  for (const image of ["busybox:1.36", "quay.io/vendor/tool:2"]) {
    assert.ok("imageRef" in await ensure(m, { name: "c", image }));
  }
  assert.equal(h.fake.service.images.pulls.length, 0);
  // Preloaded but not allowlisted: verified.
  assert.ok("imageRef" in await ensure(m, { name: "c", image: "quay.io/team/app:1" }));
  assert.deepEqual(h.fake.service.images.pulls.map((p) => p.image), ["quay.io/team/app:1"]);
});

Deno.test("ImageManager keeps its pull records across a restart", async () => {
  await using h = await harness();
  await pulledPrivate(h);
  const restarted = h.verifying();
  const denied = await ensure(restarted, { name: "c", image: PRIVATE }, [], pod("uid-2"));
  assert.ok("error" in denied && denied.error.reason === "ErrImagePull");
  const secrets = [dockerSecret("quay.io", "bob", "pw")];
  assert.ok("imageRef" in await ensure(restarted, { name: "c", image: PRIVATE }, secrets));
  assert.deepEqual(pullsOf(h), ["bob", null]);
});

Deno.test("ImageManager verifies an image whose pull a restart interrupted", async () => {
  await using h = await harness();
  const image = "docker.io/library/busybox:1.36"; // as the runtime tags it
  const store = await PullRecordsStore.open({
    directory: h.records,
    logger: createLogger({ write: () => {} }),
  });
  // The previous kubelet wrote its intent and stopped before recording the pull.
  await store.writeIntent(image);
  const m = h.verifying();
  await m.start();
  assert.deepEqual(await Array.fromAsync(Deno.readDir(join(h.records, "pulling"))), []);
  const res = await ensure(m, { name: "c", image });
  assert.ok("imageRef" in res);
  assert.deepEqual(reasons(h.events), ["Pulling", "Pulled"]);
  // That pull was anonymous: from now on any pod may use it.
  assert.ok("imageRef" in await ensure(m, { name: "c", image }, [], pod("uid-2")));
  assert.equal(h.fake.service.images.pulls.length, 1);
});

Deno.test("ImageManager logs a corrupt pull record and verifies the image again", async () => {
  await using h = await harness();
  const { imageRef } = await pulledPrivate(h);
  await Deno.writeTextFile(join(h.records, "pulled", cacheFilename(imageRef)), '{"kind":');
  const m = h.verifying();
  const secrets = [dockerSecret("quay.io", "bob", "pw")];
  const res = await ensure(m, { name: "c", image: PRIVATE }, secrets, pod("uid-2"));
  assert.ok("imageRef" in res && res.imageRef === imageRef, Deno.inspect(res));
  assert.ok(h.lines.some((l) => l.includes("Failed to read an image pull")), h.lines.join("\n"));
  assert.deepEqual(reasons(h.events), ["Pulling", "Pulled"]);
  // The pull rewrote the record.
  const again = await ensure(m, { name: "c", image: PRIVATE }, secrets, pod("uid-3"));
  assert.ok("imageRef" in again && again.imageRef === imageRef, Deno.inspect(again));
  assert.deepEqual(pullsOf(h), ["bob", "bob"]);
});

Deno.test("ImageManager with policy Never treats a present image the pod may not use as absent", async () => {
  await using h = await harness();
  const { m } = await pulledPrivate(h);
  const c: V1Container = { name: "c", image: PRIVATE, imagePullPolicy: "Never" };
  const message = `Container image "${PRIVATE}" is not present with pull policy of Never`;
  assert.deepEqual(await ensure(m, c, [], pod("uid-2")), {
    error: { reason: "ErrImageNeverPull", message },
  });
  assert.deepEqual(h.events, [{ type: "Warning", reason: "ErrImageNeverPull", message }]);
  assert.equal(h.fake.service.images.pulls.length, 1);
});

Deno.test("ImageManager rejects an unknown verification policy or a bad allowlist", async () => {
  await using h = await harness();
  assert.throws(
    () => h.verifying({ verificationPolicy: "Sometimes" as "AlwaysVerify" }),
    ImageManagerOptionsError,
  );
  assert.throws(
    () =>
      h.verifying({ verificationPolicy: "NeverVerifyAllowlistedImages", allowlist: ["nginx:1"] }),
    /neither tag nor digest is accepted in an image reference: nginx:1/,
  );
});

/** kubelet_image_manager_ensure_image_requests_total of one label set. */
function requests(m: ImageMetrics, policy: string, present: string, required: string): number {
  return m.ensureImageRequests.get({
    pull_policy: policy,
    present_locally: present,
    pull_required: required,
  });
}

Deno.test("ImageManager counts each ensure-image request by policy, presence and pull, as upstream labels it", async () => {
  await using h = await harness();
  const metrics = new ImageMetrics(new MetricsRegistry());
  const m = h.manager({ metrics });
  await ensure(m, { name: "c", image: "busybox:1.36" });
  await ensure(m, { name: "c", image: "nginx:2", imagePullPolicy: "Never" });
  await ensure(m, { name: "c", image: "nginx:1" });
  // Always never looks for the image first: its presence is unknown.
  await ensure(m, { name: "c", image: "busybox:1.36", imagePullPolicy: "Always" });
  await ensure(m, { name: "c", image: "Not A Valid Name" });
  assert.equal(requests(metrics, "ifnotpresent", "true", "false"), 1);
  assert.equal(requests(metrics, "never", "false", "unknown"), 1);
  assert.equal(requests(metrics, "ifnotpresent", "false", "true"), 1);
  assert.equal(requests(metrics, "always", "unknown", "true"), 1);
  assert.equal(requests(metrics, "ifnotpresent", "unknown", "unknown"), 1);
});

Deno.test("ImageManager counts each credential check by result and sizes the pull records", async () => {
  await using h = await harness();
  const metrics = new ImageMetrics(new MetricsRegistry());
  const checks = (result: string) => metrics.mustPullChecks.get({ result });
  // A preloaded image under NeverVerifyPreloadedImages needs no credentials.
  await ensure(h.verifying({ metrics }), { name: "c", image: "busybox:1.36" });
  assert.equal(checks("credentialPolicyAllowed"), 1);
  // Nothing written yet: the record gauges have not been set.
  assert.equal(metrics.onDiskPulledRecords.get(), 0);
  h.events.length = 0;

  const { m } = await pulledPrivate(h, { metrics });
  // One record on disk, one of the 100 the cache holds; the pull's intent is gone again.
  assert.equal(metrics.onDiskPulledRecords.get(), 1);
  assert.equal(metrics.inMemoryPulledRecordsUsage.get(), 1);
  assert.equal(metrics.onDiskPullIntents.get(), 0);
  assert.equal(metrics.inMemoryPullIntentsUsage.get(), 0);
  await ensure(m, { name: "c", image: PRIVATE }, [dockerSecret("quay.io", "bob", "pw")]);
  assert.equal(checks("credentialRecordFound"), 1);
  await ensure(m, { name: "c", image: PRIVATE }, [], pod("uid-2"));
  assert.equal(checks("mustAuthenticate"), 1);
  assert.equal(
    requests(metrics, "ifnotpresent", "true", "true"),
    1,
    "the pod without the secret had to pull",
  );
});

/** A credential provider that answers `answers` for every image and records what it was asked. */
function fakeProviders(answers: ProvidedCredentials[]) {
  const asked: { image: string; pod: PodCoordinates }[] = [];
  const providers: ImageCredentialProvider = {
    provide(image, pod) {
      asked.push({ image, pod });
      return Promise.resolve(answers);
    },
  };
  return { providers, asked };
}

Deno.test("ImageManager tries the pull secrets' credentials, then the credential providers'", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth(PRIVATE, { username: "plugin", password: "pw" });
  const { providers, asked } = fakeProviders([
    { config: { "other.io": { username: "elsewhere", password: "x" } } },
    { config: { "quay.io": { username: "plugin", password: "pw" } } },
  ]);
  const m = h.manager({ credentialProviders: providers });
  const p = pod();
  p.spec = { containers: [], serviceAccountName: "builder" };
  const res = await ensure(
    m,
    { name: "c", image: PRIVATE },
    [dockerSecret("quay.io", "old", "x")],
    p,
  );
  assert.ok("imageRef" in res, Deno.inspect(res));
  assert.deepEqual(pullsOf(h), ["old", "plugin"]);
  // The providers are asked for the repository, without its tag, with the pod's coordinates.
  assert.deepEqual(asked, [{
    image: "quay.io/team/app",
    pod: { namespace: "default", name: "web", uid: "uid-1", serviceAccountName: "builder" },
  }]);
});

Deno.test("ImageManager records a pull through a service account token and lets its pods use the image", async () => {
  await using h = await harness();
  h.fake.service.images.requireAuth(PRIVATE, { username: "plugin", password: "pw" });
  const account = { uid: "sa-uid", namespace: "default", name: "builder" };
  const answers: ProvidedCredentials[] = [
    { config: { "quay.io": { username: "plugin", password: "pw" } }, serviceAccount: account },
  ];
  const { providers, asked } = fakeProviders(answers);
  const m = h.verifying({ credentialProviders: providers, verificationPolicy: "AlwaysVerify" });
  const first = await ensure(m, { name: "c", image: PRIVATE }, []);
  assert.ok("imageRef" in first, Deno.inspect(first));
  const files = await Array.fromAsync(Deno.readDir(join(h.records, "pulled")));
  const record = JSON.parse(await Deno.readTextFile(join(h.records, "pulled", files[0]!.name)));
  assert.deepEqual(record.credentialMapping["quay.io/team/app"], {
    kubernetesServiceAccounts: [account],
  });
  // Another pod of the same service account: the present image is its to use, no pull.
  h.events.length = 0;
  const second = await ensure(m, { name: "c", image: PRIVATE }, [], pod("uid-2"));
  assert.ok("imageRef" in second, Deno.inspect(second));
  assert.deepEqual(h.events.map((e) => e.message), [ACCESSIBLE(PRIVATE)]);
  assert.deepEqual(pullsOf(h), ["plugin"]);
  assert.equal(asked.length, 2);
  // A pod whose provider answer comes through another account must pull.
  answers[0] = { ...answers[0]!, serviceAccount: { ...account, name: "other", uid: "o" } };
  h.events.length = 0;
  const third = await ensure(m, { name: "c", image: PRIVATE }, [], pod("uid-3"));
  assert.ok("imageRef" in third, Deno.inspect(third));
  assert.deepEqual(reasons(h.events), ["Pulling", "Pulled"]);
});
