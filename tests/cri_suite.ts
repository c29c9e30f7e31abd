/**
 * @module
 * The CRI client behaviour every runtime must show the kubelet, registered once per runtime:
 * the fake runtime (tests/cri_fake_test.ts) and real containerd (tests/cri_containerd_test.ts)
 * run the same cases through the same client, so the fake cannot drift from what containerd does
 * where the kubelet depends on it.
 */

import assert from "node:assert/strict";
import * as api from "../proto/runtime/v1/api.ts";
import { CriError, GrpcCode } from "../src/cri/connection.ts";
import type { ImageManagerService } from "../src/cri/remote_image.ts";
import type { RuntimeService } from "../src/cri/remote_runtime.ts";

/** A runtime under test, reached through the real client. */
export interface CriTarget {
  readonly runtime: RuntimeService;
  readonly image: ImageManagerService;
  /** An image the runtime has, whose default command keeps running (`sleep`-like). */
  readonly imageName: string;
  /** Where pod log directories may be created. */
  readonly logRoot: string;
  /** The command a container runs to stay up until stopped. */
  readonly longRunning: readonly string[];
}

/** A pod sandbox config as the kubelet builds one, minimal. */
export function sandboxConfig(
  target: CriTarget,
  name: string,
  labels: Record<string, string> = {},
): api.PodSandboxConfig {
  const uid = crypto.randomUUID();
  return api.PodSandboxConfig.create({
    metadata: { name, namespace: "default", uid, attempt: 0 },
    hostname: name,
    logDirectory: `${target.logRoot}/default_${name}_${uid}`,
    labels: {
      "io.kubernetes.pod.name": name,
      "io.kubernetes.pod.namespace": "default",
      "io.kubernetes.pod.uid": uid,
      ...labels,
    },
    linux: {
      securityContext: {
        namespaceOptions: {
          network: api.NamespaceMode.POD,
          pid: api.NamespaceMode.CONTAINER,
          ipc: api.NamespaceMode.POD,
        },
      },
    },
  });
}

/** A container config as the kubelet builds one, minimal. */
export function containerConfig(
  target: CriTarget,
  name: string,
  command: readonly string[],
  labels: Record<string, string> = {},
): api.ContainerConfig {
  return api.ContainerConfig.create({
    metadata: { name, attempt: 0 },
    image: { image: target.imageName },
    command: [...command],
    logPath: `${name}/0.log`,
    labels: { "io.kubernetes.container.name": name, ...labels },
    linux: {},
  });
}

