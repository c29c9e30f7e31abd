import assert from "node:assert/strict";
import { join } from "node:path";
import { countCpuList, filesystemCapacity, readMachineInfo } from "./machine_info.ts";

async function fixture(files: Record<string, string>): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "machine-info-" });
  for (const [path, text] of Object.entries(files)) {
    await Deno.mkdir(join(root, path, ".."), { recursive: true });
    await Deno.writeTextFile(join(root, path), text);
  }
  return root;
}

Deno.test("countCpuList reads kernel cpulists", () => {
  assert.equal(countCpuList("0-3"), 4);
  assert.equal(countCpuList("0-3,6,8-9"), 7);
  assert.equal(countCpuList("0"), 1);
});

Deno.test("readMachineInfo reads a fixture tree as cAdvisor would", async () => {
  const root = await fixture({
    "sys/devices/system/cpu/online": "0-1\n",
    "proc/meminfo":
      "MemTotal:       24576000 kB\nMemFree:        1000 kB\nSwapTotal:       2097148 kB\n",
    "proc/cpuinfo": "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n" +
      "cpu MHz\t\t: 2596.098\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n",
    "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3500000\n",
    "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "4\n",
    "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
    "etc/os-release": 'NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    "etc/machine-id": "0123456789abcdef0123456789abcdef\n",
    "sys/class/dmi/id/product_uuid": "4C4C4544-0042-3510-8052-B4C04F5A4D32\n",
    "proc/sys/kernel/random/boot_id": "b6a0e6a4-6e0a-4bcb-a4a8-0d0d55e2b7b9\n",
    "proc/sys/kernel/osrelease": "6.18.0-test\n",
  });
  try {
    const m = await readMachineInfo(root);
    assert.equal(m.numCores, 2);
    assert.equal(m.memoryCapacity, 24576000 * 1024);
    assert.deepEqual([...m.hugePages.entries()].sort(), [[1073741824, 0], [2097152, 4]]);
    assert.equal(m.osImage, "Debian GNU/Linux 12 (bookworm)");
    assert.equal(m.machineID, "0123456789abcdef0123456789abcdef");
    assert.equal(m.systemUUID, "4C4C4544-0042-3510-8052-B4C04F5A4D32", "as read, not case-folded");
    assert.equal(m.bootID, "b6a0e6a4-6e0a-4bcb-a4a8-0d0d55e2b7b9");
    assert.equal(m.kernelVersion, "6.18.0-test");
    assert.equal(m.cpuModel, "AMD EPYC 7B13");
    assert.equal(m.swapCapacity, 2097148 * 1024);
    assert.equal(m.cpuFrequencyKhz, 3500000, "cpufreq's maximum wins over the current clock");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("readMachineInfo falls back to cpuinfo's clock and reports no swap as 0", async () => {
  const root = await fixture({
    "proc/meminfo": "MemTotal:       1024 kB\nSwapTotal:             0 kB\n",
    "proc/cpuinfo": "processor\t: 0\nmodel name\t:\ncpu MHz\t\t: 2596.098\n",
  });
  try {
    const m = await readMachineInfo(root);
    assert.equal(m.cpuFrequencyKhz, 2596098);
    assert.equal(m.cpuModel, undefined, "an empty model name is no model");
    assert.equal(m.swapCapacity, 0);
    assert.equal(m.numCores, 1);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
  const bare = await fixture({ "proc/cpuinfo": "processor\t: 0\nBogoMIPS\t: 50.00\n" });
  try {
    const m = await readMachineInfo(bare);
    assert.equal(m.cpuFrequencyKhz, undefined);
    assert.equal(m.cpuModel, undefined);
    assert.equal(m.swapCapacity, 0);
  } finally {
    await Deno.remove(bare, { recursive: true });
  }
});

Deno.test("readMachineInfo's system UUID falls back as cAdvisor's GetSystemUUID", async () => {
  const uuidOf = async (files: Record<string, string>) => {
    const root = await fixture(files);
    try {
      return (await readMachineInfo(root)).systemUUID;
    } finally {
      await Deno.remove(root, { recursive: true });
    }
  };
  const machineID = { "etc/machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4\n" };
  // No DMI (a VM such as gVisor's): s390x's /etc/machine-id path answers.
  assert.equal(await uuidOf(machineID), "3d1219c7c4c5404aaa1f6d2a48adfda4");
  assert.equal(
    await uuidOf({
      ...machineID,
      "proc/device-tree/vm,uuid": "b1a2c3d4-0000-1111-2222-333344445555\0",
    }),
    "b1a2c3d4-0000-1111-2222-333344445555",
  );
  assert.equal(
    await uuidOf({
      ...machineID,
      "proc/device-tree/system-id": "IBM,02ABCDEF\0\0",
      "proc/device-tree/vm,uuid": "unused",
    }),
    "IBM,02ABCDEF",
  );
  assert.equal(await uuidOf({}), "");
});

Deno.test("readMachineInfo matches this machine", async () => {
  const m = await readMachineInfo();
  assert.equal(m.numCores, navigator.hardwareConcurrency);
  assert.equal(m.kernelVersion, Deno.osRelease());
  assert.ok(m.memoryCapacity > 0);
  assert.ok(((await filesystemCapacity("/")) ?? 0) > 0);
  assert.equal(await filesystemCapacity("/nonexistent-machine-info-test"), undefined);
  assert.ok(m.swapCapacity !== undefined && m.swapCapacity >= 0);
  const meminfo = await Deno.readTextFile("/proc/meminfo");
  const swapKb = Number(/^SwapTotal:\s+(\d+) kB/m.exec(meminfo)?.[1]);
  assert.equal(m.swapCapacity, swapKb * 1024);
});

Deno.test("readMachineInfo fails naming --allow-all when Deno denies /proc", async () => {
  const dir = await Deno.makeTempDir({ prefix: "machine_info_perm_" });
  try {
    const script = `${dir}/probe.ts`;
    const module = new URL("./machine_info.ts", import.meta.url).href;
    await Deno.writeTextFile(
      script,
      `import { readMachineInfo } from ${JSON.stringify(module)};\n` +
        `try { await readMachineInfo(); console.log("read"); } ` +
        `catch (e) { console.log((e as Error).name + ": " + (e as Error).message); }\n`,
    );
    const srcDir = new URL("..", import.meta.url).pathname;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", `--allow-read=/proc,/sys,${srcDir},${dir}`, "--no-prompt", script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.match(
      text,
      /^MachineInfoError: cannot read \/sys\/devices\/system\/cpu\/online: Deno requires --allow-all for \/proc and \/sys .*run the agent with --allow-all in place of -P=kubelet/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
