import assert from "node:assert/strict";
import { join } from "node:path";
import {
  aggregateError,
  goParseQuery,
  journalctlArgs,
  type NodeLogQuery,
  parseNodeLogQuery,
  validateNodeLogQuery,
} from "./journal.ts";

/** Decodes and validates `raw` as the kubelet's /logs/ handler does: status and text. */
async function answer(raw: string, logDir = "/nonexistent-log-dir"): Promise<string> {
  const q = parseNodeLogQuery(goParseQuery(raw));
  if (q === undefined) return "files";
  if ("errors" in q) return `400 ${aggregateError(q.errors)}`;
  const errors = await validateNodeLogQuery(q, logDir);
  if (errors.length > 0) return `406 ${aggregateError(errors)}`;
  return `ok ${JSON.stringify(journalctlArgs(q, q.services))}`;
}

// Each expectation is what upstream v1.36.3's newNodeLogQuery, validate and getLoggingCmd
// answered for the same query (built from its source with Go 1.26).
const CASES: [string, string][] = [
  ["", "files"],
  ["unknown=true", "files"],
  ["sinceTime=", "files"],
  ["boot=", "files"],
  ["query=a;b", "files"],
  ["query=", '400 query: Invalid value: [""]: may not be empty'],
  ["query=%20%20&query=%20", '400 query: Invalid value: ["  "," "]: may not be empty'],
  [
    "sinceTime=2019-12-04%2002:00:00",
    '400 sinceTime: Invalid value: "2019-12-04 02:00:00": invalid time format',
  ],
  [
    "tailLines=foo&boot=x",
    '400 [boot: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax, tailLines: Invalid value: "foo": strconv.Atoi: parsing "foo": invalid syntax]',
  ],
  [
    "tailLines=99999999999999999999",
    '400 tailLines: Invalid value: "99999999999999999999": strconv.Atoi: parsing "99999999999999999999": value out of range',
  ],
  [
    "query=a&sinceTime=bad&untilTime=bad",
    '400 [sinceTime: Invalid value: "bad": invalid time format, untilTime: Invalid value: "bad": invalid time format]',
  ],
  ["sinceTime=2023-02-04T02:00:00Z", "406 query: Required value: cannot be empty with options"],
  [
    "query=a&query=b&query=c&query=d&query=e",
    "406 query: Too many: 5: must have at most 4 items",
  ],
  ["query=a%0A", '406 query: Invalid value: "a\\n": input contains unsupported characters'],
  [
    "query=%26%3C%3E%E2%80%A8%0A",
    '406 query: Invalid value: "&<>\\u2028\\n": input contains unsupported characters',
  ],
  [
    `query=${"s".repeat(257)}`,
    `406 query: Invalid value: "${"s".repeat(257)}": length must be less than 256`,
  ],
  [
    "query=a&query=a%2Fb&query=c%0A",
    '406 [query: Invalid value: "c\\n": input contains unsupported characters, query: Invalid value: "[a/b], [a c\\n]": cannot specify a file and service]',
  ],
  [
    "query=x/a&query=x/b",
    '406 query: Invalid value: ["x/a","x/b"]: cannot specify more than one file',
  ],
  ["query=x/a&tailLines=3", '406 query: Invalid value: ["x/a"]: cannot specify file with options'],
  [
    "query=a&boot=1&tailLines=100001",
    "406 [boot: Invalid value: 1: must be less than 1, tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive]",
  ],
  ["query=a&boot=%2B1", "406 boot: Invalid value: 1: must be less than 1"],
  [
    "query=a&tailLines=-1",
    "406 tailLines: Invalid value: -1: must be between 0 and 100000, inclusive",
  ],
  [
    "query=a&sinceTime=2023-01-04T02:00:00.120%2B01:00&untilTime=2023-01-04T01:00:00.1Z",
    '406 untilTime: Invalid value: "2023-01-04T01:00:00.1Z": must be after `sinceTime`',
  ],
  [
    "query=a&pattern=foo%5C",
    '406 pattern: Invalid value: "foo\\\\": error parsing regexp: trailing backslash at end of expression: ``',
  ],
  [
    "query=a&pattern=(%3F%3Dx)",
    '406 pattern: Invalid value: "(?=x)": error parsing regexp: invalid or unsupported Perl syntax: `(?=`',
  ],
  ["query=README", 'ok ["--utc","--no-pager","--output=short-precise","--unit=README"]'],
  ["query=%zz&query=svc", 'ok ["--utc","--no-pager","--output=short-precise","--unit=svc"]'],
  ["query=a&pattern=", 'ok ["--utc","--no-pager","--output=short-precise","--unit=a"]'],
  [
    "query=a&sinceTime=2023-02-04T02:00:00.123%2B05:30&untilTime=2024-02-04T02:00:00Z&tailLines=5&pattern=err&boot=-1",
    'ok ["--utc","--no-pager","--output=short-precise","--since=2023-2-4 02:0:0","--until=2024-2-4 02:0:0","--pager-end","--lines=5","--unit=a","--grep=err","--boot","-1"]',
  ],
  [
    "query=a&query=b&sinceTime=2024-02-29T23:59:59.100%2B05:30",
    'ok ["--utc","--no-pager","--output=short-precise","--since=2024-2-29 23:59:59","--unit=a","--unit=b"]',
  ],
];

