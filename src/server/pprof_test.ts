import assert from "node:assert/strict";
import { gunzipSync } from "node:zlib";
import { join } from "node:path";
import { INSPECTOR_SYS } from "../privilege/permission_set.ts";
import { BinaryReader, type WireType } from "@bufbuild/protobuf/wire";
import { createLogger } from "../klog/klog.ts";
import { type RequestAttributes, type Route, serveKubeletAPI } from "./server.ts";
import { nodeAuthorizerAttributes } from "./auth.ts";
import { debugPodRoutes } from "./debug.ts";
import { profilingRoutes, type ProfilingRoutesOptions } from "./pprof.ts";

/**
 * The kubelet API on loopback (plain HTTP, with the real attributes getter): "Bearer admin" may
 * reach every subresource, "Bearer viewer" every one but proxy; each decision asked is kept.
 */
async function serve(
  opts: Omit<ProfilingRoutesOptions, "signal">,
  ctrl: AbortController,
  extra: Route[] = [],
) {
  const asked: RequestAttributes[] = [];
  const server = await serveKubeletAPI({
    hostname: "127.0.0.1",
    port: 0,
    authenticator: {
      authenticate: (req) => {
        const token = req.headers.authorization?.replace(/^Bearer /, "");
        return Promise.resolve(
          token === "admin" || token === "viewer" ? { name: token, groups: [] } : undefined,
        );
      },
    },
    authorizer: {
      authorize: (a) => {
        asked.push(a);
        const allowed = a.user.name === "admin" || a.subresource !== "proxy";
        return Promise.resolve({ allowed, reason: "" });
      },
    },
    attributes: nodeAuthorizerAttributes("node-1"),
    routes: [...profilingRoutes({ ...opts, signal: ctrl.signal }), ...extra],
    logger: createLogger({ write: () => {}, pid: 1 }),
    signal: ctrl.signal,
  });
  /** GET `path` as `token`'s user, or with no credentials at all when it is null. */
  const get = async (path: string, token: string | null = "admin") => {
    const res = await fetch(`http://127.0.0.1:${server.port}${path}`, {
      headers: token === null ? {} : { authorization: `Bearer ${token}` },
      redirect: "manual",
    });
    return {
      status: res.status,
      headers: res.headers,
      body: new Uint8Array(await res.arrayBuffer()),
    };
  };
  return { get, asked, finished: server.finished };
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** A gzipped profile.proto's sample types and string table, read back by hand. */
function readProfile(gz: Uint8Array): { sampleTypes: string[]; strings: string[] } {
  assert.deepEqual([...gz.slice(0, 2)], [0x1f, 0x8b], "not gzip");
  const r = new BinaryReader(gunzipSync(gz));
  const strings: string[] = [];
  const types: [number, number][] = [];
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 6) strings.push(r.string());
    else if (field === 1) {
      const v = new BinaryReader(r.bytes());
      const t: [number, number] = [0, 0];
      while (v.pos < v.len) {
        const [f] = v.tag();
        t[f === 1 ? 0 : 1] = Number(v.int64());
      }
      types.push(t);
    } else r.skip(wire as WireType);
  }
  return { sampleTypes: types.map(([t, u]) => `${strings[t]}/${strings[u]}`), strings };
}

