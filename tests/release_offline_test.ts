/**
 * @module
 * The release file (`deno task release`) on a node with no network but its cluster: the agent
 * runs from `dist/linux-amd64/kubelet` in a network namespace whose only link is a veth pair to
 * this host, where the only port it may reach is the test's kube-apiserver (iptables on the
 * host's end of the pair); containerd's unix socket needs no route. There is no default route,
 * so nothing else (a public address, the npm registry, Deno's download host) can be reached:
 * the test shows that from inside the namespace before the agent starts. The agent registers
 * its Node, with the namespace's address as InternalIP, and runs a pod from the local busybox
 * image. Stopped and started again it reuses its extracted tree; with a byte of the runtime
 * changed it extracts the tree again and comes back; `--version` answers as `deno run main.ts`.
 *
 * It starts the control plane (tests/control_plane.ts, the apiserver on every address with the
 * veth's address in its certificate), containerd (tests/containerd_harness.ts) and the agent
 * (tests/node_harness.ts, through `nsenter --net`: only the network namespace changes, so the
 * agent's mounts and cgroups are the host's as on a node). Needs root, containerd, runc,
 * openssl, go (the control plane binaries), ip, iptables and nsenter; without them it is skipped
 * loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import { basename, join } from "node:path";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import { unmountUnder } from "../src/privilege/host_view.ts";
import { buildRelease, hostPlatform } from "../deploy/release.ts";
import { runAgent, spawnAgent } from "./agent_process.ts";
import { startContainerd } from "./containerd_harness.ts";
import { dumpLogsOnFailure, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  adminClient,
  poll,
  removeCgroupTree,
  startNodeAgent,
  SYNC_LOOP_STARTED,
  TEST_CGROUP_PARENT,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { writeKubeconfig } from "./pki.ts";
import { requireRoot } from "./requirements.ts";
import { must as mustRun, run as runProgram } from "./child_process.ts";

const gate = await requireRoot("the release file's offline e2e test", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "ip",
  "iptables",
  "nsenter",
]);

const NODE = "kts-release-offline";
const NS = "default";

/** Runs a program to completion (two minutes at most); never throws on its exit code. */
function run(cmd: string, args: readonly string[], env: Record<string, string> = {}) {
  return runProgram([cmd, ...args], {
    env: { NO_COLOR: "1", ...env },
    signal: AbortSignal.timeout(120_000),
  });
}

/** Runs a program that must succeed; returns its stdout. */
function must(cmd: string, args: readonly string[]): Promise<string> {
  return mustRun([cmd, ...args], { signal: AbortSignal.timeout(120_000) });
}

/** A network namespace linked to this host by one veth pair, and nothing else. */
interface OfflineNetwork extends AsyncDisposable {
  readonly name: string;
  /** `--net=` argument of nsenter. */
  readonly path: string;
  /** This host's end of the pair, and its address. */
  readonly hostIf: string;
  readonly hostIp: string;
  /** The namespace's end, and its address. */
  readonly nsIf: string;
  readonly nsIp: string;
  /** Lets the namespace reach this host's TCP `port` on {@link hostIp}, and no other. */
  allowPort(port: number): Promise<void>;
}

/**
 * Creates the namespace, a veth pair with a /30 between it and this host, no default route and
 * no IPv6 (the pair's link-local addresses would reach this host's every service), and an
 * iptables rule refusing all the namespace sends to this host until {@link
 * OfflineNetwork.allowPort} lets one port through. Removed again on dispose.
 */
