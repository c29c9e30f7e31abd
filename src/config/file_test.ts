import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import {
  CONFIG_FIRST_SEEN_ANNOTATION_KEY,
  CONFIG_HASH_ANNOTATION_KEY,
  CONFIG_SOURCE_ANNOTATION_KEY,
  type FsWatch,
  StaticPodFileSource,
  type StaticPodFileSourceOptions,
  staticPodFromManifest,
  StaticPodManifestError,
  type StaticPodProblem,
} from "./file.ts";
import { createLogger } from "../klog/klog.ts";
import { fnv128a } from "./_static_pod_defaults.ts";

const manifest = (name: string, image = "nginx:1.27") =>
  `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
spec:
  containers:
  - name: main
    image: ${image}
`;

/** Polls for a condition with a bound: file I/O and inotify happen in real time. */
async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A temp directory of manifests and a source over it that records updates and log lines. */
async function harness(
  files: Record<string, string>,
  opts: Partial<StaticPodFileSourceOptions> = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "static-pods-" });
  for (const [name, text] of Object.entries(files)) {
    await Deno.writeTextFile(`${dir}/${name}`, text);
  }
  const updates: Array<{ pods: V1Pod[]; problems: StaticPodProblem[] }> = [];
  const lines: string[] = [];
  const clock = new FakeClock();
  const source = new StaticPodFileSource({
    path: dir,
    nodeName: "node-1",
    fileCheckFrequencyMs: 20_000,
    clock,
    logger: createLogger({ write: (l) => lines.push(l), pid: 1 }),
    onUpdate: (pods, problems) => updates.push({ pods, problems }),
    ...opts,
  });
  return {
    dir,
    updates,
    lines,
    clock,
    source,
    names: (i: number) => updates[i]!.pods.map((p) => p.metadata?.name),
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
  };
}

/** An inotify stand-in that the test feeds events into. */
class FakeWatch implements FsWatch {
  #events: Deno.FsEvent[] = [];
  #wake: (() => void) | undefined;
  #closed = false;

  push(event: Deno.FsEvent): void {
    this.#events.push(event);
    this.#wake?.();
  }

