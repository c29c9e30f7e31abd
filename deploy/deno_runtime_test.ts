import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import {
  cachedTarballPath,
  defaultNpmCache,
  DENO_RUNTIMES,
  DenoRuntimeError,
  loadDenoRuntime,
  runtimePin,
  tarFile,
} from "./deno_runtime.ts";
import { tar } from "./oci_layout.ts";

const enc = (s: string) => new TextEncoder().encode(s);

/** A platform package as npm packs it, holding `deno` with `content`. */
function fakePackage(content: string): Uint8Array {
  return gzipSync(tar([
    { path: "package/package.json", type: "file", mode: 0o644, data: enc("{}") },
    { path: "package/deno", type: "file", mode: 0o755, data: enc(content) },
  ]));
}

const integrity = (b: Uint8Array) => `sha512-${createHash("sha512").update(b).digest("base64")}`;
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

async function withFile(data: Uint8Array, fn: (path: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "deno-runtime-" });
  try {
    await Deno.writeFile(join(dir, "pkg.tgz"), data);
    await fn(join(dir, "pkg.tgz"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const PIN = {
  platform: "linux-test",
  target: "x86_64-unknown-linux-gnu",
  npmPackage: "@deno/linux-test",
};

Deno.test("cachedTarballPath is where npm's cache keeps content of that integrity", () => {
  assert.equal(
    cachedTarballPath("/root/.npm", runtimePin("linux-amd64").integrity),
    "/root/.npm/_cacache/content-v2/sha512/de/67/784ca2c2bb3b0b0e67cea02e4a37b34065ac525643209bae2f83a7e80f4d090400c2a584b6ff942a5dfce09cfe59433de22cff6f05026d120735d7a380a1",
  );
  assert.throws(() => cachedTarballPath("/c", "sha1-abc"), DenoRuntimeError);
});

Deno.test("defaultNpmCache follows npm_config_cache, else ~/.npm", () => {
  const env = (vars: Record<string, string>) => (n: string) => vars[n];
  assert.equal(defaultNpmCache(env({ HOME: "/home/a", npm_config_cache: "/c" })), "/c");
  assert.equal(defaultNpmCache(env({ HOME: "/home/a" })), "/home/a/.npm");
});

Deno.test("loadDenoRuntime takes package/deno from a package of the pinned integrity", async () => {
  const tgz = fakePackage("#!deno");
  await withFile(tgz, async (file) => {
    const r = await loadDenoRuntime(
      { ...PIN, integrity: integrity(tgz), sha256: sha256("#!deno") },
      { packageFile: file },
    );
    assert.equal(new TextDecoder().decode(r.executable), "#!deno");
    assert.equal(r.from, file);
  });
});

Deno.test("loadDenoRuntime finds the package in the npm cache by its integrity", async () => {
  const tgz = fakePackage("#!deno");
  const cache = await Deno.makeTempDir({ prefix: "npm-cache-" });
  try {
    const path = cachedTarballPath(cache, integrity(tgz));
    await Deno.mkdir(join(path, ".."), { recursive: true });
    await Deno.writeFile(path, tgz);
    const r = await loadDenoRuntime({ ...PIN, integrity: integrity(tgz) }, { npmCache: cache });
    assert.equal(r.from, path);
  } finally {
    await Deno.remove(cache, { recursive: true });
  }
});

Deno.test("loadDenoRuntime names a package that is not the pinned one", async () => {
  const tgz = fakePackage("#!deno");
  await withFile(tgz, async (file) => {
    await assert.rejects(
      loadDenoRuntime({ ...PIN, integrity: integrity(enc("other")) }, { packageFile: file }),
      (e) =>
        e instanceof DenoRuntimeError &&
        e.message.startsWith(
          `${file} is not npm @deno/linux-test@2.9.6: its integrity is ${integrity(tgz)}`,
        ),
    );
    await assert.rejects(
      loadDenoRuntime({ ...PIN, integrity: integrity(tgz), sha256: sha256("x") }, {
        packageFile: file,
      }),
      (e) =>
        e instanceof DenoRuntimeError && e.message.includes(`package/deno in ${file} has sha256`),
    );
  });
});

Deno.test("loadDenoRuntime names the file it looked for and how to get it, downloading nothing", async () => {
  await assert.rejects(
    loadDenoRuntime({ ...PIN, integrity: integrity(enc("x")) }, { npmCache: "/nonexistent" }),
    (e) =>
      e instanceof DenoRuntimeError &&
      /is not at hand: \/nonexistent\/_cacache\/content-v2\/sha512\/\S+ does not exist/.test(
        e.message,
      ) &&
      e.message.includes("npm cache add @deno/linux-test@2.9.6"),
  );
});

Deno.test("tarFile reads an entry by its full path, long ones included", () => {
  const long = `package/${"d".repeat(120)}/deno`;
  const archive = tar([
    { path: "package/", type: "dir", mode: 0o755 },
    { path: long, type: "file", mode: 0o755, data: enc("long") },
    { path: "package/deno", type: "file", mode: 0o755, data: enc("x".repeat(700)) },
  ]);
  assert.equal(new TextDecoder().decode(tarFile(archive, long)), "long");
  assert.equal(tarFile(archive, "package/deno")?.length, 700);
  assert.equal(tarFile(archive, "package/none"), undefined);
});

Deno.test("runtimePin names the platforms there are", () => {
  assert.throws(() => runtimePin("linux-s390x"), /expected one of linux-amd64, linux-arm64/);
});

Deno.test("the pinned amd64 runtime matches the package in this host's npm cache", async () => {
  const pin = DENO_RUNTIMES[0]!;
  const file = cachedTarballPath(defaultNpmCache((n) => Deno.env.get(n)), pin.integrity);
  if (!existsSync(file)) {
    console.warn(`SKIPPING the pinned runtime's check: ${file} is not in this host's npm cache`);
    return;
  }
  const r = await loadDenoRuntime(pin);
  assert.equal(r.executable.length > 50 << 20, true);
});
