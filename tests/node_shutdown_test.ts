/**
 * Graceful node shutdown, on real containerd through the real apiserver, with systemd-logind
 * played by a fake service on a private D-Bus bus (tests/dbus_harness.ts) and a stand-in
 * systemd-inhibit on the agent's PATH (logind's lock is a file descriptor, which a Deno service
 * cannot hand out). The agent's D-Bus client (src/util/dbus.ts) and logind adapter
 * (src/nodeshutdown/logind.ts) are also tested on their own against the same bus. Upstream's
 * counterpart is `test/e2e_node/node_shutdown_linux_test.go`, which emits PrepareForShutdown
 * through dbus-send the same way.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { CoreV1EventList, V1Node, V1Pod } from "@kubernetes/client-node";
import { connectLogind } from "../src/nodeshutdown/logind.ts";
import { createLogger } from "../src/klog/klog.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import {
  type FakeLogind,
  type PrivateBus,
  startFakeLogind,
  startPrivateBus,
  writeFakeSystemdInhibit,
} from "./dbus_harness.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  poll,
  startNodeAgent,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("node shutdown tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "dbus-daemon",
]);
const NODE = "kts-shutdown";
const MESSAGE = "Pod was terminated in response to imminent node shutdown.";
const INHIBIT_ARGS =
  "--what=shutdown --who=kubelet --why=Kubelet needs time to handle node shutdown --mode=delay";

// ---- The D-Bus pieces against a private bus ------------------------------------------------------

Deno.test({
  name:
    "connectLogind reads the delay, raises it through a drop-in and KillUnit, holds the lock and sees PrepareForShutdown",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "logind-" });
    await using bus = await startPrivateBus(join(dir, "bus"));
    const fake = await startFakeLogind(bus.address, { inhibitDelayUSec: 5_000_000n });
    const { log } = await writeFakeSystemdInhibit(join(dir, "bin"));
    const logind = await connectLogind({
      address: bus.address,
      configDirectory: join(dir, "logind.conf.d"),
      systemdInhibit: join(dir, "bin", "systemd-inhibit"),
      logger: createLogger({ write: () => {} }),
    });
    try {
      assert.equal(await logind.currentInhibitDelayMs(), 5_000);
      await logind.overrideInhibitDelay(30_000);
      assert.equal(
        await Deno.readTextFile(join(dir, "logind.conf.d", "99-kubelet.conf")),
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n",
      );
      await logind.reloadLogindConf();
      assert.ok(fake.calls.includes("KillUnit(systemd-logind.service, all, 1)"), fake.calls.join());

      const lock = await logind.inhibitShutdown();
      const started = (await Deno.readTextFile(log)).trim().split("\n");
      assert.equal(started.length, 1);
      assert.ok(started[0]!.includes(`start ${INHIBIT_ARGS} /bin/sh -c`), started[0]);
      await lock.release();
      assert.match(await Deno.readTextFile(log), /^\d+ end$/m);

      const seen: boolean[] = [];
      await logind.monitorShutdown((b) => seen.push(b));
      fake.prepareForShutdown(true);
      fake.prepareForShutdown(false);
      await poll(
        "both PrepareForShutdown signals",
        () => Promise.resolve(seen.length === 2 || undefined),
        5_000,
      );
      assert.deepEqual(seen, [true, false]);
    } finally {
      logind.close();
      fake.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "connectLogind names what is missing: no bus, or a bus without logind",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "logind-" });
    const logger = createLogger({ write: () => {} });
    try {
      await assert.rejects(
        connectLogind({ address: `unix:path=${dir}/nothing`, logger }),
        new RegExp(`cannot connect to the bus at ${dir}/nothing`),
      );
      await using bus = await startPrivateBus(join(dir, "bus"));
      const logind = await connectLogind({ address: bus.address, logger });
      try {
        await assert.rejects(
          logind.currentInhibitDelayMs(),
          /failed reading InhibitDelayMaxUSec property from logind: .*ServiceUnknown/,
        );
      } finally {
        logind.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// ---- The agent --------------------------------------------------------------------------------

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly bus: PrivateBus;
  readonly logind: FakeLogind;
  readonly inhibitLog: string;
  readonly root: string;
}

const suite = e2eSuite<World>({
  name: "node shutdown",
  gate,
  userAgent: "node-shutdown-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "node-shutdown-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd"), socket }));
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      const bus = stack.use(await startPrivateBus(join(dir, "bus")));
      // 60 s: more than the 20 s the agent needs, so it writes no logind drop-in on this host.
      const logind = await startFakeLogind(bus.address, { inhibitDelayUSec: 60_000_000n });
      stack.defer(() => logind.close());
      const { log } = await writeFakeSystemdInhibit(join(dir, "bin"));
      await ensureDefaultServiceAccount(cp, "kube-system");
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        configLines: ["shutdownGracePeriod: 20s", "shutdownGracePeriodCriticalPods: 10s"],
        env: {
          DBUS_SYSTEM_BUS_ADDRESS: bus.address,
          PATH: `${join(dir, "bin")}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}`,
        },
      });
      stack.move();
      return {
        dir,
        cp,
        containerd,
        agent,
        bus,
        logind,
        inhibitLog: log,
        root: join(dir, "root"),
      };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

function pod(name: string, ns: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: ns },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 30,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        // Stops at once on SIGTERM, so each group ends before its period runs out.
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
      }],
      ...extra,
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

function ready(node: V1Node) {
  return node.status?.conditions?.find((c) => c.type === "Ready");
}

async function inhibitLines(w: World): Promise<string[]> {
  const text = await Deno.readTextFile(w.inhibitLog).catch(() => "");
  return text.trim().split("\n").filter(Boolean);
}

suite.test(
  "PrepareForShutdown stops regular pods then critical ones, with the node NotReady and new pods refused",
  async (w, api) => {
    // Started: it asked logind for the delay and holds the lock through systemd-inhibit.
    await poll(
      "the inhibitor lock",
      async () => (await inhibitLines(w)).length === 1 || undefined,
      30_000,
    );
    assert.ok((await inhibitLines(w))[0]!.includes(`start ${INHIBIT_ARGS}`));
    assert.ok(
      w.logind.calls.includes(
        "Properties.Get(org.freedesktop.login1.Manager, InhibitDelayMaxUSec)",
      ),
      w.logind.calls.join(),
    );

    await create(w, pod("regular", "default"));
    await create(w, pod("critical", "kube-system", { priorityClassName: "system-node-critical" }));
    await waitPod(api, "default", "regular", "Running", (p) => p.status?.phase === "Running");
    const critical = await waitPod(
      api,
      "kube-system",
      "critical",
      "Running",
      (p) => p.status?.phase === "Running",
    );
    assert.equal(critical.spec?.priority, 2_000_001_000);

    w.logind.prepareForShutdown(true);
    const node = await poll("the node NotReady", async () => {
      const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return ready(n)?.status === "False" ? n : undefined;
    }, 30_000);
    assert.equal(ready(node)?.reason, "KubeletNotReady");
    assert.match(ready(node)?.message ?? "", /node is shutting down/);

    const stopped = (p: V1Pod) =>
      p.status?.phase === "Failed" &&
      p.status.containerStatuses?.every((c) => c.state?.terminated) === true;
    const regular = await waitPod(api, "default", "regular", "Failed", stopped, 30_000);
    const crit = await waitPod(api, "kube-system", "critical", "Failed", stopped, 30_000);
    for (const p of [regular, crit]) {
      assert.equal(p.status?.reason, "Terminated");
      assert.equal(p.status?.message, MESSAGE);
      const dt = p.status?.conditions?.find((c) => c.type === "DisruptionTarget");
      assert.equal(dt?.status, "True");
      assert.equal(dt?.reason, "TerminationByKubelet");
      assert.equal(dt?.message, MESSAGE);
    }
    // Regular pods first: the critical one was still running when the regular one stopped.
    const endOf = (p: V1Pod) =>
      Date.parse(String(p.status?.containerStatuses?.[0]?.state?.terminated?.finishedAt));
    assert.ok(endOf(regular) <= endOf(crit), `${endOf(regular)} > ${endOf(crit)}`);

    // All pods done: the lock is released (the stand-in's command ended).
    await poll(
      "the lock released",
      async () => (await inhibitLines(w)).some((l) => / end$/.test(l)) || undefined,
      30_000,
    );
    const state = JSON.parse(
      await Deno.readTextFile(join(w.root, "graceful_node_shutdown_state")),
    );
    assert.ok(Date.parse(state.startTime) <= Date.parse(state.endTime), JSON.stringify(state));

    // New pods are refused while the node shuts down.
    await create(w, pod("late", "default"));
    const late = await waitPod(
      api,
      "default",
      "late",
      "rejected",
      (p) => p.status?.phase === "Failed",
    );
    assert.equal(late.status?.reason, "NodeShutdown");
    // rejectPod's prefix, then the shutdown manager's message, as upstream.
    assert.equal(
      late.status?.message,
      "Pod was rejected: Pod was rejected as the node is shutting down.",
    );

    const events = (await api.get<CoreV1EventList>(
      `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D${NODE}`,
    )).items;
    assert.ok(
      events.some((e) =>
        e.reason === "NodeShutdown" && e.message === "Shutdown manager detected shutdown event"
      ),
      JSON.stringify(events.map((e) => e.reason)),
    );
  },
);

suite.test(
  "a cancelled shutdown makes the node Ready again and takes the lock again",
  async (w, api) => {
    w.logind.prepareForShutdown(false);
    await poll("the node Ready", async () => {
      const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return ready(n)?.status === "True" || undefined;
    }, 30_000);
    await poll(
      "a second lock",
      async () =>
        (await inhibitLines(w)).filter((l) => l.includes(" start ")).length === 2 || undefined,
      30_000,
    );
    await create(w, pod("after", "default"));
    await waitPod(api, "default", "after", "Running", (p) => p.status?.phase === "Running");
  },
);

suite.teardown("teardown", async (w) => {
  w.logind.close();
  await w.bus.stop();
  await w.containerd.stop();
});
