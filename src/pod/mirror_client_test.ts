import assert from "node:assert/strict";
import type { V1DeleteOptions, V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeApiError, KubeClient } from "../client/kube_client.ts";
import {
  getPodSource,
  getStaticPodHash,
  isMirrorPod,
  isMirrorPodOf,
  isStaticPod,
  MirrorClient,
  MirrorPodError,
  parsePodFullName,
  podFullName,
} from "./mirror_client.ts";
import {
  CONFIG_HASH_ANNOTATION,
  CONFIG_MIRROR_ANNOTATION,
  CONFIG_SOURCE_ANNOTATION,
} from "../config/pod_config.ts";

const status = (code: number, reason: string, message: string) =>
  Response.json({ kind: "Status", code, reason, message }, { status: code });

/** A loopback apiserver holding pods; `failNext` answers the next request with that status. */
function podServer() {
  const pods = new Map<string, V1Pod>();
  const state = {
    requests: [] as string[],
    bodies: [] as unknown[],
    failNext: 0,
  };
  let uid = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    state.requests.push(`${req.method} ${url.pathname}`);
    const body = req.body ? await req.json() : undefined;
    state.bodies.push(structuredClone(body));
    if (state.failNext) {
      const code = state.failNext;
      state.failNext = 0;
      return status(code, "InternalError", "etcd is gone");
    }
    const m = url.pathname.match(/^\/api\/v1\/namespaces\/([^/]+)\/pods(?:\/([^/]+))?$/);
    if (!m) return status(404, "NotFound", "no such path");
    const [, ns, name] = m;
    if (req.method === "POST") {
      const p = body as V1Pod;
      const key = `${ns}/${p.metadata?.name}`;
      if (pods.has(key)) return status(409, "AlreadyExists", `pods "${p.metadata?.name}" exists`);
      p.metadata = { ...p.metadata, uid: `server-${++uid}`, resourceVersion: "1" };
      pods.set(key, p);
      return Response.json(p, { status: 201 });
    }
    const key = `${ns}/${name}`;
    const existing = pods.get(key);
    if (!existing) return status(404, "NotFound", `pods "${name}" not found`);
    if (req.method === "GET") return Response.json(existing);
    if (req.method === "DELETE") {
      const opts = body as V1DeleteOptions | undefined;
      const want = opts?.preconditions?.uid;
      if (want !== undefined && want !== existing.metadata?.uid) {
        return status(409, "Conflict", "Precondition failed: UID in precondition");
      }
      pods.delete(key);
      return Response.json(existing);
    }
    return status(405, "MethodNotAllowed", req.method);
  });
  const addr = server.addr as Deno.NetAddr;
  return { server, pods, state, url: `http://127.0.0.1:${addr.port}` };
}

function setup(nodeUID: string | undefined) {
  const s = podServer();
  const lines: string[] = [];
  const client = new KubeClient({
    config: { server: s.url, insecureSkipTLSVerify: false, source: "test" },
    clock: new FakeClock(),
    qps: -1,
    userAgent: "test",
  });
  const mirrors = new MirrorClient({
    client,
    nodeName: "node-a",
    getNodeUID: () => nodeUID,
    logger: createLogger({
      verbosity: 2,
      write: (l) => lines.push(l),
      now: () => new Date(0),
      pid: 1,
    }),
  });
  const close = async () => {
    client.close();
    await s.server.shutdown();
  };
  return { s, lines, mirrors, close };
}

function staticPod(hash = "abc123"): V1Pod {
  return {
    metadata: {
      name: "etcd-node-a",
      namespace: "kube-system",
      uid: "static-uid",
      annotations: { [CONFIG_SOURCE_ANNOTATION]: "file", [CONFIG_HASH_ANNOTATION]: hash },
    },
    spec: { nodeName: "node-a", containers: [{ name: "etcd", image: "etcd:3.6" }] },
    status: { phase: "Running" },
  };
}

function annotated(annotations: Record<string, string>, name = "p", ns = "ns"): V1Pod {
  return { metadata: { name, namespace: ns, annotations } };
}

Deno.test("isStaticPod and isMirrorPod tell pods apart by their annotations", () => {
  const cases: [string, V1Pod, boolean, boolean][] = [
    ["file pod", annotated({ [CONFIG_SOURCE_ANNOTATION]: "file" }), true, false],
    ["http pod", annotated({ [CONFIG_SOURCE_ANNOTATION]: "http" }), true, false],
    ["api pod", annotated({ [CONFIG_SOURCE_ANNOTATION]: "api" }), false, false],
    ["no source", annotated({}), false, false],
    ["no metadata", {}, false, false],
    [
      "mirror",
      annotated({ [CONFIG_SOURCE_ANNOTATION]: "api", [CONFIG_MIRROR_ANNOTATION]: "h" }),
      false,
      true,
    ],
    ["mirror with empty hash", annotated({ [CONFIG_MIRROR_ANNOTATION]: "" }), false, true],
  ];
  for (const [name, p, isStatic, isMirror] of cases) {
    assert.equal(isStaticPod(p), isStatic, `${name}: isStaticPod`);
    assert.equal(isMirrorPod(p), isMirror, `${name}: isMirrorPod`);
  }
});

Deno.test("getPodSource reads the source annotation and throws without one", () => {
  assert.equal(getPodSource(annotated({ [CONFIG_SOURCE_ANNOTATION]: "http" })), "http");
  assert.throws(() => getPodSource(annotated({})), MirrorPodError);
});

Deno.test("podFullName and parsePodFullName round-trip <name>_<namespace>", () => {
  assert.equal(podFullName(annotated({}, "etcd", "kube-system")), "etcd_kube-system");
  assert.deepEqual(parsePodFullName("etcd_kube-system"), {
    name: "etcd",
    namespace: "kube-system",
  });
  for (const bad of ["etcd", "_ns", "name_", "a_b_c", ""]) {
    assert.throws(() => parsePodFullName(bad), MirrorPodError, bad);
  }
});

