/**
 * @module
 * A private containerd 1.6 for integration tests and the demo: its own config, root, state,
 * socket and CNI config under one directory, started as a child process and stopped again.
 * The pod network itself (bridge `kts0`, {@link POD_SUBNET}) is one per host and shared by
 * every instance, so tests that run in parallel never hand out the same pod address twice.
 *
 * It owns the containerd process and the files it writes under `dir`; it talks to containerd
 * only through `ctr` (to see that the socket answers, and on stop to remove what still runs)
 * and to the CNI plugins (to release pod networks on stop); {@link findShims} reads /proc for
 * the shims an instance left, which outlive containerd by design. It stands in for the node's
 * container runtime, which upstream's node e2e tests get from the host
 * (`/run/containerd/containerd.sock`).
 *
 * Facts it is built on (see /work/shared/ENVIRONMENT.md): CAP_SYS_RESOURCE is missing here, so
 * the CRI plugin needs `restrict_oom_score_adj = true`; runc works with the hybrid cgroup
 * layout, crun does not; no public registry is reachable, so the sandbox image must be imported
 * under {@link SANDBOX_IMAGE} before any pod can start, and a registry host that pods pull from
 * must be served by a local registry ({@link ContainerdOptions.registryMirrors}).
 */

import { aptInstallMissing, type AptPackage, findProgram } from "./apt.ts";
import { exists, logTail, signalChild } from "./child_process.ts";
export { findProgram, MissingPackagesError } from "./apt.ts";

/** The pause image every pod sandbox runs; tests must import an image under this name. */
// Debian's containerd 1.6.20 has the same built-in default (`containerd config default`);
// earlier 1.6 releases said "k8s.gcr.io/pause:3.6", so the config sets it explicitly.
export const SANDBOX_IMAGE = "registry.k8s.io/pause:3.6";

/** The pod network the bridge CNI config hands out addresses from. */
export const POD_SUBNET = "10.88.0.0/16";

/** Where Debian's containernetworking-plugins puts the CNI binaries. */
export const CNI_BIN_DIR = "/usr/lib/cni";

/** The CNI plugins the generated network config (and containerd's own loopback) calls. */
const CNI_PLUGINS = ["bridge", "host-local", "portmap", "loopback"] as const;

/** Options for {@link startContainerd}. */
export interface ContainerdOptions {
  /** Directory that holds config, root, state, CNI config and (by default) socket and log. */
  dir: string;
  /**
   * Path of the gRPC socket; its parent directory is created.
   * @default `${dir}/containerd.sock`
   */
  socket?: string;
  /**
   * containerd's `root`: its content store, snapshots and metadata, the filesystem CRI
   * ImageFsInfo reports as the image filesystem. A test that needs a small image filesystem
   * mounts one here before the start (outside `dir`, or stop() unmounts it with the rest).
   * @default `${dir}/root`
   */
  root?: string;
  /** Aborting it stops containerd (and aborts a start that is still waiting). */
  signal?: AbortSignal;
  /**
   * File that receives containerd's stdout and stderr (appended).
   * @default `${dir}/containerd.log`
   */
  logFile?: string;
  /**
   * How long to wait for the socket to answer.
   * @default 20000
   */
  startTimeoutMs?: number;
  /**
   * How long stop() waits after SIGTERM before it sends SIGKILL.
   * @default 10000
   */
  stopTimeoutMs?: number;
  /**
   * Whether stop() first does what CRI StopPodSandbox would for every pod still running (kill
   * and delete its tasks, so no shim or container outlives containerd; CNI DEL, so its address
   * and iptables rules go; remove its network namespace), and afterwards unmounts what is left
   * under `dir`, so `dir` can be removed.
   * @default true
   */
  cleanupOnStop?: boolean;
  /**
   * A pod network of this instance's own instead of the shared one, for tests that count the
   * addresses its pods hold.
   * @default the shared network {@link POD_NETWORK} on {@link POD_SUBNET}
   */
  network?: PodNetworkOptions;
  /**
   * More CRI runtime handlers, each runc as the default one: what RuntimeClass tests name
   * (upstream's test clusters give containerd `test-handler`). @default []
   */
  runtimeHandlers?: readonly string[];
  /**
   * Which containerd: Debian's 1.6 ("containerd") or 2.x built from its Go module with its own
   * runc ("containerd2", tests/runtime_build.ts).
   * @default $KUBELET_TS_RUNTIME, else "containerd"
   */
  runtime?: RuntimeKind;
  /**
   * Registry hosts another registry serves in their place: the host as image names have it
   * (`registry.k8s.io`) → the URL of a registry holding its repositories under the same paths
   * (`http://127.0.0.1:5000`). Each gets a `hosts.toml` under `${dir}/certs.d` that names that
   * registry as the host's only server, and the CRI plugin's registry `config_path` points there
   * (both config versions), so a pull never tries the real host. Other hosts keep containerd's
   * defaults. @default {} (no `config_path`)
   */
  registryMirrors?: Readonly<Record<string, string>>;
  /**
   * The namespaces containerd runs in, entered with nsenter: a node of its own on this machine
   * (tests/kubeadm_cluster.ts), whose host-network pods then live in `net`. Its socket, root and
   * state stay under `dir`, which the host and the node both see. @default this process's
   */
  namespaces?: NodeNamespaces;
  /**
   * A CNI config template (containerd's `cni.conf_template`) instead of the harness's network:
   * the conf directory starts empty and containerd writes the network from the template once the
   * kubelet sends the node's pod CIDR (CRI UpdateRuntimeConfig), as on a kubeadm node that has no
   * network add-on. On stop, pods are not released from that network (their node's network
   * namespace goes with the node). @default the harness network ({@link ContainerdOptions.network})
   */
  cniConfTemplate?: string;
  /** The CRI sandbox image (1.6 `sandbox_image`, 2.x pinned `sandbox`). @default SANDBOX_IMAGE */
  sandboxImage?: string;
  /**
   * `host:port` where containerd 1.6 also serves gRPC over cleartext TCP (`[grpc] tcp_address`,
   * the CRI services on it): a grpc-go server for the TCP gRPC client's tests. Refused with
   * containerd 2.x.
   */
  grpcTcpAddress?: string;
}

