/**
 * @module
 * kube-controller-manager (of tests/control_plane_build.ts's KUBERNETES_VERSION) for tests that need its controllers
 * beside tests/control_plane.ts's apiserver: `deno task conformance` (service-account tokens,
 * namespace deletion, CSR signing, the root CA publisher, bootstrap tokens) and the CSI tests
 * (the persistentvolume-binder and attachdetach controllers). It runs as kubeadm runs it on a
 * control-plane node, with the admin kubeconfig, leader election off, no serving port, and the
 * cluster CA for signing; its stdout and stderr go to `<dir>/kube-controller-manager.log`.
 *
 * Start-up does not wait for the controllers: kube-controller-manager has no readiness to poll
 * with `--secure-port=0`, and each controller starts once its informers have synced. Tests poll
 * for what a controller does. Flags that make controllers quicker in tests go in `extraArgs`,
 * e.g. {@link FAST_VOLUME_CONTROLLER_ARGS}.
 */

import { join } from "node:path";
import { type Child, type ControlPlane, spawnLogged } from "./control_plane.ts";
import { ensureKubeControllerManager, ensureKubeScheduler } from "./control_plane_build.ts";

/** The controllers conformance runs: every default one plus the bootstrap-token pair. */
export const DEFAULT_CONTROLLERS = ["*", "bootstrapsigner", "tokencleaner"] as const;

/**
 * Flags for quick volume controllers in tests: the attach/detach reconciler's sync period
 * (`--attach-detach-reconcile-sync-period`, upstream default 1m, which upstream refuses below
 * one second) and the PV/PVC binder's resync (`--pvclaimbinder-sync-period`, default 15s).
 */
export const FAST_VOLUME_CONTROLLER_ARGS = [
  "--attach-detach-reconcile-sync-period=1s",
  "--pvclaimbinder-sync-period=1s",
] as const;

/** Options of {@link startControllerManager}. */
export interface ControllerManagerOptions {
  readonly cp: ControlPlane;
  /** Where the log goes (and the process's HOME); must exist. */
  readonly dir: string;
  /** The program. @default ensureKubeControllerManager()'s, built once into the cache */
  readonly binary?: string;
  /** `--controllers`. @default {@link DEFAULT_CONTROLLERS} */
  readonly controllers?: readonly string[];
  /** More flags, after (so overriding) the harness's own. @default [] */
  readonly extraArgs?: readonly string[];
  /** Aborting it stops the controller manager. */
  readonly signal?: AbortSignal;
  /** Receives build progress lines when the binary is not given. */
  readonly log?: (line: string) => void;
  /** How long a stop waits after SIGTERM before it sends SIGKILL. @default 10000 */
  readonly stopTimeoutMs?: number;
}

/** A running kube-controller-manager. */
export interface ControllerManager extends Child, AsyncDisposable {
  /** Its stdout and stderr (appended across runs in the same `dir`). */
  readonly logFile: string;
}

/** kube-controller-manager's command line for {@link startControllerManager}. */
export function controllerManagerArgs(
  cp: Pick<ControlPlane, "adminKubeconfig" | "pki">,
  controllers: readonly string[] = DEFAULT_CONTROLLERS,
  extraArgs: readonly string[] = [],
): string[] {
  return [
    `--kubeconfig=${cp.adminKubeconfig}`,
    `--authentication-kubeconfig=${cp.adminKubeconfig}`,
    `--authorization-kubeconfig=${cp.adminKubeconfig}`,
    "--bind-address=127.0.0.1",
    "--secure-port=0",
    "--leader-elect=false",
    "--use-service-account-credentials=true",
    `--service-account-private-key-file=${cp.pki.serviceAccount.key}`,
    `--root-ca-file=${cp.pki.ca.cert}`,
    `--cluster-signing-cert-file=${cp.pki.ca.cert}`,
    `--cluster-signing-key-file=${cp.pki.ca.key}`,
    `--controllers=${controllers.join(",")}`,
    "--v=1",
    ...extraArgs,
  ];
}

/** Starts kube-controller-manager against `opts.cp`; see the module doc for what it waits for. */
export async function startControllerManager(
  opts: ControllerManagerOptions,
): Promise<ControllerManager> {
  opts.signal?.throwIfAborted();
  const binary = opts.binary ??
    await ensureKubeControllerManager({ signal: opts.signal, log: opts.log });
  const logFile = join(opts.dir, "kube-controller-manager.log");
  const child = await spawnLogged(
    binary,
    controllerManagerArgs(opts.cp, opts.controllers, opts.extraArgs),
    { logFile, dir: opts.dir, stopTimeoutMs: opts.stopTimeoutMs ?? 10_000 },
  );
  const onAbort = () => void child.stop();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  const stop = async () => {
    opts.signal?.removeEventListener("abort", onAbort);
    await child.stop();
  };
  return {
    pid: child.pid,
    get exited() {
      return child.exited;
    },
    status: child.status,
    logFile,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** Options of {@link startScheduler}. */
export interface SchedulerOptions {
  readonly cp: ControlPlane;
  /** Where `kube-scheduler.log` goes. */
  readonly dir: string;
  /** The program. @default built (or found in the cache) by ensureKubeScheduler */
  readonly binary?: string;
  /** klog verbosity. @default 1 */
  readonly verbosity?: number;
}

/**
 * Starts kube-scheduler as the control plane's admin, without leader election and its secure
 * port (nothing here scrapes it), logging to `<dir>/kube-scheduler.log`.
 */
export async function startScheduler(opts: SchedulerOptions): Promise<Child> {
  const kubeconfig = opts.cp.adminKubeconfig;
  return await spawnLogged(opts.binary ?? await ensureKubeScheduler(), [
    `--kubeconfig=${kubeconfig}`,
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    "--bind-address=127.0.0.1",
    "--secure-port=0",
    "--leader-elect=false",
    `--v=${opts.verbosity ?? 1}`,
  ], { logFile: join(opts.dir, "kube-scheduler.log"), dir: opts.dir, stopTimeoutMs: 10_000 });
}