Deno.test("isMirrorPodOf compares name, namespace and hash", () => {
  const pod = annotated({ [CONFIG_HASH_ANNOTATION]: "h1" }, "etcd", "kube-system");
  const cases: [string, V1Pod, boolean][] = [
    ["same hash", annotated({ [CONFIG_MIRROR_ANNOTATION]: "h1" }, "etcd", "kube-system"), true],
    ["other hash", annotated({ [CONFIG_MIRROR_ANNOTATION]: "h2" }, "etcd", "kube-system"), false],
    ["not a mirror", annotated({}, "etcd", "kube-system"), false],
    ["other name", annotated({ [CONFIG_MIRROR_ANNOTATION]: "h1" }, "etcd2", "kube-system"), false],
    ["other namespace", annotated({ [CONFIG_MIRROR_ANNOTATION]: "h1" }, "etcd", "default"), false],
  ];
  for (const [name, mirror, want] of cases) assert.equal(isMirrorPodOf(mirror, pod), want, name);
  assert.equal(getStaticPodHash(pod), "h1");
  assert.equal(getStaticPodHash(annotated({})), "");
});

Deno.test("MirrorClient createMirrorPod posts a node-owned copy carrying the config hash", async () => {
  const { s, mirrors, close } = setup("node-uid-1");
  try {
    const pod = staticPod();
    const before = structuredClone(pod);
    await mirrors.createMirrorPod(pod);
    assert.deepEqual(pod, before, "the static pod itself is left alone");
    assert.deepEqual(s.state.requests, ["POST /api/v1/namespaces/kube-system/pods"]);
    const sent = s.state.bodies[0] as V1Pod;
    assert.deepEqual(sent.metadata, {
      name: "etcd-node-a",
      namespace: "kube-system",
      annotations: {
        [CONFIG_SOURCE_ANNOTATION]: "file",
        [CONFIG_HASH_ANNOTATION]: "abc123",
        [CONFIG_MIRROR_ANNOTATION]: "abc123",
      },
      ownerReferences: [{
        apiVersion: "v1",
        kind: "Node",
        name: "node-a",
        uid: "node-uid-1",
        controller: true,
      }],
    });
    assert.deepEqual(sent.spec, pod.spec);
    assert.equal(sent.status, undefined);
  } finally {
    await close();
  }
});

Deno.test("MirrorClient createMirrorPod accepts an existing mirror of the same hash only", async () => {
  const { s, mirrors, close } = setup("node-uid-1");
  try {
    await mirrors.createMirrorPod(staticPod("h1"));
    await mirrors.createMirrorPod(staticPod("h1"));
    assert.deepEqual(s.state.requests.slice(1), [
      "POST /api/v1/namespaces/kube-system/pods",
      "GET /api/v1/namespaces/kube-system/pods/etcd-node-a",
    ]);
    await assert.rejects(
      mirrors.createMirrorPod(staticPod("h2")),
      (e: unknown) => e instanceof KubeApiError && e.code === 409 && e.reason === "AlreadyExists",
    );
  } finally {
    await close();
  }
});

Deno.test("MirrorClient createMirrorPod fails before any request while the node UID is unknown", async () => {
  const { s, mirrors, close } = setup(undefined);
  try {
    await assert.rejects(
      mirrors.createMirrorPod(staticPod()),
      (e: unknown) =>
        e instanceof MirrorPodError &&
        e.message === "failed to get node UID: UID unset for node node-a",
    );
    assert.deepEqual(s.state.requests, []);
  } finally {
    await close();
  }
});

Deno.test("MirrorClient deleteMirrorPod deletes with grace 0 and the UID precondition", async () => {
  const { s, mirrors, lines, close } = setup("node-uid-1");
  try {
    await mirrors.createMirrorPod(staticPod());
    const uid = s.pods.get("kube-system/etcd-node-a")?.metadata?.uid;
    assert.equal(await mirrors.deleteMirrorPod("etcd-node-a_kube-system", "other-uid"), false);
    assert.equal(s.pods.size, 1, "a mirror with another UID stays");
    assert.equal(await mirrors.deleteMirrorPod("etcd-node-a_kube-system", uid), true);
    assert.equal(s.pods.size, 0);
    assert.deepEqual(s.state.bodies.at(-1), {
      apiVersion: "v1",
      kind: "DeleteOptions",
      gracePeriodSeconds: 0,
      preconditions: { uid },
    });
    assert.equal(await mirrors.deleteMirrorPod("etcd-node-a_kube-system", undefined), false);
    assert.equal(lines.filter((l) => l.startsWith("E")).length, 0, lines.join("\n"));
    assert.equal(lines.filter((l) => l.includes('"Deleting a mirror pod"')).length, 3);
  } finally {
    await close();
  }
});

Deno.test("MirrorClient deleteMirrorPod logs other failures and answers false", async () => {
  const { s, mirrors, lines, close } = setup("node-uid-1");
  try {
    await mirrors.createMirrorPod(staticPod());
    s.state.failNext = 500;
    assert.equal(await mirrors.deleteMirrorPod("etcd-node-a_kube-system", undefined), false);
    const errors = lines.filter((l) => l.startsWith("E"));
    assert.equal(errors.length, 1, lines.join("\n"));
    assert.match(
      errors[0] ?? "",
      /"Failed deleting a mirror pod" err=".*500 InternalError: etcd is gone" pod="kube-system\/etcd-node-a"/,
    );
    await assert.rejects(mirrors.deleteMirrorPod("no-namespace", undefined), MirrorPodError);
  } finally {
    await close();
  }
});
