import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import { DesiredStateOfWorld } from "./cache.ts";
import { type FsWatch, PluginWatcher } from "./plugin_watcher.ts";

/** Polls `cond` in real time (file system events), failing after a bound. */
async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Listeners kept open: Deno removes a unix socket's file when its listener closes. */
const listeners: Deno.Listener[] = [];

/** A socket bound at `path` (an inotify create, as a plugin's bind gives). */
function listenSocket(path: string): void {
  listeners.push(Deno.listen({ transport: "unix", path }));
}

/**
 * A socket file at `path` that nobody listens on: bound under another name outside the watched
 * directory and moved in, so that closing the listener does not remove it.
 */
async function staleSocket(path: string, spare: string): Promise<void> {
  const tmp = join(spare, `${crypto.randomUUID()}.sock`);
  const listener = Deno.listen({ transport: "unix", path: tmp });
  await Deno.rename(tmp, path);
  listener.close();
}

/** A watch that reports nothing until closed: what a lost inotify watch looks like. */
function deafWatch(): FsWatch & { closed: boolean } {
  const closed = Promise.withResolvers<void>();
  const watch = {
    closed: false,
    close() {
      watch.closed = true;
      closed.resolve();
    },
    [Symbol.asyncIterator](): AsyncIterator<Deno.FsEvent> {
      return {
        next: async () => {
          await closed.promise;
          return { done: true, value: undefined };
        },
      };
    },
  };
  return watch;
}

async function setup(opts: { watchFs?: (path: string) => FsWatch } = {}) {
  const root = await Deno.makeTempDir({ prefix: "plugin-watcher-" });
  const dir = join(root, "plugins_registry");
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), verbosity: 6 });
  const clock = new FakeClock();
  let uuids = 0;
  const dsw = new DesiredStateOfWorld({
    logger,
    now: () => clock.now(),
    newUUID: () => `u${++uuids}`,
  });
  const watcher = new PluginWatcher({
    path: dir,
    desiredStateOfWorld: dsw,
    logger,
    clock,
    rescanPeriodMs: 10_000,
    ...opts,
  });
  const ctl = new AbortController();
  let done: Promise<void> | undefined;
  const desired = () =>
    new Map(dsw.getPluginsToRegister().map((p) => [p.socketPath, p.uuid] as const));
  return {
    root,
    dir,
    lines,
    clock,
    desired,
    async start() {
      ({ done } = await watcher.start(ctl.signal));
    },
    async [Symbol.asyncDispose]() {
      ctl.abort();
      await done;
      for (const l of listeners.splice(0)) {
        try {
          l.close();
        } catch { /* its file is gone already */ }
      }
      await Deno.remove(root, { recursive: true });
    },
  };
}

Deno.test("PluginWatcher creates the directory, finds sockets present before start and skips dot-files and other files", async () => {
  await using t = await setup();
  await Deno.mkdir(join(t.dir, "sub", ".hidden"), { recursive: true });
  await staleSocket(join(t.dir, "a.sock"), t.root);
  await staleSocket(join(t.dir, ".b.sock"), t.root);
  await staleSocket(join(t.dir, "sub", "c.sock"), t.root);
  await staleSocket(join(t.dir, "sub", ".hidden", "d.sock"), t.root);
  await Deno.writeTextFile(join(t.dir, "notes.txt"), "not a socket");
  await Deno.symlink(join(t.dir, "a.sock"), join(t.dir, "link.sock"));
  await t.start();
  assert.deepEqual([...t.desired().keys()].sort(), [
    join(t.dir, "a.sock"),
    join(t.dir, "link.sock"),
    join(t.dir, "sub", "c.sock"),
  ]);
  assert.ok(t.lines.some((l) => l.includes('"Ignoring file"') && l.includes("notes.txt")));
  assert.ok(
    t.lines.some((l) =>
      l.includes('"Adding socket path or updating timestamp to desired state cache"')
    ),
  );
  assert.equal((await Deno.stat(t.dir)).isDirectory, true);
});

