import assert from "node:assert/strict";
import { join } from "node:path";
import type { ResourceV1ResourceClaim, V1Pod, V1PodResourceClaim } from "@kubernetes/client-node";
import type { KubeClient } from "../client/kube_client.ts";
import {
  type Claim,
  DRAPluginDefinition,
  type NodePrepareResourcesResponse,
  type NodeUnprepareResourcesResponse,
} from "../../proto/dra/v1/api.ts";
import {
  type DeviceHealth,
  DRAResourceHealthDefinition,
  HealthStatus,
  type NodeWatchResourcesResponse,
} from "../../proto/dra_health/v1alpha1/api.ts";
import { FakeKubeGetter } from "../testing/fake_kube_getter.ts";
import { GrpcServer } from "../cri/grpc_server.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { DraMetrics } from "../metrics/dra_metrics.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import {
  DraManager,
  type DraManagerOptions,
  DynamicResourcesError,
  resourceClaimName,
} from "./dra_manager.ts";
import { DRA_MANAGER_STATE_FILE } from "./dra_state.ts";

const DRIVER = "test-driver.cdi.k8s.io";
const NS = "default";

/** A DRA driver's kubelet plugin: devices per claim request, CDI IDs as the test driver's. */
class FakeDriver {
  readonly prepared: Claim[][] = [];
  readonly unprepared: Claim[][] = [];
  /** Per claim name: an error to answer instead of devices. */
  readonly failures = new Map<string, string>();
  /** The kubelet's open NodeWatchResources streams: a sender each. */
  readonly healthStreams = new Set<(res: NodeWatchResourcesResponse) => void>();
  server?: GrpcServer;

  /** Sends every open health stream this report of the driver's devices. */
  sendHealth(devices: DeviceHealth[]): void {
    for (const send of this.healthStreams) send({ devices });
  }

  async serve(socket: string, fullName: string = DRAPluginDefinition.fullName): Promise<void> {
    // Stopped as a driver that exits: calls in flight are not waited for.
    const server = await GrpcServer.listen({ path: socket, closeGracePeriodMs: 0 });
    server.register({ ...DRAPluginDefinition, fullName }, {
      nodePrepareResources: (request) => {
        this.prepared.push(request.claims);
        const claims: NodePrepareResourcesResponse["claims"] = {};
        for (const c of request.claims) {
          claims[c.uid] = {
            error: this.failures.get(c.name) ?? "",
            devices: ["gpu", "nic"].map((req) => ({
              requestNames: [req],
              poolName: "node-a",
              deviceName: `device-${req}`,
              cdiDeviceIds: [`${DRIVER}/test=claim-${c.uid}-${req}`],
            })),
          };
        }
        return { claims };
      },
      nodeUnprepareResources: (request) => {
        this.unprepared.push(request.claims);
        const claims: NodeUnprepareResourcesResponse["claims"] = {};
        for (const c of request.claims) claims[c.uid] = { error: "" };
        return { claims };
      },
    });
    server.register(DRAResourceHealthDefinition, {
      nodeWatchResources: (_request, { signal }) =>
        new ReadableStream({
          start: (c) => {
            const send = (res: NodeWatchResourcesResponse) => c.enqueue(res);
            this.healthStreams.add(send);
            signal.addEventListener("abort", () => {
              this.healthStreams.delete(send);
              c.close();
            }, { once: true });
          },
        }),
    });
    this.server = server;
  }
}

function resourceClaim(
  name: string,
  uid: string,
  reservedFor: string[],
  opts: { allocated?: boolean; owner?: string } = {},
): ResourceV1ResourceClaim {
  return {
    metadata: {
      name,
      namespace: NS,
      uid,
      ownerReferences: opts.owner
        ? [{ apiVersion: "v1", kind: "Pod", name: "p", uid: opts.owner, controller: true }]
        : undefined,
    },
    spec: { devices: { requests: [] } },
    status: {
      allocation: opts.allocated === false ? undefined : {
        devices: {
          results: ["gpu", "nic"].map((request) => ({
            driver: DRIVER,
            pool: "node-a",
            device: `device-${request}`,
            request,
          })),
        },
      },
      reservedFor: reservedFor.map((uid) => ({ resource: "pods", name: uid, uid })),
    },
  };
}

const claimPath = (name: string) =>
  `/apis/resource.k8s.io/v1/namespaces/${NS}/resourceclaims/${name}`;

