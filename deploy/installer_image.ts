/**
 * @module
 * The DaemonSet bootstrap image: Debian's static busybox (`/bin/busybox` with a link per
 * applet, so the installer has `sh`, `sha256sum`, `nsenter`...), and under {@link INSTALL_DIR}
 * the agent's executable with a `SHA256SUMS` naming it, `install.sh`, `kubelet.service` and
 * `10-kubeadm.conf` from `deploy/`. The entrypoint runs the installer (see `deploy/install.sh`,
 * and `deploy/daemonset.yaml` for the manifest that runs it). Built by {@link buildOciImage}
 * without a container engine, so the same executable always gives the same image digest.
 *
 * The executable is the release file by default (`deno task release`: `dist/<platform>/kubelet`
 * with `SHA256SUMS` beside it), or any other given with `--binary` (`deno task compile`'s
 * `./kubelet`, a stand-in in tests). A `SHA256SUMS` beside it must name it with its sha256;
 * the image's own `SHA256SUMS` is written from the executable, so the installer checks its copy
 * either way.
 *
 * Run as `deno task image [--binary dist/linux-amd64/kubelet] [--output kubelet-installer.tar]
 * [--name ref]`. Talks to the file system and runs `busybox --list`; nothing else.
 */

import { parseArgs } from "node:util";
import { basename, dirname, join } from "node:path";
import { AGENT_VERSION } from "../src/util/version.ts";
import { buildOciImage, type OciImage, sha256Hex, type TarEntry } from "./oci_layout.ts";

/** The image reference the DaemonSet manifest uses. */
export const INSTALLER_IMAGE = `kubelet-ts.local/kubelet-installer:${AGENT_VERSION}`;
/** Where the installer and what it installs live in the image. */
export const INSTALL_DIR = "/opt/kubelet-ts";
/** Debian's busybox-static. */
export const DEFAULT_BUSYBOX = "/bin/busybox";
/** Label on the image config holding the sha256 of the binary inside. */
export const BINARY_SHA256_LABEL = "io.kubelet-ts.binary.sha256";
/** The release file of this host's platform, where `deno task release` writes it. */
export const DEFAULT_BINARY = `dist/linux-${
  Deno.build.arch === "aarch64" ? "arm64" : "amd64"
}/kubelet`;

/** What {@link buildInstallerImage} needs. */
export interface InstallerImageOptions {
  /** The agent's executable: the release file, or the output of `deno task compile`. */
  binary: string;
  /** @default INSTALLER_IMAGE */
  name?: string;
  /** A statically linked busybox. @default "/bin/busybox" */
  busybox?: string;
}

/** The image cannot be built from what was given; the message names the file and why. */
export class InstallerImageError extends Error {
  override name = "InstallerImageError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const DEPLOY_DIR = new URL(".", import.meta.url).pathname;
/** Files copied from `deploy/` into {@link INSTALL_DIR}, with their modes. */
const DEPLOY_FILES: readonly { from: string; to: string; mode: number }[] = [
  { from: "install.sh", to: "install.sh", mode: 0o755 },
  { from: "systemd/kubelet.service", to: "kubelet.service", mode: 0o644 },
  { from: "systemd/10-kubeadm.conf", to: "10-kubeadm.conf", mode: 0o644 },
];

/** Builds the installer image in memory from the binary, busybox and the files in `deploy/`. */
export async function buildInstallerImage(opts: InstallerImageOptions): Promise<OciImage> {
  const binary = await readExecutable(opts.binary, "--binary");
  const sha256 = sha256Hex(binary);
  await checkSums(opts.binary, sha256);
  const busyboxPath = opts.busybox ?? DEFAULT_BUSYBOX;
  const busybox = await readExecutable(busyboxPath, "busybox");
  if (hasInterpreter(busybox)) {
    throw new InstallerImageError(
      `${busyboxPath} is dynamically linked and would not run in an image without a libc: ` +
        `install busybox-static`,
    );
  }
  const applets = await busyboxApplets(busyboxPath);

  const dir = INSTALL_DIR.slice(1);
  const layer: TarEntry[] = [
    { path: "bin/", type: "dir", mode: 0o755 },
    { path: "bin/busybox", type: "file", mode: 0o755, data: busybox },
    ...applets.filter((a) => a !== "busybox").map((a): TarEntry => ({
      path: `bin/${a}`,
      type: "symlink",
      linkname: "busybox",
    })),
    { path: "etc/", type: "dir", mode: 0o755 },
    { path: "etc/passwd", type: "file", mode: 0o644, data: utf8("root:x:0:0:root:/:/bin/sh\n") },
    { path: "etc/group", type: "file", mode: 0o644, data: utf8("root:x:0:\n") },
    { path: "host/", type: "dir", mode: 0o755 },
    { path: "opt/", type: "dir", mode: 0o755 },
    { path: `${dir}/`, type: "dir", mode: 0o755 },
    { path: `${dir}/kubelet`, type: "file", mode: 0o755, data: binary },
    { path: `${dir}/SHA256SUMS`, type: "file", mode: 0o644, data: utf8(`${sha256}  kubelet\n`) },
    { path: "tmp/", type: "dir", mode: 0o1777 },
  ];
  for (const f of DEPLOY_FILES) {
    const data = await Deno.readFile(`${DEPLOY_DIR}${f.from}`);
    layer.push({ path: `${dir}/${f.to}`, type: "file", mode: f.mode, data });
  }
  return buildOciImage({
    name: opts.name ?? INSTALLER_IMAGE,
    architecture: ociArch(Deno.build.arch),
    layer,
    config: {
      Entrypoint: ["/bin/sh", `${INSTALL_DIR}/install.sh`],
      Labels: {
        "org.opencontainers.image.title": "kubelet-ts installer",
        "org.opencontainers.image.version": AGENT_VERSION,
        [BINARY_SHA256_LABEL]: sha256,
      },
    },
    createdBy: "kubelet-ts deploy/installer_image.ts",
  });
}

/** Writes the image's layout as one tar to `output` (what `ctr images import` takes). */
export async function writeInstallerImage(
  opts: InstallerImageOptions & { output: string },
): Promise<OciImage> {
  const image = await buildInstallerImage(opts);
  const tmp = `${opts.output}.tmp-${Deno.pid}`;
  await Deno.writeFile(tmp, image.archive);
  await Deno.rename(tmp, opts.output);
  return image;
}

/**
 * When a `SHA256SUMS` sits beside `binary` (as `deno task release` writes it), checks that it
 * names the file with `sha256`; a file it does not name, or names with another sum, is refused.
 */
async function checkSums(binary: string, sha256: string): Promise<void> {
  const sums = join(dirname(binary), "SHA256SUMS");
  let text: string;
  try {
    text = await Deno.readTextFile(sums);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw new InstallerImageError(`Cannot build the installer image: ${sums}: ${err}`, {
      cause: err,
    });
  }
  const name = basename(binary);
  const listed = text.split("\n").map((l) => /^([0-9a-f]{64}) [ *](.+)$/.exec(l.trim()))
    .find((m) => m?.[2] === name)?.[1];
  if (listed === undefined) {
    throw new InstallerImageError(
      `Cannot build the installer image: ${sums} does not name '${name}'`,
    );
  }
  if (listed !== sha256) {
    throw new InstallerImageError(
      `Cannot build the installer image: ${binary} does not match ${sums}: its sha256 is ` +
        `${sha256}, the file says ${listed}`,
    );
  }
}

async function readExecutable(path: string, what: string): Promise<Uint8Array> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(path);
  } catch (err) {
    const hint = path === DEFAULT_BINARY
      ? ": run 'deno task release' first, or name the executable with --binary"
      : "";
    throw new InstallerImageError(
      `Cannot build the installer image: ${what} '${path}' cannot be read: ${
        (err as Error).message
      }${hint}`,
      { cause: err },
    );
  }
  if (!info.isFile || ((info.mode ?? 0) & 0o111) === 0) {
    throw new InstallerImageError(
      `Cannot build the installer image: ${what} '${path}' must be an executable file`,
    );
  }
  return await Deno.readFile(path);
}

