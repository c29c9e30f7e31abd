/**
 * @module
 * A private Kubernetes control plane for integration tests: one etcd and one kube-apiserver on
 * 127.0.0.1 with free ports, a per-run PKI (tests/pki.ts), and kubeconfigs for the admin and
 * for each node, all under one directory. No scheduler and no controller manager run: tests
 * bind pods to nodes themselves (`spec.nodeName`) and create what controllers would (the
 * `default` service account, for example).
 *
 * It owns the two processes and the files under `dir`; it talks to them over loopback only
 * (etcd's `/health`, the apiserver's `/readyz` and namespaces with the admin certificate) and
 * runs `kubectl` for tests. The apiserver runs with the authorization and admission a kubeadm
 * cluster has for nodes (`--authorization-mode=Node,RBAC`, `NodeRestriction`), so a kubelet's
 * client certificate gets exactly a real node's rights. It stands in for the cluster that
 * upstream's node e2e tests start (`test/e2e_node/services`: etcd plus apiserver, in process).
 *
 * The apiserver can be stopped and started again on the same port against the same etcd, to
 * test how the kubelet rides out an apiserver outage.
 */

import { ensureControlPlaneBinaries } from "./control_plane_build.ts";
import { createPki, type Pki, writeKubeconfig } from "./pki.ts";
import { freePort, logTail, signalChild } from "./child_process.ts";

/** Paths of the programs, as tests/control_plane_build.ts provides them. */
type Binaries = Awaited<ReturnType<typeof ensureControlPlaneBinaries>>;

/** The first address of {@link SERVICE_CLUSTER_IP_RANGE}, in the apiserver's certificate. */
export const SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/12";

/** Namespaces the apiserver creates itself; start-up waits for all of them. */
export const SYSTEM_NAMESPACES = ["default", "kube-system", "kube-public", "kube-node-lease"];

/** Options for {@link startControlPlane}. */
export interface ControlPlaneOptions {
  /** Directory for the PKI, kubeconfigs, etcd's data and the log files; created. */
  readonly dir: string;
  /** Nodes that get a client certificate and a kubeconfig. @default [] */
  readonly nodeNames?: readonly string[];
  /** Aborting it stops the control plane (and aborts a start that is still waiting). */
  readonly signal?: AbortSignal;
  /** Receives progress lines: what starts, and how long it took to be ready. */
  readonly log?: (message: string) => void;
  /** Programs to run. @default the result of ensureControlPlaneBinaries() */
  readonly binaries?: Binaries;
  /** Extra kube-apiserver flags, after (so overriding) the harness's own. @default [] */
  readonly apiserverArgs?: readonly string[];
  /**
   * More SANs on the apiserver's serving certificate (tests/pki.ts), for an apiserver reached
   * at another address than 127.0.0.1 (with `--bind-address` in `apiserverArgs`). @default []
   */
  readonly apiserverSans?: readonly string[];
  /**
   * How long etcd, then the apiserver (each) may take to be ready.
   * @default 60000
   */
  readonly startTimeoutMs?: number;
  /**
   * How long a stop waits after SIGTERM before it sends SIGKILL.
   * @default 10000
   */
  readonly stopTimeoutMs?: number;
}

/** What {@link ControlPlane.kubectl} returns. */
export interface KubectlResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Options of one {@link ControlPlane.kubectl} call. */
export interface KubectlOptions {
  /** Text for kubectl's stdin (`create -f -`). */
  readonly stdin?: string;
  /** A kubeconfig other than the admin's, e.g. `nodeKubeconfig("node-a")`. */
  readonly kubeconfig?: string;
  readonly signal?: AbortSignal;
  /** @default 60000 */
  readonly timeoutMs?: number;
  /**
   * Runs kubectl on a terminal (util-linux `script` gives it a pseudo-terminal and types `stdin`
   * into it), as `kubectl exec -it` and `kubectl attach -it` need; stdout is the terminal's
   * output (input echoed, CRLF line ends) and the exit code kubectl's.
   */
  readonly tty?: boolean;
}

