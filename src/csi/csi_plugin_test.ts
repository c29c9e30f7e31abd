import assert from "node:assert/strict";
import { join } from "node:path";
import { GrpcServer } from "../cri/grpc_server.ts";
import { FakeClock } from "../util/clock.ts";
import { captureLogger } from "../testing/cm_fixtures.ts";
import {
  CsiDrivers,
  CSINODE_NOT_INITIALIZED,
  CsiRegistrationHandler,
  INIT_RETRY_AFTER_MS,
  initializeCSINode,
  nodeGetInfo,
  type NodeInfo,
} from "./csi_plugin.ts";
import { NodeDefinition } from "../../proto/csi/v1/csi.ts";

function handler(o: { info?: NodeInfo | Error; installFails?: boolean } = {}) {
  const { logger, lines } = captureLogger();
  const drivers = new CsiDrivers();
  const calls: string[] = [];
  const h = new CsiRegistrationHandler({
    drivers,
    logger,
    nodeGetInfo: (endpoint, timeoutMs) => {
      calls.push(`NodeGetInfo ${endpoint} ${timeoutMs}`);
      const info = o.info ?? { nodeId: "node-a", maxVolumesPerNode: 0, accessibleTopology: {} };
      return info instanceof Error ? Promise.reject(info) : Promise.resolve(info);
    },
    nodeInfo: {
      installCSIDriver: (name, id, max, topology) => {
        calls.push(`install ${name} ${id} ${max} ${JSON.stringify(topology)}`);
        return o.installFails ? Promise.reject(new Error("apiserver says no")) : Promise.resolve();
      },
      uninstallCSIDriver: (name) => {
        calls.push(`uninstall ${name}`);
        return Promise.resolve();
      },
    },
  });
  return { h, drivers, calls, lines };
}

Deno.test("CSI registration validates versions as upstream: the highest 1.x, not below a registered one", async () => {
  const { h, lines } = handler();
  h.validatePlugin("d.csi", "/p/csi.sock", ["1.0.0", "1.2.0", "2.0.0"]);
  assert.match(
    lines[0]!,
    /"kubernetes.io\/csi: Trying to validate a new CSI Driver with name: d.csi endpoint: \/p\/csi.sock versions: 1.0.0,1.2.0,2.0.0"/,
  );
  assert.throws(
    () => h.validatePlugin("d.csi", "/p/csi.sock", []),
    {
      message:
        'validation failed for CSI Driver d.csi at endpoint /p/csi.sock: kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. Plugin returned an empty list for supported versions',
    },
  );
  assert.throws(
    () => h.validatePlugin("d.csi", "/p/csi.sock", ["0.3.0", "2.0.0"]),
    /None of the versions specified \["0.3.0" "2.0.0"\] are supported. err=highest supported version reported is 0.3.0, must be v1.x/,
  );
  await h.registerPlugin("d.csi", "/p/csi.sock", ["1.2.0"]);
  assert.throws(
    () => h.validatePlugin("d.csi", "/q/csi.sock", ["1.2.0"]),
    /Another driver with the same name is already registered with a higher supported version: "1.2.0"/,
  );
  h.validatePlugin("d.csi", "/q/csi.sock", ["1.3.0"]);
});

Deno.test("CSI registration asks NodeGetInfo and publishes it; a failure forgets the driver", async () => {
  const ok = handler({
    info: { nodeId: "n1", maxVolumesPerNode: 8, accessibleTopology: { "t/zone": "z1" } },
  });
  await ok.h.registerPlugin("d.csi", "/p/csi.sock", ["1.0.0"], 5000);
  assert.deepEqual(ok.calls, [
    "NodeGetInfo /p/csi.sock 5000",
    'install d.csi n1 8 {"t/zone":"z1"}',
  ]);
  assert.equal(ok.drivers.get("d.csi")?.endpoint, "/p/csi.sock");
  await ok.h.deRegisterPlugin("d.csi", "/p/csi.sock");
  assert.equal(ok.drivers.get("d.csi"), undefined);
  assert.equal(ok.calls.at(-1), "uninstall d.csi");

  const down = handler({ info: new Error("connection refused") });
  await assert.rejects(
    down.h.registerPlugin("d.csi", "/p/csi.sock", ["1.0.0"]),
    /connection refused/,
  );
  assert.equal(down.drivers.get("d.csi"), undefined);
  assert.deepEqual(down.calls, [`NodeGetInfo /p/csi.sock ${2 * 60 * 1000}`, "uninstall d.csi"]);

  const refused = handler({ installFails: true });
  await assert.rejects(
    refused.h.registerPlugin("d.csi", "/p/csi.sock", ["1.0.0"]),
    /apiserver says no/,
  );
  assert.equal(refused.drivers.get("d.csi"), undefined);
});

Deno.test("nodeGetInfo reads a driver's NodeGetInfo over its socket", async () => {
  const dir = await Deno.makeTempDir();
  const socket = join(dir, "csi.sock");
  const server = await GrpcServer.listen({ path: socket });
  server.register(NodeDefinition, {
    nodeGetInfo: () => ({
      nodeId: "node-a",
      maxVolumesPerNode: 12n,
      accessibleTopology: { segments: { "topology.hostpath.csi/node": "node-a" } },
    }),
  });
  try {
    assert.deepEqual(await nodeGetInfo(socket, 10_000), {
      nodeId: "node-a",
      maxVolumesPerNode: 12,
      accessibleTopology: { "topology.hostpath.csi/node": "node-a" },
    });
  } finally {
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("initializeCSINode holds the node NotReady until the CSINode is initialized", async () => {
  const clock = new FakeClock(0);
  const { logger, lines } = captureLogger();
  const states: (string | undefined)[] = [];
  let failures = 7;
  let registered = false;
  clock.sleep(250).then(() => registered = true);
  const ctl = new AbortController();
  const done = initializeCSINode({
    nodeInfo: {
      initializeCSINodeWithAnnotation: () =>
        failures-- > 0 ? Promise.reject(new Error('nodes "node-a" not found')) : Promise.resolve(),
    },
    setStorageState: (e) => states.push(e),
    nodeRegistered: () => registered,
    clock,
    logger,
    signal: ctl.signal,
    random: () => 0,
  });
  // Each sleep ends exactly when due: the fake clock jumps from one to the next.
  let finished = false;
  done.finally(() => finished = true);
  while (!finished) {
    await new Promise((r) => setTimeout(r, 0));
    clock.stepToNext();
  }
  await done;
  assert.equal(states[0], CSINODE_NOT_INITIALIZED);
  assert.equal(states.at(-1), undefined);
  assert.equal(states[1], 'failed to initialize CSINode: nodes "node-a" not found');
  // Six tries in upstream's backoff, then a minute, then the seventh fails and the eighth works.
  assert.ok(
    lines.some((l) =>
      l.includes(
        '"Failed to initialize CSINode after retrying: timed out waiting for the condition"',
      )
    ),
  );
  // First the Node's registration (at 250 ms, seen at the next 100 ms poll).
  assert.equal(clock.now(), 300 + 30 * (1 + 8 + 64 + 512 + 4096) + INIT_RETRY_AFTER_MS + 30);
});