async function offlineNetwork(): Promise<OfflineNetwork> {
  const id = crypto.randomUUID().slice(0, 6);
  const name = `kts-rel-${id}`;
  const hostIf = `ktsr${id}h`;
  const nsIf = `ktsr${id}n`;
  const used = await must("ip", ["-4", "-o", "addr", "show"]);
  let octet = 0;
  do octet = Math.floor(Math.random() * 256); while (used.includes(`10.250.${octet}.`));
  const hostIp = `10.250.${octet}.1`;
  const nsIp = `10.250.${octet}.2`;
  const rules: string[][] = [];
  const stack = new AsyncDisposableStack();
  try {
    await must("ip", ["netns", "add", name]);
    stack.defer(async () => void await run("ip", ["netns", "delete", name]));
    await must("ip", ["link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", name]);
    stack.defer(async () => void await run("ip", ["link", "delete", hostIf]));
    const inNs = (cmd: string) => must("nsenter", [`--net=/run/netns/${name}`, "sh", "-c", cmd]);
    await Deno.writeTextFile(`/proc/sys/net/ipv6/conf/${hostIf}/disable_ipv6`, "1");
    await inNs(
      "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && " +
        "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
    );
    await must("ip", ["addr", "add", `${hostIp}/30`, "dev", hostIf]);
    await must("ip", ["link", "set", hostIf, "up"]);
    await must("ip", ["-n", name, "addr", "add", `${nsIp}/30`, "dev", nsIf]);
    await must("ip", ["-n", name, "link", "set", nsIf, "up"]);
    await must("ip", ["-n", name, "link", "set", "lo", "up"]);
    const insert = async (rule: string[]) => {
      await must("iptables", ["-w", "-I", "INPUT", "1", ...rule]);
      rules.push(rule);
    };
    stack.defer(async () => {
      for (const rule of rules) await run("iptables", ["-w", "-D", "INPUT", ...rule]);
    });
    await insert(["-i", hostIf, "-j", "REJECT"]);
    const moved = stack.move();
    return {
      name,
      path: `/run/netns/${name}`,
      hostIf,
      hostIp,
      nsIf,
      nsIp,
      allowPort: (port) =>
        insert(["-i", hostIf, "-p", "tcp", "--dport", String(port), "-j", "ACCEPT"]),
      [Symbol.asyncDispose]: () => moved.disposeAsync(),
    };
  } catch (e) {
    await stack.disposeAsync();
    throw e;
  }
}

/**
 * What a TCP connect from inside the namespace does, per target: "connected", or the error's
 * message. Run with this process's deno, so it proves the namespace, not the release.
 */
async function connectsFrom(
  net: OfflineNetwork,
  targets: readonly { hostname: string; port: number }[],
): Promise<string[]> {
  const script = `
    const out = [];
    for (const t of ${JSON.stringify(targets)}) {
      try {
        const conn = await Deno.connect(t);
        conn.close();
        out.push("connected");
      } catch (e) {
        out.push(e.message);
      }
    }
    console.log(JSON.stringify(out));`;
  const r = await run("nsenter", [`--net=${net.path}`, Deno.execPath(), "eval", script], {
    DENO_NO_UPDATE_CHECK: "1",
  });
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as string[];
}

/** The one extracted tree under `base`. */
function treeOf(base: string): string {
  const dirs = [...Deno.readDirSync(base)].filter((e) => e.isDirectory).map((e) => e.name);
  assert.equal(dirs.length, 1, `one tree in ${base}: ${dirs.join(", ")}`);
  return join(base, dirs[0]!);
}

/** The text of the first `0.log` under `dir`, the first container's first log. */
async function firstContainerLog(dir: string): Promise<string | undefined> {
  for await (const e of Deno.readDir(dir)) {
    const p = join(dir, e.name);
    if (e.isDirectory) {
      const found = await firstContainerLog(p);
      if (found !== undefined) return found;
    } else if (e.name === "0.log") {
      return await Deno.readTextFile(p);
    }
  }
  return undefined;
}

function offlinePod(name: string): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", "echo offline-ok; trap 'exit 0' TERM; sleep 3600 & wait"],
      }],
    },
  };
}

