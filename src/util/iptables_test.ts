import assert from "node:assert/strict";
import { FakeClock } from "./clock.ts";
import { createLogger } from "../klog/klog.ts";
import { FakeIptables } from "../testing/fake_iptables.ts";
import {
  APPEND,
  IptablesError,
  IptablesRunner,
  iptablesWaitFlag,
  newBestEffort,
  parseIptablesVersion,
  PREPEND,
} from "./iptables.ts";

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

function logLines(verbosity = 0) {
  const lines: string[] = [];
  const logger = createLogger({
    verbosity,
    write: (l) => lines.push(l),
    now: () => new Date(0),
    pid: 1,
  });
  return { lines, logger };
}

Deno.test("parseIptablesVersion and iptablesWaitFlag follow upstream's version gates", () => {
  assert.deepEqual(parseIptablesVersion("iptables v1.8.9 (nf_tables)\n"), [1, 8, 9]);
  assert.deepEqual(parseIptablesVersion("iptables v1.4.21\n"), [1, 4, 21]);
  assert.equal(parseIptablesVersion("no version here"), undefined);
  assert.deepEqual(iptablesWaitFlag([1, 8, 9]), ["-w", "5"]);
  assert.deepEqual(iptablesWaitFlag([1, 4, 22]), ["-w", "5"]);
  assert.deepEqual(iptablesWaitFlag([1, 4, 21]), ["-w"]);
  assert.deepEqual(iptablesWaitFlag([1, 4, 19]), []);
});

Deno.test("IptablesRunner runs the wait flag its version takes before each operation", async () => {
  for (
    const [version, wait] of [
      ["v1.8.9 (nf_tables)", ["-w", "5"]],
      ["v1.4.21", ["-w"]],
      ["v1.4.19", []],
    ] as const
  ) {
    const fake = new FakeIptables({ version });
    const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec });
    await ipt.ensureChain("mangle", "X");
    assert.deepEqual(fake.callsTo("iptables"), [
      ["--version"],
      [...wait, "-N", "X", "-t", "mangle"],
    ]);
  }
});

Deno.test("IptablesRunner ensureChain says whether the chain existed, and fails on other exits", async () => {
  const fake = new FakeIptables();
  const ipt = await IptablesRunner.create({ protocol: "IPv6", exec: fake.exec });
  assert.equal(ipt.isIPv6(), true);
  assert.equal(await ipt.ensureChain("mangle", "KUBE-IPTABLES-HINT"), false);
  assert.equal(await ipt.ensureChain("mangle", "KUBE-IPTABLES-HINT"), true);
  assert.ok(fake.hasChain("ip6tables", "mangle", "KUBE-IPTABLES-HINT"));
  assert.deepEqual(fake.callsTo("iptables"), []);
  fake.fail = () => ({ code: 4, output: "Another app is currently holding the xtables lock.\n" });
  await assert.rejects(ipt.ensureChain("mangle", "KUBE-IPTABLES-HINT"), (e: unknown) => {
    assert.ok(e instanceof IptablesError);
    assert.equal(
      e.message,
      'error creating chain "KUBE-IPTABLES-HINT": exit status 4: Another app is currently holding the xtables lock.\n',
    );
    assert.equal(e.exitCode, 4);
    return true;
  });
});

