/**
 * Checks the user documentation: README.md stays short, and every relative Markdown link in
 * README.md and docs/*.md leads to a file that exists (and, for a link into a Markdown page with
 * `#anchor`, to one of that page's headings, as GitHub names them).
 */

import assert from "node:assert/strict";
import { dirname, join, relative } from "node:path";

const ROOT = decodeURIComponent(new URL("..", import.meta.url).pathname);
const README_MAX_BYTES = 16_000;

/** README.md and every docs/*.md, as paths relative to the repository root. */
function docFiles(): string[] {
  const docs = [...Deno.readDirSync(join(ROOT, "docs"))]
    .filter((e) => e.isFile && e.name.endsWith(".md"))
    .map((e) => `docs/${e.name}`)
    .sort();
  return ["README.md", ...docs];
}

/** The lines of a text, those of fenced code blocks blanked. */
function linesOutsideFences(text: string): string[] {
  let fence: string | undefined;
  return text.split("\n").map((line) => {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence !== undefined) {
      if (marker && marker[0] === fence[0] && marker.length >= fence.length) fence = undefined;
      return "";
    }
    if (marker) {
      fence = marker;
      return "";
    }
    return line;
  });
}

/** The text with fenced code blocks blanked and inline code spans emptied. */
function withoutCode(text: string): string {
  return linesOutsideFences(text).map((line) => line.replace(/(`+)(?:(?!\1)[^])*?\1/g, "``"))
    .join("\n");
}

/** The link targets of a Markdown text: inline links and images, and reference definitions. */
function linkTargets(text: string): string[] {
  const prose = withoutCode(text);
  const targets: string[] = [];
  for (
    const m of prose.matchAll(/!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/g)
  ) {
    targets.push(m[1] as string);
  }
  for (const m of prose.matchAll(/^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/gm)) {
    targets.push(m[1] as string);
  }
  return targets;
}

/** The anchors GitHub gives a Markdown page's headings (github-slugger's rules). */
function headingAnchors(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of linesOutsideFences(text)) {
    const m = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const rendered = (m[1] as string)
      .replace(/`([^`]*)`/g, "$1")
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/\*/g, "");
    const base = rendered.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "").replace(
      / /g,
      "-",
    );
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** What is wrong with one link of `file` (relative to ROOT), or undefined when it resolves. */
function checkLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto:, ...
  const hash = target.indexOf("#");
  const pathPart = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? "" : decodeURIComponent(target.slice(hash + 1));
  const resolved = pathPart === ""
    ? join(ROOT, file)
    : join(ROOT, dirname(file), decodeURIComponent(pathPart));
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(resolved);
  } catch {
    return `${target}: ${relative(ROOT, resolved)} does not exist`;
  }
  if (anchor !== "" && info.isFile && resolved.endsWith(".md")) {
    if (!headingAnchors(Deno.readTextFileSync(resolved)).has(anchor)) {
      return `${target}: ${relative(ROOT, resolved)} has no heading with anchor #${anchor}`;
    }
  }
  return undefined;
}

Deno.test("docs: linkTargets finds links outside code, headingAnchors names headings as GitHub does", () => {
  const text = [
    'See [status](docs/status.md#not-yet), ![logo](img/logo.png "Logo") and [web](https://x.y).',
    "`[not a link](nowhere.md)`",
    "```sh",
    "[also not](nowhere.md)",
    "```",
    "[ref]: docs/benchmarks.md",
  ].join("\n");
  assert.deepEqual(linkTargets(text), [
    "docs/status.md#not-yet",
    "img/logo.png",
    "https://x.y",
    "docs/benchmarks.md",
  ]);
  const anchors = headingAnchors(
    "# Title\n## Known problem: /proc and /sys under `-P=kubelet`\n## Notes\n## Notes\n",
  );
  assert.deepEqual([...anchors], [
    "title",
    "known-problem-proc-and-sys-under--pkubelet",
    "notes",
    "notes-1",
  ]);
});

Deno.test("docs: every relative link in README.md and docs/*.md leads to an existing file", () => {
  const broken: string[] = [];
  for (const file of docFiles()) {
    for (const target of linkTargets(Deno.readTextFileSync(join(ROOT, file)))) {
      const problem = checkLink(file, target);
      if (problem) broken.push(`${file}: ${problem}`);
    }
  }
  assert.deepEqual(broken, [], `broken links:\n${broken.join("\n")}`);
});

Deno.test("docs: README.md is at most 16,000 bytes", () => {
  const size = Deno.statSync(join(ROOT, "README.md")).size;
  assert.ok(
    size <= README_MAX_BYTES,
    `README.md is ${size} bytes: at most ${README_MAX_BYTES}; move detail into docs/`,
  );
});
