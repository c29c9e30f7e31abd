/**
 * @module
 * The agent's runtime module graph, made into a tree that runs without a network: the modules
 * `main.ts` and its Worker entry points load as code (static and dynamic imports; `import type`
 * is not followed, so `@kubernetes/client-node`, whose types the agent uses and whose runtime
 * it does not, is left out and {@link RUNTIME_EXCLUDED} keeps it so), copied from the
 * repository as they are, and the npm packages they load, installed by `deno install` from
 * Deno's cache as a flat `node_modules` (the hoisted linker: plain directories, no links), with
 * a `deno.json` that maps the same bare names and resolves npm packages from that directory
 * (`nodeModulesDir: "manual"`) and writes no lockfile.
 *
 * The agent then runs from this tree as `deno task start` runs it from the repository: the same
 * modules at the same relative paths, so Worker URLs and the sandbox's read grant of the code
 * directory (src/privilege/permission_set.ts) are unchanged; the kubelet's Worker alone runs
 * from a bundle of its graph beside its module (release_bundle.ts: about 9 MiB less resident
 * memory), whose module table keeps klog's call sites.
 *
 * Runs `deno info --json` and `deno install --cached-only`; reads the repository.
 */

import { dirname, join } from "node:path";

/** npm packages the agent must never load at run time; the build stops if one is. */
export const RUNTIME_EXCLUDED: readonly string[] = ["@kubernetes/client-node"];

/** The code graph of the agent's entry points. */
export interface RuntimeGraph {
  /** The entry point and the modules its code loads by URL (Workers), relative paths. */
  readonly roots: readonly string[];
  /** Modules, as paths relative to the repository, sorted. */
  readonly files: readonly string[];
  /** The npm packages imported directly, as `name@version`, sorted. */
  readonly packages: readonly string[];
  /** Every npm package loaded (with their dependencies), as `name@version`, sorted. */
  readonly allPackages: readonly string[];
  /** The repository's import map, without entries for packages that are not loaded. */
  readonly imports: Readonly<Record<string, string>>;
}

