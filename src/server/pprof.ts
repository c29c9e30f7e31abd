/**
 * @module
 * `/debug/pprof/` on the authenticated kubelet API (KubeletConfiguration enableProfilingHandler,
 * only with enableDebuggingHandlers, as upstream): the profiles V8 can give, in the formats Go's
 * net/http/pprof serves, so `go tool pprof https://<node>:10250/debug/pprof/profile` works as
 * against the Go kubelet.
 *
 * - `profile?seconds=N` (default 30): a CPU profile of the kubelet's isolate from V8's sampler
 *   (100 Hz, Go's rate), gzipped profile.proto with Go's sample types (samples/count,
 *   cpu/nanoseconds); one at a time, as Go.
 * - `heap` (`?gc=1` collects garbage first, `?seconds=N` gives the change over N seconds,
 *   `?debug=1` a text form): the live objects V8's sampling heap profiler saw allocated, one
 *   sample every 512 KiB on average (Go's MemProfileRate); the sampler runs from the moment the
 *   routes are made, as Go's is always on. Sample types samples/count (the sampled live
 *   objects) and inuse_space/bytes (V8's estimate of all live bytes); V8 does not give an
 *   estimate of the number of objects, so there is no inuse_objects.
 * - `cmdline`: the process's arguments, NUL-separated (Go's os.Args).
 * - the index at `/debug/pprof/`, listing those three.
 *
 * Not served, each answered 501 with the reason: `allocs` (V8's sampler keeps live objects
 * only), `goroutine`, `threadcreate`, `block`, `mutex` (Go runtime records), `trace` (Go's
 * execution tracer) and `symbol` (these profiles carry names, not program counters). The
 * profiles come from the V8 inspector (`node:inspector`), which Deno opens only with the `sys`
 * permission "inspector": where it cannot be opened (the agent's sandbox does not grant it),
 * `profile` and `heap` answer 501 with Deno's refusal. Only the isolate this module runs in is
 * profiled (the kubelet's Worker, not the launcher). Like every `/debug/` path the routes are
 * authorized as the `proxy` subresource of the node; with enableProfilingHandler off they answer
 * 405 "profiling endpoint is disabled.", with enableDebuggingHandlers off 405 "Debug endpoints
 * are disabled.", as upstream.
 *
 * Corresponds to upstream `pkg/kubelet/server/server.go` (InstallProfilingHandler) and Go's
 * net/http/pprof.
 */

import type { ServerResponse } from "node:http";
import { Session } from "node:inspector";
import { gzipSync } from "node:zlib";
import { realClock } from "../util/clock.ts";
import { httpError, type KubeletRequest, type Route } from "./server.ts";
import {
  cpuStacks,
  encodeProfile,
  frameFile,
  frameName,
  heapStacks,
  type StackValues,
  subtractStacks,
  type V8CpuProfile,
  type V8SamplingHeapProfile,
} from "./_pprof_proto.ts";

/** Where the routes live (upstream pprofBasePath). */
export const PPROF_BASE_PATH = "/debug/pprof/";

/** Go's CPU profiling rate: 100 samples a second. */
const CPU_INTERVAL_US = 10_000;

/** Go's runtime.MemProfileRate: one heap sample every 512 KiB allocated on average. */
export const HEAP_SAMPLING_INTERVAL = 512 * 1024;

/** The profiles served and Go's descriptions of them, as the index lists them. */
const SERVED: Readonly<Record<string, string>> = {
  cmdline: "The command line invocation of the current program",
  heap:
    "A sampling of memory allocations of live objects. You can specify the gc GET parameter to run GC before taking the heap sample.",
  profile:
    "CPU profile. You can specify the duration in the seconds GET parameter. After you get the profile file, use the go tool pprof command to investigate the profile.",
};

/** The profiles Go serves that this agent cannot, and why. */
const NOT_SERVED: Readonly<Record<string, string>> = {
  allocs:
    "V8's sampling heap profiler keeps only the samples of objects still alive (see heap), not all past allocations",
  goroutine: "a JavaScript isolate has no goroutines (see profile for where the time goes)",
  threadcreate: "the agent's threads are Deno's and V8's, which record no creation stacks",
  block: "there is no Go runtime to record blocking on synchronization primitives",
  mutex: "there is no Go runtime to record contended mutexes",
  trace: "there is no Go execution tracer, and V8 has no trace that go tool trace reads",
  symbol: "the profiles served here name their functions and carry no program counters to look up",
};

