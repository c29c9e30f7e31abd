import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { CriError, GrpcCode } from "../cri/connection.ts";
import { createLogger } from "../klog/klog.ts";
import { checkpointRoutes, type CheckpointRoutesOptions } from "./checkpoint.ts";
import { compilePattern, type KubeletRequest, type Route } from "./server.ts";

const POD: V1Pod = {
  metadata: { name: "web", namespace: "default", uid: "uid-1" },
  spec: {
    containers: [{ name: "app" }],
    initContainers: [{ name: "init" }],
    ephemeralContainers: [{ name: "debug" }],
  },
};

class FakeResponse {
  status = 0;
  headers: Record<string, string> = {};
  body = "";
  headersSent = false;
  writeHead(status: number, headers: Record<string, string> = {}) {
    this.status = status;
    this.headers = headers;
    this.headersSent = true;
    return this;
  }
  end(body = "") {
    this.body += body;
  }
  destroy() {}
}

function routes(over: Partial<CheckpointRoutesOptions> = {}) {
  const requests: api.CheckpointContainerRequest[] = [];
  const r = checkpointRoutes({
    getPodByName: (ns, name) => ns === "default" && name === "web" ? POD : undefined,
    findContainerId: (uid, name) => uid === "uid-1" && name === "app" ? "c-1" : undefined,
    runtime: {
      checkpointContainer: (req) => {
        requests.push(req);
        return Promise.resolve();
      },
    },
    checkpointsDir: "/var/lib/kubelet/checkpoints",
    now: () => new Date(Date.UTC(2026, 11, 6, 10, 59, 1, 500)),
    logger: createLogger({ write: () => {}, now: () => new Date(0), pid: 1 }),
    ...over,
  });
  return { r, requests };
}

async function call(rs: Route[], path: string, method = "POST"): Promise<FakeResponse> {
  const url = new URL(path, "https://kubelet");
  for (const route of rs) {
    const params = compilePattern(route.pattern)(url.pathname);
    if (!params || !route.handler) continue;
    if (route.methods && !route.methods.includes(method)) continue;
    const res = new FakeResponse();
    const req = { req: { method }, url, params, signal: new AbortController().signal };
    await route.handler(req as unknown as KubeletRequest, res as never);
    return res;
  }
  throw new Error(`no route for ${method} ${path}`);
}

Deno.test("checkpoint asks the runtime for an archive named as upstream's and answers its path", async () => {
  const { r, requests } = routes();
  const res = await call(r, "/checkpoint/default/web/app?timeout=10&timeout=20");
  assert.equal(res.status, 200);
  const location =
    "/var/lib/kubelet/checkpoints/checkpoint-web_default-app-2026-12-06T10:59:01Z.tar";
  assert.equal(res.body, JSON.stringify({ items: [location] }));
  assert.deepEqual(requests, [{ containerId: "c-1", location, timeout: 20n }]);
});

Deno.test("checkpoint answers upstream's errors", async () => {
  const { r, requests } = routes();
  const cases: [string, number, string][] = [
    ["/checkpoint/default/nope/app", 404, "pod does not exist"],
    ["/checkpoint/default/web/other", 404, "container other does not exist"],
    ["/checkpoint/default/web/app?timeout=soon", 404, "cannot parse value of timeout parameter"],
    // Known to the pod but not running: upstream's findContainer finds nothing.
    [
      "/checkpoint/default/web/init",
      500,
      "checkpointing of default/web/init failed (container init not found)",
    ],
  ];
  for (const [path, status, message] of cases) {
    const res = await call(r, path);
    assert.equal(res.status, status, path);
    assert.equal(res.body.trim(), message, path);
  }
  assert.equal(requests.length, 0);
  const unimplemented = routes({
    runtime: {
      checkpointContainer: () =>
        Promise.reject(
          new CriError(
            "RuntimeService/CheckpointContainer",
            GrpcCode.UNIMPLEMENTED,
            "method CheckpointContainer not implemented",
          ),
        ),
    },
  });
  const res = await call(unimplemented.r, "/checkpoint/default/web/app");
  assert.equal(res.status, 500);
  assert.equal(
    res.body.trim(),
    "checkpointing of default/web/app failed (rpc error: code = Unimplemented desc = method CheckpointContainer not implemented)",
  );
  assert.equal(
    (await call(r, "/checkpoint/default/web/app", "GET").catch((e) => e)).message,
    "no route for GET /checkpoint/default/web/app",
  );
});
