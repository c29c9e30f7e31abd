import assert from "node:assert/strict";
import {
  cgroupfsName,
  type CgroupLayout,
  CgroupLayoutError,
  cgroupPathsOf,
  containerCgroupPaths,
  detectCgroupLayout,
  parseProcCgroup,
  systemdName,
} from "./cgroup_layout.ts";
import { buildCgroupFixture, fixtureMountinfo } from "../testing/cgroup_fixtures.ts";

/** This workplace's machine (`cat /proc/self/mountinfo`): v1 controllers plus cgroup2 with
 * only hugetlb at /sys/fs/cgroup/unified. */
const MACHINE_HYBRID = `22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334096k,nr_inodes=3083524,mode=755
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`;

const MACHINE_PROC_CGROUP = `9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/fb5d7f297f260506af00981d769bbbf0
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`;

const V1_PROC_CGROUP = `12:pids:/kubepods/podA/c1
8:memory:/kubepods/podA/c1
4:cpu,cpuacct:/kubepods/podA/c1
1:name=systemd:/system.slice/containerd.service
`;

Deno.test("detectCgroupLayout under a host view ignores the view's own copies of the mounts", async () => {
  const view = "/run/kubelet-ts/view-0123456789ab";
  // The view's copies first, as when a hierarchy is mounted after the view was made.
  const copies = MACHINE_HYBRID.split("\n").filter((l) => l.includes("/sys/fs/cgroup"))
    .map((l) => l.replace(" /sys/fs/cgroup", ` ${view}/sys/fs/cgroup`).replace(/^(\d+)/, "9$1"));
  const layout = await detectCgroupLayout({
    root: view,
    mountinfo: `${copies.join("\n")}\n${MACHINE_HYBRID}`,
  });
  assert.equal(layout.mode, "hybrid");
  assert.equal(layout.v1.get("memory"), `${view}/sys/fs/cgroup/memory`);
  assert.equal(layout.unified, `${view}/sys/fs/cgroup/unified`);
  assert.equal(layout.root, `${view}/sys/fs/cgroup`);
});

Deno.test("detectCgroupLayout reads this machine's hybrid layout", async () => {
  const layout = await detectCgroupLayout({ mountinfo: MACHINE_HYBRID });
  assert.equal(layout.mode, "hybrid");
  assert.equal(layout.root, "/sys/fs/cgroup");
  assert.equal(layout.unified, "/sys/fs/cgroup/unified");
  assert.equal(layout.v1.get("cpu"), "/sys/fs/cgroup/cpu");
  assert.equal(layout.v1.get("cpuacct"), "/sys/fs/cgroup/cpuacct");
  assert.equal(layout.v1.get("memory"), "/sys/fs/cgroup/memory");
  assert.equal(layout.v1.get("pids"), "/sys/fs/cgroup/pids");
  assert.equal(layout.v1.get("name=systemd"), "/sys/fs/cgroup/systemd");
  // Mount flags in the super options are not controllers; hugetlb is not mounted as v1.
  assert.equal(layout.v1.has("rw"), false);
  assert.equal(layout.v1.has("hugetlb"), false);
  assert.equal(layout.mountRoots, undefined);
});

Deno.test("detectCgroupLayout maps co-mounted v1 controllers and joins under root", async () => {
  const layout = await detectCgroupLayout({ root: "/fx", mountinfo: fixtureMountinfo("v1") });
  assert.equal(layout.mode, "v1");
  assert.equal(layout.unified, undefined);
  assert.equal(layout.root, "/fx/sys/fs/cgroup");
  assert.equal(layout.v1.get("cpu"), "/fx/sys/fs/cgroup/cpu,cpuacct");
  assert.equal(layout.v1.get("cpuacct"), "/fx/sys/fs/cgroup/cpu,cpuacct");
  assert.equal(layout.v1.get("memory"), "/fx/sys/fs/cgroup/memory");
});

Deno.test("detectCgroupLayout reads a unified v2 host", async () => {
  const layout = await detectCgroupLayout({ root: "/fx/", mountinfo: fixtureMountinfo("v2") });
  assert.equal(layout.mode, "v2");
  assert.equal(layout.unified, "/fx/sys/fs/cgroup");
  assert.equal(layout.root, "/fx/sys/fs/cgroup");
  assert.equal(layout.v1.size, 0);
});

Deno.test("detectCgroupLayout keeps v2 when a named v1 hierarchy is also mounted", async () => {
  const mountinfo = fixtureMountinfo("v2") +
    "50 23 0:50 / /run/systemd-v1 rw - cgroup cgroup rw,name=systemd\n";
  const layout = await detectCgroupLayout({ mountinfo });
  assert.equal(layout.mode, "v2");
  assert.equal(layout.unified, "/sys/fs/cgroup");
  assert.equal(layout.v1.get("name=systemd"), "/run/systemd-v1");
});

