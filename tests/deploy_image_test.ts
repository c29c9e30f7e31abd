/**
 * @module
 * The DaemonSet bootstrap image (`deploy/installer_image.ts`) and its installer
 * (`deploy/install.sh`) against a real containerd: the image tarball imports with
 * `ctr images import` under its name, its config holds the installer entrypoint, and run with
 * `ctr run` (a test root bind-mounted where the DaemonSet mounts the host's directories, the
 * restart skipped) it puts the binary, unit and drop-in in place with their modes; a second run
 * changes nothing. Run directly by busybox sh with a recording stand-in for nsenter, it restarts
 * kubelet.service only when something changed, and keeps a unit edited on the host.
 *
 * The agent's real binary cannot be built here (`deno compile` cannot fetch denort), so the
 * image carries a stand-in executable: a shell script printing a version, padded with binary
 * bytes so a byte-for-byte copy is what is checked. Needs root, containerd, ctr, runc and
 * busybox-static; without them it is skipped loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import { startContainerd } from "./containerd_harness.ts";
import { ctrOrThrow } from "./images.ts";
import { findProgram } from "./apt.ts";
import { requireRoot } from "./requirements.ts";
import {
  BINARY_SHA256_LABEL,
  INSTALL_DIR,
  INSTALLER_IMAGE,
  writeInstallerImage,
} from "../deploy/installer_image.ts";
import { sha256Hex } from "../deploy/oci_layout.ts";

const gate = await requireRoot("deploy image tests", ["containerd", "ctr", "runc", "/bin/busybox"]);

const NS = "k8s.io";
const DEPLOY = new URL("../deploy/", import.meta.url).pathname;
const UNIT = "/etc/systemd/system/kubelet.service";
const DROPIN = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf";

/** A stand-in for the compiled agent: runs and prints a version, then carries binary bytes. */
function standIn(version: string): Uint8Array {
  const script = new TextEncoder().encode(`#!/bin/sh\necho "Kubernetes ${version}"\nexit 0\n`);
  const out = new Uint8Array(script.length + 256 * 1024);
  out.set(script);
  let x = 0x2545f491;
  for (let i = script.length; i < out.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff; // deterministic noise, NUL bytes included
  }
  return out;
}

async function writeExecutable(path: string, data: Uint8Array): Promise<void> {
  await Deno.writeFile(path, data);
  await Deno.chmod(path, 0o755);
}

/** A directory tree standing in for a host: the directories the DaemonSet mounts. */
async function hostRoot(dir: string): Promise<string> {
  await Deno.mkdir(`${dir}/usr/local/bin`, { recursive: true });
  await Deno.mkdir(`${dir}/etc/systemd/system`, { recursive: true });
  return dir;
}

async function snapshot(root: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const path of ["/usr/local/bin/kubelet", UNIT, DROPIN]) {
    const st = await Deno.stat(`${root}${path}`);
    out.set(path, `${st.ino} ${st.mtime?.getTime()} ${(st.mode ?? 0) & 0o7777}`);
  }
  return out;
}

