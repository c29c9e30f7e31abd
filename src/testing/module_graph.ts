/**
 * @module
 * Test helper: the modules an entry point loads before it runs (`deno info --json`), i.e. what
 * its isolate holds for as long as it lives. Used to keep heavy modules off the agent's hot
 * graphs.
 */

interface Graph {
  roots: string[];
  modules: {
    specifier: string;
    dependencies?: { code?: { specifier: string }; isDynamic?: boolean }[];
  }[];
}

/**
 * The specifiers `entry` loads statically: its imports that are code (not `import type`) and
 * not dynamic, and theirs. npm packages appear as `npm:/name@version`, built-ins as `node:x`.
 */
export async function staticGraph(entry: URL): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", entry.href],
    cwd: new URL("../..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (out.code !== 0) {
    throw new Error(`deno info ${entry.href} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  const graph = JSON.parse(new TextDecoder().decode(out.stdout)) as Graph;
  const bySpecifier = new Map(graph.modules.map((m) => [m.specifier, m]));
  const loaded = new Set<string>();
  const pending = [...graph.roots];
  while (pending.length > 0) {
    const s = pending.pop()!;
    if (loaded.has(s)) continue;
    loaded.add(s);
    for (const d of bySpecifier.get(s)?.dependencies ?? []) {
      if (d.code && !d.isDynamic) pending.push(d.code.specifier);
    }
  }
  return [...loaded];
}
