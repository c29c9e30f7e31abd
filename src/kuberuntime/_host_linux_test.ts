import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import {
  defaultMaskedPaths,
  hostLinuxAt,
  parsePossibleCPUs,
  selinuxEnabled,
  swapControllerAvailable,
  unifiedCgroupPath,
} from "./_host_linux.ts";

/** A directory standing for "/" with `files` (path → content; "" makes an empty file). */
async function fakeRoot(
  files: Record<string, string>,
): Promise<{ path: string } & AsyncDisposable> {
  const root = await Deno.makeTempDir({ prefix: "host-linux-" });
  for (const [path, content] of Object.entries(files)) {
    await Deno.mkdir(join(root, dirname(path)), { recursive: true });
    await Deno.writeTextFile(join(root, path), content);
  }
  return { path: root, [Symbol.asyncDispose]: () => Deno.remove(root, { recursive: true }) };
}

const MOUNTINFO = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
  "23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw\n";
const SELINUXFS = (opts: string) =>
  `24 22 0:22 / /sys/fs/selinux ${opts} shared:3 - selinuxfs selinuxfs rw\n`;

Deno.test("unifiedCgroupPath takes the 0:: line of /proc/self/cgroup", () => {
  assert.equal(
    unifiedCgroupPath("0::/system.slice/kubelet.service\n"),
    "/system.slice/kubelet.service",
  );
  assert.equal(unifiedCgroupPath("4:memory:/a\n0::/b:c\n"), "/b:c");
  assert.equal(unifiedCgroupPath("4:memory:/a\n"), "");
});

Deno.test("swapControllerAvailable looks where upstream does on v1 and v2", async () => {
  {
    await using root = await fakeRoot({ "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "" });
    assert.equal(swapControllerAvailable(false, root.path), true);
    assert.equal(swapControllerAvailable(true, root.path), false, "no /proc/self/cgroup");
  }
  {
    await using root = await fakeRoot({ "sys/fs/cgroup/memory/memory.limit_in_bytes": "" });
    assert.equal(swapControllerAvailable(false, root.path), false, "swap accounting is off");
  }
  {
    await using root = await fakeRoot({
      "proc/self/cgroup": "0::/system.slice/kubelet.service\n",
      "sys/fs/cgroup/system.slice/kubelet.service/memory.swap.max": "max\n",
    });
    assert.equal(swapControllerAvailable(true, root.path), true);
  }
  {
    // In the root cgroup (e.g. a private cgroup namespace) there is no memory.swap.max.
    await using root = await fakeRoot({
      "proc/self/cgroup": "0::/\n",
      "sys/fs/cgroup/memory.max": "",
    });
    assert.equal(swapControllerAvailable(true, root.path), false);
  }
});

Deno.test("selinuxEnabled wants a writable selinuxfs and a label other than kernel", async () => {
  const cases: Array<[string, Record<string, string>, boolean]> = [
    ["no selinuxfs", { "proc/self/mountinfo": MOUNTINFO }, false],
    ["read-only selinuxfs", { "proc/self/mountinfo": MOUNTINFO + SELINUXFS("ro,relatime") }, false],
    [
      "no policy loaded",
      {
        "proc/self/mountinfo": MOUNTINFO + SELINUXFS("rw,relatime"),
        "proc/thread-self/attr/current": "kernel\0",
      },
      false,
    ],
    [
      "enforcing",
      {
        "proc/self/mountinfo": MOUNTINFO + SELINUXFS("rw,relatime"),
        "proc/thread-self/attr/current": "system_u:system_r:kernel_t:s0\0",
      },
      true,
    ],
    ["label unreadable", { "proc/self/mountinfo": MOUNTINFO + SELINUXFS("rw,relatime") }, true],
    ["no mountinfo", {}, false],
  ];
  for (const [what, files, want] of cases) {
    await using root = await fakeRoot(files);
    assert.equal(selinuxEnabled(root.path), want, what);
  }
});

Deno.test("parsePossibleCPUs reads the kernel's CPU list", () => {
  assert.deepEqual(parsePossibleCPUs("0-2,5\n"), [0, 1, 2, 5]);
  assert.deepEqual(parsePossibleCPUs("0"), [0]);
  assert.equal(parsePossibleCPUs("0-x"), undefined);
});

Deno.test("defaultMaskedPaths adds the thermal_throttle directories that exist", async () => {
  await using root = await fakeRoot({
    "sys/devices/system/cpu/possible": "0-3\n",
    "sys/devices/system/cpu/cpu1/thermal_throttle/core_throttle_count": "0\n",
    "sys/devices/system/cpu/cpu3/thermal_throttle/core_throttle_count": "0\n",
  });
  assert.deepEqual(defaultMaskedPaths(root.path), [
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/sys/devices/system/cpu/cpu1/thermal_throttle",
    "/sys/devices/system/cpu/cpu3/thermal_throttle",
  ]);
});

Deno.test("hostLinuxAt reads each fact once", async () => {
  await using root = await fakeRoot({
    "proc/meminfo": "MemTotal:       8000000 kB\nSwapTotal:       1024 kB\n",
    "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
    "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "",
  });
  const host = hostLinuxAt(root.path);
  assert.equal(host.swapCapacityBytes(), 1024 * 1024);
  assert.deepEqual(host.hugePageSizes(), ["2MB"]);
  assert.equal(host.swapControllerAvailable(false), true);
  await Deno.remove(join(root.path, "sys"), { recursive: true });
  await Deno.writeTextFile(join(root.path, "proc/meminfo"), "SwapTotal: 0 kB\n");
  assert.equal(host.swapCapacityBytes(), 1024 * 1024, "kept");
  assert.deepEqual(host.hugePageSizes(), ["2MB"], "kept");
  assert.equal(host.swapControllerAvailable(false), true, "kept");
  assert.equal(
    hostLinuxAt(root.path).swapControllerAvailable(false),
    false,
    "a new one reads again",
  );
});
