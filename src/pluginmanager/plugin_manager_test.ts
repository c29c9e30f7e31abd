/**
 * Tests of the plugin manager with real sockets: each fake plugin is a gRPC server of the
 * Registration service (as a CSI node registrar serves it) on a unix socket in a temporary
 * registration directory, and the handler records what it is asked. The reconciler and the
 * backoff run on a fake clock; file system events and gRPC calls happen in real time, so the
 * tests poll for them with a bound.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type PluginInfo as PluginInfoMessage,
  RegistrationDefinition,
  type RegistrationStatus,
} from "../../proto/pluginregistration/v1/api.ts";
import { createLogger } from "../klog/klog.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { PluginManagerMetrics } from "../metrics/plugin_manager_metrics.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import { FakeClock } from "../util/clock.ts";
import { CSI_PLUGIN, type PluginHandler } from "./plugin_handler.ts";
import { PluginManager } from "./plugin_manager.ts";
import { GrpcServer } from "../cri/grpc_server.ts";

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Like {@link until}, stepping `clock` a reconciler period every 20 ms: for what needs the
 * watcher (whose events Deno may drop; its walk then finds the change) and the reconciler.
 */
async function tickUntil(clock: FakeClock, what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    clock.step(1_000);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A plugin's registrar on `socket`, announcing `info`, recording the statuses it is sent. */
async function startPlugin(socket: string, info: Partial<PluginInfoMessage>) {
  const notified: RegistrationStatus[] = [];
  const server = await GrpcServer.listen({ path: socket, closeGracePeriodMs: 0 });
  server.register(RegistrationDefinition, {
    getInfo: () => ({ type: CSI_PLUGIN, name: "", endpoint: "", supportedVersions: [], ...info }),
    notifyRegistrationStatus: (request) => {
      notified.push(request);
      return {};
    },
  });
  return {
    notified,
    /** Stops serving and removes the socket, as a driver that exits (calls are not waited for). */
    stop: () => server.close(),
  };
}

type Call = [string, ...unknown[]];

/** A handler recording its calls; refuses validation for the names in `refuse`. */
function fakeHandler(refuse: Record<string, string> = {}): PluginHandler & { calls: Call[] } {
  const calls: Call[] = [];
  return {
    calls,
    validatePlugin(name, endpoint, versions) {
      calls.push(["validate", name, endpoint, [...versions]]);
      const why = refuse[name];
      if (why !== undefined) throw new Error(why);
    },
    async registerPlugin(name, endpoint, versions, timeoutMs) {
      await Promise.resolve();
      calls.push(["register", name, endpoint, [...versions], timeoutMs]);
    },
    deRegisterPlugin(name, endpoint) {
      calls.push(["deregister", name, endpoint]);
    },
  };
}

async function setup() {
  const root = await Deno.makeTempDir({ prefix: "plugin-manager-" });
  const sockDir = join(root, "plugins_registry");
  await Deno.mkdir(sockDir);
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), verbosity: 5 });
  const clock = new FakeClock();
  const registry = new MetricsRegistry();
  const metrics = new PluginManagerMetrics(registry);
  const manager = new PluginManager({ sockDir, logger, clock, metrics });
  const ctl = new AbortController();
  const plugins: { stop(): Promise<void> }[] = [];
  let running: Promise<void> | undefined;
  return {
    sockDir,
    lines,
    clock,
    manager,
    registry,
    async plugin(name: string, info: Partial<PluginInfoMessage>) {
      const p = await startPlugin(join(sockDir, name), info);
      plugins.push(p);
      return p;
    },
    async run() {
      running = manager.run(ctl.signal);
      // Started once the reconciler and the watcher's walk both wait on the clock.
      await until("the loops to wait", () => clock.waiters >= 2);
    },
    /** One reconciler period. */
    tick() {
      clock.step(1_000);
    },
    async [Symbol.asyncDispose]() {
      ctl.abort();
      await running;
      for (const p of plugins) await p.stop();
      await Deno.remove(root, { recursive: true });
    },
  };
}

