import assert from "node:assert/strict";
import { join } from "node:path";
import { copyNodeLogQuery, type CopyNodeLogQueryOptions } from "./journal_copy.ts";
import type { NodeLogQuery } from "./journal.ts";

/**
 * A journalctl stand-in in `dir`: records each call's arguments (one line, tab-separated) in
 * `calls`, answers `--field _SYSTEMD_UNIT` with the file `units`, and otherwise prints `out` on
 * stdout and `err` on stderr, sleeps `sleep` seconds if that file exists, and exits with `code`.
 * With the file `vanish`, it removes itself after listing the units.
 */
async function fakeJournalctl(dir: string, files: Record<string, string>): Promise<string> {
  const program = join(dir, "journalctl");
  await Deno.writeTextFile(
    program,
    `#!/bin/sh
d="${dir}"
for a in "$@"; do printf '%s\\t' "$a"; done >> "$d/calls"; echo >> "$d/calls"
if [ "$1" = "--field" ]; then
  cat "$d/units" 2>/dev/null
  if [ -f "$d/vanish" ]; then rm -f "$0"; fi
  exit 0
fi
cat "$d/out" 2>/dev/null
if [ -f "$d/err" ]; then cat "$d/err" >&2; fi
if [ -f "$d/sleep" ]; then exec sleep "$(cat "$d/sleep")"; fi
exit "$(cat "$d/code" 2>/dev/null || echo 0)"
`,
    { mode: 0o755 },
  );
  for (const [name, text] of Object.entries(files)) await Deno.writeTextFile(join(dir, name), text);
  return program;
}

async function calls(dir: string): Promise<string[][]> {
  const text = await Deno.readTextFile(join(dir, "calls")).catch(() => "");
  return text.split("\n").filter((l) => l !== "").map((l) => l.split("\t").slice(0, -1));
}

async function copy(q: Partial<NodeLogQuery>, opts: CopyNodeLogQueryOptions): Promise<string> {
  let out = "";
  const decoder = new TextDecoder();
  await copyNodeLogQuery(
    { services: [], files: [], ...q },
    (chunk) => {
      out += decoder.decode(chunk, { stream: true });
      return Promise.resolve();
    },
    opts,
  );
  return out;
}

