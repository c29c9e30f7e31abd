import assert from "node:assert/strict";
import { join } from "node:path";
import { FakeClock } from "../util/clock.ts";
import {
  findTailLineStart,
  LogReadError,
  parseCRILogLine,
  parseRFC3339Nano,
  readLogs,
  type ReadLogsOptions,
} from "./container_logs.ts";
import { createLogger } from "../klog/klog.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** One CRI log line. */
function cri(sec: number, stream: string, tag: string, content: string): string {
  const ts = `2026-01-01T00:00:${String(sec).padStart(2, "0")}.123456789Z`;
  return `${ts} ${stream} ${tag} ${content}\n`;
}

interface Fixture extends AsyncDisposable {
  dir: string;
  path: string;
}

async function fixture(content = ""): Promise<Fixture> {
  const dir = await Deno.makeTempDir({ prefix: "container-logs-" });
  const path = join(dir, "0.log");
  await Deno.writeTextFile(path, content);
  return {
    dir,
    path,
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

interface Sink {
  writer: WritableStreamDefaultWriter<Uint8Array>;
  text(): string;
}

function sink(): Sink {
  const chunks: Uint8Array[] = [];
  const writer = new WritableStream<Uint8Array>({
    write(c) {
      chunks.push(c.slice());
    },
  }).getWriter();
  return {
    writer,
    text: () => chunks.map((c) => dec.decode(c)).join(""),
  };
}

async function read(path: string, opts: ReadLogsOptions = {}): Promise<string> {
  const s = sink();
  await readLogs(path, opts, s.writer, new AbortController().signal);
  return s.text();
}

/** Polls a condition that depends on real file I/O, with a bound. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2500; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const FILE = cri(1, "stdout", "F", "one") +
  cri(2, "stderr", "F", "two") +
  cri(3, "stdout", "P", "thr") +
  cri(3, "stdout", "F", "ee") +
  cri(4, "stdout", "F", "four");

Deno.test("parseCRILogLine parses a full line and keeps its line end", () => {
  const l = parseCRILogLine(enc.encode("2016-10-06T00:17:09.669794202Z stdout F log content 1\n"));
  assert.ok(!(l instanceof Error));
  assert.equal(l.stream, "stdout");
  assert.equal(l.partial, false);
  assert.equal(dec.decode(l.content), "log content 1\n");
  assert.equal(l.nanos, BigInt(Date.UTC(2016, 9, 6, 0, 17, 9)) * 1_000_000n + 669794202n);
  assert.equal(l.time.toISOString(), "2016-10-06T00:17:09.669Z");
  assert.equal(l.timestamp, "2016-10-06T00:17:09.669794202Z");
});

Deno.test("parseCRILogLine strips the line end of a partial line, tags after ':' too", () => {
  const l = parseCRILogLine(enc.encode("2016-10-06T00:17:09Z stderr P:x half\n"));
  assert.ok(!(l instanceof Error));
  assert.equal(l.partial, true);
  assert.equal(l.stream, "stderr");
  assert.equal(dec.decode(l.content), "half");
  assert.equal(l.timestamp, "2016-10-06T00:17:09.000000000Z");
});

Deno.test("parseCRILogLine returns upstream's errors", () => {
  const msg = (s: string) => {
    const r = parseCRILogLine(enc.encode(s));
    return r instanceof Error ? r.message : "parsed";
  };
  assert.equal(msg("nospaces"), "timestamp is not found");
  assert.match(
    msg("yesterday stdout F x"),
    /^unexpected timestamp format "2006-01-02T15:04:05.999999999Z07:00": /,
  );
  assert.equal(msg("2016-10-06T00:17:09Z stdout"), "stream type is not found");
  assert.equal(msg("2016-10-06T00:17:09Z stdin F x"), 'unexpected stream type "stdin"');
  assert.equal(msg("2016-10-06T00:17:09Z stdout F"), "log tag is not found");
  assert.match(msg("2016-02-30T00:17:09Z stdout F x"), /^unexpected timestamp format/);
});

Deno.test("parseRFC3339Nano keeps a non-UTC offset and prints UTC as Z", () => {
  const plus = parseRFC3339Nano("2026-01-01T02:00:00.5+02:00");
  assert.ok(!(plus instanceof Error));
  assert.equal(plus.nanos, BigInt(Date.UTC(2026, 0, 1)) * 1_000_000n + 500_000_000n);
  assert.equal(plus.fixed, "2026-01-01T02:00:00.500000000+02:00");
  const zero = parseRFC3339Nano("2026-01-01T00:00:00+00:00");
  assert.ok(!(zero instanceof Error));
  assert.equal(zero.fixed, "2026-01-01T00:00:00.000000000Z");
  assert.ok(parseRFC3339Nano("2026-13-01T00:00:00Z") instanceof Error);
  assert.ok(parseRFC3339Nano("2026-01-01T24:00:00Z") instanceof Error);
  assert.ok(!(parseRFC3339Nano("2024-02-29T00:00:00Z") instanceof Error));
  assert.ok(parseRFC3339Nano("2023-02-29T00:00:00Z") instanceof Error);
});

Deno.test("readLogs writes every line and joins partial lines", async () => {
  await using f = await fixture(FILE);
  assert.equal(await read(f.path), "one\ntwo\nthree\nfour\n");
});

Deno.test("readLogs tailLines starts at the last N lines, counting fragments as lines", async () => {
  await using f = await fixture(FILE);
  assert.equal(await read(f.path, { tailLines: 2 }), "ee\nfour\n");
  assert.equal(await read(f.path, { tailLines: 3 }), "three\nfour\n");
  assert.equal(await read(f.path, { tailLines: 0 }), "");
  assert.equal(await read(f.path, { tailLines: 100 }), "one\ntwo\nthree\nfour\n");
});

Deno.test("readLogs tailLines seeks backwards through a file larger than one block", async () => {
  const lines: string[] = [];
  for (let i = 0; i < 5000; i++) lines.push(cri(i % 60, "stdout", "F", `line ${i}`));
  await using f = await fixture(lines.join(""));
  assert.ok((await Deno.stat(f.path)).size > 3 * 64 * 1024);
  assert.equal(await read(f.path, { tailLines: 3 }), "line 4997\nline 4998\nline 4999\n");
  const many = await read(f.path, { tailLines: 2000 });
  assert.equal(many.split("\n").length - 1, 2000);
  assert.ok(many.startsWith("line 3000\n"));
});

Deno.test("findTailLineStart does not count an unterminated last line", async () => {
  await using f = await fixture("a\nb\nc");
  const file = await Deno.open(f.path);
  try {
    assert.equal(await findTailLineStart(file, 1), 2);
    assert.equal(await findTailLineStart(file, 0), 4);
    assert.equal(await findTailLineStart(file, -1), 0);
    assert.equal(await findTailLineStart(file, 5), 0);
  } finally {
    file.close();
  }
});

Deno.test("readLogs limitBytes stops in the middle of a line", async () => {
  await using f = await fixture(FILE);
  assert.equal(await read(f.path, { limitBytes: 6 }), "one\ntw");
  assert.equal(await read(f.path, { limitBytes: 4 }), "one\n");
});

Deno.test("readLogs since skips lines logged before it", async () => {
  await using f = await fixture(FILE);
  assert.equal(
    await read(f.path, { since: new Date(Date.UTC(2026, 0, 1, 0, 0, 3)) }),
    "three\nfour\n",
  );
  // The lines carry .123456789: a since at .124 is after the line of second 3.
  assert.equal(
    await read(f.path, { since: new Date(Date.UTC(2026, 0, 1, 0, 0, 3, 124)) }),
    "four\n",
  );
});

Deno.test("readLogs timestamps prefixes each fragment with its fixed-width time", async () => {
  await using f = await fixture(FILE);
  assert.equal(
    await read(f.path, { tailLines: 3, timestamps: true }),
    "2026-01-01T00:00:03.123456789Z thr2026-01-01T00:00:03.123456789Z ee\n" +
      "2026-01-01T00:00:04.123456789Z four\n",
  );
});

Deno.test("readLogs skips a malformed line and logs it as upstream does", async () => {
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l) });
  await using f = await fixture(
    cri(1, "stdout", "F", "good") + "garbage line\n" + cri(2, "stdout", "F", "also good"),
  );
  assert.equal(await read(f.path, { logger }), "good\nalso good\n");
  assert.equal(logs.filter((l) => l.includes("Failed when parsing line in log file")).length, 1);
  assert.ok(logs.some((l) => l.includes("garbage line")));
});

Deno.test("readLogs fails when the first line is in no known format", async () => {
  await using f = await fixture("garbage\n" + cri(1, "stdout", "F", "x"));
  await assert.rejects(
    read(f.path),
    (e) =>
      e instanceof LogReadError &&
      e.message === 'failed to get parse function: unsupported log format: "garbage\\n"',
  );
});

Deno.test("readLogs reads the Docker JSON format", async () => {
  await using f = await fixture(
    '{"log":"content 1\\n","stream":"stdout","time":"2016-10-20T18:39:20.57606443Z"}\n' +
      '{"log":"content 2\\n","stream":"stderr","time":"2016-10-20T18:39:20.57606444Z"}\n',
  );
  assert.equal(
    await read(f.path, { timestamps: true }),
    "2016-10-20T18:39:20.576064430Z content 1\n2016-10-20T18:39:20.576064440Z content 2\n",
  );
});

Deno.test("readLogs writes an unterminated last line when not following", async () => {
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l) });
  await using f = await fixture(cri(1, "stdout", "F", "a") + cri(2, "stdout", "F", "b").trimEnd());
  assert.equal(await read(f.path, { logger }), "a\nb");
  assert.ok(logs.some((l) => l.includes("Incomplete line in log file")));
  // With tailLines the unterminated line is not a line: reading stops after the N lines.
  await Deno.writeTextFile(
    f.path,
    cri(1, "stdout", "F", "a") + cri(2, "stdout", "F", "b") + cri(3, "stdout", "F", "c").trimEnd(),
  );
  assert.equal(await read(f.path, { tailLines: 1 }), "b\n");
});

Deno.test("readLogs skips a line longer than maxLineBytes", async () => {
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l) });
  await using f = await fixture(
    cri(1, "stdout", "F", "a") + cri(2, "stdout", "F", "x".repeat(300_000)) +
      cri(3, "stdout", "F", "c"),
  );
  assert.equal(await read(f.path, { logger, maxLineBytes: 100_000 }), "a\nc\n");
  assert.ok(logs.some((l) => l.includes("Skipped a log line longer than the limit")));
});

Deno.test("readLogs resolves a symlinked path and says when the path is missing", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "via link"));
  const link = join(f.dir, "link.log");
  await Deno.symlink(f.path, link);
  assert.equal(await read(link), "via link\n");
  await assert.rejects(
    read(join(f.dir, "missing.log")),
    (e) =>
      e instanceof LogReadError &&
      e.message.startsWith(
        `failed to try resolving symlinks in path "${join(f.dir, "missing.log")}"`,
      ),
  );
});

/** A follower driven by the fake clock, with the container's exit under the test's control. */
function follower(path: string, extra: ReadLogsOptions = {}) {
  const clock = new FakeClock();
  const s = sink();
  const ctrl = new AbortController();
  let exited = false;
  let checks = 0;
  const done = readLogs(
    path,
    {
      follow: true,
      clock,
      watch: false,
      pollIntervalMs: 1000,
      containerDone: () => {
        checks++;
        return Promise.resolve(exited);
      },
      ...extra,
    },
    s.writer,
    ctrl.signal,
  );
  let finished = false;
  done.then(() => (finished = true), () => (finished = true));
  return {
    clock,
    sink: s,
    ctrl,
    done,
    get finished() {
      return finished;
    },
    exit() {
      exited = true;
    },
    /** Waits until the follower sleeps on the clock, then wakes it. */
    async tick() {
      await until(() => clock.waiters === 1 || finished, "the follower to sleep");
      const before = checks;
      clock.step(1000);
      await until(() => checks > before || finished, "the follower to look again");
    },
  };
}

Deno.test("readLogs follow writes new lines and ends once the container exited", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "first"));
  const fl = follower(f.path);
  await until(() => fl.sink.text() === "first\n", "the first line");
  await fl.tick();
  await Deno.writeTextFile(f.path, cri(2, "stdout", "P", "sec"), { append: true });
  await fl.tick();
  await until(() => fl.sink.text() === "first\nsec", "the partial line");
  // Half a line stays unread until it is complete.
  await Deno.writeTextFile(f.path, "2026-01-01T00:00:02Z stdout F ond", { append: true });
  await fl.tick();
  assert.equal(fl.sink.text(), "first\nsec");
  await Deno.writeTextFile(f.path, "\n", { append: true });
  await fl.tick();
  await until(() => fl.sink.text() === "first\nsecond\n", "the completed line");
  assert.equal(fl.finished, false);
  fl.exit();
  await Deno.writeTextFile(f.path, cri(3, "stdout", "F", "last words"), { append: true });
  await fl.tick();
  await fl.done;
  assert.equal(fl.sink.text(), "first\nsecond\nlast words\n");
});

