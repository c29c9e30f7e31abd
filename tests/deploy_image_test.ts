/**
 * @module
 * The DaemonSet bootstrap image (`deploy/installer_image.ts`) and its installer
 * (`deploy/install.sh`) against a real containerd: the image tarball imports with
 * `ctr images import` under its name, its config holds the installer entrypoint, and run with
 * `ctr run` (a test root bind-mounted where the DaemonSet mounts the host's directories, the
 * host commands skipped) it puts the binary, unit and drop-in in place with their modes; a
 * second run changes nothing. Run directly by busybox sh with a stand-in for nsenter that
 * records each host command and runs the binary in the test root, it runs a new binary once
 * before installing it (and refuses one that fails there or does not match its SHA256SUMS),
 * restarts kubelet.service only when something changed, and keeps a unit edited on the host.
 *
 * Most tests carry a stand-in executable (a shell script printing a version, padded with binary
 * bytes so a byte-for-byte copy is what is checked); one builds the image from the release file
 * (`deno task release`), installs it from the image into a test root with the units naming it,
 * and shows the installer's run on the host extracting it, so the service's first start does not.
 * Needs root, containerd, ctr, runc and busybox-static; without them it is skipped loudly, or
 * fails when CI=true.
 */

import assert from "node:assert/strict";
import { buildRelease, hostPlatform } from "../deploy/release.ts";
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

/**
 * A stand-in for `nsenter -t 1 ...` (HOST_EXEC) with `root` as the host's `/`: it records each
 * command in `calls`, answers systemctl, and runs anything else (the new binary's `--version`)
 * from `root`, extracting a release file under `root/var/lib/kubelet-ts` as root on a node would
 * under /var/lib/kubelet-ts.
 */
async function hostExec(path: string, root: string, calls: string): Promise<string> {
  await writeExecutable(
    path,
    new TextEncoder().encode(`#!/bin/sh
echo "$*" >> ${calls}
case $1 in
systemctl) exit 0 ;;
esac
program=$1
shift
KUBELET_TS_EXTRACT_DIR=${root}/var/lib/kubelet-ts exec "${root}$program" "$@"
`),
  );
  return path;
}

/** What the image holds under INSTALL_DIR, in `dir`: the units, the installer, the binary. */
async function sourceDir(dir: string, binary: Uint8Array): Promise<string> {
  await Deno.mkdir(dir, { recursive: true });
  await Deno.copyFile(`${DEPLOY}install.sh`, `${dir}/install.sh`);
  await Deno.copyFile(`${DEPLOY}systemd/kubelet.service`, `${dir}/kubelet.service`);
  await Deno.copyFile(`${DEPLOY}systemd/10-kubeadm.conf`, `${dir}/10-kubeadm.conf`);
  await setBinary(dir, binary);
  return dir;
}

/** The binary and its SHA256SUMS in a source directory. */
async function setBinary(dir: string, binary: Uint8Array): Promise<void> {
  await writeExecutable(`${dir}/kubelet`, binary);
  await Deno.writeTextFile(`${dir}/SHA256SUMS`, `${sha256Hex(binary)}  kubelet\n`);
}

