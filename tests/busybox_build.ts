/**
 * @module
 * busybox {@link BUSYBOX_VERSION}, the version upstream's e2e busybox image is made from
 * (`test/images/busybox/BASEIMAGE`: `busybox:1.37.0`), built here from its release source for
 * the conformance harness's busybox stand-in (tests/conformance_images.ts). Debian's
 * busybox-static 1.35, which every other test image carries, differs where conformance specs
 * look: its sh drops environment variables whose names are not shell identifiers (`data-1`,
 * which four env specs read with `sh -c env`). The source is busybox's release tarball as
 * Debian's archive holds it (the `.orig.tar.bz2` of Debian's busybox source package, unpatched),
 * checked against the SHA-256 Debian's Sources index gives; the build is busybox's `defconfig`,
 * statically linked as tests/images.ts needs, without the `tc` applet (it does not build with
 * newer kernel headers). Cached at `bin/busybox-<version>/busybox` under
 * {@link controlPlaneCacheDir}. Needs deb.debian.org once, and make, gcc and bzip2 (installed with
 * apt when missing).
 */

import { aptInstallMissing } from "./apt.ts";
import { must, run } from "./child_process.ts";
import { binaryPath, controlPlaneCacheDir, formatDuration } from "./control_plane_build.ts";
import { dirname } from "node:path";
import { sha256Hex } from "../deploy/oci_layout.ts";

/** The busybox release built here. */
export const BUSYBOX_VERSION = "1.37.0";
/** Where its source comes from: Debian trixie's pool, the release tarball unchanged. */
export const BUSYBOX_SOURCE_URL =
  `http://deb.debian.org/debian/pool/main/b/busybox/busybox_${BUSYBOX_VERSION}.orig.tar.bz2`;
/** The tarball's SHA-256, as Debian's trixie Sources index lists it (busybox 1:1.37.0-6). */
export const BUSYBOX_SOURCE_SHA256 =
  "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4";

/** busybox could not be fetched or built; the message says which step and why. */
export class BusyboxBuildError extends Error {
  override name = "BusyboxBuildError";
}

/** What the build needs besides the network: make and gcc (build-essential's), and bzip2. */
const BUILD_PACKAGES = [
  { pkg: "make", provides: ["make"] },
  { pkg: "gcc", provides: ["gcc"] },
  { pkg: "bzip2", provides: ["bzip2"] },
];

/** Options for {@link ensureBusybox}. */
export interface BusyboxBuildOptions {
  /** Aborting it stops the download or build. */
  signal?: AbortSignal;
  /** Receives progress lines. @default console.error */
  log?: (line: string) => void;
  /** @default {@link controlPlaneCacheDir} */
  cacheDir?: string;
}

/**
 * The `.config` lines busybox's defconfig is changed by: statically linked, no `tc`. Each
 * `# CONFIG_X is not set` or `CONFIG_X=...` line of `config` for a key named here is replaced.
 */
export function adjustBusyboxConfig(config: string): string {
  const wanted: Record<string, string> = {
    CONFIG_STATIC: "CONFIG_STATIC=y",
    CONFIG_TC: "# CONFIG_TC is not set",
  };
  const seen = new Set<string>();
  const lines = config.split("\n").map((line) => {
    const key = /^(?:# )?(CONFIG_\w+)(?:=| is not set$)/.exec(line)?.[1];
    if (key === undefined || !(key in wanted)) return line;
    seen.add(key);
    return wanted[key]!;
  });
  const missing = Object.keys(wanted).filter((k) => !seen.has(k));
  if (missing.length > 0) {
    throw new BusyboxBuildError(
      `busybox's defconfig has no line for ${missing.join(", ")}: the build recipe is for ` +
        `busybox ${BUSYBOX_VERSION}`,
    );
  }
  return lines.join("\n");
}

/** Whether `path` is a busybox that says it is {@link BUSYBOX_VERSION} (an abort throws). */
async function isBuilt(path: string, signal?: AbortSignal): Promise<boolean> {
  try {
    const out = await run([path], { signal });
    return out.stdout.startsWith(`BusyBox v${BUSYBOX_VERSION} `);
  } catch (err) {
    if (signal?.aborted) throw err;
    return false;
  }
}

/** How long the source download may take before it is given up. */
const DOWNLOAD_TIMEOUT_MS = 5 * 60_000;

/** The release tarball, checked against {@link BUSYBOX_SOURCE_SHA256}. */
async function download(signal?: AbortSignal): Promise<Uint8Array> {
  const timeout = AbortSignal.timeout(DOWNLOAD_TIMEOUT_MS);
  const both = signal ? AbortSignal.any([signal, timeout]) : timeout;
  let tarball: Uint8Array;
  try {
    const response = await fetch(BUSYBOX_SOURCE_URL, { signal: both });
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`HTTP ${response.status}`);
    }
    tarball = new Uint8Array(await response.arrayBuffer());
  } catch (err) {
    if (signal?.aborted) throw err;
    const why = timeout.aborted ? `no answer in ${DOWNLOAD_TIMEOUT_MS / 1000} s` : String(err);
    throw new BusyboxBuildError(`Cannot fetch ${BUSYBOX_SOURCE_URL}: ${why}`, { cause: err });
  }
  const digest = sha256Hex(tarball);
  if (digest !== BUSYBOX_SOURCE_SHA256) {
    throw new BusyboxBuildError(
      `${BUSYBOX_SOURCE_URL} has SHA-256 ${digest}; Debian's Sources index says ` +
        BUSYBOX_SOURCE_SHA256,
    );
  }
  return tarball;
}