Deno.test("IptablesRunner ensureRule checks with -C first and adds only a missing rule", async () => {
  const fake = new FakeIptables();
  const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec });
  await ipt.ensureChain("filter", "KUBE-FIREWALL");
  assert.equal(await ipt.ensureRule(PREPEND, "filter", "OUTPUT", "-j", "KUBE-FIREWALL"), false);
  assert.equal(await ipt.ensureRule(PREPEND, "filter", "OUTPUT", "-j", "KUBE-FIREWALL"), true);
  assert.equal(await ipt.ensureRule(APPEND, "filter", "KUBE-FIREWALL", "-j", "DROP"), false);
  assert.deepEqual(fake.callsTo("iptables").slice(2), [
    ["-w", "5", "-C", "OUTPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
    ["-w", "5", "-I", "OUTPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
    ["-w", "5", "-C", "OUTPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
    ["-w", "5", "-C", "KUBE-FIREWALL", "-t", "filter", "-j", "DROP"],
    ["-w", "5", "-A", "KUBE-FIREWALL", "-t", "filter", "-j", "DROP"],
  ]);
  assert.deepEqual(fake.rules("iptables", "filter", "OUTPUT"), ["-j KUBE-FIREWALL"]);
  // A check that fails otherwise than "no such rule" is an error, and nothing is added.
  fake.fail = (_, args) => args.includes("-C") ? { code: 2, output: "Bad argument\n" } : undefined;
  await assert.rejects(
    ipt.ensureRule(PREPEND, "filter", "INPUT", "-j", "KUBE-FIREWALL"),
    /^IptablesError: error checking rule: exit status 2: Bad argument/,
  );
  assert.deepEqual(fake.rules("iptables", "filter", "INPUT"), []);
});

Deno.test("IptablesRunner ensureRule refuses an iptables without -C (older than 1.4.11)", async () => {
  const fake = new FakeIptables({ version: "v1.4.10" });
  const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec });
  await assert.rejects(ipt.ensureRule(APPEND, "filter", "INPUT", "-j", "DROP"), /lacks -C/);
  assert.deepEqual(fake.rules("iptables", "filter", "INPUT"), []);
});

Deno.test("newBestEffort keeps each family whose iptables lists nat POSTROUTING, and none when neither does", async () => {
  const both = new FakeIptables();
  assert.deepEqual([...(await newBestEffort({ exec: both.exec })).keys()], ["IPv4", "IPv6"]);
  assert.deepEqual(both.calls, [
    ["iptables", "--version"],
    ["iptables", "-w", "5", "-S", "POSTROUTING", "-t", "nat"],
    ["ip6tables", "--version"],
    ["ip6tables", "-w", "5", "-S", "POSTROUTING", "-t", "nat"],
  ]);
  const v4only = new FakeIptables();
  v4only.fail = (cmd, args) =>
    cmd === "ip6tables" && args.includes("-S")
      ? { code: 3, output: "ip6tables: Table does not exist (do you need to insmod?)\n" }
      : undefined;
  assert.deepEqual([...(await newBestEffort({ exec: v4only.exec })).keys()], ["IPv4"]);
  const none = new FakeIptables({ missing: ["iptables", "ip6tables"] });
  assert.equal((await newBestEffort({ exec: none.exec })).size, 0);
});

Deno.test("IptablesRunner monitor reloads once its canary is flushed, and deletes the canaries when stopped", async () => {
  const fake = new FakeIptables();
  const clock = new FakeClock();
  const { lines, logger } = logLines(2);
  const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec, clock, logger });
  let reloads = 0;
  const ctl = new AbortController();
  const tables = ["mangle", "nat", "filter"] as const;
  const done = ipt.monitor({
    canary: "KUBE-KUBELET-CANARY",
    tables,
    reload: () => reloads++,
    intervalMs: 60_000,
    signal: ctl.signal,
  });
  await until("the monitor to sleep", () => clock.waiters === 1);
  for (const t of tables) assert.ok(fake.hasChain("iptables", t, "KUBE-KUBELET-CANARY"));
  const before = fake.calls.length;
  clock.step(60_000);
  await until("the canary check", () => clock.waiters === 1 && fake.calls.length > before);
  assert.deepEqual(fake.calls.slice(before), [
    ["iptables", "-w", "5", "-S", "KUBE-KUBELET-CANARY", "-t", "mangle"],
  ]);
  assert.equal(reloads, 0);

  fake.flush("iptables");
  clock.step(60_000);
  await until("the reload", () => reloads === 1 && clock.waiters === 1);
  for (const t of tables) assert.ok(fake.hasChain("iptables", t, "KUBE-KUBELET-CANARY"));
  assert.ok(lines.some((l) => l.includes('"IPTables canary deleted" table="mangle"')));
  assert.ok(lines.some((l) => l.includes('"Reloading after iptables flush"')));
  assert.ok(!lines.some((l) => l.includes("Inconsistent")));

  ctl.abort();
  await done;
  for (const t of tables) assert.ok(!fake.hasChain("iptables", t, "KUBE-KUBELET-CANARY"));
  assert.deepEqual(fake.calls.slice(-3), [
    ["iptables", "-w", "5", "-X", "KUBE-KUBELET-CANARY", "-t", "mangle"],
    ["iptables", "-w", "5", "-X", "KUBE-KUBELET-CANARY", "-t", "nat"],
    ["iptables", "-w", "5", "-X", "KUBE-KUBELET-CANARY", "-t", "filter"],
  ]);
});