/** Registers the shared cases under `prefix`, each getting a fresh target from `setup`. */
export function registerCriSuite(
  prefix: string,
  opts: { ignore: boolean; setup: () => Promise<CriTarget & AsyncDisposable> },
): void {
  const test = (name: string, fn: (t: CriTarget) => Promise<void>) =>
    Deno.test({
      name: `${prefix} ${name}`,
      ignore: opts.ignore,
      sanitizeResources: false,
      sanitizeOps: false,
      async fn() {
        await using target = await opts.setup();
        await fn(target);
      },
    });

  test("Version reports CRI v1", async (t) => {
    const v = await t.runtime.version();
    assert.equal(v.runtimeApiVersion, "v1");
    assert.ok(v.runtimeName !== "");
  });

  test("Status reports RuntimeReady", async (t) => {
    const s = await t.runtime.status();
    const ready = s.status?.conditions.find((c) => c.type === "RuntimeReady");
    assert.equal(ready?.status, true);
  });

  test("sandbox lifecycle: run, status, list by label, stop, remove", async (t) => {
    const config = sandboxConfig(t, "suite-sandbox", { "suite.test/case": "sandbox" });
    const id = await t.runtime.runPodSandbox(config, "");
    try {
      const st = await t.runtime.podSandboxStatus(id);
      assert.equal(st.status?.state, api.PodSandboxState.SANDBOX_READY);
      assert.equal(st.status?.metadata?.uid, config.metadata?.uid);
      const listed = await t.runtime.listPodSandbox({
        id: "",
        labelSelector: { "suite.test/case": "sandbox" },
      });
      assert.deepEqual(listed.map((s) => s.id), [id]);
      assert.deepEqual(
        await t.runtime.listPodSandbox({ id: "", labelSelector: { "suite.test/case": "other" } }),
        [],
      );
      await t.runtime.stopPodSandbox(id);
      await t.runtime.stopPodSandbox(id); // idempotent, as the CRI requires
      assert.equal(
        (await t.runtime.podSandboxStatus(id)).status?.state,
        api.PodSandboxState.SANDBOX_NOTREADY,
      );
    } finally {
      await t.runtime.stopPodSandbox(id).catch(() => {});
      await t.runtime.removePodSandbox(id);
    }
    await assert.rejects(t.runtime.podSandboxStatus(id), (e: unknown) => {
      assert.ok(e instanceof CriError);
      assert.equal(e.code, GrpcCode.NOT_FOUND);
      assert.equal(e.rpc, "RuntimeService/PodSandboxStatus");
      return true;
    });
  });

  test("container lifecycle: create, start, list by label and state, stop, remove", async (t) => {
    const sandbox = sandboxConfig(t, "suite-containers");
    const pod = await t.runtime.runPodSandbox(sandbox, "");
    try {
      const id = await t.runtime.createContainer(
        pod,
        containerConfig(t, "main", t.longRunning, { "suite.test/c": "main" }),
        sandbox,
      );
      assert.equal(
        (await t.runtime.containerStatus(id)).status?.state,
        api.ContainerState.CONTAINER_CREATED,
      );
      await t.runtime.startContainer(id);
      const running = await t.runtime.containerStatus(id);
      assert.equal(running.status?.state, api.ContainerState.CONTAINER_RUNNING);
      assert.ok((running.status?.startedAt ?? 0n) > 0n, "startedAt is set");
      assert.equal(running.status?.logPath, `${sandbox.logDirectory}/main/0.log`);
      const byLabel = await t.runtime.listContainers({
        id: "",
        podSandboxId: pod,
        labelSelector: { "suite.test/c": "main" },
        state: { state: api.ContainerState.CONTAINER_RUNNING },
      });
      assert.deepEqual(byLabel.map((c) => c.id), [id]);
      assert.deepEqual(
        await t.runtime.listContainers({
          id: "",
          podSandboxId: pod,
          labelSelector: { "suite.test/c": "none" },
        }),
        [],
      );
      await t.runtime.stopContainer(id, 0);
      const exited = await t.runtime.containerStatus(id);
      assert.equal(exited.status?.state, api.ContainerState.CONTAINER_EXITED);
      assert.ok((exited.status?.finishedAt ?? 0n) > 0n, "finishedAt is set");
      await t.runtime.removeContainer(id);
      await assert.rejects(
        t.runtime.containerStatus(id),
        (e: unknown) => e instanceof CriError && e.code === GrpcCode.NOT_FOUND,
      );
      await t.runtime.removeContainer(id); // removing what is gone succeeds, as containerd does
    } finally {
      await t.runtime.stopPodSandbox(pod).catch(() => {});
      await t.runtime.removePodSandbox(pod);
    }
  });

  test("images: ImageStatus of a present and an absent image, ListImages", async (t) => {
    const present = await t.image.imageStatus(api.ImageSpec.create({ image: t.imageName }));
    assert.ok(present.image, `${t.imageName} is present`);
    assert.ok(
      present.image.repoTags.some((tag) =>
        tag === t.imageName || `docker.io/library/${tag}` === t.imageName
      ),
    );
    const absent = await t.image.imageStatus(
      api.ImageSpec.create({ image: "example.invalid/none:1" }),
    );
    assert.equal(absent.image, undefined);
    const all = await t.image.listImages();
    assert.ok(all.some((i) => i.id === present.image?.id));
  });

  test("a call on an unknown container fails NotFound with the RPC name", async (t) => {
    await assert.rejects(t.runtime.containerStatus("0".repeat(64)), (e: unknown) => {
      assert.ok(e instanceof CriError);
      assert.equal(e.code, GrpcCode.NOT_FOUND);
      assert.match(
        e.message,
        /^RuntimeService\/ContainerStatus: rpc error: code = NotFound desc = /,
      );
      return true;
    });
  });

  test("an aborted call rejects as Canceled", async (t) => {
    const ctl = new AbortController();
    ctl.abort(new Error("stop"));
    await assert.rejects(
      t.runtime.version(undefined, ctl.signal),
      (e: unknown) => e instanceof CriError && e.code === GrpcCode.CANCELLED,
    );
  });
}