  close(): void {
    this.#closed = true;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Deno.FsEvent> {
    while (!this.#closed) {
      const event = this.#events.shift();
      if (event) yield event;
      else await new Promise<void>((r) => this.#wake = r);
    }
  }
}

const noWatch = () => {
  throw new Error("inotify: too many open instances");
};

// ---- staticPodFromManifest ---------------------------------------------------------------------

Deno.test("staticPodFromManifest applies common.go applyDefaults for a file source", () => {
  const file = "/etc/kubernetes/manifests/web.yaml";
  const { pod } = staticPodFromManifest(manifest("web"), file, "node-1");
  const uid = pod.metadata?.uid;
  assert.equal(pod.metadata?.name, "web-node-1");
  assert.equal(pod.metadata?.namespace, "default");
  assert.equal(pod.spec?.nodeName, "node-1");
  assert.deepEqual(pod.metadata?.annotations, { [CONFIG_HASH_ANNOTATION_KEY]: uid });
  assert.deepEqual(pod.spec?.tolerations, [{ operator: "Exists", effect: "NoExecute" }]);
  assert.equal(pod.status?.phase, "Pending");
  // The name suffix is lowercased, but spec.nodeName is validated as given, as upstream.
  assert.throws(() => staticPodFromManifest(manifest("web"), file, "Node-1"), /'spec\.nodeName'/);
});

Deno.test("staticPodFromManifest applies the v1 scheme defaults decoding gives a pod", () => {
  const text = `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: kube-system}
spec:
  hostNetwork: yes
  tolerations: [{operator: Exists, effect: NoExecute}]
  containers:
  - name: a
    image: registry:5000/app
    ports: [{containerPort: 8080}]
    resources: {limits: {cpu: 1, memory: 1Gi}, requests: {cpu: 500m}}
    livenessProbe: {httpGet: {port: 8080}}
  - {name: b, image: "app:latest"}
  - {name: c, image: "app:v2"}
  - {name: d, image: "app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
  volumes:
  - name: empty
  - name: conf
    hostPath: {path: /etc/conf}
  - name: data
    image: {reference: "data:1"}
  - name: latest
    image: {reference: data}
    `;
  const { pod } = staticPodFromManifest(text, "/m/web.yaml", "node-1");
  const spec = pod.spec!;
  assert.equal(pod.metadata?.namespace, "kube-system");
  assert.equal(spec.restartPolicy, "Always");
  assert.equal(spec.dnsPolicy, "ClusterFirst");
  assert.equal(spec.terminationGracePeriodSeconds, 30);
  assert.equal(spec.schedulerName, "default-scheduler");
  assert.equal(spec.enableServiceLinks, true);
  assert.deepEqual(spec.securityContext, {});
  // The toleration is already there, so it is not added twice.
  assert.deepEqual(spec.tolerations, [{ operator: "Exists", effect: "NoExecute" }]);
  const [a, b, c, d] = spec.containers;
  assert.deepEqual(
    [a, b, c, d].map((x) => x?.imagePullPolicy),
    ["Always", "Always", "IfNotPresent", "IfNotPresent"],
  );
  assert.deepEqual(a?.ports, [{ containerPort: 8080, hostPort: 8080, protocol: "TCP" }]);
  assert.deepEqual(a?.resources, {
    limits: { cpu: "1", memory: "1Gi" },
    requests: { cpu: "500m", memory: "1Gi" },
  });
  assert.deepEqual(a?.livenessProbe, {
    httpGet: { port: 8080, path: "/", scheme: "HTTP" },
    timeoutSeconds: 1,
    periodSeconds: 10,
    successThreshold: 1,
    failureThreshold: 3,
  });
  assert.equal(a?.terminationMessagePath, "/dev/termination-log");
  assert.equal(a?.terminationMessagePolicy, "File");
  assert.deepEqual(spec.volumes, [
    { name: "empty", emptyDir: {} },
    { name: "conf", hostPath: { path: "/etc/conf", type: "" } },
    { name: "data", image: { reference: "data:1", pullPolicy: "IfNotPresent" } },
    { name: "latest", image: { reference: "data", pullPolicy: "Always" } },
  ]);
});

Deno.test("staticPodFromManifest hashes the decoded pod, the node and the file into the UID", () => {
  const uid = (text: string, file = "/etc/kubernetes/manifests/web.yaml", node = "node-1") =>
    staticPodFromManifest(text, file, node).pod.metadata?.uid;
  // FNV-128a (Go's hash/fnv) over the sorted-key JSON of the defaulted pod, then
  // "host:node-1" and "file:/etc/kubernetes/manifests/web.yaml", computed with Go.
  assert.equal(uid(manifest("web")), "bb2c8ef0e4d215ebe5271602491fba91");
  // The same pod in other words: JSON, comments, key order.
  const json = JSON.stringify({
    kind: "Pod",
    apiVersion: "v1",
    spec: { containers: [{ image: "nginx:1.27", name: "main" }] },
    metadata: { name: "web" },
  });
  assert.equal(uid(json), "bb2c8ef0e4d215ebe5271602491fba91");
  assert.equal(uid(`# web server\n${manifest("web")}`), "bb2c8ef0e4d215ebe5271602491fba91");
  // Anything else that enters the hash changes it.
  assert.notEqual(uid(manifest("web", "nginx:1.28")), "bb2c8ef0e4d215ebe5271602491fba91");
  assert.notEqual(
    uid(manifest("web"), "/etc/kubernetes/manifests/other.yaml"),
    "bb2c8ef0e4d215ebe5271602491fba91",
  );
  assert.notEqual(uid(manifest("web"), undefined, "node-2"), "bb2c8ef0e4d215ebe5271602491fba91");
  // A UID in the manifest is kept, and is the config hash.
  const given = manifest("web").replace("  name: web\n", "  name: web\n  uid: abc-123\n");
  const { pod } = staticPodFromManifest(given, "/m/web.yaml", "node-1");
  assert.equal(pod.metadata?.uid, "abc-123");
  assert.equal(pod.metadata?.annotations?.[CONFIG_HASH_ANNOTATION_KEY], "abc-123");
});

Deno.test("fnv128a matches Go's hash/fnv New128a", () => {
  assert.equal(fnv128a(""), "6c62272e07bb014262b821756295c58d");
  assert.equal(fnv128a("hello world"), "6c155799fdc8eec4b91523808e7726b7");
  assert.equal(fnv128a("héllo ✓ 𝄞"), "041fc55729d258b701ff8c1e70d36938");
});

Deno.test("staticPodFromManifest drops unknown fields and later YAML documents, naming them", () => {
  const text = `apiVersion: v1
kind: Pod
metadat: {}
metadata:
  name: web
  colour: blue
spec:
  bogus: 1
  containers:
  - name: main
    image: nginx
    extra: 2
---
kind: Pod
`;
  const { pod, ignored } = staticPodFromManifest(text, "/m/web.yaml", "node-1");
  assert.deepEqual(ignored, [
    "YAML document 2",
    "metadat",
    "metadata.colour",
    "spec.bogus",
    "spec.containers[0].extra",
  ]);
  assert.equal(pod.metadata?.name, "web-node-1");
  assert.equal("bogus" in pod.spec!, false);
});

Deno.test("staticPodFromManifest names the file, line, field and value of a bad manifest", () => {
  const cases: Array<[string, number | undefined, string, unknown, RegExp]> = [
    [
      manifest("web").replace("name: main", "name: Main_1"),
      7,
      "spec.containers[0].name",
      "Main_1",
      /RFC 1123 label/,
    ],
    [
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers: []\n",
      6,
      "spec.containers",
      undefined,
      /is required/,
    ],
    ["apiVersion: v1\nkind: PodList\nitems: []\n", 2, "kind", "PodList", /exactly one Pod/],
    ["apiVersion: apps/v1\nkind: Pod\n", 1, "apiVersion", "apps/v1", /apiVersion 'v1'/],
    ["apiVersion: v1\nkind: Pod\nspec: {}\n", 1, "metadata.name", undefined, /name is needed/],
    [manifest("web") + "    ports: 80\n", 9, "spec.containers[0].ports", 80, /must be a list/],
    [
      manifest("web").replace("nginx:1.27", "1.0"),
      8,
      "spec.containers[0].image",
      1,
      /must be a string/,
    ],
    [
      manifest("web") + "    volumeMounts: [{name: data, mountPath: /data}]\n",
      9,
      "spec.containers[0].volumeMounts[0].name",
      "data",
      /spec\.volumes/,
    ],
    [
      manifest("web") + "  serviceAccountName: default\n",
      9,
      "spec.serviceAccountName",
      "default",
      /may not reference serviceaccounts/,
    ],
    [
      manifest("web") + "  volumes: [{name: s, secret: {secretName: tls}}]\n",
      9,
      "spec.volumes[0].secret",
      undefined,
      /may not reference secrets/,
    ],
    [
      manifest("web") + "  volumes: [{name: data, image: {pullPolicy: Always}}]\n",
      9,
      "spec.volumes[0].image.reference",
      undefined,
      /is required/,
    ],
    [
      manifest("web") +
      "  volumes: [{name: data, image: {reference: data:1, pullPolicy: Sometimes}}]\n",
      9,
      "spec.volumes[0].image.pullPolicy",
      "Sometimes",
      /must be one of 'Always', 'IfNotPresent', 'Never'/,
    ],
    [
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n   oops: [\n",
      4,
      "",
      undefined,
      /not valid YAML/,
    ],
    ['{"apiVersion": "v1",\n "kind": "Pod",\n', 3, "", undefined, /not valid JSON/],
    ["# nothing here\n", undefined, "", undefined, /is empty/],
  ];
  for (const [text, line, path, value, problem] of cases) {
    assert.throws(() => staticPodFromManifest(text, "/m/web.yaml", "node-1"), (err) => {
      assert.ok(err instanceof StaticPodManifestError, String(err));
      assert.deepEqual([err.file, err.line, err.path, err.value], [
        "/m/web.yaml",
        line,
        path,
        value,
      ], err.message);
      assert.match(err.problem, problem);
      return true;
    });
  }
});

Deno.test("staticPodFromManifest reports one error for a manifest with several problems", () => {
  const text = manifest("web").replace(
    "  - name: main\n    image: nginx:1.27\n",
    "  - {}\n  - {name: main}\n",
  );
  assert.throws(() => staticPodFromManifest(text, "/m/web.yaml", "node-1"), (err) => {
    assert.ok(err instanceof StaticPodManifestError);
    assert.equal(err.path, "spec.containers[0].name");
    assert.match(
      err.message,
      /\(and 2 more: 'spec\.containers\[0\]\.image', 'spec\.containers\[1\]\.image'\)/,
    );
    return true;
  });
});

// ---- StaticPodFileSource -----------------------------------------------------------------------

Deno.test("StaticPodFileSource reads every manifest of a directory and skips a bad one with one error", async () => {
  await using h = await harness({
    "a.yaml": manifest("a"),
    "b.json": JSON.stringify({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "b" },
      spec: { containers: [{ name: "main", image: "busybox" }] },
    }),
    "c.yaml": manifest("c").replace("name: main", "name: Main"),
    ".d.yaml.swp": "not a manifest",
  });
  await Deno.mkdir(`${h.dir}/old`);
  const first = await h.source.scan();
  assert.deepEqual(first.pods.map((p) => p.metadata?.name), ["a-node-1", "b-node-1"]);
  assert.equal(first.problems.length, 1);
  const [problem] = first.problems;
  assert.deepEqual(
    [problem?.file, problem?.line, problem?.path, problem?.value],
    [`${h.dir}/c.yaml`, 7, "spec.containers[0].name", "Main"],
  );
  // Each pod is what staticPodFromManifest makes of its file alone, plus PodConfig's annotations.
  const alone = staticPodFromManifest(manifest("a"), `${h.dir}/a.yaml`, "node-1").pod;
  const a = first.pods[0]!;
  assert.equal(a.metadata?.annotations?.[CONFIG_SOURCE_ANNOTATION_KEY], "file");
  assert.equal(
    Date.parse(a.metadata!.annotations![CONFIG_FIRST_SEEN_ANNOTATION_KEY]!),
    h.clock.now(),
  );
  delete a.metadata!.annotations![CONFIG_SOURCE_ANNOTATION_KEY];
  delete a.metadata!.annotations![CONFIG_FIRST_SEEN_ANNOTATION_KEY];
  assert.deepEqual(a, alone);

  assert.equal(h.updates.length, 1);
  assert.deepEqual(h.names(0), ["a-node-1", "b-node-1"]);
  const errors = h.lines.filter((l) => l.startsWith("E"));
  assert.equal(errors.length, 2, errors.join("\n"));
  assert.match(
    errors[0]!,
    /"Provided manifest path is a directory, not recursing into manifest path".*\/old"/,
  );
  assert.match(
    errors[1]!,
    /"Could not process manifest file" err=".*c\.yaml:7: field 'spec\.containers\[0\]\.name'/,
  );

  // The same directory again: no update and no repeated error.
  await h.source.scan();
  assert.equal(h.updates.length, 1);
  assert.equal(h.lines.filter((l) => l.startsWith("E")).length, 2);
});

Deno.test("StaticPodFileSource emits only when the set changes and keeps the first-seen time", async () => {
  await using h = await harness({ "a.yaml": manifest("a"), "b.yaml": manifest("b") });
  await h.source.scan();
  const seen = h.updates[0]!.pods[0]!.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION_KEY];
  assert.equal(Date.parse(seen!), h.clock.now());
  h.clock.step(60_000);
  const again = await h.source.scan();
  assert.equal(h.updates.length, 1);
  assert.equal(again.pods[0]!.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION_KEY], seen);

