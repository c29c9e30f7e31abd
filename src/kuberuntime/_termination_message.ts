/**
 * @module
 * The termination message of an exited container: the file the kubelet mounted at its
 * terminationMessagePath, or with `FallbackToLogsOnError` and a failed container whose file is
 * empty, the tail of its CRI log. Private to `kuberuntime_manager.ts`, which re-exports
 * {@link readTerminationMessage}. Corresponds to upstream `getTerminationMessage`,
 * `readLastStringFromContainerLogs` and the termination part of `convertToKubeContainerStatus`
 * (kuberuntime_container.go), `pkg/util/tail` and the CRI-format reader of
 * `kuberuntime/logs/logs.go`.
 */

import { concatBytes } from "../util/bytes.ts";
import * as api from "../../proto/runtime/v1/api.ts";
import { getContainerInfoFromAnnotations } from "./labels.ts";
import { errorText } from "../util/errors.ts";

/** Upstream MaxContainerTerminationMessageLength. */
export const MAX_TERMINATION_MESSAGE_LENGTH = 1024 * 4;
/** Upstream MaxContainerTerminationMessageLogLength. */
export const MAX_TERMINATION_MESSAGE_LOG_LENGTH = 1024 * 2;
/** Upstream MaxContainerTerminationMessageLogLines. */
export const MAX_TERMINATION_MESSAGE_LOG_LINES = 80;

const BLOCK = 64 * 1024;
const NL = 0x0a;

/**
 * The termination message of an exited container, or undefined when it has none (not exited,
 * no message path, or an empty message).
 */
export async function readTerminationMessage(
  status: api.ContainerStatus,
  signal?: AbortSignal,
): Promise<string | undefined> {
  if (status.state !== api.ContainerState.CONTAINER_EXITED) return undefined;
  const { info } = getContainerInfoFromAnnotations(status.annotations);
  // A container that could not even start has no logs to fall back to.
  const fallbackToLogs = info.terminationMessagePolicy === "FallbackToLogsOnError" &&
    status.exitCode !== 0 && status.reason !== "ContainerCannotRun";
  let message = "";
  let checkLogs = fallbackToLogs;
  if (info.terminationMessagePath !== "") {
    const mount = status.mounts.find((m) => m.containerPath === info.terminationMessagePath);
    if (mount) {
      try {
        const data = await readAtMost(mount.hostPath, MAX_TERMINATION_MESSAGE_LENGTH);
        message = new TextDecoder().decode(data);
        checkLogs = fallbackToLogs && data.length === 0;
      } catch (e) {
        if (!(e instanceof Deno.errors.NotFound)) {
          message = `Error on reading termination log ${mount.hostPath}: ${errorText(e)}`;
          checkLogs = false;
        }
      }
    }
  }
  signal?.throwIfAborted();
  if (checkLogs) message = await readLastStringFromLogs(status.logPath);
  return message === "" ? undefined : message;
}

/** tail.ReadAtMost: the last `max` bytes of the file. */
async function readAtMost(path: string, max: number): Promise<Uint8Array> {
  using f = await Deno.open(path, { read: true });
  const size = (await f.stat()).size;
  const n = Math.min(size, max);
  if (n === 0) return new Uint8Array();
  await f.seek(size - n, Deno.SeekMode.Start);
  return await readFull(f, n);
}

async function readFull(f: Deno.FsFile, n: number): Promise<Uint8Array> {
  const buf = new Uint8Array(n);
  let off = 0;
  while (off < n) {
    const got = await f.read(buf.subarray(off));
    if (got === null) break;
    off += got;
  }
  return buf.subarray(0, off);
}

/**
 * The contents of the last 80 lines of a CRI log (stdout and stderr together), cut to their
 * last 2048 bytes, as upstream reads it into a circular buffer.
 */
async function readLastStringFromLogs(path: string): Promise<string> {
  let raw: Uint8Array;
  try {
    raw = await tailLines(path, MAX_TERMINATION_MESSAGE_LOG_LINES);
  } catch (e) {
    return `Error on reading termination message from logs: failed to open log file ${
      JSON.stringify(path)
    }: ${errorText(e)}`;
  }
  const chunks: Uint8Array[] = [];
  let start = 0;
  while (start < raw.length) {
    let end = raw.indexOf(NL, start);
    end = end < 0 ? raw.length : end + 1;
    const content = parseCriLine(raw.subarray(start, end));
    if (content) chunks.push(content);
    start = end;
  }
  let total = 0;
  for (const c of chunks) total += c.length;
  const all = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.length;
  }
  return new TextDecoder().decode(
    all.subarray(Math.max(0, total - MAX_TERMINATION_MESSAGE_LOG_LENGTH)),
  );
}

/**
 * The bytes from the start of the last `n` complete lines to the end (tail.FindTailLineStartIndex:
 * an unterminated last line is not counted).
 */
async function tailLines(path: string, n: number): Promise<Uint8Array> {
  using f = await Deno.open(path, { read: true });
  const size = (await f.stat()).size;
  let left = size;
  let count = 0;
  const blocks: Uint8Array[] = [];
  while (left > 0 && count <= n) {
    const from = Math.max(0, left - BLOCK);
    await f.seek(from, Deno.SeekMode.Start);
    const block = await readFull(f, left - from);
    for (const b of block) if (b === NL) count++;
    blocks.unshift(block);
    left = from;
  }
  let data = concatBytes(blocks);
  for (; count > n; count--) data = data.subarray(data.indexOf(NL) + 1);
  return data;
}

const SPACE = 0x20;
const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

/**
 * One CRI log line (`<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>`): its content, with
 * the newline a full line ends with and without the one a partial line was split at; undefined
 * for a line that does not parse, which upstream logs and skips.
 */
function parseCriLine(line: Uint8Array): Uint8Array | undefined {
  const ts = line.indexOf(SPACE);
  if (ts < 0) return undefined;
  const dec = new TextDecoder();
  if (!TIMESTAMP.test(dec.decode(line.subarray(0, ts)))) return undefined;
  const st = line.indexOf(SPACE, ts + 1);
  if (st < 0) return undefined;
  const stream = dec.decode(line.subarray(ts + 1, st));
  if (stream !== "stdout" && stream !== "stderr") return undefined;
  const tg = line.indexOf(SPACE, st + 1);
  if (tg < 0) return undefined;
  const tag = dec.decode(line.subarray(st + 1, tg)).split(":")[0];
  let end = line.length;
  if (tag === "P" && end > 0 && line[end - 1] === NL) end--;
  return line.subarray(tg + 1, end);
}
