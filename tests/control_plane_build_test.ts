/**
 * @module
 * Tests of the control-plane build: the go.mod handling on fixtures (always), and, as root with
 * `go`, that kube-apiserver, kubectl, crictl and etcd are built (or found in the cache) and report
 * the pinned versions. A cold build takes several minutes; later runs reuse the cache. Without
 * root or go the build test is skipped loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import {
  CRICTL_VERSION,
  ensureControlPlaneBinaries,
  ETCD_VERSION,
  formatDuration,
  KUBERNETES_VERSION,
  parseReplaces,
  requiredVersion,
  stagingReplaces,
  stagingVersion,
  wrapperGoMod,
} from "./control_plane_build.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("control-plane build tests", ["go"]);

const UPSTREAM_GO_MOD = `module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tgithub.com/blang/semver/v4 v4.0.0
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // a comment
)

replace example.com/x => example.com/y v1.0.0
`;

Deno.test("stagingVersion maps v1.X.Y to v0.X.Y and rejects other shapes", () => {
  assert.equal(stagingVersion("v1.36.3"), "v0.36.3");
  assert.equal(stagingVersion("v1.37.0-rc.1"), "v0.37.0-rc.1");
  assert.throws(() => stagingVersion("1.36.3"), /must look like v1\.36\.3/);
});

Deno.test("parseReplaces reads block and single-line replace directives", () => {
  assert.deepEqual(parseReplaces(UPSTREAM_GO_MOD), [
    { from: "k8s.io/api", to: "./staging/src/k8s.io/api" },
    { from: "k8s.io/client-go", to: "./staging/src/k8s.io/client-go" },
    { from: "example.com/x", to: "example.com/y v1.0.0" },
  ]);
});

Deno.test("stagingReplaces maps only staging directories to published modules", () => {
  assert.deepEqual(stagingReplaces(UPSTREAM_GO_MOD, "v1.36.3"), [
    { from: "k8s.io/api", to: "k8s.io/api", toVersion: "v0.36.3" },
    { from: "k8s.io/client-go", to: "k8s.io/client-go", toVersion: "v0.36.3" },
  ]);
  assert.throws(() => stagingReplaces("module x\n", "v1.36.3"), /no '\.\/staging\/src\/'/);
});

Deno.test("wrapperGoMod copies go and godebug directives and lists the replaces", () => {
  const goMod = wrapperGoMod(
    "kubectl",
    UPSTREAM_GO_MOD,
    "k8s.io/kubernetes",
    "v1.36.3",
    stagingReplaces(UPSTREAM_GO_MOD, "v1.36.3"),
  );
  assert.match(goMod, /^module kubelet-ts\.local\/build\/kubectl$/m);
  assert.match(goMod, /^go 1\.26\.0$/m);
  assert.match(goMod, /^godebug default=go1\.26$/m);
  assert.match(goMod, /^require k8s\.io\/kubernetes v1\.36\.3$/m);
  assert.match(goMod, /^\tk8s\.io\/client-go => k8s\.io\/client-go v0\.36\.3$/m);
});

Deno.test("formatDuration prints seconds below a minute and m/s above", () => {
  assert.equal(formatDuration(12_345), "12.3s");
  assert.equal(formatDuration(59_990), "1m00s");
  assert.equal(formatDuration(288_000), "4m48s");
});

async function versionOf(path: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(path, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.ok(out.success, `'${path} ${args.join(" ")}' failed: ${text}`);
  return text;
}

Deno.test({
  name: "ensureControlPlaneBinaries builds programs that report the pinned versions",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const bins = await ensureControlPlaneBinaries({ log: (line) => console.error(line) });
    for (const path of Object.values(bins)) {
      const info = await Deno.stat(path);
      assert.ok(info.isFile && ((info.mode ?? 0) & 0o111) !== 0, `${path} is not executable`);
    }
    assert.match(
      await versionOf(bins.kubeApiserver, ["--version"]),
      new RegExp(`^Kubernetes ${KUBERNETES_VERSION.replaceAll(".", "\\.")}\\s*$`),
    );
    assert.match(
      await versionOf(bins.kubectl, ["version", "--client"]),
      new RegExp(`Client Version: ${KUBERNETES_VERSION.replaceAll(".", "\\.")}\\n`),
    );
    assert.match(
      await versionOf(bins.crictl, ["--version"]),
      new RegExp(`crictl version ${CRICTL_VERSION.replaceAll(".", "\\.")}\\s*$`),
    );
    assert.match(
      await versionOf(bins.etcd, ["--version"]),
      new RegExp(`etcd Version: ${ETCD_VERSION.slice(1).replaceAll(".", "\\.")}\\n`),
    );
  },
});

Deno.test("requiredVersion reads a module's version from require blocks and lines", () => {
  const goMod = [
    "module k8s.io/kubernetes",
    "",
    "require github.com/a/b v1.0.0",
    "",
    "require (",
    "\tgithub.com/onsi/ginkgo/v2 v2.28.1",
    "\tgithub.com/onsi/gomega v1.39.0 // indirect",
    ")",
  ].join("\n");
  assert.equal(requiredVersion(goMod, "github.com/onsi/ginkgo/v2"), "v2.28.1");
  assert.equal(requiredVersion(goMod, "github.com/a/b"), "v1.0.0");
  assert.equal(requiredVersion(goMod, "github.com/onsi/ginkgo"), undefined);
  assert.equal(requiredVersion(goMod, "github.com/x/y"), undefined);
});
