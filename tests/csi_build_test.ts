/**
 * @module
 * Tests of tests/csi_build.ts that build no Go program: the pinned components (names, image
 * references, the module versions of v2 tags on paths without `/v2`), how ensureBinary is asked
 * to build them, how a `--version` output and `go version -m` are read, and that a component's
 * image holds its program at the entrypoint (built by tests/images.ts with a stand-in program:
 * Debian's static busybox, which must be installed; skipped loudly otherwise).
 */

import assert from "node:assert/strict";
import { gunzipSync } from "node:zlib";
import { findProgram } from "./apt.ts";
import { readTar } from "./conformance_images.ts";
import {
  binarySpec,
  briefGoError,
  CSI_COMPONENTS,
  CsiBuildError,
  imageSpec,
  moduleVersionIn,
  reportsCsiVersion,
  selectComponents,
  SIG_STORAGE_REGISTRY,
} from "./csi_build.ts";
import { blobPath, buildImageLayout, BUSYBOX_BINARY, ImageBuildError } from "./images.ts";

const byName = (name: string) => {
  const c = CSI_COMPONENTS.find((c) => c.name === name);
  assert.ok(c, name);
  return c;
};

Deno.test("CSI_COMPONENTS names the six programs under upstream's sig-storage images", () => {
  assert.deepEqual(
    CSI_COMPONENTS.map((c) => c.image).sort(),
    [
      "csi-attacher:v4.13.0",
      "csi-node-driver-registrar:v2.15.0",
      "csi-provisioner:v6.4.0",
      "csi-resizer:v2.3.0",
      "hostpathplugin:v1.17.0",
      "livenessprobe:v2.17.0",
    ].map((s) => `${SIG_STORAGE_REGISTRY}/${s}`),
  );
  for (const c of CSI_COMPONENTS) {
    assert.equal(c.image, `${SIG_STORAGE_REGISTRY}/${c.name}:${c.version}`, c.name);
    assert.ok(c.pkg.startsWith(`${c.module}/cmd/`), c.name);
  }
});

Deno.test("CSI_COMPONENTS requires a v2+ tag on a path without /vN at its commit's pseudo-version", () => {
  for (const c of CSI_COMPONENTS) {
    const major = Number(/^v(\d+)\./.exec(c.version)?.[1]);
    const suffix = /\/v(\d+)$/.exec(c.module)?.[1];
    if (major >= 2 && suffix === undefined) {
      // The go command refuses v2.15.0 for github.com/kubernetes-csi/node-driver-registrar.
      assert.match(c.moduleVersion ?? "", /^v[01]\.\d+\.\d+-0\.\d{14}-[0-9a-f]{12}$/, c.name);
    } else {
      assert.equal(c.moduleVersion, undefined, c.name);
      if (major >= 2) assert.equal(Number(suffix), major, c.name);
    }
  }
});

Deno.test("binarySpec builds statically with release-tools' -X main.version", () => {
  const prov = binarySpec(byName("csi-provisioner"));
  assert.equal(prov.cgo, false);
  assert.deepEqual(prov.ldflags, ["-X main.version=v6.4.0"]);
  assert.deepEqual(prov.versionArgs, ["--version"]);
  assert.equal(prov.version, "v6.4.0");
  assert.equal(prov.moduleVersion, undefined);
  assert.ok(prov.versionMatches?.("/root/.cache/x/csi-provisioner v6.4.0\n"));
  assert.ok(!prov.versionMatches?.("/root/.cache/x/csi-provisioner unknown\n"));
  // Upstream's go.mod pins k8s.io modules with replace lines; the wrapper copies the published.
  assert.deepEqual(
    prov.replaces?.(
      "module x\nreplace k8s.io/api => k8s.io/api v0.36.1\nreplace example.com/a => ./a\n",
    ),
    [{ from: "k8s.io/api", to: "k8s.io/api", toVersion: "v0.36.1" }],
  );

  const reg = binarySpec(byName("csi-node-driver-registrar"));
  assert.equal(reg.version, "v2.15.0", "cached under the release tag");
  assert.equal(reg.moduleVersion, "v1.3.1-0.20250912160809-87d60a92e312");

  const probe = binarySpec(byName("livenessprobe"));
  assert.equal(probe.versionArgs, undefined, "livenessprobe has no version flag");
});

Deno.test("reportsCsiVersion takes exactly the pinned tag as the last word", () => {
  assert.ok(reportsCsiVersion("/csi-attacher v4.13.0\n", "v4.13.0"));
  assert.ok(reportsCsiVersion("I1206 log line\n./csi-resizer v2.3.0", "v2.3.0"));
  assert.ok(!reportsCsiVersion("/csi-attacher v4.13.0-rc.1", "v4.13.0"));
  assert.ok(!reportsCsiVersion("/csi-attacher v4.13.01", "v4.13.0"));
  assert.ok(!reportsCsiVersion("/csi-attacher unknown", "v4.13.0"));
  assert.ok(!reportsCsiVersion("", "v4.13.0"));
});

