/**
 * @module
 * Call sites inside a bundle. The release runs the agent's Worker from one bundled module
 * (deploy/release_bundle.ts), where every stack frame names the bundle; beside it,
 * `<bundle>.modules.json` gives the line each bundled module starts at, so a frame's line
 * gives back its module (the file name of the log header and of `-vmodule`) and its line
 * within that module's bundled code. Private helper of `klog.ts`.
 */

/** `[line, path]`: the bundle line that starts a module (esbuild's `// path` comment), sorted. */
export type ModuleStarts = readonly (readonly [line: number, path: string])[];

/** The module holding bundle line `line`, and the line counted from the module's start. */
export function moduleAt(
  starts: ModuleStarts,
  line: number,
): { path: string; line: number } | undefined {
  let lo = 0;
  let hi = starts.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (starts[mid]![0] <= line) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (found < 0) return undefined;
  const [start, path] = starts[found]!;
  return { path, line: line - start };
}

/** Parses a `.modules.json`; undefined for anything but a sorted list of `[line, path]`. */
export function parseModuleStarts(text: string): ModuleStarts | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!Array.isArray(value)) return undefined;
  let last = 0;
  for (const e of value) {
    if (
      !Array.isArray(e) || e.length !== 2 || !Number.isInteger(e[0]) || e[0] <= last ||
      typeof e[1] !== "string"
    ) {
      return undefined;
    }
    last = e[0];
  }
  return value as [number, string][];
}

/** The table beside the bundle at `bundleUrl`; undefined when it is missing or malformed. */
export function loadModuleStarts(bundleUrl: string): ModuleStarts | undefined {
  try {
    return parseModuleStarts(Deno.readTextFileSync(new URL(`${bundleUrl}.modules.json`)));
  } catch {
    return undefined;
  }
}
