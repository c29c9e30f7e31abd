/**
 * @module
 * ContainerLogManager: rotates the log files of running containers. Every
 * containerLogMonitorInterval it lists the runtime's containers and queues the running ones; up
 * to containerLogMaxWorkers workers take them one at a time. A container whose log
 * (`<podLogsDir>/<ns>_<name>_<uid>/<container>/<n>.log`) has reached containerLogMaxSize gets it
 * rotated: leftovers of an interrupted rotation go (`.tmp` files, plain files whose `.gz`
 * exists), the oldest rotated files go until containerLogMaxFiles-2 remain, those still plain
 * are gzipped to `<file>.gz`, and the live log is renamed to `<log>.<YYYYMMDD-hhmmss>` before CRI
 * ReopenContainerLog makes the runtime write a new one (renamed back if that fails, to retry
 * next round). So a container keeps at most containerLogMaxFiles files: the live log, the last
 * rotated one uncompressed (a reader may still be on it) and the rest compressed. A log the
 * runtime lost is reopened. A container's log path is fixed when it is created, so it is asked of
 * the runtime (ContainerStatus) the first round a container runs and kept while the container is
 * listed; upstream asks every round, one call per running container every 10 s. Talks to the CRI
 * runtime service and the filesystem. Corresponds to
 * upstream `pkg/kubelet/logs/container_log_manager.go`; removing a container's logs (upstream
 * Clean) is the container removal's part here (src/kuberuntime/kuberuntime_container.ts
 * removeContainer removes `<logPath>*`, without this manager's lock: a dead container's log is
 * not rotated any more).
 * The queue reports as upstream's workqueue `kubelet_log_rotate_manager` (workqueue_*).
 */

import { basename, dirname } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { parseQuantity } from "../util/quantity.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import type { QueueMetrics, WorkqueueMetrics } from "../metrics/workqueue_metrics.ts";
import { removeIfExists } from "../util/remove.ts";

/** Suffix of a compressed rotated log (upstream compressSuffix). */
export const COMPRESS_SUFFIX = ".gz";
/** Suffix of a file being compressed (upstream tmpSuffix). */
export const TMP_SUFFIX = ".tmp";

/** Options of {@link ContainerLogManager}. */
export interface ContainerLogManagerOptions {
  readonly runtime: Pick<
    RuntimeService,
    "listContainers" | "containerStatus" | "reopenContainerLog"
  >;
  /** containerLogMaxSize, a quantity; negative turns rotation off. @default "10Mi" */
  readonly maxSize: string;
  /** containerLogMaxFiles; must be above 1. @default 5 */
  readonly maxFiles: number;
  /** containerLogMaxWorkers. @default 1 */
  readonly maxWorkers: number;
  /** containerLogMonitorInterval, in ms. @default 10000 */
  readonly monitorIntervalMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Where the queue reports (workqueue_*{name="kubelet_log_rotate_manager"}). @default none */
  readonly workqueue?: Pick<WorkqueueMetrics, "queue">;
}

/** A rotation policy upstream's NewContainerLogManager refuses. */
export class ContainerLogPolicyError extends Error {
  override name = "ContainerLogPolicyError";
}

/** Rotates container logs; see the module documentation. */
export class ContainerLogManager {
  readonly #o: ContainerLogManagerOptions;
  /** Bytes; negative: rotation is off (upstream's stub manager). */
  readonly maxSize: number;
  /** Container ids waiting for a worker, each once (upstream's workqueue dedupes too). */
  readonly #queue = new Set<string>();
  /** Log paths of the containers listed last round, by id ("" when the runtime keeps none). */
  #logPaths = new Map<string, string>();
  #workers: Promise<void>[] = [];
  readonly #metrics: QueueMetrics | undefined;

  constructor(opts: ContainerLogManagerOptions) {
    if (opts.maxFiles <= 1) {
      throw new ContainerLogPolicyError(`invalid MaxFiles ${opts.maxFiles}, must be > 1`);
    }
    let size: number;
    try {
      size = parseQuantity(opts.maxSize);
    } catch (e) {
      throw new ContainerLogPolicyError(
        `failed to parse container log max size ${JSON.stringify(opts.maxSize)}: ${messageOf(e)}`,
      );
    }
    if (!Number.isSafeInteger(Math.ceil(size))) {
      throw new ContainerLogPolicyError(
        `failed to parse container log max size ${JSON.stringify(opts.maxSize)}: ` +
          "invalid max log size",
      );
    }
    this.#o = opts;
    this.maxSize = Math.ceil(size);
    // Upstream's stub manager (rotation off) has no queue.
    this.#metrics = this.maxSize < 0
      ? undefined
      : opts.workqueue?.queue("kubelet_log_rotate_manager");
  }

