import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../apis/config_schema.ts";
import { listDropins, loadKubeletConfiguration, mergePatch } from "./kubelet_config.ts";
import { kubeletConfigurationFields } from "../apis/config_types.ts";
import { parseCommandLine } from "../apis/flags.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

async function tempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-config-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function load(args: string[]) {
  const cl = parseCommandLine(args, kubeletConfigurationFields);
  return (await loadKubeletConfiguration({
    configFile: cl.flags.kubeletConfigFile,
    dropinDir: cl.flags.kubeletDropinConfigDirectory,
    flags: cl.config,
    cgroupV1: false,
  })).config;
}

Deno.test("loadKubeletConfiguration without a file applies upstream's legacy defaults", async () => {
  const c = await load([]);
  assert.equal(c.authentication.anonymous.enabled, true);
  assert.equal(c.authentication.webhook.enabled, false);
  assert.equal(c.authorization.mode, "AlwaysAllow");
  assert.equal(c.readOnlyPort, 10255);
  assert.equal(c.syncFrequency, 60_000);
});

Deno.test("loadKubeletConfiguration with a file applies v1beta1 defaults", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.yaml");
    await Deno.writeTextFile(file, HEADER);
    const c = await load(["--config", file]);
    assert.equal(c.authentication.anonymous.enabled, false);
    assert.equal(c.authentication.webhook.enabled, true);
    assert.equal(c.authorization.mode, "Webhook");
    assert.equal(c.readOnlyPort ?? 0, 0);
  });
});

Deno.test("loadKubeletConfiguration ranks flag over file over default", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.yaml");
    await Deno.writeTextFile(
      file,
      `${HEADER}port: 11000\nsyncFrequency: 30s\nevictionHard:\n  memory.available: 200Mi\n`,
    );
    const c = await load([
      "--config",
      file,
      "--port=12000",
      "--eviction-hard=nodefs.available<1Gi",
    ]);
    assert.equal(c.port, 12000, "flag beats file");
    assert.equal(c.syncFrequency, 30_000, "file beats default");
    assert.equal(c.maxPods, 110, "default stays");
    assert.deepEqual(c.evictionHard, { "nodefs.available": "1Gi" }, "a map flag replaces the map");
    const flagsFirst = await load(["--port=12000", "--config", file]);
    assert.equal(flagsFirst.port, 12000, "flag position does not matter");
  });
});

Deno.test("loadKubeletConfiguration merges --config-dir drop-ins in lexical order under flags", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.yaml");
    const dropins = join(dir, "kubelet.conf.d");
    await Deno.mkdir(join(dropins, "30-sub"), { recursive: true });
    await Deno.writeTextFile(
      file,
      `${HEADER}maxPods: 40\nport: 11000\nsystemReserved:\n  cpu: 100m\n`,
    );
    await Deno.writeTextFile(join(dropins, "20-b.conf"), `${HEADER}maxPods: 60\n`);
    await Deno.writeTextFile(
      join(dropins, "10-a.conf"),
      `${HEADER}maxPods: 50\nsystemReserved:\n  memory: 1Gi\n`,
    );
    await Deno.writeTextFile(join(dropins, "30-sub", "x.conf"), `${HEADER}syncFrequency: 2m\n`);
    await Deno.writeTextFile(join(dropins, "99-ignored.yaml"), `${HEADER}maxPods: 99\n`);
    assert.deepEqual((await listDropins(dropins)).map((p) => p.slice(dropins.length + 1)), [
      "10-a.conf",
      "20-b.conf",
      "30-sub/x.conf",
    ]);
    const c = await load(["--config", file, "--config-dir", dropins, "--port=12000"]);
    assert.equal(c.maxPods, 60, "later drop-in wins");
    assert.deepEqual(
      c.systemReserved,
      { cpu: "100m", memory: "1Gi" },
      "objects merge as a JSON merge patch",
    );
    assert.equal(c.syncFrequency, 120_000, "subdirectories are walked");
    assert.equal(c.port, 12000, "flags beat drop-ins");
  });
});

Deno.test("loadKubeletConfiguration names the drop-in file and line of a bad value", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.yaml");
    await Deno.writeTextFile(file, HEADER);
    await Deno.writeTextFile(join(dir, "10-bad.conf"), `${HEADER}\nmaxPods: lots\n`);
    await assert.rejects(load(["--config", file, "--config-dir", dir]), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      assert.equal(e.file, join(dir, "10-bad.conf"));
      assert.equal(e.line, 4);
      assert.equal(e.path, "maxPods");
      assert.match(e.message, /current value is 'lots'/);
      return true;
    });
  });
});

Deno.test("loadKubeletConfiguration points validation errors at the line that set the value", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.yaml");
    await Deno.writeTextFile(
      file,
      `${HEADER}imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 70\n`,
    );
    await assert.rejects(load(["--config", file]), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      assert.equal(e.file, file);
      assert.ok(e.line === 3 || e.line === 4, `line ${e.line}`);
      return true;
    });
    await assert.rejects(
      load(["--config", file, "--image-gc-high-threshold=150"]),
      /flag --image-gc-high-threshold/,
    );
  });
});

Deno.test("loadKubeletConfiguration reads JSON, YAML 1.1 booleans and resolves relative paths", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.json");
    await Deno.writeTextFile(
      file,
      JSON.stringify({
        apiVersion: "kubelet.config.k8s.io/v1beta1",
        kind: "KubeletConfiguration",
        staticPodPath: "manifests",
      }),
    );
    assert.equal((await load(["--config", file])).staticPodPath, join(dir, "manifests"));
    const yaml = join(dir, "k.yaml");
    await Deno.writeTextFile(yaml, `${HEADER}failSwapOn: no\nsyncFrequency: 0s\n`);
    const c = await load(["--config", yaml]);
    assert.equal(c.failSwapOn, false);
    assert.equal(c.syncFrequency, 60_000, "a zero value-type field takes the default, as upstream");
  });
});

Deno.test("loadKubeletConfiguration reads logging.flushFrequency as integer nanoseconds too", async () => {
  await tempDir(async (dir) => {
    const file = join(dir, "k.yaml");
    // kubeadm writes the defaulted TimeOrMetaDuration as an integer: 0 means the 5s default.
    await Deno.writeTextFile(file, `${HEADER}logging:\n  flushFrequency: 0\n`);
    assert.equal((await load(["--config", file])).logging.flushFrequency, 5_000);
    await Deno.writeTextFile(file, `${HEADER}logging:\n  flushFrequency: 2000000000\n`);
    assert.equal((await load(["--config", file])).logging.flushFrequency, 2_000);
    await Deno.writeTextFile(file, `${HEADER}logging:\n  flushFrequency: 1.5\n`);
    await assert.rejects(load(["--config", file]), /'logging\.flushFrequency' must be a duration/);
    // Other durations keep to the string form, as metav1.Duration does.
    await Deno.writeTextFile(file, `${HEADER}syncFrequency: 0\n`);
    await assert.rejects(load(["--config", file]), /'syncFrequency' must be a duration/);
  });
});

Deno.test("mergePatch follows RFC 7386", () => {
  assert.deepEqual(
    mergePatch({ a: 1, b: { c: 2, d: 3 }, l: [1] }, { b: { c: null, e: 4 }, l: [2] }),
    {
      a: 1,
      b: { d: 3, e: 4 },
      l: [2],
    },
  );
});