/** The applet names busybox was built with (`busybox --list`). */
async function busyboxApplets(busybox: string): Promise<string[]> {
  const out = await new Deno.Command(busybox, {
    args: ["--list"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const applets = new TextDecoder().decode(out.stdout).split("\n").map((l) => l.trim())
    .filter(Boolean);
  if (!out.success || applets.length === 0) {
    throw new InstallerImageError(
      `'${busybox} --list' failed with code ${out.code}: ` +
        new TextDecoder().decode(out.stderr).trim(),
    );
  }
  for (const need of ["sh", "sha256sum", "nsenter", "sed", "cmp", "stat", "mktemp", "sleep"]) {
    if (!applets.includes(need)) {
      throw new InstallerImageError(`${busybox} lacks the applet '${need}' the installer needs`);
    }
  }
  const odd = applets.find((a) => a.includes("/") || a === "." || a === "..");
  if (odd) throw new InstallerImageError(`'${busybox} --list' named an odd applet: '${odd}'`);
  return applets;
}

/** Whether an ELF executable asks for a program interpreter (is dynamically linked). */
function hasInterpreter(elf: Uint8Array): boolean {
  const isElf = elf[0] === 0x7f && elf[1] === 0x45 && elf[2] === 0x4c && elf[3] === 0x46;
  if (!isElf || elf.length < 64) return false;
  const is64 = elf[4] === 2;
  const little = elf[5] === 1;
  const view = new DataView(elf.buffer, elf.byteOffset, elf.byteLength);
  const phoff = is64 ? Number(view.getBigUint64(32, little)) : view.getUint32(28, little);
  const phentsize = view.getUint16(is64 ? 54 : 42, little);
  const phnum = view.getUint16(is64 ? 56 : 44, little);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > elf.length) break;
    if (view.getUint32(at, little) === 3) return true; // PT_INTERP
  }
  return false;
}

function ociArch(arch: typeof Deno.build.arch): string {
  if (arch === "x86_64") return "amd64";
  if (arch === "aarch64") return "arm64";
  throw new InstallerImageError(`Cannot build images for architecture '${arch}'`);
}

function utf8(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

const USAGE =
  `Usage: deno task image [--binary <path>] [--output <file>] [--name <ref>] [--busybox <path>]

Builds the kubelet-ts installer image (an OCI layout tarball) from the agent's executable.
  --binary   the agent's executable (default ${DEFAULT_BINARY}, from 'deno task release'; a
             SHA256SUMS beside it must name it)
  --output   where to write the tarball (default kubelet-installer.tar)
  --name     image reference (default ${INSTALLER_IMAGE})
  --busybox  a statically linked busybox (default ${DEFAULT_BUSYBOX}, package busybox-static)`;

async function main(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        binary: { type: "string", default: DEFAULT_BINARY },
        output: { type: "string", default: "kubelet-installer.tar" },
        name: { type: "string", default: INSTALLER_IMAGE },
        busybox: { type: "string", default: DEFAULT_BUSYBOX },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  try {
    const image = await writeInstallerImage({
      binary: values.binary,
      output: values.output,
      name: values.name,
      busybox: values.busybox,
    });
    console.log(
      `wrote ${values.output}: ${image.name} manifest ${image.manifestDigest} ` +
        `(${image.archive.length} bytes); import with: ctr -n k8s.io images import ${values.output}`,
    );
    return 0;
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