Deno.test("readLogs follow with tailLines starts at the tail and keeps following", async () => {
  await using f = await fixture(FILE);
  const fl = follower(f.path, { tailLines: 1 });
  await until(() => fl.sink.text() === "four\n", "the tail");
  await fl.tick();
  await Deno.writeTextFile(f.path, cri(5, "stdout", "F", "five"), { append: true });
  fl.exit();
  await fl.tick();
  await fl.done;
  assert.equal(fl.sink.text(), "four\nfive\n");
});

Deno.test("readLogs follow reopens the path after log rotation, draining the old file", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "before rotation"));
  const fl = follower(f.path);
  await until(() => fl.sink.text() === "before rotation\n", "the first line");
  await fl.tick();
  // The kubelet renames 0.log away; the runtime writes to its open file until it reopens.
  const old = await Deno.open(f.path, { append: true });
  await Deno.rename(f.path, `${f.path}.20260101-000002`);
  await old.write(enc.encode(cri(2, "stdout", "F", "late in old file")));
  old.close();
  await Deno.writeTextFile(f.path, cri(3, "stdout", "F", "in new file"));
  await fl.tick();
  await until(
    () => fl.sink.text() === "before rotation\nlate in old file\nin new file\n",
    "both files",
  );
  await fl.tick();
  await Deno.writeTextFile(f.path, cri(4, "stdout", "F", "appended"), { append: true });
  fl.exit();
  await fl.tick();
  await fl.done;
  assert.equal(fl.sink.text(), "before rotation\nlate in old file\nin new file\nappended\n");
});