Deno.test({
  name: "the release file runs a node offline: registers, runs a pod, reuses and repairs its tree",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "release-offline-" });
    const stack = new AsyncDisposableStack();
    try {
      stack.defer(async () => {
        await unmountUnder(dir);
        await removeCgroupTree(`${TEST_CGROUP_PARENT}/${basename(dir)}`);
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      });
      const [file] = await buildRelease({
        outdir: join(dir, "dist"),
        platforms: [hostPlatform()],
        kind: "self-extracting",
        log: () => {},
      });
      assert.ok(file);
      const exe = file.path;
      const extract = join(dir, "extract");

      const net = stack.use(await offlineNetwork());
      const cp = stack.use(
        await startControlPlane({
          dir: join(dir, "cp"),
          nodeNames: [NODE],
          apiserverSans: [net.hostIp],
          apiserverArgs: ["--bind-address=0.0.0.0"],
        }),
      );
      const port = Number(new URL(cp.server).port);
      await net.allowPort(port);
      const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd") }));
      await importImages({ containerdSocket: containerd.socket, images: [BUSYBOX, PAUSE] });
      const pair = cp.pki.nodes.get(NODE)!;
      const kubeconfig = await writeKubeconfig({
        path: join(dir, "kubelet.conf"),
        server: `https://${net.hostIp}:${port}`,
        caFile: cp.pki.ca.cert,
        certFile: pair.cert,
        keyFile: pair.key,
        user: `system:node:${NODE}`,
      });
      const api = await adminClient(cp, "release-offline-test");
      stack.defer(() => api.close());

      await dumpLogsOnFailure(cp, async () => {
        await t.step("the namespace reaches the apiserver and nothing else", async () => {
          const routes = (await must("ip", ["-n", net.name, "-o", "route", "show", "table", "all"]))
            .split("\n").filter((l) => l.trim() !== "" && !/\blocal\b|\bbroadcast\b/.test(l));
          assert.deepEqual(
            routes.map((l) => l.split(/\s+/).slice(0, 3).join(" ")),
            [`10.250.${net.hostIp.split(".")[2]}.0/30 dev ${net.nsIf}`],
            "one route: the /30 to this host",
          );
          // Something listening on every address of this host, as a registry might.
          using other = Deno.listen({ hostname: "0.0.0.0", port: 0 });
          const otherPort = (other.addr as Deno.NetAddr).port;
          const [apiserver, otherService, publicAddress, npm, denoHost] = await connectsFrom(net, [
            { hostname: net.hostIp, port },
            { hostname: net.hostIp, port: otherPort },
            { hostname: "1.1.1.1", port: 443 },
            { hostname: "registry.npmjs.org", port: 443 },
            { hostname: "dl.deno.land", port: 443 },
          ]);
          assert.equal(apiserver, "connected");
          assert.match(otherService!, /Connection refused/);
          assert.match(publicAddress!, /Network is unreachable/);
          // The names do not even resolve: the nameserver is out of reach.
          assert.doesNotMatch(npm!, /connected/);
          assert.doesNotMatch(denoHost!, /connected/);
          console.log(`from ${net.name}: npm: ${npm}; dl.deno.land: ${denoHost}`);
        });

        const command = ["nsenter", `--net=${net.path}`, "--", exe];
        const env = { KUBELET_TS_EXTRACT_DIR: extract };
        const node = await startNodeAgent({
          cp,
          dir,
          nodeName: NODE,
          endpoint: containerd.endpoint,
          kubeconfig,
          command,
          env,
          waitMs: 120_000,
        });
        let agent = node.agent;
        const stopAgent = async () => {
          agent.process.kill("SIGTERM");
          const { code } = await agent.process.status;
          assert.equal(code, 0, agent.stderr().split("\n").slice(-20).join("\n"));
        };
        const startAgain = async () => {
          agent = spawnAgent(node.args, { command, env });
          await agent.waitFor(SYNC_LOOP_STARTED, 120_000);
        };
        stack.defer(async () => {
          try {
            agent.process.kill("SIGKILL");
          } catch {
            // exited already
          }
          await agent.process.status;
        });
        const nodeReady = (what: string) =>
          poll(
            what,
            async () => {
              const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
              const ready = n.status?.conditions?.find((c) => c.type === "Ready");
              return ready?.status === "True" ? n : undefined;
            },
            120_000,
            250,
          );

        try {
          await t.step("it extracts itself, registers the node and runs a pod", async () => {
            assert.match(agent.stderr(), /kubelet-ts: extracting into /);
            const n = await nodeReady(`node ${NODE} Ready`);
            assert.deepEqual(
              n.status?.addresses?.find((a) => a.type === "InternalIP")?.address,
              net.nsIp,
              "the node's address is the namespace's",
            );
            assert.match(n.status?.nodeInfo?.kubeletVersion ?? "", /kubelet-ts/);
            // The kubelet's Worker runs from its bundle (deploy/release_bundle.ts), and its
            // lines still name their own modules.
            assert.match(
              agent.stderr(),
              /"Running the kubelet in its permission set" .* module="file:\/\/[^"]*\/app\/src\/privilege\/agent_worker\.js"/,
            );
            assert.match(
              agent.stderr(),
              / kubelet_node_status\.ts:\d+\] "Successfully registered node"/,
            );
            assert.doesNotMatch(agent.stderr(), / (agent_worker\.js|\?\?\?):\d+\] /);
            await api.create(`/api/v1/namespaces/${NS}/pods`, offlinePod("offline"));
            await waitPod(api, NS, "offline", "Running", (p) =>
              p.status?.phase === "Running" &&
              p.status.containerStatuses?.[0]?.state?.running !== undefined);
            const log = await poll(
              "the container's log",
              () => firstContainerLog(node.podLogsDir),
              30_000,
            );
            assert.match(log, /stdout F offline-ok/);
          });

          const tree = treeOf(extract);
          const runtime = join(tree, "deno");

          await t.step("a second start reuses the extracted tree", async () => {
            const before = await Deno.stat(runtime);
            await stopAgent();
            await startAgain();
            assert.doesNotMatch(agent.stderr(), /kubelet-ts: (extracting|.* does not match)/);
            assert.equal((await Deno.stat(runtime)).ino, before.ino, "the same runtime file");
            await nodeReady(`node ${NODE} Ready after the restart`);
            const pod = await waitPod(
              api,
              NS,
              "offline",
              "Running",
              (p) => p.status?.phase === "Running",
            );
            assert.equal(
              pod.status?.containerStatuses?.[0]?.restartCount,
              0,
              "the pod kept running",
            );
          });

          await t.step(
            "a corrupted tree is found, extracted again, and the agent comes back",
            async () => {
              await stopAgent();
              {
                const size = (await Deno.stat(runtime)).size;
                using f = await Deno.open(runtime, { write: true });
                await f.seek(Math.floor(size / 2), Deno.SeekMode.Start);
                await f.write(new Uint8Array(64).fill(0xcc));
              }
              await startAgain();
              assert.match(
                agent.stderr(),
                /kubelet-ts: .* does not match this executable \(\.\/deno: FAILED/,
              );
              assert.equal(treeOf(extract), tree, "the same directory, extracted again");
              await nodeReady(`node ${NODE} Ready after the repair`);
              await waitPod(api, NS, "offline", "Running", (p) => p.status?.phase === "Running");
            },
          );

          await t.step("--version answers offline as deno run main.ts does", async () => {
            const want = await runAgent(["--version"]);
            const got = await run("nsenter", [`--net=${net.path}`, "--", exe, "--version"], env);
            assert.equal(got.code, 0, got.stderr);
            assert.equal(got.stdout, want.stdout);
            assert.equal(got.stderr, "", "the tree is whole: nothing to extract");
          });

          await api.delete(`/api/v1/namespaces/${NS}/pods/offline`);
          await waitPodGone(api, NS, "offline", 60_000);
          await stopAgent();
        } catch (e) {
          console.error(`agent stderr:\n${agent.stderr().split("\n").slice(-60).join("\n")}`);
          throw e;
        }
      });
    } finally {
      await stack.disposeAsync();
    }
  },
});