/** Paths of namespace files (e.g. `/run/netns/<name>`) that nsenter enters; each optional. */
export interface NodeNamespaces {
  readonly net?: string;
  readonly mount?: string;
  readonly uts?: string;
}

/**
 * The nsenter command line that runs a program in `ns` (empty when `ns` names none). Entering a
 * mount namespace moves the working directory to its root: `wd` keeps the one given.
 */
export function nsenterPrefix(ns: NodeNamespaces | undefined, wd?: string): string[] {
  const flags = [
    ...(ns?.net ? [`--net=${ns.net}`] : []),
    ...(ns?.mount ? [`--mount=${ns.mount}`] : []),
    ...(ns?.uts ? [`--uts=${ns.uts}`] : []),
    ...(wd !== undefined ? [`--wd=${wd}`] : []),
  ];
  return flags.length > 0 ? ["nsenter", ...flags, "--"] : [];
}

/** The containerd the harness runs; see {@link ContainerdOptions.runtime}. */
export type RuntimeKind = "containerd" | "containerd2";

/** `KUBELET_TS_RUNTIME` (containerd or containerd2); a bad value names itself. */
export function runtimeFromEnv(): RuntimeKind {
  const v = Deno.env.get("KUBELET_TS_RUNTIME") ?? "containerd";
  if (v !== "containerd" && v !== "containerd2") {
    throw new ContainerdStartError(
      `KUBELET_TS_RUNTIME must be 'containerd' (Debian's 1.6) or 'containerd2' (2.x built ` +
        `from its Go module): current value is '${v}'`,
    );
  }
  return v;
}

