/**
 * @module
 * The results file of `deno task conformance`: reads the JUnit report ginkgo writes for
 * upstream's e2e.test and renders one Markdown table, a row per spec that ran (passed or
 * failed) with its duration and the failure's first line, plus the counts and the run's setup
 * (agent, runtime, focus, stand-in images, the registry). Pure: no I/O.
 */

/** One spec of the JUnit report. */
export interface SpecResult {
  /** The spec's full text, e.g. `[sig-node] Pods should ... [Conformance]`. */
  readonly name: string;
  readonly state: "passed" | "failed" | "skipped";
  readonly seconds: number;
  /** The failure's message (failed) or the skip's reason (skipped); "" otherwise. */
  readonly message: string;
}

const ENTITIES: Record<string, string> = {
  "&lt;": "<",
  "&gt;": ">",
  "&amp;": "&",
  "&quot;": '"',
  "&apos;": "'",
};

function unescapeXml(s: string): string {
  return s.replace(/&(?:lt|gt|amp|quot|apos);|&#(\d+);|&#x([0-9a-fA-F]+);/g, (m, dec, hex) => {
    if (dec !== undefined) return String.fromCodePoint(Number(dec));
    if (hex !== undefined) return String.fromCodePoint(parseInt(hex, 16));
    return ENTITIES[m] ?? m;
  });
}

function attributes(tag: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of tag.matchAll(/([\w:-]+)\s*=\s*"([^"]*)"/g)) out.set(m[1]!, unescapeXml(m[2]!));
  return out;
}

/**
 * The specs of a JUnit report as ginkgo v2 writes it (`<testcase name=".." status=".."
 * time="..">` with `<failure message="..">` or `<skipped message="..">`). Ginkgo's own
 * suite-level nodes (`[SynchronizedBeforeSuite]`, `[ReportAfterSuite]`, ...) are kept: a failed
 * one fails the run.
 */
export function parseJUnit(xml: string): SpecResult[] {
  const out: SpecResult[] = [];
  const re = /<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g;
  for (const m of xml.matchAll(re)) {
    const attrs = attributes(m[1]!);
    const body = m[3] ?? "";
    const failure = /<(failure|error)\b([^>]*?)(?:\/>|>([\s\S]*?)<\/\1>)/.exec(body);
    const skipped = /<skipped\b([^>]*?)\/?>/.exec(body);
    const status = attrs.get("status");
    const state = failure || status === "failed" || status === "panicked" ||
        status === "timedout" || status === "interrupted" || status === "aborted"
      ? "failed"
      : skipped || status === "skipped" || status === "pending"
      ? "skipped"
      : "passed";
    const message = failure
      ? attributes(failure[2]!).get("message") || unescapeXml(failure[3] ?? "")
      : skipped
      ? attributes(skipped[1]!).get("message") ?? ""
      : "";
    out.push({
      name: attrs.get("name") ?? "",
      state,
      seconds: Number(attrs.get("time") ?? 0) || 0,
      message: message.trim(),
    });
  }
  return out;
}

/** What the results file says about the run besides the specs. */
export interface RunSetup {
  /** "agent" (this kubelet) or "upstream" (the Go kubelet). */
  readonly agent: string;
  /** e.g. "containerd 1.6.20". */
  readonly runtime: string;
  readonly focus: string;
  readonly skip: string;
  /** ISO date and time the run started. */
  readonly started: string;
  readonly wallSeconds: number;
  /** The commit of this repository the run was made at. */
  readonly commit: string;
  /** Image name → "built" / "stand-in: reason" / "missing: reason". */
  readonly images: ReadonlyMap<string, string>;
  /** The command that reproduces the run. */
  readonly command: string;
  /** What serves the registry the specs pull from, when one does (one line). */
  readonly registry?: string;
  /** The cluster the specs ran against, when said (one line). */
  readonly topology?: string;
}

function cell(s: string): string {
  return s.replace(/\|/g, "\\|").replace(/\s+/g, " ").trim();
}

/** The first meaningful line of a failure message, at most 200 characters. */
export function firstLine(message: string): string {
  const line = message.split("\n").map((l) => l.trim()).find((l) => l !== "") ?? "";
  return line.length > 200 ? `${line.slice(0, 199)}…` : line;
}

const SUITE_NODE =
  /^\[(SynchronizedBeforeSuite|SynchronizedAfterSuite|BeforeSuite|AfterSuite|ReportBeforeSuite|ReportAfterSuite|DeferCleanup \(Suite\))\]/;

/** Whether a report entry is one of ginkgo's suite-level nodes rather than a spec. */
export function isSuiteNode(s: SpecResult): boolean {
  return SUITE_NODE.test(s.name);
}

/**
 * The results file: setup, counts, then a table of the specs that ran, failures first. Suite
 * nodes are not counted; a failed one is listed (it fails the run).
 */
