import assert from "node:assert/strict";
import { createLogger, kobj, type LoggerOptions, LoggerOptionsError, setLogV } from "./klog.ts";

// Built from local fields, so the header reads 1202 07:36:22.123 whatever TZ is.
const NOW = new Date(2024, 11, 2, 7, 36, 22, 123);
const HEADER = "1202 07:36:22.123000   12345 klog_test.ts";
const POD = { metadata: { name: "nginx", namespace: "default" } };

function capture(opts: LoggerOptions = {}) {
  const lines: string[] = [];
  const log = createLogger({ now: () => NOW, pid: 12345, write: (l) => lines.push(l), ...opts });
  return { log, lines };
}

/** The line number of the statement after the one calling this. */
function nextLine(): number {
  const frame = new Error().stack?.split("\n")[2] ?? "";
  return Number(/:(\d+):\d+\)?$/.exec(frame)?.[1]) + 1;
}

Deno.test("createLogger writes klog text header", () => {
  const { log, lines } = capture();
  const line = nextLine();
  log.info("Pod started", { pod: kobj(POD), n: 3, ready: true, name: "web" });
  assert.deepEqual(lines, [
    `I${HEADER}:${line}] "Pod started" pod="default/nginx" n=3 ready=true name="web"`,
  ]);
});

Deno.test("createLogger pads the pid to seven columns and keeps its low digits", () => {
  const short = capture({ pid: 7 });
  const long = capture({ pid: 123456789 });
  const line = nextLine();
  short.log.info("x");
  long.log.info("x");
  assert.equal(short.lines[0], `I1202 07:36:22.123000       7 klog_test.ts:${line}] "x"`);
  assert.equal(long.lines[0], `I1202 07:36:22.123000 3456789 klog_test.ts:${line + 1}] "x"`);
});

Deno.test("createLogger defaults to wall-clock time with microseconds", () => {
  const lines: string[] = [];
  const before = new Date();
  createLogger({ write: (l) => lines.push(l) }).info("now");
  const m = /^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +(\d+) klog_test\.ts:\d+\] "now"$/
    .exec(lines[0]!);
  assert.ok(m, lines[0]);
  assert.equal(Number(m[7]), Deno.pid);
  const [mo, d, h, mi, s, us] = m.slice(1, 7).map(Number) as number[];
  const logged = new Date(before.getFullYear(), mo! - 1, d, h, mi, s, us! / 1000);
  assert.ok(Math.abs(logged.getTime() - before.getTime()) < 1000, lines[0]);
});

Deno.test("Logger.warning writes severity W", () => {
  const { log, lines } = capture();
  const line = nextLine();
  log.warning("Disk is almost full", { usedPercent: 91.5 });
  assert.deepEqual(lines, [`W${HEADER}:${line}] "Disk is almost full" usedPercent=91.5`]);
});

Deno.test("Logger.error puts err right after the message", () => {
  const { log, lines } = capture();
  const line = nextLine();
  log.error(new Error("boom"), "Sync failed", { pod: kobj(POD) });
  log.error(null, "No error given");
  log.error(new Error("start kubelet", { cause: new Error("no cgroup v2") }), "Fatal");
  log.error("plain string", "Thrown value");
  assert.deepEqual(lines, [
    `E${HEADER}:${line}] "Sync failed" err="boom" pod="default/nginx"`,
    `E${HEADER}:${line + 1}] "No error given"`,
    `E${HEADER}:${line + 2}] "Fatal" err="start kubelet: no cgroup v2"`,
    `E${HEADER}:${line + 3}] "Thrown value" err="plain string"`,
  ]);
});

Deno.test("Logger.info writes multi-line strings as klog value blocks", () => {
  const { log, lines } = capture();
  const line = nextLine();
  log.info("Config", { file: "a: 1\nb: 2", trailing: "x\n", after: 1 });
  assert.deepEqual(lines, [
    `I${HEADER}:${line}] "Config" file=<\n\ta: 1\n\tb: 2\n >` + ` trailing=<\n\tx\n > after=1`,
  ]);
});

Deno.test("Logger.info quotes messages and strings like Go %q", () => {
  const { log, lines } = capture();
  log.info('say "hi"\n\tnow', { s: "é 日本 😀 \\ \x07\x01\x7f \u200b \u{e0001} \u00a0" });
  assert.equal(
    lines[0]!.slice(lines[0]!.indexOf("] ") + 2),
    String.raw`"say \"hi\"\n\tnow" s="é 日本 😀 \\ \a\x01\x7f \u200b \U000e0001 \u00a0"`,
  );
});

