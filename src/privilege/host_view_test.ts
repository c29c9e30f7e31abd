import assert from "node:assert/strict";
import { join } from "node:path";
import { hostViewEntries, type HostViewEntry, openHostView } from "./host_view.ts";

/** A mount table that the fake `mount` and `umount` commands keep. */
function fakeMounts(initial: string[] = []) {
  const points = new Set(initial);
  const calls: string[] = [];
  let id = 100;
  const line = (p: string) => `${id++} 1 0:5 / ${p} rw - bind none rw`;
  return {
    calls,
    points,
    readMountInfo: () => Promise.resolve([...points].map(line).join("\n") + "\n"),
    run(cmd: string, args: readonly string[]): Promise<string> {
      calls.push(`${cmd} ${args.join(" ")}`);
      if (cmd === "mount" && (args[0] === "--bind" || args[0] === "--rbind")) points.add(args[2]!);
      if (cmd === "umount") points.delete(args.at(-1)!);
      return Promise.resolve("");
    },
  };
}

Deno.test("openHostView binds each entry, read-only unless writable, as a slave, after clearing an old view", async () => {
  const dir = await Deno.makeTempDir({ prefix: "host-view-test-" });
  const host = await Deno.makeTempDir({ prefix: "host-view-host-" });
  try {
    await Deno.mkdir(join(host, "proc"));
    await Deno.mkdir(join(host, "cgroup"));
    await Deno.writeTextFile(join(host, "machine-id"), "abc\n");
    const entries: HostViewEntry[] = [
      { path: join(host, "proc"), kind: "dir", writable: false, recursive: false },
      { path: join(host, "cgroup"), kind: "dir", writable: true, recursive: true },
      { path: join(host, "machine-id"), kind: "file", writable: false, recursive: false },
      { path: join(host, "absent"), kind: "dir", writable: false, recursive: false },
    ];
    const stale = join(dir, host, "proc");
    const m = fakeMounts([stale, "/elsewhere"]);
    const view = await openHostView({ dir, entries, ...m });
    const at = (p: string) => join(dir, host, p);
    assert.deepEqual(m.calls, [
      `umount -l ${stale}`,
      `mount --bind ${join(host, "proc")} ${at("proc")}`,
      `mount --make-slave ${at("proc")}`,
      `mount -o remount,bind,ro ${at("proc")}`,
      `mount --rbind ${join(host, "cgroup")} ${at("cgroup")}`,
      `mount --make-rslave ${at("cgroup")}`,
      `mount --bind ${join(host, "machine-id")} ${at("machine-id")}`,
      `mount --make-slave ${at("machine-id")}`,
      `mount -o remount,bind,ro ${at("machine-id")}`,
    ]);
    assert.deepEqual(view.mounted.map((e) => e.path), entries.slice(0, 3).map((e) => e.path));
    assert.equal((await Deno.stat(at("machine-id"))).isFile, true, "a file to bind over");
    m.calls.length = 0;
    await view.remove();
    assert.deepEqual(
      m.calls.sort(),
      [`umount -l ${at("cgroup")}`, `umount -l ${at("machine-id")}`, `umount -l ${at("proc")}`]
        .sort(),
    );
    assert.deepEqual([...m.points], ["/elsewhere"]);
    await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    await Deno.remove(host, { recursive: true });
  }
});

Deno.test("HostView.remove removes nothing while a mount stays under the view", async () => {
  const dir = await Deno.makeTempDir({ prefix: "host-view-test-" });
  try {
    const m = fakeMounts();
    const view = await openHostView({ dir, entries: [], ...m });
    // An unmount that does not take: the view must not be removed recursively.
    m.points.add(join(dir, "proc"));
    const stubborn = { ...m, run: () => Promise.resolve("") };
    const again = await openHostView({
      dir,
      entries: [],
      readMountInfo: stubborn.readMountInfo,
      run: stubborn.run,
    });
    await assert.rejects(again.remove(), /still mounted after unmounting: .*\/proc/);
    assert.equal((await Deno.stat(dir)).isDirectory, true);
    m.points.clear();
    await view.remove();
    await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("openHostView undoes its mounts when one fails and names the command", async () => {
  const dir = await Deno.makeTempDir({ prefix: "host-view-test-" });
  const host = await Deno.makeTempDir({ prefix: "host-view-host-" });
  try {
    await Deno.mkdir(join(host, "a"));
    await Deno.mkdir(join(host, "b"));
    const m = fakeMounts();
    const run = (cmd: string, args: readonly string[]) =>
      args.includes(join(host, "b"))
        ? Promise.reject(new Error(`${cmd} ${args.join(" ")}: refused`))
        : m.run(cmd, args);
    await assert.rejects(
      openHostView({
        dir,
        entries: ["a", "b"].map((p) => ({
          path: join(host, p),
          kind: "dir" as const,
          writable: true,
          recursive: false,
        })),
        readMountInfo: m.readMountInfo,
        run,
      }),
      /mount --bind .*\/b .*: refused/,
    );
    assert.deepEqual([...m.points], []);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    await Deno.remove(host, { recursive: true });
  }
});

Deno.test("hostViewEntries shows the files of the user namespace range, read-only", () => {
  const byPath = new Map(hostViewEntries(4242).map((e) => [e.path, e]));
  for (const path of ["/etc/passwd", "/etc/subuid", "/etc/subgid"]) {
    assert.deepEqual(byPath.get(path), { path, kind: "file", writable: false, recursive: false });
  }
  // Not /etc/shadow, nor /etc as a whole.
  assert.equal(byPath.has("/etc/shadow"), false);
  assert.equal(byPath.has("/etc"), false);
});