Deno.test("IptablesRunner monitor waits up to 5 s for the other canaries, then reloads and says the state was inconsistent", async () => {
  const fake = new FakeIptables();
  const clock = new FakeClock();
  const { lines, logger } = logLines();
  const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec, clock, logger });
  let reloads = 0;
  const ctl = new AbortController();
  const done = ipt.monitor({
    canary: "KUBE-KUBELET-CANARY",
    tables: ["mangle", "nat", "filter"],
    reload: () => reloads++,
    intervalMs: 60_000,
    signal: ctl.signal,
  });
  await until("the monitor to sleep", () => clock.waiters === 1);
  fake.deleteChain("iptables", "mangle", "KUBE-KUBELET-CANARY");
  clock.step(60_000);
  for (let waited = 0; waited < 5_000; waited += 100) {
    await until("the flush poll", () => clock.waiters === 1);
    assert.equal(reloads, 0, `no reload after ${waited} ms`);
    clock.step(100);
  }
  await until("the reload", () => reloads === 1);
  assert.ok(
    lines.some((l) => l.startsWith("I") && l.includes('"Inconsistent iptables state detected"')),
  );
  ctl.abort();
  await done;
});

Deno.test("IptablesRunner monitor takes a lock timeout (exit 4) for a failed check, not a flush", async () => {
  const fake = new FakeIptables();
  const clock = new FakeClock();
  const { lines, logger } = logLines();
  const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec, clock, logger });
  let reloads = 0;
  const ctl = new AbortController();
  const done = ipt.monitor({
    canary: "KUBE-KUBELET-CANARY",
    tables: ["mangle", "nat", "filter"],
    reload: () => reloads++,
    intervalMs: 60_000,
    signal: ctl.signal,
  });
  await until("the monitor to sleep", () => clock.waiters === 1);
  fake.fail = (_, args) =>
    args.includes("-S")
      ? { code: 4, output: "Another app is currently holding the xtables lock.\n" }
      : undefined;
  const before = fake.calls.length;
  clock.step(60_000);
  await until("the check", () => fake.calls.length > before && clock.waiters === 1);
  assert.equal(reloads, 0);
  assert.ok(
    lines.some((l) => l.startsWith("E") && l.includes('"Could not check for iptables canary"')),
  );
  ctl.abort();
  await done;
});

Deno.test("IptablesRunner monitor retries canaries it cannot make every interval", async () => {
  const fake = new FakeIptables();
  const clock = new FakeClock();
  const { lines, logger } = logLines();
  const ipt = await IptablesRunner.create({ protocol: "IPv4", exec: fake.exec, clock, logger });
  fake.fail = (_, args) =>
    args.includes("nat") && args.includes("-N") ? { code: 3, output: "nat broken\n" } : undefined;
  const ctl = new AbortController();
  const done = ipt.monitor({
    canary: "KUBE-KUBELET-CANARY",
    tables: ["mangle", "nat", "filter"],
    reload: () => {},
    intervalMs: 60_000,
    signal: ctl.signal,
  });
  await until("the monitor to sleep", () => clock.waiters === 1);
  assert.ok(
    lines.some((l) =>
      l.includes('"Could not set up iptables canary"') && l.includes('table="nat"') &&
      l.includes(
        'err=<\n\terror creating chain "KUBE-KUBELET-CANARY": exit status 3: nat broken\n >',
      )
    ),
    lines.join("\n"),
  );
  assert.ok(!fake.hasChain("iptables", "filter", "KUBE-KUBELET-CANARY"));
  fake.fail = undefined;
  clock.step(60_000);
  await until("the canaries", () => fake.hasChain("iptables", "filter", "KUBE-KUBELET-CANARY"));
  ctl.abort();
  await done;
});