Deno.test("Logger.info formats other values as klog serialize does", () => {
  const { log, lines } = capture();
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  log.info("values", {
    nil: null,
    undef: undefined,
    big: 10n,
    neg: -0,
    tiny: 1e-7,
    list: ["a", 1],
    obj: { html: "<&>", skip: undefined, ref: kobj({ metadata: { name: "n" } }) },
    map: new Map([["b", 2], ["a", 1]]),
    err: new TypeError("bad type"),
    nons: kobj({ metadata: { name: "node-1" } }),
    when: new Date(Date.UTC(2024, 11, 2, 7, 36, 22, 120)),
    url: new URL("https://example.com/a"),
    nan: NaN,
    cycle,
  });
  assert.equal(
    lines[0]!.slice(lines[0]!.indexOf("] ") + 2),
    [
      `"values" nil=null undef=null big=10 neg=-0 tiny=1e-7 list=["a",1]`,
      String.raw`obj={"html":"\u003c\u0026\u003e","ref":{"name":"n"}} map={"a":1,"b":2}`,
      `err="bad type" nons="node-1" when="2024-12-02 07:36:22.12 +0000 UTC"`,
      `url="https://example.com/a" nan="<internal error: json: unsupported value: NaN>"`,
      `cycle="<internal error: json: unsupported value: encountered a cycle via Object>"`,
    ].join(" "),
  );
});

Deno.test("Logger.v writes nothing for disabled levels and skips the stack", () => {
  const { log, lines } = capture({ verbosity: 2 });
  const line = nextLine();
  log.v(2).info("Shown", { level: 2 });
  const original = Object.getOwnPropertyDescriptor(Error, "stackTraceLimit")!;
  let stackReads = 0;
  Object.defineProperty(Error, "stackTraceLimit", {
    configurable: true,
    get: () => (stackReads++, 10),
    set: () => {},
  });
  try {
    const v3 = log.v(3);
    v3.info("Hidden", { level: 3 });
    assert.equal(v3.enabled, false);
  } finally {
    Object.defineProperty(Error, "stackTraceLimit", original);
  }
  assert.equal(stackReads, 0);
  assert.equal(log.v(2).enabled, true);
  assert.deepEqual(lines, [`I${HEADER}:${line}] "Shown" level=2`]);
});

Deno.test("Logger.v honours vmodule patterns for the calling file", () => {
  const vmodule = [
    { filePattern: "klog_test", verbosity: 0 }, // ignored, as klog ignores =0
    { filePattern: "other", verbosity: 9 },
    { filePattern: "klog_t[a-f]s?", verbosity: 4 },
  ];
  const { log, lines } = capture({ vmodule });
  assert.equal(log.v(4).enabled, true);
  assert.equal(log.v(5).enabled, false);
  log.v(4).info("Shown");
  log.v(5).info("Hidden");
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /^I.* klog_test\.ts:\d+\] "Shown"$/);
  const literal = capture({ vmodule: [{ filePattern: "klog_test", verbosity: 1 }] });
  assert.equal(literal.log.v(1).enabled, true);
  const bracket = capture({ vmodule: [{ filePattern: "klog_[]", verbosity: 1 }] });
  assert.equal(bracket.log.v(1).enabled, false);
});

Deno.test("createLogger rejects options upstream validation rejects", () => {
  assert.throws(() => createLogger({ verbosity: -1 }), LoggerOptionsError);
  assert.throws(
    () => createLogger({ vmodule: [{ filePattern: "", verbosity: 1 }] }),
    /'vmodule\[0\]\.filePattern' must be a file pattern/,
  );
  assert.throws(
    () => createLogger({ format: "json", vmodule: [{ filePattern: "x", verbosity: 1 }] }),
    /only supported for text log format/,
  );
});

Deno.test("createLogger writes component-base JSON lines", () => {
  const { log, lines } = capture({ format: "json", verbosity: 4 });
  const line = nextLine();
  log.info("Pod started", { pod: kobj(POD), n: 3 });
  log.v(4).info("Detail", { ok: true });
  log.warning("Careful");
  const ts = NOW.getTime();
  assert.equal(
    lines[0],
    `{"ts":${ts},"caller":"klog/klog_test.ts:${line}","msg":"Pod started","v":0,` +
      `"pod":{"name":"nginx","namespace":"default"},"n":3}`,
  );
  const detail = JSON.parse(lines[1]!);
  assert.deepEqual(Object.keys(detail), ["ts", "caller", "msg", "v", "ok"]);
  assert.deepEqual(detail, {
    ts,
    caller: `klog/klog_test.ts:${line + 1}`,
    msg: "Detail",
    v: 4,
    ok: true,
  });
  assert.deepEqual(JSON.parse(lines[2]!), {
    ts,
    caller: `klog/klog_test.ts:${line + 2}`,
    msg: "Careful",
    v: 0,
  });
});

