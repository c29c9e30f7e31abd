/**
 * @module
 * The conformance image recipes: which of the names `e2e.test --list-images` prints (v1.36.3)
 * are built, stood in for or missing, and why; the report; the tar reader. One test builds
 * agnhost from the k8s.io/kubernetes module, imports it into a private containerd and runs it
 * (`--version`, then `netexec` answering on loopback in its network namespace). That one needs
 * root, containerd, runc, go and busybox-static; without them it is skipped loudly, or fails
 * when CI=true.
 */

import assert from "node:assert/strict";
import { tar, type TarEntry } from "../deploy/oci_layout.ts";
import * as api from "../proto/runtime/v1/api.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { RemoteImageService } from "../src/cri/remote_image.ts";
import {
  AGNHOST,
  AGNHOST_VERSION,
  ALPINE_OS_RELEASE,
  E2E_REGISTRY,
  ensureConformanceImages,
  formatImageReport,
  type ImageReport,
  mirroredPath,
  NGINX_WELCOME,
  parseImageList,
  planConformanceImage,
  readTar,
} from "./conformance_images.ts";
import { hostsToml, startContainerd } from "./containerd_harness.ts";
import { BUSYBOX_BINARY, ctrOrThrow, PAUSE } from "./images.ts";
import { startRegistry } from "./registry_harness.ts";
import { requireRoot } from "./requirements.ts";

const P = E2E_REGISTRY;
const AGNHOST_IMAGE = `${P}/agnhost:${AGNHOST_VERSION}`;

/** Upstream's fixed list: `initImageConfigs` in test/utils/image/manifest.go of v1.36.3. */
const MANIFEST_IMAGES = [
  `${P}/agnhost:2.55`,
  `${P}/agnhost:2.63.0`,
  "gcr.io/k8s-authenticated-test/agnhost:2.6",
  `${P}/sample-apiserver:1.29.2`,
  `${P}/apparmor-loader:1.4`,
  `${P}/busybox:1.37.0-1`,
  "registry.k8s.io/build-image/distroless-iptables:v0.9.6",
  "registry.k8s.io/etcd:3.6.8-0",
  "invalid.registry.k8s.io/invalid/alpine:3.1",
  `${P}/ipc-utils:1.4`,
  `${P}/glibc-dns-testing:2.0.0`,
  `${P}/kitten:1.8`,
  `${P}/nautilus:1.8`,
  "registry.k8s.io/sig-storage/nfs-provisioner:v4.0.8",
  `${P}/nginx:1.15-4`,
  `${P}/nginx:1.27-0`,
  `${P}/node-perf/npb-ep:1.6.0`,
  `${P}/node-perf/npb-is:1.7.0`,
  `${P}/node-perf/pytorch-wide-deep:1.0.0`,
  `${P}/nonewprivs:1.4`,
  `${P}/nonroot:1.5`,
  "registry.k8s.io/pause:3.10.2",
  `${P}/perl:5.26`,
  `${P}/regression-issue-74839:1.4`,
  `${P}/resource-consumer:1.14`,
  `${P}/volume/nfs:1.6.0`,
  `${P}/volume/iscsi:2.7`,
];

/** What `appendCSIImageConfigs` adds from test/e2e/testing-manifests/storage-csi of v1.36.3. */
const CSI_IMAGES = [
  "registry.k8s.io/cloud-provider-gcp/gcp-compute-persistent-disk-csi-driver:v1.4.0",
  `${P}/busybox:1.36.1-1`,
  "registry.k8s.io/sig-storage/csi-attacher:v4.11.0",
  "registry.k8s.io/sig-storage/csi-attacher:v4.8.1",
  "registry.k8s.io/sig-storage/csi-external-health-monitor-controller:v0.17.0",
  "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.16.0",
  "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0",
  "registry.k8s.io/sig-storage/csi-provisioner:v6.1.1",
  "registry.k8s.io/sig-storage/csi-resizer:v1.13.1",
  "registry.k8s.io/sig-storage/csi-resizer:v2.1.0",
  "registry.k8s.io/sig-storage/csi-snapshot-metadata:v0.2.0",
  "registry.k8s.io/sig-storage/csi-snapshotter:v8.5.0",
  "registry.k8s.io/sig-storage/hello-populator:v1.0.1",
  "registry.k8s.io/sig-storage/hostpathplugin:v1.17.1",
  "registry.k8s.io/sig-storage/livenessprobe:v2.18.0",
  "registry.k8s.io/sig-storage/volume-data-source-validator:v1.0.0",
];

