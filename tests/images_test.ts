/**
 * @module
 * The locally built test images and the private registry, against a real containerd: images
 * are deterministic OCI layouts, import under the names tests use, and run (busybox prints,
 * pause stops on SIGTERM, httpd serves its page); an image pushed to a registry behind basic
 * auth is refused to an anonymous pull and pulled with the credentials; host programs go into a
 * layer with their libraries. Needs root, containerd, runc, docker-registry, htpasswd and
 * busybox-static (the host program test: iptables and ldd); without them it is skipped loudly,
 * or fails when CI=true. Parsing ldd's output needs nothing.
 */

import assert from "node:assert/strict";
import { startContainerd } from "./containerd_harness.ts";
import {
  buildImageLayout,
  BUSYBOX,
  BUSYBOX_BINARY,
  BUSYBOX_IMAGE,
  ctrOrThrow,
  HTTPD,
  HTTPD_IMAGE,
  HTTPD_INDEX,
  HTTPD_PORT,
  importImages,
  parseLdd,
  PAUSE,
  PAUSE_IMAGE,
} from "./images.ts";
import { findProgram } from "./apt.ts";
import { pushImage, RegistryError, startRegistry } from "./registry_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("image and registry tests", [
  "containerd",
  "ctr",
  "runc",
  "docker-registry",
  "htpasswd",
  "tar",
  BUSYBOX_BINARY,
]);

const hostGate = await requireRoot("host program image test", [
  "ldd",
  "iptables-save",
  "tar",
  BUSYBOX_BINARY,
]);

const NS = "k8s.io";

