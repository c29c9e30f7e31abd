import assert from "node:assert/strict";
import { join } from "node:path";
import {
  defaultInterface,
  isIgnoredDevice,
  parseNetDev,
  readNetworkStats,
  readNodeNetworkStats,
} from "./net_stats.ts";

const HEADER = "Inter-|   Receive                                                |  Transmit\n" +
  " face |bytes    packets errs drop fifo frame compressed multicast|" +
  "bytes    packets errs drop fifo colls carrier compressed\n";

/** A /proc/net/dev line as the kernel prints it (`%6s:%8llu %7llu ...`). */
function line(name: string, rx: number[], tx: number[]): string {
  return `${name.padStart(6)}:${rx.map((n) => String(n).padStart(8)).join(" ")} ${
    tx.map((n) => String(n).padStart(8)).join(" ")
  }\n`;
}

const ZERO8 = [0, 0, 0, 0, 0, 0, 0, 0];

async function withProc(files: Record<string, string>, fn: (root: string) => Promise<void>) {
  const root = await Deno.makeTempDir({ prefix: "net-stats-" });
  try {
    for (const [path, text] of Object.entries(files)) {
      await Deno.mkdir(join(root, path, ".."), { recursive: true });
      await Deno.writeTextFile(join(root, path), text);
    }
    await fn(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("parseNetDev reads bytes and errors of each interface", () => {
  const text = HEADER +
    line("lo", [100, 1, 0, 0, 0, 0, 0, 0], [100, 1, 0, 0, 0, 0, 0, 0]) +
    line("eth0", [354006831, 20990, 7, 1, 0, 0, 0, 0], [1674043, 16680, 3, 0, 0, 0, 0, 0]) +
    line("kts0", [222982, 3052, 0, 0, 0, 0, 0, 2225], [82190, 949, 0, 1, 0, 0, 0, 0]);
  assert.deepEqual(parseNetDev(text), [
    {
      name: "eth0",
      rxBytes: 354006831,
      rxPackets: 20990,
      rxErrors: 7,
      rxDropped: 1,
      txBytes: 1674043,
      txPackets: 16680,
      txErrors: 3,
      txDropped: 0,
    },
    {
      name: "kts0",
      rxBytes: 222982,
      rxPackets: 3052,
      rxErrors: 0,
      rxDropped: 0,
      txBytes: 82190,
      txPackets: 949,
      txErrors: 0,
      txDropped: 1,
    },
  ]);
});

Deno.test("parseNetDev reads a counter glued to the colon", () => {
  // Wider than the kernel's 8 columns: no space after the colon.
  const text = HEADER + "  eth0:123456789012 5 2 0 0 0 0 0 99 4 1 0 0 0 0 0\n";
  assert.deepEqual(parseNetDev(text), [
    {
      name: "eth0",
      rxBytes: 123456789012,
      rxPackets: 5,
      rxErrors: 2,
      rxDropped: 0,
      txBytes: 99,
      txPackets: 4,
      txErrors: 1,
      txDropped: 0,
    },
  ]);
});

Deno.test("parseNetDev drops the devices cAdvisor ignores", () => {
  const names = ["lo", "veth1a2b", "docker0", "nerdctl0", "LO2", "eth0", "cni0", "tunl0"];
  const text = HEADER + names.map((n) => line(n, ZERO8, ZERO8)).join("");
  assert.deepEqual(parseNetDev(text).map((i) => i.name), ["eth0", "cni0", "tunl0"]);
  assert.equal(isIgnoredDevice("Veth9"), true);
  assert.equal(isIgnoredDevice("eth0"), false);
});

Deno.test("parseNetDev skips malformed lines and the headers", () => {
  const text = HEADER + "  eth0: 1 2 3\n" + "garbage\n" +
    "  eth1: x 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n" +
    line("eth2", [5, 0, 0, 0, 0, 0, 0, 0], ZERO8) + "\n";
  assert.deepEqual(parseNetDev(text).map((i) => i.name), ["eth2"]);
  assert.deepEqual(parseNetDev(""), []);
  // An interface line in the header position is not read (the kernel always writes two).
  assert.deepEqual(parseNetDev(line("eth0", ZERO8, ZERO8)), []);
});

Deno.test("readNetworkStats reads the process's namespace and is undefined once it is gone", async () => {
  await withProc({
    "proc/42/net/dev": HEADER + line("eth0", [10, 0, 1, 0, 0, 0, 0, 0], [20, 0, 2, 0, 0, 0, 0, 0]),
  }, async (root) => {
    assert.deepEqual(
      (await readNetworkStats(42, { root }))?.map((
        { name, rxBytes, rxErrors, txBytes, txErrors },
      ) => ({
        name,
        rxBytes,
        rxErrors,
        txBytes,
        txErrors,
      })),
      [{ name: "eth0", rxBytes: 10, rxErrors: 1, txBytes: 20, txErrors: 2 }],
    );
    assert.equal(await readNetworkStats(43, { root }), undefined);
    await assert.rejects(() => readNetworkStats(0, { root }), RangeError);
  });
});

Deno.test("readNodeNetworkStats reads pid 1 and falls back to this process's namespace", async () => {
  await withProc({
    "proc/1/net/dev": HEADER + line("eth0", [1, 0, 0, 0, 0, 0, 0, 0], ZERO8),
    "proc/net/dev": HEADER + line("ens3", [2, 0, 0, 0, 0, 0, 0, 0], ZERO8),
  }, async (root) => {
    assert.deepEqual((await readNodeNetworkStats({ root }))?.map((i) => i.name), ["eth0"]);
    await Deno.remove(join(root, "proc/1"), { recursive: true });
    assert.deepEqual((await readNodeNetworkStats({ root }))?.map((i) => i.name), ["ens3"]);
    await Deno.remove(join(root, "proc/net"), { recursive: true });
    assert.equal(await readNodeNetworkStats({ root }), undefined);
  });
});

Deno.test("defaultInterface picks eth0 unless told another name", () => {
  const list = [
    { name: "net1", rxBytes: 1, rxErrors: 0, txBytes: 1, txErrors: 0 },
    { name: "eth0", rxBytes: 2, rxErrors: 0, txBytes: 2, txErrors: 0 },
  ];
  assert.equal(defaultInterface(list)?.rxBytes, 2);
  assert.equal(defaultInterface(list, "net1")?.rxBytes, 1);
  assert.equal(defaultInterface(list, "eth1"), undefined);
  assert.equal(defaultInterface([]), undefined);
});

Deno.test("readNodeNetworkStats reads this machine without loopback", async () => {
  const list = await readNodeNetworkStats();
  assert.ok(list !== undefined);
  assert.ok(list.every((i) => !isIgnoredDevice(i.name) && i.rxBytes >= 0 && i.txBytes >= 0));
  const self = await readNetworkStats(Deno.pid);
  assert.ok(self !== undefined && self.every((i) => i.name !== "lo"));
});