Deno.test("moduleVersionIn reads a module's version from go version -m, not a replacement", () => {
  const out = [
    "/cache/livenessprobe: go1.26.8",
    "\tpath\tgithub.com/kubernetes-csi/livenessprobe/cmd/livenessprobe",
    "\tmod\tkubelet-ts.local/build/livenessprobe\t(devel)\t",
    "\tdep\tgithub.com/kubernetes-csi/livenessprobe\tv1.1.1-0.20250912163408-064a1024b628\th1:x=",
    "\tdep\tk8s.io/api\tv0.34.0",
    "\t=>\tk8s.io/api\tv0.34.1\th1:y=",
    "\tbuild\tCGO_ENABLED=0",
  ].join("\n");
  assert.equal(
    moduleVersionIn(out, "github.com/kubernetes-csi/livenessprobe"),
    "v1.1.1-0.20250912163408-064a1024b628",
  );
  assert.equal(moduleVersionIn(out, "k8s.io/api"), "v0.34.0");
  assert.equal(moduleVersionIn(out, "kubelet-ts.local/build/livenessprobe"), "(devel)");
  assert.equal(moduleVersionIn(out, "github.com/kubernetes-csi/livenessprobe/cmd"), undefined);
});

Deno.test("briefGoError quotes the module proxy's answer from go mod download -json", () => {
  // What ensureBinary threw for hostpathplugin here on 2026-12-06.
  const message = [
    "'go mod download -json github.com/kubernetes-csi/csi-driver-host-path@v1.17.0' in " +
    "/root/.cache/kubelet-ts/src (download ...) failed with code 1:",
    "{",
    '\t"Path": "github.com/kubernetes-csi/csi-driver-host-path",',
    '\t"Version": "v1.17.0",',
    '\t"Error": "github.com/kubernetes-csi/csi-driver-host-path@v1.17.0: reading ' +
    "https://proxy.golang.org/github.com/kubernetes-csi/csi-driver-host-path/@v/v1.17.0.info: " +
    '403 Forbidden\\n\\tserver response: This module version is not available."',
    "}",
  ].join("\n");
  assert.equal(
    briefGoError(message),
    "github.com/kubernetes-csi/csi-driver-host-path@v1.17.0: reading " +
      "https://proxy.golang.org/github.com/kubernetes-csi/csi-driver-host-path/@v/v1.17.0.info: " +
      "403 Forbidden\n\tserver response: This module version is not available.",
  );
  assert.equal(briefGoError("a\nb\nc\nd\ne"), "b\nc\nd\ne", "no JSON: the last lines");
});

Deno.test("selectComponents keeps CSI_COMPONENTS order and names an unknown program", () => {
  assert.deepEqual(
    selectComponents(["livenessprobe", "csi-attacher"]).map((c) => c.name),
    ["csi-attacher", "livenessprobe"],
  );
  assert.equal(selectComponents().length, 6);
  assert.throws(
    () => selectComponents(["csi-attacher", "csi-snapshotter"]),
    (e: unknown) => e instanceof CsiBuildError && /'csi-snapshotter'/.test(e.message),
  );
});

const busybox = await findProgram(BUSYBOX_BINARY);
if (!busybox) console.warn(`SKIPPING the CSI image layout test: ${BUSYBOX_BINARY} is missing`);

Deno.test({
  name: "imageSpec puts the program at /<name>, executable, as the entrypoint",
  ignore: !busybox,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "csi-build-test-" });
    try {
      // Any static program stands in for the Go build: busybox-static is one.
      const c = byName("csi-resizer");
      const built = await buildImageLayout({ image: imageSpec(c, busybox!), cacheDir: dir });
      assert.equal(built.name, "registry.k8s.io/sig-storage/csi-resizer:v2.3.0");
      const config = JSON.parse(
        await Deno.readTextFile(`${built.layoutDir}/${blobPath(built.configDigest)}`),
      );
      assert.deepEqual(config.config.Entrypoint, ["/csi-resizer"]);
      const layer = readTar(
        gunzipSync(await Deno.readFile(`${built.layoutDir}/${blobPath(built.layerDigest)}`)),
      );
      const program = layer.find((e) => e.path === "csi-resizer");
      assert.ok(program?.type === "file");
      assert.equal(program.mode, 0o755);
      // readTar's data is a node Buffer: compare bytes, not types.
      assert.deepEqual(new Uint8Array(program.data), await Deno.readFile(busybox!));
      assert.ok(layer.some((e) => e.path === "bin/mount"), "busybox applets stay");

      // The cache key covers the program's content, not only its path.
      const copy = `${dir}/program`;
      await Deno.copyFile(busybox!, copy);
      const a = await buildImageLayout({ image: imageSpec(c, copy), cacheDir: dir });
      await Deno.writeFile(copy, new Uint8Array([0x23, 0x21]), { append: true });
      const b = await buildImageLayout({ image: imageSpec(c, copy), cacheDir: dir });
      assert.notEqual(a.layerDigest, b.layerDigest);

      // A dynamically linked program would not run in an image without a libc.
      const dynamic = await findProgram("ls");
      if (dynamic) {
        await assert.rejects(
          buildImageLayout({ image: imageSpec(c, dynamic), cacheDir: dir }),
          (e: unknown) => e instanceof ImageBuildError && /dynamically linked/.test(e.message),
        );
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