export function renderResults(setup: RunSetup, all: readonly SpecResult[]): string {
  const specs = all.filter((s) => !isSuiteNode(s));
  const failedNodes = all.filter((s) => isSuiteNode(s) && s.state === "failed");
  const ran = specs.filter((s) => s.state !== "skipped");
  const passed = ran.filter((s) => s.state === "passed").length;
  const failed = ran.length - passed;
  const skipped = specs.length - ran.length;
  const lines = [
    `# Conformance: ${setup.agent} on ${setup.runtime}`,
    "",
    `- started ${setup.started}, ${Math.round(setup.wallSeconds)} s, at commit ${setup.commit}`,
    `- focus \`${setup.focus}\`, skip \`${setup.skip}\``,
    `- command: \`${setup.command}\``,
    ...(setup.registry ? [`- registry: ${cell(setup.registry)}`] : []),
    ...(setup.topology ? [`- cluster: ${cell(setup.topology)}`] : []),
    `- **${passed} passed, ${failed} failed** (${skipped} specs of the suite not run)`,
    "",
    "## Images",
    "",
    "| image | how it was made |",
    "| --- | --- |",
    ...[...setup.images].sort(([a], [b]) => a.localeCompare(b)).map(([name, how]) =>
      `| \`${name}\` | ${cell(how)} |`
    ),
    "",
    "## Specs",
    "",
    "| result | seconds | spec | failure |",
    "| --- | ---: | --- | --- |",
    ...[...failedNodes, ...ran]
      .sort((a, b) =>
        (a.state === b.state ? 0 : a.state === "failed" ? -1 : 1) || a.name.localeCompare(b.name)
      )
      .map((s) =>
        `| ${s.state} | ${s.seconds.toFixed(1)} | ${cell(s.name)} | ${cell(firstLine(s.message))} |`
      ),
    "",
  ];
  return lines.join("\n");
}

/** A spec's result as a results file lists it. */
export type RowState = "passed" | "failed";

/**
 * The spec rows of results files {@link renderResults} wrote, spec text → result. With several
 * files (a run, then a rerun of some of its specs), a later file's row replaces an earlier one's.
 */
export function readResultRows(...markdowns: readonly string[]): Map<string, RowState> {
  const rows = new Map<string, RowState>();
  for (const [i, markdown] of markdowns.entries()) {
    const seen = new Set<string>();
    for (const line of markdown.split("\n")) {
      // | result | seconds | spec | failure |, with `|` inside a cell escaped as `\|`.
      const cells = line.split(/(?<!\\)\|/).map((c) => c.trim());
      if (cells.length !== 6 || cells[0] !== "" || cells[5] !== "") continue;
      const [, state, seconds, spec] = cells;
      if ((state !== "passed" && state !== "failed") || !/^\d+(\.\d+)?$/.test(seconds!)) continue;
      const name = spec!.replace(/\\\|/g, "|");
      if (seen.has(name)) {
        throw new Error(`results file ${i + 1} lists '${name}' twice: a row would hide another`);
      }
      seen.add(name);
      rows.set(name, state);
    }
  }
  return rows;
}

/** How one kubelet's run compares with the reference kubelet's on the same specs. */
export interface RunComparison {
  /** Passed with the reference, failed (or did not run) with the candidate. */
  readonly regressions: readonly string[];
  /** Failed with the reference, passed with the candidate. */
  readonly improvements: readonly string[];
  /** Failed with both. */
  readonly bothFailed: readonly string[];
  /** Failed with the reference, not run with the candidate. */
  readonly referenceFailedOnly: readonly string[];
  readonly bothPassed: number;
  /** Ran with the candidate only (the reference run did not list them). */
  readonly candidateOnly: readonly string[];
}

/** Compares a candidate run's rows with a reference run's (see {@link readResultRows}). */
export function compareRuns(
  candidate: ReadonlyMap<string, RowState>,
  reference: ReadonlyMap<string, RowState>,
): RunComparison {
  const regressions: string[] = [];
  const improvements: string[] = [];
  const bothFailed: string[] = [];
  const referenceFailedOnly: string[] = [];
  let bothPassed = 0;
  for (const [spec, ref] of reference) {
    const got = candidate.get(spec);
    if (ref === "passed") {
      if (got === "passed") bothPassed++;
      else regressions.push(spec);
    } else if (got === "passed") improvements.push(spec);
    else if (got === "failed") bothFailed.push(spec);
    else referenceFailedOnly.push(spec);
  }
  const candidateOnly = [...candidate.keys()].filter((s) => !reference.has(s));
  const sorted = (xs: string[]) => xs.sort((a, b) => a.localeCompare(b));
  return {
    regressions: sorted(regressions),
    improvements: sorted(improvements),
    bothFailed: sorted(bothFailed),
    referenceFailedOnly: sorted(referenceFailedOnly),
    bothPassed,
    candidateOnly: sorted(candidateOnly),
  };
}

/** The comparison as Markdown, `candidate` and `reference` naming the two kubelets. */
export function renderComparison(
  c: RunComparison,
  labels: { candidate: string; reference: string },
): string {
  const list = (title: string, specs: readonly string[]) =>
    specs.length === 0
      ? []
      : ["", `### ${title} (${specs.length})`, "", ...specs.map((s) => `- ${cell(s)}`)];
  return [
    `## ${labels.candidate} compared with ${labels.reference}`,
    "",
    `- passed with both: ${c.bothPassed}`,
    `- passed with ${labels.reference}, not with ${labels.candidate}: **${c.regressions.length}**`,
    `- passed with ${labels.candidate}, not with ${labels.reference}: ${c.improvements.length}`,
    `- failed with both: ${c.bothFailed.length}`,
    `- failed with ${labels.reference}, not run with ${labels.candidate}: ${c.referenceFailedOnly.length}`,
    `- ran with ${labels.candidate} only: ${c.candidateOnly.length}`,
    ...list(`Passed with ${labels.reference}, not with ${labels.candidate}`, c.regressions),
    ...list(`Passed with ${labels.candidate}, not with ${labels.reference}`, c.improvements),
    ...list("Failed with both", c.bothFailed),
    ...list(
      `Failed with ${labels.reference}, not run with ${labels.candidate}`,
      c.referenceFailedOnly,
    ),
    ...list(`Ran with ${labels.candidate} only`, c.candidateOnly),
    "",
  ].join("\n");
}