  await Deno.writeTextFile(`${h.dir}/a.yaml`, manifest("a", "nginx:1.28"));
  await h.source.scan();
  assert.equal(h.updates.length, 2);
  const [a, b] = h.updates[1]!.pods;
  assert.notEqual(a?.metadata?.uid, h.updates[0]!.pods[0]!.metadata?.uid);
  assert.equal(
    Date.parse(a!.metadata!.annotations![CONFIG_FIRST_SEEN_ANNOTATION_KEY]!),
    h.clock.now(),
  );
  assert.equal(b?.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION_KEY], seen);
});

Deno.test("StaticPodFileSource reads a single manifest file and keeps its pod while the file is bad", async () => {
  await using h = await harness({ "web.yaml": manifest("web") });
  const file = `${h.dir}/web.yaml`;
  const source = new StaticPodFileSource({
    path: file,
    nodeName: "node-1",
    fileCheckFrequencyMs: 20_000,
    clock: h.clock,
    logger: createLogger({ write: (l) => h.lines.push(l), pid: 1 }),
    onUpdate: (pods, problems) => h.updates.push({ pods, problems }),
  });
  const first = await source.scan();
  assert.deepEqual(first.pods.map((p) => p.metadata?.name), ["web-node-1"]);
  assert.equal(
    first.pods[0]!.metadata?.uid,
    staticPodFromManifest(manifest("web"), file, "node-1").pod.metadata?.uid,
  );
  await Deno.writeTextFile(file, "kind: Pod\n");
  const bad = await source.scan();
  assert.deepEqual(bad.pods.map((p) => p.metadata?.name), ["web-node-1"]);
  assert.equal(bad.problems[0]?.path, "apiVersion");
  assert.equal(h.updates.length, 1);
  assert.match(
    h.lines.at(-1)!,
    /"Unable to read config path" err=".*web\.yaml:1: field 'apiVersion' is required"/,
  );
});