/** One build step; a failure names the step and what it needs. */
async function step(what: string, f: () => Promise<unknown>, signal?: AbortSignal) {
  try {
    await f();
  } catch (err) {
    if (err instanceof BusyboxBuildError || signal?.aborted) throw err;
    throw new BusyboxBuildError(
      `Cannot build busybox ${BUSYBOX_VERSION}: ${what} failed: ` +
        (err instanceof Error ? err.message : String(err)),
      { cause: err },
    );
  }
}

/**
 * The path of a static busybox {@link BUSYBOX_VERSION}, built (about a minute on two CPUs)
 * unless the cache holds it; make, gcc and bzip2 are installed with apt when missing.
 * Concurrent callers wait for one build.
 */
export async function ensureBusybox(opts: BusyboxBuildOptions = {}): Promise<string> {
  const { signal } = opts;
  const log = opts.log ?? ((line: string) => console.error(line));
  const cacheDir = opts.cacheDir ?? controlPlaneCacheDir();
  const target = binaryPath("busybox", BUSYBOX_VERSION, cacheDir);
  if (await isBuilt(target, signal)) return target;
  const work = `${cacheDir}/src/busybox-${BUSYBOX_VERSION}`;
  await Deno.mkdir(work, { recursive: true });
  using lock = await Deno.open(`${work}/.lock`, { create: true, write: true });
  signal?.throwIfAborted();
  await lock.lock(true);
  signal?.throwIfAborted();
  // Another process may have built it while this one waited for the lock.
  if (await isBuilt(target, signal)) return target;

  await aptInstallMissing(BUILD_PACKAGES);
  const started = performance.now();
  log(`busybox: building ${BUSYBOX_VERSION} from ${BUSYBOX_SOURCE_URL}`);
  const tarball = await download(signal);
  const tree = `${work}/busybox-${BUSYBOX_VERSION}`;
  const source = `${work}/source.tar.bz2`;
  await Deno.remove(tree, { recursive: true }).catch(() => {});
  await Deno.writeFile(source, tarball);
  await step("tar -xjf", () => must(["tar", "-xjf", source, "-C", work], { signal }), signal);
  await step("make defconfig", () => must(["make", "-C", tree, "defconfig"], { signal }), signal);
  const config = `${tree}/.config`;
  await Deno.writeTextFile(config, adjustBusyboxConfig(await Deno.readTextFile(config)));
  const jobs = `-j${navigator.hardwareConcurrency || 1}`;
  await step("make busybox", () => must(["make", "-C", tree, jobs, "busybox"], { signal }), signal);

  await Deno.mkdir(dirname(target), { recursive: true });
  const temp = `${target}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
  try {
    await Deno.copyFile(`${tree}/busybox`, temp);
    await Deno.chmod(temp, 0o755);
    if (!(await isBuilt(temp, signal))) {
      throw new BusyboxBuildError(
        `${tree}/busybox was built but does not say 'BusyBox v${BUSYBOX_VERSION}'`,
      );
    }
    await Deno.rename(temp, target);
  } finally {
    await Deno.remove(temp).catch(() => {});
  }
  await Deno.remove(tree, { recursive: true }).catch(() => {});
  await Deno.remove(source).catch(() => {});
  log(`busybox: built ${BUSYBOX_VERSION} in ${formatDuration(performance.now() - started)}`);
  return target;
}