/** The graph cannot be shipped as it is; the message says which module and why. */
export class ReleaseGraphError extends Error {
  override name = "ReleaseGraphError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** What `deno info --json` prints, the parts used here. */
export interface DenoInfo {
  readonly roots: readonly string[];
  readonly modules: readonly {
    readonly specifier: string;
    readonly kind?: string;
    readonly npmPackage?: string;
    readonly dependencies?: readonly { readonly code?: { readonly specifier: string } }[];
  }[];
  readonly redirects?: Readonly<Record<string, string>>;
  readonly npmPackages?: Readonly<
    Record<
      string,
      { readonly name: string; readonly version: string; readonly dependencies?: readonly string[] }
    >
  >;
}

/** `new URL("./x.ts", import.meta.url)`: a module loaded by URL, as a Worker is. */
const MODULE_URL = /new URL\(\s*["'](\.{1,2}\/[^"']+\.ts)["']\s*,\s*import\.meta\.url\s*\)/g;

/** The modules `src` names with `new URL("./x.ts", import.meta.url)`, resolved against `url`. */
export function moduleUrls(src: string, url: string): string[] {
  return [...src.matchAll(MODULE_URL)].map((m) => new URL(m[1]!, url).href);
}

/** Package name of a `name@version` id (scoped names keep their `@`). */
export function packageName(id: string): string {
  const at = id.indexOf("@", 1);
  return at < 0 ? id : id.slice(0, at);
}

/**
 * Folds `deno info --json` answers into the code graph: modules reached through `code` edges,
 * npm packages reached from them and their dependencies. Throws when a module reaches one of
 * {@link RUNTIME_EXCLUDED}, naming it.
 */
export function codeGraph(
  infos: readonly DenoInfo[],
  repoUrl: string,
  imports: Readonly<Record<string, string>>,
): RuntimeGraph {
  const files = new Set<string>();
  const direct = new Set<string>();
  const all = new Set<string>();
  for (const info of infos) {
    const by = new Map(info.modules.map((m) => [m.specifier, m]));
    const redirect = (s: string) => info.redirects?.[s] ?? s;
    const seen = new Set<string>();
    const pending = info.roots.map((r) => ({ specifier: r, from: r }));
    while (pending.length > 0) {
      const { specifier, from } = pending.pop()!;
      const s = redirect(specifier);
      if (seen.has(s)) continue;
      seen.add(s);
      const m = by.get(s);
      if (m?.kind === "npm" && m.npmPackage) {
        const name = packageName(m.npmPackage);
        if (RUNTIME_EXCLUDED.includes(name)) {
          throw new ReleaseGraphError(
            `${from.replace(repoUrl, "")} imports ${name} as code: the release must not load it ` +
              `(use 'import type' for its types)`,
          );
        }
        direct.add(m.npmPackage);
        continue;
      }
      if (!s.startsWith("file:")) continue; // node: built-ins
      if (!s.startsWith(repoUrl)) {
        throw new ReleaseGraphError(`${from} imports ${s}, outside the repository`);
      }
      files.add(s.slice(repoUrl.length));
      for (const d of m?.dependencies ?? []) {
        if (d.code) pending.push({ specifier: d.code.specifier, from: s });
      }
    }
    const stack = [...direct];
    while (stack.length > 0) {
      const id = stack.pop()!;
      if (all.has(id)) continue;
      all.add(id);
      stack.push(...(info.npmPackages?.[id]?.dependencies ?? []));
    }
  }
  const names = new Set([...direct].map(packageName));
  const kept = Object.fromEntries(
    Object.entries(imports).filter(([, target]) => {
      const m = /^npm:(@?[^@/]+(?:\/[^@/]+)?)@/.exec(target);
      return !m || names.has(m[1]!);
    }),
  );
  return {
    roots: infos.flatMap((i) => i.roots.map((r) => r.slice(repoUrl.length))),
    files: [...files].sort(),
    packages: [...direct].map(bareId).sort(),
    allPackages: [...all].map(bareId).sort(),
    imports: kept,
  };
}

/** `name@version` without the peer-dependency suffix deno adds (`_peer@1.0.0`). */
function bareId(id: string): string {
  const under = id.indexOf("_", packageName(id).length);
  return under < 0 ? id : id.slice(0, under);
}

/** Runs `deno args` in `cwd`; returns its stdout, or throws with its stderr. */
async function runDeno(args: string[], cwd: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  if (out.code !== 0) {
    throw new ReleaseGraphError(
      `deno ${args.join(" ")} failed (exit ${out.code}):\n${dec.decode(out.stderr).trim()}`,
    );
  }
  return dec.decode(out.stdout);
}

/**
 * The runtime graph of `entry` (a path relative to `repo`) and of every module its code names
 * by URL (the Worker entry points), read with `deno info --json` in `repo`.
 */
export async function runtimeGraph(repo: string, entry = "main.ts"): Promise<RuntimeGraph> {
  const repoUrl = new URL(`file://${repo.endsWith("/") ? repo : `${repo}/`}`).href;
  const config = JSON.parse(await Deno.readTextFile(join(repo, "deno.json"))) as {
    imports?: Record<string, string>;
  };
  const roots = [new URL(entry, repoUrl).href];
  const infos: DenoInfo[] = [];
  let graph = codeGraph([], repoUrl, {});
  for (let i = 0; i < roots.length; i++) {
    infos.push(JSON.parse(await runDeno(["info", "--json", roots[i]!], repo)) as DenoInfo);
    graph = codeGraph(infos, repoUrl, config.imports ?? {});
    for (const file of graph.files) {
      const url = repoUrl + file;
      for (const u of moduleUrls(await Deno.readTextFile(join(repo, file)), url)) {
        if (!roots.includes(u)) roots.push(u);
      }
    }
  }
  return graph;
}

/** A file of the staged tree. */
export interface StagedFile {
  /** Relative to the tree's root. */
  readonly path: string;
  readonly mode: number;
}

/**
 * Copies the graph's modules from `repo` into `dir` and installs its npm packages there
 * (flat `node_modules`, from Deno's cache only), with the `deno.json` the tree runs under.
 * Packages holding only type declarations, declaration files and source maps are left out.
 * Returns every regular file of the tree, sorted by path.
 */
export async function stageRuntimeTree(
  graph: RuntimeGraph,
  repo: string,
  dir: string,
): Promise<StagedFile[]> {
  for (const file of graph.files) {
    await Deno.mkdir(join(dir, dirname(file)), { recursive: true });
    await Deno.copyFile(join(repo, file), join(dir, file));
  }
  const dependencies = Object.fromEntries(
    graph.packages.map((id) => [packageName(id), id.slice(packageName(id).length + 1)]),
  );
  await Deno.writeTextFile(
    join(dir, "package.json"),
    JSON.stringify({ dependencies }, null, 2) + "\n",
  );
  await Deno.writeTextFile(
    join(dir, "deno.json"),
    JSON.stringify(
      { imports: graph.imports, nodeModulesDir: "manual", lock: false },
      null,
      2,
    ) + "\n",
  );
  // The repository's lockfile, so that every package resolves to the version the agent is
  // tested with; deno rewrites this copy, which is not shipped.
  await Deno.copyFile(join(repo, "deno.lock"), join(dir, "deno.lock"));
  try {
    await runDeno(
      [
        "install",
        "--quiet",
        "--cached-only",
        "--lock=deno.lock",
        "--node-modules-linker",
        "hoisted",
      ],
      dir,
    );
  } catch (e) {
    throw new ReleaseGraphError(
      `the npm packages the agent loads (${graph.packages.join(", ")}) could not be installed ` +
        `from Deno's cache; run 'deno install' in the repository on a host that reaches the npm ` +
        `registry first`,
      { cause: e },
    );
  }
  await Deno.remove(join(dir, "deno.lock"));
  await Deno.remove(join(dir, "package.json"));
  const modules = join(dir, "node_modules");
  for (const extra of [".bin", ".deno", ".package-lock.json"]) {
    await Deno.remove(join(modules, extra), { recursive: true }).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
  }
  const typesOnly = await pruneTypes(modules);
  await checkInstalled(modules, graph.allPackages.filter((id) => !typesOnly.has(packageName(id))));
  return await treeFiles(dir);
}

/** Every regular file under `dir`, sorted by path; throws for a link. */
export async function treeFiles(dir: string): Promise<StagedFile[]> {
  const files: StagedFile[] = [];
  await walk(dir, "", files);
  return files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** Files only a type checker reads. */
const TYPES_ONLY = /\.(d\.ts|d\.mts|d\.cts|map)$/;
/** Files of a package that are not code. */
const NOT_CODE = /(^|\/)(package\.json|[^/]*\.md|LICENSE[^/]*)$/i;

/** The package directories of a `node_modules` (scoped ones as `@scope/name`). */
async function packageDirs(modules: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(modules)) {
      if (!e.isDirectory) continue;
      if (!e.name.startsWith("@")) out.push(e.name);
      else {for await (const s of Deno.readDir(join(modules, e.name))) {
          out.push(`${e.name}/${s.name}`);
        }}
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return out.sort();
}

/**
 * Removes declaration files and source maps, then the packages left with no code (`@types/*`,
 * `undici-types`); returns the names of those.
 */
async function pruneTypes(modules: string): Promise<Set<string>> {
  const removed = new Set<string>();
  for (const name of await packageDirs(modules)) {
    const files: StagedFile[] = [];
    await walk(join(modules, name), "", files);
    for (const f of files) {
      if (TYPES_ONLY.test(f.path)) await Deno.remove(join(modules, name, f.path));
    }
    if (files.every((f) => TYPES_ONLY.test(f.path) || NOT_CODE.test(f.path))) {
      await Deno.remove(join(modules, name), { recursive: true });
      removed.add(name);
      const scope = dirname(name);
      if (
        scope !== "." && (await Array.fromAsync(Deno.readDir(join(modules, scope)))).length === 0
      ) {
        await Deno.remove(join(modules, scope));
      }
    }
  }
  return removed;
}

/** Every package in `ids` must be installed at its version, at the top or nested. */
async function checkInstalled(modules: string, ids: readonly string[]): Promise<void> {
  const installed = new Set<string>();
  const look = async (dir: string): Promise<void> => {
    for (const name of await packageDirs(dir)) {
      const pkg = JSON.parse(await Deno.readTextFile(join(dir, name, "package.json"))) as {
        version: string;
      };
      installed.add(`${name}@${pkg.version}`);
      await look(join(dir, name, "node_modules"));
    }
  };
  await look(modules);
  const missing = ids.filter((id) => !installed.has(id));
  if (missing.length > 0) {
    throw new ReleaseGraphError(
      `deno install left out packages the agent loads, or installed other versions: ${
        missing.join(", ")
      }`,
    );
  }
}

async function walk(root: string, rel: string, out: StagedFile[]): Promise<void> {
  for await (const e of Deno.readDir(join(root, rel))) {
    const path = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory) await walk(root, path, out);
    else if (e.isFile) out.push({ path, mode: (await Deno.stat(join(root, path))).mode! & 0o777 });
    else {throw new ReleaseGraphError(
        `${join(root, path)} is a link: the tree must hold plain files`,
      );}
  }
}
