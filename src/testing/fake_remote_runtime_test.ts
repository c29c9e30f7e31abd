import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { CriConnection, CriError, GrpcCode } from "../cri/connection.ts";
import {
  type FakeRemoteRuntime,
  type FakeRuntimeOptions,
  startFakeRuntime,
} from "./fake_remote_runtime.ts";
import { RemoteImageService } from "../cri/remote_image.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const S = api.ContainerState;

interface Harness extends AsyncDisposable {
  readonly fake: FakeRemoteRuntime;
  readonly runtime: RemoteRuntimeService;
  readonly image: RemoteImageService;
}

/** A fake on a socket in a fresh temp dir, and the real client on it; disposing removes both. */
async function harness(opts: Partial<FakeRuntimeOptions> = {}): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "fake-cri-" });
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    ...opts,
    socket: join(dir, "cri.sock"),
  });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  return {
    fake,
    runtime: new RemoteRuntimeService({ connection, timeoutMs: 10_000 }),
    image: new RemoteImageService({ connection, timeoutMs: 10_000 }),
    async [Symbol.asyncDispose]() {
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function podConfig(name: string, labels: Record<string, string> = {}, hostNetwork = false) {
  return api.PodSandboxConfig.create({
    metadata: { name, namespace: "default", uid: `uid-${name}`, attempt: 0 },
    logDirectory: `/var/log/pods/default_${name}_uid-${name}/`,
    labels: { "io.kubernetes.pod.name": name, ...labels },
    annotations: { "kubernetes.io/config.source": "api" },
    linux: {
      securityContext: {
        namespaceOptions: { network: hostNetwork ? api.NamespaceMode.NODE : api.NamespaceMode.POD },
      },
    },
  });
}

function ctrConfig(name: string, labels: Record<string, string> = {}, image = IMAGE) {
  return api.ContainerConfig.create({
    metadata: { name, attempt: 0 },
    image: { image },
    command: ["sleep"],
    args: ["3600"],
    logPath: `${name}/0.log`,
    labels: { "io.kubernetes.container.name": name, ...labels },
    annotations: { "io.kubernetes.container.hash": "abc" },
  });
}

/** Runs a pod with one container per name, all started. */
async function runPod(h: Harness, name: string, containers: string[] = ["main"]) {
  const config = podConfig(name);
  const pod = await h.runtime.runPodSandbox(config, "");
  const ids: string[] = [];
  for (const c of containers) {
    const id = await h.runtime.createContainer(pod, ctrConfig(c), config);
    await h.runtime.startContainer(id);
    ids.push(id);
  }
  return { pod, config, ids };
}

/** Asserts that `p` fails with a CriError of `code` from `rpc`. */
async function rejectsWith(p: Promise<unknown>, code: GrpcCode, rpc: string, desc?: RegExp) {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof CriError, `expected a CriError, got ${e}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.rpc, rpc);
    if (desc) assert.match(e.details, desc);
    return true;
  });
}

async function poll(what: string, ok: () => boolean | Promise<boolean>, ms = 5_000) {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("FakeRemoteRuntime reports Version, settable Status conditions and cgroupfs", async () => {
  await using h = await harness();
  assert.deepEqual(await h.runtime.version(), {
    version: "0.1.0",
    runtimeName: "fake-runtime",
    runtimeVersion: "0.1.0",
    runtimeApiVersion: "v1",
  });
  const ready = async () =>
    Object.fromEntries(
      ((await h.runtime.status()).status?.conditions ?? []).map((c) => [c.type, c.status]),
    );
  assert.deepEqual(await ready(), { RuntimeReady: true, NetworkReady: true });
  h.fake.service.setCondition("NetworkReady", false, "NetworkPluginNotReady", "cni not ready");
  assert.deepEqual(await ready(), { RuntimeReady: true, NetworkReady: false });
  assert.equal((await h.runtime.runtimeConfig()).linux?.cgroupDriver, api.CgroupDriver.CGROUPFS);
});

Deno.test("FakeRuntimeService runs a sandbox and a container through their lifecycle", async () => {
  await using h = await harness();
  const config = podConfig("web");
  const pod = await h.runtime.runPodSandbox(config, "runc");
  assert.match(pod, /^[0-9a-f]{64}$/);
  const sb = (await h.runtime.podSandboxStatus(pod)).status;
  assert.equal(sb?.state, api.PodSandboxState.SANDBOX_READY);
  assert.match(sb?.network?.ip ?? "", /^10\.244\.\d+\.\d+$/);
  assert.ok((sb?.createdAt ?? 0n) > 0n);
  assert.deepEqual(sb?.metadata, config.metadata);
  assert.deepEqual(sb?.annotations, config.annotations);
  assert.equal(sb?.runtimeHandler, "runc");

  const id = await h.runtime.createContainer(pod, ctrConfig("main"), config);
  let st = (await h.runtime.containerStatus(id)).status;
  assert.equal(st?.state, S.CONTAINER_CREATED);
  assert.equal(st?.startedAt, 0n);
  assert.equal(st?.logPath, "/var/log/pods/default_web_uid-web/main/0.log");
  assert.equal(st?.image?.image, IMAGE);
  assert.match(st?.imageRef ?? "", /^docker\.io\/library\/busybox@sha256:[0-9a-f]{64}$/);
  assert.match(st?.imageId ?? "", /^sha256:[0-9a-f]{64}$/);
  assert.deepEqual(st?.annotations, { "io.kubernetes.container.hash": "abc" });

  await h.runtime.startContainer(id);
  st = (await h.runtime.containerStatus(id)).status;
  assert.equal(st?.state, S.CONTAINER_RUNNING);
  assert.ok((st?.startedAt ?? 0n) > (st?.createdAt ?? 0n));

  await h.runtime.stopContainer(id, 30);
  await h.runtime.stopContainer(id, 30); // idempotent
  st = (await h.runtime.containerStatus(id)).status;
  assert.equal(st?.state, S.CONTAINER_EXITED);
  assert.equal(st?.exitCode, 137);
  assert.equal(st?.reason, "Error");
  assert.ok((st?.finishedAt ?? 0n) > (st?.startedAt ?? 0n));

  await h.runtime.removeContainer(id);
  await h.runtime.removeContainer(id); // tolerated, as containerd
  await rejectsWith(
    h.runtime.containerStatus(id),
    GrpcCode.NOT_FOUND,
    "RuntimeService/ContainerStatus",
  );
  await h.runtime.stopPodSandbox(pod);
  await h.runtime.stopPodSandbox(pod);
  assert.equal(
    (await h.runtime.podSandboxStatus(pod)).status?.state,
    api.PodSandboxState.SANDBOX_NOTREADY,
  );
  await h.runtime.removePodSandbox(pod);
  await h.runtime.removePodSandbox(pod);
  await rejectsWith(
    h.runtime.podSandboxStatus(pod),
    GrpcCode.NOT_FOUND,
    "RuntimeService/PodSandboxStatus",
    /^an error occurred when try to find sandbox: not found$/,
  );
  assert.equal(h.fake.service.sandboxes.size, 0);
});

Deno.test("FakeRuntimeService gives pods distinct IPs and host-network pods none", async () => {
  await using h = await harness();
  const a = await h.runtime.runPodSandbox(podConfig("a"), "");
  const b = await h.runtime.runPodSandbox(podConfig("b"), "");
  const host = await h.runtime.runPodSandbox(podConfig("host", {}, true), "");
  const ip = async (id: string) => (await h.runtime.podSandboxStatus(id)).status?.network?.ip;
  assert.notEqual(await ip(a), await ip(b));
  assert.equal(await ip(host), "");
  await rejectsWith(
    h.runtime.runPodSandbox(podConfig("a"), ""),
    GrpcCode.UNKNOWN,
    "RuntimeService/RunPodSandbox",
    /failed to reserve sandbox name "a_default_uid-a_0"/,
  );
});

Deno.test("FakeRuntimeService filters sandboxes and containers by id, state, pod and labels", async () => {
  await using h = await harness();
  const one = await runPod(h, "one", ["app", "side"]);
  const two = await runPod(h, "two", ["app"]);
  await h.runtime.stopPodSandbox(two.pod);
  const R = api.PodSandboxState;
  const pods = (f: Partial<api.PodSandboxFilter>) =>
    h.runtime.listPodSandbox(api.PodSandboxFilter.create(f)).then((l) => l.map((s) => s.id));
  assert.deepEqual(await pods({ state: { state: R.SANDBOX_READY } }), [one.pod]);
  assert.deepEqual(await pods({ id: two.pod }), [two.pod]);
  assert.deepEqual(await pods({ id: two.pod.slice(0, 12) }), [two.pod]);
  assert.deepEqual(await pods({ labelSelector: { "io.kubernetes.pod.name": "two" } }), [two.pod]);
  assert.deepEqual((await pods({})).sort(), [one.pod, two.pod].sort());

  const ctrs = (f: Partial<api.ContainerFilter>) =>
    h.runtime.listContainers(api.ContainerFilter.create(f)).then((l) => l.map((c) => c.id));
  assert.deepEqual(await ctrs({ podSandboxId: one.pod }), one.ids);
  assert.deepEqual(await ctrs({ state: { state: S.CONTAINER_RUNNING } }), one.ids);
  assert.deepEqual(await ctrs({ state: { state: S.CONTAINER_EXITED } }), two.ids);
  assert.deepEqual(
    await ctrs({
      podSandboxId: one.pod,
      labelSelector: { "io.kubernetes.container.name": "side" },
    }),
    [one.ids[1]],
  );
  assert.deepEqual(await ctrs({ id: one.ids[0] }), [one.ids[0]]);
  assert.deepEqual(await ctrs({ id: "f".repeat(64) }), []);
  const [listed] = await h.runtime.listContainers(api.ContainerFilter.create({ id: two.ids[0] }));
  assert.equal(listed?.podSandboxId, two.pod);
  assert.equal(listed?.metadata?.name, "app");
});

Deno.test("FakeRuntimeService fails with containerd's codes", async () => {
  await using h = await harness();
  const { pod, config, ids } = await runPod(h, "p");
  const main = ids[0] ?? "";
  const rt = "RuntimeService/";
  await rejectsWith(
    h.runtime.createContainer(pod, ctrConfig("x", {}, "nginx:absent"), config),
    GrpcCode.NOT_FOUND,
    `${rt}CreateContainer`,
    /failed to resolve image "nginx:absent": not found/,
  );
  await rejectsWith(
    h.runtime.startContainer(main),
    GrpcCode.FAILED_PRECONDITION,
    `${rt}StartContainer`,
    /container is in CONTAINER_RUNNING state/,
  );
  await rejectsWith(
    h.runtime.startContainer(""),
    GrpcCode.INVALID_ARGUMENT,
    `${rt}StartContainer`,
  );
  await rejectsWith(
    h.runtime.stopContainer("0".repeat(64), 1),
    GrpcCode.NOT_FOUND,
    `${rt}StopContainer`,
  );
  await rejectsWith(
    h.runtime.createContainer(pod, ctrConfig("main"), config),
    GrpcCode.UNKNOWN,
    `${rt}CreateContainer`,
    /failed to reserve container name "main_p_default_uid-p_0"/,
  );
  await h.runtime.stopPodSandbox(pod);
  await rejectsWith(
    h.runtime.createContainer(pod, ctrConfig("late"), config),
    GrpcCode.FAILED_PRECONDITION,
    `${rt}CreateContainer`,
    /is not running/,
  );
  await rejectsWith(
    h.runtime.runPodSandbox(podConfig("q"), "kata"),
    GrpcCode.UNKNOWN,
    `${rt}RunPodSandbox`,
    /no runtime for "kata" is configured/,
  );
  await rejectsWith(
    h.runtime.execSync(main, ["true"], 1),
    GrpcCode.FAILED_PRECONDITION,
    `${rt}ExecSync`,
  );
});

Deno.test("FakeRuntimeService simulates exits synchronously: exitContainer, onCreate, SIGTERM", async () => {
  await using h = await harness({
    onCreate: (c) =>
      c.metadata?.name === "crash"
        ? { exitAfterStart: true, exitCode: 2 }
        : c.metadata?.name === "polite"
        ? { handlesSigterm: true }
        : c.metadata?.name === "broken"
        ? { startError: 'exec: "nope": executable file not found in $PATH' }
        : undefined,
  });
  const { pod, config, ids } = await runPod(h, "p", ["main", "crash", "polite"]);
  const [main = "", crash = "", polite = ""] = ids;
  const status = async (id: string) => (await h.runtime.containerStatus(id)).status;

  assert.equal((await status(crash))?.state, S.CONTAINER_EXITED);
  assert.equal((await status(crash))?.exitCode, 2);
  assert.equal((await status(crash))?.reason, "Error");

  h.fake.service.exitContainer(main, 137, "OOMKilled");
  assert.equal((await status(main))?.reason, "OOMKilled");
  assert.throws(() => h.fake.service.exitContainer(main, 0), /is in CONTAINER_EXITED state/);

  await h.runtime.stopContainer(polite, 30);
  assert.equal((await status(polite))?.exitCode, 0);
  assert.equal((await status(polite))?.reason, "Completed");

  // The next attempt of the crashing container is a new container, as the kubelet makes it.
  const retry = api.ContainerConfig.create({
    ...ctrConfig("crash"),
    metadata: { name: "crash", attempt: 1 },
  });
  const again = await h.runtime.createContainer(pod, retry, config);
  await h.runtime.startContainer(again);
  assert.equal((await status(again))?.exitCode, 2);

  const broken = await h.runtime.createContainer(pod, ctrConfig("broken"), config);
  await rejectsWith(
    h.runtime.startContainer(broken),
    GrpcCode.UNKNOWN,
    "RuntimeService/StartContainer",
    /executable file not found/,
  );
  const b = await status(broken);
  assert.deepEqual([b?.state, b?.exitCode, b?.reason], [S.CONTAINER_EXITED, 128, "StartError"]);
});

Deno.test("FakeRuntimeService stops a pod's running containers with 137 and removes them with it", async () => {
  await using h = await harness();
  const { pod, config, ids } = await runPod(h, "p", ["a", "b"]);
  const created = await h.runtime.createContainer(pod, ctrConfig("c"), config);
  await h.runtime.stopPodSandbox(pod);
  for (const id of ids) {
    const st = (await h.runtime.containerStatus(id)).status;
    assert.deepEqual([st?.state, st?.exitCode], [S.CONTAINER_EXITED, 137]);
  }
  assert.equal((await h.runtime.containerStatus(created)).status?.state, S.CONTAINER_CREATED);
  await h.runtime.removePodSandbox(pod);
  assert.deepEqual(await h.runtime.listContainers(), []);
  assert.equal(h.fake.service.containers.size, 0);
});

Deno.test("FakeRuntimeService runs ExecSync through the test's handler", async () => {
  await using h = await harness();
  const { ids: [id = ""] } = await runPod(h, "p");
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  const echoed = await h.runtime.execSync(id, ["cat", "/tmp/ready"], 1);
  assert.deepEqual([text(echoed.stdout), echoed.exitCode], ["cat /tmp/ready", 0]);
  const seen: string[] = [];
  h.fake.service.execHandler = (cid, cmd) => {
    seen.push(cid);
    return cmd[0] === "fail" ? { stderr: "boom", exitCode: 3 } : { stdout: "ok" };
  };
  const failed = await h.runtime.execSync(id, ["fail"], 1);
  assert.deepEqual([text(failed.stderr), failed.exitCode], ["boom", 3]);
  assert.deepEqual(seen, [id]);
});

Deno.test("FakeRuntimeService pulls images, records auth and fails scripted pulls", async () => {
  await using h = await harness({ preloadImages: [] });
  const spec = (image: string) => api.ImageSpec.create({ image });
  assert.equal((await h.image.imageStatus(spec("nginx"))).image, undefined);
  const auth = api.AuthConfig.create({ username: "u", password: "p" });
  const ref = await h.image.pullImage(spec("nginx"), auth, podConfig("p"));
  assert.match(ref, /^sha256:[0-9a-f]{64}$/);
  const img = (await h.image.imageStatus(spec("docker.io/library/nginx:latest"))).image;
  assert.equal(img?.id, ref);
  assert.deepEqual(img?.repoTags, ["docker.io/library/nginx:latest"]);
  assert.equal((await h.image.imageStatus(spec(ref))).image?.id, ref);
  const pull = h.fake.service.images.pulls[0];
  assert.deepEqual([pull?.image, pull?.auth?.username], ["nginx", "u"]);
  assert.equal(pull?.sandboxConfig?.metadata?.name, "p");

  h.fake.service.images.failPull("private.example/app:1", GrpcCode.NOT_FOUND, undefined, 1);
  await rejectsWith(
    h.image.pullImage(spec("private.example/app:1"), undefined, undefined),
    GrpcCode.NOT_FOUND,
    "ImageService/PullImage",
    /failed to pull and unpack image "private\.example\/app:1"/,
  );
  h.fake.service.images.requireAuth("private.example/app:1", { username: "u", password: "s3cret" });
  await assert.rejects(h.image.pullImage(spec("private.example/app:1"), auth, undefined), /401/);
  const right = api.AuthConfig.create({ auth: btoa("u:s3cret") });
  await h.image.pullImage(spec("private.example/app:1"), right, undefined);

  assert.equal((await h.image.listImages()).length, 2);
  const fs = (await h.image.imageFsInfo()).imageFilesystems[0];
  assert.ok((fs?.usedBytes?.value ?? 0n) > 0n);
  await h.image.removeImage(spec("nginx"));
  await h.image.removeImage(spec("nginx"));
  assert.equal((await h.image.imageStatus(spec(ref))).image, undefined);
  assert.equal((await h.image.listImages()).length, 1);
});

Deno.test("FakeRuntimeService requires the sandbox image only when configured", async () => {
  const pause = "registry.k8s.io/pause:3.10";
  await using h = await harness({ sandboxImage: pause });
  await rejectsWith(
    h.runtime.runPodSandbox(podConfig("p"), ""),
    GrpcCode.NOT_FOUND,
    "RuntimeService/RunPodSandbox",
  );
  await h.image.pullImage(api.ImageSpec.create({ image: pause }), undefined, undefined);
  assert.equal(
    (await h.image.imageStatus(api.ImageSpec.create({ image: pause }))).image?.pinned,
    true,
  );
  await h.runtime.runPodSandbox(podConfig("p"), "");
});

Deno.test("FakeRuntimeService reports stats that add up per pod", async () => {
  await using h = await harness({ onCreate: () => ({ usage: { memoryBytes: 1000 } }) });
  const { pod, ids } = await runPod(h, "p", ["a", "b"]);
  const [a = "", b = ""] = ids;
  h.fake.service.exitContainer(b, 0);
  const one = await h.runtime.containerStats(a);
  assert.equal(one?.memory?.workingSetBytes?.value, 1000n);
  assert.equal(one?.attributes?.id, a);
  const listed = await h.runtime.listContainerStats(
    api.ContainerStatsFilter.create({ podSandboxId: pod }),
  );
  assert.deepEqual(listed.map((s) => s.attributes?.id), [a]);
  const podStats = await h.runtime.podSandboxStats(pod);
  assert.equal(podStats?.linux?.memory?.workingSetBytes?.value, 1000n);
  assert.equal(podStats?.linux?.process?.processCount?.value, 1n);
  assert.deepEqual((await h.runtime.listPodSandboxStats()).map((s) => s.attributes?.id), [pod]);
  const later = await h.runtime.containerStats(a);
  assert.ok(
    (later?.cpu?.usageCoreNanoSeconds?.value ?? 0n) >=
      (one?.cpu?.usageCoreNanoSeconds?.value ?? 0n),
  );
});

Deno.test("FakeRuntimeService streams container events for the evented PLEG", async () => {
  await using h = await harness();
  const ctl = new AbortController();
  const events: api.ContainerEventResponse[] = [];
  const reading = (async () => {
    for await (const e of h.runtime.getContainerEvents(ctl.signal)) events.push(e);
  })();
  await poll("the stream to attach", () => h.fake.service.subscribers === 1);
  const { pod, ids: [id = ""] } = await runPod(h, "p");
  await h.runtime.removePodSandbox(pod);
  const T = api.ContainerEventType;
  const want = [
    [pod, T.CONTAINER_CREATED_EVENT],
    [pod, T.CONTAINER_STARTED_EVENT],
    [id, T.CONTAINER_CREATED_EVENT],
    [id, T.CONTAINER_STARTED_EVENT],
    [id, T.CONTAINER_STOPPED_EVENT],
    [id, T.CONTAINER_DELETED_EVENT],
    [pod, T.CONTAINER_STOPPED_EVENT],
    [pod, T.CONTAINER_DELETED_EVENT],
  ];
  await poll("all events", () => events.length >= want.length);
  assert.deepEqual(events.map((e) => [e.containerId, e.containerEventType]), want);
  const started = events[3];
  assert.equal(started?.podSandboxStatus?.metadata?.name, "p");
  assert.equal(started?.containersStatuses[0]?.state, S.CONTAINER_RUNNING);
  ctl.abort();
  await reading;
  await poll("the stream to detach", () => h.fake.service.subscribers === 0);
});

Deno.test("FakeRuntimeService returns streaming URLs and answers Unimplemented for checkpoints", async () => {
  await using h = await harness();
  const { pod, ids: [id = ""] } = await runPod(h, "p");
  const url = await h.runtime.exec(
    api.ExecRequest.create({ containerId: id, cmd: ["sh"], stdout: true }),
  );
  assert.match(url, /^http:\/\/127\.0\.0\.1:0\/exec\/[\w-]+$/);
  assert.match(await h.runtime.attach(api.AttachRequest.create({ containerId: id })), /\/attach\//);
  assert.match(
    await h.runtime.portForward(api.PortForwardRequest.create({ podSandboxId: pod })),
    /\/portforward\//,
  );
  await rejectsWith(
    h.runtime.checkpointContainer(api.CheckpointContainerRequest.create({ containerId: id })),
    GrpcCode.UNIMPLEMENTED,
    "RuntimeService/CheckpointContainer",
  );
});

Deno.test("FakeRemoteRuntime.injectError fails the next calls with the code and RPC name", async () => {
  await using h = await harness();
  h.fake.injectError("RunPodSandbox", GrpcCode.RESOURCE_EXHAUSTED, "no room", 2);
  for (let i = 0; i < 2; i++) {
    await rejectsWith(
      h.runtime.runPodSandbox(podConfig("p"), ""),
      GrpcCode.RESOURCE_EXHAUSTED,
      "RuntimeService/RunPodSandbox",
      /^no room$/,
    );
  }
  await h.runtime.runPodSandbox(podConfig("p"), "");
  assert.equal(h.fake.callCount("RunPodSandbox"), 3);
  assert.equal(h.fake.service.sandboxes.size, 1);

  h.fake.injectError("PullImage", GrpcCode.UNAVAILABLE);
  await assert.rejects(
    h.image.pullImage(api.ImageSpec.create({ image: "x" }), undefined, undefined),
    /^CriError: ImageService\/PullImage: rpc error: code = Unavailable desc = injected PullImage error$/,
  );
  assert.throws(
    () => h.fake.injectError("RunPod", GrpcCode.INTERNAL),
    /'RunPod' is not a CRI RPC/,
  );
});

Deno.test("FakeRemoteRuntime.setLatency delays calls, and stop cancels them", async () => {
  await using h = await harness();
  h.fake.setLatency("Version", 60);
  const start = performance.now();
  await h.runtime.version();
  assert.ok(performance.now() - start >= 55, "Version took its injected latency");
  h.fake.setLatency("Version", 0);
  await h.runtime.version();

  h.fake.setLatency("ListPodSandbox", 60_000);
  const failed = rejectsWith(
    h.runtime.listPodSandbox(),
    GrpcCode.UNAVAILABLE,
    "RuntimeService/ListPodSandbox",
  );
  await poll("the call to arrive", () => h.fake.callCount("ListPodSandbox") === 1);
  await h.fake.stop();
  await failed;
});

Deno.test("FakeRemoteRuntime.restart drops calls, keeps state, and the same client reconnects", async () => {
  await using h = await harness();
  const { pod } = await runPod(h, "p");
  h.fake.setLatency("Version", 60_000);
  const dropped = rejectsWith(
    h.runtime.version(),
    GrpcCode.UNAVAILABLE,
    "RuntimeService/Version",
  );
  const events = (async () => {
    for await (const _ of h.runtime.getContainerEvents()) { /* none come */ }
  })();
  const ended = rejectsWith(events, GrpcCode.UNAVAILABLE, "RuntimeService/GetContainerEvents");
  await poll("the call to arrive", () => h.fake.callCount("Version") === 1);
  await poll("the stream to attach", () => h.fake.service.subscribers === 1);
  await h.fake.restart();
  await dropped;
  await ended;
  assert.equal(h.fake.service.subscribers, 0);
  assert.ok(h.fake.serving);
  let ids: string[] = [];
  await poll("a call on the same client", async () => {
    ids = (await h.runtime.listPodSandbox().catch(() => [])).map((s) => s.id);
    return ids.length > 0;
  });
  assert.deepEqual(ids, [pod]);
});

Deno.test("FakeRemoteRuntime.stop is idempotent and later calls fail Unavailable", async () => {
  await using h = await harness();
  await h.runtime.version();
  await h.fake.stop();
  await h.fake.stop();
  assert.ok(!h.fake.serving);
  await rejectsWith(h.runtime.version(), GrpcCode.UNAVAILABLE, "RuntimeService/Version");
  await assert.rejects(h.fake.restart(), /stopped for good/);
});