/** What {@link profilingRoutes} needs. */
export interface ProfilingRoutesOptions {
  /** KubeletConfiguration enableDebuggingHandlers. @default true */
  readonly enabled?: boolean;
  /** KubeletConfiguration enableProfilingHandler. @default true */
  readonly profilingEnabled?: boolean;
  /** Stops the heap sampler and closes the inspector session. */
  readonly signal: AbortSignal;
}

/** An answer with Go's serveError headers (net/http/pprof). */
function serveError(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "x-go-pprof": "1",
    "x-content-type-options": "nosniff",
  });
  res.end(`${text}\n`);
}

/** A profile file, as Go sends one. */
function sendProfile(res: ServerResponse, filename: string, profile: Uint8Array): void {
  res.writeHead(200, {
    "content-type": "application/octet-stream",
    "content-disposition": `attachment; filename="${filename}"`,
    "x-content-type-options": "nosniff",
  });
  res.end(gzipSync(profile));
}

/** Go's strconv.ParseInt of a query value, or undefined. */
function parseInt64(s: string | null): number | undefined {
  return s !== null && /^[+-]?\d{1,19}$/.test(s) ? Number(s) : undefined;
}

/** The V8 inspector of this isolate, or why it cannot be opened. */
class Inspector {
  readonly #session = new Session();
  readonly error?: string;

  constructor() {
    try {
      this.#session.connect();
    } catch (e) {
      this.error = `the V8 inspector cannot be opened in this process: ${
        e instanceof Error ? e.message : String(e)
      }`;
    }
  }

  post<T>(method: string, params: object = {}): Promise<T> {
    return new Promise((resolve, reject) =>
      this.#session.post(
        method,
        params,
        (e: Error | null, r: unknown) => e ? reject(e) : resolve(r as T),
      )
    );
  }

  close(): void {
    if (!this.error) this.#session.disconnect();
  }
}

/** True while a CPU profile is being taken: V8's sampler, like Go's, takes one at a time. */
let cpuProfiling = false;

/**
 * The isolate's inspector session and heap sampler, shared by every set of routes made (V8 has
 * one sampling heap profiler an isolate); closed when the last set's signal aborts.
 */
let shared: { inspector: Inspector; sampling: Promise<void>; users: number } | undefined;
/** Settles once the previous shared session has stopped its sampler and closed. */
let closing: Promise<void> = Promise.resolve();

function acquireInspector(signal: AbortSignal): { inspector: Inspector; sampling: Promise<void> } {
  if (!shared) {
    const inspector = new Inspector();
    // The heap sampler runs from now on, as Go's memory profiler does from the start.
    const sampling = inspector.error ? Promise.resolve() : closing.then(async () => {
      await inspector.post("HeapProfiler.enable");
      await inspector.post("HeapProfiler.startSampling", {
        samplingInterval: HEAP_SAMPLING_INTERVAL,
      });
    });
    sampling.catch(() => {});
    shared = { inspector, sampling, users: 0 };
  }
  const s = shared;
  s.users++;
  signal.addEventListener("abort", () => {
    if (--s.users > 0) return;
    if (shared === s) shared = undefined;
    closing = s.sampling.then(() =>
      s.inspector.error ? undefined : s.inspector.post("HeapProfiler.stopSampling")
    )
      .catch(() => {})
      .finally(() => s.inspector.close())
      .then(() => {});
  }, { once: true });
  return s;
}