/** `go tool pprof -top` of the profile, or undefined when go is not on PATH (said loudly). */
async function pprofTop(gz: Uint8Array, what: string): Promise<string | undefined> {
  const dir = await Deno.makeTempDir({ prefix: "pprof-test-" });
  try {
    const file = join(dir, what);
    await Deno.writeFile(file, gz);
    let out: Deno.CommandOutput;
    try {
      out = await new Deno.Command("go", {
        args: ["tool", "pprof", "-top", file],
        stdout: "piped",
        stderr: "piped",
      }).output();
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
      console.warn(`SKIPPED: 'go tool pprof -top' on the ${what} profile: go is not on PATH`);
      return undefined;
    }
    assert.ok(out.success, `go tool pprof failed: ${text(out.stderr)}`);
    return text(out.stdout);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Burns CPU for `ms`; the CPU profile must name it. */
function spinForPprofTest(ms: number): number {
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
  return x;
}

/** Allocates about `mib` MiB of small arrays and keeps them; the heap profile must name it. */
function retainForPprofTest(mib: number): number[][] {
  const kept: number[][] = [];
  for (let i = 0; i < mib * 256; i++) kept.push(new Array(512).fill(i));
  return kept;
}

Deno.test("profilingRoutes answers 405 as upstream when enableProfilingHandler or enableDebuggingHandlers is off", async () => {
  for (
    const [opts, message] of [
      [{ profilingEnabled: false }, "profiling endpoint is disabled.\n"],
      [{ enabled: false }, "Debug endpoints are disabled.\n"],
      [{ enabled: false, profilingEnabled: true }, "Debug endpoints are disabled.\n"],
    ] as const
  ) {
    const ctrl = new AbortController();
    const { get, finished } = await serve(opts, ctrl);
    for (const path of ["/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/heap"]) {
      const r = await get(path);
      assert.equal(r.status, 405, path);
      assert.equal(text(r.body), message);
    }
    ctrl.abort();
    await finished;
  }
});

Deno.test("profilingRoutes is authorized as the proxy subresource of the node, as /debug/pods", async () => {
  const ctrl = new AbortController();
  const pods = debugPodRoutes({ timeline: () => undefined });
  const { get, asked, finished } = await serve({}, ctrl, pods);
  // Admitted, each reaches its handler: the command line, and a pod the kubelet does not know.
  for (
    const [path, status] of [["/debug/pprof/cmdline", 200], ["/debug/pods/ns/web", 404]] as const
  ) {
    asked.length = 0;
    assert.equal((await get(path, null)).status, 401);
    const denied = await get(path, "viewer");
    assert.equal(denied.status, 403);
    assert.equal(
      text(denied.body),
      "Forbidden (user=viewer, verb=get, resource=nodes, subresource(s)=[proxy])\n",
    );
    assert.deepEqual(
      asked.map((a) => [a.verb, a.resource, a.subresource, a.name]),
      [["get", "nodes", "proxy", "node-1"]],
    );
    assert.equal((await get(path, "admin")).status, status);
  }
  ctrl.abort();
  await finished;
});

Deno.test("profilingRoutes lists the profiles served, answers cmdline, and names what it does not serve", async () => {
  const ctrl = new AbortController();
  const { get, finished } = await serve({}, ctrl);
  const index = await get("/debug/pprof/");
  assert.equal(index.status, 200);
  assert.equal(index.headers.get("content-type"), "text/html; charset=utf-8");
  const links = [...text(index.body).matchAll(/<a href='([^']*)'>/g)].map((m) => m[1]);
  assert.deepEqual(links, ["cmdline?debug=1", "heap?debug=1", "profile?debug=1"]);
  assert.match(text(index.body), /<li><div class=profile-name>goroutine: <\/div> a JavaScript/);

  const redirect = await get("/debug/pprof");
  assert.equal(redirect.status, 301);
  assert.equal(redirect.headers.get("location"), "/debug/pprof/");

  const cmdline = await get("/debug/pprof/cmdline");
  assert.equal(cmdline.status, 200);
  const own = (await Deno.readTextFile("/proc/self/cmdline")).replace(/\0$/, "");
  assert.equal(text(cmdline.body), own);
  assert.ok(text(cmdline.body).split("\0").length > 1);

  for (const name of ["goroutine", "allocs", "block", "mutex", "threadcreate", "trace", "symbol"]) {
    const r = await get(`/debug/pprof/${name}`);
    assert.equal(r.status, 501, name);
    assert.equal(r.headers.get("x-go-pprof"), "1");
    assert.match(text(r.body), new RegExp(`^${name} is not available: .+\n$`));
  }
  const unknown = await get("/debug/pprof/nosuch");
  assert.equal(unknown.status, 404);
  assert.equal(text(unknown.body), "Unknown profile\n");
  ctrl.abort();
  await finished;
});

Deno.test("profilingRoutes serves a CPU profile go tool pprof reads, naming the function kept busy", async () => {
  const ctrl = new AbortController();
  const { get, finished } = await serve({}, ctrl);
  let settled = false;
  const profile = get("/debug/pprof/profile?seconds=1").finally(() => (settled = true));
  // Busy in slices, so the server takes the request and answers between them.
  const deadline = performance.now() + 15_000;
  let second: ReturnType<typeof get> | undefined;
  let spun = 0;
  while (!settled && performance.now() < deadline) {
    spinForPprofTest(20);
    spun += 20;
    if (spun === 300) second = get("/debug/pprof/profile?seconds=1");
    await new Promise((r) => setTimeout(r, 0));
  }
  const r = await profile;
  assert.equal(r.status, 200, text(r.body));
  assert.equal(r.headers.get("content-disposition"), 'attachment; filename="profile"');
  const busy = await second!;
  assert.equal(busy.status, 500);
  assert.equal(text(busy.body), "Could not enable CPU profiling: cpu profiling already in use\n");
  const p = readProfile(r.body);
  assert.deepEqual(p.sampleTypes, ["samples/count", "cpu/nanoseconds"]);
  assert.ok(p.strings.includes("spinForPprofTest"), p.strings.join(" "));
  assert.ok(!p.strings.includes("(idle)"));
  const top = await pprofTop(r.body, "cpu");
  if (top !== undefined) {
    assert.match(top, /Type: cpu/);
    assert.match(top, /spinForPprofTest/, top);
  }
  ctrl.abort();
  await finished;
});

Deno.test("profilingRoutes serves the live heap go tool pprof reads, naming the function that allocated", async () => {
  const ctrl = new AbortController();
  const { get, finished } = await serve({}, ctrl);
  // The first answer waits for the sampler to start; what is allocated after it is sampled.
  assert.equal((await get("/debug/pprof/heap")).status, 200);
  const kept = retainForPprofTest(32);
  const r = await get("/debug/pprof/heap");
  assert.equal(r.status, 200, text(r.body));
  const p = readProfile(r.body);
  assert.deepEqual(p.sampleTypes, ["samples/count", "inuse_space/bytes"]);
  assert.ok(p.strings.includes("retainForPprofTest"), p.strings.join(" "));
  const top = await pprofTop(r.body, "heap");
  if (top !== undefined) {
    assert.match(top, /Type: inuse_space/);
    assert.match(top, /retainForPprofTest/, top);
  }
  const debug = await get("/debug/pprof/heap?debug=1");
  assert.equal(debug.headers.get("content-type"), "text/plain; charset=utf-8");
  assert.match(text(debug.body), /^heap profile: \d+: \d+ @ heap\/524288\n/);
  assert.match(text(debug.body), /#\tretainForPprofTest\t.*pprof_test\.ts:\d+/);

  // ?seconds=N: what was allocated during those seconds.
  let settled = false;
  const delta = get("/debug/pprof/heap?seconds=2").finally(() => (settled = true));
  // Midway: a second either side for the server to take the first and the second look.
  await new Promise((r) => setTimeout(r, 1000));
  assert.ok(!settled);
  const more = retainForPprofTest(16);
  const d = await delta;
  assert.equal(d.status, 200, text(d.body));
  assert.equal(d.headers.get("content-disposition"), 'attachment; filename="heap-delta"');
  assert.ok(readProfile(d.body).strings.includes("retainForPprofTest"));
  assert.equal((await get("/debug/pprof/heap?seconds=x")).status, 400);
  assert.ok(kept.length > 0 && more.length > 0);
  ctrl.abort();
  await finished;
});

/** What the routes answer for `paths` in a Worker with `sys` (and no other) permissions. */
async function inWorker(sys: string[], paths: string[]): Promise<[number, string][]> {
  const pprof = new URL("./pprof.ts", import.meta.url).href;
  const code = `
    import { profilingRoutes } from ${JSON.stringify(pprof)};
    const ctrl = new AbortController();
    const [route] = profilingRoutes({ signal: ctrl.signal });
    const out = [];
    for (const path of ${JSON.stringify(paths)}) {
      const res = { status: 0, body: "", writeHead(s) { this.status = s; }, end(b) { this.body += b ? (typeof b === "string" ? b : "<" + b.length + " bytes>") : ""; } };
      await route.handler({ url: new URL("http://k" + path), req: { method: "GET" }, signal: ctrl.signal }, res);
      out.push([res.status, res.body]);
    }
    ctrl.abort();
    self.postMessage(out);
  `;
  const dir = await Deno.makeTempDir({ prefix: "pprof-test-" });
  const module = join(dir, "sandboxed.js");
  await Deno.writeTextFile(module, code);
  const worker = new Worker(new URL(`file://${module}`), {
    type: "module",
    deno: {
      permissions: {
        read: [new URL("../..", import.meta.url).pathname, dir],
        import: true,
        sys,
        net: false,
        env: false,
        run: false,
        write: false,
        ffi: false,
      },
    },
  } as WorkerOptions);
  try {
    return await new Promise<[number, string][]>((resolve, reject) => {
      worker.onmessage = (e) => resolve(e.data);
      worker.onerror = (e) => {
        e.preventDefault();
        reject(e.error ?? new Error(e.message));
      };
    });
  } finally {
    worker.terminate();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("profilingRoutes answers 501 naming the missing permission where the inspector cannot open", async () => {
  // A Worker with sys permissions but not "inspector".
  const [profile, heap, index] = await inWorker(["hostname"], [
    "/debug/pprof/profile",
    "/debug/pprof/heap",
    "/debug/pprof/",
  ]);
  for (const [name, r] of [["profile", profile], ["heap", heap]] as const) {
    assert.equal(r?.[0], 501);
    assert.match(
      r?.[1] ?? "",
      new RegExp(`^${name} is not available: the V8 inspector cannot be opened .*"inspector"`),
    );
  }
  assert.equal(index?.[0], 200);
  assert.deepEqual([...(index?.[1] ?? "").matchAll(/<a href='([^']*)'>/g)].map((m) => m[1]), [
    "cmdline?debug=1",
  ]);
});

Deno.test("profilingRoutes profiles in the agent's sandbox, whose set grants the inspector", async () => {
  // The sys kind the agent's permission set adds while /debug/pprof/ is served.
  const [profile, heap] = await inWorker(["hostname", INSPECTOR_SYS], [
    "/debug/pprof/profile?seconds=1",
    "/debug/pprof/heap",
  ]);
  assert.equal(profile?.[0], 200, profile?.[1]);
  assert.equal(heap?.[0], 200, heap?.[1]);
});