Deno.test("StaticPodFileSource lets the later of two manifests for one pod win", async () => {
  await using h = await harness({
    "a.yaml": manifest("web"),
    "b.yaml": manifest("web", "nginx:1.28"),
  });
  const { pods, problems } = await h.source.scan();
  assert.deepEqual(pods.map((p) => p.spec?.containers[0]?.image), ["nginx:1.28"]);
  assert.equal(problems.length, 1);
  assert.equal(problems[0]?.file, `${h.dir}/a.yaml`);
  assert.match(problems[0]!.problem, /b\.yaml/);
});

Deno.test("StaticPodFileSource treats a missing path as an empty set, logged once", async () => {
  await using h = await harness({});
  const source = new StaticPodFileSource({
    path: `${h.dir}/manifests/`,
    nodeName: "node-1",
    fileCheckFrequencyMs: 20_000,
    clock: h.clock,
    logger: createLogger({ write: (l) => h.lines.push(l), pid: 1 }),
    onUpdate: (pods, problems) => h.updates.push({ pods, problems }),
  });
  await source.scan();
  await source.scan();
  assert.deepEqual(h.updates, [{ pods: [], problems: [] }]);
  assert.equal(h.lines.length, 1);
  assert.match(
    h.lines[0]!,
    /"Unable to read config path" err="path does not exist, ignoring" path=".*\/manifests"/,
  );
  await Deno.mkdir(`${h.dir}/manifests`);
  await Deno.writeTextFile(`${h.dir}/manifests/a.yaml`, manifest("a"));
  await source.scan();
  assert.deepEqual(h.names(1), ["a-node-1"]);
});