/** The `/debug/pprof/` routes. */
export function profilingRoutes(opts: ProfilingRoutesOptions): Route[] {
  const on = opts.enabled !== false && opts.profilingEnabled !== false;
  const { inspector, sampling } = on && !opts.signal.aborted
    ? acquireInspector(opts.signal)
    : { inspector: undefined, sampling: Promise.resolve() };
  const unavailable = inspector ? inspector.error : "the kubelet API server is stopping";

  const heap = async (gc: boolean): Promise<StackValues[]> => {
    await sampling;
    if (gc) await inspector!.post("HeapProfiler.collectGarbage");
    const { profile } = await inspector!.post<{ profile: V8SamplingHeapProfile }>(
      "HeapProfiler.getSamplingProfile",
    );
    return heapStacks(profile);
  };

  const handler = async (r: KubeletRequest, res: ServerResponse): Promise<void> => {
    const path = r.url.pathname;
    if (!path.startsWith(PPROF_BASE_PATH)) {
      // net/http's ServeMux sends the path without its slash to the subtree.
      const to = PPROF_BASE_PATH + r.url.search;
      res.writeHead(301, { location: to, "content-type": "text/html; charset=utf-8" });
      return void res.end(
        r.req.method === "GET" ? `<a href="${escapeHtml(to)}">Moved Permanently</a>.\n\n` : "",
      );
    }
    if (opts.enabled === false) return httpError(res, 405, "Debug endpoints are disabled.");
    if (opts.profilingEnabled === false) {
      return httpError(res, 405, "profiling endpoint is disabled.");
    }
    if (r.req.method !== "GET") return httpError(res, 405, "405: Method Not Allowed");
    let name: string;
    try {
      name = decodeURIComponent(path.slice(PPROF_BASE_PATH.length));
    } catch {
      name = path.slice(PPROF_BASE_PATH.length);
    }
    const query = r.url.searchParams;
    if (name === "") return await index(res, () => heap(false), unavailable);
    if (name === "cmdline") return await cmdline(res);
    const why = NOT_SERVED[name];
    if (why !== undefined) return serveError(res, 501, `${name} is not available: ${why}`);
    if (name !== "profile" && name !== "heap") return serveError(res, 404, "Unknown profile");
    if (unavailable !== undefined) {
      return serveError(res, 501, `${name} is not available: ${unavailable}`);
    }
    if (name === "profile") return await cpuProfile(r, res, inspector!);

    const debug = parseInt64(query.get("debug")) ?? 0;
    const seconds = query.get("seconds");
    if (seconds !== null && seconds !== "") {
      const sec = parseInt64(seconds);
      if (sec === undefined || sec <= 0) {
        return serveError(res, 400, `invalid value for "seconds" - must be a positive integer`);
      }
      if (debug !== 0) return serveError(res, 400, "seconds and debug params are incompatible");
      const t0 = Date.now();
      const before = await heap(false);
      try {
        await realClock.sleep(sec * 1000, r.signal);
      } catch {
        return; // The client went away.
      }
      const after = await heap(false);
      return sendProfile(
        res,
        "heap-delta",
        heapProfile(subtractStacks(after, before), Date.now(), (Date.now() - t0) * 1e6),
      );
    }
    const stacks = await heap((parseInt64(query.get("gc")) ?? 0) > 0);
    if (debug !== 0) {
      res.writeHead(200, {
        "content-type": "text/plain; charset=utf-8",
        "x-content-type-options": "nosniff",
      });
      return void res.end(heapText(stacks));
    }
    sendProfile(res, "heap", heapProfile(stacks, Date.now()));
  };
  return [{ pattern: "/debug/pprof/*name", handler }];
}

/** A heap profile's stacks as profile.proto. */
function heapProfile(stacks: StackValues[], timeMs: number, durationNanos?: number): Uint8Array {
  return encodeProfile({
    sampleTypes: [["samples", "count"], ["inuse_space", "bytes"]],
    periodType: ["space", "bytes"],
    period: HEAP_SAMPLING_INTERVAL,
    defaultSampleType: "inuse_space",
    timeMs,
    durationNanos,
  }, stacks);
}

/**
 * The heap profile as text (`?debug=1`), in the shape of Go's legacy heap profile: a total
 * line, then each stack with its samples and bytes and one `#` line a frame. Frames are
 * `function file:line` (there are no addresses to print).
 */
export function heapText(stacks: readonly StackValues[]): string {
  const sorted = [...stacks].sort((a, b) => (b.values[1] ?? 0) - (a.values[1] ?? 0));
  const total = sorted.reduce((t, s) => [t[0]! + s.values[0]!, t[1]! + s.values[1]!], [0, 0]);
  const lines = [
    `heap profile: ${total[0]}: ${total[1]} @ heap/${HEAP_SAMPLING_INTERVAL}`,
    `# samples: live bytes (V8 sampling heap profiler, live objects only)`,
  ];
  for (const s of sorted) {
    lines.push(`${s.values[0]}: ${s.values[1]} @`);
    for (const f of s.frames) {
      lines.push(`#\t${frameName(f)}\t${frameFile(f)}:${f.lineNumber + 1}`);
    }
    lines.push("");
  }
  return `${lines.join("\n")}\n`;
}