  /**
   * Queues the running containers every monitor interval, the first time at once, until `signal`
   * aborts; returns once the workers have finished their current container. Does nothing (and
   * says so once) when rotation is off.
   */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger, maxWorkers, monitorIntervalMs } = this.#o;
    if (this.maxSize < 0) {
      logger.info("Container log rotation is disabled: containerLogMaxSize is negative");
      return;
    }
    logger.info("Initializing container log rotate workers", {
      workers: maxWorkers,
      monitorPeriod: `${monitorIntervalMs / 1000}s`,
    });
    while (!signal.aborted) {
      try {
        await this.rotateLogs(signal);
      } catch (e) {
        if (signal.aborted) break;
        logger.error(e, "Failed to rotate container logs");
      }
      try {
        await clock.sleep(monitorIntervalMs, signal);
      } catch {
        break;
      }
    }
    await Promise.allSettled(this.#workers);
  }

  /** One round (upstream rotateLogs): queues every running container and starts workers. */
  async rotateLogs(signal?: AbortSignal): Promise<void> {
    this.#o.logger.v(4).info("Starting container log rotation sequence");
    let containers: api.Container[];
    try {
      containers = await this.#o.runtime.listContainers(undefined, signal);
    } catch (e) {
      throw new Error(`failed to list containers: ${messageOf(e)}`, { cause: e });
    }
    // An exited container writes nothing more: a fresh empty log would be of no use.
    const known = new Map<string, string>();
    for (const c of containers) {
      if (c.state !== api.ContainerState.CONTAINER_RUNNING) continue;
      if (!this.#queue.has(c.id)) this.#metrics?.add(c.id);
      this.#queue.add(c.id);
      const path = this.#logPaths.get(c.id);
      if (path !== undefined) known.set(c.id, path);
    }
    this.#logPaths = known;
    while (this.#workers.length < this.#o.maxWorkers && this.#queue.size > 0) {
      const worker: Promise<void> = this.#work(signal).finally(() => {
        this.#workers = this.#workers.filter((w) => w !== worker);
      });
      this.#workers.push(worker);
    }
  }

  /** Resolves when every queued container has been looked at (for tests). */
  async idle(): Promise<void> {
    while (this.#workers.length > 0) await Promise.allSettled(this.#workers);
  }

  async #work(signal?: AbortSignal): Promise<void> {
    for (const id of this.#queue) {
      if (signal?.aborted) return;
      this.#queue.delete(id);
      this.#metrics?.get(id);
      try {
        await this.#processContainer(id, signal);
      } finally {
        this.#metrics?.done(id);
      }
    }
  }

  /** upstream processContainer: reopens a lost log, rotates one at its size limit. */
  async #processContainer(id: string, signal?: AbortSignal): Promise<void> {
    const { runtime, logger } = this.#o;
    let path = this.#logPaths.get(id);
    if (path === undefined) {
      try {
        const res = await runtime.containerStatus(id, false, signal);
        if (!res.status) {
          logger.error(null, "Container status is nil", { containerID: id });
          return;
        }
        path = res.status.logPath;
      } catch (e) {
        logger.error(e, "Failed to get container status", { containerID: id });
        return;
      }
      this.#logPaths.set(id, path);
    }
    if (path === "") return; // the runtime keeps no log file for it
    let size: number;
    try {
      size = (await Deno.stat(path)).size;
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) {
        logger.error(e, "Failed to stat container log", { containerID: id, path });
        return;
      }
      try {
        await runtime.reopenContainerLog(id, signal);
        size = (await Deno.stat(path)).size;
      } catch (e) {
        logger.error(e, "Container log doesn't exist, reopen container log failed", {
          containerID: id,
          path,
        });
        return;
      }
    }
    if (size < this.maxSize) return;
    try {
      await this.#rotateLog(id, path, signal);
    } catch (e) {
      logger.error(e, "Failed to rotate log for container", {
        containerID: id,
        path,
        currentSize: size,
        maxSize: this.maxSize,
      });
    }
  }

  async #rotateLog(id: string, log: string, signal?: AbortSignal): Promise<void> {
    const rotated = await rotatedLogs(log);
    const { inuse, unused } = filterUnusedLogs(rotated);
    for (const l of unused) {
      await removeIfExists(l).catch((e) => {
        throw new Error(`failed to cleanup logs: failed to remove unused log ${q(l)}: ${e}`);
      });
    }
    // Newest last. The runtime starts a new file and the live one is renamed below: besides
    // those two, MaxFiles-2 rotated files may stay. Oldest first, not to break a reader.
    inuse.sort();
    const excess = Math.max(0, inuse.length - Math.max(0, this.#o.maxFiles - 2));
    for (const l of inuse.slice(0, excess)) {
      await removeIfExists(l).catch((e) => {
        throw new Error(`failed to remove excess logs: failed to remove old log ${q(l)}: ${e}`);
      });
    }
    for (const l of inuse.slice(excess)) {
      if (!l.endsWith(COMPRESS_SUFFIX)) await compressLog(l);
    }
    const target = `${log}.${timestampSuffix(new Date(this.#o.clock.now()))}`;
    try {
      await Deno.rename(log, target);
    } catch (e) {
      throw new Error(
        `failed to rotate log ${q(log)}: failed to rotate log ${q(log)} to ${q(target)}: ${
          messageOf(e)
        }`,
      );
    }
    try {
      await this.#o.runtime.reopenContainerLog(id, signal);
    } catch (e) {
      // Put it back so the next round tries again; a restart right here would lose it.
      await Deno.rename(target, log).catch((err) =>
        this.#o.logger.error(err, "Failed to rename rotated log", {
          rotatedLog: target,
          newLog: log,
          containerID: id,
        })
      );
      throw new Error(
        `failed to rotate log ${q(log)}: failed to reopen container log ${q(id)}: ${messageOf(e)}`,
      );
    }
  }
}