/** A running control plane started by {@link startControlPlane}. */
export interface ControlPlane extends AsyncDisposable {
  /** The apiserver: `https://127.0.0.1:<port>`; the same after startApiserver(). */
  readonly server: string;
  /** etcd's client URL. */
  readonly etcdUrl: string;
  readonly pki: Pki;
  /** Kubeconfig of kubernetes-admin (system:masters), with file paths. */
  readonly adminKubeconfig: string;
  /** Kubeconfig (file paths) of `system:node:<name>`; throws for a name not in `nodeNames`. */
  nodeKubeconfig(name: string): string;
  /** Runs kubectl with `--kubeconfig <admin>` (or `opts.kubeconfig`); never throws on exit code. */
  kubectl(args: readonly string[], opts?: KubectlOptions): Promise<KubectlResult>;
  /** Process ids of what runs now. */
  pids(): { etcd?: number; apiserver?: number };
  /** Stops the apiserver only (an outage); etcd keeps the cluster's state. Idempotent. */
  stopApiserver(): Promise<void>;
  /** Starts the apiserver again on the same port and waits until it is ready. */
  startApiserver(): Promise<void>;
  /** Stops the apiserver, then etcd: SIGTERM, then SIGKILL after a bound. Idempotent. */
  stop(): Promise<void>;
  /** Log files (stdout and stderr of each process, appended across restarts). */
  readonly logs: { readonly etcd: string; readonly apiserver: string };
}