async function withDirs(fn: (bin: string, logs: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "journal-copy-" });
  try {
    const bin = join(dir, "bin");
    const logs = join(dir, "log");
    await Deno.mkdir(bin);
    await Deno.mkdir(logs);
    await fn(bin, logs);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const UNITS = "containerd.service\nkubelet.service\n";

Deno.test("copyNodeLogQuery runs journalctl with upstream's arguments for the services it knows", async () => {
  await withDirs(async (bin, logs) => {
    const journalctl = await fakeJournalctl(bin, {
      units: UNITS,
      out: "Jan 01 00:00:01.000001 node containerd[1]: started\n",
      err: "a warning\n",
    });
    const out = await copy({
      services: ["containerd", "kubelet"],
      tailLines: 5,
      pattern: "start",
      boot: -1,
    }, { journalctl, logDir: logs });
    assert.equal(out, "Jan 01 00:00:01.000001 node containerd[1]: started\na warning\n");
    assert.deepEqual(await calls(bin), [
      ["--field", "_SYSTEMD_UNIT"],
      ["--field", "_SYSTEMD_UNIT"],
      [
        "--utc",
        "--no-pager",
        "--output=short-precise",
        "--pager-end",
        "--lines=5",
        "--unit=containerd",
        "--unit=kubelet",
        "--grep=start",
        "--boot",
        "-1",
      ],
    ]);
  });
});

Deno.test("copyNodeLogQuery passes journalctl's own answers through: no entries, a failed exit", async () => {
  await withDirs(async (bin, logs) => {
    const journalctl = await fakeJournalctl(bin, { units: UNITS, out: "-- No entries --\n" });
    assert.equal(
      await copy({ services: ["kubelet"] }, { journalctl, logDir: logs }),
      "-- No entries --\n",
    );
    await Deno.writeTextFile(join(bin, "out"), "");
    await Deno.writeTextFile(
      join(bin, "err"),
      "Specifying boot ID or boot offset has no effect, no persistent journal was found.\n",
    );
    await Deno.writeTextFile(join(bin, "code"), "1");
    // A non-zero exit adds nothing: journalctl said why.
    assert.equal(
      await copy({ services: ["kubelet"], boot: -1 }, { journalctl, logDir: logs }),
      "Specifying boot ID or boot offset has no effect, no persistent journal was found.\n",
    );
  });
});

Deno.test("copyNodeLogQuery says the journal is not available when journalctl cannot run, for the current boot only", async () => {
  await withDirs(async (bin, logs) => {
    const files = { units: UNITS, vanish: "" };
    const journalctl = await fakeJournalctl(bin, files);
    assert.equal(
      await copy({ services: ["kubelet"] }, { journalctl, logDir: logs }),
      "\nerror: journal output not available\n",
    );
    await fakeJournalctl(bin, files);
    assert.equal(await copy({ services: ["kubelet"], boot: -1 }, { journalctl, logDir: logs }), "");
  });
});

Deno.test("copyNodeLogQuery reads the files of services the journal does not know, by upstream's heuristics", async () => {
  await withDirs(async (bin, logs) => {
    const journalctl = await fakeJournalctl(bin, { units: UNITS, out: "journal line\n" });
    await Deno.writeTextFile(join(logs, "plain"), "plain file\n");
    await Deno.writeTextFile(join(logs, "dotlog.log"), "dotlog file\n");
    await Deno.mkdir(join(logs, "nested"));
    await Deno.writeTextFile(join(logs, "nested", "nested.log"), "nested file\n");
    await Deno.mkdir(join(logs, "empty-dir"));
    const opts = { journalctl, logDir: logs };
    assert.equal(await copy({ services: ["plain"] }, opts), "plain file\n");
    assert.equal(await copy({ services: ["dotlog"] }, opts), "dotlog file\n");
    assert.equal(await copy({ services: ["nested"] }, opts), "nested file\n");
    assert.equal(await copy({ services: ["empty-dir"] }, opts), "\nlog not found for empty-dir\n");
    assert.equal(await copy({ services: ["missing"] }, opts), "\nlog not found for missing\n");
    assert.equal(
      await copy({ services: [".."] }, opts),
      "\nerror getting log for ..: openat ..: path escapes from parent\n",
    );
    // The journal first, then the files, in one answer.
    assert.equal(
      await copy({ services: ["plain", "kubelet", "missing"] }, opts),
      "journal line\nplain file\n\nlog not found for missing\n",
    );
    // Options apply to the journal only.
    assert.equal(
      await copy({ services: ["kubelet", "plain", "missing"], tailLines: 3 }, opts),
      "journal line\n\noptions present and query resolved to log files for [plain missing]\ntry without specifying options\n",
    );
  });
});

Deno.test("copyNodeLogQuery falls back to files when journalctl is not installed", async () => {
  await withDirs(async (bin, logs) => {
    await Deno.writeTextFile(join(logs, "kubelet.log"), "from the file\n");
    const journalctl = join(bin, "not-installed");
    assert.equal(
      await copy({ services: ["kubelet"] }, { journalctl, logDir: logs }),
      "from the file\n",
    );
  });
});

Deno.test("copyNodeLogQuery stops journalctl at the deadline", async () => {
  await withDirs(async (bin, logs) => {
    const journalctl = await fakeJournalctl(bin, { units: UNITS, out: "before\n", sleep: "30" });
    const started = performance.now();
    const out = await copy({ services: ["kubelet"] }, { journalctl, logDir: logs, timeoutMs: 500 });
    assert.equal(out, "before\n");
    assert.ok(performance.now() - started < 10_000, "killed at the deadline, not after sleep 30");
  });
});
