/**
 * @module
 * `deno task demo`: runs the kubelet against a private containerd on this machine with one
 * static pod, until SIGINT/SIGTERM or for `DEMO_SECONDS` seconds.
 *
 * Steps: install the runtime packages if missing, start containerd (tests/containerd_harness.ts)
 * with its socket under /run/kubelet-ts (a path the agent's permission set may open), build the
 * busybox and pause images from Debian's busybox-static and import them (no registry is reached),
 * write a kubelet config and a static pod manifest under /etc/kubernetes, then run the agent with
 * --allow-all (Deno 2.9 denies /proc and /sys to the `kubelet` set), print the static pod's log from /var/log/pods as it grows, and
 * stop the agent (SIGTERM) and containerd when asked to. Exits with the agent's exit code. Needs
 * root: run it as `deno run --allow-all deploy/demo.ts`.
 */

import {
  type ContainerdHandle,
  ensureRuntimePackages,
  SANDBOX_IMAGE,
  startContainerd,
} from "../tests/containerd_harness.ts";
import { AGENT_RUN_FLAGS } from "./compile.ts";
import { BUSYBOX, ensureImagePackages, importImages, PAUSE } from "../tests/images.ts";

const CONTAINERD_DIR = "/var/lib/kubelet-ts-demo/containerd";
const CONTAINERD_SOCKET = "/run/kubelet-ts/demo/containerd.sock";
const CONFIG_FILE = "/etc/kubernetes/kubelet-demo.yaml";
const MANIFEST_DIR = "/etc/kubernetes/manifests-demo";
const DEMO_IMAGE = "busybox:1.36";
/** How long the agent gets to stop after SIGTERM before it is killed. */
const AGENT_STOP_TIMEOUT_MS = 30_000;
const REPO_ROOT = decodeURIComponent(new URL("..", import.meta.url).pathname).replace(/\/$/, "");

/** The kubelet config the demo agent reads; minimal on purpose. */
function kubeletConfig(endpoint: string): string {
  return `# Written by deploy/demo.ts; rewritten on every run.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: ${JSON.stringify(endpoint)}
staticPodPath: ${JSON.stringify(MANIFEST_DIR)}
cgroupDriver: cgroupfs
failSwapOn: false
# This machine has cgroup v1 (hybrid); without this the kubelet refuses to start on it.
failCgroupV1: false
# Standalone, there is no apiserver to check tokens and permissions with: the kubelet API
# listens on loopback only and lets anyone there in (try: curl -k https://127.0.0.1:10250/pods).
address: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`;
}

/** A static pod that prints a numbered line every 5 seconds. */
const HELLO_POD = `# Written by deploy/demo.ts; rewritten on every run.
apiVersion: v1
kind: Pod
metadata:
  name: hello
  namespace: default
spec:
  restartPolicy: Always
  containers:
    - name: hello
      image: ${DEMO_IMAGE}
      # No public registry is reachable here: the image must already be imported.
      imagePullPolicy: IfNotPresent
      command:
        - /bin/sh
        - -c
        - 'i=0; while true; do i=$((i+1)); echo "hello from kubelet-ts: line $i"; sleep 5; done'
`;

/** `DEMO_SECONDS` as milliseconds, or undefined to run until a signal. */
function demoDurationMs(): number | undefined {
  const raw = Deno.env.get("DEMO_SECONDS");
  if (raw === undefined || raw === "") return undefined;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds <= 0) {
    throw new Error(
      `Cannot start the demo: 'DEMO_SECONDS' must be a positive number of seconds such as 30: ` +
        `current value is '${raw}'`,
    );
  }
  return seconds * 1000;
}

