/**
 * @module
 * Reading container log files as the runtime writes them (the CRI log format,
 * `<RFC3339Nano time> <stdout|stderr> <P|F>[:tags] <content>`, and the Docker JSON format as a
 * fallback chosen from the first line), applying the pod log options: tail lines (found by
 * reading backwards in blocks, so a large file is never read whole), a byte limit, a since time,
 * timestamps, and follow. Following polls the file (and wakes early on inotify events), reopens
 * the path when log rotation renamed the file away (draining the old file first), starts over
 * when the file was truncated, and ends once the container has exited and the file is drained.
 * Partial lines (P) are written without their line end, so the reader sees them joined up to the
 * final fragment (F), as upstream writes them. Talks only to the file system; the caller says
 * whether the container is done. Corresponds to upstream `pkg/kubelet/kuberuntime/logs/logs.go`
 * (ReadLogs, parseCRILog, parseDockerJSONLog, logWriter) and `pkg/util/tail/tail.go`.
 */

import { dirname } from "node:path";
import { type Clock, realClock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";

/** The pod log options as the log reader takes them (upstream logs.LogOptions). */
export interface LogOptions {
  /** Keep following the file until the container exits. @default false */
  follow?: boolean;
  /** Only the last N lines of the file; negative or unset for all. @default all */
  tailLines?: number;
  /** Stop after this many bytes of output; unset for no limit. @default no limit */
  limitBytes?: number;
  /** Skip lines logged before this time. @default none */
  since?: Date;
  /** Prefix each line with its time (RFC3339 with nine fraction digits). @default false */
  timestamps?: boolean;
}

/** What {@link readLogs} takes besides the log options. */
export interface ReadLogsOptions extends LogOptions {
  /** Polled while following: true once the container has exited, so follow ends. @default never */
  containerDone?: () => Promise<boolean>;
  /** How often to look for new data while following (upstream logForceCheckPeriod). @default 1000 */
  pollIntervalMs?: number;
  /** Wakes the poll early on file-system (inotify) events in the log's directory. @default true */
  watch?: boolean;
  /** The clock the poll sleeps on. @default realClock */
  clock?: Clock;
  /** For upstream's log lines about skipped and incomplete lines. @default none */
  logger?: Logger;
  /** Longest line kept in memory; a longer one is skipped and logged. @default 4 MiB */
  maxLineBytes?: number;
}

/** One parsed log line. */
export interface LogLine {
  /** When it was logged (millisecond precision; see `nanos`). */
  time: Date;
  stream: "stdout" | "stderr";
  /** A P fragment: the content continues in the next line. */
  partial: boolean;
  /** The content, with its line end unless partial. */
  content: Uint8Array;
  /** When it was logged, nanoseconds since the epoch. */
  nanos: bigint;
  /** The time as upstream prints it with timestamps on (RFC3339NanoFixed). */
  timestamp: string;
}

/** A log file could not be read (open, tail, read or parse-format failures). */
export class LogReadError extends Error {
  override name = "LogReadError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const NL = 0x0a;
const SPACE = 0x20;
const TAIL_BLOCK = 64 * 1024;
const READ_CHUNK = 64 * 1024;
/** Upstream timeFormatIn (types.RFC3339NanoLenient). */
const TIME_FORMAT_IN = "2006-01-02T15:04:05.999999999Z07:00";
const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|([+-])(\d{2}):(\d{2}))$/;
const latin1 = new TextDecoder("latin1");
const utf8 = new TextDecoder();
const encoder = new TextEncoder();

/** A parsed RFC 3339 time with nanoseconds, and upstream's fixed-width rendering of it. */
export interface NanoTime {
  nanos: bigint;
  /** RFC3339NanoFixed: nine fraction digits, the original offset ("Z" for UTC). */
  fixed: string;
}

function daysIn(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** Parses an RFC 3339 time with up to nine fraction digits, as Go's time.Parse(RFC3339Nano). */
export function parseRFC3339Nano(text: string): NanoTime | Error {
  const m = RFC3339.exec(text);
  if (!m) return new Error(`cannot parse ${JSON.stringify(text)} as RFC3339`);
  const [y, mo, d, h, mi, s] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (mo < 1 || mo > 12) return new Error(`month out of range in ${JSON.stringify(text)}`);
  if (d < 1 || d > daysIn(y, mo)) return new Error(`day out of range in ${JSON.stringify(text)}`);
  if (h > 23 || mi > 59 || s > 59) {
    return new Error(`time out of range in ${JSON.stringify(text)}`);
  }
  let offsetMinutes = 0;
  if (m[8] !== "Z") {
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23 || om > 59) return new Error(`time zone offset out of range in ${text}`);
    offsetMinutes = (m[9] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  const frac = (m[7] ?? "").padEnd(9, "0");
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  date.setUTCHours(h, mi, s, 0);
  const nanos = BigInt(date.getTime()) * 1_000_000n + BigInt(frac) -
    BigInt(offsetMinutes) * 60_000_000_000n;
  const zone = offsetMinutes === 0 ? "Z" : m[8]!;
  return { nanos, fixed: `${text.slice(0, 19)}.${frac}${zone}` };
}

function toLine(
  t: NanoTime,
  stream: "stdout" | "stderr",
  partial: boolean,
  content: Uint8Array,
): LogLine {
  return {
    time: new Date(Number(t.nanos / 1_000_000n)),
    stream,
    partial,
    content,
    nanos: t.nanos,
    timestamp: t.fixed,
  };
}

/**
 * Parses one line of the CRI log format (upstream parseCRILog); `line` may end with its "\n",
 * which a partial (P) line loses and a full line keeps. Returns upstream's error otherwise.
 */
export function parseCRILogLine(line: Uint8Array): LogLine | Error {
  let idx = line.indexOf(SPACE);
  if (idx < 0) return new Error("timestamp is not found");
  const t = parseRFC3339Nano(latin1.decode(line.subarray(0, idx)));
  if (t instanceof Error) {
    return new Error(`unexpected timestamp format "${TIME_FORMAT_IN}": ${t.message}`);
  }
  let rest = line.subarray(idx + 1);
  idx = rest.indexOf(SPACE);
  if (idx < 0) return new Error("stream type is not found");
  const stream = latin1.decode(rest.subarray(0, idx));
  if (stream !== "stdout" && stream !== "stderr") {
    return new Error(`unexpected stream type ${JSON.stringify(stream)}`);
  }
  rest = rest.subarray(idx + 1);
  idx = rest.indexOf(SPACE);
  if (idx < 0) return new Error("log tag is not found");
  // Tags are ":"-separated for forward compatibility; only the first one means anything yet.
  const tags = latin1.decode(rest.subarray(0, idx)).split(":");
  const partial = tags[0] === "P";
  if (partial && rest.length > 0 && rest[rest.length - 1] === NL) {
    rest = rest.subarray(0, rest.length - 1);
  }
  return toLine(t, stream, partial, rest.subarray(idx + 1));
}

/** What the Docker JSON format parser gives; its stream is checked only when written. */
interface Message {
  nanos: bigint;
  timestamp: string;
  stream: string;
  content: Uint8Array;
}

/** Go's zero time, which a JSON line without "time" gets. */
const ZERO_TIME: NanoTime = {
  nanos: -62135596800n * 1_000_000_000n,
  fixed: "0001-01-01T00:00:00.000000000Z",
};

/** Parses a Docker JSON log line (upstream parseDockerJSONLog). */
function parseDockerJSONLine(line: Uint8Array): Message | Error {
  let v: unknown;
  try {
    v = JSON.parse(utf8.decode(line));
  } catch (e) {
    return new Error(`failed with ${(e as Error).message} to unmarshal log`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    return new Error("failed with json: cannot unmarshal into Go value of type logs.jsonLog");
  }
  const o = v as Record<string, unknown>;
  const str = (k: string): string | Error =>
    o[k] === undefined || o[k] === null
      ? ""
      : typeof o[k] === "string"
      ? o[k] as string
      : new Error(`failed with json: cannot unmarshal ${k} into a string`);
  const log = str("log");
  const stream = str("stream");
  const time = str("time");
  for (const x of [log, stream, time]) if (x instanceof Error) return x;
  let t = ZERO_TIME;
  if (time !== "") {
    const p = parseRFC3339Nano(time as string);
    if (p instanceof Error) return new Error(`failed with ${p.message} to unmarshal log`);
    t = p;
  }
  return {
    nanos: t.nanos,
    timestamp: t.fixed,
    stream: stream as string,
    content: encoder.encode(log as string),
  };
}

type ParseFn = (line: Uint8Array) => Message | Error;

/** Upstream getParseFunc: the first format that parses the sample line. */
function getParseFunc(sample: Uint8Array): ParseFn | Error {
  for (const p of [parseCRILogLine, parseDockerJSONLine] as ParseFn[]) {
    if (!(p(sample) instanceof Error)) return p;
  }
  return new Error(`unsupported log format: ${JSON.stringify(utf8.decode(sample))}`);
}

async function readFull(file: Deno.FsFile, buf: Uint8Array): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    const n = await file.read(buf.subarray(off));
    if (n === null) throw new Error(`unexpected end of file after ${off} of ${buf.length} bytes`);
    off += n;
  }
}

function countNewlines(buf: Uint8Array): number {
  let n = 0;
  for (let i = buf.indexOf(NL); i >= 0; i = buf.indexOf(NL, i + 1)) n++;
  return n;
}

/**
 * The offset where the last `n` lines start (upstream tail.FindTailLineStartIndex): reads
 * backwards block by block; an incomplete last line (no "\n") does not count as a line.
 */
export async function findTailLineStart(file: Deno.FsFile, n: number): Promise<number> {
  if (n < 0) return 0;
  const size = (await file.stat()).size;
  let right = size;
  let left = size;
  let count = 0;
  let block = new Uint8Array(0);
  while (right > 0 && count <= n) {
    left = Math.max(0, right - TAIL_BLOCK);
    block = new Uint8Array(right - left);
    await file.seek(left, Deno.SeekMode.Start);
    await readFull(file, block);
    count += countNewlines(block);
    right = left;
  }
  let off = 0;
  for (; count > n; count--) off = block.indexOf(NL, off) + 1;
  return left + off;
}

/** Reads a file line by line, keeping an incomplete last line until more data arrives. */
class LineReader {
  readonly #file: Deno.FsFile;
  readonly #max: number;
  #buf = new Uint8Array(READ_CHUNK);
  #start = 0;
  #end = 0;
  #scanned = 0;
  #skipping = false;
  /** The file offset just past the bytes read so far. */
  position: number;

  constructor(file: Deno.FsFile, position: number, maxLineBytes: number) {
    this.#file = file;
    this.position = position;
    this.#max = maxLineBytes;
  }

  /**
   * The next complete line with its "\n"; "eof" when the file has no more data for now, or
   * "overlong" after dropping a line longer than the limit.
   */
  async next(): Promise<Uint8Array | "eof" | "overlong"> {
    for (;;) {
      const i = this.#buf.subarray(this.#scanned, this.#end).indexOf(NL);
      if (i >= 0) {
        const stop = this.#scanned + i + 1;
        const line = this.#buf.slice(this.#start, stop);
        this.#start = this.#scanned = stop;
        if (this.#skipping) {
          this.#skipping = false;
          continue;
        }
        return line;
      }
      this.#scanned = this.#end;
      if (this.#end - this.#start >= this.#max) {
        // Drop what is held of the overlong line and skip the rest of it.
        this.#start = this.#scanned = this.#end = 0;
        if (!this.#skipping) {
          this.#skipping = true;
          return "overlong";
        }
      }
      if (this.#end === this.#buf.length) {
        if (this.#start > 0) {
          this.#buf.copyWithin(0, this.#start, this.#end);
          this.#end -= this.#start;
          this.#scanned -= this.#start;
          this.#start = 0;
        } else {
          const bigger = new Uint8Array(Math.min(this.#buf.length * 2, this.#max + READ_CHUNK));
          bigger.set(this.#buf.subarray(0, this.#end));
          this.#buf = bigger;
        }
      }
      const n = await this.#file.read(this.#buf.subarray(this.#end));
      if (n === null) return "eof";
      this.#end += n;
      this.position += n;
    }
  }

  /** Takes the bytes of an incomplete last line (empty when there is none). */
  takeRest(): Uint8Array {
    const rest = this.#skipping ? new Uint8Array(0) : this.#buf.slice(this.#start, this.#end);
    this.#start = this.#scanned = this.#end = 0;
    this.#skipping = false;
    return rest;
  }
}

/** Writes messages per the options (upstream logWriter); "max" once the byte limit is reached. */
class LogWriter {
  readonly #out: WritableStreamDefaultWriter<Uint8Array>;
  readonly #since: bigint | undefined;
  readonly #timestamps: boolean;
  #remain: number;

  constructor(out: WritableStreamDefaultWriter<Uint8Array>, opts: LogOptions) {
    this.#out = out;
    this.#since = opts.since === undefined ? undefined : BigInt(opts.since.getTime()) * 1_000_000n;
    this.#timestamps = opts.timestamps ?? false;
    this.#remain = opts.limitBytes !== undefined && opts.limitBytes >= 0
      ? opts.limitBytes
      : Number.POSITIVE_INFINITY;
  }

  async write(msg: Message): Promise<"ok" | "max"> {
    if (this.#since !== undefined && msg.nanos < this.#since) return "ok";
    let line = msg.content;
    if (this.#timestamps) {
      const prefix = encoder.encode(`${msg.timestamp} `);
      line = new Uint8Array(prefix.length + msg.content.length);
      line.set(prefix);
      line.set(msg.content, prefix.length);
    }
    if (line.length > this.#remain) line = line.subarray(0, this.#remain);
    if (msg.stream !== "stdout" && msg.stream !== "stderr") {
      throw new LogReadError(`unexpected stream type ${JSON.stringify(msg.stream)}`);
    }
    await this.#out.write(line);
    this.#remain -= line.length;
    return this.#remain <= 0 ? "max" : "ok";
  }
}

/** Wakes a follower on file-system events in one directory; the poll covers anything missed. */
class DirWatch {
  readonly #watcher: Deno.FsWatcher | undefined;
  #notified = false;
  #wake: (() => void) | undefined;

  constructor(dir: string, logger: Logger | undefined) {
    try {
      this.#watcher = Deno.watchFs(dir, { recursive: false });
    } catch (e) {
      logger?.error(e, "Failed to watch the log directory, polling only", { path: dir });
      return;
    }
    (async () => {
      for await (const _ of this.#watcher!) {
        this.#notified = true;
        this.#wake?.();
      }
    })().catch((e) => logger?.v(4).info("Log directory watch ended", { err: String(e) }));
  }

  /** Resolves at the next event, or at once when one came since the last call. */
  next(): Promise<void> {
    if (this.#notified) {
      this.#notified = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.#wake = () => {
        this.#notified = false;
        this.#wake = undefined;
        resolve();
      };
    });
  }

  close(): void {
    try {
      this.#watcher?.close();
    } catch {
      // already closed
    }
  }
}

function describe(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function sameFile(a: Deno.FileInfo, b: Deno.FileInfo): boolean {
  return a.ino === b.ino && a.dev === b.dev;
}

/**
 * Reads the container log at `path` into `out` per the options (upstream ReadLogs); see the
 * module documentation. Rejects with a {@link LogReadError} when the file cannot be read, and
 * with the signal's reason when it aborts.
 */
export async function readLogs(
  path: string,
  opts: ReadLogsOptions,
  out: WritableStreamDefaultWriter<Uint8Array>,
  signal: AbortSignal,
): Promise<void> {
  signal.throwIfAborted();
  const logger = opts.logger;
  const clock = opts.clock ?? realClock;
  const follow = opts.follow ?? false;
  const tail = opts.tailLines ?? -1;
  const maxLine = opts.maxLineBytes ?? 4 << 20;
  // Symlinks are resolved first, as upstream does: the runtime and the kubelet own the path.
  let resolved: string;
  try {
    resolved = await Deno.realPath(path);
  } catch (e) {
    throw new LogReadError(
      `failed to try resolving symlinks in path ${JSON.stringify(path)}: ${describe(e)}`,
      { cause: e },
    );
  }
  let file: Deno.FsFile;
  try {
    file = await Deno.open(resolved, { read: true });
  } catch (e) {
    throw new LogReadError(`failed to open log file ${JSON.stringify(resolved)}: ${describe(e)}`, {
      cause: e,
    });
  }
  let next: Deno.FsFile | undefined;
  let watch: DirWatch | undefined;
  try {
    let start: number;
    try {
      start = await findTailLineStart(file, tail);
      await file.seek(start, Deno.SeekMode.Start);
    } catch (e) {
      throw new LogReadError(
        `failed to tail ${tail} lines of log file ${JSON.stringify(resolved)}: ${describe(e)}`,
        { cause: e },
      );
    }
    const reader = () => new LineReader(file, start, maxLine);
    let lines = reader();
    const limited = tail >= 0 && !follow;
    let remaining = tail;
    const writer = new LogWriter(out, opts);
    let parse: ParseFn | undefined;
    let done = false;
    let stopped = false;

    /** Parses and writes one line; false once the byte limit is reached. */
    const handle = async (line: Uint8Array): Promise<boolean> => {
      if (parse === undefined) {
        const p = getParseFunc(line);
        if (p instanceof Error) {
          throw new LogReadError(`failed to get parse function: ${p.message}`);
        }
        parse = p;
      }
      const msg = parse(line);
      if (msg instanceof Error) {
        logger?.error(msg, "Failed when parsing line in log file", {
          path: resolved,
          line: utf8.decode(line),
        });
        return true;
      }
      if (await writer.write(msg) === "max") {
        logger?.v(2).info("Finished parsing log file, hit bytes limit", {
          path: resolved,
          limit: opts.limitBytes,
        });
        stopped = true;
        return false;
      }
      if (limited) remaining--;
      return true;
    };

    /** At the end of the file: true when it was rotated or truncated and reading goes on. */
    const reopenIfReplaced = async (): Promise<boolean> => {
      if (next !== undefined) {
        // The old file is drained; an unterminated last line of it will never be completed.
        const rest = lines.takeRest();
        file.close();
        file = next;
        next = undefined;
        start = 0;
        lines = reader();
        if (rest.length > 0) {
          logger?.info("Incomplete line in rotated log file", { path: resolved });
          if (!await handle(rest)) return false;
        }
        return true;
      }
      let onDisk: Deno.FileInfo;
      try {
        onDisk = await Deno.stat(resolved);
      } catch (e) {
        if (e instanceof Deno.errors.NotFound) return false;
        throw e;
      }
      const current = await file.stat();
      if (sameFile(onDisk, current)) {
        if (onDisk.size >= lines.position) return false;
        logger?.info("Log file was truncated, reading it from the start", { path: resolved });
        lines.takeRest();
        await file.seek(0, Deno.SeekMode.Start);
        start = 0;
        lines = reader();
        return true;
      }
      try {
        next = await Deno.open(resolved, { read: true });
      } catch (e) {
        if (e instanceof Deno.errors.NotFound) return false;
        throw new LogReadError(
          `failed to open log file ${JSON.stringify(resolved)}: ${describe(e)}`,
          {
            cause: e,
          },
        );
      }
      logger?.v(2).info("Log file was rotated, reopening it", { path: resolved });
      // Read what was written to the old file before the runtime reopened the path.
      return true;
    };

    const pollMs = opts.pollIntervalMs ?? 1000;
    const wait = async (): Promise<void> => {
      if (watch === undefined && (opts.watch ?? true)) {
        watch = new DirWatch(dirname(resolved), logger);
        // A write may have landed before the watch began: look again before sleeping.
        return;
      }
      const stop = new AbortController();
      const both = AbortSignal.any([signal, stop.signal]);
      const sleep = clock.sleep(pollMs, both).then(() => {}, () => {});
      const aborted = new Promise<void>((resolve) =>
        both.addEventListener("abort", () => resolve(), { once: true })
      );
      try {
        await Promise.race(watch ? [sleep, aborted, watch.next()] : [sleep, aborted]);
      } finally {
        stop.abort();
      }
      signal.throwIfAborted();
    };

    for (;;) {
      if (limited && remaining === 0) break;
      signal.throwIfAborted();
      const got = await lines.next();
      if (got === "overlong") {
        logger?.error(undefined, "Skipped a log line longer than the limit", {
          path: resolved,
          limit: maxLine,
        });
        continue;
      }
      if (got !== "eof") {
        if (!await handle(got)) return;
        continue;
      }
      if (follow) {
        if (await reopenIfReplaced()) continue;
        if (stopped) return;
        if (done) break;
        if (opts.containerDone !== undefined && await opts.containerDone()) {
          // Drain what the container wrote before it exited, then stop.
          done = true;
          continue;
        }
        await wait();
        continue;
      }
      const rest = lines.takeRest();
      if (rest.length > 0) {
        logger?.info("Incomplete line in log file", {
          path: resolved,
          line: utf8.decode(rest),
        });
        await handle(rest);
      }
      break;
    }
    logger?.v(2).info("Finished parsing log file", { path: resolved });
  } finally {
    watch?.close();
    next?.close();
    file.close();
  }
}