/** The control plane did not come up, or the environment cannot run it. */
export class ControlPlaneError extends Error {
  override name = "ControlPlaneError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const POLL_INTERVAL_MS = 100;
const PORT_ATTEMPTS = 3;
const LOG_TAIL_LINES = 40;

/** Starts etcd and kube-apiserver under `opts.dir` and waits until the apiserver is ready. */
export async function startControlPlane(opts: ControlPlaneOptions): Promise<ControlPlane> {
  opts.signal?.throwIfAborted();
  const started = performance.now();
  const log = opts.log ?? (() => {});
  const dir = absolute(opts.dir);
  const nodeNames = opts.nodeNames ?? [];
  const startTimeoutMs = opts.startTimeoutMs ?? 60_000;
  const stopTimeoutMs = opts.stopTimeoutMs ?? 10_000;
  const logs = { etcd: `${dir}/etcd.log`, apiserver: `${dir}/kube-apiserver.log` };
  await Deno.mkdir(dir, { recursive: true });

  const binaries = opts.binaries ?? await ensureControlPlaneBinaries();
  const pki = await createPki(`${dir}/pki`, {
    nodeNames,
    apiserverSans: opts.apiserverSans,
    signal: opts.signal,
  });
  log(`control plane: PKI ready after ${elapsed(started)}`);

  let etcd: Child | undefined;
  let apiserver: Child | undefined;
  let etcdUrl = "";
  let port = 0;
  let stopping: Promise<void> | undefined;

  const startEtcd = async () => {
    for (let attempt = 1;; attempt++) {
      // A data dir from a failed attempt would remember that attempt's peer URL.
      await Deno.remove(`${dir}/etcd`, { recursive: true }).catch(() => {});
      const clientPort = freePort();
      const peerPort = freePort();
      etcdUrl = `http://127.0.0.1:${clientPort}`;
      const peerUrl = `http://127.0.0.1:${peerPort}`;
      etcd = await spawnLogged(binaries.etcd, [
        "--name=kubelet-ts",
        `--data-dir=${dir}/etcd`,
        `--listen-client-urls=${etcdUrl}`,
        `--advertise-client-urls=${etcdUrl}`,
        `--listen-peer-urls=${peerUrl}`,
        `--initial-advertise-peer-urls=${peerUrl}`,
        `--initial-cluster=kubelet-ts=${peerUrl}`,
        "--initial-cluster-state=new",
      ], { logFile: logs.etcd, dir, stopTimeoutMs });
      try {
        await waitUntil({
          what: `etcd (${etcdUrl})`,
          child: etcd,
          logFile: logs.etcd,
          timeoutMs: startTimeoutMs,
          signal: opts.signal,
          ready: () => etcdHealthy(etcdUrl),
        });
        return;
      } catch (err) {
        await etcd.stop();
        if (!(err instanceof PortTakenError) || attempt >= PORT_ATTEMPTS) throw err;
      }
    }
  };

  const apiserverFlags = () => [
    "--advertise-address=127.0.0.1",
    "--bind-address=127.0.0.1",
    `--secure-port=${port}`,
    `--cert-dir=${dir}/apiserver`,
    `--etcd-servers=${etcdUrl}`,
    `--tls-cert-file=${pki.apiserver.cert}`,
    `--tls-private-key-file=${pki.apiserver.key}`,
    `--client-ca-file=${pki.ca.cert}`,
    `--kubelet-client-certificate=${pki.apiserverKubeletClient.cert}`,
    `--kubelet-client-key=${pki.apiserverKubeletClient.key}`,
    // No --kubelet-certificate-authority, as in kubeadm: a kubelet's self-signed serving
    // certificate must still do for logs and exec. Tests that check it pass the flag.
    "--authorization-mode=Node,RBAC",
    // Node names do not resolve here: the apiserver reaches kubelets at their InternalIP.
    "--kubelet-preferred-address-types=InternalIP",
    "--enable-admission-plugins=NodeRestriction",
    `--service-cluster-ip-range=${SERVICE_CLUSTER_IP_RANGE}`,
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    `--service-account-key-file=${pki.serviceAccount.pub}`,
    `--service-account-signing-key-file=${pki.serviceAccount.key}`,
    "--allow-privileged=true",
    // The endpoint reconciler would write 127.0.0.1 into the `kubernetes` Endpoints, which
    // validation rejects (loopback), and log that error every 10 s.
    "--endpoint-reconciler-type=none",
    "--v=1",
    ...(opts.apiserverArgs ?? []),
  ];

  /** Starts kube-apiserver (known to stop() at once) and waits until it is ready. */
  const launchApiserver = async (): Promise<void> => {
    const child = await spawnLogged(binaries.kubeApiserver, apiserverFlags(), {
      logFile: logs.apiserver,
      dir,
      stopTimeoutMs,
    });
    // Stopped before etcd even while it starts: without etcd its shutdown waits for requests
    // to time out.
    apiserver = child;
    try {
      await waitUntil({
        what: `kube-apiserver (${server()})`,
        child,
        logFile: logs.apiserver,
        timeoutMs: startTimeoutMs,
        signal: opts.signal,
        ready: () => apiserverReady(server(), pki),
      });
    } catch (err) {
      await child.stop();
      throw err;
    }
  };
  const server = () => `https://127.0.0.1:${port}`;

  const startFirstApiserver = async () => {
    for (let attempt = 1;; attempt++) {
      port = freePort();
      try {
        await launchApiserver();
        return;
      } catch (err) {
        if (!(err instanceof PortTakenError) || attempt >= PORT_ATTEMPTS) throw err;
      }
    }
  };

  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      opts.signal?.removeEventListener("abort", onAbort);
      await apiserver?.stop();
      await etcd?.stop();
    })();
    return stopping;
  };
  const onAbort = () => void stop();
  opts.signal?.addEventListener("abort", onAbort, { once: true });

  const kubeconfig = (user: string, pair: { cert: string; key: string }, path: string) =>
    writeKubeconfig({
      path,
      server: server(),
      caFile: pki.ca.cert,
      certFile: pair.cert,
      keyFile: pair.key,
      user,
    });
  let adminKubeconfig = "";
  const nodeKubeconfigs = new Map<string, string>();
  try {
    const etcdStarted = performance.now();
    await startEtcd();
    log(`control plane: etcd ready at ${etcdUrl} after ${elapsed(etcdStarted)}`);
    const apiserverStarted = performance.now();
    await startFirstApiserver();
    log(`control plane: kube-apiserver ready at ${server()} after ${elapsed(apiserverStarted)}`);
    adminKubeconfig = await kubeconfig("kubernetes-admin", pki.admin, `${dir}/admin.conf`);
    for (const [name, pair] of pki.nodes) {
      nodeKubeconfigs.set(
        name,
        await kubeconfig(`system:node:${name}`, pair, `${dir}/nodes/${name}/kubelet.conf`),
      );
    }
  } catch (err) {
    await stop();
    if (opts.signal?.aborted) throw opts.signal.reason;
    throw err;
  }
  log(`control plane: ready after ${elapsed(started)} (${server()}, logs in ${dir})`);

  let apiserverOp = Promise.resolve();
  const serialized = (fn: () => Promise<void>): Promise<void> => {
    const next = apiserverOp.then(fn);
    apiserverOp = next.catch(() => {});
    return next;
  };

  return {
    server: server(),
    etcdUrl,
    pki,
    adminKubeconfig,
    logs,
    nodeKubeconfig(name) {
      const path = nodeKubeconfigs.get(name);
      if (path === undefined) {
        throw new ControlPlaneError(
          `No kubeconfig for node '${name}': the control plane was started with nodeNames ` +
            `[${[...nodeKubeconfigs.keys()].join(", ")}]`,
        );
      }
      return path;
    },
    kubectl: (args, kopts = {}) =>
      runKubectl(binaries.kubectl, dir, kopts.kubeconfig ?? adminKubeconfig, args, kopts),
    pids: () => ({
      etcd: etcd?.exited === false ? etcd.pid : undefined,
      apiserver: apiserver?.exited === false ? apiserver.pid : undefined,
    }),
    stopApiserver: () =>
      serialized(async () => {
        if (!apiserver || apiserver.exited) return;
        await apiserver.stop();
        log(`control plane: kube-apiserver stopped`);
      }),
    startApiserver: () =>
      serialized(async () => {
        if (stopping) {
          throw new ControlPlaneError("Cannot start kube-apiserver: the control plane was stopped");
        }
        if (apiserver && !apiserver.exited) return;
        const t = performance.now();
        try {
          await launchApiserver();
        } catch (err) {
          if (err instanceof PortTakenError) {
            throw new ControlPlaneError(
              `Cannot start kube-apiserver again: port ${port} was taken while it was stopped`,
              { cause: err },
            );
          }
          throw err;
        }
        log(`control plane: kube-apiserver ready again at ${server()} after ${elapsed(t)}`);
      }),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** Prints the last lines of each log (with its path) to stderr when `fn` throws, and rethrows. */
export async function dumpLogsOnFailure<T>(
  target: { readonly logs: Readonly<Record<string, string>> },
  fn: () => Promise<T>,
  lines = 80,
): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    console.error(await logTails(target.logs, lines));
    throw err;
  }
}

