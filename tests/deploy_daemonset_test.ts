/**
 * The DaemonSet manifest (`deploy/daemonset.yaml`) against the real apiserver and the agent on
 * real containerd: the apiserver accepts the manifest with strict field validation
 * (server-side dry run), and the pod its DaemonSet controller would make (no controller
 * manager runs here: the test creates it bound to the node) runs on the agent with hostPID,
 * privileged and hostPath mounts, installs the (stand-in) binary and the units into a test
 * root standing in for the host's directories, keeps running, and stops on deletion. The
 * restart of kubelet.service and the run of the new binary on the host are off here
 * (RESTART_KUBELET=false, PREPARE_KUBELET=false): on this machine they would reach the real
 * host through nsenter. Needs root, containerd, runc, openssl, go (for the control plane
 * binaries) and busybox-static.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import type { V1Container, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { ctrOrThrow, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  startNodeAgent,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";
import { INSTALLER_IMAGE, writeInstallerImage } from "../deploy/installer_image.ts";

const gate = await requireRoot("deploy DaemonSet e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "/bin/busybox",
]);
const NODE = "kts-deploy-e2e";
const NS = "kube-system";
const MANIFEST = new URL("../deploy/daemonset.yaml", import.meta.url).pathname;
const STAND_IN = "#!/bin/sh\necho 'Kubernetes v1.36.3+kubelet-ts.0.1.0 (stand-in)'\n";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** Stands in for the host's `/`: the pod's hostPath volumes point under it. */
  readonly host: string;
}

const suite = e2eSuite<World>({
  name: "deploy",
  gate,
  userAgent: "deploy-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "deploy-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), socket }),
      );
      await importImages({ containerdSocket: socket, images: [PAUSE] });
      await Deno.writeTextFile(join(dir, "kubelet"), STAND_IN, { mode: 0o755 });
      await writeInstallerImage({
        binary: join(dir, "kubelet"),
        output: join(dir, "installer.tar"),
      });
      await ctrOrThrow(socket, "k8s.io", ["images", "import", join(dir, "installer.tar")], {
        what: "import the installer image",
      });
      await ensureDefaultServiceAccount(cp, NS);
      await ensureRootCAConfigMap(cp, NS);
      const host = join(dir, "host");
      // The manifest's /etc/systemd/system volume is of type Directory: the host has it.
      await Deno.mkdir(join(host, "etc/systemd/system"), { recursive: true });
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
      });
      stack.move();
      return { dir, cp, containerd, agent, host };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

suite.test("the apiserver accepts the manifest with strict field validation", async (w) => {
  const ok = await w.cp.kubectl(["apply", "--dry-run=server", "--validate=strict", "-f", MANIFEST]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /daemonset\.apps\/kubelet-ts-installer created \(server dry run\)/);
  // The check can fail: a misspelt field is refused.
  const typo = (await Deno.readTextFile(MANIFEST)).replace("hostPID: true", "hostPid: true");
  const bad = await w.cp.kubectl(["apply", "--dry-run=server", "--validate=strict", "-f", "-"], {
    stdin: typo,
  });
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /unknown field "spec\.template\.spec\.hostPid"/);
});

suite.test("the DaemonSet's pod installs into the host paths and keeps running", async (w, api) => {
  const ds = parseYaml(await Deno.readTextFile(MANIFEST));
  const spec = structuredClone(ds.spec.template.spec) as V1PodSpec;
  // What the DaemonSet controller would do, and the test root in place of the host's `/`.
  spec.nodeName = NODE;
  for (const v of spec.volumes ?? []) {
    if (v.hostPath) v.hostPath.path = join(w.host, v.hostPath.path);
  }
  const container = spec.containers[0] as V1Container;
  assert.equal(container.image, INSTALLER_IMAGE, "the image imported above");
  for (const e of container.env ?? []) {
    if (e.name === "RESTART_KUBELET" || e.name === "PREPARE_KUBELET") e.value = "false";
  }
  const name = `kubelet-ts-installer-${NODE}`;
  const pod: V1Pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: ds.spec.template.metadata.labels },
    spec,
  };
  const created = await w.cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(pod) });
  assert.equal(created.code, 0, created.stderr);

  const running = await waitPod(
    api,
    NS,
    name,
    "Running and ready",
    (p) => p.status?.phase === "Running" && p.status.containerStatuses?.[0]?.ready === true,
  );
  // The priority admission resolved the class; the pod is critical to the node.
  assert.equal(running.spec?.priority, 2000001000);
  const binary = join(w.host, "usr/local/bin/kubelet");
  assert.equal(await Deno.readTextFile(binary), STAND_IN);
  assert.equal((await Deno.stat(binary)).mode! & 0o777, 0o755);
  assert.match(
    await Deno.readTextFile(join(w.host, "etc/systemd/system/kubelet.service.d/10-kubeadm.conf")),
    /^ExecStart=\/usr\/local\/bin\/kubelet \$KUBELET_KUBECONFIG_ARGS/m,
  );
  assert.equal(
    (await Deno.stat(join(w.host, "etc/systemd/system/kubelet.service"))).mode! & 0o777,
    0o644,
  );
  const logs = await w.cp.kubectl(["logs", "-n", NS, name]);
  assert.equal(logs.code, 0, logs.stderr);
  assert.match(logs.stdout, /installed \/usr\/local\/bin\/kubelet/);
  assert.match(logs.stdout, /restart skipped \(RESTART_KUBELET=false\)/);
  assert.match(logs.stdout, /done; sleeping until stopped/);

  // The installer exits 0 on SIGTERM, well within the pod's 5 s grace period.
  const deleted = await w.cp.kubectl(["delete", "pod", "-n", NS, name, "--wait=false"]);
  assert.equal(deleted.code, 0, deleted.stderr);
  await waitPodGone(api, NS, name, 30_000);
});

suite.teardown("stop", async (w) => {
  await w.containerd.stop();
});
