/**
 * CSI driver registration end to end, through the real apiserver and our agent on real containerd:
 * a driver's registrar puts its socket in `<root-dir>/plugins_registry`, the agent's plugin
 * manager asks it GetInfo, the CSI handler asks the driver's Node service NodeGetInfo, and the
 * Node gets the `csi.volume.kubernetes.io/nodeid` annotation and the driver's topology label
 * while the CSINode lists the driver with its topology key and volume limit; the registrar is
 * told it is registered. Removing the registrar's socket takes it all away again.
 *
 * The registrar and the driver are the suite's own gRPC servers (src/cri/grpc_server.ts),
 * tests/csi_registrar.ts and tests/csi_hostpath_driver.ts, speaking upstream's
 * pluginregistration v1 and CSI v1: the Go module proxy this suite builds from serves neither
 * node-driver-registrar nor any CSI node driver (csi-driver-host-path and livenessprobe are
 * refused at every version; see tests/csi_build.ts), so they stand in for node-driver-registrar
 * and csi-driver-host-path. Upstream's counterpart: the registration part of
 * `test/e2e/storage/csi_mock/` and `pkg/kubelet/pluginmanager` tests.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { e2eSuite, poll, startNodeAgent } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";
import { startHostPathDriver } from "./csi_hostpath_driver.ts";
import { startRegistrar } from "./csi_registrar.ts";

const gate = await requireRoot("CSI registration e2e tests", ["containerd", "runc", "go"]);
const NODE = "kts-csi-registration";
const DRIVER = "registration.csi.kubelet-ts.test";
const TOPOLOGY_KEY = "topology.registration.csi/node";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly rootDir: string;
}

const suite = e2eSuite<World>({
  name: "csi registration",
  gate,
  userAgent: "csi-registration-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "csi-registration-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd"), socket }));
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
      });
      stack.move();
      return { dir, cp, containerd, agent, rootDir: join(dir, "root") };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

interface CSINode {
  spec: {
    drivers:
      | {
        name: string;
        nodeID: string;
        topologyKeys?: string[];
        allocatable?: { count?: number };
      }[]
      | null;
  };
}

e2e(
  "a driver's registrar socket registers it: Node annotation and label, CSINode driver",
  async (w, api) => {
    const driverSocket = join(w.rootDir, "plugins", DRIVER, "csi.sock");
    const registrarSocket = join(w.rootDir, "plugins_registry", `${DRIVER}-reg.sock`);
    await using driver = await startHostPathDriver({
      dir: join(w.dir, "hostpath"),
      socket: driverSocket,
      name: DRIVER,
      nodeId: NODE,
      maxVolumesPerNode: 7,
      topology: { [TOPOLOGY_KEY]: NODE },
    });
    await using registrar = await startRegistrar({
      socket: registrarSocket,
      name: DRIVER,
      endpoint: driverSocket,
    });
    const notified = registrar.notified;
    await poll(
      "the registrar told it is registered",
      () => Promise.resolve(notified.length > 0 ? true : undefined),
      60_000,
      250,
    );
    assert.deepEqual(notified, [{ pluginRegistered: true, error: "" }]);
    // Registration asks the driver nothing but its node info.
    assert.deepEqual([...new Set(driver.calls.map((c) => c.method))], ["NodeGetInfo"]);
    const node = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
    assert.equal(
      node.metadata?.annotations?.["csi.volume.kubernetes.io/nodeid"],
      JSON.stringify({ [DRIVER]: NODE }),
    );
    assert.equal(node.metadata?.labels?.[TOPOLOGY_KEY], NODE);
    const csiNode = await api.get<CSINode>(`/apis/storage.k8s.io/v1/csinodes/${NODE}`);
    assert.deepEqual(csiNode.spec.drivers, [{
      name: DRIVER,
      nodeID: NODE,
      topologyKeys: [TOPOLOGY_KEY],
      allocatable: { count: 7 },
    }]);
    assert.match(
      w.agent.stderr(),
      /kubernetes.io\/csi: Register new plugin with name: registration\.csi/,
    );

    // The registrar goes: the driver is taken off the CSINode and the Node.
    await registrar.stop();
    await poll(
      "the driver off the CSINode",
      async () => {
        const c = await api.get<CSINode>(`/apis/storage.k8s.io/v1/csinodes/${NODE}`);
        return (c.spec.drivers ?? []).length === 0 ? true : undefined;
      },
      60_000,
      250,
    );
    // Then from the Node, as upstream's uninstall goes: CSINode first, Node after.
    await poll(
      "the driver off the Node's nodeid annotation",
      async () => {
        const after = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
        const ids = after.metadata?.annotations?.["csi.volume.kubernetes.io/nodeid"];
        return ids === undefined ? true : undefined;
      },
      60_000,
      250,
    );
  },
);

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