const LIST_IMAGES = [...MANIFEST_IMAGES, ...CSI_IMAGES];

Deno.test("planConformanceImage sorts v1.36.3's list into built, stand-in and missing", () => {
  const by = (status: string) =>
    LIST_IMAGES.map(planConformanceImage).filter((p) => p.status === status).map((p) => p.name)
      .sort();
  assert.deepEqual(by("built"), [
    `${P}/agnhost:2.63.0`,
    `${P}/kitten:1.8`,
    `${P}/nautilus:1.8`,
    `${P}/nonewprivs:1.4`,
    `${P}/regression-issue-74839:1.4`,
  ]);
  assert.deepEqual(by("stand-in"), [
    `${P}/agnhost:2.55`,
    `${P}/busybox:1.36.1-1`,
    `${P}/busybox:1.37.0-1`,
    `${P}/glibc-dns-testing:2.0.0`,
    `${P}/nginx:1.15-4`,
    `${P}/nginx:1.27-0`,
    "registry.k8s.io/pause:3.10.2",
  ]);
  assert.equal(by("missing").length, LIST_IMAGES.length - 12);
});

Deno.test("planConformanceImage builds agnhost as its Dockerfile lays it out", () => {
  const plan = planConformanceImage(AGNHOST_IMAGE);
  assert.ok(plan.status === "built" && plan.recipe.kind === "go");
  const recipe = plan.recipe;
  assert.deepEqual(recipe.programs, [{ program: AGNHOST, path: "/agnhost", mode: 0o755 }]);
  assert.equal(AGNHOST.pkg, "k8s.io/kubernetes/test/images/agnhost");
  assert.deepEqual(recipe.config, { Entrypoint: ["/agnhost"], Cmd: ["pause"] });
  assert.deepEqual(Object.values(recipe.moduleFiles ?? {}).sort(), [
    "/localhost.crt",
    "/localhost.key",
  ]);
  // The Services and DNS specs run nc -v -t, dig and getent (glibc resolves their names) in
  // sh, which must not be busybox-static's: it runs its own nc before PATH's.
  assert.deepEqual(recipe.symlinks, {
    "/agnhost-2": "agnhost",
    "/usr/bin/nc": "nc.openbsd",
    "/bin/bash": "/usr/bin/bash",
    "/bin/sh": "/usr/bin/bash",
  });
  assert.deepEqual(recipe.host?.programs.programs, [
    "/usr/bin/dig",
    "/usr/bin/nc.openbsd",
    "/usr/bin/getent",
    "/usr/bin/bash",
  ]);
  assert.deepEqual(recipe.host?.packages.map((p) => p.pkg), [
    "bind9-dnsutils",
    "netcat-openbsd",
    "libc-bin",
    "bash",
  ]);
  assert.equal(recipe.files?.["/etc/nsswitch.conf"], "hosts: files dns\n");
  assert.deepEqual(recipe.dirs, ["/uploads"]);
  assert.match(recipe.files?.["/etc/group"] ?? "", /^group-defined-in-image:x:50000:user-/m);
  assert.match(recipe.files?.["/etc/passwd"] ?? "", /^user-defined-in-image:x:1000:1000:/m);
  assert.match(plan.reason ?? "", /busybox/);
});