/** The program ExecStart runs, in the unit or drop-in text (the last ExecStart= that sets one). */
function execStartProgram(unit: string): string | undefined {
  const set = [...unit.matchAll(/^ExecStart=(\S+)/gm)].map((m) => m[1]);
  return set.at(-1);
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
      const sums = await ctr(
        ["run", "--rm", INSTALLER_IMAGE, "installer-sums", "cat", `${INSTALL_DIR}/SHA256SUMS`],
        "read SHA256SUMS in the image",
      );
      assert.equal(sums, `${sha256Hex(binary)}  kubelet\n`);

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
          "PREPARE_KUBELET=false",
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
  name:
    "install.sh runs a new binary on the host first, restarts kubelet.service only on a change " +
    "and keeps a unit edited on the host",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "deploy-install-test-" });
    try {
      const source = await sourceDir(`${dir}/source`, standIn("v1"));
      const root = await hostRoot(`${dir}/host`);
      await Deno.mkdir(`${root}/usr/bin`);
      // Records what would run on the host (nsenter -t 1 ... in the DaemonSet).
      const calls = `${dir}/calls`;
      const exec = await hostExec(`${dir}/host-exec`, root, calls);
      const readCalls = async () =>
        (await Deno.readTextFile(calls).catch(() => "")).split("\n").filter(Boolean);
      const attempt = () =>
        run("/bin/busybox", ["sh", `${source}/install.sh`], {
          PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
          HOST_ROOT: root,
          KUBELET_PATH: "/usr/bin/kubelet",
          HOST_EXEC: exec,
          KEEP_RUNNING: "false",
        });
      const install = async () => {
        const r = await attempt();
        assert.equal(r.code, 0, r.stdout + r.stderr);
        return r.stdout;
      };
      const restart = [
        "systemctl daemon-reload",
        "systemctl enable kubelet.service",
        "systemctl restart kubelet.service",
      ];

      assert.match(await install(), /the new binary runs on the host: Kubernetes v1\n/);
      assert.deepEqual(await readCalls(), [
        "/usr/bin/kubelet.kubelet-ts-new --version",
        ...restart,
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
      assert.deepEqual(await readCalls(), [], "nothing changed, nothing run, nothing restarted");

      // A new binary that does not run on the host is not installed, and nothing restarts.
      await setBinary(
        source,
        new TextEncoder().encode(
          "#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n",
        ),
      );
      const broken = await attempt();
      assert.notEqual(broken.code, 0);
      assert.match(
        broken.stderr,
        /the new binary does not run on the host, so it is not installed: .*error while loading/,
      );
      assert.deepEqual(await Deno.readFile(`${root}/usr/bin/kubelet`), standIn("v1"));
      assert.deepEqual(
        [...Deno.readDirSync(`${root}/usr/bin`)].map((e) => e.name),
        ["kubelet"],
        "no temporary file left",
      );
      assert.deepEqual(await readCalls(), ["/usr/bin/kubelet.kubelet-ts-new --version"]);

      // A binary that does not match its SHA256SUMS is refused before anything is touched.
      await writeExecutable(`${source}/kubelet`, standIn("v2"));
      const damaged = await attempt();
      assert.notEqual(damaged.code, 0);
      assert.match(
        damaged.stderr,
        /kubelet does not match .*SHA256SUMS \(its sha256 is [0-9a-f]{64}\)/,
      );
      assert.deepEqual(await Deno.readFile(`${root}/usr/bin/kubelet`), standIn("v1"));

      // A new binary is installed and restarted; a unit without the marker line is kept.
      await Deno.remove(calls);
      const edited = (await Deno.readTextFile(`${root}${UNIT}`))
        .replace(/^# Managed by the kubelet-ts installer.*\n/, "")
        .replace("RestartSec=10", "RestartSec=3");
      await Deno.writeTextFile(`${root}${UNIT}`, edited);
      await setBinary(source, standIn("v2"));
      const out = await install();
      assert.match(out, /installed \/usr\/bin\/kubelet/);
      assert.match(out, /kept \/etc\/systemd\/system\/kubelet\.service: it has no '# Managed/);
      assert.match(out, /\/etc\/systemd\/system\/kubelet\.service\.d\/10-kubeadm\.conf is up to/);
      assert.equal(await Deno.readTextFile(`${root}${UNIT}`), edited);
      assert.deepEqual(await Deno.readFile(`${root}/usr/bin/kubelet`), standIn("v2"));
      assert.deepEqual(await readCalls(), [
        "/usr/bin/kubelet.kubelet-ts-new --version",
        ...restart,
      ]);

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

Deno.test({
  name: "the installer image of the release file installs it in a test root, the units name it, " +
    "and its run on the host extracts it",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "deploy-release-image-test-" });
    try {
      const [release] = await buildRelease({
        outdir: `${dir}/dist`,
        platforms: [hostPlatform()],
        kind: "self-extracting",
        log: () => {},
      });
      assert.ok(release);
      const sums = `${dir}/dist/${release.platform}/SHA256SUMS`;
      assert.equal(await Deno.readTextFile(sums), `${release.sha256}  kubelet\n`);

      // A SHA256SUMS beside the file that does not name it with its sum is refused.
      await Deno.mkdir(`${dir}/tampered`);
      await Deno.link(release.path, `${dir}/tampered/kubelet`);
      await Deno.writeTextFile(`${dir}/tampered/SHA256SUMS`, `${"0".repeat(64)}  kubelet\n`);
      await assert.rejects(
        writeInstallerImage({ binary: `${dir}/tampered/kubelet`, output: `${dir}/no.tar` }),
        /kubelet does not match .*SHA256SUMS: its sha256 is [0-9a-f]{64}, the file says 0{64}/,
      );

      const image = await writeInstallerImage({
        binary: release.path,
        output: `${dir}/installer.tar`,
      });
      await using containerd = await startContainerd({
        dir: `${dir}/containerd`,
        signal: AbortSignal.timeout(300_000),
      });
      const ctr = (args: string[], what: string) =>
        ctrOrThrow(containerd.socket, NS, args, { what, timeoutMs: 120_000 });
      await ctr(["images", "import", `${dir}/installer.tar`], "import the installer image");
      const config = JSON.parse(await ctr(["content", "get", image.configDigest], "read config"));
      assert.equal(config.config.Labels[BINARY_SHA256_LABEL], release.sha256);

      // As the DaemonSet runs it, host commands skipped (they would reach this machine).
      const root = await hostRoot(`${dir}/host`);
      const out = await ctr([
        "run",
        "--rm",
        "--mount",
        `type=bind,src=${root}/usr/local/bin,dst=/host/usr/local/bin,options=rbind:rw`,
        "--mount",
        `type=bind,src=${root}/etc/systemd/system,dst=/host/etc/systemd/system,options=rbind:rw`,
        ...["--env", "RESTART_KUBELET=false", "--env", "PREPARE_KUBELET=false"],
        ...["--env", "KEEP_RUNNING=false"],
        INSTALLER_IMAGE,
        "installer-release",
      ], "run the installer");
      assert.match(
        out,
        new RegExp(`installed /usr/local/bin/kubelet \\(sha256 ${release.sha256}\\)`),
      );

      // The installed file is the release, as its SHA256SUMS says, and both units run it.
      const check = await new Deno.Command("sha256sum", {
        args: ["-c", sums],
        cwd: `${root}/usr/local/bin`,
        stdout: "piped",
      }).output();
      assert.equal(new TextDecoder().decode(check.stdout), "kubelet: OK\n");
      for (const unit of [UNIT, DROPIN]) {
        const program = execStartProgram(await Deno.readTextFile(`${root}${unit}`));
        assert.equal(program, "/usr/local/bin/kubelet", unit);
        const installed = await Deno.stat(`${root}${program}`);
        assert.equal(installed.size, release.bytes);
        assert.equal((installed.mode ?? 0) & 0o777, 0o755);
      }

      // The installer on a node: it runs the new file once on the host before putting it in
      // place, which extracts it, so the service's first start only checks the tree.
      const source = await sourceDir(`${dir}/source`, await Deno.readFile(release.path));
      const node = await hostRoot(`${dir}/node`);
      const calls = `${dir}/calls`;
      const r = await run("/bin/busybox", ["sh", `${source}/install.sh`], {
        PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
        HOST_ROOT: node,
        HOST_EXEC: await hostExec(`${dir}/host-exec`, node, calls),
        KEEP_RUNNING: "false",
      });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(
        r.stdout,
        /the new binary runs on the host: kubelet-ts: extracting into \S+\/var\/lib\/kubelet-ts\/[^\n]+\nKubernetes v1\.\d+\.\d+\+kubelet-ts\./,
      );
      assert.deepEqual((await Deno.readTextFile(calls)).split("\n").filter(Boolean), [
        "/usr/local/bin/kubelet.kubelet-ts-new --version",
        "systemctl daemon-reload",
        "systemctl enable kubelet.service",
        "systemctl restart kubelet.service",
      ]);
      const first = await run(`${node}/usr/local/bin/kubelet`, ["--version"], {
        KUBELET_TS_EXTRACT_DIR: `${node}/var/lib/kubelet-ts`,
      });
      assert.equal(first.code, 0, first.stderr);
      assert.match(first.stdout, /^Kubernetes v1\.\d+\.\d+\+kubelet-ts\./);
      assert.equal(first.stderr, "", "the first start as the service finds the tree in place");
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
