/**
 * @module
 * The Deno runtime a release carries: the `deno` executable from the npm registry's official
 * platform package (`@deno/linux-x64-glibc`, `@deno/linux-arm64-glibc`) of the pinned Deno
 * version, taken from the npm cache on the build host and checked against the package
 * integrity the registry publishes (`dist.integrity`, the same value npm's lockfiles hold) and,
 * where we have seen it, the executable's own sha256. Nothing is downloaded: a package that is
 * not at hand, or does not match, is an error naming the file looked at and how to get it.
 *
 * npm keeps tarballs content-addressed (`_cacache/content-v2/sha512/<hex>`), so the pinned
 * integrity is also where the file is. `npm install deno@2.9.6` (how Deno is installed on
 * these machines) leaves the host's package there; another platform's comes with
 * `npm cache add @deno/linux-arm64-glibc@2.9.6` on a host that can reach the registry, or as a
 * tarball given with `--deno-package`.
 */

import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { join } from "node:path";

/** The Deno version every release runs on: the one the agent is developed and tested with. */
export const DENO_VERSION = "2.9.6";

/** One platform's runtime package, pinned. */
export interface DenoRuntimePin {
  /** The release's platform name, as in `dist/<platform>/kubelet`. */
  readonly platform: string;
  /** The Rust target triple, as `deno compile --target` takes it. */
  readonly target: string;
  /** The npm package holding `deno` for the platform. */
  readonly npmPackage: string;
  /** The package tarball's `dist.integrity` on the npm registry (sha512, base64). */
  readonly integrity: string;
  /** The sha256 (hex) of `package/deno` inside it, where it was seen. */
  readonly sha256?: string;
}

/**
 * The runtimes a release can carry, by platform. Integrities from the registry's metadata of
 * `deno@2.9.6`'s optional dependencies (as `npm install deno@2.9.6` wrote them to its lockfile);
 * the amd64 executable's sha256 measured from that package.
 */
export const DENO_RUNTIMES: readonly DenoRuntimePin[] = [
  {
    platform: "linux-amd64",
    target: "x86_64-unknown-linux-gnu",
    npmPackage: "@deno/linux-x64-glibc",
    integrity:
      "sha512-3md4TKLCuzsLDmfOoC5KN7NAZaxSVkMgm64vg6foD00JBADCpYS2/5QqXfzgnP5ZQz3iLP9vBQJtEgc116OAoQ==",
    sha256: "bceb5b6a6239b0b010418406d8c77a508f67cf4337d94288f1c19fe71304aab0",
  },
  {
    platform: "linux-arm64",
    target: "aarch64-unknown-linux-gnu",
    npmPackage: "@deno/linux-arm64-glibc",
    integrity:
      "sha512-poqhoH9B3nYloigEMPT5t8HY+wBeiuea1An5Q7fqgJzP0SYmWsoS/oUnWO/pEiA4ofzIBy1Elt/in58xKtxEoQ==",
  },
];

/** The pin of `platform`; throws naming the platforms there are. */
export function runtimePin(platform: string): DenoRuntimePin {
  const pin = DENO_RUNTIMES.find((p) => p.platform === platform);
  if (pin) return pin;
  throw new DenoRuntimeError(
    `no Deno runtime is pinned for platform '${platform}': expected one of ` +
      DENO_RUNTIMES.map((p) => p.platform).join(", "),
  );
}

/** The runtime is missing or is not the pinned one; the message names the file. */
export class DenoRuntimeError extends Error {
  override name = "DenoRuntimeError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** Where npm keeps the tarball whose integrity is `integrity`, under the cache `npmCache`. */
export function cachedTarballPath(npmCache: string, integrity: string): string {
  const m = /^sha512-([A-Za-z0-9+/]+={0,2})$/.exec(integrity);
  if (!m) throw new DenoRuntimeError(`not a sha512 integrity: '${integrity}'`);
  const hex = [...atob(m[1]!)].map((c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("");
  return join(
    npmCache,
    "_cacache",
    "content-v2",
    "sha512",
    hex.slice(0, 2),
    hex.slice(2, 4),
    hex.slice(4),
  );
}

/** npm's cache directory: `npm_config_cache`, else `~/.npm`. */
export function defaultNpmCache(env: (name: string) => string | undefined): string {
  return env("npm_config_cache") || env("NPM_CONFIG_CACHE") || join(env("HOME") ?? "/root", ".npm");
}

/** Where to look for the runtime package. */
export interface RuntimeSource {
  /** A tarball of the package (`npm pack`'s output); when unset, the npm cache's copy. */
  readonly packageFile?: string;
  /** npm's cache directory. @default defaultNpmCache */
  readonly npmCache?: string;
}

/** The runtime's executable and the tarball it came from. */
export interface DenoRuntime {
  readonly pin: DenoRuntimePin;
  readonly executable: Uint8Array;
  /** The tarball read. */
  readonly from: string;
}

/**
 * Reads the runtime `pin` names: the package tarball (given, or from the npm cache) checked
 * against the pinned integrity, its `package/deno`, checked against the pinned sha256.
 */
export async function loadDenoRuntime(
  pin: DenoRuntimePin,
  source: RuntimeSource = {},
): Promise<DenoRuntime> {
  const { platform } = pin;
  const spec = `${pin.npmPackage}@${DENO_VERSION}`;
  const file = source.packageFile ??
    cachedTarballPath(source.npmCache ?? defaultNpmCache((n) => Deno.env.get(n)), pin.integrity);
  let tgz: Uint8Array;
  try {
    tgz = await Deno.readFile(file);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    throw new DenoRuntimeError(
      `the Deno runtime for ${platform} (npm ${spec}) is not at hand: ${file} does not exist. ` +
        `On a host that reaches the npm registry run 'npm cache add ${spec}' (or 'npm pack ${spec}' ` +
        `and pass the .tgz with --deno-package); nothing is downloaded here`,
    );
  }
  const integrity = `sha512-${createHash("sha512").update(tgz).digest("base64")}`;
  if (integrity !== pin.integrity) {
    throw new DenoRuntimeError(
      `${file} is not npm ${spec}: its integrity is ${integrity}, the registry's is ${pin.integrity}`,
    );
  }
  const executable = tarFile(gunzipSync(tgz), "package/deno");
  if (!executable) throw new DenoRuntimeError(`${file} holds no package/deno`);
  const sha256 = createHash("sha256").update(executable).digest("hex");
  if (pin.sha256 && sha256 !== pin.sha256) {
    throw new DenoRuntimeError(
      `package/deno in ${file} has sha256 ${sha256}, expected ${pin.sha256}`,
    );
  }
  return { pin, executable, from: file };
}

/** The data of the regular file `name` in a ustar archive, or undefined. */
export function tarFile(archive: Uint8Array, name: string): Uint8Array | undefined {
  const text = (from: number, length: number) => {
    const raw = archive.subarray(from, from + length);
    const end = raw.indexOf(0);
    return new TextDecoder().decode(end < 0 ? raw : raw.subarray(0, end));
  };
  let at = 0;
  while (at + 512 <= archive.length) {
    if (archive[at] === 0) return undefined; // the zero blocks that end the archive
    const size = parseInt(text(at + 124, 12).trim() || "0", 8);
    const type = text(at + 156, 1);
    const prefix = text(at + 345, 155);
    const path = prefix ? `${prefix}/${text(at, 100)}` : text(at, 100);
    const data = at + 512;
    if (path === name && (type === "0" || type === "")) return archive.subarray(data, data + size);
    at = data + Math.ceil(size / 512) * 512;
  }
  return undefined;
}
