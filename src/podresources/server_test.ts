import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, CriError, criMethods, GrpcCode } from "../cri/connection.ts";
import { PodResourcesListerDefinition } from "../../proto/podresources/v1/api.ts";
import { PodResourcesListerDefinition as V1alpha1Definition } from "../../proto/podresources/v1alpha1/api.ts";
import {
  containerDevices,
  dynamicResources,
  type PodResourcesProviders,
  PodResourcesServer,
} from "./server.ts";
import type { ResourceDeviceInstances } from "../devicemanager/pod_devices.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const LISTER = criMethods(PodResourcesListerDefinition);
const ALPHA = criMethods(V1alpha1Definition);

const web: V1Pod = {
  metadata: { name: "web", namespace: "default", uid: "u1" },
  spec: {
    initContainers: [
      { name: "setup", image: "i" },
      { name: "sidecar", image: "i", restartPolicy: "Always" },
    ],
    containers: [{ name: "app", image: "i" }],
  },
};

const gpus: ResourceDeviceInstances = new Map([
  [
    "example.com/gpu",
    new Map([
      ["g0", { topology: { nodes: [{ ID: 0n }] } }],
      ["g1", { topology: undefined }],
    ]),
  ],
]);

function providers(over: Partial<PodResourcesProviders> = {}): PodResourcesProviders {
  let updates = 0;
  return {
    listPods: () => [web],
    allPods: () => [web],
    podByName: (ns, name) => (ns === "default" && name === "web" ? web : undefined),
    devices: {
      updateAllocatedDevices: () => void updates++,
      getDevices: (uid, c) => (uid === "u1" && c === "app" ? gpus : undefined),
      getAllocatableDevices: () => gpus,
    },
    ...over,
  };
}

Deno.test("containerDevices lists one entry per device and NUMA node", () => {
  assert.deepEqual(containerDevices(gpus), [
    { resourceName: "example.com/gpu", deviceIds: ["g0"], topology: { nodes: [{ ID: 0n }] } },
    { resourceName: "example.com/gpu", deviceIds: ["g1"] },
  ]);
});

Deno.test("the pod resources API answers List, Get and GetAllocatableResources over its socket", async () => {
  const dir = await Deno.makeTempDir({ prefix: "podresources-test-" });
  const ctl = new AbortController();
  const requests: string[] = [];
  const server = new PodResourcesServer({
    providers: providers({
      cpus: {
        getCpus: (_u, c) => (c === "app" ? [2, 3] : []),
        getAllocatableCpus: () => [1, 2, 3],
      },
    }),
    clock: new FakeClock(),
    logger: quiet,
    metrics: {
      request: (k) => requests.push(k),
      requestV1alpha1: () => requests.push("v1alpha1"),
      error: (k) => requests.push(`error ${k}`),
    },
  });
  const grpc = await server.serve(join(dir, "kubelet.sock"), ctl.signal);
  const conn = new CriConnection({ endpoint: grpc.path });
  try {
    const list = await conn.unary(LISTER.list, {});
    assert.equal(list.podResources.length, 1);
    const pr = list.podResources[0]!;
    assert.equal(pr.name, "web");
    // Restartable init containers (sidecars) and containers; not the other init containers.
    assert.deepEqual(pr.containers.map((c) => c.name), ["sidecar", "app"]);
    const app = pr.containers[1]!;
    assert.deepEqual(app.devices.map((d) => d.deviceIds[0]), ["g0", "g1"]);
    assert.deepEqual(app.cpuIds, [2n, 3n]);
    const alloc = await conn.unary(LISTER.getAllocatableResources, {});
    assert.equal(alloc.devices.length, 2);
    assert.deepEqual(alloc.cpuIds, [1n, 2n, 3n]);
    const got = await conn.unary(LISTER.get, { podName: "web", podNamespace: "default" });
    assert.deepEqual(got.podResources?.containers.map((c) => c.name), ["sidecar", "app"]);
    await assert.rejects(
      conn.unary(LISTER.get, { podName: "gone", podNamespace: "default" }),
      (e: Error) =>
        e instanceof CriError && e.code === GrpcCode.UNKNOWN &&
        e.details === "pod gone in namespace default not found",
    );
    // The older v1alpha1 service: containers (not init containers) and their devices.
    const alpha = await conn.unary(ALPHA.list, {});
    assert.deepEqual(alpha.podResources, [{
      name: "web",
      namespace: "default",
      containers: [{
        name: "app",
        devices: [
          { resourceName: "example.com/gpu", deviceIds: ["g0"] },
          { resourceName: "example.com/gpu", deviceIds: ["g1"] },
        ],
      }],
    }]);
    assert.deepEqual(requests, ["list", "get_allocatable", "get", "get", "error get", "v1alpha1"]);
  } finally {
    conn.close();
    ctl.abort();
    await grpc.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the pod resources API refuses requests beyond its rate limit, as upstream's limiter", async () => {
  const dir = await Deno.makeTempDir({ prefix: "podresources-test-" });
  const ctl = new AbortController();
  const clock = new FakeClock();
  const server = new PodResourcesServer({ providers: providers(), clock, logger: quiet });
  const grpc = await server.serve(join(dir, "kubelet.sock"), ctl.signal);
  const conn = new CriConnection({ endpoint: grpc.path });
  try {
    // A burst of 10, then nothing until time passes: 100 per second.
    for (let i = 0; i < 10; i++) await conn.unary(LISTER.list, {});
    await assert.rejects(
      conn.unary(LISTER.getAllocatableResources, {}),
      (e: Error) =>
        e instanceof CriError && e.code === GrpcCode.RESOURCE_EXHAUSTED &&
        e.details === "rejected by rate limit",
    );
    clock.step(10);
    await conn.unary(LISTER.list, {});
    await assert.rejects(conn.unary(LISTER.list, {}), /rejected by rate limit/);
  } finally {
    conn.close();
    ctl.abort();
    await grpc.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("dynamicResources lists each prepared device of a claim, as upstream builds the entries", () => {
  const got = dynamicResources([{
    claimName: "gpu",
    namespace: "ns",
    driverState: new Map([[
      "gpu.example.com",
      [
        { poolName: "node-a", deviceName: "gpu-0", shareId: null, cdiDeviceIds: ["v/c=0"] },
        { poolName: "node-a", deviceName: "gpu-1", shareId: "s1", cdiDeviceIds: ["v/c=1"] },
      ],
    ]]),
  }]);
  assert.deepEqual(got, [{
    claimName: "gpu",
    claimNamespace: "ns",
    claimResources: [
      {
        cdiDevices: [{ name: "v/c=0" }],
        driverName: "gpu.example.com",
        poolName: "node-a",
        deviceName: "gpu-0",
      },
      {
        // upstream appends to one list per driver: the second device lists both.
        cdiDevices: [{ name: "v/c=0" }, { name: "v/c=1" }],
        driverName: "gpu.example.com",
        poolName: "node-a",
        deviceName: "gpu-1",
        shareId: "s1",
      },
    ],
  }]);
});