/**
 * Every file of a container's log, oldest first, ending with `log` itself (upstream GetAllLogs):
 * what a reader of all of it opens, leaving out leftovers of an interrupted rotation.
 */
export async function getAllLogs(log: string): Promise<string[]> {
  const { inuse } = filterUnusedLogs(await rotatedLogs(log));
  return [...inuse.sort(), log];
}

/** The files named `<log>.*` beside `log` (upstream's `filepath.Glob(log + ".*")`). */
async function rotatedLogs(log: string): Promise<string[]> {
  const dir = dirname(log);
  const prefix = `${basename(log)}.`;
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) {
      if (e.name.startsWith(prefix)) out.push(`${dir}/${e.name}`);
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) {
      throw new Error(`failed to list all log files with pattern ${q(`${log}.*`)}: ${e}`);
    }
  }
  return out;
}

/**
 * Splits rotated files into those in use and leftovers (upstream filterUnusedLogs): a `.tmp`
 * file, or a plain file whose compressed copy exists, is a leftover.
 */
export function filterUnusedLogs(logs: readonly string[]): { inuse: string[]; unused: string[] } {
  const all = new Set(logs);
  const inuse: string[] = [];
  const unused: string[] = [];
  for (const l of logs) {
    const used = !l.endsWith(TMP_SUFFIX) &&
      (l.endsWith(COMPRESS_SUFFIX) || !all.has(l + COMPRESS_SUFFIX));
    (used ? inuse : unused).push(l);
  }
  return { inuse, unused };
}

/**
 * Gzips `log` into `<log>.tmp`, renames that to `<log>.gz` once complete, then removes `log`
 * (upstream compressLog). The temporary file goes in any case.
 */
export async function compressLog(log: string): Promise<void> {
  const tmp = log + TMP_SUFFIX;
  try {
    const info = await Deno.stat(log).catch((e) => {
      throw new Error(`failed to stat log file: ${messageOf(e)}`);
    });
    const src = await Deno.open(log).catch((e) => {
      throw new Error(`failed to open log ${q(log)}: ${messageOf(e)}`);
    });
    let dst: Deno.FsFile;
    try {
      dst = await Deno.open(tmp, {
        write: true,
        create: true,
        truncate: true,
        mode: info.mode ?? 0o640,
      });
    } catch (e) {
      src.close();
      throw new Error(`failed to create temporary log ${q(tmp)}: ${messageOf(e)}`);
    }
    try {
      // pipeTo closes both files, whether it completes or fails.
      await src.readable.pipeThrough(new CompressionStream("gzip")).pipeTo(dst.writable);
    } catch (e) {
      throw new Error(`failed to compress ${q(log)} to ${q(tmp)}: ${messageOf(e)}`);
    }
    const gz = log + COMPRESS_SUFFIX;
    await Deno.rename(tmp, gz).catch((e) => {
      throw new Error(`failed to rename ${q(tmp)} to ${q(gz)}: ${messageOf(e)}`);
    });
    await Deno.remove(log).catch((e) => {
      throw new Error(`failed to remove log ${q(log)} after compress: ${messageOf(e)}`);
    });
  } catch (e) {
    throw new Error(`failed to compress log ${q(log)}: ${messageOf(e)}`, { cause: e });
  } finally {
    await Deno.remove(tmp).catch(() => {});
  }
}

/** Go's `20060102-150405` layout in local time (upstream timestampFormat). */
export function timestampSuffix(d: Date): string {
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-` +
    `${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

function q(s: string): string {
  return JSON.stringify(s);
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
