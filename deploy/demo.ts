/**
 * @module
 * `deno task demo`: runs the kubelet against a private containerd on this machine with one
 * static pod, until SIGINT/SIGTERM or until the pod has run for `DEMO_SECONDS` seconds: the
 * clock starts once the agent is up and the pod's container runs, so installing packages,
 * building and importing images and starting containerd and the agent do not count ({@link USAGE}).
 *
 * Steps: install the runtime packages if missing, start containerd (tests/containerd_harness.ts)
 * with its socket under /run/kubelet-ts (a path the agent's permission set may open), build the
 * busybox and pause images from Debian's busybox-static and import them (no registry is reached),
 * write a kubelet config and a static pod manifest under /etc/kubernetes, then run the agent with
 * --allow-all (Deno 2.9 denies /proc and /sys to the `kubelet` set), print the static pod's log
 * from /var/log/pods as it grows, and stop the agent (SIGTERM) and containerd when asked to.
 * Once the pod runs it says which socket `ctr` and `crictl` take to look at it; at the end, what
 * this run leaves on the machine (packages it installed, the images in its containerd, its
 * directories, caches and cgroups, the kernel settings the kubelet wrote) and how to undo each. Exits with the agent's exit code.
 * Needs root: run it as `deno run --allow-all deploy/demo.ts`.
 */

import {
  type ContainerdHandle,
  ensureRuntimePackages,
  findProgram,
  POD_NETWORK,
  SANDBOX_IMAGE,
  startContainerd,
} from "../tests/containerd_harness.ts";
import { binaryPath, CRICTL_VERSION } from "../tests/control_plane_build.ts";
import { AGENT_RUN_FLAGS } from "./compile.ts";
import { KERNEL_TUNABLES } from "../src/cm/kernel_tunables.ts";
import {
  type BuiltImage,
  BUSYBOX,
  ensureImagePackages,
  importImages,
  PAUSE,
} from "../tests/images.ts";

const CONTAINERD_DIR = "/var/lib/kubelet-ts-demo/containerd";
const CONTAINERD_SOCKET = "/run/kubelet-ts/demo/containerd.sock";
const CONFIG_FILE = "/etc/kubernetes/kubelet-demo.yaml";
const MANIFEST_DIR = "/etc/kubernetes/manifests-demo";
const DEMO_IMAGE = "busybox:1.36";
/** How long the agent gets to stop after SIGTERM before it is killed. */
const AGENT_STOP_TIMEOUT_MS = 30_000;
/** How long after the agent's start DEMO_SECONDS waits for the pod before it counts anyway. */
const POD_START_TIMEOUT_S = 120;
/** The agent's --root-dir: the demo passes none, so upstream's default. */
const AGENT_ROOT_DIR = "/var/lib/kubelet";
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

/** What `deno task demo --help` prints. */
const USAGE = `Usage: deno task demo  (as root; the same as deno run --allow-all deploy/demo.ts)

Starts a private containerd (socket ${CONTAINERD_SOCKET}) and the
kubelet in standalone mode with one static pod, "hello", and prints the pod's log until Ctrl-C
or SIGTERM.

Environment:
  DEMO_SECONDS=<n>  stop by itself after the hello pod has run for n seconds: the clock starts
                    when the agent is up and the pod's container runs. Installing packages,
                    building and importing images and starting containerd and the agent come
                    before and do not count. If the pod has not started ${POD_START_TIMEOUT_S} s
                    after the agent, the clock starts then.

When the pod runs it prints the ctr and crictl commands to look at it; at the end, what the run
leaves on this machine (packages it installed, images, directories, caches, cgroups) and how to
remove each.
`;