Deno.test("readLogs follow keeps the old file while the path is missing after rotation", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "a"));
  const fl = follower(f.path);
  await until(() => fl.sink.text() === "a\n", "the first line");
  await fl.tick();
  await Deno.rename(f.path, `${f.path}.1`);
  await fl.tick();
  await Deno.writeTextFile(f.path, cri(2, "stdout", "F", "b"));
  await fl.tick();
  await until(() => fl.sink.text() === "a\nb\n", "the new file");
  fl.exit();
  await fl.tick();
  await fl.done;
});

Deno.test("readLogs follow starts over when the file was truncated", async () => {
  await using f = await fixture(
    cri(1, "stdout", "F", "long first line") + cri(2, "stdout", "F", "x"),
  );
  const fl = follower(f.path);
  await until(() => fl.sink.text() === "long first line\nx\n", "the lines");
  await fl.tick();
  await Deno.truncate(f.path, 0);
  await Deno.writeTextFile(f.path, cri(3, "stdout", "F", "new"), { append: true });
  await fl.tick();
  await until(() => fl.sink.text() === "long first line\nx\nnew\n", "the new start");
  fl.exit();
  await fl.tick();
  await fl.done;
});

Deno.test("readLogs follow rejects with the signal's reason when aborted", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "a"));
  const fl = follower(f.path);
  await until(() => fl.clock.waiters === 1, "the follower to sleep");
  fl.ctrl.abort(new Error("client went away"));
  await assert.rejects(fl.done, /client went away/);
  assert.equal(fl.clock.waiters, 0);
});

Deno.test("readLogs follow stops at the byte limit", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "abc"));
  const fl = follower(f.path, { limitBytes: 6 });
  await until(() => fl.sink.text() === "abc\n", "the first line");
  await fl.tick();
  await Deno.writeTextFile(f.path, cri(2, "stdout", "F", "defgh"), { append: true });
  await fl.tick();
  await fl.done;
  assert.equal(fl.sink.text(), "abc\nde");
});

Deno.test("readLogs follow wakes on inotify events before the poll is due", async () => {
  await using f = await fixture(cri(1, "stdout", "F", "a"));
  const clock = new FakeClock();
  const s = sink();
  const ctrl = new AbortController();
  const done = readLogs(
    f.path,
    { follow: true, clock, pollIntervalMs: 3_600_000 },
    s.writer,
    ctrl.signal,
  );
  await until(() => clock.waiters === 1, "the follower to sleep");
  await Deno.writeTextFile(f.path, cri(2, "stdout", "F", "b"), { append: true });
  await until(() => s.text() === "a\nb\n", "the event to wake the follower");
  ctrl.abort();
  await assert.rejects(done);
});
