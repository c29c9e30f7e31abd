/**
 * @module
 * The answer to a node log query of services: which services log to the journal (journalctl
 * knows their `.service` unit), journalctl's output for those (stdout and stderr as they come),
 * and for the others the first of `<dir>/<svc>`, `<dir>/<svc>.log`, `<dir>/<svc>/<svc>.log`,
 * all within one 30 s deadline; failures are lines in the text, as upstream writes them after
 * the 200. Runs the journalctl program, so the agent's permission set lists it when
 * enableSystemLogQuery is on (privilege/permission_set.ts). Corresponds to upstream
 * `pkg/kubelet/kubelet_server_journal.go` (Copy, copyForBoot, splitNativeVsFileLoggers,
 * copyServiceLogs, copyFileLogs, heuristicsCopyFileLogs) and `kubelet_server_journal_linux.go`
 * (checkForNativeLogger).
 */

import { resolveInRoot, RootPathError } from "./_open_in_root.ts";
import { goList, hasOptions, journalctlArgs, NODE_LOG_DIR, type NodeLogQuery } from "./journal.ts";

/** The program that reads the journal. */
export const JOURNALCTL = "journalctl";
/** Upstream's deadline for one query, both the journal and the files. */
export const NODE_LOG_QUERY_TIMEOUT_MS = 30_000;

/** Options of {@link copyNodeLogQuery}. */
export interface CopyNodeLogQueryOptions {
  /** The journalctl program, a name looked up in PATH or a path. @default "journalctl" */
  journalctl?: string;
  /** Where the file heuristics look. @default "/var/log" */
  logDir?: string;
  /** The deadline of the whole answer. @default 30000 */
  timeoutMs?: number;
}

/** Writes one chunk of the answer; settles once it is handed on. */
export type WriteChunk = (chunk: Uint8Array) => Promise<void>;

const encoder = new TextEncoder();
const FILE_CHUNK = 64 * 1024;

/** Go's context error text once the deadline passed or the client went away. */
function contextError(signal: AbortSignal): string {
  return signal.reason instanceof DOMException && signal.reason.name === "TimeoutError"
    ? "context deadline exceeded"
    : "context canceled";
}

/** Runs `program args`, handing stdout and stderr to `onOutput`; its exit code. */
async function run(
  program: string,
  args: readonly string[],
  onOutput: WriteChunk,
  signal: AbortSignal,
): Promise<number> {
  signal.throwIfAborted();
  const child = new Deno.Command(program, {
    args: [...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const kill = () => {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
  };
  signal.addEventListener("abort", kill, { once: true });
  // One writer at a time, in the order the chunks arrive from either stream.
  let chain = Promise.resolve();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) {
      chain = chain.then(() => onOutput(chunk));
      await chain;
    }
  };
  try {
    const [status] = await Promise.all([
      child.status,
      pump(child.stdout).catch(kill),
      pump(child.stderr).catch(kill),
    ]);
    return status.code;
  } finally {
    signal.removeEventListener("abort", kill);
  }
}

/** Whether journalctl lists `<service>.service` among the journal's units (checkForNativeLogger). */
async function logsToJournal(
  journalctl: string,
  service: string,
  signal: AbortSignal,
): Promise<boolean> {
  const chunks: Uint8Array[] = [];
  try {
    const code = await run(journalctl, ["--field", "_SYSTEMD_UNIT"], (c) => {
      chunks.push(c);
      return Promise.resolve();
    }, signal);
    if (code !== 0) return false;
  } catch {
    // Not runnable: look for a file instead.
    return false;
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  chunks.reduce((at, c) => (all.set(c, at), at + c.length), 0);
  const text = new TextDecoder().decode(all);
  // A substring test, as upstream's: journalctl does not fail for a unit it does not know.
  return text.includes(`${service}.service`);
}

/** One candidate file of a service: copied, missing (try the next), or failed. */
async function copyFile(
  dir: string,
  name: string,
  write: WriteChunk,
  signal: AbortSignal,
): Promise<"copied" | "missing" | string> {
  let file: Deno.FsFile;
  try {
    const { path, info } = await resolveInRoot(dir, name, "openat");
    // A directory may be where the service's files are: look further.
    if (info.isDirectory) return "missing";
    file = await Deno.open(path, { read: true });
  } catch (e) {
    if (e instanceof RootPathError) return e.notExist ? "missing" : e.message;
    if (e instanceof Deno.errors.NotFound) return "missing";
    return e instanceof Error ? e.message : String(e);
  }
  try {
    const buf = new Uint8Array(FILE_CHUNK);
    for (;;) {
      if (signal.aborted) return contextError(signal);
      const n = await file.read(buf);
      if (n === null) return "copied";
      await write(buf.slice(0, n));
    }
  } catch (e) {
    return signal.aborted ? contextError(signal) : e instanceof Error ? e.message : String(e);
  } finally {
    file.close();
  }
}

/** A service's log file by upstream's heuristics (heuristicsCopyFileLogs). */
async function copyServiceFile(
  dir: string,
  service: string,
  write: WriteChunk,
  signal: AbortSignal,
): Promise<void> {
  let result = "missing";
  for (const name of [service, `${service}.log`, `${service}/${service}.log`]) {
    result = await copyFile(dir, name, write, signal);
    if (result !== "missing") break;
  }
  if (result === "missing") await write(encoder.encode(`\nlog not found for ${service}\n`));
  else if (result !== "copied") {
    await write(encoder.encode(`\nerror getting log for ${service}: ${result}\n`));
  }
}

/**
 * Writes the answer to a validated query of services (upstream nodeLogQuery.Copy): the journal's
 * entries of the services journalctl knows, then the files of the others (or, with options,
 * a line saying files take none). Stops at the deadline or when `signal` aborts.
 */
export async function copyNodeLogQuery(
  q: NodeLogQuery,
  write: WriteChunk,
  opts: CopyNodeLogQueryOptions = {},
  signal?: AbortSignal,
): Promise<void> {
  const deadline = AbortSignal.timeout(opts.timeoutMs ?? NODE_LOG_QUERY_TIMEOUT_MS);
  const ctx = signal ? AbortSignal.any([deadline, signal]) : deadline;
  const journalctl = opts.journalctl ?? JOURNALCTL;
  if (ctx.aborted) return;
  const native: string[] = [];
  const files: string[] = [];
  for (const service of q.services) {
    (await logsToJournal(journalctl, service, ctx) ? native : files).push(service);
  }
  if (native.length > 0) {
    try {
      // A non-zero exit has said why on stderr, which the answer holds.
      await run(journalctl, journalctlArgs(q, native), write, ctx);
    } catch {
      if ((q.boot ?? 0) === 0) {
        await write(encoder.encode("\nerror: journal output not available\n"));
      }
    }
  }
  if (files.length > 0 && hasOptions(q)) {
    await write(encoder.encode(
      `\noptions present and query resolved to log files for ${
        goList(files)
      }\ntry without specifying options\n`,
    ));
    return;
  }
  if (files.length === 0) return;
  if (ctx.aborted) {
    await write(encoder.encode(`\ncontext error: ${contextError(ctx)}\n`));
    return;
  }
  for (const service of files) {
    await copyServiceFile(opts.logDir ?? NODE_LOG_DIR, service, write, ctx);
  }
}