Deno.test("StaticPodFileSource run picks up edits and removals at each period when inotify fails", async () => {
  await using h = await harness({ "a.yaml": manifest("a"), "b.yaml": manifest("b") }, {
    watchFs: noWatch,
  });
  const stop = new AbortController();
  const running = h.source.run(stop.signal);
  await until(() => h.updates.length === 1, "the first set");
  assert.deepEqual(h.names(0), ["a-node-1", "b-node-1"]);

  await Deno.writeTextFile(`${h.dir}/a.yaml`, manifest("a", "nginx:1.28"));
  h.clock.step(20_000);
  await until(() => h.updates.length === 2, "the edit");
  assert.equal(h.updates[1]!.pods[0]!.spec?.containers[0]?.image, "nginx:1.28");

  await Deno.remove(`${h.dir}/b.yaml`);
  await until(() => h.clock.waiters > 0, "the next period");
  h.clock.step(20_000);
  await until(() => h.updates.length === 3, "the removal");
  assert.deepEqual(h.names(2), ["a-node-1"]);

  stop.abort();
  await running;
  const failures = h.lines.filter((l) => l.includes("Unable to watch config path"));
  assert.equal(failures.length, 1, h.lines.join("\n"));
});

Deno.test("StaticPodFileSource run picks up an edit through inotify without a clock step", async () => {
  await using h = await harness({ "a.yaml": manifest("a") }, { watchDebounceMs: 10 });
  const stop = new AbortController();
  const running = h.source.run(stop.signal);
  try {
    await until(() => h.updates.length === 1, "the first set");
    // The watch starts right after the first list; give it a moment to be in place.
    await new Promise((r) => setTimeout(r, 20));
    await Deno.writeTextFile(`${h.dir}/b.yaml`, manifest("b"));
    await until(() => h.updates.length === 2, "the inotify update");
    assert.deepEqual(h.names(1), ["a-node-1", "b-node-1"]);
    assert.equal(h.clock.now(), new FakeClock().now());
  } finally {
    stop.abort();
    await running;
  }
});

Deno.test("StaticPodFileSource keeps the pod of a manifest broken between periods until the next list", async () => {
  const watch = new FakeWatch();
  await using h = await harness(
    { "a.yaml": manifest("a"), "b.yaml": manifest("b") },
    { watchFs: () => watch, watchDebounceMs: 0 },
  );
  const stop = new AbortController();
  const running = h.source.run(stop.signal);
  try {
    await until(() => h.updates.length === 1, "the first set");
    await Deno.writeTextFile(`${h.dir}/a.yaml`, "apiVersion: v1\nkind: Pod\n");
    watch.push({ kind: "access", paths: [`${h.dir}/a.yaml`] });
    watch.push({ kind: "modify", paths: [`${h.dir}/.a.yaml.swp`] });
    watch.push({ kind: "modify", paths: [`${h.dir}/a.yaml`] });
    await until(
      () => h.lines.some((l) => l.includes("Could not process manifest file")),
      "the watch scan",
    );
    assert.equal(h.updates.length, 1);

    h.clock.step(20_000);
    await until(() => h.updates.length === 2, "the periodic list");
    assert.deepEqual(h.names(1), ["b-node-1"]);
    assert.equal(h.updates[1]!.problems[0]?.path, "metadata.name");
  } finally {
    stop.abort();
    await running;
  }
});
