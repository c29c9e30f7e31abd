import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import {
  blobPath,
  buildOciImage,
  EPOCH_SECONDS,
  MEDIA_CONFIG,
  MEDIA_LAYER,
  MEDIA_MANIFEST,
  type OciImageOptions,
  OciLayoutError,
  parseReference,
  tar,
  type TarEntry,
} from "./oci_layout.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

function sha256(data: Uint8Array): string {
  return `sha256:${createHash("sha256").update(data).digest("hex")}`;
}

interface ReadEntry {
  path: string;
  type: string;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
  linkname: string;
  magic: string;
  data: Uint8Array;
}

/** Reads a ustar archive back, checking every header's checksum. */
function untar(archive: Uint8Array): ReadEntry[] {
  assert.equal(archive.length % 512, 0, "a tar is whole 512-byte blocks");
  const out: ReadEntry[] = [];
  const str = (h: Uint8Array, at: number, len: number) =>
    dec.decode(h.subarray(at, at + len)).replace(/\0.*$/s, "");
  const num = (h: Uint8Array, at: number, len: number) => parseInt(str(h, at, len).trim(), 8);
  let at = 0;
  while (at < archive.length) {
    const h = archive.subarray(at, at + 512);
    if (h.every((b) => b === 0)) {
      assert.ok(archive.subarray(at).every((b) => b === 0), "only zero blocks after the end");
      assert.ok(archive.length - at >= 1024, "two zero blocks end the archive");
      return out;
    }
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i] ?? 0;
    assert.equal(num(h, 148, 8), sum, `checksum of the header at ${at}`);
    const size = num(h, 124, 12);
    const prefix = str(h, 345, 155);
    const name = str(h, 0, 100);
    out.push({
      path: prefix ? `${prefix}/${name}` : name,
      type: str(h, 156, 1),
      mode: num(h, 100, 8),
      uid: num(h, 108, 8),
      gid: num(h, 116, 8),
      mtime: num(h, 136, 12),
      linkname: str(h, 157, 100),
      magic: str(h, 257, 6),
      data: archive.slice(at + 512, at + 512 + size),
    });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  assert.fail("the archive has no end blocks");
}

function options(over: Partial<OciImageOptions> = {}): OciImageOptions {
  return {
    name: "kubelet-ts.local/test:1",
    architecture: "amd64",
    createdBy: "oci_layout_test",
    config: { Entrypoint: ["/bin/sh", "/opt/x/install.sh"], Labels: { b: "2", a: "1" } },
    layer: [
      { path: "opt/x/install.sh", type: "file", mode: 0o755, data: enc.encode("#!/bin/sh\n") },
      { path: "opt/", type: "dir", mode: 0o755 },
      { path: "opt/x/", type: "dir", mode: 0o755 },
      { path: "bin/sh", type: "symlink", linkname: "busybox" },
      { path: "bin/", type: "dir", mode: 0o755 },
      { path: "tmp/", type: "dir", mode: 0o1777 },
    ],
    ...over,
  };
}

Deno.test("tar writes ustar headers owned by root at the fixed epoch, with data padded", () => {
  const data = enc.encode("x".repeat(600));
  const entries = untar(tar([
    { path: "d/", type: "dir", mode: 0o1777 },
    { path: "d/f", type: "file", mode: 0o640, data },
    { path: "d/l", type: "symlink", linkname: "../f" },
  ]));
  assert.deepEqual(entries.map((e) => [e.path, e.type, e.mode.toString(8)]), [
    ["d/", "5", "1777"],
    ["d/f", "0", "640"],
    ["d/l", "2", "777"],
  ]);
  for (const e of entries) {
    assert.equal(e.uid, 0);
    assert.equal(e.gid, 0);
    assert.equal(e.mtime, EPOCH_SECONDS);
    assert.equal(e.magic, "ustar");
  }
  assert.deepEqual(entries[1]?.data, data);
  assert.equal(entries[2]?.linkname, "../f");
});

Deno.test("tar splits a path longer than 100 bytes into prefix and name", () => {
  const long = `${"a".repeat(90)}/${"b".repeat(40)}/file`;
  const [e] = untar(tar([{ path: long, type: "file", mode: 0o644, data: new Uint8Array(1) }]));
  assert.equal(e?.path, long);
  assert.throws(
    () => tar([{ path: "c".repeat(101), type: "file", mode: 0o644, data: new Uint8Array(0) }]),
    /tar name of 'c+' must be at most 100 bytes/,
  );
});

Deno.test("buildOciImage gives byte-identical output and digests for the same input", () => {
  const a = buildOciImage(options());
  const b = buildOciImage(options());
  assert.equal(a.manifestDigest, b.manifestDigest);
  assert.deepEqual(a.archive, b.archive);
  const other = buildOciImage(
    options({
      layer: [{ path: "f", type: "file", mode: 0o644, data: enc.encode("other") }],
    }),
  );
  assert.notEqual(other.manifestDigest, a.manifestDigest);
  assert.notEqual(other.diffId, a.diffId);
});

