/**
 * @module
 * Finding programs and installing the Debian packages that provide them, for the test harness
 * and `tests/setup.ts`: one `apt-get update` per process, then `apt-get install` of exactly the
 * packages whose programs are missing. Root only; elsewhere it says what to install.
 */

/** A package could not be found or installed. */
export class MissingPackagesError extends Error {
  override name = "MissingPackagesError";
}

/** A Debian package and the programs (on PATH) or absolute paths whose absence means install it. */
export interface AptPackage {
  readonly pkg: string;
  readonly provides: readonly string[];
}

// sbin directories are searched even when PATH lacks them (iptables lives in /usr/sbin).
const EXTRA_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/** Absolute path of an executable found on PATH (or as given, when absolute), else undefined. */
export async function findProgram(name: string): Promise<string | undefined> {
  const candidates = name.startsWith("/")
    ? [name]
    : [...(Deno.env.get("PATH") ?? "").split(":").filter(Boolean), ...EXTRA_PATH].map((d) =>
      `${d}/${name}`
    );
  for (const path of candidates) {
    try {
      const info = await Deno.stat(path);
      if (info.isFile && info.mode !== null && (info.mode & 0o111) !== 0) return path;
    } catch {
      // not there
    }
  }
  return undefined;
}

/** The last `n` lines of a text, for error messages that quote a log. */
export function lastLines(text: string, n: number): string {
  return text.trimEnd().split("\n").slice(-n).join("\n");
}

let aptUpdated = false;

/**
 * Installs each package one of whose programs is missing; does nothing when all are present.
 * Checks afterwards that the programs are there.
 */
export async function aptInstallMissing(packages: readonly AptPackage[]): Promise<void> {
  const missing: AptPackage[] = [];
  for (const p of packages) {
    for (const program of p.provides) {
      if (!(await findProgram(program))) {
        missing.push(p);
        break;
      }
    }
  }
  if (missing.length === 0) return;
  await aptInstall(missing.map((m) => m.pkg));
  const still: string[] = [];
  for (const p of missing) {
    for (const program of p.provides) if (!(await findProgram(program))) still.push(program);
  }
  if (still.length > 0) {
    throw new MissingPackagesError(
      `apt-get installed ${missing.map((m) => m.pkg).join(" ")} but these are still missing: ${
        still.join(", ")
      }`,
    );
  }
}

/** `apt-get install` of `pkgs`, after one `apt-get update` per process; root only. */
export async function aptInstall(pkgs: readonly string[]): Promise<void> {
  if (Deno.uid() !== 0) {
    throw new MissingPackagesError(
      `Missing ${
        pkgs.join(", ")
      }; install them as root with 'apt-get update && apt-get install -y ${pkgs.join(" ")}'`,
    );
  }
  if (!aptUpdated) {
    await apt(["update"]);
    aptUpdated = true;
  }
  await apt(["install", "-y", "--no-install-recommends", ...pkgs]);
}

async function apt(args: string[]): Promise<void> {
  console.error(`+ apt-get ${args.join(" ")}`);
  const out = await new Deno.Command("apt-get", {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env: { DEBIAN_FRONTEND: "noninteractive" },
  }).output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    throw new MissingPackagesError(
      `'apt-get ${args.join(" ")}' failed with code ${out.code}:\n${lastLines(text, 20)}`,
    );
  }
}