Deno.test("PluginWatcher adds a socket created, renews it when re-created and drops it when removed", async () => {
  await using t = await setup();
  await t.start();
  const a = join(t.dir, "a.sock");
  listenSocket(a);
  await until("the socket added", () => t.desired().has(a));
  const first = t.desired().get(a);
  await Deno.writeTextFile(join(t.dir, "plain"), "x");
  listenSocket(join(t.dir, ".tmp.sock"));

  await Deno.remove(a);
  listenSocket(a);
  await until("a new UUID", () => t.desired().has(a) && t.desired().get(a) !== first);

  await Deno.mkdir(join(t.dir, "later"));
  const b = join(t.dir, "later", "b.sock");
  listenSocket(b);
  await until("the socket in a new directory", () => t.desired().has(b));

  // A rename drops the old name and adds the new one.
  const moved = join(t.dir, "moved.sock");
  await Deno.rename(b, moved);
  await until("the rename", () => t.desired().has(moved) && !t.desired().has(b));

  await Deno.remove(a);
  await until("the socket dropped", () => !t.desired().has(a));
  assert.deepEqual([...t.desired().keys()], [moved]);

  // The directory removed and made again: the walk renews the watch.
  await Deno.remove(t.dir, { recursive: true });
  await until("the walk to wait", () => t.clock.waiters > 0);
  t.clock.step(10_000);
  await until("the sockets dropped", () => t.desired().size === 0);
  await Deno.mkdir(t.dir);
  await until("the walk to wait again", () => t.clock.waiters > 0);
  t.clock.step(10_000);
  await until("the watch renewed", () => t.lines.some((l) => l.includes("directory again")));
  const c = join(t.dir, "c.sock");
  listenSocket(c);
  // Reported by the new watch, or at worst by the next walk.
  const end = Date.now() + 5_000;
  while (!t.desired().has(c)) {
    if (Date.now() > end) throw new Error("timed out waiting for a socket in the new directory");
    await new Promise((r) => setTimeout(r, 200));
    t.clock.step(10_000);
  }
  assert.ok(t.lines.some((l) => l.includes('"Removing socket path from desired state cache"')));
  assert.ok(
    t.lines.some((l) =>
      l.includes('"Handling delete event"') && l.includes('event="REMOVE        \\"')
    ),
  );
});

Deno.test("PluginWatcher's periodic walk finds what the watch missed, keeps what it knows and restarts the watch", async () => {
  const watches: ReturnType<typeof deafWatch>[] = [];
  await using t = await setup({
    watchFs: () => {
      const w = deafWatch();
      watches.push(w);
      return w;
    },
  });
  const a = join(t.dir, "a.sock");
  await Deno.mkdir(t.dir, { recursive: true });
  await staleSocket(a, t.root);
  await t.start();
  const first = t.desired().get(a);
  assert.ok(first);

  const b = join(t.dir, "b.sock");
  await staleSocket(b, t.root);
  await Deno.remove(a);
  await until("the walk to wait", () => t.clock.waiters > 0);
  t.clock.step(9_999);
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual([...t.desired().keys()], [a], "nothing before the period");
  t.clock.step(1);
  await until("the walk", () => t.desired().has(b) && !t.desired().has(a));
  const bUuid = t.desired().get(b);

  // A known socket keeps its UUID (no re-registration); a re-created one gets a new one.
  await until("the walk to wait again", () => t.clock.waiters > 0);
  t.clock.step(10_000);
  await until("the walk to wait a third time", () => t.clock.waiters > 0);
  assert.equal(t.desired().get(b), bUuid);
  const inode = (await Deno.stat(b)).ino;
  // Bound before the old one goes (moved over it), so the inode cannot be reused.
  await staleSocket(b, t.root);
  assert.notEqual((await Deno.stat(b)).ino, inode);
  t.clock.step(10_000);
  await until("the re-created socket", () => t.desired().get(b) !== bUuid);

  // The directory replaced: the watch on the old inode is closed and a new one started.
  assert.equal(watches.length, 1);
  const replacement = join(t.root, "replacement");
  await Deno.mkdir(replacement);
  await Deno.remove(t.dir, { recursive: true });
  await Deno.rename(replacement, t.dir);
  await until("the walk to wait once more", () => t.clock.waiters > 0);
  t.clock.step(10_000);
  await until("a new watch", () => watches.length === 2);
  assert.equal(watches[0]!.closed, true);
  assert.equal(t.desired().size, 0);
  assert.ok(t.lines.some((l) => l.includes('"Watching the plugin registration directory again"')));
});

Deno.test("PluginWatcher.start rejects when the directory cannot be watched", async () => {
  await using t = await setup({
    watchFs: () => {
      throw new Deno.errors.NotCapable("Requires read access");
    },
  });
  await assert.rejects(t.start(), (e: Error) => {
    assert.equal(e.message, "failed to start plugin fsWatcher, err: Requires read access");
    return true;
  });
});