Deno.test("buildOciImage digests name their blobs, and diff_ids the uncompressed layer", () => {
  const image = buildOciImage(options());
  for (const [path, data] of image.layoutFiles) {
    if (path.startsWith("blobs/")) assert.equal(path, blobPath(sha256(data)));
  }
  const blob = (digest: string) => {
    const data = image.layoutFiles.get(blobPath(digest));
    assert.ok(data, `blob ${digest} is in the layout`);
    return data;
  };
  const index = JSON.parse(dec.decode(image.layoutFiles.get("index.json")));
  assert.equal(index.schemaVersion, 2);
  assert.equal(index.manifests.length, 1);
  const desc = index.manifests[0];
  assert.equal(desc.mediaType, MEDIA_MANIFEST);
  assert.equal(desc.digest, image.manifestDigest);
  assert.equal(desc.size, blob(image.manifestDigest).length);
  assert.deepEqual(desc.platform, { architecture: "amd64", os: "linux" });
  assert.deepEqual(desc.annotations, {
    "io.containerd.image.name": "kubelet-ts.local/test:1",
    "org.opencontainers.image.ref.name": "1",
  });
  assert.deepEqual(JSON.parse(dec.decode(image.layoutFiles.get("oci-layout"))), {
    imageLayoutVersion: "1.0.0",
  });

  const manifest = JSON.parse(dec.decode(blob(image.manifestDigest)));
  assert.equal(manifest.config.mediaType, MEDIA_CONFIG);
  assert.equal(manifest.config.digest, image.configDigest);
  assert.equal(manifest.config.size, blob(image.configDigest).length);
  assert.equal(manifest.layers.length, 1);
  assert.equal(manifest.layers[0].mediaType, MEDIA_LAYER);
  assert.equal(manifest.layers[0].digest, image.layerDigest);

  const layerTar = new Uint8Array(gunzipSync(blob(image.layerDigest)));
  const config = JSON.parse(dec.decode(blob(image.configDigest)));
  assert.deepEqual(config.rootfs, { type: "layers", diff_ids: [sha256(layerTar)] });
  assert.equal(image.diffId, sha256(layerTar));
  assert.equal(config.architecture, "amd64");
  assert.equal(config.os, "linux");
  assert.deepEqual(config.config.Entrypoint, ["/bin/sh", "/opt/x/install.sh"]);
  assert.deepEqual(Object.keys(config.config.Labels), ["a", "b"], "labels in key order");
  assert.equal(config.created, "2024-01-01T00:00:00Z");

  // Entries in path order, so each directory comes before what it holds.
  assert.deepEqual(untar(layerTar).map((e) => e.path), [
    "bin/",
    "bin/sh",
    "opt/",
    "opt/x/",
    "opt/x/install.sh",
    "tmp/",
  ]);
});

Deno.test("buildOciImage archive holds the layout files as they are", () => {
  const image = buildOciImage(options());
  const entries = untar(image.archive);
  assert.deepEqual(entries.slice(0, 2).map((e) => e.path), ["blobs/", "blobs/sha256/"]);
  const files = new Map(entries.filter((e) => e.type === "0").map((e) => [e.path, e.data]));
  assert.deepEqual([...files.keys()].sort(), [...image.layoutFiles.keys()].sort());
  for (const [path, data] of image.layoutFiles) assert.deepEqual(files.get(path), data);
});

Deno.test("buildOciImage refuses bad names, paths and architectures, naming them", () => {
  const bad = (over: Partial<OciImageOptions>, re: RegExp) =>
    assert.throws(
      () => buildOciImage(options(over)),
      (e) => e instanceof OciLayoutError && re.test(e.message),
    );
  bad({ name: "Upper/Case:1" }, /current value is 'Upper\/Case:1'/);
  bad({ architecture: "s390x" }, /architecture must be amd64 or arm64: current value is 's390x'/);
  const file = (path: string): TarEntry => ({
    path,
    type: "file",
    mode: 0o644,
    data: enc.encode(""),
  });
  bad({ layer: [file("/abs")] }, /current value is '\/abs'/);
  bad({ layer: [file("a/../b")] }, /current value is 'a\/..\/b'/);
  bad({ layer: [file("a"), file("a")] }, /'a' is listed twice/);
});

Deno.test("parseReference splits name and tag, defaulting to latest", () => {
  assert.deepEqual(parseReference("kubelet-ts.local/kubelet-installer:0.1.0"), {
    name: "kubelet-ts.local/kubelet-installer",
    tag: "0.1.0",
  });
  assert.deepEqual(parseReference("localhost:5000/x"), { name: "localhost:5000/x", tag: "latest" });
  assert.throws(() => blobPath("md5:abc"), /sha256:<64 hex>/);
});
