import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import {
  checkHostPathType,
  getFileType,
  HOST_PATH_PLUGIN_NAME,
  HostPathError,
  HostPathPlugin,
} from "./host_path.ts";

const quiet = createLogger({ write: () => {} });
const pod: V1Pod = {
  metadata: { name: "p", namespace: "default", uid: "uid1" },
  spec: { containers: [{ name: "c" }] },
};

async function withTempDir(fn: (root: string) => Promise<void>): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "volume_host_path_test_" });
  try {
    await fn(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

/** Sets up a hostPath volume of `type` at `path`, with a volume dir under `root`. */
function setUp(root: string, path: string, type?: string, plugin = new HostPathPlugin()) {
  return plugin.setUp({
    pod,
    volume: { name: "h", hostPath: { path, type } },
    dir: join(root, "pods", "uid1", "volumes", "kubernetes.io~host-path", "h"),
  });
}

function rejectsWith(p: Promise<unknown>, message: string): Promise<void> {
  return assert.rejects(p, (err: Error) => {
    assert.ok(err instanceof HostPathError, `${err.name}: ${err.message}`);
    assert.equal(err.message, message);
    return true;
  });
}

/** The umask, read without changing it (Deno.umask() sets it to read it, racing other tests). */
async function processUmask(): Promise<number> {
  const status = await Deno.readTextFile("/proc/self/status");
  const m = /^Umask:\s*([0-7]+)$/m.exec(status);
  assert.ok(m?.[1], "/proc/self/status has no Umask line");
  return parseInt(m[1], 8);
}

/** A unix socket at `path` for the duration of `fn`. */
async function withSocket(path: string, fn: () => Promise<void>): Promise<void> {
  const listener = Deno.listen({ transport: "unix", path });
  try {
    await fn();
  } finally {
    listener.close();
  }
}

/** The first block device under /dev, if the host has any. */
async function findBlockDevice(): Promise<string | undefined> {
  for await (const e of Deno.readDir("/dev")) {
    const path = join("/dev", e.name);
    try {
      if ((await Deno.lstat(path)).isBlockDevice) return path;
    } catch {
      // Entries may vanish while we look.
    }
  }
  return undefined;
}

Deno.test("HostPathPlugin has upstream's name and supports only hostPath volumes", () => {
  const plugin = new HostPathPlugin({ logger: quiet });
  assert.equal(plugin.name, "kubernetes.io/host-path");
  assert.equal(HOST_PATH_PLUGIN_NAME, plugin.name);
  assert.equal(plugin.requiresRemount, false);
  assert.equal(plugin.canSupport({ name: "a", hostPath: { path: "/x" } }), true);
  assert.equal(plugin.canSupport({ name: "b", emptyDir: {} }), false);
});

Deno.test("HostPathPlugin setUp returns the path itself and creates no volume dir", async () => {
  await withTempDir(async (root) => {
    const path = join(root, "data");
    await Deno.mkdir(path);
    const mounted = await setUp(root, path, "Directory");
    assert.deepEqual(mounted, { hostPath: path, readOnly: false, selinuxRelabel: false });
    await assert.rejects(Deno.stat(join(root, "pods")), Deno.errors.NotFound);
  });
});

Deno.test("HostPathPlugin setUp with no type checks nothing, even a missing path", async () => {
  await withTempDir(async (root) => {
    const path = join(root, "missing");
    for (const type of [undefined, ""]) {
      assert.equal((await setUp(root, path, type)).hostPath, path);
    }
    await assert.rejects(Deno.stat(path), Deno.errors.NotFound);
  });
});

Deno.test("HostPathPlugin setUp refuses relative paths and '..' elements", async () => {
  await withTempDir(async (root) => {
    await rejectsWith(
      setUp(root, "var/log", "Directory"),
      "invalid HostPath `var/log`: must be an absolute path",
    );
    await rejectsWith(
      setUp(root, `${root}/../etc`),
      `invalid HostPath \`${root}/../etc\`: must not contain '..'`,
    );
    // A name that merely contains dots is fine.
    await Deno.mkdir(join(root, "a..b"));
    await setUp(root, join(root, "a..b"), "Directory");
  });
});

Deno.test("HostPathPlugin setUp rejects an unknown type, naming it", async () => {
  await withTempDir(async (root) => {
    await rejectsWith(setUp(root, root, "Folder"), "Folder is an invalid volume type");
  });
});

Deno.test("checkHostPathType Directory passes a directory or a link to one, fails others", async () => {
  await withTempDir(async (root) => {
    const file = join(root, "f");
    await Deno.writeTextFile(file, "");
    await Deno.symlink(root, join(root, "link"));
    await checkHostPathType(root, "Directory");
    await checkHostPathType(join(root, "link"), "Directory");
    await rejectsWith(
      checkHostPathType(file, "Directory"),
      `hostPath type check failed: ${file} is not a directory, it's a File`,
    );
    await rejectsWith(
      checkHostPathType(join(root, "nope"), "Directory"),
      `hostPath ${join(root, "nope")} doesn't exist`,
    );
  });
});

Deno.test("checkHostPathType DirectoryOrCreate makes missing parents with mode 0755", async () => {
  await withTempDir(async (root) => {
    const path = join(root, "a", "b", "c");
    await checkHostPathType(path, "DirectoryOrCreate");
    for (const p of [join(root, "a"), join(root, "a", "b"), path]) {
      const info = await Deno.stat(p);
      assert.ok(info.isDirectory);
      // mkdir(2) applies the umask, as Go's MkdirAll does upstream.
      assert.equal(info.mode! & 0o777, 0o755 & ~(await processUmask()));
    }
    await checkHostPathType(path, "DirectoryOrCreate"); // exists: fine

    const file = join(root, "file");
    await Deno.writeTextFile(file, "");
    await rejectsWith(
      checkHostPathType(file, "DirectoryOrCreate"),
      `hostPath type check failed: ${file} is not a directory, it's a File`,
    );
  });
});

Deno.test("HostPathPlugin mkdirMode sets the mode of DirectoryOrCreate directories", async () => {
  await withTempDir(async (root) => {
    const path = join(root, "private");
    await setUp(root, path, "DirectoryOrCreate", new HostPathPlugin({ mkdirMode: 0o700 }));
    assert.equal((await Deno.stat(path)).mode! & 0o777, 0o700);
  });
});

Deno.test("checkHostPathType DirectoryOrCreate fails under a file with Go's mkdir text", async () => {
  await withTempDir(async (root) => {
    const file = join(root, "file");
    await Deno.writeTextFile(file, "");
    const path = join(file, "sub");
    await assert.rejects(checkHostPathType(path, "DirectoryOrCreate"), (err: Error) => {
      assert.ok(err instanceof HostPathError);
      assert.match(err.message, new RegExp(`^mkdir ${path}: `));
      return true;
    });
  });
});

Deno.test("checkHostPathType FileOrCreate makes an empty 0644 file in an existing dir", async () => {
  await withTempDir(async (root) => {
    const path = join(root, "new.conf");
    await checkHostPathType(path, "FileOrCreate");
    const info = await Deno.stat(path);
    assert.ok(info.isFile);
    assert.equal(info.size, 0);
    assert.equal(info.mode! & 0o777, 0o644 & ~(await processUmask()));

    // An existing file keeps its content.
    await Deno.writeTextFile(path, "keep");
    await checkHostPathType(path, "FileOrCreate");
    assert.equal(await Deno.readTextFile(path), "keep");

    await rejectsWith(
      checkHostPathType(root, "FileOrCreate"),
      `hostPath type check failed: ${root} is not a file, it's a Directory`,
    );
  });
});

Deno.test("checkHostPathType creates directories 0755 and files 0644 under umask 0", async () => {
  await withTempDir(async (root) => {
    // The umask is process-wide, so clear it in a child rather than under concurrent tests.
    const module = new URL("./host_path.ts", import.meta.url).href;
    const paths = JSON.stringify({
      viaPlugin: join(root, "d", "e"),
      dir: join(root, "g"),
      file: join(root, "f"),
    });
    const code = `
      const { checkHostPathType, HostPathPlugin } = await import(${JSON.stringify(module)});
      const p = ${paths};
      const volume = { name: "h", hostPath: { path: p.viaPlugin, type: "DirectoryOrCreate" } };
      await new HostPathPlugin().setUp({ pod: {}, volume, dir: "/nonexistent" });
      await checkHostPathType(p.dir, "DirectoryOrCreate");
      await checkHostPathType(p.file, "FileOrCreate");`;
    const out = await new Deno.Command("sh", {
      args: ["-c", 'umask 000 && exec "$@"', "sh", Deno.execPath(), "eval", code],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    assert.equal((await Deno.stat(join(root, "d"))).mode! & 0o7777, 0o755);
    assert.equal((await Deno.stat(join(root, "d", "e"))).mode! & 0o7777, 0o755);
    assert.equal((await Deno.stat(join(root, "g"))).mode! & 0o7777, 0o755);
    assert.equal((await Deno.stat(join(root, "f"))).mode! & 0o7777, 0o644);
  });
});

Deno.test("checkHostPathType FileOrCreate needs the parent directory to exist", async () => {
  await withTempDir(async (root) => {
    const path = join(root, "missing", "f");
    await rejectsWith(
      checkHostPathType(path, "FileOrCreate"),
      `open ${path}: no such file or directory`,
    );
    await assert.rejects(Deno.stat(join(root, "missing")), Deno.errors.NotFound);
  });
});

Deno.test("checkHostPathType File passes a file and fails a directory or a missing path", async () => {
  await withTempDir(async (root) => {
    const file = join(root, "f");
    await Deno.writeTextFile(file, "");
    await checkHostPathType(file, "File");
    await rejectsWith(
      checkHostPathType(root, "File"),
      `hostPath type check failed: ${root} is not a file, it's a Directory`,
    );
    await rejectsWith(
      checkHostPathType(join(root, "nope"), "File"),
      `hostPath ${join(root, "nope")} doesn't exist`,
    );
  });
});

Deno.test("checkHostPathType Socket passes a unix socket and fails a file", async () => {
  await withTempDir(async (root) => {
    const sock = join(root, "s.sock");
    await withSocket(sock, async () => {
      await checkHostPathType(sock, "Socket");
      assert.equal(await getFileType(sock), "Socket");
      await rejectsWith(
        checkHostPathType(sock, "File"),
        `hostPath type check failed: ${sock} is not a file, it's a Socket`,
      );
    });
    const file = join(root, "f");
    await Deno.writeTextFile(file, "");
    await rejectsWith(
      checkHostPathType(file, "Socket"),
      `hostPath type check failed: ${file} is not a socket file, it's a File`,
    );
  });
});

Deno.test("checkHostPathType CharDevice passes /dev/null and fails a directory", async () => {
  await checkHostPathType("/dev/null", "CharDevice");
  await rejectsWith(
    checkHostPathType("/dev/null", "BlockDevice"),
    "hostPath type check failed: /dev/null is not a block device, it's a CharDevice",
  );
  await withTempDir(async (root) => {
    await rejectsWith(
      checkHostPathType(root, "CharDevice"),
      `hostPath type check failed: ${root} is not a character device, it's a Directory`,
    );
  });
});

Deno.test("checkHostPathType BlockDevice passes a block device and fails a file", async () => {
  const dev = await findBlockDevice();
  if (dev === undefined) {
    console.warn("SKIPPING the BlockDevice pass case: this host has no block device under /dev");
  } else {
    await checkHostPathType(dev, "BlockDevice");
    assert.equal(await getFileType(dev), "BlockDevice");
  }
  await withTempDir(async (root) => {
    const file = join(root, "f");
    await Deno.writeTextFile(file, "");
    await rejectsWith(
      checkHostPathType(file, "BlockDevice"),
      `hostPath type check failed: ${file} is not a block device, it's a File`,
    );
  });
});

Deno.test("checkHostPathType reports a type it cannot name, such as a FIFO", async () => {
  await withTempDir(async (root) => {
    const fifo = join(root, "fifo");
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success, "mkfifo");
    await rejectsWith(
      checkHostPathType(fifo, "File"),
      `hostPath type check failed, ${fifo} is not a file, unable to determine its type: ` +
        "only recognise file, directory, socket, block device and character device",
    );
  });
});

Deno.test("HostPathPlugin tearDown leaves the host path and removes only an empty volume dir", async () => {
  await withTempDir(async (root) => {
    const plugin = new HostPathPlugin({ logger: quiet });
    const hostDir = join(root, "host");
    await Deno.mkdir(hostDir);
    await Deno.writeTextFile(join(hostDir, "f"), "precious");
    const dir = join(root, "voldir");
    const ctx = { podUid: "uid1", volumeName: "h", dir };

    await plugin.tearDown(ctx); // no volume dir: nothing to do

    await Deno.mkdir(dir);
    await plugin.tearDown(ctx);
    await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);

    await Deno.mkdir(dir);
    await Deno.writeTextFile(join(dir, "other"), "not ours");
    await plugin.tearDown(ctx);
    assert.equal(await Deno.readTextFile(join(dir, "other")), "not ours");

    // A file in place of the volume dir is left alone too.
    await Deno.remove(dir, { recursive: true });
    await Deno.writeTextFile(dir, "file");
    await plugin.tearDown(ctx);
    assert.equal(await Deno.readTextFile(dir), "file");

    assert.equal(await Deno.readTextFile(join(hostDir, "f")), "precious");
  });
});

Deno.test("HostPathPlugin names the permission to add when Deno refuses the path", async () => {
  const refuse = (path: string) => () =>
    Promise.reject(new Deno.errors.NotCapable(`Requires read access to "${path}"`));
  const cases: [string, string][] = [
    [
      "Directory",
      'hostPath /srv/data of type Directory cannot be checked: the permission set does not allow read access to it (Requires read access to "/srv/data"): add it to "permissions.kubelet.read" in deno.json and rebuild, or run with --allow-read=/srv/data in place of -P=kubelet',
    ],
    [
      "DirectoryOrCreate",
      'hostPath /srv/data of type DirectoryOrCreate cannot be checked: the permission set does not allow read and write access to it (Requires read access to "/srv/data"): add it to "permissions.kubelet.read" and "permissions.kubelet.write" in deno.json and rebuild, or run with --allow-read=/srv/data --allow-write=/srv/data in place of -P=kubelet',
    ],
  ];
  for (const [type, message] of cases) {
    const plugin = new HostPathPlugin({ logger: quiet, checkType: refuse("/srv/data") });
    const volume = { name: "data", hostPath: { path: "/srv/data", type } };
    await assert.rejects(
      plugin.setUp({ pod, volume, dir: "/nonexistent/volumes/data" }),
      (e) => e instanceof HostPathError && e.message === message,
      type,
    );
  }
  // Other failures pass through unchanged.
  const boom = new HostPathPlugin({
    logger: quiet,
    checkType: () => Promise.reject(new HostPathError("hostPath /srv/data doesn't exist")),
  });
  await assert.rejects(
    boom.setUp({
      pod,
      volume: { name: "data", hostPath: { path: "/srv/data", type: "Directory" } },
      dir: "/x",
    }),
    { message: "hostPath /srv/data doesn't exist" },
  );
});

Deno.test("HostPathPlugin sets up a PersistentVolume's hostPath, read-only with a read-only claim", async () => {
  await withTempDir(async (root) => {
    const plugin = new HostPathPlugin({ logger: quiet });
    const pv = {
      metadata: { name: "pv-h" },
      spec: { hostPath: { path: root, type: "Directory" } },
    };
    assert.equal(plugin.canSupportPersistentVolume(pv), true);
    assert.equal(
      plugin.canSupportPersistentVolume({ spec: { csi: { driver: "d", volumeHandle: "h" } } }),
      false,
    );
    const volume = { name: "data", persistentVolumeClaim: { claimName: "c" } };
    for (const readOnly of [false, true]) {
      const mounted = await plugin.setUp({
        pod,
        volume,
        spec: { name: "pv-h", volume, persistentVolume: pv, readOnly },
        dir: join(root, "pods", "uid1", "volumes", "kubernetes.io~host-path", "pv-h"),
      });
      assert.deepEqual(mounted, { hostPath: root, readOnly, selinuxRelabel: false });
    }
    // The PV's type is checked as a pod volume's is.
    const file = { ...pv, spec: { hostPath: { path: root, type: "File" } } };
    await rejectsWith(
      plugin.setUp({
        pod,
        volume,
        spec: { name: "pv-h", volume, persistentVolume: file, readOnly: false },
        dir: join(root, "x"),
      }),
      `hostPath type check failed: ${root} is not a file, it's a Directory`,
    );
  });
});
