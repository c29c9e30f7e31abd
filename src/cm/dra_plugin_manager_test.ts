import assert from "node:assert/strict";
import type { KubeClient } from "../client/kube_client.ts";
import { KubeApiError } from "../client/kube_client.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { chooseDraService, DRA_WIPING_DELAY_MS, DraPluginManager } from "./dra_plugin_manager.ts";

const ALL = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a";
const ONE = `${ALL}%2Cspec.driver%3Dgpu.example.com`;

function setup(failures = 0) {
  const clock = new FakeClock(0);
  const deletes: string[] = [];
  let left = failures;
  const client = {
    delete: (path: string) => {
      deletes.push(path);
      if (left-- > 0) {
        return Promise.reject(new KubeApiError("DELETE", path, 401, "Unauthorized", "no"));
      }
      return Promise.resolve({});
    },
  } as unknown as KubeClient;
  const pm = new DraPluginManager({
    kubeClient: client,
    nodeName: "node-a",
    clock,
    logger: createLogger({ write: () => {} }),
    random: () => 0,
  });
  return { clock, deletes, pm };
}

/** Lets pending promise callbacks run. */
const settle = () => new Promise((r) => setTimeout(r, 0));

Deno.test("chooseDraService takes the plugin's first service the kubelet calls, with upstream's errors", () => {
  assert.equal(chooseDraService(["v1.DRAPlugin", "v1beta1.DRAPlugin"]), "v1.DRAPlugin");
  assert.equal(
    chooseDraService(["v1alpha1.DRAResourceHealth", "v1beta1.DRAPlugin"]),
    "v1beta1.DRAPlugin",
  );
  assert.throws(
    () => chooseDraService([]),
    /^Error: empty list of supported gRPC services \(aka supported versions\)$/,
  );
  assert.throws(
    () => chooseDraService(["v1alpha3.Node"]),
    /^Error: none of services supported by the plugin \(\["v1alpha3.Node"\]\) are supported by the kubelet \(\["v1.DRAPlugin" "v1beta1.DRAPlugin"\]\)$/,
  );
});

Deno.test("DraPluginManager registers plugins by driver, uses the newest, and refuses a taken endpoint", async () => {
  const { pm } = setup();
  assert.throws(
    () => pm.validatePlugin("gpu.example.com", "/p/a.sock", ["v0.Nothing"]),
    /^Error: invalid supported gRPC versions of DRA driver plugin gpu.example.com at endpoint \/p\/a.sock: none of services/,
  );
  assert.throws(() => pm.getPlugin(""), /^Error: DRA driver name is empty$/);
  assert.throws(
    () => pm.getPlugin("gpu.example.com"),
    /^Error: DRA driver gpu.example.com is not registered$/,
  );
  pm.registerPlugin("gpu.example.com", "/p/a.sock", ["v1.DRAPlugin"], undefined);
  pm.registerPlugin("gpu.example.com", "/p/b.sock", ["v1beta1.DRAPlugin"], undefined);
  assert.equal(pm.getPlugin("gpu.example.com").endpoint, "/p/b.sock");
  assert.equal(pm.getPlugin("gpu.example.com").service, "v1beta1.DRAPlugin");
  assert.throws(
    () => pm.registerPlugin("gpu.example.com", "/p/a.sock", ["v1.DRAPlugin"], undefined),
    /^Error: endpoint \/p\/a.sock already registered for DRA driver plugin gpu.example.com$/,
  );
  pm.deRegisterPlugin("gpu.example.com", "/p/b.sock");
  assert.equal(pm.getPlugin("gpu.example.com").endpoint, "/p/a.sock");
  pm.deRegisterPlugin("gpu.example.com", "/p/a.sock");
  assert.deepEqual(pm.driverNames(), []);
  await pm.stop();
});

Deno.test("DraPluginManager deletes the node's ResourceSlices at start, retrying with backoff", async () => {
  const { clock, deletes, pm } = setup(2);
  const ctl = new AbortController();
  const running = pm.run(ctl.signal);
  await settle();
  assert.deepEqual(deletes, [ALL]);
  clock.step(1000);
  await settle();
  clock.step(2000);
  await settle();
  assert.deepEqual(deletes, [ALL, ALL, ALL]);
  ctl.abort();
  await running;
});

Deno.test("DraPluginManager deletes a driver's slices 30 s after its last plugin went, unless it came back", async () => {
  const { clock, deletes, pm } = setup();
  const ctl = new AbortController();
  const running = pm.run(ctl.signal);
  await settle();
  deletes.length = 0;
  pm.registerPlugin("gpu.example.com", "/p/a.sock", ["v1.DRAPlugin"], undefined);
  pm.deRegisterPlugin("gpu.example.com", "/p/a.sock");
  clock.step(DRA_WIPING_DELAY_MS - 1);
  await settle();
  // Back in time: nothing deleted.
  pm.registerPlugin("gpu.example.com", "/p/b.sock", ["v1.DRAPlugin"], undefined);
  clock.step(DRA_WIPING_DELAY_MS);
  await settle();
  assert.deepEqual(deletes, []);
  pm.deRegisterPlugin("gpu.example.com", "/p/b.sock");
  clock.step(DRA_WIPING_DELAY_MS);
  await settle();
  assert.deepEqual(deletes, [ONE]);
  ctl.abort();
  await running;
});
