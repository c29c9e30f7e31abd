/**
 * @module
 * Tests of the containerd 2.x build: the generated config (parsed back), version parsing and the
 * wrapper's replace lines on fixtures (always); and, as root with `go`, that containerd,
 * containerd-shim-runc-v2, ctr and runc are built (or found in the cache), that the built
 * containerd reads the generated config as meant (`containerd config dump`), and that it starts on
 * a private socket with the CRI plugins loaded. A cold build takes minutes; later runs reuse the
 * cache. Without root or go the build test is skipped loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import { lastLines } from "./apt.ts";
import { signalChild } from "./child_process.ts";
import { CNI_BIN_DIR, SANDBOX_IMAGE } from "./containerd_harness.ts";
import {
  configVersionFor,
  CONTAINERD2_VERSION,
  containerd2Config,
  type Containerd2ConfigArgs,
  ensureContainerd2,
  publishedReplaces,
  reportedVersion,
  RUNC_VERSION,
} from "./runtime_build.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("containerd 2.x build tests", ["go"]);

const ARGS: Containerd2ConfigArgs = {
  dir: "/tmp/ctd",
  root: "/tmp/ctd/root",
  socket: "/tmp/ctd/containerd.sock",
  cniConfDir: "/tmp/ctd/cni/net.d",
  runtimeHandlers: ["test-handler"],
  runc: "/cache/bin/runc-v1.5.3/runc",
  shimRuncV2: "/cache/bin/containerd-shim-runc-v2-v2.4.2/containerd-shim-runc-v2",
};

const RUNTIME = "io.containerd.cri.v1.runtime";
const IMAGES = "io.containerd.cri.v1.images";

Deno.test("containerd2Config writes schema 3 with the CRI plugins split as in containerd 2.x", () => {
  const config = parseToml(containerd2Config(ARGS));
  assert.equal(config.version, 3);
  assert.equal(config.root, "/tmp/ctd/root");
  assert.equal(config.state, "/tmp/ctd/state");
  assert.deepEqual(config.grpc, { address: "/tmp/ctd/containerd.sock" });
  assert.deepEqual(config.ttrpc, { address: "/tmp/ctd/containerd.sock.ttrpc" });
  const disabled = config.disabled_plugins;
  assert.ok(Array.isArray(disabled));
  for (const snapshotter of ["btrfs", "devmapper", "zfs"]) {
    assert.ok(disabled.includes(`io.containerd.snapshotter.v1.${snapshotter}`), snapshotter);
  }
  assert.ok(!disabled.includes("io.containerd.snapshotter.v1.overlayfs"));

  const plugins = table(config, "plugins");
  assert.deepEqual(plugins[IMAGES], {
    snapshotter: "overlayfs",
    pinned_images: { sandbox: SANDBOX_IMAGE },
  });
  const runtime = table(plugins, RUNTIME);
  assert.equal(runtime.restrict_oom_score_adj, true);
  assert.equal(runtime.enable_selinux, false);
  assert.equal(runtime.disable_apparmor, true);
  assert.deepEqual(runtime.cni, {
    bin_dirs: [CNI_BIN_DIR],
    conf_dir: "/tmp/ctd/cni/net.d",
    max_conf_num: 1,
  });
  const containerd = table(runtime, "containerd");
  assert.equal(containerd.default_runtime_name, "runc");
  const handler = {
    runtime_type: "io.containerd.runc.v2",
    runtime_path: ARGS.shimRuncV2,
    options: { BinaryName: ARGS.runc, SystemdCgroup: false },
  };
  assert.deepEqual(containerd.runtimes, { "runc": handler, "test-handler": handler });
  // Only the streaming server stays in the CRI gRPC plugin; 1.6's keys there would be migrated.
  assert.deepEqual(plugins["io.containerd.grpc.v1.cri"], {
    stream_server_address: "127.0.0.1",
    stream_server_port: "0",
  });
  assert.equal(table(plugins, "io.containerd.internal.v1.opt").path, "/tmp/ctd/opt");
  assert.equal(table(plugins, "io.containerd.nri.v1.nri").socket_path, "/tmp/ctd/nri.sock");
});

Deno.test("containerd2Config quotes handler names and paths as TOML strings", () => {
  const config = parseToml(containerd2Config({
    ...ARGS,
    root: '/tmp/a "quoted" root',
    runtimeHandlers: ["kata.fc"],
  }));
  assert.equal(config.root, '/tmp/a "quoted" root');
  const runtimes = table(table(table(table(config, "plugins"), RUNTIME), "containerd"), "runtimes");
  assert.deepEqual(Object.keys(runtimes), ["runc", "kata.fc"]);
});

Deno.test("containerd2Config without extra handlers configures runc only", () => {
  const { runtimeHandlers: _, ...args } = ARGS;
  const config = parseToml(containerd2Config(args));
  const runtimes = table(table(table(table(config, "plugins"), RUNTIME), "containerd"), "runtimes");
  assert.deepEqual(Object.keys(runtimes), ["runc"]);
});

Deno.test("reportedVersion reads what containerd, ctr, the shim and runc print", () => {
  assert.equal(
    reportedVersion("containerd github.com/containerd/containerd/v2 v2.4.2 \n"),
    "v2.4.2",
  );
  assert.equal(reportedVersion("ctr github.com/containerd/containerd/v2 v2.4.2\n"), "v2.4.2");
  assert.equal(
    reportedVersion(
      "containerd-shim-runc-v2:\n  Version:  v2.4.2\n  Revision: \n  Go version: go1.26.8\n",
    ),
    "v2.4.2",
  );
  assert.equal(
    reportedVersion("runc version 1.5.3\nspec: 1.3.0\ngo: go1.26.8\nlibseccomp: 2.5.4\n"),
    "v1.5.3",
  );
  // Debian's containerd 1.6 and runc.
  assert.equal(
    reportedVersion(
      "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n",
    ),
    "v1.6.20~ds1",
  );
  assert.equal(reportedVersion("runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1\n"), "v1.1.5+ds1");
  assert.equal(reportedVersion("(cannot run: No such file or directory)"), undefined);
  assert.equal(reportedVersion(""), undefined);
});

Deno.test("reportedVersion does not take v2.4.20 for the pinned v2.4.2", () => {
  assert.notEqual(
    reportedVersion("containerd github.com/containerd/containerd/v2 v2.4.20 abc\n"),
    CONTAINERD2_VERSION,
  );
});

Deno.test("configVersionFor picks schema 2 for containerd 1.x and 3 for 2.x", () => {
  assert.equal(configVersionFor("v1.6.20~ds1"), 2);
  assert.equal(configVersionFor("1.7.28"), 2);
  assert.equal(configVersionFor(CONTAINERD2_VERSION), 3);
  assert.equal(configVersionFor("v2.0.0"), 3);
  assert.throws(() => configVersionFor("latest"), /must look like v2\.4\.2: current value/);
});

Deno.test("publishedReplaces keeps replaces to published modules and drops local paths", () => {
  const goMod = [
    "module github.com/example/x",
    "",
    "replace (",
    "\tgithub.com/a/b => github.com/a/b v1.2.3",
    "\tgithub.com/c/d v0.1.0 => github.com/e/f v0.2.0 // fork",
    "\tgithub.com/g/h => ./third_party/h",
    ")",
    "replace github.com/i/j => ../j",
  ].join("\n");
  assert.deepEqual(publishedReplaces(goMod), [
    { from: "github.com/a/b", to: "github.com/a/b", toVersion: "v1.2.3" },
    { from: "github.com/c/d v0.1.0", to: "github.com/e/f", toVersion: "v0.2.0" },
  ]);
  assert.deepEqual(publishedReplaces("module x\n\ngo 1.26\n"), []);
});

Deno.test({
  name: "ensureContainerd2 builds a containerd 2.x that serves CRI with containerd2Config",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const logs: string[] = [];
    const log = (line: string) => {
      logs.push(line);
      console.error(line);
    };
    // A cold build of all four took 2m25s here with an empty Go build cache (modules downloaded).
    const bins = await ensureContainerd2({ log, signal: AbortSignal.timeout(30 * 60_000) });
    assert.equal(bins.version, CONTAINERD2_VERSION);
    for (
      const [path, args, version] of [
        [bins.containerd, ["--version"], CONTAINERD2_VERSION],
        [bins.ctr, ["--version"], CONTAINERD2_VERSION],
        [bins.shimRuncV2, ["--version"], CONTAINERD2_VERSION],
        [bins.runc, ["--version"], RUNC_VERSION],
      ] as const
    ) {
      const out = await run(path, [...args]);
      assert.ok(out.success, `${path} ${args.join(" ")} failed: ${out.text}`);
      assert.equal(reportedVersion(out.text), version, out.text);
    }
    assert.match((await run(bins.runc, ["--version"])).text, /^libseccomp: \d/m);
    assert.equal(await elfInterpreter(bins.shimRuncV2), undefined, "the shim must be static");

    // A second call finds all four in the cache.
    logs.length = 0;
    await ensureContainerd2({ log });
    assert.equal(logs.filter((l) => l.includes(": reusing ")).length, 4, logs.join("\n"));

    const dir = await Deno.makeTempDir({ prefix: "kts-ctd2-" });
    const args: Containerd2ConfigArgs = {
      dir,
      root: `${dir}/root`,
      socket: `${dir}/containerd.sock`,
      cniConfDir: `${dir}/cni/net.d`,
      runtimeHandlers: ["test-handler"],
      runc: bins.runc,
      shimRuncV2: bins.shimRuncV2,
    };
    await Deno.mkdir(args.cniConfDir, { recursive: true });
    const configFile = `${dir}/config.toml`;
    await Deno.writeTextFile(configFile, containerd2Config(args));
    try {
      // What containerd makes of the file, after migrating it to its own schema.
      const dump = await run(bins.containerd, ["--config", configFile, "config", "dump"]);
      assert.ok(dump.success, dump.text);
      const effective = parseToml(dump.stdout);
      assert.equal(effective.version, 4);
      const plugins = table(effective, "plugins");
      assert.equal(table(plugins, "io.containerd.server.v1.grpc").address, args.socket);
      const runtime = table(plugins, RUNTIME);
      assert.equal(runtime.restrict_oom_score_adj, true);
      assert.deepEqual(table(runtime, "cni").bin_dirs, [CNI_BIN_DIR]);
      const handler = table(table(table(runtime, "containerd"), "runtimes"), "test-handler");
      assert.equal(handler.runtime_path, bins.shimRuncV2);
      assert.deepEqual(handler.options, { BinaryName: bins.runc, SystemdCgroup: false });
      assert.equal(table(table(plugins, IMAGES), "pinned_images").sandbox, SANDBOX_IMAGE);

      await withContainerd(bins, configFile, args.socket, async (ctr) => {
        const version = await ctr(["version"]);
        assert.match(version, new RegExp(`Server:[\\s\\S]*Version:\\s+${CONTAINERD2_VERSION}\\b`));
        const plugins = parsePluginList(await ctr(["plugins", "ls"]));
        const status = (type: string, id: string) =>
          plugins.find((p) => p.type === type && p.id === id)?.status;
        const notOk = plugins.filter((p) => p.status !== "ok")
          .map((p) => `${p.type}.${p.id} ${p.status}`).join(", ");
        assert.equal(status("io.containerd.grpc.v1", "cri"), "ok", `not ok: ${notOk}`);
        assert.equal(status("io.containerd.cri.v1", "runtime"), "ok");
        assert.equal(status("io.containerd.cri.v1", "images"), "ok");
        assert.equal(status("io.containerd.snapshotter.v1", "overlayfs"), "ok");
        assert.equal(status("io.containerd.snapshotter.v1", "btrfs"), undefined, "disabled");
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

/**
 * Starts containerd on `configFile`, waits (bounded) until `ctr version` answers on `socket`,
 * runs `body` with a ctr bound to it, and stops containerd again: SIGTERM, SIGKILL after 10 s.
 * A failure carries containerd's last log lines.
 */
