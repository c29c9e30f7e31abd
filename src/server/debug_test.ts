import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import type { KubeletRequest } from "./server.ts";
import { debugPodRoutes } from "./debug.ts";
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
