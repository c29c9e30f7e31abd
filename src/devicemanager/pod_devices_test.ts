import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import type { ContainerAllocateResponse } from "../../proto/deviceplugin/v1beta1/api.ts";
import { NODE_WITHOUT_TOPOLOGY, PodDevices } from "./pod_devices.ts";

function resp(over: Partial<ContainerAllocateResponse>): ContainerAllocateResponse {
  return { envs: {}, mounts: [], devices: [], annotations: {}, cdiDevices: [], ...over };
}

Deno.test("runContainerOptions merges the container's resources, the first value of each key winning and conflicts logged", () => {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), pid: 1 });
  const d = new PodDevices();
  d.insert(
    "u",
    "c",
    "example.com/a",
    new Map([[0, ["a0"]]]),
    resp({
      envs: { SHARED: "from-a", A: "1" },
      mounts: [{ containerPath: "/m", hostPath: "/host/a", readOnly: true }],
      devices: [{ containerPath: "/dev/x", hostPath: "/dev/a", permissions: "rw" }],
      annotations: { note: "a" },
      cdiDevices: [{ name: "vendor.com/dev=0" }],
    }),
  );
  d.insert(
    "u",
    "c",
    "example.com/b",
    new Map([[NODE_WITHOUT_TOPOLOGY, ["b0"]]]),
    resp({
      envs: { SHARED: "from-b", B: "2" },
      mounts: [{ containerPath: "/m", hostPath: "/host/b", readOnly: false }],
      devices: [{ containerPath: "/dev/x", hostPath: "/dev/a", permissions: "rw" }],
      annotations: { note: "b" },
      cdiDevices: [{ name: "vendor.com/dev=0" }, { name: "vendor.com/dev=1" }],
    }),
  );
  const o = d.runContainerOptions("u", "c", logger)!;
  assert.deepEqual(o.envs, [
    { name: "SHARED", value: "from-a" },
    { name: "A", value: "1" },
    { name: "B", value: "2" },
  ]);
  assert.deepEqual(o.mounts, [{ containerPath: "/m", hostPath: "/host/a", readOnly: true }]);
  assert.deepEqual(o.devices, [{ hostPath: "/dev/a", containerPath: "/dev/x", permissions: "rw" }]);
  assert.deepEqual(o.annotations, [{ name: "note", value: "a" }]);
  assert.deepEqual(o.cdiDevices, ["vendor.com/dev=0", "vendor.com/dev=1"]);
  // Conflicting env, mount and annotation are logged; the identical device is not.
  assert.equal(lines.filter((l) => l.includes("conflicting")).length, 3, lines.join("\n"));
  assert.equal(d.runContainerOptions("u", "other", logger), undefined);
});

Deno.test("containerDeviceInstances gives each device its NUMA nodes, none for devices without topology", () => {
  const d = new PodDevices();
  d.insert(
    "u",
    "c",
    "example.com/a",
    new Map([[0, ["x", "y"]], [1, ["y"]], [-1, ["z"]]]),
    resp({}),
  );
  const got = d.containerDeviceInstances("u", "c")!.get("example.com/a")!;
  assert.deepEqual(got.get("x"), { topology: { nodes: [{ ID: 0n }] } });
  assert.deepEqual(got.get("y"), { topology: { nodes: [{ ID: 1n }, { ID: 0n }] } });
  assert.deepEqual(got.get("z"), { topology: undefined });
});

Deno.test("devices(), reuse bookkeeping and delete", () => {
  const d = new PodDevices();
  d.insert("u1", "init", "r", new Map([[0, ["a"]]]), resp({}));
  d.insert("u1", "app", "r", new Map([[0, ["b"]]]), resp({}));
  d.insert("u2", "app", "r", new Map([[0, ["c"]]]), resp({}));
  assert.deepEqual([...d.devices().get("r")!].sort(), ["a", "b", "c"]);
  const reuse = new Map<string, Set<string>>();
  d.addContainerAllocated("u1", "init", reuse);
  assert.deepEqual([...reuse.get("r")!], ["a"]);
  d.removeContainerAllocated("u1", "init", reuse);
  assert.deepEqual([...reuse.get("r")!], []);
  d.delete(["u1"]);
  assert.deepEqual([...d.pods()], ["u2"]);
  assert.deepEqual([...d.devices().get("r")!], ["c"]);
});

Deno.test("podsHolding names every pod a container of which holds one of the devices of the resource", () => {
  const d = new PodDevices();
  d.insert("u1", "init", "example.com/a", new Map([[0, ["a0"]]]), resp({}));
  d.insert("u1", "app", "example.com/a", new Map([[0, ["a0"]]]), resp({}));
  d.insert("u2", "app", "example.com/a", new Map([[1, ["a1"]], [0, ["a2"]]]), resp({}));
  d.insert("u3", "app", "example.com/b", new Map([[0, ["a0"]]]), resp({}));
  assert.deepEqual([...d.podsHolding("example.com/a", new Set(["a0", "a2"]))].sort(), ["u1", "u2"]);
  assert.deepEqual([...d.podsHolding("example.com/a", new Set(["a9"]))], []);
  assert.deepEqual([...d.podsHolding("example.com/b", new Set(["a0"]))], ["u3"]);
});