Deno.test("parseNodeLogQuery and validateNodeLogQuery answer with upstream's statuses and words", async () => {
  for (const [raw, want] of CASES) assert.equal(await answer(raw), want, raw);
});

Deno.test("parseRFC3339 accepts what Go's time.Parse(time.RFC3339) accepts", async () => {
  const ok = [
    "2023-01-04T02:00:00Z",
    "2023-01-04T02:00:00.5Z",
    "2023-01-04T02:00:00,5Z",
    "2024-02-29T23:59:59-00:00",
    "0000-01-01T00:00:00Z",
  ];
  const bad = [
    "2023-01-04t02:00:00z",
    "2023-02-30T02:00:00Z",
    "2023-01-04T24:00:00Z",
    "2023-01-04T02:00:60Z",
    "2023-01-04T02:00:00.Z",
    "2023-01-04T02:00:00+25:00",
    "2023-01-04T02:00:00+0100",
    "2023-1-04T02:00:00Z",
  ];
  for (const t of ok) {
    assert.match(await answer(`query=a&sinceTime=${encodeURIComponent(t)}`), /^ok/, t);
  }
  for (const t of bad) {
    assert.match(await answer(`query=a&sinceTime=${encodeURIComponent(t)}`), /^400/, t);
  }
});

Deno.test("validateNodeLogQuery finds a file inside the log directory only, as os.Root does", async () => {
  const dir = await Deno.makeTempDir({ prefix: "nlq-root-" });
  try {
    const logs = join(dir, "log");
    await Deno.mkdir(join(logs, "apt"), { recursive: true });
    await Deno.writeTextFile(join(logs, "apt", "history.log"), "x\n");
    await Deno.writeTextFile(join(dir, "outside.log"), "secret\n");
    await Deno.symlink("../outside.log", join(logs, "out-link"));
    await Deno.symlink(join(logs, "apt", "history.log"), join(logs, "abs-link"));
    await Deno.symlink("apt/history.log", join(logs, "in-link"));
    const file = (f: string) => answer(`query=${encodeURIComponent(f)}`, logs);
    const invalid = (f: string, why: string) =>
      `406 query: Invalid value: ${JSON.stringify([f])}: statat ${f}: ${why}`;
    assert.equal(
      await file("apt/history.log"),
      'ok ["--utc","--no-pager","--output=short-precise"]',
    );
    assert.match(await file("apt/../apt/history.log"), /^ok/);
    assert.match(await file("./in-link"), /^ok/);
    assert.equal(
      await file("/apt/history.log"),
      invalid("/apt/history.log", "path escapes from parent"),
    );
    assert.equal(
      await file("../log/apt/history.log"),
      invalid("../log/apt/history.log", "path escapes from parent"),
    );
    assert.equal(await file("x/../in-link"), invalid("x/../in-link", "no such file or directory"));
    assert.equal(await file("./out-link"), invalid("./out-link", "path escapes from parent"));
    assert.equal(await file("./abs-link"), invalid("./abs-link", "path escapes from parent"));
    assert.equal(await file("apt/history.log/"), invalid("apt/history.log/", "not a directory"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("journalctlArgs skips empty services, as getLoggingCmd", () => {
  const q: NodeLogQuery = { services: [], files: [] };
  assert.deepEqual(journalctlArgs(q, []), ["--utc", "--no-pager", "--output=short-precise"]);
  assert.deepEqual(journalctlArgs(q, ["p1", "", "p2"]), [
    "--utc",
    "--no-pager",
    "--output=short-precise",
    "--unit=p1",
    "--unit=p2",
  ]);
});