Deno.test("planConformanceImage gives kitten what the ImageVolume spec reads from it", () => {
  // test/e2e/common/node/image_volume.go: data.json mentions kitten.jpg and etc/os-release
  // says Alpine Linux.
  const plan = planConformanceImage(`${P}/kitten:1.8`);
  assert.ok(plan.status === "built" && plan.recipe.kind === "go");
  assert.equal(plan.recipe.moduleFiles?.["test/images/kitten/html/data.json"], "/data.json");
  assert.equal(plan.recipe.moduleFiles?.["test/images/kitten/html/kitten.jpg"], "/kitten.jpg");
  assert.equal(plan.recipe.files?.["/etc/os-release"], ALPINE_OS_RELEASE);
  assert.match(ALPINE_OS_RELEASE, /^NAME="Alpine Linux"$/m);
  assert.match(ALPINE_OS_RELEASE, /stand-in/);
  assert.match(plan.reason ?? "", /\/etc\/os-release is a stand-in/);
  // agnhost's own files stay.
  assert.match(plan.recipe.files?.["/etc/passwd"] ?? "", /^user-defined-in-image:/m);
});

Deno.test("mirroredPath keeps the repository path and tag of names on the host only", () => {
  assert.equal(
    mirroredPath(`${P}/kitten:1.8`, "registry.k8s.io"),
    "e2e-test-images/kitten:1.8",
  );
  assert.equal(mirroredPath("registry.k8s.io/pause:3.10.2", "registry.k8s.io"), "pause:3.10.2");
  assert.equal(
    mirroredPath("invalid.registry.k8s.io/invalid/alpine:3.1", "registry.k8s.io"),
    undefined,
  );
  assert.equal(mirroredPath("registry.k8s.io.evil/x:1", "registry.k8s.io"), undefined);
});

Deno.test("hostsToml names the mirror as the host's only server", () => {
  assert.equal(
    hostsToml("registry.k8s.io", "http://127.0.0.1:5000"),
    "# Generated by tests/containerd_harness.ts: registry.k8s.io is served by " +
      "http://127.0.0.1:5000 alone.\n" +
      'server = "http://127.0.0.1:5000"\n\n' +
      '[host."http://127.0.0.1:5000"]\n  capabilities = ["pull", "resolve"]\n',
  );
  assert.throws(() => hostsToml("registry.k8s.io", "127.0.0.1:5000"), /must be a registry URL/);
  assert.throws(() => hostsToml("registry.k8s.io", "http://127.0.0.1:5000/v2"), /current value/);
});

Deno.test("planConformanceImage names other agnhost tags as stand-ins of 2.63.0", () => {
  const plan = planConformanceImage(`${P}/agnhost:2.55`);
  assert.equal(plan.status, "stand-in");
  assert.match(plan.reason ?? "", /agnhost 2\.63\.0 under the 2\.55 tag/);
  const current = planConformanceImage(AGNHOST_IMAGE);
  assert.ok(plan.status === "stand-in" && current.status === "built");
  assert.deepEqual(plan.recipe, current.recipe);
});