Deno.test("PluginManager registers a plugin whose socket appears: GetInfo, validate, register, notify registered", async () => {
  await using t = await setup();
  const handler = fakeHandler();
  t.manager.addHandler(CSI_PLUGIN, handler);
  await t.run();
  const socket = join(t.sockDir, "ebs.csi.aws.com-reg.sock");
  const plugin = await t.plugin("ebs.csi.aws.com-reg.sock", {
    name: "ebs.csi.aws.com",
    endpoint: "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock",
    supportedVersions: ["1.0.0"],
  });
  await until("the socket found", () => t.manager.states().desired.includes(socket));
  assert.deepEqual(handler.calls, [], "nothing before the reconciler's next pass");
  t.tick();
  await until("the registration notified", () => plugin.notified.length === 1);
  const endpoint = "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock";
  assert.deepEqual(handler.calls, [
    ["validate", "ebs.csi.aws.com", endpoint, ["1.0.0"]],
    ["register", "ebs.csi.aws.com", endpoint, ["1.0.0"], undefined],
  ]);
  assert.deepEqual(plugin.notified, [{ pluginRegistered: true, error: "" }]);
  assert.deepEqual(t.manager.states(), { actual: [socket], desired: [socket] });
  assert.ok(t.lines.some((l) => l.includes('"OperationExecutor.RegisterPlugin started"')));

  // Registered plugins are left alone.
  t.tick();
  t.tick();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(handler.calls.length, 2);
  assert.equal(plugin.notified.length, 1);

  const families = new Map(parseExposition(await t.registry.render()).map((f) => [f.name, f]));
  const total = families.get("plugin_manager_total_plugins");
  assert.ok(total);
  assert.equal(total.type, "gauge");
  assert.equal(total.help, "[ALPHA] Number of plugins in Plugin Manager");
  assert.deepEqual(total.samples.map((s) => [s.labels, s.value]), [
    [{ socket_path: socket, state: "actual_state_of_world" }, 1],
    [{ socket_path: socket, state: "desired_state_of_world" }, 1],
  ]);
});

Deno.test("PluginManager finds sockets present before it starts and registers them at once", async () => {
  await using t = await setup();
  const handler = fakeHandler();
  t.manager.addHandler(CSI_PLUGIN, handler);
  const plugin = await t.plugin("reg.sock", { name: "hostpath.csi.k8s.io" });
  await t.run();
  await until("the registration notified", () => plugin.notified.length === 1);
  // No endpoint announced: the registration socket is the endpoint.
  const socket = join(t.sockDir, "reg.sock");
  assert.deepEqual(handler.calls, [
    ["validate", "hostpath.csi.k8s.io", socket, []],
    ["register", "hostpath.csi.k8s.io", socket, [], undefined],
  ]);
  assert.deepEqual(plugin.notified, [{ pluginRegistered: true, error: "" }]);
});