/** Warns about images containerd does not have yet; pods cannot start without them. */
async function warnAboutMissingImages(socket: string): Promise<void> {
  const out = await new Deno.Command("ctr", {
    args: ["--address", socket, "--namespace", "k8s.io", "images", "list", "--quiet"],
    stdout: "piped",
    stderr: "null",
  }).output();
  const present = new Set(new TextDecoder().decode(out.stdout).split("\n").map((l) => l.trim()));
  const wanted = [SANDBOX_IMAGE, `docker.io/library/${DEMO_IMAGE}`];
  const missing = wanted.filter((image) => !present.has(image));
  if (missing.length > 0) {
    console.warn(
      `demo: WARNING: containerd (namespace k8s.io) lacks ${missing.join(", ")}; no registry ` +
        `is reachable, so the hello pod cannot start until they are imported ` +
        `(ctr --address ${socket} -n k8s.io images import <tarball>)`,
    );
  }
}

async function main(): Promise<number> {
  const durationMs = demoDurationMs();
  if (Deno.uid() !== 0) {
    console.error("demo: must run as root (it starts containerd and runs pods)");
    return 1;
  }

  // One root signal for the whole demo: SIGINT/SIGTERM or the DEMO_SECONDS timer.
  const root = new AbortController();
  const onSignal = (name: Deno.Signal) => () => {
    if (!root.signal.aborted) console.log(`demo: ${name} received, stopping`);
    root.abort(new Error(`stopped by ${name}`));
  };
  const signals = [["SIGINT", onSignal("SIGINT")], ["SIGTERM", onSignal("SIGTERM")]] as const;
  for (const [name, handler] of signals) Deno.addSignalListener(name, handler);
  const timer = durationMs === undefined ? undefined : setTimeout(() => {
    console.log(`demo: DEMO_SECONDS=${durationMs / 1000} elapsed, stopping`);
    root.abort(new Error("DEMO_SECONDS elapsed"));
  }, durationMs);

  let containerd: ContainerdHandle | undefined;
  try {
    await ensureRuntimePackages();
    console.log(`demo: starting containerd in ${CONTAINERD_DIR}`);
    containerd = await startContainerd({
      dir: CONTAINERD_DIR,
      socket: CONTAINERD_SOCKET,
      logFile: `${CONTAINERD_DIR}/containerd.log`,
      signal: root.signal,
    });
    console.log(`demo: containerd serves ${containerd.endpoint} (log: ${containerd.logFile})`);
    await ensureImagePackages();
    const imported = await importImages({
      containerdSocket: containerd.socket,
      images: [BUSYBOX, PAUSE],
      signal: root.signal,
    });
    console.log(`demo: imported ${imported.map((i) => i.name).join(", ")}`);
    await warnAboutMissingImages(containerd.socket);

    await removeOldPodLogs();
    await Deno.mkdir(MANIFEST_DIR, { recursive: true });
    await Deno.writeTextFile(CONFIG_FILE, kubeletConfig(containerd.endpoint));
    await Deno.writeTextFile(`${MANIFEST_DIR}/hello.yaml`, HELLO_POD);
    console.log(`demo: wrote ${CONFIG_FILE} and ${MANIFEST_DIR}/hello.yaml`);

    root.signal.throwIfAborted();
    const tail = followPodLog(root.signal);
    const code = await runAgent(root.signal);
    await tail;
    return code;
  } catch (err) {
    if (root.signal.aborted && err === root.signal.reason) {
      console.log("demo: stopped before the agent started");
      return 0;
    }
    throw err;
  } finally {
    clearTimeout(timer);
    if (containerd) {
      console.log("demo: stopping containerd");
      await containerd.stop();
    }
    for (const [name, handler] of signals) Deno.removeSignalListener(name, handler);
  }
}

/**
 * Prints the hello pod's container log as it grows: the newest
 * /var/log/pods/default_hello-<node>_<uid>/hello/<n>.log, in CRI format (time, stream, tag,
 * text), until `signal` aborts.
 */
