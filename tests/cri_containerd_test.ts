/**
 * The CRI client against real containerd (Debian's 1.6, started privately by the harness with
 * images built from busybox-static): the shared suite, then what only a real runtime shows —
 * pod IPs on the CNI bridge, container output in the CRI log format, ExecSync, StopContainer's
 * grace period, pulls from a local registry with and without credentials, stats, image fs info,
 * and recovery of the same client across a containerd restart.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../proto/runtime/v1/api.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { RemoteImageService } from "../src/cri/remote_image.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import { type ContainerdHandle, POD_SUBNET, startContainerd } from "./containerd_harness.ts";
import { containerConfig, type CriTarget, registerCriSuite, sandboxConfig } from "./cri_suite.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { pushImage, startRegistry } from "./registry_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("CRI tests against containerd", [
  "containerd",
  "ctr",
  "runc",
  "docker-registry",
  "htpasswd",
]);

interface Shared {
  readonly dir: string;
  readonly socket: string;
  containerd: ContainerdHandle;
  readonly conn: CriConnection;
  readonly runtime: RemoteRuntimeService;
  readonly image: RemoteImageService;
}

let shared: Promise<Shared> | undefined;

/** One containerd for the whole file: starting one per test would dominate the run time. */
function getShared(): Promise<Shared> {
  shared ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "cri-containerd-" });
    const socket = join(dir, "containerd.sock");
    const containerd = await startContainerd({ dir, socket });
    await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
    const conn = new CriConnection({ endpoint: containerd.endpoint });
    return {
      dir,
      socket,
      containerd,
      conn,
      runtime: new RemoteRuntimeService({ connection: conn, timeoutMs: 60_000 }),
      image: new RemoteImageService({ connection: conn, timeoutMs: 60_000 }),
    };
  })();
  return shared;
}

async function target(): Promise<CriTarget & AsyncDisposable> {
  gate.check();
  const s = await getShared();
  return {
    runtime: s.runtime,
    image: s.image,
    imageName: BUSYBOX_IMAGE,
    logRoot: join(s.dir, "pods"),
    longRunning: ["sleep", "3600"],
    [Symbol.asyncDispose]: async () => {},
  };
}

registerCriSuite("containerd:", { ignore: gate.ignore, setup: target });

function realTest(name: string, fn: (t: CriTarget, s: Shared) => Promise<void>) {
  Deno.test({
    name: `containerd: ${name}`,
    ignore: gate.ignore,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const t = await target();
      await fn(t, await getShared());
    },
  });
}

/** Runs a sandbox for the test and always removes it. */
async function withSandbox(
  t: CriTarget,
  name: string,
  fn: (id: string, config: api.PodSandboxConfig) => Promise<void>,
) {
  const config = sandboxConfig(t, name);
  const id = await t.runtime.runPodSandbox(config, "");
  try {
    await fn(id, config);
  } finally {
    await t.runtime.stopPodSandbox(id).catch(() => {});
    await t.runtime.removePodSandbox(id).catch(() => {});
  }
}

async function poll<T>(what: string, fn: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

realTest("a pod sandbox gets an IP on the CNI bridge", async (t) => {
  await withSandbox(t, "ip", async (id) => {
    const st = await t.runtime.podSandboxStatus(id);
    const ip = st.status?.network?.ip ?? "";
    assert.match(ip, /^10\.88\.\d+\.\d+$/, `pod IP ${ip} in ${POD_SUBNET}`);
  });
});

realTest("container output lands in the pod log dir in the CRI log format", async (t) => {
  await withSandbox(t, "logs", async (pod, sandbox) => {
    const id = await t.runtime.createContainer(
      pod,
      containerConfig(t, "printer", [
        "sh",
        "-c",
        "echo first line; echo to stderr >&2; echo last line",
      ]),
      sandbox,
    );
    await t.runtime.startContainer(id);
    const path = `${sandbox.logDirectory}/printer/0.log`;
    const text = await poll("three log lines", async () => {
      const s = await Deno.readTextFile(path);
      return s.split("\n").filter(Boolean).length >= 3 ? s : undefined;
    });
    const lines = text.split("\n").filter(Boolean);
    const CRI_LINE =
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d) (stdout|stderr) F (.*)$/;
    for (const l of lines) assert.match(l, CRI_LINE);
    assert.deepEqual(
      lines.map((l) => CRI_LINE.exec(l)?.slice(2, 4)).sort(),
      [
        ["stderr", "to stderr"],
        ["stdout", "first line"],
        ["stdout", "last line"],
      ].sort(),
    );
    const done = await poll("exit", async () => {
      const s = await t.runtime.containerStatus(id);
      return s.status?.state === api.ContainerState.CONTAINER_EXITED ? s : undefined;
    });
    assert.equal(done.status?.exitCode, 0);
    assert.equal(done.status?.reason, "Completed");
  });
});

realTest("ExecSync returns stdout, stderr and the exit code", async (t) => {
  await withSandbox(t, "exec", async (pod, sandbox) => {
    const id = await t.runtime.createContainer(
      pod,
      containerConfig(t, "main", ["sleep", "3600"]),
      sandbox,
    );
    await t.runtime.startContainer(id);
    const r = await t.runtime.execSync(id, ["sh", "-c", "echo out; echo err >&2; exit 3"], 10);
    assert.equal(new TextDecoder().decode(r.stdout), "out\n");
    assert.equal(new TextDecoder().decode(r.stderr), "err\n");
    assert.equal(r.exitCode, 3);
    await t.runtime.stopContainer(id, 0);
  });
});