async function withContainerd(
  bins: { containerd: string; ctr: string; shimRuncV2: string },
  configFile: string,
  socket: string,
  body: (ctr: (args: string[]) => Promise<string>) => Promise<void>,
): Promise<void> {
  const ctr = async (args: string[]) => {
    const out = await run(bins.ctr, ["--address", socket, "--connect-timeout", "2s", ...args]);
    if (!out.success) throw new Error(`ctr ${args.join(" ")} failed: ${out.text}`);
    return out.stdout;
  };
  const child = new Deno.Command(bins.containerd, {
    args: ["--config", configFile],
    // Tasks made outside CRI find the shim by containerd's PATH: ours before Debian's.
    env: { PATH: `${dirname(bins.shimRuncV2)}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}` },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = Promise.all([child.stdout, child.stderr].map((s) => new Response(s).text()));
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));
  let failure: unknown;
  try {
    const deadline = Date.now() + 30_000;
    while (!(await ctr(["version"]).then(() => true, () => false))) {
      if (exited) throw new Error(`containerd exited during start-up (${(await status).code})`);
      if (Date.now() > deadline) throw new Error("containerd did not answer within 30 s");
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await body(ctr);
  } catch (err) {
    failure = err;
  }
  if (!exited) signalChild(child, "SIGTERM");
  const timer = setTimeout(() => signalChild(child, "SIGKILL"), 10_000);
  await status;
  clearTimeout(timer);
  const log = (await output).join("");
  if (failure !== undefined) {
    throw new Error(
      `${(failure as Error).message}\n--- containerd's last lines ---\n${lastLines(log, 40)}`,
      { cause: failure },
    );
  }
}

/** `ctr plugins ls` rows: TYPE ID PLATFORMS STATUS. */
function parsePluginList(text: string): { type: string; id: string; status: string }[] {
  return text.split("\n").slice(1).map((l) => l.trim().split(/\s+/)).filter((f) => f.length >= 3)
    .map((f) => ({ type: f[0]!, id: f[1]!, status: f.at(-1)! }));
}

async function run(path: string, args: string[]) {
  const out = await new Deno.Command(path, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  return { success: out.success, stdout, text: stdout + new TextDecoder().decode(out.stderr) };
}

/** The PT_INTERP of a 64-bit little-endian ELF file (its dynamic loader), or undefined. */
async function elfInterpreter(path: string): Promise<string | undefined> {
  const bytes = await Deno.readFile(path);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  assert.equal(view.getUint32(0), 0x7f454c46, `${path} is not ELF`);
  assert.equal(bytes[4], 2, `${path} is not a 64-bit ELF`);
  const phoff = Number(view.getBigUint64(0x20, true));
  const phentsize = view.getUint16(0x36, true);
  for (let i = 0; i < view.getUint16(0x38, true); i++) {
    const ph = phoff + i * phentsize;
    if (view.getUint32(ph, true) !== 3) continue; // PT_INTERP
    const offset = Number(view.getBigUint64(ph + 8, true));
    const size = Number(view.getBigUint64(ph + 32, true));
    return new TextDecoder().decode(bytes.subarray(offset, offset + size - 1));
  }
  return undefined;
}

function dirname(path: string): string {
  return path.slice(0, path.lastIndexOf("/")) || "/";
}

type TomlValue = string | number | boolean | TomlValue[] | TomlTable;
interface TomlTable {
  [key: string]: TomlValue;
}

function table(parent: TomlTable, key: string): TomlTable {
  const value = parent[key];
  assert.ok(
    typeof value === "object" && !Array.isArray(value),
    `'${key}' must be a table: got ${JSON.stringify(value)}`,
  );
  return value;
}

/**
 * The TOML subset containerd2Config and `containerd config dump` write: `[a."b".c]` headers
 * (each once), `key = value` with basic and literal strings, numbers, booleans and arrays of
 * those (across lines), and comments. Anything else throws, as does a repeated key or table.
 */
function parseToml(text: string): TomlTable {
  const root: TomlTable = {};
  const headers = new Set<string>();
  let current = root;
  let i = 0;
  const fail: (what: string) => never = (what) => {
    const line = text.slice(0, i).split("\n").length;
    throw new Error(`TOML line ${line}: ${what}: '${text.slice(i, i + 30)}'`);
  };
  const skip = (newlines: boolean) => {
    while (i < text.length) {
      const c = text[i]!;
      if (c === " " || c === "\t" || (newlines && (c === "\n" || c === "\r"))) i++;
      else if (c === "#") { while (i < text.length && text[i] !== "\n") i++; }
      else break;
    }
  };
  const str = (): string => {
    const quote = text[i]!;
    let end = i + 1;
    while (end < text.length && text[end] !== quote && text[end] !== "\n") {
      end += quote === '"' && text[end] === "\\" ? 2 : 1;
    }
    if (text[end] !== quote) fail("unterminated string");
    const raw = text.slice(i, end + 1);
    i = end + 1;
    return quote === "'" ? raw.slice(1, -1) : JSON.parse(raw);
  };
  const keyPath = (close: string): string[] => {
    const path: string[] = [];
    while (true) {
      skip(false);
      if (text[i] === '"' || text[i] === "'") path.push(str());
      else {
        const bare = /^[A-Za-z0-9_-]+/.exec(text.slice(i))?.[0] ?? fail("expected a key");
        path.push(bare);
        i += bare.length;
      }
      skip(false);
      if (text[i] === ".") i++;
      else if (text.startsWith(close, i)) return (i += close.length, path);
      else fail(`expected '.' or '${close}'`);
    }
  };
  const value = (): TomlValue => {
    const c = text[i];
    if (c === '"' || c === "'") return str();
    if (c === "[") {
      i++;
      const items: TomlValue[] = [];
      while (true) {
        skip(true);
        if (text[i] === "]") return (i++, items);
        items.push(value());
        skip(true);
        if (text[i] === ",") i++;
        else if (text[i] !== "]") fail("expected ',' or ']'");
      }
    }
    const word = /^(true|false|[+-]?\d[\d_]*(\.\d+)?([eE][+-]?\d+)?)/.exec(text.slice(i))?.[0] ??
      fail("unsupported value");
    i += word.length;
    return word === "true" ? true : word === "false" ? false : Number(word.replaceAll("_", ""));
  };
  while (true) {
    skip(true);
    if (i >= text.length) return root;
    if (text[i] === "[") {
      i++;
      const path = keyPath("]");
      const id = JSON.stringify(path);
      if (headers.has(id)) fail(`table ${path.join(".")} defined twice`);
      headers.add(id);
      current = root;
      for (const key of path) {
        current[key] ??= {};
        current = table(current, key);
      }
    } else {
      const [key, ...more] = keyPath("=");
      if (key === undefined || more.length > 0) fail("dotted keys are not supported");
      skip(false);
      if (Object.hasOwn(current, key)) fail(`key ${key} defined twice`);
      current[key] = value();
      skip(false);
      if (i < text.length && text[i] !== "\n") fail("expected the end of the line");
    }
  }
}