Deno.test("planConformanceImage gives every stand-in and missing image a one-line reason", () => {
  for (const plan of LIST_IMAGES.map(planConformanceImage)) {
    if (plan.status === "built") continue;
    assert.ok(plan.reason && plan.reason.length > 10, `${plan.name} has a reason`);
    assert.ok(!plan.reason.includes("\n"), `${plan.name}'s reason is one line`);
  }
  // busybox 1.37.0 from source: Debian's 1.35 sh drops variables named like data-1.
  const busybox = planConformanceImage(`${P}/busybox:1.37.0-1`);
  assert.ok(busybox.status === "stand-in" && busybox.recipe.kind === "busybox");
  assert.equal(busybox.recipe.fromSource, true);
  assert.match(busybox.reason ?? "", /busybox 1\.37\.0 with busybox's defconfig/);
});

Deno.test("planConformanceImage reports unknown names and non-references as missing", () => {
  assert.deepEqual(planConformanceImage("example.com/team/thing:1"), {
    name: "example.com/team/thing:1",
    status: "missing",
    reason: "no recipe: not an image k8s.io/kubernetes v1.36.3's e2e suite names",
  });
  assert.equal(planConformanceImage("Not A Reference").status, "missing");
  const invalid = planConformanceImage("invalid.registry.k8s.io/invalid/alpine:3.1");
  assert.match(invalid.reason ?? "", /expect pulling it to fail/);
});

Deno.test("planConformanceImage makes every pause tag the suite's pause and nginx say welcome", () => {
  for (const tag of ["3.10.2", "3.6"]) {
    const plan = planConformanceImage(`registry.k8s.io/pause:${tag}`);
    assert.ok(plan.status === "stand-in" && plan.recipe.kind === "busybox");
    assert.deepEqual(plan.recipe.spec.entrypoint, PAUSE.entrypoint);
  }
  for (const tag of ["1.15-4", "1.27-0"]) {
    const plan = planConformanceImage(`${P}/nginx:${tag}`);
    assert.ok(plan.status === "stand-in" && plan.recipe.kind === "busybox");
    const spec = plan.recipe.spec;
    assert.deepEqual(spec.cmd, ["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"]);
    assert.deepEqual(spec.exposedPorts, ["80/tcp"]);
    assert.match(spec.files?.["/usr/share/nginx/html/index.html"] ?? "", /Welcome to nginx!/);
  }
  const httpd = planConformanceImage(`${P}/httpd:2.4.39-4`);
  assert.equal(httpd.status, "stand-in");
});

Deno.test("parseImageList trims, drops blank lines and keeps the first of duplicates", () => {
  assert.deepEqual(parseImageList(`  a:1\n\nb:2\r\na:1\n`), ["a:1", "b:2"]);
});

Deno.test("formatImageReport counts and lists every image with its reason", () => {
  const report: ImageReport = {
    images: [
      { name: "a:1", status: "built", source: "mod" },
      { name: "b:1", status: "stand-in", source: "busybox", reason: "differs" },
      { name: "c:1", status: "missing", reason: "why" },
    ],
  };
  assert.equal(
    formatImageReport(report),
    [
      "conformance images: 1 built, 1 stand-in, 1 missing",
      "built    a:1 (from mod)",
      "stand-in b:1 (from busybox): differs",
      "missing  c:1: why",
      "",
    ].join("\n"),
  );
});

Deno.test("ensureConformanceImages reports names it cannot build without go or ctr", async () => {
  const names = [
    "invalid.registry.k8s.io/invalid/alpine:3.1",
    "example.com/x:1",
    "example.com/x:1",
  ];
  const report = await ensureConformanceImages({
    names,
    ctr: { address: "/nonexistent/containerd.sock" },
    log: () => assert.fail("nothing to log"),
  });
  assert.deepEqual(report.images.map((i) => [i.name, i.status]), [
    ["invalid.registry.k8s.io/invalid/alpine:3.1", "missing"],
    ["example.com/x:1", "missing"],
  ]);
});

Deno.test("readTar reads back files, modes, symlinks and long paths", () => {
  const long = `${"d".repeat(60)}/${"e".repeat(60)}/file`;
  const entries: TarEntry[] = [
    { path: "bin/", type: "dir", mode: 0o755 },
    { path: "bin/nnp", type: "file", mode: 0o4755, data: new Uint8Array([1, 2, 3]) },
    { path: "bin/sh", type: "symlink", linkname: "busybox" },
    { path: long, type: "file", mode: 0o644, data: new Uint8Array(513).fill(7) },
    { path: "empty", type: "file", mode: 0o600, data: new Uint8Array(0) },
  ];
  assert.deepEqual(readTar(tar(entries)), entries);
});

// ---- against the module and a real containerd ----

async function kubernetesModuleDir(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("go", { args: ["env", "GOMODCACHE"], stdout: "piped" })
      .output();
    const dir = `${new TextDecoder().decode(out.stdout).trim()}/k8s.io/kubernetes@v1.36.3`;
    await Deno.stat(`${dir}/test/utils/image/manifest.go`);
    return dir;
  } catch {
    return undefined;
  }
}