Deno.test("PluginManager notifies registered=false with upstream's error for an unknown type or a refusal, and retries after backoff", async () => {
  await using t = await setup();
  const handler = fakeHandler({ "bad.csi.k8s.io": "unsupported versions [0.3.0]" });
  t.manager.addHandler(CSI_PLUGIN, handler);
  await t.run();
  const unknown = await t.plugin("gpu.sock", { type: "GPUPlugin", name: "gpu.example.com" });
  const refused = await t.plugin("bad.sock", {
    name: "bad.csi.k8s.io",
    supportedVersions: ["0.3.0"],
  });
  const gpuSocket = join(t.sockDir, "gpu.sock");
  const badSocket = join(t.sockDir, "bad.sock");
  await until("both found", () => t.manager.states().desired.length === 2);
  t.tick();
  await until(
    "both notified",
    () => unknown.notified.length === 1 && refused.notified.length === 1,
  );
  assert.deepEqual(unknown.notified, [{
    pluginRegistered: false,
    error:
      `RegisterPlugin error -- no handler registered for plugin type: GPUPlugin at socket ${gpuSocket}`,
  }]);
  assert.deepEqual(refused.notified, [{
    pluginRegistered: false,
    error:
      "RegisterPlugin error -- plugin validation failed with err: unsupported versions [0.3.0]",
  }]);
  assert.deepEqual(handler.calls, [["validate", "bad.csi.k8s.io", badSocket, ["0.3.0"]]]);
  assert.deepEqual(t.manager.states().actual, []);
  await until("the failures logged", () => t.lines.filter((l) => l.startsWith("E")).length === 2);
  const errors = t.lines.filter((l) => l.startsWith("E")).join("\n");
  assert.match(
    errors,
    /Operation for \\"[^"]*gpu\.sock\\" failed\. No retries permitted until .* \(durationBeforeRetry 500ms\)\. Error: RegisterPlugin error -- failed to send error at socket [^ ]*gpu\.sock, err: RegisterPlugin error -- no handler registered for plugin type: GPUPlugin/,
  );
  assert.match(
    errors,
    /Error: RegisterPlugin error -- failed to send error at socket [^ ]*bad\.sock, err: RegisterPlugin error -- plugin validation failed with err: unsupported versions \[0\.3\.0\]/,
  );

  // Tried again once the backoff (500 ms) passed; a handler added meanwhile is used.
  const gpu = fakeHandler();
  t.manager.addHandler("GPUPlugin", gpu);
  t.tick();
  await until("the retries", () => unknown.notified.length === 2 && refused.notified.length === 2);
  assert.deepEqual(unknown.notified[1], { pluginRegistered: true, error: "" });
  assert.equal(refused.notified[1]?.pluginRegistered, false);
  assert.deepEqual(t.manager.states().actual, [gpuSocket]);
  // The refused plugin now waits 1 s: not tried again within it.
  await until(
    "the second failure logged",
    () => t.lines.some((l) => l.includes("durationBeforeRetry 1s")),
  );
  t.tick();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(refused.notified.length, 2);
});

Deno.test("PluginManager deregisters a plugin whose socket is removed, and re-registers a restarted driver", async () => {
  await using t = await setup();
  const handler = fakeHandler();
  t.manager.addHandler(CSI_PLUGIN, handler);
  await t.run();
  const info = { name: "hostpath.csi.k8s.io", endpoint: "/plugins/hostpath/csi.sock" };
  const first = await t.plugin("reg.sock", info);
  await until("found", () => t.manager.states().desired.length === 1);
  t.tick();
  await until("registered", () => t.manager.states().actual.length === 1);
  // The registration is recorded before the plugin is told: a restart before that would have
  // the first registration's notification reach the new socket.
  await until("told", () => first.notified.length === 1);

  // The driver restarts: its socket goes and comes back.
  await first.stop();
  const second = await t.plugin("reg.sock", info);
  await tickUntil(t.clock, "registered again", () => second.notified.length === 1);
  const names = handler.calls.map(([c]) => c);
  // Deregistered before registered again (a late event may add one more round).
  assert.deepEqual(names.slice(0, 3), ["validate", "register", "deregister"]);
  assert.deepEqual(names.slice(-2), ["validate", "register"]);
  assert.deepEqual(handler.calls[2], [
    "deregister",
    "hostpath.csi.k8s.io",
    "/plugins/hostpath/csi.sock",
  ]);
  assert.deepEqual(second.notified, [{ pluginRegistered: true, error: "" }]);
  assert.deepEqual(first.notified, [{ pluginRegistered: true, error: "" }]);

  // The driver goes away for good.
  const before = handler.calls.length;
  await second.stop();
  await tickUntil(t.clock, "deregistered again", () => t.manager.states().actual.length === 0);
  assert.deepEqual(handler.calls.slice(before), [
    ["deregister", "hostpath.csi.k8s.io", "/plugins/hostpath/csi.sock"],
  ]);
  assert.deepEqual(t.manager.states(), { actual: [], desired: [] });
  assert.equal(
    (await t.registry.render()).includes("plugin_manager_total_plugins"),
    false,
    "no plugins, no series",
  );
});
