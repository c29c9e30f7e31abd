import assert from "node:assert/strict";
import { FakeClock } from "./util/clock.ts";
import { createLogger } from "./klog/klog.ts";
import { FakeIptables } from "./testing/fake_iptables.ts";
import { initNetworkUtil, IPTABLES_MONITOR_INTERVAL_MS } from "./kubelet_network_linux.ts";

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

function logLines() {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 });
  return { lines, logger };
}

const W = ["-w", "5"];
const DROP = [
  ...["-m", "comment", "--comment", "block incoming localnet connections"],
  ...["--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8"],
  ...["-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP"],
];
const CANARIES = ["mangle", "nat", "filter"].map((t) => [
  ...W,
  ...["-N", "KUBE-KUBELET-CANARY", "-t", t],
]);

/** What upstream's first sync runs for IPv4 on a host without the chains. */
const IPV4_FIRST_SYNC = [
  [...W, "-N", "KUBE-IPTABLES-HINT", "-t", "mangle"],
  [...W, "-N", "KUBE-FIREWALL", "-t", "filter"],
  [...W, "-C", "OUTPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
  [...W, "-I", "OUTPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
  [...W, "-C", "INPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
  [...W, "-I", "INPUT", "-t", "filter", "-j", "KUBE-FIREWALL"],
  [...W, "-C", "KUBE-FIREWALL", "-t", "filter", ...DROP],
  [...W, "-A", "KUBE-FIREWALL", "-t", "filter", ...DROP],
];

function assertChainsMade(fake: FakeIptables): void {
  assert.ok(fake.hasChain("iptables", "mangle", "KUBE-IPTABLES-HINT"));
  assert.deepEqual(fake.rules("iptables", "filter", "INPUT"), ["-j KUBE-FIREWALL"]);
  assert.deepEqual(fake.rules("iptables", "filter", "OUTPUT"), ["-j KUBE-FIREWALL"]);
  assert.deepEqual(fake.rules("iptables", "filter", "KUBE-FIREWALL"), [DROP.join(" ")]);
  assert.ok(fake.hasChain("ip6tables", "mangle", "KUBE-IPTABLES-HINT"));
  assert.ok(!fake.hasChain("ip6tables", "filter", "KUBE-FIREWALL"), "IPv6 has no KUBE-FIREWALL");
  for (const program of ["iptables", "ip6tables"]) {
    for (const t of ["mangle", "nat", "filter"]) {
      assert.ok(fake.hasChain(program, t, "KUBE-KUBELET-CANARY"), `${program} ${t} canary`);
    }
  }
}

Deno.test("initNetworkUtil runs upstream's commands for each family and starts the monitors", async () => {
  const fake = new FakeIptables();
  const clock = new FakeClock();
  const { lines, logger } = logLines();
  const ctl = new AbortController();
  const { done } = await initNetworkUtil({ logger, signal: ctl.signal, clock, exec: fake.exec });
  await until("both monitors to sleep", () => clock.waiters === 2);
  assert.deepEqual(fake.callsTo("iptables"), [
    ["--version"],
    [...W, "-S", "POSTROUTING", "-t", "nat"],
    ...IPV4_FIRST_SYNC,
    ...CANARIES,
  ]);
  assert.deepEqual(fake.callsTo("ip6tables"), [
    ["--version"],
    [...W, "-S", "POSTROUTING", "-t", "nat"],
    [...W, "-N", "KUBE-IPTABLES-HINT", "-t", "mangle"],
    ...CANARIES,
  ]);
  assertChainsMade(fake);
  assert.equal(lines.length, 2, lines.join("\n"));
  assert.match(lines[0]!, /^I.* "Initialized iptables rules." protocol="IPv4"$/);
  assert.match(lines[1]!, /^I.* "Initialized iptables rules." protocol="IPv6"$/);
  ctl.abort();
  await done;
  for (const program of ["iptables", "ip6tables"]) {
    assert.ok(!fake.hasChain(program, "mangle", "KUBE-KUBELET-CANARY"), "canaries deleted at stop");
  }
  // The chains and rules stay, as upstream leaves them.
  assert.ok(fake.hasChain("iptables", "filter", "KUBE-FIREWALL"));
});

Deno.test("initNetworkUtil makes the chains again after a firewall flush removes the canary", async () => {
  const fake = new FakeIptables();
  const clock = new FakeClock();
  const { logger } = logLines();
  const ctl = new AbortController();
  const { done } = await initNetworkUtil({ logger, signal: ctl.signal, clock, exec: fake.exec });
  await until("both monitors to sleep", () => clock.waiters === 2);
  // Each interval, one look at the mangle table's canary while it is there.
  const before = fake.callsTo("iptables").length;
  clock.step(IPTABLES_MONITOR_INTERVAL_MS);
  await until(
    "the canary checks",
    () => clock.waiters === 2 && fake.callsTo("ip6tables").at(-1)?.[2] === "-S",
  );
  assert.deepEqual(fake.callsTo("iptables").slice(before), [
    [...W, "-S", "KUBE-KUBELET-CANARY", "-t", "mangle"],
  ]);

  fake.flush("iptables");
  assert.ok(!fake.hasChain("iptables", "filter", "KUBE-FIREWALL"));
  const flushed = fake.callsTo("iptables").length;
  clock.step(IPTABLES_MONITOR_INTERVAL_MS);
  await until(
    "the re-sync",
    () => clock.waiters === 2 && fake.hasChain("iptables", "filter", "KUBE-KUBELET-CANARY"),
  );
  assert.deepEqual(fake.callsTo("iptables").slice(flushed), [
    [...W, "-S", "KUBE-KUBELET-CANARY", "-t", "mangle"],
    [...W, "-S", "KUBE-KUBELET-CANARY", "-t", "nat"],
    [...W, "-S", "KUBE-KUBELET-CANARY", "-t", "filter"],
    ...IPV4_FIRST_SYNC,
    ...CANARIES,
  ]);
  assertChainsMade(fake);

  // A sync over chains and rules that are there adds nothing.
  fake.deleteChain("iptables", "mangle", "KUBE-KUBELET-CANARY");
  fake.deleteChain("iptables", "nat", "KUBE-KUBELET-CANARY");
  fake.deleteChain("iptables", "filter", "KUBE-KUBELET-CANARY");
  const again = fake.callsTo("iptables").length;
  clock.step(IPTABLES_MONITOR_INTERVAL_MS);
  await until(
    "the second re-sync",
    () => clock.waiters === 2 && fake.hasChain("iptables", "filter", "KUBE-KUBELET-CANARY"),
  );
  const ops = fake.callsTo("iptables").slice(again).map((c) => c[2]);
  assert.deepEqual(ops, ["-S", "-S", "-S", "-N", "-N", "-C", "-C", "-C", "-N", "-N", "-N"]);
  assertChainsMade(fake);
  ctl.abort();
  await done;
});

Deno.test("initNetworkUtil without iptables says so and does nothing else", async () => {
  const fake = new FakeIptables({ missing: ["iptables", "ip6tables"] });
  const clock = new FakeClock();
  const { lines, logger } = logLines();
  const ctl = new AbortController();
  const { done } = await initNetworkUtil({ logger, signal: ctl.signal, clock, exec: fake.exec });
  await done;
  assert.equal(lines.length, 1);
  assert.match(
    lines[0]!,
    /^I.* "No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain"$/,
  );
  assert.equal(clock.waiters, 0, "no monitor");
  // No version, so no wait flag (upstream's runner for a program that does not run).
  assert.deepEqual(fake.calls, [
    ["iptables", "--version"],
    ["iptables", "-S", "POSTROUTING", "-t", "nat"],
    ["ip6tables", "--version"],
    ["ip6tables", "-S", "POSTROUTING", "-t", "nat"],
  ]);
});

Deno.test("initNetworkUtil logs upstream's error when a chain cannot be made, and starts no monitor for that family", async () => {
  const fake = new FakeIptables();
  fake.fail = (cmd, args) =>
    cmd === "iptables" && args.includes("KUBE-IPTABLES-HINT")
      ? {
        code: 4,
        output:
          "iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: Invalid argument\n",
      }
      : undefined;
  const clock = new FakeClock();
  const { lines, logger } = logLines();
  const ctl = new AbortController();
  const { done } = await initNetworkUtil({ logger, signal: ctl.signal, clock, exec: fake.exec });
  await until("the IPv6 monitor to sleep", () => clock.waiters === 1);
  const [error, failed, v6] = lines;
  // The output ends in a newline, so klog prints the error as a multi-line value.
  assert.ok(error!.startsWith("E"), error);
  assert.equal(
    error!.slice(error!.indexOf('"')),
    '"Failed to ensure that iptables hint chain exists" err=<\n' +
      '\terror creating chain "KUBE-IPTABLES-HINT": exit status 4: iptables v1.8.9 (nf_tables): ' +
      "Could not fetch rule set generation id: Invalid argument\n >",
  );
  assert.match(
    failed!,
    /^I.* "Failed to initialize iptables rules; some functionality may be missing." protocol="IPv4"$/,
  );
  assert.match(v6!, /"Initialized iptables rules." protocol="IPv6"$/);
  assert.ok(
    !fake.callsTo("iptables").some((c) => c.includes("KUBE-FIREWALL")),
    "stops at the first failure",
  );
  assert.ok(!fake.hasChain("iptables", "mangle", "KUBE-KUBELET-CANARY"), "no IPv4 monitor");
  ctl.abort();
  await done;
});

Deno.test("initNetworkUtil stops at the first rule that cannot be added, with that step's line", async () => {
  const fake = new FakeIptables();
  fake.fail = (cmd, args) =>
    cmd === "iptables" && args.includes("-I") && args.includes("INPUT")
      ? { code: 1, output: "iptables: No chain/target/match by that name.\n" }
      : undefined;
  const { lines, logger } = logLines();
  const ctl = new AbortController();
  ctl.abort();
  const { done } = await initNetworkUtil({ logger, signal: ctl.signal, exec: fake.exec });
  await done;
  assert.ok(lines[0]!.startsWith("E"), lines[0]);
  assert.equal(
    lines[0]!.slice(lines[0]!.indexOf('"')),
    '"Failed to ensure that INPUT chain jumps to KUBE-FIREWALL" err=<\n' +
      "\terror appending rule: exit status 1: iptables: No chain/target/match by that name.\n >",
  );
  assert.deepEqual(fake.rules("iptables", "filter", "KUBE-FIREWALL"), []);
});
