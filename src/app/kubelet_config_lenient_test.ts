import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../apis/config_schema.ts";
import {
  type LenientDecoding,
  loadKubeletConfiguration,
  strictDecodingMessage,
} from "./kubelet_config.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

async function withFiles(
  files: Record<string, string>,
  fn: (dir: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-lenient-" });
  try {
    for (const [name, text] of Object.entries(files)) {
      await Deno.mkdir(join(dir, name, ".."), { recursive: true });
      await Deno.writeTextFile(join(dir, name), text);
    }
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function load(configFile: string, dropinDir = "") {
  const lenient: LenientDecoding[] = [];
  const { config } = await loadKubeletConfiguration({
    configFile,
    dropinDir,
    flags: [],
    cgroupV1: false,
    onLenientDecoding: (d) => lenient.push(d),
  });
  return { config, lenient };
}

Deno.test("loadKubeletConfiguration goes past unknown fields at any depth, naming file, line and field", async () => {
  await withFiles({
    "k.yaml":
      `${HEADER}maxPods: 50\nmaxPodz: 60\nauthentication:\n  anonymous:\n    enable: true\n` +
      `registerWithTaints:\n- key: a\n  effect: NoSchedule\n  colour: red\n`,
  }, async (dir) => {
    const file = join(dir, "k.yaml");
    const { config, lenient } = await load(file);
    assert.equal(config.maxPods, 50);
    assert.equal(config.authentication.anonymous.enabled, false, "the misspelt field is dropped");
    assert.deepEqual(config.registerWithTaints, [{ key: "a", effect: "NoSchedule" }]);
    assert.equal(lenient.length, 1);
    const [d] = lenient;
    assert.equal(d?.file, file);
    assert.equal(d?.dropin, false);
    assert.deepEqual(d?.errors.map((e) => [e.line, e.path, e.kind]), [
      [4, "maxPodz", "unknown field"],
      [7, "authentication.anonymous.enable", "unknown field"],
      [11, "registerWithTaints[0].colour", "unknown field"],
    ]);
    const text = strictDecodingMessage(d!);
    assert.match(text, /^strict decoding error: /);
    assert.ok(text.includes(`${file}:4: field 'maxPodz' is not a known field`), text);
    assert.ok(text.includes(`${file}:7: field 'authentication.anonymous.enable'`), text);
  });
});

Deno.test("loadKubeletConfiguration takes the last of keys given twice, as upstream's lenient decoder", async () => {
  await withFiles({
    "k.yaml": `${HEADER}maxPods: 50\nevictionHard:\n  memory.available: 1Gi\n` +
      `  memory.available: 2Gi\nmaxPods: 70\n`,
  }, async (dir) => {
    const file = join(dir, "k.yaml");
    const { config, lenient } = await load(file);
    assert.equal(config.maxPods, 70);
    assert.deepEqual(config.evictionHard, { "memory.available": "2Gi" });
    assert.deepEqual(lenient[0]?.errors.map((e) => [e.line, e.path, e.kind]), [
      [6, "evictionHard.memory.available", "duplicate key"],
      [7, "maxPods", "duplicate key"],
    ]);
  });
});

Deno.test("loadKubeletConfiguration reads strictly valid files without lenient decoding", async () => {
  await withFiles({ "k.yaml": `${HEADER}maxPods: 50\n` }, async (dir) => {
    const { lenient } = await load(join(dir, "k.yaml"));
    assert.deepEqual(lenient, []);
  });
});

Deno.test("loadKubeletConfiguration still refuses wrong types, bad values and the wrong kind next to an unknown field", async () => {
  const cases: [string, RegExp][] = [
    [`${HEADER}maxPodz: 1\nmaxPods: many\n`, /:4: field 'maxPods' must be an integer/],
    [`${HEADER}maxPodz: 1\nimageGCHighThresholdPercent: 150\n`, /imageGCHighThresholdPercent/],
    [
      "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\nmaxPodz: 1\n",
      /field 'kind' must be 'KubeletConfiguration'/,
    ],
    [
      "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
      /field 'apiVersion'/,
    ],
  ];
  for (const [text, want] of cases) {
    await withFiles({ "k.yaml": text }, async (dir) => {
      const seen: LenientDecoding[] = [];
      await assert.rejects(
        loadKubeletConfiguration({
          configFile: join(dir, "k.yaml"),
          dropinDir: "",
          flags: [],
          cgroupV1: false,
          onLenientDecoding: (d) => seen.push(d),
        }),
        (e: unknown) => e instanceof ConfigError && want.test(e.message),
      );
    });
  }
});

Deno.test("loadKubeletConfiguration reports the lenient decoding before validation refuses the file", async () => {
  await withFiles(
    { "k.yaml": `${HEADER}maxPodz: 1\nimageGCHighThresholdPercent: 150\n` },
    async (dir) => {
      const seen: LenientDecoding[] = [];
      await assert.rejects(loadKubeletConfiguration({
        configFile: join(dir, "k.yaml"),
        dropinDir: "",
        flags: [],
        cgroupV1: false,
        onLenientDecoding: (d) => seen.push(d),
      }));
      assert.deepEqual(seen.map((d) => d.errors.map((e) => e.path)), [["maxPodz"]]);
    },
  );
});

Deno.test("loadKubeletConfiguration drops a drop-in's unknown fields and refuses its keys given twice", async () => {
  await withFiles({
    "k.yaml": `${HEADER}maxPods: 50\n`,
    "d/10-a.conf": `${HEADER}maxPods: 60\nmaxPodz: 70\n`,
  }, async (dir) => {
    const { config, lenient } = await load(join(dir, "k.yaml"), join(dir, "d"));
    assert.equal(config.maxPods, 60);
    assert.equal(lenient.length, 1);
    assert.equal(lenient[0]?.file, join(dir, "d/10-a.conf"));
    assert.equal(lenient[0]?.dropin, true);
    assert.equal(lenient[0]?.errors[0]?.path, "maxPodz");
  });
  await withFiles({
    "k.yaml": `${HEADER}maxPods: 50\n`,
    "d/10-a.conf": `${HEADER}maxPods: 60\nmaxPods: 70\n`,
  }, async (dir) => {
    await assert.rejects(load(join(dir, "k.yaml"), join(dir, "d")), (e: unknown) => {
      assert.ok(e instanceof ConfigError, String(e));
      assert.equal(e.file, join(dir, "d/10-a.conf"));
      assert.equal(e.line, 4);
      assert.equal(e.path, "maxPods");
      assert.match(e.message, /given more than once/);
      return true;
    });
  });
});

Deno.test("loadKubeletConfiguration reports a second apiVersion as a key given twice", async () => {
  await withFiles(
    { "k.yaml": `${HEADER}apiVersion: kubelet.config.k8s.io/v1beta1\n` },
    async (dir) => {
      const { lenient } = await load(join(dir, "k.yaml"));
      assert.deepEqual(lenient[0]?.errors.map((e) => [e.line, e.path, e.kind]), [
        [3, "apiVersion", "duplicate key"],
      ]);
    },
  );
});