const moduleDir = await kubernetesModuleDir();
const inCI = Deno.env.get("CI") === "true";
if (!moduleDir && !inCI) {
  console.warn(
    "SKIPPING the manifest.go comparison: k8s.io/kubernetes@v1.36.3 is not in the Go module " +
      "cache (go mod download k8s.io/kubernetes@v1.36.3)",
  );
}

Deno.test({
  name: "the v1.36.3 list in these tests is the one manifest.go makes",
  ignore: !moduleDir && !inCI,
  async fn() {
    assert.ok(moduleDir, "CI=true but k8s.io/kubernetes@v1.36.3 is not in the module cache");
    const source = await Deno.readTextFile(`${moduleDir}/test/utils/image/manifest.go`);
    const registries = new Map(
      [...source.matchAll(/^\s+(\w+Registry):\s+"([^"]+)",$/gm)].map((m) => [m[1], m[2]]),
    );
    const names = [
      ...source.matchAll(/configs\[\w+\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}/g),
    ].map((m) => `${registries.get(m[1]!)}/${m[2]}:${m[3]}`);
    assert.deepEqual(names.sort(), [...MANIFEST_IMAGES].sort());
  },
});

const gate = await requireRoot("conformance image tests", [
  "containerd",
  "ctr",
  "runc",
  "go",
  BUSYBOX_BINARY,
]);