/** The last `lines` lines of each log file, each under a header naming the file. */
export async function logTails(
  logs: Readonly<Record<string, string>>,
  lines = 80,
): Promise<string> {
  const parts = await Promise.all(
    Object.entries(logs).map(async ([name, file]) =>
      `--- ${name}: last ${lines} lines of ${file} ---\n${await logTail(file, lines)}`
    ),
  );
  return parts.join("\n");
}

/** A child process whose stdout and stderr go to a log file. */
export interface Child {
  readonly pid: number;
  readonly exited: boolean;
  readonly status: Promise<Deno.CommandStatus>;
  /** SIGTERM, then SIGKILL after the bound; waits for the exit and the log copy. Idempotent. */
  stop(): Promise<void>;
}

export async function spawnLogged(
  program: string,
  args: readonly string[],
  opts: { logFile: string; dir: string; stopTimeoutMs: number },
): Promise<Child> {
  const file = await Deno.open(opts.logFile, { create: true, append: true });
  // Straight file.write() calls, one at a time: FsFile.writable buffers until it is closed
  // (Deno 2.9), and a log that shows nothing while the process runs is no use to a test.
  let written = Promise.resolve();
  const append = (chunk: Uint8Array) => {
    written = written.then(() => writeAll(file, chunk)).catch(() => {});
    return written;
  };
  await append(
    new TextEncoder().encode(`--- ${new Date().toISOString()} ${program} ${args.join(" ")}\n`),
  );
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(program, {
      args: [...args],
      // ETCD_* and KUBE_* variables would change what runs; HOME keeps caches under `dir`.
      clearEnv: true,
      env: { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: opts.dir },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    file.close();
    throw new ControlPlaneError(`Cannot start ${program}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const copy = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) await append(chunk);
  };
  const copied = Promise.allSettled([copy(child.stdout), copy(child.stderr)]).then(async () => {
    await written;
    file.close();
  });
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });
  let stopping: Promise<void> | undefined;
  return {
    pid: child.pid,
    get exited() {
      return exited;
    },
    status,
    stop() {
      stopping ??= (async () => {
        if (!exited) {
          signalChild(child, "SIGTERM");
          const timer = setTimeout(() => signalChild(child, "SIGKILL"), opts.stopTimeoutMs);
          try {
            await status;
          } finally {
            clearTimeout(timer);
          }
        }
        await copied;
      })();
      return stopping;
    },
  };
}

async function writeAll(file: Deno.FsFile, data: Uint8Array): Promise<void> {
  for (let off = 0; off < data.length;) off += await file.write(data.subarray(off));
}

/** The port was taken between choosing it and the process binding it. */
class PortTakenError extends ControlPlaneError {
  override name = "PortTakenError";
}

/** Polls `ready` until it holds; throws with the log's tail when the process exits or time runs out. */
async function waitUntil(args: {
  what: string;
  child: Child;
  logFile: string;
  timeoutMs: number;
  signal?: AbortSignal;
  ready: () => Promise<boolean>;
}): Promise<void> {
  const deadline = Date.now() + args.timeoutMs;
  let problem: string | undefined;
  while (true) {
    args.signal?.throwIfAborted();
    if (args.child.exited) {
      const s = await args.child.status;
      await args.child.stop(); // waits for the log copy
      const tail = await logTail(args.logFile, LOG_TAIL_LINES);
      const Err = /address already in use/.test(tail) ? PortTakenError : ControlPlaneError;
      throw new Err(
        `${args.what} exited during start-up (code ${s.code}${s.signal ? `, ${s.signal}` : ""})` +
          `\n--- last lines of ${args.logFile} ---\n${tail}`,
      );
    }
    if (await args.ready()) return;
    if (Date.now() >= deadline) {
      problem = `${args.what} was not ready within ${args.timeoutMs} ms`;
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
  const tail = await logTail(args.logFile, LOG_TAIL_LINES);
  throw new ControlPlaneError(`${problem}\n--- last lines of ${args.logFile} ---\n${tail}`);
}

async function etcdHealthy(url: string): Promise<boolean> {
  try {
    const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
    const body = await res.text();
    return res.ok && /"health":\s*"true"/.test(body);
  } catch {
    return false;
  }
}

/** `/readyz` answers 200 and every namespace of {@link SYSTEM_NAMESPACES} exists. */
async function apiserverReady(server: string, pki: Pki): Promise<boolean> {
  const [caCert, cert, key] = await Promise.all(
    [pki.ca.cert, pki.admin.cert, pki.admin.key].map((f) => Deno.readTextFile(f)),
  );
  // A new client per poll: a pooled connection would outlive an apiserver restart.
  using client = Deno.createHttpClient({
    caCerts: [caCert ?? ""],
    cert: cert ?? "",
    key: key ?? "",
  });
  const ok = async (path: string) => {
    try {
      const res = await fetch(`${server}${path}`, { client, signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      return res.status === 200;
    } catch {
      return false;
    }
  };
  if (!(await ok("/readyz"))) return false;
  const found = await Promise.all(SYSTEM_NAMESPACES.map((ns) => ok(`/api/v1/namespaces/${ns}`)));
  return found.every(Boolean);
}

async function runKubectl(
  kubectl: string,
  dir: string,
  kubeconfig: string,
  args: readonly string[],
  opts: KubectlOptions,
): Promise<KubectlResult> {
  const timeout = AbortSignal.timeout(opts.timeoutMs ?? 60_000);
  const signal = opts.signal ? AbortSignal.any([timeout, opts.signal]) : timeout;
  const argv = [kubectl, "--kubeconfig", kubeconfig, ...args];
  const quote = (a: string) => `'${a.replaceAll("'", `'\\''`)}'`;
  const child = new Deno.Command(opts.tty ? "script" : kubectl, {
    args: opts.tty ? ["-qefc", argv.map(quote).join(" "), "/dev/null"] : argv.slice(1),
    clearEnv: true,
    // HOME under `dir`: kubectl's discovery cache goes to $HOME/.kube/cache.
    env: { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: dir },
    stdin: opts.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).spawn();
  if (opts.stdin !== undefined) {
    const writer = child.stdin.getWriter();
    try {
      await writer.write(new TextEncoder().encode(opts.stdin));
      await writer.close();
    } catch {
      // kubectl exited without reading all of it; its exit code and stderr say why
    }
  }
  const out = await child.output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

function elapsed(since: number): string {
  return `${Math.round(performance.now() - since)} ms`;
}

function absolute(path: string): string {
  const p = path.startsWith("/") ? path : `${Deno.cwd()}/${path}`;
  return p.replace(/\/+$/, "") || "/";
}