Deno.test("detectCgroupLayout takes the first mount of a controller and its root", async () => {
  const mountinfo = [
    "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw",
    "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
    "36 31 0:32 / /mnt/memory rw - cgroup cgroup rw,memory",
  ].join("\n");
  const layout = await detectCgroupLayout({ mountinfo });
  assert.equal(layout.mode, "v1");
  assert.equal(layout.v1.get("memory"), "/sys/fs/cgroup/memory");
  assert.equal(layout.mountRoots?.get("memory"), "/docker/abc");
  // /proc/<pid>/cgroup paths are relative to the hierarchy: the mount's root is cut off.
  const paths = containerCgroupPaths(layout, parseProcCgroup("4:memory:/docker/abc/kubepods/x\n"));
  assert.equal(paths.memory, "/sys/fs/cgroup/memory/kubepods/x");
});

Deno.test("detectCgroupLayout fails naming the file when no cgroup is mounted", async () => {
  await assert.rejects(
    detectCgroupLayout({ root: "/fx", mountinfo: "27 1 254:0 / / rw - ext4 /dev/vda rw\n" }),
    (e: unknown) =>
      e instanceof CgroupLayoutError && e.message.includes("/fx/proc/self/mountinfo") &&
      e.message.includes("cgroup2"),
  );
  const empty = await Deno.makeTempDir({ prefix: "cgroup-layout-" });
  try {
    await assert.rejects(
      detectCgroupLayout({ root: empty }),
      (e: unknown) =>
        e instanceof CgroupLayoutError && e.message.includes(`${empty}/proc/self/mountinfo`),
    );
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});

Deno.test("detectCgroupLayout reads <root>/proc/self/mountinfo of a fixture", async () => {
  const root = await Deno.makeTempDir({ prefix: "cgroup-layout-" });
  try {
    await buildCgroupFixture(root, "hybrid", []);
    const layout = await detectCgroupLayout({ root });
    assert.equal(layout.mode, "hybrid");
    assert.equal(layout.unified, `${root}/sys/fs/cgroup/unified`);
    assert.equal(layout.v1.get("pids"), `${root}/sys/fs/cgroup/pids`);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("parseProcCgroup reads v1, hybrid and v2 files", () => {
  const v1 = parseProcCgroup(V1_PROC_CGROUP);
  assert.equal(v1.get("cpu"), "/kubepods/podA/c1");
  assert.equal(v1.get("cpuacct"), "/kubepods/podA/c1");
  assert.equal(v1.get("name=systemd"), "/system.slice/containerd.service");
  assert.equal(v1.has(""), false);
  assert.equal(v1.size, 5);

  const hybrid = parseProcCgroup(MACHINE_PROC_CGROUP);
  assert.equal(hybrid.get("memory"), "/process_api/fb5d7f297f260506af00981d769bbbf0");
  assert.equal(hybrid.get(""), "/");
  assert.equal(hybrid.get("cpu"), "/");

  const v2 = parseProcCgroup("0::/kubepods.slice/cri-containerd-abc.scope\n");
  assert.deepEqual([...v2], [["", "/kubepods.slice/cri-containerd-abc.scope"]]);
});

Deno.test("parseProcCgroup skips malformed lines and keeps colons in paths", () => {
  const m = parseProcCgroup("garbage\n\n3:memory\n5:pids:/a:b\n");
  assert.deepEqual([...m], [["pids", "/a:b"]]);
});

Deno.test("containerCgroupPaths joins each v1 controller's line onto its mount", async () => {
  const layout = await detectCgroupLayout({ root: "/fx", mountinfo: fixtureMountinfo("v1") });
  const paths = containerCgroupPaths(layout, parseProcCgroup(V1_PROC_CGROUP));
  assert.deepEqual(paths, {
    cpu: "/fx/sys/fs/cgroup/cpu,cpuacct/kubepods/podA/c1",
    cpuacct: "/fx/sys/fs/cgroup/cpu,cpuacct/kubepods/podA/c1",
    memory: "/fx/sys/fs/cgroup/memory/kubepods/podA/c1",
    pids: "/fx/sys/fs/cgroup/pids/kubepods/podA/c1",
  });
});

Deno.test("containerCgroupPaths reads hybrid v1 lines and the 0:: line", async () => {
  const layout = await detectCgroupLayout({ mountinfo: MACHINE_HYBRID });
  const paths = containerCgroupPaths(layout, parseProcCgroup(MACHINE_PROC_CGROUP));
  assert.deepEqual(paths, {
    cpu: "/sys/fs/cgroup/cpu",
    cpuacct: "/sys/fs/cgroup/cpuacct",
    memory: "/sys/fs/cgroup/memory/process_api/fb5d7f297f260506af00981d769bbbf0",
    pids: "/sys/fs/cgroup/pids",
    unified: "/sys/fs/cgroup/unified",
  });
});

Deno.test("containerCgroupPaths gives every controller the unified directory in v2", async () => {
  const layout = await detectCgroupLayout({ mountinfo: fixtureMountinfo("v2") });
  const dir = "/sys/fs/cgroup/kubepods.slice/cri-containerd-abc.scope";
  assert.deepEqual(
    containerCgroupPaths(layout, parseProcCgroup("0::/kubepods.slice/cri-containerd-abc.scope")),
    { cpu: dir, cpuacct: dir, memory: dir, pids: dir, unified: dir },
  );
  // A v1 file read on a v2 host names no unified cgroup: nothing to read.
  assert.deepEqual(containerCgroupPaths(layout, parseProcCgroup(V1_PROC_CGROUP)), {});
});

Deno.test("containerCgroupPaths leaves out controllers that are not mounted", () => {
  const layout: CgroupLayout = {
    mode: "v1",
    root: "/sys/fs/cgroup",
    v1: new Map([["memory", "/sys/fs/cgroup/memory"], ["cpuacct", "/sys/fs/cgroup/cpuacct"]]),
  };
  const paths = containerCgroupPaths(layout, parseProcCgroup(V1_PROC_CGROUP));
  assert.deepEqual(paths, {
    cpuacct: "/sys/fs/cgroup/cpuacct/kubepods/podA/c1",
    memory: "/sys/fs/cgroup/memory/kubepods/podA/c1",
  });
});

Deno.test("cgroupPathsOf joins a relative name onto every mount", async () => {
  const hybrid = await detectCgroupLayout({ mountinfo: MACHINE_HYBRID });
  assert.deepEqual(cgroupPathsOf(hybrid, "/"), {
    cpu: "/sys/fs/cgroup/cpu",
    cpuacct: "/sys/fs/cgroup/cpuacct",
    memory: "/sys/fs/cgroup/memory",
    pids: "/sys/fs/cgroup/pids",
    unified: "/sys/fs/cgroup/unified",
  });
  const v2 = await detectCgroupLayout({ mountinfo: fixtureMountinfo("v2") });
  const pod = "/sys/fs/cgroup/kubepods/burstable/pod12";
  assert.deepEqual(cgroupPathsOf(v2, "/kubepods/burstable/pod12/"), {
    cpu: pod,
    cpuacct: pod,
    memory: pod,
    pids: pod,
    unified: pod,
  });
});

Deno.test("cgroupfsName joins parts as upstream ToCgroupfs", () => {
  assert.equal(cgroupfsName([]), "/");
  assert.equal(cgroupfsName(["Burstable"]), "/Burstable");
  assert.equal(cgroupfsName(["kubepods", "burstable", "pod1234"]), "/kubepods/burstable/pod1234");
  assert.equal(cgroupfsName(["kubepods", "", "pod1234", ""]), "/kubepods/pod1234");
});

Deno.test("systemdName expands slices as upstream ToSystemd", () => {
  // Upstream TestCgroupNameToSystemd and TestCgroupNameWithEmptyPartToSystemd.
  assert.equal(systemdName([]), "/");
  assert.equal(systemdName([""]), "/");
  assert.equal(systemdName(["Burstable"]), "/Burstable.slice");
  assert.equal(systemdName(["Burstable", "pod-123"]), "/Burstable.slice/Burstable-pod_123.slice");
  assert.equal(
    systemdName(["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"]),
    "/BestEffort.slice/BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
  );
  assert.equal(systemdName(["kubepods"]), "/kubepods.slice");
  assert.equal(systemdName(["Burstable", ""]), "/Burstable.slice");
  assert.equal(
    systemdName(["", "Burstable", "pod-123"]),
    "/Burstable.slice/Burstable-pod_123.slice",
  );
  // The module documentation's example (upstream's ToSystemd comment).
  assert.equal(
    systemdName(["kubepods", "burstable", "pod1234-abcd-5678-efgh"]),
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice",
  );
  // Upstream TestCgroupNameToSystemdBasename: the last element.
  assert.equal(
    systemdName(["test", "a", "b", "Burstable"]).split("/").at(-1),
    "test-a-b-Burstable.slice",
  );
  assert.throws(() => systemdName(["a/b"]), /must not contain/);
});

Deno.test("detectCgroupLayout succeeds on this machine", async () => {
  const layout = await detectCgroupLayout();
  assert.ok(layout.v1.size > 0 || layout.unified !== undefined);
  if (layout.mode === "hybrid") {
    assert.ok(layout.unified !== undefined);
    assert.ok(layout.v1.has("memory"));
  }
  if (layout.mode === "v2") assert.equal(layout.unified, "/sys/fs/cgroup");
});
