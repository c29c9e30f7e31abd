/**
 * @module
 * The rules of the source tree's shape, checked by layout_test.ts: `src/` is one level of
 * folders; no production module (main.ts and everything under src/ but tests and this folder)
 * imports test support (src/testing/, tests/); and a `_name.ts` module is private to its folder,
 * imported only by modules beside it. Imports are read as text: static `import`/`export ... from`,
 * dynamic `import("...")` and `new URL("...", import.meta.url)` (Worker entry points).
 */

import { dirname, join, normalize, relative } from "node:path";

/** One source file: its path from the repository root and its text. */
export interface SourceFile {
  readonly path: string;
  readonly text: string;
}

const SPECIFIER =
  /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\bnew\s+URL\s*\(\s*)(["'])(\.\.?\/[^"']*)\1/g;

/** The repository paths a file's relative specifiers name, resolved from its folder. */
export function relativeImports(file: SourceFile): string[] {
  const out: string[] = [];
  for (const m of file.text.matchAll(SPECIFIER)) {
    out.push(normalize(join(dirname(file.path), m[2]!)));
  }
  return out;
}

/** Whether a path is test code or test support rather than something the agent runs. */
export function isTestSupport(path: string): boolean {
  return path.startsWith("tests/") || path.startsWith("src/testing/") || path.endsWith("_test.ts");
}

/** Whether a path belongs to the agent as it ships: main.ts and src/ less tests and support. */
export function isProduction(path: string): boolean {
  return path === "main.ts" || (path.startsWith("src/") && !isTestSupport(path));
}

/** Every breach of the layout rules in `files`, one line each naming the file and the rule. */
export function layoutProblems(files: readonly SourceFile[]): string[] {
  const problems: string[] = [];
  for (const file of files) {
    if (file.path.startsWith("src/") && file.path.split("/").length > 3) {
      problems.push(`${file.path}: src/ is one level of folders, this file is deeper`);
    }
    for (const target of relativeImports(file)) {
      if (isProduction(file.path) && isTestSupport(target)) {
        problems.push(`${file.path}: production module imports test support ${target}`);
      }
      const base = target.slice(target.lastIndexOf("/") + 1);
      if (base.startsWith("_") && dirname(target) !== dirname(file.path)) {
        const from = relative(dirname(file.path), target);
        problems.push(`${file.path}: imports ${from}, private to ${dirname(target)}/`);
      }
    }
  }
  return problems;
}
