/**
 * The kubelet's iptables util chains (src/kubelet_network_linux.ts, src/util/iptables.ts) against
 * the real iptables and ip6tables, inside a network namespace this test makes (`ip netns add`) and
 * removes: every command runs as `ip netns exec <ns> iptables ...`, so the host's tables are never
 * touched. Shows the chains and rules upstream makes as `iptables-save` prints them, the monitor
 * making them again after a firewall reload (every table flushed and its chains deleted) within a
 * short monitor interval, and the canaries deleted when the kubelet's signal aborts.
 */

import assert from "node:assert/strict";
import { createLogger } from "../src/klog/klog.ts";
import { initNetworkUtil } from "../src/kubelet_network_linux.ts";
import { type IptablesExec, runIptablesCommand } from "../src/util/iptables.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("iptables util chains tests", [
  "ip",
  "iptables",
  "ip6tables",
  "iptables-save",
  "ip6tables-save",
]);

/** Runs `cmd args` in the namespace; throws with its output unless it exits 0. */
async function inNs(ns: string, cmd: string, ...args: string[]): Promise<string> {
  const r = await runIptablesCommand("ip", ["netns", "exec", ns, cmd, ...args]);
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} in ${ns}: exit ${r.code}: ${r.output}`);
  }
  return r.output;
}

async function run(cmd: string, ...args: string[]): Promise<void> {
  const r = await runIptablesCommand(cmd, args);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(" ")}: exit ${r.code}: ${r.output}`);
}

/** `iptables-save` of the namespace, one line each, without comments and counters. */
async function saved(ns: string, program: "iptables-save" | "ip6tables-save"): Promise<string[]> {
  return (await inNs(ns, program)).split("\n").filter((l) => l !== "" && !l.startsWith("#"))
    .map((l) => l.replace(/ \[\d+:\d+\]$/, ""));
}

/** The lines of `table` in a save. */
function table(lines: readonly string[], name: string): string[] {
  const start = lines.indexOf(`*${name}`);
  if (start < 0) return [];
  const end = lines.indexOf("COMMIT", start);
  return lines.slice(start + 1, end);
}

const DROP_RULE =
  '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP';

async function assertChains(ns: string): Promise<void> {
  const v4 = await saved(ns, "iptables-save");
  assert.ok(table(v4, "mangle").includes(":KUBE-IPTABLES-HINT -"), v4.join("\n"));
  const filter = table(v4, "filter");
  assert.ok(filter.includes(":KUBE-FIREWALL -"), filter.join("\n"));
  // Both jumps first in their chains, the DROP rule the only rule of KUBE-FIREWALL.
  assert.equal(filter.find((l) => l.startsWith("-A INPUT ")), "-A INPUT -j KUBE-FIREWALL");
  assert.equal(filter.find((l) => l.startsWith("-A OUTPUT ")), "-A OUTPUT -j KUBE-FIREWALL");
  assert.deepEqual(filter.filter((l) => l.startsWith("-A KUBE-FIREWALL ")), [DROP_RULE]);
  for (const t of ["mangle", "nat", "filter"]) {
    assert.ok(table(v4, t).includes(":KUBE-KUBELET-CANARY -"), `IPv4 ${t} canary`);
  }
  const v6 = await saved(ns, "ip6tables-save");
  assert.ok(table(v6, "mangle").includes(":KUBE-IPTABLES-HINT -"), v6.join("\n"));
  assert.ok(!v6.some((l) => l.includes("KUBE-FIREWALL")), "IPv6 has no KUBE-FIREWALL");
  for (const t of ["mangle", "nat", "filter"]) {
    assert.ok(table(v6, t).includes(":KUBE-KUBELET-CANARY -"), `IPv6 ${t} canary`);
  }
}

async function eventually(what: string, fn: () => Promise<void>): Promise<void> {
  const end = Date.now() + 15_000;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`, { cause: e });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

Deno.test({
  name:
    "initNetworkUtil makes upstream's chains in a network namespace and makes them again after a firewall reload",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const ns = `kts-ipt-${crypto.randomUUID().slice(0, 8)}`;
    await run("ip", "netns", "add", ns);
    const lines: string[] = [];
    const logger = createLogger({ verbosity: 2, write: (l) => lines.push(l) });
    const exec: IptablesExec = (cmd, args, signal) =>
      runIptablesCommand("ip", ["netns", "exec", ns, cmd, ...args], signal);
    const ctl = new AbortController();
    let done: Promise<void> | undefined;
    try {
      ({ done } = await initNetworkUtil({
        logger,
        signal: ctl.signal,
        exec,
        monitorIntervalMs: 200,
      }));
      assert.ok(
        lines.some((l) => l.includes('"Initialized iptables rules." protocol="IPv4"')),
        lines.join("\n"),
      );
      assert.ok(
        lines.some((l) => l.includes('"Initialized iptables rules." protocol="IPv6"')),
        lines.join("\n"),
      );
      await eventually("the canaries", () => assertChains(ns));

      // A firewall reload: every table of both families flushed and its chains deleted.
      for (const program of ["iptables", "ip6tables"]) {
        for (const t of ["mangle", "nat", "filter"]) {
          await inNs(ns, program, "-t", t, "-F");
          await inNs(ns, program, "-t", t, "-X");
        }
      }
      await eventually("the chains made again", () => assertChains(ns));
      assert.ok(
        lines.some((l) => l.includes('"Reloading after iptables flush"')),
        lines.join("\n"),
      );

      // Only the canary of the polled table deleted: the monitor waits for the others, then
      // reloads anyway; the chains stay as they were.
      await inNs(ns, "iptables", "-t", "mangle", "-X", "KUBE-KUBELET-CANARY");
      await eventually("the canary made again", () => assertChains(ns));
      assert.ok(lines.some((l) => l.includes('"Inconsistent iptables state detected"')));
      assert.ok(!lines.some((l) => l.startsWith("E")), lines.join("\n"));

      ctl.abort();
      await done;
      done = undefined;
      const after = await saved(ns, "iptables-save");
      assert.ok(!after.some((l) => l.includes("KUBE-KUBELET-CANARY")), "canaries deleted at stop");
      assert.ok(after.includes(DROP_RULE), "the chains stay");
    } finally {
      ctl.abort();
      await done;
      await run("ip", "netns", "del", ns);
    }
  },
});