/** A running containerd started by {@link startContainerd}. */
export interface ContainerdHandle {
  /** CRI endpoint as the kubelet's `containerRuntimeEndpoint` wants it: `unix:///...`. */
  endpoint: string;
  /** Absolute path of the gRPC socket. */
  socket: string;
  /** Process id of containerd (a new one after {@link ContainerdHandle.restart}). */
  readonly pid: number;
  /** Path of the generated config.toml. */
  configFile: string;
  /** Path of the log file. */
  logFile: string;
  /** The CNI network its pods join. */
  network: string;
  /** What `containerd --version` says, e.g. "containerd github.com/containerd/containerd/v2 v2.4.2". */
  version: string;
  /** Stops containerd: SIGTERM, then SIGKILL after a bound. Idempotent. */
  stop(): Promise<void>;
  /**
   * SIGKILLs containerd and waits for it to exit, nothing else: shims and containers keep
   * running, as when the runtime crashes. Does nothing when it is not running.
   */
  kill(): Promise<void>;
  /**
   * {@link ContainerdHandle.kill}, then starts containerd again on the same config, root, state
   * and socket and waits until it answers: upstream's node e2e restart test does this with
   * systemctl.
   */
  restart(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** containerd did not come up, or the environment cannot run it. */
export class ContainerdStartError extends Error {
  override name = "ContainerdStartError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

// Longest path a Linux unix socket address holds (sun_path is 108 bytes with the NUL).
const MAX_SOCKET_PATH = 107;
const POLL_INTERVAL_MS = 100;

/** Starts a private containerd under `opts.dir` and waits until its socket answers. */
export async function startContainerd(opts: ContainerdOptions): Promise<ContainerdHandle> {
  opts.signal?.throwIfAborted();
  const dir = absolute(opts.dir);
  const socket = absolute(opts.socket ?? `${dir}/containerd.sock`);
  const logFile = absolute(opts.logFile ?? `${dir}/containerd.log`);
  const configFile = `${dir}/config.toml`;
  const root = absolute(opts.root ?? `${dir}/root`);
  const startTimeoutMs = opts.startTimeoutMs ?? 20_000;
  const stopTimeoutMs = opts.stopTimeoutMs ?? 10_000;
  const cleanupOnStop = opts.cleanupOnStop ?? true;

  if (new TextEncoder().encode(socket).length > MAX_SOCKET_PATH) {
    throw new ContainerdStartError(
      `Cannot start containerd: socket path must be at most ${MAX_SOCKET_PATH} bytes: ` +
        `current value is '${socket}'`,
    );
  }
  const runtime = opts.runtime ?? runtimeFromEnv();
  // containerd 2.x is built (or found in the cache) with its runc and shim; the harness keeps
  // using Debian's ctr, whose API the 2.x server still serves.
  const built = runtime === "containerd2"
    ? await (await import("./runtime_build.ts")).ensureContainerd2({ signal: opts.signal })
    : undefined;
  const containerdPath = built?.containerd ?? await findProgram("containerd");
  for (const program of ["containerd", "ctr", "runc"]) {
    if (!(await findProgram(program))) {
      throw new ContainerdStartError(
        `Cannot start containerd: '${program}' is not on PATH; call ensureRuntimePackages() ` +
          `or install containerd and runc`,
      );
    }
  }
  if (await ctrAnswers(socket)) {
    throw new ContainerdStartError(
      `Cannot start containerd: another containerd already serves ${socket} ` +
        `(left over from an earlier run?); stop it first`,
    );
  }

  await Deno.mkdir(dir, { recursive: true });
  await Deno.mkdir(parent(socket), { recursive: true });
  await Deno.mkdir(parent(logFile), { recursive: true });
  const cniConfDir = `${dir}/cni/net.d`;
  await Deno.mkdir(cniConfDir, { recursive: true });
  const network = cniNetwork(opts.network);
  if (opts.cniConfTemplate === undefined) {
    await Deno.writeTextFile(
      `${cniConfDir}/10-kubelet-ts-bridge.conflist`,
      JSON.stringify(network, null, 2) + "\n",
    );
  }
  const registryConfigPath = await writeRegistryHosts(`${dir}/certs.d`, opts.registryMirrors);
  const configArgs = {
    dir,
    root,
    socket,
    cniConfDir,
    runtimeHandlers: opts.runtimeHandlers,
    registryConfigPath,
    cniConfTemplate: opts.cniConfTemplate,
    sandboxImage: opts.sandboxImage ?? SANDBOX_IMAGE,
    grpcTcpAddress: opts.grpcTcpAddress,
  };
  if (built && opts.grpcTcpAddress !== undefined) {
    throw new Error("startContainerd: grpcTcpAddress is supported with containerd 1.6 only");
  }
  await Deno.writeTextFile(
    configFile,
    built
      ? (await import("./runtime_build.ts")).containerd2Config({
        ...configArgs,
        runc: built.runc,
        shimRuncV2: built.shimRuncV2,
      })
      : containerdConfig(configArgs),
  );
  const version = new TextDecoder().decode(
    (await new Deno.Command(containerdPath ?? "containerd", { args: ["--version"] }).output())
      .stdout,
  ).trim();
  // Tasks made outside CRI (ctr run) find the shim on containerd's PATH: the built one first.
  const env = built
    ? { PATH: `${parent(built.shimRuncV2)}:${parent(built.runc)}:${Deno.env.get("PATH") ?? ""}` }
    : undefined;

  const log = await Deno.open(logFile, { create: true, append: true });
  const logWriter = log.writable.getWriter();
  const encoder = new TextEncoder();
  // Writes from the processes of successive starts go through this one writer, in order.
  let written = Promise.resolve();
  const append = (chunk: Uint8Array) => {
    written = written.then(() => logWriter.write(chunk)).catch(() => {});
    return written;
  };

  /** One containerd process: its child, whether it exited, and its copied output. */
  interface Run {
    readonly child: Deno.ChildProcess;
    readonly status: Promise<Deno.CommandStatus>;
    readonly copied: Promise<unknown>;
    exited: boolean;
  }
  const launch = async (): Promise<Run> => {
    await append(
      encoder.encode(`--- ${new Date().toISOString()} containerd --config ${configFile}\n`),
    );
    let child: Deno.ChildProcess;
    try {
      const [program, ...first] = [
        ...nsenterPrefix(opts.namespaces),
        containerdPath ?? "containerd",
      ];
      child = new Deno.Command(program!, {
        args: [...first, "--config", configFile],
        env,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
    } catch (err) {
      throw new ContainerdStartError(`Cannot start containerd: ${(err as Error).message}`, {
        cause: err,
      });
    }
    // Both streams go to one file; a chunk is written whole, so lines from the two interleave
    // only at chunk boundaries (containerd writes its log to stderr anyway).
    const copy = async (stream: ReadableStream<Uint8Array>) => {
      for await (const chunk of stream) await append(chunk);
    };
    const run: Run = {
      child,
      status: child.status.then((s) => {
        run.exited = true;
        return s;
      }),
      copied: Promise.allSettled([copy(child.stdout), copy(child.stderr)]),
      exited: false,
    };
    return run;
  };

  let run: Run;
  try {
    run = await launch();
  } catch (err) {
    await logWriter.close().catch(() => {});
    throw err;
  }

  let stopping: Promise<void> | undefined;
  const onAbort = () => void stop();
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      opts.signal?.removeEventListener("abort", onAbort);
      if (cleanupOnStop && !run.exited) {
        await removeWorkloads(socket, opts.cniConfTemplate === undefined ? network : undefined);
      }
      if (!run.exited) {
        signalChild(run.child, "SIGTERM");
        const timer = setTimeout(() => signalChild(run.child, "SIGKILL"), stopTimeoutMs);
        try {
          await run.status;
        } finally {
          clearTimeout(timer);
        }
      }
      await run.copied;
      await written;
      await logWriter.close().catch(() => {});
      if (cleanupOnStop) await unmountUnder(dir);
    })();
    return stopping;
  };
  opts.signal?.addEventListener("abort", onAbort, { once: true });

  const serving = () =>
    waitUntilServing({
      socket,
      status: run.status,
      isExited: () => run.exited,
      startTimeoutMs,
      opts,
    });
  const kill = async (): Promise<void> => {
    if (stopping) throw new ContainerdStartError("Cannot kill containerd: it was stopped");
    if (run.exited) return;
    signalChild(run.child, "SIGKILL");
    await run.status;
    await run.copied;
  };

  const handle: ContainerdHandle = {
    endpoint: `unix://${socket}`,
    socket,
    get pid() {
      return run.child.pid;
    },
    configFile,
    logFile,
    network: network.name,
    version,
    stop,
    kill,
    async restart() {
      await kill();
      run = await launch();
      try {
        await serving();
      } catch (err) {
        const tail = await logTail(logFile, 40);
        throw new ContainerdStartError(
          `containerd did not come back: ${(err as Error).message}\n--- last lines of ` +
            `${logFile} ---\n${tail}`,
          { cause: err },
        );
      }
    },
    [Symbol.asyncDispose]: stop,
  };

  try {
    await serving();
    opts.signal?.throwIfAborted(); // aborted while the last poll was answered
  } catch (err) {
    await stop();
    if (opts.signal?.aborted) throw opts.signal.reason;
    const tail = await logTail(logFile, 40);
    throw new ContainerdStartError(
      `${(err as Error).message}\n--- last lines of ${logFile} ---\n${tail}`,
      { cause: err },
    );
  }
  return handle;
}

async function waitUntilServing(args: {
  socket: string;
  status: Promise<Deno.CommandStatus>;
  isExited: () => boolean;
  startTimeoutMs: number;
  opts: ContainerdOptions;
}): Promise<void> {
  const deadline = Date.now() + args.startTimeoutMs;
  while (true) {
    args.opts.signal?.throwIfAborted();
    if (args.isExited()) {
      const s = await args.status;
      throw new ContainerdStartError(
        `containerd exited during start-up (code ${s.code}${s.signal ? `, ${s.signal}` : ""})`,
      );
    }
    if (await ctrAnswers(args.socket)) return;
    if (Date.now() >= deadline) {
      throw new ContainerdStartError(
        `containerd did not answer on ${args.socket} within ${args.startTimeoutMs} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
}

/** Whether `ctr --address <socket> version` succeeds (it checks client and server). */
async function ctrAnswers(socket: string): Promise<boolean> {
  if (!(await socketAccepts(socket))) return false;
  const out = await ctr(socket, ["version"], 5_000);
  return out.success;
}

/**
 * Whether something listens on the unix socket. A plain connect fails at once on a missing or
 * stale socket, where ctr would keep redialling until its connect timeout.
 */
async function socketAccepts(socket: string): Promise<boolean> {
  try {
    const conn = await Deno.connect({ transport: "unix", path: socket });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

let ctrPath: string | undefined;

async function ctr(
  socket: string,
  args: string[],
  timeoutMs: number,
): Promise<{ success: boolean; stdout: string }> {
  try {
    ctrPath ??= await findProgram("ctr") ?? "ctr";
    const out = await new Deno.Command(ctrPath, {
      args: [
        ...["--address", socket, "--connect-timeout", "2s"],
        ...["--timeout", `${Math.ceil(timeoutMs / 1000)}s`, ...args],
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
      signal: AbortSignal.timeout(timeoutMs + 1_000),
    }).output();
    return { success: out.success, stdout: new TextDecoder().decode(out.stdout) };
  } catch {
    return { success: false, stdout: "" };
  }
}

/**
 * What a CRI StopPodSandbox would have done for every pod still running, best effort and
 * bounded: kill and delete every task (shims are separate processes that would outlive
 * containerd), then release each sandbox's network (CNI DEL: its IP address and iptables rules)
 * and remove its network namespace.
 */
async function removeWorkloads(socket: string, network?: CniNetwork): Promise<void> {
  if (!(await socketAccepts(socket))) return;
  // Read while the containers still exist.
  const sandboxes = network ? await sandboxNetworks(socket) : [];
  await removeTasks(socket);
  await Promise.allSettled(sandboxes.map((s) => releaseNetwork(s, network!)));
}

async function removeTasks(socket: string): Promise<void> {
  const namespaces = await ctr(socket, ["namespaces", "list", "--quiet"], 5_000);
  if (!namespaces.success) return;
  await Promise.allSettled(
    lines(namespaces.stdout).map(async (ns) => {
      const tasks = await ctr(socket, ["--namespace", ns, "tasks", "list", "--quiet"], 5_000);
      if (!tasks.success) return;
      await Promise.allSettled(
        lines(tasks.stdout).map((id) =>
          ctr(socket, ["--namespace", ns, "tasks", "delete", "--force", id], 10_000)
        ),
      );
    }),
  );
}

/** The CRI sandboxes (namespace k8s.io) this containerd holds, with their netns paths. */
async function sandboxNetworks(socket: string): Promise<{ id: string; netns?: string }[]> {
  const ns = ["--namespace", "k8s.io"];
  const list = await ctr(socket, [...ns, "containers", "list", "--quiet"], 5_000);
  if (!list.success) return [];
  const found = await Promise.all(
    lines(list.stdout).map(async (id) => {
      const info = await ctr(socket, [...ns, "containers", "info", id], 5_000);
      if (!info.success) return undefined;
      let parsed: unknown;
      try {
        parsed = JSON.parse(info.stdout);
      } catch {
        return undefined;
      }
      if (field(parsed, "Labels", "io.cri-containerd.kind") !== "sandbox") return undefined;
      const namespaces = field(parsed, "Spec", "linux", "namespaces");
      const network = Array.isArray(namespaces)
        ? namespaces.find((n) => field(n, "type") === "network")
        : undefined;
      const netns = field(network, "path");
      return { id, netns: typeof netns === "string" && netns !== "" ? netns : undefined };
    }),
  );
  return found.filter((s) => s !== undefined);
}

/** CNI DEL of `network` for one sandbox, then its network namespace goes. */
async function releaseNetwork(
  sandbox: { id: string; netns?: string },
  network: CniNetwork,
): Promise<void> {
  let netns = sandbox.netns;
  if (netns !== undefined && !(await exists(netns))) netns = undefined;
  // libcni's DelNetworkList: every plugin of the list, last first.
  for (const plugin of [...network.plugins].reverse()) {
    const conf = { cniVersion: network.cniVersion, name: network.name, ...plugin };
    try {
      const child = new Deno.Command(`${CNI_BIN_DIR}/${plugin.type}`, {
        env: {
          CNI_COMMAND: "DEL",
          CNI_CONTAINERID: sandbox.id,
          CNI_NETNS: netns ?? "",
          CNI_IFNAME: "eth0", // containerd's name for the pod's first network
          CNI_PATH: CNI_BIN_DIR,
        },
        stdin: "piped",
        stdout: "null",
        stderr: "null",
        signal: AbortSignal.timeout(10_000),
      }).spawn();
      const writer = child.stdin.getWriter();
      await writer.write(new TextEncoder().encode(JSON.stringify(conf)));
      await writer.close();
      await child.status;
    } catch {
      // best effort, like the rest of the clean-up
    }
  }
  if (netns !== undefined) {
    await new Deno.Command("umount", { args: [netns], stdout: "null", stderr: "null" })
      .output().catch(() => {});
    await Deno.remove(netns).catch(() => {});
  }
}

/** `obj[k0][k1]...` when every step is an object, else undefined. */
function field(obj: unknown, ...keys: string[]): unknown {
  let cur = obj;
  for (const key of keys) {
    if (typeof cur !== "object" || cur === null) return undefined;
    cur = (cur as Record<string, unknown>)[key];
  }
  return cur;
}

/** Lazily unmounts whatever is still mounted under `dir` (sandbox /dev/shm, rootfs), deepest first. */
async function unmountUnder(dir: string): Promise<void> {
  let mountinfo: string;
  try {
    mountinfo = await Deno.readTextFile("/proc/self/mountinfo");
  } catch {
    return;
  }
  const points = lines(mountinfo)
    .map((line) => unescapeMountPath(line.split(" ")[4] ?? ""))
    .filter((p) => p.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const point of points) {
    try {
      await new Deno.Command("umount", { args: ["-l", point], stdout: "null", stderr: "null" })
        .output();
    } catch {
      // best effort: a leftover mount only keeps `dir` from being removed
    }
  }
}

function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** A containerd shim process (`containerd-shim-runc-v2` and kin), as /proc shows it. */
export interface ShimProcess {
  readonly pid: number;
  /** Its command line, arguments joined by spaces. */
  readonly cmdline: string;
}

/**
 * The running containerd shims whose command line contains `text`: an instance's directory or
 * socket picks out its own shims (each has `-address <socket>`). A shim outlives containerd by
 * design, so this is how a test sees one that nothing removed. Exited shims not yet reaped
 * (zombies, with an empty command line) do not count.
 */
export async function findShims(text: string): Promise<ShimProcess[]> {
  const found: ShimProcess[] = [];
  for (const { pid, argv } of await processes()) {
    const program = argv[0]?.slice(argv[0].lastIndexOf("/") + 1) ?? "";
    const cmdline = argv.join(" ");
    if (program.startsWith("containerd-shim") && cmdline.includes(text)) {
      found.push({ pid, cmdline });
    }
  }
  return found;
}

/**
 * SIGKILLs the shims {@link findShims} finds for `text` and every process below them (the
 * containers they hold; a shim is their subreaper), so nothing of a failed test keeps running.
 * Returns the shims it killed. Last resort only: the containers' cgroups and runc state stay.
 */
export async function killShims(text: string): Promise<ShimProcess[]> {
  const shims = await findShims(text);
  if (shims.length === 0) return shims;
  const children = new Map<number, number[]>();
  for (const { pid, ppid } of await processes()) {
    children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  }
  const below = (pid: number): number[] =>
    (children.get(pid) ?? []).flatMap((child) => [...below(child), child]);
  for (const shim of shims) {
    for (const pid of [...below(shim.pid), shim.pid]) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
  }
  return shims;
}

/** Every process in /proc: its id, its parent's and its argv (empty for kernel threads and zombies). */
async function processes(): Promise<{ pid: number; ppid: number; argv: string[] }[]> {
  const all = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const raw = await Deno.readTextFile(`/proc/${entry.name}/cmdline`);
      all.push({ pid: Number(entry.name), ppid, argv: raw.split("\0").filter((a) => a !== "") });
    } catch {
      // exited meanwhile
    }
  }
  return all;
}

/**
 * The sections every config version shares: the gRPC and ttrpc sockets (and gRPC's TCP address
 * when there is one), the log level, and the `opt` plugin's directory inside the instance.
 */
export function serverSections(dir: string, socket: string, tcpAddress?: string): string {
  return `[grpc]
  address = ${toml(socket)}${
    tcpAddress === undefined ? "" : `
  tcp_address = ${toml(tcpAddress)}`
  }

[ttrpc]
  address = ${toml(`${socket}.ttrpc`)}

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = ${toml(`${dir}/opt`)}
`;
}

/**
 * containerd's `hosts.toml` (containerd 1.5 and later, docs/hosts.md) for a registry host that
 * `url` serves alone: `url` is the one `[host]` to try and the `server` after it, so containerd
 * resolves and pulls there and never at the host itself (its default server). containerd 1.6
 * rejects a file without a `[host]` table ("invalid `host` tree") and then uses the real host.
 */
export function hostsToml(host: string, url: string): string {
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  if (
    !parsed || !/^https?:$/.test(parsed.protocol) || parsed.pathname !== "/" ||
    parsed.search !== ""
  ) {
    throw new ContainerdStartError(
      `registryMirrors["${host}"] must be a registry URL such as http://127.0.0.1:5000: ` +
        `current value is '${url}'`,
    );
  }
  const server = toml(url.replace(/\/$/, ""));
  return `# Generated by tests/containerd_harness.ts: ${host} is served by ${url} alone.
server = ${server}

[host.${server}]
  capabilities = ["pull", "resolve"]
`;
}

/**
 * Writes one `<host>/hosts.toml` under `hostsDir` per mirrored host ({@link hostsToml}) and
 * returns `hostsDir`, the CRI plugin's `config_path`; undefined (and nothing written) for none.
 */
async function writeRegistryHosts(
  hostsDir: string,
  mirrors: Readonly<Record<string, string>> = {},
): Promise<string | undefined> {
  const entries = Object.entries(mirrors);
  if (entries.length === 0) return undefined;
  await Deno.remove(hostsDir, { recursive: true }).catch(() => {});
  for (const [host, url] of entries) {
    if (!/^[A-Za-z0-9.-]+(:\d+)?$/.test(host)) {
      throw new ContainerdStartError(
        `registryMirrors keys must be registry hosts such as registry.k8s.io: current value ` +
          `is '${host}'`,
      );
    }
    // containerd's directory name for a host with a port: "host:5000" is "host_5000_".
    const name = host.replace(/:(\d+)$/, "_$1_");
    await Deno.mkdir(`${hostsDir}/${name}`, { recursive: true });
    await Deno.writeTextFile(`${hostsDir}/${name}/hosts.toml`, hostsToml(host, url));
  }
  return hostsDir;
}

/** The containerd 1.6 config (version 2 schema) for one private instance. */
function containerdConfig(
  args: {
    dir: string;
    root: string;
    socket: string;
    cniConfDir: string;
    runtimeHandlers?: readonly string[];
    /** The registry `config_path` (hosts.toml directories), when there is one. */
    registryConfigPath?: string;
    /** The CNI `conf_template`, when there is one. */
    cniConfTemplate?: string;
    sandboxImage: string;
    /** `[grpc] tcp_address`, with the CRI services served there too. */
    grpcTcpAddress?: string;
  },
): string {
  const { dir, root, socket, cniConfDir } = args;
  const cri = `plugins."io.containerd.grpc.v1.cri"`;
  const handlers = ["runc", ...(args.runtimeHandlers ?? [])].map((name) => `
    [${cri}.containerd.runtimes.${toml(name)}]
      runtime_type = "io.containerd.runc.v2"

      [${cri}.containerd.runtimes.${toml(name)}.options]
        # The kubelet demo and tests use cgroupDriver: cgroupfs.
        SystemdCgroup = false
`).join("");
  const registry = args.registryConfigPath === undefined ? "" : `
  [${cri}.registry]
    # Per-host registry settings (hosts.toml), for the hosts another registry serves.
    config_path = ${toml(args.registryConfigPath)}
`;
  return `# Generated by tests/containerd_harness.ts; rewritten on every start.
version = 2
root = ${toml(root)}
state = ${toml(`${dir}/state`)}
# Storage drivers this machine has no use for; keeps the log free of their start-up errors.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

${serverSections(dir, socket, args.grpcTcpAddress)}
[${cri}]
  sandbox_image = ${toml(args.sandboxImage)}${
    args.grpcTcpAddress === undefined ? "" : `
  disable_tcp_service = false`
  }
  # CAP_SYS_RESOURCE is missing here: a negative oom_score_adj fails and so would every sandbox.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true

  [${cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
${handlers}
  [${cri}.cni]
    bin_dir = ${toml(CNI_BIN_DIR)}
    conf_dir = ${toml(cniConfDir)}
    max_conf_num = 1
${confTemplate(args.cniConfTemplate)}${registry}`;
}

/** A pod network of its own for one harness instance (see {@link ContainerdOptions.network}). */
export interface PodNetworkOptions {
  /** The CNI network name; host-local keeps its addresses in /var/lib/cni/networks/<name>. */
  readonly name: string;
  /** The Linux bridge, at most 15 characters. */
  readonly bridge: string;
  /** Must not overlap {@link POD_SUBNET} or another instance's subnet. */
  readonly subnet: string;
}

/** The shared pod network's name; host-local's store is /var/lib/cni/networks/kubelet-ts. */
export const POD_NETWORK = "kubelet-ts";

/**
 * The pod network: by default one per host, bridge `kts0` with host-local addresses from
 * {@link POD_SUBNET}, shared by every harness instance (tests run in parallel) so they share
 * host-local's address store (/var/lib/cni/networks/kubelet-ts, locked per allocation) rather
 * than hand out the same address twice; portmap for hostPort; loopback. containerd's CRI plugin
 * also brings `lo` up by itself with the loopback binary; the chained one passes the bridge's
 * result through unchanged.
 */
function cniNetwork(own?: PodNetworkOptions) {
  return {
    cniVersion: "1.0.0",
    name: own?.name ?? POD_NETWORK,
    plugins: [
      {
        type: "bridge",
        bridge: own?.bridge ?? "kts0",
        isGateway: true,
        ipMasq: true,
        hairpinMode: true,
        ipam: {
          type: "host-local",
          ranges: [[{ subnet: own?.subnet ?? POD_SUBNET }]],
          routes: [{ dst: "0.0.0.0/0" }],
        },
      },
      { type: "portmap", capabilities: { portMappings: true } },
      { type: "loopback" },
    ],
  };
}
type CniNetwork = ReturnType<typeof cniNetwork>;

/** The CNI section's `conf_template` line for both config versions, or nothing. */
export function confTemplate(path: string | undefined): string {
  return path === undefined ? "" : `    conf_template = ${toml(path)}\n`;
}

/** A TOML basic string. */
export function toml(s: string): string {
  return JSON.stringify(s);
}

/** The programs (or files) each runtime package provides, checked before calling apt. */
const RUNTIME_PACKAGES: readonly AptPackage[] = [
  { pkg: "containerd", provides: ["containerd", "ctr"] },
  { pkg: "runc", provides: ["runc"] },
  {
    pkg: "containernetworking-plugins",
    provides: CNI_PLUGINS.map((p) => `${CNI_BIN_DIR}/${p}`),
  },
  { pkg: "iptables", provides: ["iptables"] },
];

/**
 * Installs containerd, runc, the CNI plugins and iptables with apt-get when any of their
 * programs is missing. Does nothing when all are present; throws when not root.
 */
export async function ensureRuntimePackages(): Promise<void> {
  await aptInstallMissing(RUNTIME_PACKAGES);
}
function lines(text: string): string[] {
  return text.split("\n").map((l) => l.trim()).filter(Boolean);
}

function absolute(path: string): string {
  const p = path.startsWith("/") ? path : `${Deno.cwd()}/${path}`;
  return p.replace(/\/+$/, "") || "/";
}

function parent(path: string): string {
  return path.slice(0, path.lastIndexOf("/")) || "/";
}