/** `/debug/pprof/profile`: V8's CPU profile over `seconds` (default 30, as Go). */
async function cpuProfile(r: KubeletRequest, res: ServerResponse, inspector: Inspector) {
  const asked = parseInt64(r.url.searchParams.get("seconds"));
  const sec = asked === undefined || asked <= 0 ? 30 : asked;
  if (cpuProfiling) {
    return serveError(res, 500, "Could not enable CPU profiling: cpu profiling already in use");
  }
  cpuProfiling = true;
  try {
    await inspector.post("Profiler.enable");
    await inspector.post("Profiler.setSamplingInterval", { interval: CPU_INTERVAL_US });
    await inspector.post("Profiler.start");
    const started = Date.now();
    let gone = false;
    try {
      await realClock.sleep(sec * 1000, r.signal);
    } catch {
      gone = true;
    }
    const { profile } = await inspector.post<{ profile: V8CpuProfile }>("Profiler.stop");
    await inspector.post("Profiler.disable");
    if (gone) return;
    sendProfile(
      res,
      "profile",
      encodeProfile({
        sampleTypes: [["samples", "count"], ["cpu", "nanoseconds"]],
        periodType: ["cpu", "nanoseconds"],
        period: CPU_INTERVAL_US * 1000,
        timeMs: started,
        durationNanos: (profile.endTime - profile.startTime) * 1000,
      }, cpuStacks(profile)),
    );
  } finally {
    cpuProfiling = false;
  }
}

/**
 * The process's arguments as Go's os.Args: from /proc/self/cmdline; where the sandbox may not
 * read it, a compiled agent's executable and arguments (the same list: `deno compile` embeds
 * none); under `deno run` in the sandbox, 501 (the runtime's own arguments are not to be had).
 */
async function cmdline(res: ServerResponse): Promise<void> {
  let args: string;
  try {
    args = (await Deno.readTextFile("/proc/self/cmdline")).replace(/\0$/, "");
  } catch (e) {
    if (!Deno.build.standalone) {
      return serveError(
        res,
        501,
        `cmdline is not available: /proc/self/cmdline cannot be read (${
          e instanceof Error ? e.message : String(e)
        }), and under deno run the runtime's arguments are not otherwise known`,
      );
    }
    args = [Deno.execPath(), ...Deno.args].join("\0");
  }
  res.writeHead(200, {
    "content-type": "text/plain; charset=utf-8",
    "x-content-type-options": "nosniff",
  });
  res.end(args);
}

/** Go's html.EscapeString. */
function escapeHtml(s: string): string {
  const entities: Record<string, string> = {
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
    "'": "&#39;",
    '"': "&#34;",
  };
  return s.replace(/[<>&'"]/g, (c) => entities[c]!);
}

/**
 * The index page: Go's template with the profiles served here (heap and profile only where the
 * inspector opens), then those not served and why.
 */
async function index(
  res: ServerResponse,
  heap: () => Promise<StackValues[]>,
  unavailable: string | undefined,
): Promise<void> {
  const served = Object.keys(SERVED).filter((n) => !unavailable || n === "cmdline").sort();
  const notServed: [string, string][] = Object.entries(NOT_SERVED);
  if (unavailable) notServed.push(["heap", unavailable], ["profile", unavailable]);
  notServed.sort(([a], [b]) => a < b ? -1 : 1);
  const heapCount = unavailable ? 0 : (await heap()).length;
  const item = (n: string, desc: string) =>
    `<li><div class=profile-name>${escapeHtml(n)}: </div> ${escapeHtml(desc)}</li>\n`;
  const rows = served.map((n) =>
    `<tr><td>${n === "heap" ? heapCount : 0}</td><td><a href='${n}?debug=1'>${
      escapeHtml(n)
    }</a></td></tr>\n`
  ).join("");
  res.writeHead(200, {
    "content-type": "text/html; charset=utf-8",
    "x-content-type-options": "nosniff",
  });
  res.end(
    `<html>
<head>
<title>/debug/pprof/</title>
<style>
.profile-name{
	display:inline-block;
	width:6rem;
}
</style>
</head>
<body>
/debug/pprof/
<br>
<p>Set debug=1 as a query parameter to export in legacy text format</p>
<br>
Types of profiles available:
<table>
<thead><td>Count</td><td>Profile</td></thead>
${rows}</table>
<br>
<p>
Profile Descriptions:
<ul>
${served.map((n) => item(n, SERVED[n]!)).join("")}</ul>
</p>
<p>
Not served by this kubelet:
<ul>
${notServed.map(([n, why]) => item(n, why)).join("")}</ul>
</p>
</body>
</html>`,
  );
}
