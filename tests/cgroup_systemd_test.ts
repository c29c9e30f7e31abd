/**
 * The systemd cgroup driver's D-Bus calls (src/cm/cgroup_systemd.ts) against a fake systemd manager
 * on a private dbus-daemon (tests/dbus_harness.ts): the transient slice with upstream's
 * properties, the wait for its job, an existing unit taken as it is, a failed job named, and
 * stopping. This machine runs no systemd, so the slices' cgroups themselves are shown on
 * fixture trees (src/cm/cgroup_manager_test.ts).
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { connectSystemd, resourceProperties } from "../src/cm/cgroup_systemd.ts";
import { startFakeSystemd, startPrivateBus } from "./dbus_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("systemd cgroup driver tests", ["dbus-daemon"]);

Deno.test({
  name: "connectSystemd starts, updates and stops transient slices over D-Bus",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "systemd-" });
    await using bus = await startPrivateBus(join(dir, "bus"));
    const fake = await startFakeSystemd(bus.address);
    const units = await connectSystemd(bus.address);
    try {
      assert.deepEqual(fake.calls, ["Subscribe()"]);
      await units.startSlice(
        "kubepods-burstable.slice",
        "kubepods.slice",
        resourceProperties({ cpuShares: 1024n, memory: -1n }, false),
      );
      assert.equal(
        fake.calls[1],
        "StartTransientUnit(kubepods-burstable.slice, replace, " +
          "Description=libcontainer container kubepods-burstable.slice Wants=kubepods.slice " +
          "DefaultDependencies=false MemoryAccounting=true CPUAccounting=true IOAccounting=true " +
          "TasksAccounting=true CPUShares=1024 MemoryLimit=18446744073709551615)",
      );
      assert.ok(fake.units.has("kubepods-burstable.slice"));
      // Started again (a kubelet restart): the existing unit is kept.
      await units.startSlice("kubepods-burstable.slice", "kubepods.slice", []);
      await units.setProperties("kubepods-burstable.slice", [["CPUShares", {
        signature: "t",
        value: 2n,
      }]]);
      assert.equal(
        fake.calls.at(-1),
        "SetUnitProperties(kubepods-burstable.slice, true, CPUShares=2)",
      );
      fake.failNext("kubepods-besteffort.slice", "failed");
      await assert.rejects(
        units.startSlice("kubepods-besteffort.slice", "kubepods.slice", []),
        new Error("error creating systemd unit `kubepods-besteffort.slice`: got `failed`"),
      );
      await units.stopUnit("kubepods-burstable.slice");
      assert.equal(fake.units.has("kubepods-burstable.slice"), false);
      // Stopping a unit that is gone is not an error.
      await units.stopUnit("kubepods-burstable.slice");
    } finally {
      units.close();
      fake.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
