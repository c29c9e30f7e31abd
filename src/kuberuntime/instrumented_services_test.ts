import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import {
  IMAGE_OPERATIONS,
  instrumentImageService,
  instrumentRuntimeService,
  RUNTIME_OPERATIONS,
} from "./instrumented_services.ts";
import { InFlight } from "../util/in_flight.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { RemoteImageService } from "../cri/remote_image.ts";
import { RemoteRuntimeService, type RuntimeService } from "../cri/remote_runtime.ts";

function methodsOf(proto: object): string[] {
  return Object.getOwnPropertyNames(proto).filter((n) => n !== "constructor").sort();
}

Deno.test("RUNTIME_OPERATIONS and IMAGE_OPERATIONS name every CRI method", () => {
  assert.deepEqual(
    Object.keys(RUNTIME_OPERATIONS).sort(),
    methodsOf(RemoteRuntimeService.prototype),
  );
  assert.deepEqual(Object.keys(IMAGE_OPERATIONS).sort(), methodsOf(RemoteImageService.prototype));
});

Deno.test("instrumentRuntimeService counts each call, its duration and its errors, and passes results through", async () => {
  const clock = new FakeClock();
  const metrics = new KubeletMetrics({ process: false });
  const boom = new Error("runtime says no");
  const fake = {
    version: () => {
      clock.step(20);
      return Promise.resolve({ version: "0.1.0" });
    },
    runPodSandbox: (_config: unknown, _handler: string) => {
      clock.step(1_500);
      return Promise.reject(boom);
    },
  } as unknown as RuntimeService;
  const wrapped = instrumentRuntimeService(fake, metrics, clock);
  assert.deepEqual(await wrapped.version(), { version: "0.1.0" });
  await assert.rejects(() => wrapped.runPodSandbox({} as never, "runc"), (e) => e === boom);
  const op = (operation_type: string) => ({ operation_type });
  assert.equal(metrics.runtimeOperations.get(op("version")), 1);
  assert.equal(metrics.runtimeOperationsErrors.get(op("version")), 0);
  assert.equal(metrics.runtimeOperations.get(op("run_podsandbox")), 1);
  assert.equal(metrics.runtimeOperationsErrors.get(op("run_podsandbox")), 1);
  assert.equal(metrics.runPodSandboxErrors.get({ runtime_handler: "runc" }), 1);
  assert.equal(metrics.runPodSandboxDuration.count({ runtime_handler: "runc" }), 1);
  const text = await metrics.render();
  assert.match(
    text,
    /^kubelet_runtime_operations_duration_seconds_sum\{operation_type="version"\} 0\.02$/m,
  );
  assert.match(
    text,
    /^kubelet_runtime_operations_duration_seconds_bucket\{operation_type="run_podsandbox",le="1\.220703125"\} 0$/m,
  );
  assert.match(
    text,
    /^kubelet_runtime_operations_duration_seconds_bucket\{operation_type="run_podsandbox",le="3\.0517578125"\} 1$/m,
  );
});

Deno.test("instrumentRuntimeService counts the calls that start pods in flight, and only those", async () => {
  const clock = new FakeClock();
  const metrics = new KubeletMetrics({ process: false });
  const calls = new Map<string, PromiseWithResolvers<unknown>>();
  const hold = (method: string) => () => {
    const p = Promise.withResolvers<unknown>();
    calls.set(method, p);
    return p.promise;
  };
  const methods = ["runPodSandbox", "createContainer", "startContainer", "listContainers"];
  const fake = Object.fromEntries(methods.map((m) => [m, hold(m)])) as unknown as RuntimeService;
  const starts = new InFlight();
  const wrapped = instrumentRuntimeService(fake, metrics, clock, starts) as unknown as Record<
    string,
    () => Promise<unknown>
  >;
  const pending = methods.map((m) => wrapped[m]!());
  assert.equal(starts.count, 3, "RunPodSandbox, CreateContainer and StartContainer");
  calls.get("listContainers")!.resolve([]);
  await pending[3];
  assert.equal(starts.count, 3);
  calls.get("runPodSandbox")!.reject(new Error("no"));
  await assert.rejects(pending[0]!);
  calls.get("createContainer")!.resolve("c1");
  assert.equal(await pending[1], "c1");
  assert.equal(starts.count, 1);
  calls.get("startContainer")!.resolve(undefined);
  await pending[2];
  assert.equal(starts.busy, false);
  assert.equal(metrics.runtimeOperations.get({ operation_type: "start_container" }), 1);
});

Deno.test("instrumentImageService records under upstream's image operation names", async () => {
  const clock = new FakeClock();
  const metrics = new KubeletMetrics({ process: false });
  const wrapped = instrumentImageService(
    {
      listImages: () => Promise.resolve([]),
    } as unknown as Parameters<typeof instrumentImageService>[0],
    metrics,
    clock,
  );
  await wrapped.listImages();
  assert.equal(metrics.runtimeOperations.get({ operation_type: "list_images" }), 1);
});
