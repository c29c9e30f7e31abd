import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import type { KubeletRequest } from "./server.ts";
import { debugFlagsRoutes, debugPodRoutes } from "./debug.ts";
import type { PodTimeline } from "../pod_startup_latency_tracker.ts";

const T0 = Date.UTC(2026, 0, 1, 12);
const TIMELINE: PodTimeline = {
  namespace: "ns",
  name: "web",
  uid: "u1",
  entries: [
    { phase: "seen", at: T0 },
    { phase: "admitted", at: T0 + 3 },
    { phase: "containerStarted", container: "app", at: T0 + 1_250 },
  ],
};

async function get(enabled: boolean | undefined, ns: string, name: string) {
  const [route] = debugPodRoutes({
    timeline: (n, p) => (n === "ns" && p === "web" ? TIMELINE : undefined),
    enabled,
  });
  assert.equal(route?.pattern, "/debug/pods/:namespace/:name");
  const out = { status: 0, body: "", headersSent: false };
  const res = {
    writeHead(status: number) {
      out.status = status;
      out.headersSent = true;
      return this;
    },
    end(chunk?: string) {
      out.body += chunk ?? "";
    },
    get headersSent() {
      return out.headersSent;
    },
  };
  await route!.handler!(
    { params: { namespace: ns, name } } as unknown as KubeletRequest,
    res as unknown as ServerResponse,
  );
  return out;
}

Deno.test("debugPodRoutes answers a known pod's phases with times and durations from the first", async () => {
  const r = await get(undefined, "ns", "web");
  assert.equal(r.status, 200);
  assert.deepEqual(JSON.parse(r.body), {
    namespace: "ns",
    name: "web",
    uid: "u1",
    phases: [
      { phase: "seen", time: "2026-01-01T12:00:00.000Z", sinceFirst: "0s", sinceFirstMs: 0 },
      { phase: "admitted", time: "2026-01-01T12:00:00.003Z", sinceFirst: "3ms", sinceFirstMs: 3 },
      {
        phase: "containerStarted",
        container: "app",
        time: "2026-01-01T12:00:01.250Z",
        sinceFirst: "1.25s",
        sinceFirstMs: 1250,
      },
    ],
  });
});

Deno.test("debugPodRoutes answers 404 for an unknown pod and 405 when debugging handlers are off", async () => {
  const missing = await get(true, "ns", "gone");
  assert.equal(missing.status, 404);
  assert.match(missing.body, /pod ns\/gone is not known to this kubelet/);
  const off = await get(false, "ns", "web");
  assert.equal(off.status, 405);
  assert.equal(off.body, "Debug endpoints are disabled.\n");
});

async function putV(
  body: string,
  opts: { enabled?: boolean; flagsEnabled?: boolean; method?: string } = {},
) {
  const set: number[] = [];
  const [route] = debugFlagsRoutes({
    enabled: opts.enabled,
    flagsEnabled: opts.flagsEnabled,
    setVerbosity: (v) => set.push(v),
  });
  assert.equal(route?.pattern, "/debug/flags/v");
  const out = { status: 0, body: "", headersSent: false };
  const res = {
    writeHead(status: number) {
      out.status = status;
      out.headersSent = true;
      return this;
    },
    end(chunk?: string) {
      out.body += chunk ?? "";
    },
    get headersSent() {
      return out.headersSent;
    },
  };
  const req = {
    method: opts.method ?? "PUT",
    async *[Symbol.asyncIterator]() {
      yield new TextEncoder().encode(body);
    },
  };
  await route!.handler!({ req } as unknown as KubeletRequest, res as unknown as ServerResponse);
  return { ...out, set };
}

Deno.test("debugFlagsRoutes sets the verbosity as upstream's /debug/flags/v", async () => {
  assert.deepEqual(await putV("4"), {
    status: 200,
    body: "successfully set klog.logging.verbosity to 4\n",
    headersSent: true,
    set: [4],
  });
  const bad = await putV("four");
  assert.equal(bad.status, 400);
  assert.equal(bad.body, 'strconv.ParseUint: parsing "four": invalid syntax\n');
  assert.deepEqual(bad.set, []);
  const big = await putV("3000000000");
  assert.equal(
    big.body,
    'failed set klog.logging.verbosity 3000000000: strconv.ParseInt: parsing "3000000000": value out of range\n',
  );
  assert.equal((await putV("4", { method: "GET" })).status, 406);
  const off = await putV("4", { flagsEnabled: false });
  assert.equal(off.status, 405);
  assert.match(off.body, /^flags endpoint is disabled\./);
  assert.equal((await putV("4", { enabled: false })).status, 405);
});
