import assert from "node:assert/strict";
import { join } from "node:path";
import type {
  PluginInfo as PluginInfoMessage,
  RegistrationStatus,
} from "../../proto/pluginregistration/v1/api.ts";
import { CriError, GrpcCode } from "../cri/connection.ts";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import { ActualStateOfWorld, type PluginInfo } from "./cache.ts";
import {
  DIAL_TIMEOUT_MS,
  dialRegistration,
  GET_INFO_TIMEOUT_MS,
  NOTIFY_TIMEOUT_MS,
  OperationGenerator,
  type RegistrationClient,
} from "./operation_generator.ts";
import { CSI_PLUGIN, type PluginHandler } from "./plugin_handler.ts";

const SOCKET = "/var/lib/kubelet/plugins_registry/x.sock";
const PLUGIN: PluginInfo = { socketPath: SOCKET, timestamp: 0, uuid: "u1" };

/** A client answering `info`, whose notify fails with `notifyError` when given. */
function fakeClient(info: Partial<PluginInfoMessage>, notifyError?: Error) {
  const notified: RegistrationStatus[] = [];
  const timeouts: number[] = [];
  let closed = false;
  const client: RegistrationClient = {
    getInfo: (o) => {
      timeouts.push(o.timeoutMs);
      return Promise.resolve({
        type: CSI_PLUGIN,
        name: "x",
        endpoint: "",
        supportedVersions: [],
        ...info,
      });
    },
    notifyRegistrationStatus: (status, o) => {
      timeouts.push(o.timeoutMs);
      notified.push(status);
      return notifyError ? Promise.reject(notifyError) : Promise.resolve();
    },
    close: () => void (closed = true),
  };
  return { client, notified, timeouts, closed: () => closed };
}

function recordingHandler(registerError?: Error): PluginHandler & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    validatePlugin: () => void calls.push("validate"),
    registerPlugin: () => {
      calls.push("register");
      if (registerError) return Promise.reject(registerError);
    },
    deRegisterPlugin: () => void calls.push("deregister"),
  };
}

function generator(client: RegistrationClient) {
  const logger = createLogger({ write: () => {} });
  const dials: [string, number][] = [];
  const gen = new OperationGenerator({
    logger,
    dial: (path, o) => {
      dials.push([path, o.timeoutMs]);
      return Promise.resolve(client);
    },
  });
  return { gen, dials, asw: new ActualStateOfWorld({ logger }) };
}

Deno.test("OperationGenerator registers with upstream's timeouts and closes the connection", async () => {
  const fake = fakeClient({ name: "x", endpoint: "/csi.sock", supportedVersions: ["1.0.0"] });
  const { gen, dials, asw } = generator(fake.client);
  const handler = recordingHandler();
  await gen.registerPlugin(PLUGIN, new Map([[CSI_PLUGIN, handler]]), asw)();
  assert.deepEqual(dials, [[SOCKET, DIAL_TIMEOUT_MS]]);
  assert.deepEqual(fake.timeouts, [GET_INFO_TIMEOUT_MS, NOTIFY_TIMEOUT_MS]);
  assert.deepEqual([DIAL_TIMEOUT_MS, GET_INFO_TIMEOUT_MS, NOTIFY_TIMEOUT_MS], [
    10_000,
    1_000,
    5_000,
  ]);
  assert.deepEqual(handler.calls, ["validate", "register"]);
  assert.deepEqual(asw.getRegisteredPlugins().map((p) => [p.name, p.endpoint, p.uuid]), [
    ["x", "/csi.sock", "u1"],
  ]);
  assert.equal(fake.closed(), true);

  await gen.unregisterPlugin(asw.getRegisteredPlugins()[0]!, asw)();
  assert.deepEqual(handler.calls, ["validate", "register", "deregister"]);
  assert.deepEqual(asw.getRegisteredPlugins(), []);
});

Deno.test("OperationGenerator notifies a handler's register failure and leaves the plugin unregistered", async () => {
  const fake = fakeClient({});
  const { gen, asw } = generator(fake.client);
  const handler = recordingHandler(new Error("driver name x already registered"));
  await assert.rejects(
    gen.registerPlugin(PLUGIN, new Map([[CSI_PLUGIN, handler]]), asw)(),
    {
      message:
        "RegisterPlugin error -- plugin registration failed with err: driver name x already registered",
    },
  );
  assert.deepEqual(fake.notified, [{
    pluginRegistered: false,
    error:
      "RegisterPlugin error -- plugin registration failed with err: driver name x already registered",
  }]);
  assert.deepEqual(asw.getRegisteredPlugins(), []);
});

Deno.test("OperationGenerator deregisters again when the registered status cannot be sent", async () => {
  const unavailable = new CriError(
    "pluginregistration.Registration/NotifyRegistrationStatus",
    GrpcCode.UNAVAILABLE,
    "connection closed",
  );
  const fake = fakeClient({}, unavailable);
  const { gen, asw } = generator(fake.client);
  const handler = recordingHandler();
  await assert.rejects(gen.registerPlugin(PLUGIN, new Map([[CSI_PLUGIN, handler]]), asw)(), {
    message:
      `RegisterPlugin error -- failed to send registration status at socket ${SOCKET}, err: : rpc error: code = Unavailable desc = connection closed`,
  });
  assert.deepEqual(handler.calls, ["validate", "register", "deregister"]);
  assert.deepEqual(asw.getRegisteredPlugins(), []);
  assert.equal(fake.closed(), true);
});

Deno.test("OperationGenerator words a GetInfo failure as upstream", async () => {
  const client: RegistrationClient = {
    getInfo: () =>
      Promise.reject(
        new CriError("GetInfo", GrpcCode.DEADLINE_EXCEEDED, "context deadline exceeded"),
      ),
    notifyRegistrationStatus: () => Promise.resolve(),
    close: () => {},
  };
  const { gen, asw } = generator(client);
  await assert.rejects(gen.registerPlugin(PLUGIN, new Map(), asw)(), {
    message:
      `RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket ${SOCKET}, err: rpc error: code = DeadlineExceeded desc = context deadline exceeded`,
  });
});

Deno.test("dialRegistration retries a socket nobody listens on until its deadline", async () => {
  const dir = await Deno.makeTempDir({ prefix: "plugin-dial-" });
  try {
    // A socket file nobody listens on (Deno removes the file of a listener it closes, so the
    // file is moved away from under it first).
    const socket = join(dir, "dead.sock");
    const listener = Deno.listen({ transport: "unix", path: join(dir, "bound.sock") });
    await Deno.rename(join(dir, "bound.sock"), socket);
    listener.close();
    const clock = new FakeClock();
    const dialing = dialRegistration(clock)(socket, { timeoutMs: DIAL_TIMEOUT_MS });
    let settled = false;
    dialing.catch(() => {}).finally(() => settled = true);
    // grpc-go's reconnect backoff: 1 s, 1.6 s, 2.56 s, 4.096 s, then the rest of the 10 s.
    for (const step of [1_000, 1_600, 2_560, 4_096, 744]) {
      const end = Date.now() + 5_000;
      while (clock.waiters === 0) {
        if (Date.now() > end) throw new Error("the dial did not wait");
        await new Promise((r) => setTimeout(r, 2));
      }
      assert.equal(settled, false);
      clock.step(step);
    }
    await assert.rejects(dialing, {
      message: `failed to dial socket ${socket}, err: context deadline exceeded`,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