/** `ctr` against `socket` in k8s.io, for calls that may fail while a server starts. */
async function ctr(socket: string, args: string[]): Promise<{ code: number; output: string }> {
  const out = await new Deno.Command("ctr", {
    args: ["--address", socket, "--namespace", "k8s.io", ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

/** Runs `wget -q -O - <url>` inside `container` until it answers (or `ms` pass). */
async function fetchInside(socket: string, container: string, url: string, ms: number) {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = await ctr(socket, [
      ...["tasks", "exec", "--exec-id", `wget-${crypto.randomUUID().slice(0, 8)}`, container],
      ...["wget", "-q", "-O", "-", url],
    ]);
    if (got.code === 0) return got.output;
    if (Date.now() > deadline) {
      throw new Error(`no answer from ${url} in ${container} after ${ms} ms: ${got.output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

Deno.test({
  name: "ensureConformanceImages imports an agnhost built from its module that serves netexec",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    // ctr run's arguments replace the image's Entrypoint and Cmd, as a pod's command does.
    // A cold agnhost build takes minutes on two CPUs; a warm one seconds.
    const signal = AbortSignal.timeout(30 * 60_000);
    const dir = await Deno.makeTempDir({ prefix: "conformance-images-test-" });
    try {
      await using containerd = await startContainerd({ dir, signal });
      const socket = containerd.socket;
      const nginx = `${P}/nginx:1.27-0`;
      const glibc = `${P}/glibc-dns-testing:2.0.0`;
      const report = await ensureConformanceImages({
        names: [
          AGNHOST_IMAGE,
          `${P}/agnhost:2.55`,
          "registry.k8s.io/pause:3.10.2",
          `${P}/busybox:1.37.0-1`,
          nginx,
          glibc,
          "invalid.registry.k8s.io/invalid/alpine:3.1",
        ],
        ctr: { address: socket },
        signal,
        log: (line) => console.error(line),
      });
      console.error(formatImageReport(report));
      assert.deepEqual(report.images.map((i) => i.status), [
        "built",
        "stand-in",
        "stand-in",
        "stand-in",
        "stand-in",
        "stand-in",
        "missing",
      ]);
      const listed = await ctrOrThrow(socket, "k8s.io", ["images", "ls", "-q"], { what: "ls" });
      assert.ok(!listed.includes("invalid.registry.k8s.io"), "the invalid image is not there");

      const version = await ctrOrThrow(
        socket,
        "k8s.io",
        ["run", "--rm", AGNHOST_IMAGE, "agnhost-version", "/agnhost", "--version"],
        { what: "run agnhost --version", signal },
      );
      assert.equal(version.trim(), `app version ${AGNHOST_VERSION}`);

      await ctrOrThrow(
        socket,
        "k8s.io",
        ["run", "-d", AGNHOST_IMAGE, "agnhost-netexec", "/agnhost", "netexec", "--http-port=8080"],
        { what: "run agnhost netexec", signal },
      );
      const echo = await fetchInside(
        socket,
        "agnhost-netexec",
        "http://127.0.0.1:8080/echo?msg=conformance",
        20_000,
      );
      assert.equal(echo, "conformance");
      // The curl stand-in, as lifecycle hook tests call it.
      const curled = await ctr(socket, [
        ...["tasks", "exec", "--exec-id", "curl", "agnhost-netexec"],
        ...["sh", "-c", "curl http://127.0.0.1:8080/echo?msg=poststart"],
      ]);
      assert.deepEqual(curled, { code: 0, output: "poststart" });
      const id = await ctr(socket, [
        ...["tasks", "exec", "--exec-id", "id", "agnhost-netexec"],
        ...["id", "user-defined-in-image"],
      ]);
      assert.equal(
        id.output.trim(),
        "uid=1000(user-defined-in-image) gid=1000(user-defined-in-image) " +
          "groups=1000(user-defined-in-image),50000(group-defined-in-image)",
      );
      // netcat-openbsd as the Services specs call it (busybox's nc refuses -v and -t), a name
      // from /etc/hosts through glibc (getent, nc), and dig with its libraries.
      const nc = await ctr(socket, [
        ...["tasks", "exec", "--exec-id", "nc", "agnhost-netexec"],
        ...[
          "sh",
          "-c",
          "echo '127.0.0.1 netexec.test' >> /etc/hosts && getent hosts " +
          "netexec.test && printf 'GET /hostname HTTP/1.0\\r\\n\\r\\n' | " +
          "nc -v -t -w 2 netexec.test 8080",
        ],
      ]);
      assert.equal(nc.code, 0, nc.output);
      assert.match(nc.output, /^127\.0\.0\.1\s+netexec\.test$/m);
      assert.match(nc.output, /Connection to netexec\.test .*8080.* succeeded/);
      assert.match(nc.output, /HTTP\/1\.[01] 200 OK/);
      const dig = await ctr(socket, [
        ...["tasks", "exec", "--exec-id", "dig", "agnhost-netexec"],
        ...["dig", "-v"],
      ]);
      assert.deepEqual([dig.code, /^DiG 9\.\d+/.test(dig.output)], [0, true], dig.output);

      // busybox 1.37.0 as two specs read it: `sh -c env` shows variables whose names are not
      // shell identifiers; on a read-only root, busybox's own words.
      const busybox = `${P}/busybox:1.37.0-1`;
      const env = await ctrOrThrow(
        socket,
        "k8s.io",
        ["run", "--rm", "--env", "data-1=value-1", busybox, "env-names", "sh", "-c", "env"],
        { what: "run sh -c env in busybox", signal },
      );
      assert.match(env, /^data-1=value-1$/m);
      const readOnly = await ctr(socket, [
        ...["run", "--rm", "--read-only", busybox, "read-only"],
        ...["/bin/sh", "-c", "echo test > /file"],
      ]);
      assert.match(readOnly.output, /^\/bin\/sh: can't create \/file: Read-only file system$/m);

      // The DNS specs' "jessie" prober: dig and getent of glibc in sh.
      const jessie = await ctrOrThrow(
        socket,
        "k8s.io",
        [
          "run",
          "--rm",
          glibc,
          "jessie",
          "/bin/sh",
          "-c",
          "dig -v 2>&1 && " +
          "echo '127.0.0.1 jessie.test' >> /etc/hosts && getent hosts jessie.test",
        ],
        { what: "run dig in glibc-dns-testing", signal },
      );
      assert.match(jessie, /^DiG 9\.\d+/m);
      assert.match(jessie, /^127\.0\.0\.1\s+jessie\.test$/m);

      await ctrOrThrow(socket, "k8s.io", ["run", "-d", nginx, "nginx"], { what: "run nginx" });
      const page = await fetchInside(socket, "nginx", "http://127.0.0.1:80/", 10_000);
      assert.ok(page.includes(`<h1>${NGINX_WELCOME}</h1>`), page);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

const mirrorGate = await requireRoot("conformance registry mirror test", [
  "containerd",
  "ctr",
  "runc",
  "docker-registry",
  BUSYBOX_BINARY,
]);

Deno.test({
  name: "ensureConformanceImages pushes registry.k8s.io's images where containerd pulls them",
  ignore: mirrorGate.ignore,
  async fn() {
    mirrorGate.check();
    const signal = AbortSignal.timeout(5 * 60_000);
    const dir = await Deno.makeTempDir({ prefix: "conformance-mirror-test-" });
    try {
      await using registry = await startRegistry({ dir: `${dir}/registry`, signal });
      // $KUBELET_TS_RUNTIME picks containerd 1.6 or 2.x: both read the hosts.toml.
      await using containerd = await startContainerd({
        dir: `${dir}/containerd`,
        registryMirrors: { "registry.k8s.io": registry.url },
        signal,
      });
      const pause = "registry.k8s.io/pause:3.10.2";
      const report = await ensureConformanceImages({
        names: [pause, `${P}/nginx:1.27-0`, "invalid.registry.k8s.io/invalid/alpine:3.1"],
        ctr: { address: containerd.socket },
        mirror: { host: "registry.k8s.io", registry: registry.host },
        signal,
        log: (line) => console.error(line),
      });
      assert.deepEqual(report.images.map((i) => [i.status, i.pushed]), [
        ["stand-in", `${registry.host}/pause:3.10.2`],
        ["stand-in", `${registry.host}/e2e-test-images/nginx:1.27-0`],
        ["missing", undefined],
      ]);

      // Gone from containerd, the image comes back by a CRI pull of its upstream name.
      await ctrOrThrow(containerd.socket, "k8s.io", ["images", "rm", pause], { what: "rm" });
      const conn = new CriConnection({ endpoint: containerd.endpoint });
      try {
        const images = new RemoteImageService({ connection: conn, timeoutMs: 60_000 });
        const spec = api.ImageSpec.create({ image: pause });
        assert.equal((await images.imageStatus(spec)).image, undefined);
        assert.match(await images.pullImage(spec, undefined, undefined, signal), /^sha256:/);
        assert.ok((await images.imageStatus(spec)).image, "pulled");
        // A name the registry does not hold fails there, not at registry.k8s.io.
        await assert.rejects(
          images.pullImage(
            api.ImageSpec.create({ image: `${P}/nonroot:1.4` }),
            undefined,
            undefined,
            signal,
          ),
          /not found/,
        );
      } finally {
        conn.close();
      }
      // The access log is complete once the registry stopped; `ns` names the mirrored host.
      await registry.stop();
      const log = await Deno.readTextFile(registry.logFile);
      assert.match(log, /"HEAD \/v2\/pause\/manifests\/3\.10\.2\?ns=registry\.k8s\.io HTTP/);
      assert.match(
        log,
        /"HEAD \/v2\/e2e-test-images\/nonroot\/manifests\/1\.4\?ns=registry\.k8s\.io /,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
