import assert from "node:assert/strict";
import { join } from "node:path";
import { type CommandRunner, Mounter, MountError, parseMountInfo, runCommand } from "./mount.ts";

/** A runner that records each command and answers from `reply`. */
function recorder(reply: (cmd: string, args: readonly string[]) => string = () => "") {
  const calls: { cmd: string; args: readonly string[]; signal?: AbortSignal }[] = [];
  const run: CommandRunner = (cmd, args, signal) => {
    calls.push({ cmd, args: [...args], signal });
    return Promise.resolve(reply(cmd, args));
  };
  return { calls, run };
}

/** True when the test may mount; else skips loudly, or throws under CI=true. */
function canMount(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

const MOUNTINFO = [
  "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro",
  // No optional fields at all.
  "36 22 0:31 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw",
  // Several optional fields, and spaces, tabs and backslashes escaped in octal.
  "41 22 0:40 /data\\040dir /mnt/my\\040volume\\011tab rw,relatime shared:7 master:3 - tmpfs " +
  "my\\134source rw,size=1024k",
  "",
  // Malformed lines are skipped: too few fields, and no separator.
  "garbage line",
  "50 22 0:41 / /x rw shared:2 tmpfs none rw extra field",
].join("\n");

Deno.test("parseMountInfo reads every field of well-formed lines", () => {
  const all = parseMountInfo(MOUNTINFO);
  assert.equal(all.length, 3);
  assert.deepEqual(all[0], {
    mountId: 22,
    parentId: 1,
    root: "/",
    mountPoint: "/",
    options: ["rw", "relatime"],
    fsType: "ext4",
    source: "/dev/sda1",
    superOptions: ["rw", "errors=remount-ro"],
  });
  assert.equal(all[1]?.mountPoint, "/sys");
  assert.equal(all[1]?.fsType, "sysfs");
  assert.deepEqual(all[1]?.superOptions, ["rw"]);
});

Deno.test("parseMountInfo skips optional fields and undoes octal escapes", () => {
  const m = parseMountInfo(MOUNTINFO)[2];
  assert.ok(m);
  assert.equal(m.mountId, 41);
  assert.equal(m.parentId, 22);
  assert.equal(m.root, "/data dir");
  assert.equal(m.mountPoint, "/mnt/my volume\ttab");
  assert.deepEqual(m.options, ["rw", "relatime"]);
  assert.equal(m.fsType, "tmpfs");
  assert.equal(m.source, "my\\source");
  assert.deepEqual(m.superOptions, ["rw", "size=1024k"]);
});

Deno.test("Mounter.mount passes -t, -o with joined options, source and target", async () => {
  const r = recorder();
  const mounter = new Mounter({ run: r.run, readMountInfo: () => Promise.resolve("") });
  const ctrl = new AbortController();
  await mounter.mount(
    "tmpfs",
    "/var/lib/kubelet/x",
    "tmpfs",
    ["size=1m", "mode=0755"],
    ctrl.signal,
  );
  await mounter.mount("/src", "/dst", "", ["bind"]);
  await mounter.mount("/dev/sdb", "/mnt", "ext4", []);
  await mounter.mount("/a", "/b", "", []);
  assert.deepEqual(r.calls.map((c) => [c.cmd, c.args]), [
    ["mount", ["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", "/var/lib/kubelet/x"]],
    ["mount", ["-o", "bind", "/src", "/dst"]],
    ["mount", ["-t", "ext4", "/dev/sdb", "/mnt"]],
    ["mount", ["/a", "/b"]],
  ]);
  assert.equal(r.calls[0]?.signal, ctrl.signal);
});

Deno.test("Mounter.unmount runs umount with the target", async () => {
  const r = recorder();
  const mounter = new Mounter({ run: r.run });
  const ctrl = new AbortController();
  await mounter.unmount("/var/lib/kubelet/pods/u/volumes/v", ctrl.signal);
  assert.deepEqual(r.calls.map((c) => [c.cmd, c.args]), [
    ["umount", ["/var/lib/kubelet/pods/u/volumes/v"]],
  ]);
  assert.equal(r.calls[0]?.signal, ctrl.signal);
});

Deno.test("Mounter.mount rejects with the runner's error", async () => {
  const mounter = new Mounter({
    run: () => Promise.reject(new MountError("mount failed: exit status 32")),
  });
  await assert.rejects(mounter.mount("a", "b", "", []), {
    name: "MountError",
    message: "mount failed: exit status 32",
  });
});

Deno.test("Mounter.mountAt picks the topmost of stacked mounts, and only exact paths", async () => {
  const text = [
    "30 22 0:50 / /pods/u/vol rw - tmpfs tmpfs rw,size=1k",
    "31 22 0:51 / /pods/u/vol2 rw - tmpfs tmpfs rw",
    "32 30 0:52 / /pods/u/vol rw - tmpfs second rw,size=2k",
    "33 22 0:53 / /pods/u rw - ext4 /dev/sdc rw",
  ].join("\n");
  const mounter = new Mounter({ run: recorder().run, readMountInfo: () => Promise.resolve(text) });
  const top = await mounter.mountAt("/pods/u/vol");
  assert.equal(top?.mountId, 32);
  assert.equal(top?.source, "second");
  assert.equal((await mounter.mountAt("/pods/u/vol2"))?.mountId, 31);
  assert.equal(await mounter.mountAt("/pods/u/vol/"), undefined);
  assert.equal(await mounter.mountAt("/pods"), undefined);
  assert.equal((await mounter.list()).length, 4);
});

Deno.test("runCommand resolves with the output, or rejects with exit status and output", async () => {
  assert.equal(await runCommand("sh", ["-c", "echo hello"]), "hello\n");
  await assert.rejects(runCommand("sh", ["-c", "echo oops >&2; exit 3"]), (e: unknown) => {
    assert.ok(e instanceof MountError);
    assert.equal(
      e.message,
      "mount failed: exit status 3\nMounting command: sh\nMounting arguments: -c echo oops >&2; " +
        "exit 3\nOutput: oops",
    );
    return true;
  });
  await assert.rejects(runCommand("/nonexistent/mount", ["x"]), (e: unknown) => {
    assert.ok(e instanceof MountError);
    assert.match(e.message, /^\/nonexistent\/mount x: /);
    return true;
  });
});

Deno.test("Mounter mounts a tmpfs, finds it in mountinfo and unmounts it", async () => {
  if (!canMount("Mounter's real mount test")) return;
  const dir = await Deno.makeTempDir({ prefix: "mount-test-" });
  const target = join(dir, "a volume");
  await Deno.mkdir(target);
  const mounter = new Mounter();
  try {
    await mounter.mount("tmpfs", target, "tmpfs", ["size=1m", "mode=0750"]);
    const m = await mounter.mountAt(target);
    assert.equal(m?.fsType, "tmpfs");
    assert.ok(m?.superOptions.includes("size=1024k"), String(m?.superOptions));
    await Deno.writeTextFile(join(target, "f"), "x");
    await mounter.unmount(target);
    assert.equal(await mounter.mountAt(target), undefined);
    // The file lived in the tmpfs and went with it.
    await assert.rejects(Deno.stat(join(target, "f")), Deno.errors.NotFound);
  } finally {
    if (await mounter.mountAt(target)) await mounter.unmount(target).catch(() => {});
    await Deno.remove(dir, { recursive: true });
  }
});
