/**
 * @module
 * The self-extracting `kubelet`: a POSIX sh script (`release_stub.sh`) followed by a
 * gzip-compressed tar archive of the Deno runtime (`deno`) and the agent's tree (`app/`). The
 * script extracts the archive once per release into a directory of its own, checks that tree
 * on every start against the entry list and sha256 checksums it carries (so a partial or
 * changed tree is found and extracted again, and the list to check against is the executable's,
 * not the tree's), and `exec`s the runtime with the agent's flags.
 *
 * Why a shell script and not a small native stub: it needs no compiler or second toolchain per
 * architecture (the same stub serves amd64 and arm64), a reviewer can read what runs as root
 * with `head`, and every node that runs a kubelet has `sh`, `tar`, `gzip` and `sha256sum`
 * (coreutils or busybox). `exec` leaves no wrapper process: the agent gets the PID, signals
 * and exit code, as under `deno task start`. gzip rather than xz or zstd for the same reason.
 * The cost is a checksum of the tree on every start (about 0.35 s for the 96 MB runtime on our
 * machines).
 *
 * Builds bytes from bytes (and reads its template when loaded); deploy/release.ts reads and
 * writes the files.
 */

import { gzipSync } from "node:zlib";
import { sha256Hex, tar, type TarEntry } from "./oci_layout.ts";

/** A file of the agent's tree. */
export interface TreeFile {
  /** Relative to the tree's root, `/`-separated. */
  readonly path: string;
  readonly data: Uint8Array;
  /** Executable or not; other mode bits are not kept. */
  readonly executable?: boolean;
}

/** What {@link selfExtracting} builds from. */
export interface SelfExtractingOptions {
  /** The agent's version, e.g. "0.1.0": the first part of the extraction directory's name. */
  readonly version: string;
  /** e.g. "linux-amd64", for the script's header. */
  readonly platform: string;
  /** The runtime's origin, for the script's header, e.g. "npm @deno/linux-x64-glibc@2.9.6". */
  readonly runtimeName: string;
  /** The `deno` executable. */
  readonly runtime: Uint8Array;
  /** The agent's tree, extracted under `app/`. */
  readonly app: readonly TreeFile[];
  /** The module to run, relative to `app/`. @default "main.ts" */
  readonly entry?: string;
  /** The runtime's arguments before `--config` and the entry, e.g. `run --allow-all ...`. */
  readonly runFlags: readonly string[];
  /** The stub template. @default release_stub.sh beside this module */
  readonly template?: string;
}

/** The executable and what went into it. */
export interface SelfExtracting {
  readonly bytes: Uint8Array;
  /** The extraction directory's name: `<version>-<12 hex digits of the archive's sha256>`. */
  readonly id: string;
  /** The script's length: the archive starts there. */
  readonly offset: number;
  /** The extracted tree's size in bytes (its files, the runtime's cache aside). */
  readonly treeBytes: number;
}

/** A path that cannot go into the stub's lists; the message names it. */
export class SelfExtractingError extends Error {
  override name = "SelfExtractingError";
}

/** Paths the stub's lists and sha256sum take as they are. */
const PLAIN_PATH = /^[A-Za-z0-9._@+~-]+(\/[A-Za-z0-9._@+~ -]+)*$/;

/** Byte-wise order, as `LC_ALL=C sort` sorts. */
function byteOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Quotes `word` for sh when it is not a plain word. */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** Width of the stub's `offset=` value: the number, then spaces. */
const OFFSET_WIDTH = 12;

/** Builds the self-extracting executable. */
export function selfExtracting(opts: SelfExtractingOptions): SelfExtracting {
  const files = [
    ...opts.app.map((f) => ({ ...f, path: `app/${f.path}` })),
    { path: "deno", data: opts.runtime, executable: true },
  ].sort((a, b) => byteOrder(a.path, b.path));
  const dirs = new Set<string>();
  for (const f of files) {
    if (!PLAIN_PATH.test(f.path) || f.path.split("/").some((p) => p === "." || p === "..")) {
      throw new SelfExtractingError(
        `'${f.path}' cannot go into the release: a path must be plain ASCII without '..'`,
      );
    }
    const parts = f.path.split("/");
    for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
  }
  const entries: TarEntry[] = [
    ...[...dirs].sort(byteOrder).map((path): TarEntry => ({
      path: `${path}/`,
      type: "dir",
      mode: 0o755,
    })),
    ...files.map((f): TarEntry => ({
      path: f.path,
      type: "file",
      mode: f.executable ? 0o755 : 0o644,
      data: f.data,
    })),
  ];
  const archive = tar(entries);
  const id = `${opts.version}-${sha256Hex(archive).slice(0, 12)}`;
  const listing = [".", ...[...dirs, ...files.map((f) => f.path)].map((p) => `./${p}`)]
    .sort(byteOrder);
  const checksums = files.map((f) => `${sha256Hex(f.data)}  ./${f.path}`);
  const render = (offset: string) =>
    fill(opts.template ?? STUB_TEMPLATE, {
      VERSION: opts.version,
      PLATFORM: opts.platform,
      RUNTIME: opts.runtimeName,
      ID: id,
      OFFSET: offset,
      RUN_FLAGS: opts.runFlags.map(shellQuote).join(" "),
      ENTRY: opts.entry ?? "main.ts",
      LISTING: listing.join("\n"),
      CHECKSUMS: checksums.join("\n"),
    });
  const encode = (s: string) => new TextEncoder().encode(s);
  const length = encode(render("0".padEnd(OFFSET_WIDTH))).length;
  const stub = encode(render(String(length).padEnd(OFFSET_WIDTH)));
  const payload = gzipSync(archive, { level: 9 });
  const bytes = new Uint8Array(stub.length + payload.length);
  bytes.set(stub, 0);
  bytes.set(payload, stub.length);
  return {
    bytes,
    id,
    offset: stub.length,
    treeBytes: files.reduce((n, f) => n + f.data.length, 0),
  };
}

/** `@@NAME@@` in `template` replaced by `values[NAME]`; every placeholder must have one. */
export function fill(template: string, values: Readonly<Record<string, string>>): string {
  return template.replace(/@@([A-Z_]+)@@/g, (_, name: string) => {
    const v = values[name];
    if (v === undefined) {
      throw new SelfExtractingError(`the stub names @@${name}@@, which has no value`);
    }
    return v;
  });
}

/** The stub template, read once. */
export const STUB_TEMPLATE = Deno.readTextFileSync(new URL("./release_stub.sh", import.meta.url));