realTest("StopContainer waits the grace period for a process that ignores SIGTERM", async (t) => {
  await withSandbox(t, "stop", async (pod, sandbox) => {
    // A shell that ignores SIGTERM: only the SIGKILL after the timeout ends it.
    const stubborn = await t.runtime.createContainer(
      pod,
      containerConfig(t, "stubborn", [
        "sh",
        "-c",
        "trap '' TERM; echo ready; while :; do sleep 1; done",
      ]),
      sandbox,
    );
    const polite = await t.runtime.createContainer(
      pod,
      containerConfig(t, "polite", [
        "sh",
        "-c",
        "trap 'exit 0' TERM; echo ready; while :; do sleep 1; done",
      ]),
      sandbox,
    );
    await t.runtime.startContainer(stubborn);
    await t.runtime.startContainer(polite);
    // A signal that arrives before the shell has set its trap would end it at once.
    for (const name of ["stubborn", "polite"]) {
      await poll(`${name} ready`, async () => {
        const log = await Deno.readTextFile(`${sandbox.logDirectory}/${name}/0.log`);
        return log.includes(" F ready") ? true : undefined;
      });
    }
    let start = performance.now();
    await t.runtime.stopContainer(stubborn, 2);
    const stubbornMs = performance.now() - start;
    start = performance.now();
    await t.runtime.stopContainer(polite, 10);
    const politeMs = performance.now() - start;
    assert.ok(
      stubbornMs >= 1900,
      `stubborn stopped after ${stubbornMs} ms, before its 2 s grace period`,
    );
    assert.ok(politeMs < 5000, `polite container took ${politeMs} ms despite exiting on SIGTERM`);
    assert.equal((await t.runtime.containerStatus(stubborn)).status?.exitCode, 137);
    assert.equal((await t.runtime.containerStatus(polite)).status?.exitCode, 0);
  });
});

realTest("ContainerStats, ListContainerStats and ImageFsInfo report usage", async (t) => {
  await withSandbox(t, "stats", async (pod, sandbox) => {
    const id = await t.runtime.createContainer(
      pod,
      containerConfig(t, "main", ["sleep", "3600"]),
      sandbox,
    );
    await t.runtime.startContainer(id);
    // The first sample can precede any accounting: wait for a non-zero working set.
    const stats = await poll("a working set", async () => {
      const st = await t.runtime.containerStats(id);
      return (st?.memory?.workingSetBytes?.value ?? 0n) > 0n ? st : undefined;
    });
    assert.equal(stats.attributes?.id, id);
    const listed = await t.runtime.listContainerStats({
      id: "",
      podSandboxId: pod,
      labelSelector: {},
    });
    assert.deepEqual(listed.map((s) => s.attributes?.id), [id]);
    const fs = await t.image.imageFsInfo();
    // containerd samples snapshot usage every 10 s, so usedBytes may still be 0 here.
    assert.match(
      fs.imageFilesystems[0]?.fsId?.mountpoint ?? "",
      /io\.containerd\.snapshotter\.v1\.overlayfs$/,
    );
    assert.ok(fs.imageFilesystems[0]?.usedBytes !== undefined);
    await t.runtime.stopContainer(id, 0);
  });
});

realTest("PullImage from a local registry without and with credentials", async (t, s) => {
  await using open = await startRegistry({ dir: join(s.dir, "registry-open") });
  const openRef = `${open.host}/test/busybox:open`;
  await pushImage({ registry: open, image: BUSYBOX, ref: openRef });
  const ref = await t.image.pullImage(
    api.ImageSpec.create({ image: openRef }),
    undefined,
    undefined,
  );
  assert.match(ref, /^sha256:[0-9a-f]{64}$/);
  assert.ok(
    (await t.image.imageStatus(api.ImageSpec.create({ image: openRef }))).image,
  );

  const auth = { username: "puller", password: "s3cret" };
  await using closed = await startRegistry({ dir: join(s.dir, "registry-auth"), auth });
  const closedRef = `${closed.host}/test/busybox:auth`;
  await pushImage({ registry: closed, image: BUSYBOX, ref: closedRef, auth });
  const spec = api.ImageSpec.create({ image: closedRef });
  await assert.rejects(
    t.image.pullImage(spec, undefined, undefined),
    /401 Unauthorized|unauthorized|authorization failed/i,
  );
  const wrong = api.AuthConfig.create({ username: "puller", password: "wrong" });
  await assert.rejects(
    t.image.pullImage(spec, wrong, undefined),
    /401 Unauthorized|unauthorized|authorization failed/i,
  );
  const right = api.AuthConfig.create({ username: auth.username, password: auth.password });
  assert.match(await t.image.pullImage(spec, right, undefined), /^sha256:/);
  await t.image.removeImage(spec);
  assert.equal((await t.image.imageStatus(spec)).image, undefined);
});

realTest("the same client recovers after containerd restarts", async (t, s) => {
  assert.equal((await t.runtime.version()).runtimeApiVersion, "v1");
  await s.containerd.stop();
  await assert.rejects(t.runtime.version(undefined, AbortSignal.timeout(2_000)));
  s.containerd = await startContainerd({ dir: s.dir, socket: s.socket });
  const v = await poll(
    "Version after restart",
    () => t.runtime.version(undefined, AbortSignal.timeout(2_000)),
    20_000,
  );
  assert.equal(v.runtimeApiVersion, "v1");
});

Deno.test({
  name: "containerd: (teardown)",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    if (!shared) return;
    const s = await shared;
    s.conn.close();
    await s.containerd.stop();
    await Deno.remove(s.dir, { recursive: true }).catch(() => {});
  },
});