/** `DEMO_SECONDS` as milliseconds, or undefined to run until a signal. */
function demoDurationMs(): number | undefined {
  const raw = Deno.env.get("DEMO_SECONDS");
  if (raw === undefined || raw === "") return undefined;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds <= 0) {
    throw new Error(
      `Cannot start the demo: 'DEMO_SECONDS' (seconds the hello pod runs before the demo stops) ` +
        `must be a positive number such as 30: current value is '${raw}'`,
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

/** What this run did to the machine, for {@link printLeftovers}. */
interface Touched {
  /** Debian packages installed before it asked apt for anything; undefined without dpkg. */
  packagesBefore?: ReadonlySet<string>;
  containerd: boolean;
  imported: readonly BuiltImage[];
  wroteConfig: boolean;
  agent: boolean;
  /** The kernel tunables the kubelet writes at start, as they were before it ran. */
  tunablesBefore?: ReadonlyMap<string, string>;
}

/** The values of the kernel tunables the kubelet sets at start (src/cm/kernel_tunables.ts). */
function readTunables(): Map<string, string> {
  return new Map(
    KERNEL_TUNABLES.map(([name]) => [name, Deno.readTextFileSync(`/proc/sys/${name}`).trim()]),
  );
}

async function main(args: readonly string[]): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(USAGE);
    return 0;
  }
  if (args.length > 0) {
    console.error(`demo: unknown arguments: ${args.join(" ")}\n\n${USAGE}`);
    return 2;
  }
  const durationMs = demoDurationMs();
  if (Deno.uid() !== 0) {
    console.error("demo: must run as root (it starts containerd and runs pods)");
    return 1;
  }

  // One root signal for the whole demo: SIGINT/SIGTERM or the DEMO_SECONDS clock.
  const root = new AbortController();
  const onSignal = (name: Deno.Signal) => () => {
    if (!root.signal.aborted) console.log(`demo: ${name} received, stopping`);
    root.abort(new Error(`stopped by ${name}`));
  };
  const signals = [["SIGINT", onSignal("SIGINT")], ["SIGTERM", onSignal("SIGTERM")]] as const;
  for (const [name, handler] of signals) Deno.addSignalListener(name, handler);
  // DEMO_SECONDS counts from the pod's start, not from the demo's: set-up takes minutes on a
  // fresh machine and would eat a short run.
  let clock: ReturnType<typeof setTimeout> | undefined;
  const startClock = (why: string) => {
    if (durationMs === undefined || clock !== undefined) return;
    console.log(`demo: ${why}; stopping in DEMO_SECONDS=${durationMs / 1000} s`);
    clock = setTimeout(() => {
      console.log(`demo: DEMO_SECONDS=${durationMs / 1000} elapsed, stopping`);
      root.abort(new Error("DEMO_SECONDS elapsed"));
    }, durationMs);
  };
  let podStartTimer: ReturnType<typeof setTimeout> | undefined;

  const touched: Touched = {
    packagesBefore: await installedPackages(),
    containerd: false,
    imported: [],
    wroteConfig: false,
    agent: false,
  };
  let containerd: ContainerdHandle | undefined;
  try {
    await ensureRuntimePackages();
    console.log(`demo: starting containerd in ${CONTAINERD_DIR}`);
    touched.containerd = true;
    containerd = await startContainerd({
      dir: CONTAINERD_DIR,
      socket: CONTAINERD_SOCKET,
      logFile: `${CONTAINERD_DIR}/containerd.log`,
      signal: root.signal,
    });
    console.log(`demo: containerd serves ${containerd.endpoint} (log: ${containerd.logFile})`);
    await ensureImagePackages();
    touched.imported = await importImages({
      containerdSocket: containerd.socket,
      images: [BUSYBOX, PAUSE],
      signal: root.signal,
    });
    console.log(`demo: imported ${touched.imported.map((i) => i.name).join(", ")}`);
    await warnAboutMissingImages(containerd.socket);

    await removeOldPodLogs();
    touched.wroteConfig = true;
    await Deno.mkdir(MANIFEST_DIR, { recursive: true });
    await Deno.writeTextFile(CONFIG_FILE, kubeletConfig(containerd.endpoint));
    await Deno.writeTextFile(`${MANIFEST_DIR}/hello.yaml`, HELLO_POD);
    console.log(`demo: wrote ${CONFIG_FILE} and ${MANIFEST_DIR}/hello.yaml`);

    root.signal.throwIfAborted();
    const crictl = await findCrictl();
    const tail = followPodLog(root.signal, (file) => {
      clearTimeout(podStartTimer);
      console.log(`demo: the hello pod runs; its log is ${file}`);
      printHowToLook(crictl);
      startClock("the agent is up and the hello pod runs");
    });
    podStartTimer = setTimeout(() => {
      console.warn(
        `demo: WARNING: the hello pod has not started ${POD_START_TIMEOUT_S} s after ` +
          `the agent; see the agent's log above and look with:`,
      );
      printHowToLook(crictl);
      startClock("counting from now anyway");
    }, POD_START_TIMEOUT_S * 1000);
    touched.agent = true;
    touched.tunablesBefore = readTunables();
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
    clearTimeout(clock);
    clearTimeout(podStartTimer);
    if (containerd) {
      console.log("demo: stopping containerd");
      await containerd.stop();
    }
    for (const [name, handler] of signals) Deno.removeSignalListener(name, handler);
    await printLeftovers(touched);
  }
}

