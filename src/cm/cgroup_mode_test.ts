import assert from "node:assert/strict";
import { isCgroup2UnifiedMode } from "./cgroup_mode.ts";

const HYBRID = [
  "25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
  "26 25 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755",
  "27 26 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw",
  "29 26 0:26 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory",
].join("\n");

const UNIFIED =
  "26 25 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate";

Deno.test("isCgroup2UnifiedMode tells hybrid v1 from unified v2", () => {
  assert.equal(isCgroup2UnifiedMode(HYBRID), false);
  assert.equal(isCgroup2UnifiedMode(UNIFIED), true);
  assert.equal(isCgroup2UnifiedMode(""), false);
});
