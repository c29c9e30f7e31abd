import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod, V1Service } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { detectCgroupLayout } from "../src/cm/cgroup_layout.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { RemoteImageService } from "../src/cri/remote_image.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import { Semaphore } from "../src/util/semaphore.ts";
import { CriFloor } from "./_bench_cri_floor.ts";
import { TEST_CGROUP_PARENT } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

// The floor makes each pod's cgroup, as a kubelet does: root only.
const gate = await requireRoot("the CRI floor's tests", []);
const IMAGE = "docker.io/library/busybox:1.36";

const KUBERNETES: V1Service = {
  metadata: { name: "kubernetes", namespace: "default" },
  spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443, protocol: "TCP" }] },
};

function pod(name: string): V1Pod {
  return {
    metadata: { name, namespace: "default" },
    spec: {
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      dnsPolicy: "ClusterFirst",
      enableServiceLinks: true,
      containers: [{ name: "main", image: IMAGE, imagePullPolicy: "Never", command: ["sleep"] }],
    },
  };
}

async function harness() {
  const dir = await Deno.makeTempDir({ prefix: "cri-floor-test-" });
  const fake = await startFakeRuntime({ socket: join(dir, "cri.sock"), preloadImages: [IMAGE] });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const floor = await CriFloor.create({
    runtime: new RemoteRuntimeService({ connection }),
    images: new RemoteImageService({ connection }),
    dir: join(dir, `floor-${crypto.randomUUID().slice(0, 8)}`),
    pod,
    services: [KUBERNETES],
  }, IMAGE);
  return {
    fake,
    floor,
    dir,
    async [Symbol.asyncDispose]() {
      await floor.close();
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Whether cgroup `path` (below the hierarchies' roots) exists in the first v1 or the v2 one. */
async function cgroupExists(path: string): Promise<boolean> {
  const layout = await detectCgroupLayout();
  const root = layout.unified ?? [...layout.v1.values()][0]!;
  try {
    return (await Deno.stat(join(root, path))).isDirectory;
  } catch {
    return false;
  }
}

Deno.test({
  name: "CRI floor sends the requests a kubelet sends for the pod, not a minimal one",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    await using h = await harness();
    const p = await h.floor.prepare("a");
    const uid = p.pod.metadata!.uid!;
    let sandboxId = "";
    await h.floor.start(p, (id) => sandboxId = id);

    const sandbox = h.fake.service.sandboxes.get(sandboxId)!;
    const linux = sandbox.config.linux!;
    // Upstream forces RuntimeDefault on every sandbox; a minimal request leaves it unset.
    assert.equal(
      linux.securityContext?.seccomp?.profileType,
      api.SecurityProfile_ProfileType.RuntimeDefault,
    );
    assert.match(linux.cgroupParent, new RegExp(`/kubepods/besteffort/pod${uid}$`));
    assert.ok(await cgroupExists(linux.cgroupParent), "the pod's cgroup is made first");
    assert.equal(linux.resources?.cpuShares, 2n);
    assert.equal(sandbox.config.labels["io.kubernetes.pod.uid"], uid);

    const [container] = [...h.fake.service.containers.values()];
    assert.ok(container, "the container was created");
    assert.equal(container.state, api.ContainerState.CONTAINER_RUNNING);
    const config = container.config;
    assert.deepEqual(config.mounts.map((m) => m.containerPath), [
      "/etc/hosts",
      "/dev/termination-log",
    ]);
    // The hosts file names the pod's IP, read by PodSandboxStatus after the sandbox.
    const hosts = await Deno.readTextFile(config.mounts[0]!.hostPath);
    assert.match(hosts, new RegExp(`${sandbox.ip.replaceAll(".", "\\.")}\\ta\\n`));
    const env = new Map(config.envs.map((e) => [e.key, new TextDecoder().decode(e.value)]));
    assert.equal(env.get("KUBERNETES_SERVICE_HOST"), "10.96.0.1");
    assert.equal(config.linux?.resources?.oomScoreAdj, 1000n);
    assert.equal(config.annotations["io.kubernetes.container.restartCount"], "0");
  },
});

Deno.test({
  name: "CRI floor bursts time every pod, pace RunPodSandbox and leave no sandbox or cgroup",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    await using h = await harness();
    h.fake.setLatency("RunPodSandbox", 50);
    const r = await h.floor.burst(5, { sandboxStarts: new Semaphore(2) });
    assert.equal(r.latency.length, 5);
    assert.ok(r.latency.every((ms) => ms > 0 && ms <= r.lastMs), String(r.latency));
    // Two at a time: three rounds of 50 ms (all at once would take one).
    assert.ok(r.lastMs >= 145, `5 pods, 2 sandboxes at once, took ${r.lastMs} ms`);
    for (const rpc of ["RunPodSandbox", "PodSandboxStatus", "CreateContainer", "StartContainer"]) {
      assert.equal(h.fake.callCount(rpc), 5, rpc);
    }
    assert.equal(h.fake.service.sandboxes.size, 0);
    const root = join(TEST_CGROUP_PARENT, h.floor.name, "kubepods", "besteffort");
    const layout = await detectCgroupLayout();
    const first = layout.unified ?? [...layout.v1.values()][0]!;
    const left = [...Deno.readDirSync(join(first, root))].filter((e) => e.name.startsWith("pod"));
    assert.deepEqual(left, [], "the pods' cgroups are removed");
  },
});