/** `ctr` against `socket` in {@link NS}, for calls that are expected to fail. */
async function ctr(socket: string, args: string[]): Promise<{ code: number; output: string }> {
  const out = await new Deno.Command("ctr", {
    args: ["--address", socket, "--namespace", NS, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

/** Polls `check` every 100 ms until it returns true or `ms` pass. */
async function waitFor(what: string, ms: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function listTar(path: string, gzip: boolean): Promise<string> {
  const out = await new Deno.Command("tar", {
    args: [gzip ? "-tvzf" : "-tvf", path],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout);
}

Deno.test({
  name: "buildImageLayout gives the same digests in two builds and a named OCI layout",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "images-test-" });
    try {
      const a = await buildImageLayout({ image: HTTPD, cacheDir: `${dir}/a` });
      const b = await buildImageLayout({ image: HTTPD, cacheDir: `${dir}/b` });
      assert.equal(a.manifestDigest, b.manifestDigest);
      assert.deepEqual(await Deno.readFile(a.tarball), await Deno.readFile(b.tarball));
      const again = await buildImageLayout({ image: HTTPD, cacheDir: `${dir}/a` });
      assert.equal(again.tarball, a.tarball, "a second build comes from the cache");

      const index = JSON.parse(await Deno.readTextFile(`${a.layoutDir}/index.json`));
      assert.equal(index.manifests.length, 1);
      assert.equal(index.manifests[0].digest, a.manifestDigest);
      assert.deepEqual(index.manifests[0].annotations, {
        "io.containerd.image.name": HTTPD_IMAGE,
        "org.opencontainers.image.ref.name": "1",
      });
      const hex = (d: string) => d.replace("sha256:", "");
      const config = JSON.parse(
        await Deno.readTextFile(`${a.layoutDir}/blobs/sha256/${hex(a.configDigest)}`),
      );
      assert.equal(config.os, "linux");
      assert.equal(config.architecture, Deno.build.arch === "aarch64" ? "arm64" : "amd64");
      assert.deepEqual(config.config.Cmd, HTTPD.cmd);
      assert.equal(config.rootfs.diff_ids.length, 1);

      const layer = await listTar(`${a.layoutDir}/blobs/sha256/${hex(a.layerDigest)}`, true);
      assert.match(layer, /^-rwxr-xr-x root\/root .* 2024-01-01 00:00 bin\/busybox$/m);
      for (const applet of ["sh", "sleep", "echo", "cat", "httpd", "nc", "wget", "ls"]) {
        assert.match(layer, new RegExp(`^l.* bin/${applet} -> busybox$`, "m"));
      }
      assert.match(layer, /^drwxrwxrwt .* tmp\/$/m);
      assert.match(layer, / etc\/passwd$/m);
      assert.match(layer, / www\/index\.html$/m);
      assert.match(await listTar(a.tarball, false), / oci-layout\n/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "importImages makes busybox, pause and httpd runnable in containerd",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "images-test-" });
    try {
      await using containerd = await startContainerd({ dir, signal: AbortSignal.timeout(120_000) });
      const socket = containerd.socket;
      const built = await importImages({ containerdSocket: socket });
      assert.deepEqual(built.map((b) => b.name), [BUSYBOX_IMAGE, PAUSE_IMAGE, HTTPD_IMAGE]);
      const listed = (await ctrOrThrow(socket, NS, ["images", "ls", "-q"], { what: "list" }))
        .split("\n");
      for (const name of [BUSYBOX_IMAGE, PAUSE_IMAGE, HTTPD_IMAGE]) {
        assert.ok(listed.includes(name), `${name} in ${listed.join(", ")}`);
      }

      const echo = await ctrOrThrow(
        socket,
        NS,
        ["run", "--rm", BUSYBOX_IMAGE, "echo-test", "sh", "-c", "echo hello from $(id -un)"],
        { what: "run busybox" },
      );
      assert.equal(echo.trim(), "hello from root");

      // The sandbox image blocks until SIGTERM and then exits.
      await ctrOrThrow(socket, NS, ["run", "-d", PAUSE_IMAGE, "pause-test"], { what: "run" });
      const status = async (id: string) =>
        (await ctrOrThrow(socket, NS, ["tasks", "ls"], { what: "list tasks" }))
          .split("\n").find((l) => l.startsWith(`${id} `))?.trim().split(/\s+/)[2];
      assert.equal(await status("pause-test"), "RUNNING");
      await ctrOrThrow(socket, NS, ["tasks", "kill", "-s", "SIGTERM", "pause-test"], {
        what: "stop pause",
      });
      await waitFor(
        "pause to exit on SIGTERM",
        5_000,
        async () => await status("pause-test") === "STOPPED",
      );

      // httpd's own Cmd serves index.html on port 80 in its network namespace.
      await ctrOrThrow(socket, NS, ["run", "-d", HTTPD_IMAGE, "httpd-test"], { what: "run" });
      let page = "";
      await waitFor("httpd to answer", 10_000, async () => {
        const got = await ctr(socket, [
          ...["tasks", "exec", "--exec-id", `wget-${crypto.randomUUID().slice(0, 8)}`],
          ...["httpd-test", "wget", "-q", "-O", "-", `http://127.0.0.1:${HTTPD_PORT}/`],
        ]);
        page = got.output;
        return got.code === 0;
      });
      assert.equal(page, HTTPD_INDEX);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "pushImage to a registry with auth refuses anonymous pulls and serves authenticated ones",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "images-test-" });
    const auth = { username: "tester", password: "s3cret pass" };
    try {
      await using registry = await startRegistry({ dir: `${dir}/registry`, auth });
      assert.match(registry.host, /^127\.0\.0\.1:\d+$/);
      await assert.rejects(
        pushImage({ registry, image: BUSYBOX, ref: "test/busybox:1" }),
        (err: Error) => err instanceof RegistryError && /401 Unauthorized/.test(err.message),
      );
      const pushed = await pushImage({ registry, image: BUSYBOX, ref: "test/busybox:1", auth });
      assert.equal(pushed.ref, `${registry.host}/test/busybox:1`);
      assert.equal(pushed.digest, (await buildImageLayout({ image: BUSYBOX })).manifestDigest);

      await using containerd = await startContainerd({
        dir: `${dir}/containerd`,
        signal: AbortSignal.timeout(120_000),
      });
      const socket = containerd.socket;
      const anonymous = await ctr(socket, ["images", "pull", "--plain-http", pushed.ref]);
      assert.notEqual(anonymous.code, 0, anonymous.output);
      assert.match(anonymous.output, /401 Unauthorized/);
      const wrong = await ctr(socket, [
        ...["images", "pull", "--plain-http", "--user", `${auth.username}:wrong`, pushed.ref],
      ]);
      assert.notEqual(wrong.code, 0, wrong.output);
      assert.match(wrong.output, /401 Unauthorized/);

      await ctrOrThrow(
        socket,
        NS,
        [
          "images",
          "pull",
          "--plain-http",
          "--user",
          `${auth.username}:${auth.password}`,
          pushed.ref,
        ],
        { what: "pull with credentials" },
      );
      const listed = await ctrOrThrow(socket, NS, ["images", "ls"], { what: "list" });
      assert.match(listed, new RegExp(`^${pushed.ref} .* ${pushed.digest} `, "m"));
      const echo = await ctrOrThrow(
        socket,
        NS,
        ["run", "--rm", pushed.ref, "pulled-test", "echo", "pulled and ran"],
        { what: "run the pulled image" },
      );
      assert.equal(echo.trim(), "pulled and ran");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "startRegistry without auth serves anonymous pushes and stop is idempotent",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "images-test-" });
    try {
      const registry = await startRegistry({ dir });
      try {
        const pushed = await pushImage({ registry: registry.host, image: PAUSE, ref: "pause:1" });
        const tags = await fetch(`${registry.url}/v2/pause/tags/list`).then((r) => r.json());
        assert.deepEqual(tags, { name: "pause", tags: ["1"] });
        const head = await fetch(`${registry.url}/v2/pause/manifests/1`, {
          method: "HEAD",
          headers: { Accept: "application/vnd.oci.image.manifest.v1+json" },
        });
        assert.equal(head.headers.get("Docker-Content-Digest"), pushed.digest);
      } finally {
        await registry.stop();
      }
      await registry.stop();
      await assert.rejects(fetch(`${registry.url}/v2/`));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("parseLdd reads each file's libraries, its interpreter and the names not found", () => {
  const output = [
    "/usr/sbin/iptables-save:",
    "\tlinux-vdso.so.1 (0x00007f3644534000)",
    "\tlibxtables.so.12 => /lib/x86_64-linux-gnu/libxtables.so.12 (0x00007f364446e000)",
    "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3644251000)",
    "\t/lib64/ld-linux-x86-64.so.2 (0x00007f3644536000)",
    "/bin/busybox:",
    "\tnot a dynamic executable",
    "/opt/tool:",
    "\tlibgone.so.1 => not found",
    "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3644251000)",
    "",
  ].join("\n");
  assert.deepEqual(
    parseLdd(output),
    new Map([
      ["/usr/sbin/iptables-save", {
        libraries: [
          "/lib/x86_64-linux-gnu/libxtables.so.12",
          "/lib/x86_64-linux-gnu/libc.so.6",
          "/lib64/ld-linux-x86-64.so.2",
        ],
        missing: [],
      }],
      ["/bin/busybox", { libraries: [], missing: [] }],
      ["/opt/tool", { libraries: ["/lib/x86_64-linux-gnu/libc.so.6"], missing: ["libgone.so.1"] }],
    ]),
  );
});

Deno.test({
  name: "buildImageLayout with hostPrograms adds programs, links, modules and ldd's libraries",
  ignore: hostGate.ignore,
  async fn() {
    hostGate.check();
    const program = (await findProgram("iptables-save"))!;
    const real = await Deno.realPath(program);
    // A module directory with a file and a link, as xtables' libxt_SNAT.so -> libxt_NAT.so.
    const dir = await Deno.makeTempDir({ prefix: "images-test-" });
    try {
      await Deno.mkdir(`${dir}/modules`);
      await Deno.writeTextFile(`${dir}/modules/mod_a.so`, "not really ELF\n");
      await Deno.symlink("mod_a.so", `${dir}/modules/mod_b.so`);
      const image = {
        name: "kubelet-ts.local/host-programs:1",
        hostPrograms: { programs: [program], moduleDirs: [`${dir}/modules`] },
      };
      const built = await buildImageLayout({ image, cacheDir: `${dir}/cache` });
      const layer = await listTar(
        `${built.layoutDir}/blobs/sha256/${built.layerDigest.replace("sha256:", "")}`,
        true,
      );
      const rel = (p: string) => p.slice(1).replace(/[.+]/g, "\\$&");
      if (real !== program) {
        assert.match(layer, new RegExp(`^l.* ${rel(program)} -> ${real}$`, "m"));
      }
      assert.match(layer, new RegExp(`^-rwxr-xr-x root/root .* ${rel(real)}$`, "m"));
      assert.match(layer, new RegExp(`^-.* ${rel(`${dir}/modules/mod_a.so`)}$`, "m"));
      assert.match(
        layer,
        new RegExp(`^l.* ${rel(`${dir}/modules/mod_b.so`)} -> ${dir}/modules/mod_a.so$`, "m"),
      );
      // Every library ldd finds, the interpreter among them, is in the image at that path.
      const ldd = await new Deno.Command("ldd", { args: [real, real], stdout: "piped" }).output();
      const libraries = parseLdd(new TextDecoder().decode(ldd.stdout)).get(real)!.libraries;
      assert.ok(libraries.some((l) => l.includes("ld-linux")), libraries.join(", "));
      for (const lib of libraries) {
        const target = await Deno.realPath(lib);
        assert.match(layer, new RegExp(`^-.* ${rel(target)}$`, "m"));
        if (target !== lib) assert.match(layer, new RegExp(`^l.* ${rel(lib)} -> ${target}$`, "m"));
      }

      // The cache key covers the modules' content: a changed module is a new build.
      await Deno.writeTextFile(`${dir}/modules/mod_a.so`, "changed\n");
      const again = await buildImageLayout({ image, cacheDir: `${dir}/cache` });
      assert.notEqual(again.tarball, built.tarball);
      assert.notEqual(again.layerDigest, built.layerDigest);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