/** Where tests/setup.ts builds crictl; undefined when neither KUBELET_TS_CACHE nor HOME is set. */
function builtCrictl(): string | undefined {
  try {
    return binaryPath("crictl", CRICTL_VERSION);
  } catch {
    return undefined;
  }
}

/** How to run crictl here: on PATH, or where tests/setup.ts built it; undefined when neither. */
async function findCrictl(): Promise<string | undefined> {
  if (await findProgram("crictl")) return "crictl";
  const built = builtCrictl();
  return built && (await findProgram(built)) ? built : undefined;
}

/** Prints the ctr and crictl commands that look at what the demo's containerd runs. */
function printHowToLook(crictl: string | undefined): void {
  const endpoint = `unix://${CONTAINERD_SOCKET}`;
  console.log("demo: the kubelet API answers: curl -k https://127.0.0.1:10250/pods");
  console.log(
    `demo: the demo's containerd is not the system one; look at what it runs with its socket ` +
      `(CRI's containers are in namespace k8s.io):`,
  );
  console.log(`demo:   ctr --address ${CONTAINERD_SOCKET} -n k8s.io containers ls`);
  console.log(`demo:   ctr --address ${CONTAINERD_SOCKET} -n k8s.io tasks ls`);
  console.log(`demo:   ${crictl ?? "crictl"} --runtime-endpoint ${endpoint} pods`);
  console.log(`demo:   ${crictl ?? "crictl"} --runtime-endpoint ${endpoint} ps`);
  if (!crictl) {
    console.log(
      `demo:   (crictl is not on this machine and the demo does not install it; ` +
        `'deno run -A tests/setup.ts' builds one${builtCrictl() ? ` at ${builtCrictl()}` : ""})`,
    );
  }
}