Deno.test("Logger.error in JSON has no v and puts err after the pairs", () => {
  const { log, lines } = capture({ format: "json" });
  log.error(new Error("boom"), "Sync failed", { pod: kobj({ metadata: { name: "p" } }) });
  log.error(undefined, "No error");
  const first = JSON.parse(lines[0]!);
  assert.deepEqual(Object.keys(first), ["ts", "caller", "msg", "pod", "err"]);
  assert.deepEqual(first.pod, { name: "p" });
  assert.equal(first.err, "boom");
  assert.deepEqual(Object.keys(JSON.parse(lines[1]!)), ["ts", "caller", "msg"]);
});

Deno.test("createLogger encodes JSON values as zap does", () => {
  const { log, lines } = capture({ format: "json" });
  const cycle: unknown[] = [];
  cycle.push(cycle);
  log.info('a"b\n\x08', { f: 1.5, tiny: 1e-7, nan: NaN, inf: -Infinity, cycle, s: "<&>" });
  assert.equal(
    lines[0]!.slice(lines[0]!.indexOf(',"msg"')),
    String.raw`,"msg":"a\"b\n\u0008","v":0,"f":1.5,"tiny":0.0000001,"nan":"NaN","inf":"-Inf",` +
      String.raw`"cycleError":"json: unsupported value: encountered a cycle via Array","s":"<&>"}`,
  );
});

Deno.test("Logger.with carries values into every line", () => {
  const { log, lines } = capture();
  const line = nextLine();
  const podLog = log.with({ pod: kobj(POD), attempt: 1 });
  podLog.info("Starting", { container: "app" });
  podLog.error(new Error("boom"), "Failed", { attempt: 2 });
  podLog.with({ pod: kobj(POD) }).info("Same pod");
  log.info("Unrelated");
  assert.deepEqual(lines, [
    `I${HEADER}:${line + 1}] "Starting" pod="default/nginx" attempt=1 container="app"`,
    `E${HEADER}:${line + 2}] "Failed" err="boom" pod="default/nginx" attempt=2`,
    `I${HEADER}:${line + 3}] "Same pod" pod="default/nginx" attempt=1`,
    `I${HEADER}:${line + 4}] "Unrelated"`,
  ]);
});

Deno.test("Logger.with in JSON puts the values before v, duplicates and all", () => {
  const { log, lines } = capture({ format: "json" });
  log.with({ a: 1 }).info("m", { a: 2 });
  assert.match(lines[0]!, /,"msg":"m","a":1,"v":0,"a":2\}$/);
});

Deno.test("kobj renders an object reference", () => {
  assert.equal(String(kobj(POD)), "default/nginx");
  assert.deepEqual(kobj({}).toJSON(), { name: "" });
  assert.deepEqual(kobj(POD).toJSON(), { name: "nginx", namespace: "default" });
});

Deno.test("every logger method names its own caller's line, however deep the call chain", async () => {
  const { log, lines } = capture({ verbosity: 2 });
  const lineOf = (l: string) => Number(/klog_test\.ts:(\d+)\]/.exec(l)?.[1]);
  const deep = async (n: number): Promise<number[]> => {
    if (n > 0) {
      await Promise.resolve();
      return deep(n - 1);
    }
    const sub = log.with({ pod: "p" });
    const { info } = log;
    const nested = {
      toString() {
        log.info("nested");
        return "value";
      },
    };
    const first = nextLine();
    log.info("a");
    log.warning("b");
    log.error(new Error("x"), "c");
    log.v(2).info("d");
    sub.info("e");
    sub.v(1).info("f");
    info("g");
    log.info("h", { v: nested });
    return [first, first + 1, first + 2, first + 3, first + 4, first + 5, first + 6, first + 7];
  };
  const want = await deep(30);
  // The nested line is written first, attributed to the toString that logged it.
  assert.equal(lines.length, 9);
  assert.match(lines[7]!, /"nested"/);
  assert.ok(lineOf(lines[7]!) < want[0]!, lines[7]);
  assert.deepEqual([...lines.slice(0, 7), lines[8]!].map(lineOf), want);
});

Deno.test("setLogV changes -v of a logger and its derived loggers, keeping -vmodule", () => {
  const lines: string[] = [];
  const log = createLogger({
    write: (l) => lines.push(l),
    vmodule: [{ filePattern: "klog_test", verbosity: 6 }],
  });
  const child = log.with({ component: "x" });
  setLogV(log, 3);
  // This file matches the vmodule entry: level 6 still logs here after -v changed.
  child.v(6).info("vmodule kept");
  assert.equal(lines.length, 1);
  assert.throws(() => setLogV(log, -1), LoggerOptionsError);
  const plain: string[] = [];
  const other = createLogger({ write: (l) => plain.push(l) });
  other.v(3).info("off at -v=0");
  setLogV(other, 3);
  other.v(3).info("on at -v=3");
  assert.equal(plain.length, 1);
  assert.match(plain[0] ?? "", /on at -v=3/);
});
