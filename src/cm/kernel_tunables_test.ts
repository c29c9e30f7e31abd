import assert from "node:assert/strict";
import { join } from "node:path";
import {
  KERNEL_TUNABLES,
  kernelTunableBehavior,
  procSysctl,
  setupKernelTunables,
  type Sysctl,
} from "./kernel_tunables.ts";
import { captureLogger } from "../testing/cm_fixtures.ts";

/** A /proc/sys of its own: every tunable as wanted, then `changes`. */
function fakeSysctl(changes: Record<string, number | Error> = {}, refuseWrites = false) {
  const values = new Map<string, number | Error>(KERNEL_TUNABLES.map(([n, v]) => [n, v]));
  for (const [n, v] of Object.entries(changes)) values.set(n, v);
  const writes: string[] = [];
  const sysctl: Sysctl = {
    get: (name) => {
      const v = values.get(name);
      if (v === undefined) return Promise.reject(new Error(`no ${name}`));
      return v instanceof Error ? Promise.reject(v) : Promise.resolve(v);
    },
    set: (name, value) => {
      writes.push(`${name}=${value}`);
      if (refuseWrites) {
        return Promise.reject(new Error(`open /proc/sys/${name}: permission denied`));
      }
      values.set(name, value);
      return Promise.resolve();
    },
  };
  return { sysctl, values, writes };
}

Deno.test("protectKernelDefaults: a differing tunable stops the start with upstream's message", async () => {
  assert.equal(kernelTunableBehavior(true), "error");
  const { logger } = captureLogger();
  const one = fakeSysctl({ "vm/overcommit_memory": 0 });
  await assert.rejects(
    setupKernelTunables({ behavior: "error", logger, sysctl: one.sysctl }),
    { message: "invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0" },
  );
  assert.deepEqual(one.writes, []);
  const two = fakeSysctl({ "kernel/panic": 1, "kernel/keys/root_maxkeys": new Error("boom") });
  await assert.rejects(
    setupKernelTunables({ behavior: "error", logger, sysctl: two.sysctl }),
    { message: "[invalid kernel flag: kernel/panic, expected value: 10, actual value: 1, boom]" },
  );
  // All as wanted: nothing to say.
  await setupKernelTunables({ behavior: "error", logger, sysctl: fakeSysctl().sysctl });
});

Deno.test("without protectKernelDefaults the differing tunables are written, and a refused write stops the start", async () => {
  assert.equal(kernelTunableBehavior(false), "modify");
  const { logger, lines } = captureLogger();
  const f = fakeSysctl({ "vm/overcommit_memory": 0, "kernel/panic_on_oops": 0 });
  await setupKernelTunables({ behavior: "modify", logger, sysctl: f.sysctl });
  assert.deepEqual(f.writes, ["vm/overcommit_memory=1", "kernel/panic_on_oops=1"]);
  assert.equal(f.values.get("vm/overcommit_memory"), 1);
  assert.ok(
    lines.some((l) =>
      l.includes('"Updating kernel flag" flag="vm/overcommit_memory" expectedValue=1 actualValue=0')
    ),
    lines.join("\n"),
  );
  const refused = fakeSysctl({ "vm/panic_on_oom": 1 }, true);
  await assert.rejects(
    setupKernelTunables({ behavior: "modify", logger, sysctl: refused.sysctl }),
    { message: "open /proc/sys/vm/panic_on_oom: permission denied" },
  );
});

Deno.test("procSysctl reads and writes <root>/<name>, refusing what is not an integer", async () => {
  const root = await Deno.makeTempDir();
  try {
    await Deno.mkdir(join(root, "vm"));
    await Deno.writeTextFile(join(root, "vm/overcommit_memory"), "0\n");
    await Deno.writeTextFile(join(root, "vm/panic_on_oom"), "x\n");
    const s = procSysctl(root);
    assert.equal(await s.get("vm/overcommit_memory"), 0);
    await s.set("vm/overcommit_memory", 1);
    assert.equal(await Deno.readTextFile(join(root, "vm/overcommit_memory")), "1");
    await assert.rejects(s.get("vm/panic_on_oom"), /vm\/panic_on_oom: not an integer: "x"/);
    await assert.rejects(s.get("kernel/panic"), Deno.errors.NotFound);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
