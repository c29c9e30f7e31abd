import assert from "node:assert/strict";
import { createLogger } from "./klog/klog.ts";
import { FakeClock } from "./util/clock.ts";
import { RuntimeState } from "./runtime_state.ts";
import { type PodCIDRRuntime, PodCIDRUpdateError, PodCIDRUpdater } from "./kubelet_network.ts";

/** An updater over a runtime that records its calls and fails while `fail` is set. */
function updater(opts: { runtime?: boolean } = {}) {
  const lines: string[] = [];
  const calls: string[] = [];
  const state = new RuntimeState(new FakeClock());
  const fake = {
    fail: undefined as string | undefined,
    /** Resolves each call only when the test says so, when set. */
    gate: undefined as Promise<void> | undefined,
    async updatePodCIDR(cidr: string) {
      calls.push(cidr);
      await this.gate;
      if (this.fail !== undefined) throw new Error(this.fail);
    },
  };
  let runtime: PodCIDRRuntime | undefined = opts.runtime === false ? undefined : fake;
  const u = new PodCIDRUpdater({
    state,
    runtime: () => runtime,
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
  });
  return { u, state, calls, lines, fake, setRuntime: () => (runtime = fake) };
}

Deno.test("PodCIDRUpdater gives the runtime a new pod CIDR once and keeps it in the runtime state", async () => {
  const { u, state, calls, lines } = updater();
  assert.equal(await u.update(""), false, "the runtime starts with no CIDR: nothing to give");
  assert.deepEqual(calls, []);
  assert.equal(await u.update("10.244.1.0/24,fd00:1::/64"), true);
  assert.deepEqual(calls, ["10.244.1.0/24,fd00:1::/64"]);
  assert.equal(state.podCIDR(), "10.244.1.0/24,fd00:1::/64");
  assert.ok(
    lines.some((l) =>
      l.includes('"Updating Pod CIDR" originalPodCIDR="" newPodCIDR="10.244.1.0/24,fd00:1::/64"')
    ),
    lines.join("\n"),
  );
  assert.equal(await u.update("10.244.1.0/24,fd00:1::/64"), false, "unchanged: no call");
  assert.deepEqual(calls.length, 1);
  assert.equal(await u.update("10.244.2.0/24"), true);
  assert.deepEqual(calls, ["10.244.1.0/24,fd00:1::/64", "10.244.2.0/24"]);
});

Deno.test("PodCIDRUpdater throws when the runtime refuses a CIDR and tries it again on the next call", async () => {
  const { u, state, calls, lines, fake } = updater();
  fake.fail = "rpc error: code = Unavailable";
  const e = await u.update("10.244.1.0/24").catch((e) => e);
  assert.ok(e instanceof PodCIDRUpdateError, String(e));
  assert.equal(e.message, "failed to update pod CIDR: rpc error: code = Unavailable");
  assert.equal(state.podCIDR(), "", "the state keeps the CIDR the runtime accepted");
  assert.ok(!lines.some((l) => l.includes("Updating Pod CIDR")));
  fake.fail = undefined;
  assert.equal(await u.update("10.244.1.0/24"), true);
  assert.deepEqual(calls, ["10.244.1.0/24", "10.244.1.0/24"]);
  assert.equal(state.podCIDR(), "10.244.1.0/24");
});

Deno.test("PodCIDRUpdater waits for the runtime manager before giving a CIDR", async () => {
  const { u, state, calls, setRuntime } = updater({ runtime: false });
  assert.equal(await u.update("10.244.1.0/24"), false);
  assert.equal(state.podCIDR(), "");
  setRuntime();
  assert.equal(await u.update("10.244.1.0/24"), true);
  assert.deepEqual(calls, ["10.244.1.0/24"]);
});

Deno.test("PodCIDRUpdater serializes updates: a second caller sees the first one's CIDR", async () => {
  const { u, calls, fake } = updater();
  const release = Promise.withResolvers<void>();
  fake.gate = release.promise;
  const first = u.update("10.244.1.0/24");
  const second = u.update("10.244.1.0/24");
  await Promise.resolve();
  release.resolve();
  assert.deepEqual(await Promise.all([first, second]), [true, false]);
  assert.deepEqual(calls, ["10.244.1.0/24"], "one UpdateRuntimeConfig for one change");
});