/** The Debian packages dpkg has installed, or undefined where there is no dpkg-query. */
async function installedPackages(): Promise<Set<string> | undefined> {
  try {
    const out = await new Deno.Command("dpkg-query", {
      args: ["--show", "--showformat", "${db:Status-Abbrev} ${binary:Package}\\n"],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).output();
    if (!out.success) return undefined;
    const lines = new TextDecoder().decode(out.stdout).split("\n");
    return new Set(
      lines.filter((l) => l.startsWith("ii ")).map((l) => l.slice(3).trim().replace(/:.*$/, "")),
    );
  } catch {
    return undefined;
  }
}

/**
 * Prints what this run leaves on the machine and how to remove each: what it touched, not
 * what earlier runs may have left (the same paths, so the same commands remove those too).
 */
async function printLeftovers(touched: Touched): Promise<void> {
  const lines: string[] = [];
  const before = touched.packagesBefore;
  const after = before ? await installedPackages() : undefined;
  if (!before || !after) {
    lines.push("packages: cannot tell what apt installed (no dpkg-query here)");
  } else {
    const added = [...after].filter((p) => !before.has(p)).sort();
    const removed = [...before].filter((p) => !after.has(p)).sort();
    lines.push(
      added.length === 0
        ? "packages: none installed by this run (what it needs was there already)"
        : `packages this run installed with apt: ${added.join(" ")}; remove: ` +
          `apt-get purge ${added.join(" ")}`,
    );
    if (removed.length > 0) {
      lines.push(
        `packages apt removed while installing those: ${removed.join(" ")}; ` +
          `apt-get install ${removed.join(" ")} puts them back`,
      );
    }
  }
  if (touched.containerd) {
    const images = touched.imported.map((i) => i.name);
    lines.push(
      `its containerd's config, log, CNI config and state in ${CONTAINERD_DIR}` +
        (images.length > 0 ? `, with the images ${images.join(" and ")} it imported` : "") +
        ` and the pod's stopped containers, and its socket directory ` +
        `${parentDir(CONTAINERD_SOCKET)}; remove: rm -rf ${parentDir(CONTAINERD_DIR)} ` +
        `${parentDir(CONTAINERD_SOCKET)}`,
    );
  }
  if (touched.imported.length > 0) {
    const cache = parentDir(parentDir(touched.imported[0]!.tarball));
    lines.push(
      `the image builds in ${cache} (git-ignored, reused by the next run); remove: rm -rf ${cache}`,
    );
  }
  if (touched.wroteConfig) {
    lines.push(
      `the agent's config ${CONFIG_FILE} and the static pod ${MANIFEST_DIR}; remove: ` +
        `rm -rf ${CONFIG_FILE} ${MANIFEST_DIR}`,
    );
  }
  if (touched.agent) {
    lines.push(
      `the pod network ${POD_NETWORK}: bridge kts0 and host-local's address store ` +
        `/var/lib/cni/networks/${POD_NETWORK} (the test suite uses them too); remove: ` +
        `ip link delete kts0; rm -rf /var/lib/cni/networks/${POD_NETWORK}`,
    );
    lines.push(
      `the hello pod's log and its link: rm -rf /var/log/pods/default_hello-* ` +
        `/var/log/containers/hello-*_default_hello-*.log`,
    );
    lines.push(
      `the agent's state in its root directory ${AGENT_ROOT_DIR} (its data directories, the ` +
        `pod's directory pods/<uid>, a self-signed serving certificate in pki/); remove: ` +
        `rm -rf ${AGENT_ROOT_DIR}, unless another kubelet here uses it`,
    );
    lines.push(
      `the pod's cgroups under /kubepods in each cgroup hierarchy; remove, unless another ` +
        `kubelet here uses them: find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} +`,
    );
    lines.push(
      `Deno's cache (${await denoDir()}) holds the agent's npm packages, shared with every Deno ` +
        `program; 'deno clean' empties it`,
    );
  }
  if (touched.tunablesBefore) {
    const now = readTunables();
    const changed = [...touched.tunablesBefore].filter(([name, was]) => now.get(name) !== was);
    if (changed.length > 0) {
      lines.push(
        `the kernel settings the kubelet wants (as the Go kubelet sets them without ` +
          `protectKernelDefaults): ${
            changed.map(([n, was]) => `${n.replaceAll("/", ".")} ${was} → ${now.get(n)}`)
              .join(", ")
          }; restore: sysctl -w ${
            changed.map(([n, was]) => `${n.replaceAll("/", ".")}=${was}`).join(" ")
          }`,
      );
    }
  }
  if (lines.length === 0) return;
  console.log("demo: this run leaves on this machine:");
  for (const line of lines) console.log(`demo:   ${line}`);
}

/** Deno's cache directory, as `deno info` reports it. */
async function denoDir(): Promise<string> {
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json"],
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).output();
    return String(JSON.parse(new TextDecoder().decode(out.stdout)).denoDir);
  } catch {
    return "Deno's cache directory (deno info shows it)";
  }
}

function parentDir(path: string): string {
  return path.slice(0, path.lastIndexOf("/")) || "/";
}

/**
 * Prints the hello pod's container log as it grows: the newest
 * /var/log/pods/default_hello-<node>_<uid>/hello/<n>.log, in CRI format (time, stream, tag,
 * text), until `signal` aborts. Calls `onRunning` once, when the log first appears: containerd
 * opens it when it starts the container.
 */
async function followPodLog(
  signal: AbortSignal,
  onRunning: (file: string) => void,
): Promise<void> {
  let file: string | undefined;
  let offset = 0;
  let running = false;
  while (!signal.aborted) {
    await new Promise((r) => setTimeout(r, 500));
    try {
      file ??= await findPodLog();
      if (!file) continue;
      const text = await Deno.readTextFile(file);
      if (!running) {
        running = true;
        onRunning(file);
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
  // --allow-all, not -P=kubelet: Deno 2.9 denies /proc and /sys to any narrower set
  // (docs/least_privilege.md, "Known problem").
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
    code = await main(Deno.args);
  } catch (err) {
    console.error(`demo: ${err instanceof Error ? err.message : String(err)}`);
    code = 1;
  }
  Deno.exit(code);
}