async function run(
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(cmd, {
    args,
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test({
  name: "installer image imports into containerd and installs the binary and units in a test root",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "deploy-image-test-" });
    try {
      const binary = standIn("v1.36.3+kubelet-ts.0.1.0 (stand-in)");
      await writeExecutable(`${dir}/kubelet`, binary);
      const image = await writeInstallerImage({
        binary: `${dir}/kubelet`,
        output: `${dir}/installer.tar`,
      });
      const again = await writeInstallerImage({
        binary: `${dir}/kubelet`,
        output: `${dir}/installer-again.tar`,
      });
      assert.equal(again.manifestDigest, image.manifestDigest, "two builds, one digest");
      assert.deepEqual(
        await Deno.readFile(`${dir}/installer-again.tar`),
        await Deno.readFile(`${dir}/installer.tar`),
      );

      await using containerd = await startContainerd({
        dir: `${dir}/containerd`,
        signal: AbortSignal.timeout(300_000),
      });
      const ctr = (args: string[], what: string) =>
        ctrOrThrow(containerd.socket, NS, args, { what });
      await ctr(["images", "import", `${dir}/installer.tar`], "import the installer image");
      const listed = await ctr(["images", "ls"], "list images");
      const row = listed.split("\n").find((l) => l.startsWith(`${INSTALLER_IMAGE} `));
      assert.ok(row, `ctr images ls lists ${INSTALLER_IMAGE}:\n${listed}`);
      assert.ok(row.includes(image.manifestDigest), row);

      // The config as containerd stores it: the installer is the entrypoint.
      const config = JSON.parse(await ctr(["content", "get", image.configDigest], "read config"));
      assert.deepEqual(config.config.Entrypoint, ["/bin/sh", `${INSTALL_DIR}/install.sh`]);
      assert.equal(config.config.Labels[BINARY_SHA256_LABEL], sha256Hex(binary));
      assert.equal(config.os, "linux");
      assert.deepEqual(config.rootfs.diff_ids, [image.diffId]);

      // The image's own files, as the container sees them.
      const version = await ctr(
        ["run", "--rm", INSTALLER_IMAGE, "installer-version", `${INSTALL_DIR}/kubelet`],
        "run the binary in the image",
      );
      assert.equal(version.trim(), "Kubernetes v1.36.3+kubelet-ts.0.1.0 (stand-in)");

      // Without the host's directories mounted it refuses, rather than install into itself.
      const unmounted = await run("ctr", [
        "--address",
        containerd.socket,
        "--namespace",
        NS,
        "run",
        "--rm",
        "--env",
        "KEEP_RUNNING=false",
        INSTALLER_IMAGE,
        "installer-unmounted",
      ]);
      assert.notEqual(unmounted.code, 0);
      assert.match(
        unmounted.stdout + unmounted.stderr,
        /\/host\/usr\/local\/bin is not a directory: mount the host's \/usr\/local\/bin there/,
      );

      // As the DaemonSet runs it: host directories under /host, restart skipped.
      const root = await hostRoot(`${dir}/host`);
      const install = (id: string) =>
        ctr([
          "run",
          "--rm",
          "--mount",
          `type=bind,src=${root}/usr/local/bin,dst=/host/usr/local/bin,options=rbind:rw`,
          "--mount",
          `type=bind,src=${root}/etc/systemd/system,dst=/host/etc/systemd/system,options=rbind:rw`,
          "--env",
          "RESTART_KUBELET=false",
          "--env",
          "KEEP_RUNNING=false",
          INSTALLER_IMAGE,
          id,
        ], `run the installer (${id})`);
      const first = await install("installer-1");
      assert.match(first, /installed \/usr\/local\/bin\/kubelet \(sha256 [0-9a-f]{64}\)/);
      assert.match(first, /installed \/etc\/systemd\/system\/kubelet\.service\n/);
      assert.match(first, /restart skipped \(RESTART_KUBELET=false\)/);

      assert.deepEqual(await Deno.readFile(`${root}/usr/local/bin/kubelet`), binary);
      assert.equal(
        await Deno.readTextFile(`${root}${UNIT}`),
        await Deno.readTextFile(`${DEPLOY}systemd/kubelet.service`),
      );
      assert.equal(
        await Deno.readTextFile(`${root}${DROPIN}`),
        await Deno.readTextFile(`${DEPLOY}systemd/10-kubeadm.conf`),
      );
      const modes = [...(await snapshot(root)).values()].map((s) => s.split(" ")[2]);
      assert.deepEqual(modes, [String(0o755), String(0o644), String(0o644)]);
      const installed = await run(`${root}/usr/local/bin/kubelet`, []);
      assert.equal(installed.stdout.trim(), "Kubernetes v1.36.3+kubelet-ts.0.1.0 (stand-in)");

      const before = await snapshot(root);
      const second = await install("installer-2");
      assert.match(second, /\/usr\/local\/bin\/kubelet is up to date/);
      assert.match(second, /nothing changed/);
      assert.deepEqual(await snapshot(root), before, "a second run touches no file");

      // systemd reads the installed unit and drop-in without a complaint.
      const analyze = await findProgram("systemd-analyze");
      if (analyze) {
        const v = `${dir}/verify`;
        await Deno.mkdir(`${v}/kubelet.service.d`, { recursive: true });
        const at = (text: string) =>
          text.replaceAll("/usr/local/bin/kubelet", `${root}/usr/local/bin/kubelet`);
        await Deno.writeTextFile(`${v}/kubelet.service`, at(await Deno.readTextFile(root + UNIT)));
        await Deno.writeTextFile(
          `${v}/kubelet.service.d/10-kubeadm.conf`,
          at(await Deno.readTextFile(root + DROPIN)),
        );
        const verified = await run(analyze, ["verify", `${v}/kubelet.service`]);
        assert.equal(verified.stdout + verified.stderr, "", "systemd-analyze verify is silent");
      } else {
        console.warn("systemd-analyze is not installed: the unit files were not verified");
      }
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});

Deno.test({
  name: "install.sh restarts kubelet.service only on a change and keeps a unit edited on the host",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "deploy-install-test-" });
    try {
      const source = `${dir}/source`;
      await Deno.mkdir(source);
      await Deno.copyFile(`${DEPLOY}install.sh`, `${source}/install.sh`);
      await Deno.copyFile(`${DEPLOY}systemd/kubelet.service`, `${source}/kubelet.service`);
      await Deno.copyFile(`${DEPLOY}systemd/10-kubeadm.conf`, `${source}/10-kubeadm.conf`);
      await writeExecutable(`${source}/kubelet`, standIn("v1"));
      const root = await hostRoot(`${dir}/host`);
      await Deno.mkdir(`${root}/usr/bin`);
      // Records what would run on the host (nsenter -t 1 ... in the DaemonSet).
      const calls = `${dir}/calls`;
      await writeExecutable(
        `${dir}/host-exec`,
        new TextEncoder().encode(`#!/bin/sh\necho "$*" >> ${calls}\n`),
      );
      const readCalls = async () =>
        (await Deno.readTextFile(calls).catch(() => "")).split("\n").filter(Boolean);
      const install = async () => {
        const r = await run("/bin/busybox", ["sh", `${source}/install.sh`], {
          PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
          HOST_ROOT: root,
          KUBELET_PATH: "/usr/bin/kubelet",
          HOST_EXEC: `${dir}/host-exec`,
          KEEP_RUNNING: "false",
        });
        assert.equal(r.code, 0, r.stdout + r.stderr);
        return r.stdout;
      };

      await install();
      assert.deepEqual(await readCalls(), [
        "systemctl daemon-reload",
        "systemctl enable kubelet.service",
        "systemctl restart kubelet.service",
      ]);
      // The units name the binary where KUBELET_PATH put it.
      assert.deepEqual(await Deno.readFile(`${root}/usr/bin/kubelet`), standIn("v1"));
      assert.match(
        await Deno.readTextFile(`${root}${DROPIN}`),
        /^ExecStart=\/usr\/bin\/kubelet \$KUBELET_KUBECONFIG_ARGS /m,
      );
      assert.match(await Deno.readTextFile(`${root}${UNIT}`), /^ExecStart=\/usr\/bin\/kubelet$/m);

      await Deno.remove(calls);
      assert.match(await install(), /nothing changed/);
      assert.deepEqual(await readCalls(), [], "nothing changed, nothing restarted");

      // A new binary is installed and restarted; a unit without the marker line is kept.
      const edited = (await Deno.readTextFile(`${root}${UNIT}`))
        .replace(/^# Managed by the kubelet-ts installer.*\n/, "")
        .replace("RestartSec=10", "RestartSec=3");
      await Deno.writeTextFile(`${root}${UNIT}`, edited);
      await writeExecutable(`${source}/kubelet`, standIn("v2"));
      const out = await install();
      assert.match(out, /installed \/usr\/bin\/kubelet/);
      assert.match(out, /kept \/etc\/systemd\/system\/kubelet\.service: it has no '# Managed/);
      assert.match(out, /\/etc\/systemd\/system\/kubelet\.service\.d\/10-kubeadm\.conf is up to/);
      assert.equal(await Deno.readTextFile(`${root}${UNIT}`), edited);
      assert.deepEqual(await Deno.readFile(`${root}/usr/bin/kubelet`), standIn("v2"));
      assert.equal(
        (await readCalls()).join("\n"),
        "systemctl daemon-reload\nsystemctl enable kubelet.service\nsystemctl restart kubelet.service",
      );

      // Bad settings are refused by name before anything is touched.
      const bad = await run("/bin/busybox", ["sh", `${source}/install.sh`], {
        HOST_ROOT: root,
        KUBELET_PATH: "usr/bin/kubelet",
        KEEP_RUNNING: "false",
      });
      assert.notEqual(bad.code, 0);
      assert.match(
        bad.stderr,
        /KUBELET_PATH must be an absolute path: current value is 'usr\/bin\/kubelet'/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