async function followPodLog(signal: AbortSignal): Promise<void> {
  let file: string | undefined;
  let offset = 0;
  while (!signal.aborted) {
    await new Promise((r) => setTimeout(r, 500));
    try {
      file ??= await findPodLog();
      if (!file) continue;
      const text = await Deno.readTextFile(file);
      if (offset === 0) {
        console.log(`demo: the hello pod runs; its log is ${file}`);
        console.log("demo: the kubelet API answers: curl -k https://127.0.0.1:10250/pods");
      }
      for (const line of text.slice(offset).split("\n").filter((l) => l !== "")) {
        console.log(`demo: pod log: ${line}`);
      }
      offset = text.length;
    } catch {
      file = undefined;
      offset = 0;
    }
  }
}

/** Earlier demo runs' logs of the hello pod: the pod's UID is the same, so its log would grow. */
async function removeOldPodLogs(): Promise<void> {
  try {
    for await (const pod of Deno.readDir("/var/log/pods")) {
      if (pod.name.startsWith("default_hello-")) {
        await Deno.remove(`/var/log/pods/${pod.name}`, { recursive: true });
      }
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
}

async function findPodLog(): Promise<string | undefined> {
  for await (const pod of Deno.readDir("/var/log/pods")) {
    if (!pod.name.startsWith("default_hello-")) continue;
    const dir = `/var/log/pods/${pod.name}/hello`;
    const logs: string[] = [];
    for await (const f of Deno.readDir(dir)) if (f.name.endsWith(".log")) logs.push(f.name);
    logs.sort((a, b) => parseInt(b) - parseInt(a));
    if (logs[0]) return `${dir}/${logs[0]}`;
  }
  return undefined;
}

/** Runs the agent until it exits or `signal` aborts; resolves to its exit code. */
async function runAgent(signal: AbortSignal): Promise<number> {
  // --allow-all, not -P=kubelet: Deno 2.9 denies /proc and /sys to any narrower set (README,
  // "Known problem").
  const args = ["run", ...AGENT_RUN_FLAGS, "main.ts", "--config", CONFIG_FILE];
  console.log(`demo: starting the agent: deno ${args.join(" ")} (cwd ${REPO_ROOT})`);
  const agent = new Deno.Command(Deno.execPath(), {
    args,
    cwd: REPO_ROOT,
    stdin: "null",
    stdout: "inherit",
    stderr: "piped",
  }).spawn();
  // The agent logs to stderr; the demo shows it on stdout.
  const logs = agent.stderr.pipeTo(Deno.stdout.writable, { preventClose: true }).catch(() => {});

  // On abort: SIGTERM, then SIGKILL if the agent is still there after the bound.
  let killTimer: ReturnType<typeof setTimeout> | undefined;
  const stopAgent = () => {
    console.log("demo: sending SIGTERM to the agent");
    kill(agent, "SIGTERM");
    killTimer = setTimeout(() => {
      console.log(`demo: the agent did not stop within ${AGENT_STOP_TIMEOUT_MS} ms, SIGKILL`);
      kill(agent, "SIGKILL");
    }, AGENT_STOP_TIMEOUT_MS);
  };
  if (signal.aborted) stopAgent();
  else signal.addEventListener("abort", stopAgent, { once: true });

  const status = await agent.status;
  clearTimeout(killTimer);
  signal.removeEventListener("abort", stopAgent);
  await logs;
  const how = status.signal ? `was killed by ${status.signal}` : `exited with code ${status.code}`;
  console.log(`demo: the agent ${how}${signal.aborted ? "" : " on its own"}`);
  return status.code;
}

function kill(child: Deno.ChildProcess, sig: Deno.Signal): void {
  try {
    child.kill(sig);
  } catch {
    // already exited
  }
}

if (import.meta.main) {
  let code: number;
  try {
    code = await main();
  } catch (err) {
    console.error(`demo: ${err instanceof Error ? err.message : String(err)}`);
    code = 1;
  }
  Deno.exit(code);
}