function pod(uid: string, claims: V1PodResourceClaim[], status?: V1Pod["status"]): V1Pod {
  return {
    metadata: { name: `pod-${uid}`, namespace: NS, uid },
    spec: {
      containers: [
        {
          name: "gpu-user",
          image: "busybox",
          resources: { claims: [{ name: "c", request: "gpu" }] },
        },
        { name: "all", image: "busybox", resources: { claims: [{ name: "c" }] } },
        { name: "none", image: "busybox" },
      ],
      resourceClaims: claims,
    },
    status,
  };
}

interface World extends AsyncDisposable {
  readonly dir: string;
  readonly socket: string;
  readonly driver: FakeDriver;
  readonly api: FakeKubeGetter;
  readonly registry: MetricsRegistry;
  readonly metrics: DraMetrics;
  dra: DraManager;
  /** A new manager on the same state directory, as after a kubelet restart. */
  restart(): DraManager;
  register(dra?: DraManager): void;
}

async function world(opts: Partial<DraManagerOptions> = {}): Promise<World> {
  const dir = await Deno.makeTempDir({ prefix: "dra-manager-test-" });
  const driver = new FakeDriver();
  const socket = join(dir, "plugins", DRIVER, "dra.sock");
  await driver.serve(socket);
  const api = new FakeKubeGetter({
    [claimPath("shared")]: resourceClaim("shared", "claim-uid-1", ["pod-1", "pod-2"]),
  });
  const registry = new MetricsRegistry();
  const metrics = new DraMetrics(registry);
  // Every manager made, a restart's predecessor too: each one's health stream ends at disposal,
  // before the directory goes (an old one can write dra_health_state once the driver closes: the
  // removal failed "Directory not empty" now and then under parallel load).
  const made: DraManager[] = [];
  const make = () => {
    const dra = new DraManager({
      clock: new FakeClock(),
      logger: createLogger({ write: () => {} }),
      metrics,
      kubeClient: api as unknown as KubeClient,
      nodeName: "node-a",
      stateDirectory: dir,
      ...opts,
    });
    made.push(dra);
    return dra;
  };
  const w: World = {
    dir,
    socket,
    driver,
    api,
    registry,
    metrics,
    dra: make(),
    restart: () => w.dra = make(),
    register: (dra = w.dra) => dra.plugins.registerPlugin(DRIVER, socket, ["v1.DRAPlugin"], 10_000),
    async [Symbol.asyncDispose]() {
      for (const dra of made) await dra.plugins.stop();
      await driver.server?.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
  return w;
}

const shared: V1PodResourceClaim[] = [{ name: "c", resourceClaimName: "shared" }];

async function inUse(registry: MetricsRegistry): Promise<[string | undefined, number][]> {
  const f = parseExposition(await registry.render()).find((x) =>
    x.name === "dra_resource_claims_in_use"
  );
  return (f?.samples ?? []).map((s) => [s.labels.driver_name, s.value]);
}

Deno.test("DraManager prepares a pod's claim through its driver and gives each container the CDI devices of the requests it names", async () => {
  await using w = await world();
  w.register();
  const p = pod("pod-1", shared);
  await w.dra.prepareResources(p);
  assert.deepEqual(w.driver.prepared, [[{ namespace: NS, uid: "claim-uid-1", name: "shared" }]]);
  const [gpuUser, all, none] = p.spec!.containers;
  assert.deepEqual(w.dra.cdiDevices(p, gpuUser!), [`${DRIVER}/test=claim-claim-uid-1-gpu`]);
  assert.deepEqual(w.dra.cdiDevices(p, all!), [
    `${DRIVER}/test=claim-claim-uid-1-gpu`,
    `${DRIVER}/test=claim-claim-uid-1-nic`,
  ]);
  assert.deepEqual(w.dra.cdiDevices(p, none!), []);
  assert.equal(w.dra.podMightNeedToUnprepareResources("pod-1"), true);
  assert.deepEqual(await inUse(w.registry), [["<any>", 1], [DRIVER, 1]]);
  assert.equal(
    w.metrics.grpcOperationsDuration.count({
      driver_name: DRIVER,
      method_name: "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
      grpc_status_code: "OK",
    }),
    1,
  );
  // The checkpoint has the pod and the devices.
  const file = await Deno.readTextFile(join(w.dir, DRA_MANAGER_STATE_FILE));
  const data = JSON.parse(JSON.parse(file).Data);
  assert.deepEqual(data.ClaimInfoStateList[0].PodUIDs, { "pod-1": {} });
  assert.equal(data.ClaimInfoStateList[0].DriverState[DRIVER].Devices.length, 2);
});

Deno.test("DraManager prepares a shared claim once and unprepares it after its last pod", async () => {
  await using w = await world();
  w.register();
  await w.dra.prepareResources(pod("pod-1", shared));
  await w.dra.prepareResources(pod("pod-2", shared));
  assert.equal(w.driver.prepared.length, 1, "the second pod finds the claim prepared");
  await w.dra.unprepareResources(pod("pod-1", shared));
  assert.equal(w.driver.unprepared.length, 0, "pod-2 still uses the claim");
  assert.equal(w.dra.podMightNeedToUnprepareResources("pod-1"), false);
  await w.dra.unprepareResources(pod("pod-2", shared));
  assert.deepEqual(w.driver.unprepared, [[{ namespace: NS, uid: "claim-uid-1", name: "shared" }]]);
  // Idempotent: nothing left to unprepare.
  await w.dra.unprepareResources(pod("pod-2", shared));
  assert.equal(w.driver.unprepared.length, 1);
  assert.deepEqual(await inUse(w.registry), [["<any>", 0]]);
  const file = await Deno.readTextFile(join(w.dir, DRA_MANAGER_STATE_FILE));
  assert.match(JSON.parse(file).Data, /"ClaimInfoStateList":\[\]/);
  assert.equal(
    w.metrics.operationsDuration.count({ operation_name: "UnprepareResources", is_error: "false" }),
    3,
  );
});

Deno.test("DraManager after a restart gives containers their CDI devices from the checkpoint and unprepares what it prepared before", async () => {
  await using w = await world();
  w.register();
  const p = pod("pod-1", shared);
  await w.dra.prepareResources(p);
  await w.dra.plugins.stop();
  const dra = w.restart();
  await dra.load();
  // The pod keeps running: no prepare, yet a restarted container gets its devices.
  assert.deepEqual(dra.cdiDevices(p, p.spec!.containers[0]!), [
    `${DRIVER}/test=claim-claim-uid-1-gpu`,
  ]);
  assert.equal(dra.podMightNeedToUnprepareResources("pod-1"), true);
  // Its driver has to register again before the claim can be released.
  await assert.rejects(
    dra.unprepareResources(p),
    /^DynamicResourcesError: unprepare dynamic resources: DRA driver test-driver.cdi.k8s.io is not registered$/,
  );
  w.register(dra);
  await dra.unprepareResources(p);
  assert.equal(w.driver.prepared.length, 1);
  assert.equal(w.driver.unprepared.length, 1);
  assert.equal(dra.podMightNeedToUnprepareResources("pod-1"), false);
});

Deno.test("DraManager's reconcile loop unprepares the claims of pods no longer active", async () => {
  await using w = await world();
  w.register();
  await w.dra.prepareResources(pod("pod-1", shared));
  let active: V1Pod[] = [pod("pod-1", shared)];
  const dra = new DraManager({
    clock: new FakeClock(),
    logger: createLogger({ write: () => {} }),
    kubeClient: w.api as unknown as KubeClient,
    stateDirectory: w.dir,
    plugins: w.dra.plugins,
    activePods: () => active,
    sourcesReady: () => true,
  });
  await dra.reconcile();
  assert.equal(w.driver.unprepared.length, 0);
  active = [];
  await dra.reconcile();
  assert.deepEqual(w.driver.unprepared, [[{ namespace: NS, uid: "claim-uid-1", name: "shared" }]]);
});

Deno.test("DraManager fails a pod whose claim is not allocated, not reserved for it or not its own, and changes nothing", async () => {
  await using w = await world();
  w.register();
  w.api.objects.set(
    claimPath("loose"),
    resourceClaim("loose", "u2", ["pod-1"], { allocated: false }),
  );
  w.api.objects.set(claimPath("other"), resourceClaim("other", "u3", ["pod-9"]));
  w.api.objects.set(
    claimPath("pod-1-c-x"),
    resourceClaim("pod-1-c-x", "u4", ["pod-1"], { owner: "pod-9" }),
  );
  const cases: [V1Pod, RegExp][] = [
    [
      pod("pod-1", [{ name: "c", resourceClaimName: "loose" }]),
      /ResourceClaim loose: not allocated$/,
    ],
    [
      pod("pod-1", [{ name: "c", resourceClaimName: "other" }]),
      /pod pod-pod-1 \(pod-1\) is not allowed to use ResourceClaim other \(u3\)$/,
    ],
    [
      pod("pod-1", [{ name: "c", resourceClaimTemplateName: "t" }], {
        resourceClaimStatuses: [{ name: "c", resourceClaimName: "pod-1-c-x" }],
      }),
      /ResourceClaim default\/pod-1-c-x was not created for Pod default\/pod-pod-1 \(Pod is not owner\)$/,
    ],
    [
      pod("pod-1", [{ name: "c", resourceClaimName: "missing" }]),
      /fetch ResourceClaim missing: resourceclaims "missing" not found$/,
    ],
  ];
  for (const [p, message] of cases) {
    await assert.rejects(
      w.dra.prepareResources(p),
      (e: unknown) =>
        e instanceof DynamicResourcesError &&
        e.message.startsWith("prepare dynamic resources: ") && message.test(e.message),
    );
  }
  assert.equal(w.driver.prepared.length, 0);
  assert.equal(w.dra.podMightNeedToUnprepareResources("pod-1"), false);
  assert.equal(
    w.metrics.operationsDuration.count({ operation_name: "PrepareResources", is_error: "true" }),
    cases.length,
  );
});

Deno.test("DraManager fails a claim whose driver is not registered, or whose driver reports an error", async () => {
  await using w = await world();
  const p = pod("pod-1", shared);
  await assert.rejects(
    w.dra.prepareResources(p),
    /prepare dynamic resources: DRA driver test-driver.cdi.k8s.io is not registered$/,
  );
  assert.equal(w.dra.podMightNeedToUnprepareResources("pod-1"), false);
  w.register();
  w.driver.failures.set("shared", "no such device");
  await assert.rejects(
    w.dra.prepareResources(p),
    /prepare dynamic resources: NodePrepareResources failed for ResourceClaim shared: no such device$/,
  );
  assert.deepEqual(await inUse(w.registry), [["<any>", 0]]);
  // The pod is recorded on the claim: unpreparing releases it through the driver.
  await w.dra.unprepareResources(p);
  assert.equal(w.driver.unprepared.length, 1);
});

Deno.test("DraManager calls a v1beta1 plugin under its own service", async () => {
  await using w = await world();
  const beta = new FakeDriver();
  const socket = join(w.dir, "beta.sock");
  await beta.serve(socket, "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin");
  try {
    w.dra.plugins.registerPlugin(DRIVER, socket, ["v1beta1.DRAPlugin"], 10_000);
    await w.dra.prepareResources(pod("pod-1", shared));
    assert.equal(beta.prepared.length, 1);
    assert.equal(w.driver.prepared.length, 0);
  } finally {
    await beta.server?.close();
  }
});

Deno.test("DraManager skips a template claim for which no ResourceClaim was generated", async () => {
  await using w = await world();
  const claims = [{ name: "c", resourceClaimTemplateName: "gpu-template" }];
  await w.dra.prepareResources(pod("pod-1", claims, { resourceClaimStatuses: [{ name: "c" }] }));
  // Not generated yet: upstream's error, for both operations.
  await assert.rejects(
    w.dra.prepareResources(pod("pod-1", claims)),
    /ResourceClaim not created yet/,
  );
  await assert.rejects(
    w.dra.unprepareResources(pod("pod-1", claims)),
    /ResourceClaim not created yet/,
  );
});

Deno.test("DraManager without an API server cannot prepare a claim", async () => {
  const dra = new DraManager({ clock: new FakeClock(), logger: createLogger({ write: () => {} }) });
  await assert.rejects(
    dra.prepareResources(pod("pod-1", shared)),
    /^DynamicResourcesError: prepare dynamic resources: ResourceClaim shared: cannot be fetched without an API server/,
  );
  await dra.prepareResources(pod("pod-1", []));
  assert.deepEqual(dra.claimsInUse(), new Map([["<any>", 0]]));
});

Deno.test("resourceClaimName rejects a claim that names no source", () => {
  assert.throws(
    () => resourceClaimName(pod("u", []), { name: "x" }),
    /pod "default\/pod-u", spec.resourceClaim "x": none of the supported fields are set/,
  );
});

Deno.test("DraManager with a corrupt checkpoint does not start and prepares no claim", async () => {
  await using w = await world();
  w.register();
  await w.dra.prepareResources(pod("pod-1", shared));
  const path = join(w.dir, DRA_MANAGER_STATE_FILE);
  await Deno.writeTextFile(path, (await Deno.readTextFile(path)).replace("pod-1", "pod-9"));
  const dra = w.restart();
  await assert.rejects(
    dra.run(AbortSignal.abort()),
    /create ResourceClaim cache: could not read the DRA checkpoint, please drain node and remove DRA state file: .*checkpoint is corrupted/,
  );
  await assert.rejects(dra.prepareResources(pod("pod-2", shared)), /checkpoint is corrupted/);
});

/** Polls `f` until it returns true (the health stream is asynchronous). */
async function until(f: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (f()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`timed out waiting for ${what}`);
}

const health = (
  deviceName: string,
  status: HealthStatus,
  message = "",
): DeviceHealth => ({
  device: { poolName: "node-a", deviceName },
  health: status,
  lastUpdatedTime: 0n,
  healthCheckTimeoutSeconds: 0n,
  message,
});

Deno.test("DraManager puts the health a driver streams in the status of the containers using the claim's devices, Unknown once the driver goes", async () => {
  const changed: string[][] = [];
  await using w = await world({ onHealthChange: (uids) => changed.push(uids) });
  await w.dra.start();
  w.register();
  const p = pod("pod-1", shared);
  await w.dra.prepareResources(p);
  await until(() => w.driver.healthStreams.size === 1, "the kubelet's health stream");
  const gpu = `${DRIVER}/test=claim-claim-uid-1-gpu`;
  const nic = `${DRIVER}/test=claim-claim-uid-1-nic`;
  // Nothing reported yet.
  assert.deepEqual(w.dra.allocatedResourcesStatus(p, "gpu-user"), [
    { name: "claim:c/gpu", resources: [{ resourceID: gpu, health: "Unknown" }] },
  ]);

  w.driver.sendHealth([
    health("device-gpu", HealthStatus.HEALTHY),
    health("device-nic", HealthStatus.UNHEALTHY, "link down"),
  ]);
  await until(() => changed.length === 1, "the pods of the changed devices");
  assert.deepEqual(changed, [["pod-1"]]);
  assert.deepEqual(w.dra.allocatedResourcesStatus(p, "gpu-user"), [
    { name: "claim:c/gpu", resources: [{ resourceID: gpu, health: "Healthy" }] },
  ]);
  assert.deepEqual(w.dra.allocatedResourcesStatus(p, "all"), [{
    name: "claim:c",
    resources: [
      { resourceID: gpu, health: "Healthy" },
      { resourceID: nic, health: "Unhealthy", message: "link down" },
    ],
  }]);
  assert.deepEqual(w.dra.allocatedResourcesStatus(p, "none"), []);

  // A report that changes nothing syncs no pod; one about a device nobody holds neither.
  w.driver.sendHealth([
    health("device-gpu", HealthStatus.HEALTHY),
    health("device-nic", HealthStatus.UNHEALTHY, "link down"),
    health("device-spare", HealthStatus.UNHEALTHY),
  ]);
  w.driver.sendHealth([
    health("device-gpu", HealthStatus.UNHEALTHY),
    health("device-nic", HealthStatus.UNHEALTHY, "link down"),
    health("device-spare", HealthStatus.UNHEALTHY),
  ]);
  await until(() => changed.length === 2, "the gpu's change");
  assert.deepEqual(changed, [["pod-1"], ["pod-1"]]);
  assert.equal(
    w.dra.allocatedResourcesStatus(p, "gpu-user")[0]?.resources?.[0]?.health,
    "Unhealthy",
  );

  // The driver goes: its devices read Unknown, and the pod's status is made again.
  w.dra.plugins.deRegisterPlugin(DRIVER, w.socket);
  await until(() => changed.length === 3, "the driver's departure");
  assert.deepEqual(changed[2], ["pod-1"]);
  assert.deepEqual(w.dra.allocatedResourcesStatus(p, "all")[0]?.resources, [
    { resourceID: gpu, health: "Unknown" },
    { resourceID: nic, health: "Unknown" },
  ]);
});

Deno.test("DraManager leaves the drivers' messages out with ResourceHealthStatusMessage off, and health altogether with ResourceHealthStatus off", async () => {
  {
    const changed: string[][] = [];
    await using w = await world({
      featureGates: { ResourceHealthStatusMessage: false },
      onHealthChange: (uids) => changed.push(uids),
    });
    w.register();
    const p = pod("pod-1", shared);
    await w.dra.prepareResources(p);
    await until(() => w.driver.healthStreams.size === 1, "the kubelet's health stream");
    w.driver.sendHealth([health("device-nic", HealthStatus.UNHEALTHY, "link down")]);
    await until(() => changed.length === 1, "the nic's change");
    assert.deepEqual(w.dra.allocatedResourcesStatus(p, "all")[0]?.resources?.[1], {
      resourceID: `${DRIVER}/test=claim-claim-uid-1-nic`,
      health: "Unhealthy",
    });
  }
  {
    await using w = await world({ featureGates: { ResourceHealthStatus: false } });
    w.register();
    const p = pod("pod-1", shared);
    await w.dra.prepareResources(p);
    // A NodePrepareResources round trip later, still no stream was opened.
    await w.dra.prepareResources(pod("pod-2", shared));
    assert.equal(w.driver.healthStreams.size, 0);
    assert.deepEqual(w.dra.allocatedResourcesStatus(p, "all"), []);
  }
});
