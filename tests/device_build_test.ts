/**
 * @module
 * Tests of tests/device_build.ts. Without building: the pinned components (image names,
 * entrypoints, packages), how ensureBinary is asked to build them, the check of the module's
 * sample-device-plugin files (against k8s.io/kubernetes@v1.36.3 in the Go module cache, skipped
 * loudly without it), and the image layout (with busybox-static standing in for the program).
 * One test builds both programs, imports their images into a private containerd and runs each
 * with `ctr run`: the sample device plugin serves its socket, writes its CDI spec and gives up
 * registering when no kubelet answers; the DRA test driver's `kubelet-plugin`, against a real
 * apiserver (tests/control_plane.ts), serves its registration and DRA sockets, publishes its
 * ResourceSlice and stops on SIGTERM. It needs root, containerd, ctr, runc, go and
 * busybox-static; without them it is skipped loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { dialRegistration } from "../src/pluginmanager/operation_generator.ts";
import { findProgram } from "./apt.ts";
import { readTar } from "./conformance_images.ts";
import { startContainerd } from "./containerd_harness.ts";
import { startControlPlane } from "./control_plane.ts";
import { KUBERNETES_VERSION } from "./control_plane_build.ts";
import {
  binarySpec,
  checkSampleDevicePluginSource,
  DEVICE_COMPONENTS,
  DeviceBuildError,
  DRA_TEST_DRIVER,
  DRA_TEST_DRIVER_NAME,
  ensureDeviceImages,
  imageSpec,
  SAMPLE_CDI_SPEC_PATH,
  SAMPLE_DEVICE_IDS,
  SAMPLE_DEVICE_PLUGIN,
  SAMPLE_DEVICE_RESOURCE,
  selectComponents,
} from "./device_build.ts";
import { blobPath, buildImageLayout, BUSYBOX_BINARY, ctrOrThrow } from "./images.ts";
import { requireRoot } from "./requirements.ts";
import { exists } from "./child_process.ts";

Deno.test("DEVICE_COMPONENTS names upstream's sample plugin image and a local DRA driver image", () => {
  assert.deepEqual(
    DEVICE_COMPONENTS.map((c) => [c.name, c.image, c.entrypoint, c.pkg]),
    [
      [
        "sampledeviceplugin",
        "registry.k8s.io/e2e-test-images/sample-device-plugin:1.7",
        ["/sampledeviceplugin", "-alsologtostderr"],
        "k8s.io/kubernetes/test/images/sample-device-plugin",
      ],
      [
        "dra-test-driver",
        "kubelet-ts.local/dra-test-driver:v1.36.3",
        ["/dra-test-driver"],
        "k8s.io/kubernetes/test/e2e/dra/test-driver",
      ],
    ],
  );
});

Deno.test("binarySpec builds statically with -w only, as upstream's image-util.sh does", () => {
  for (const c of DEVICE_COMPONENTS) {
    const spec = binarySpec(c);
    assert.equal(spec.module, "k8s.io/kubernetes");
    assert.equal(spec.version, KUBERNETES_VERSION);
    assert.equal(spec.cgo, false);
    assert.equal(spec.keepSymbols, true, "image-util.sh links with -w, not -s");
    assert.deepEqual(spec.ldflags, []);
    assert.equal(spec.versionArgs, undefined, `${c.name} has no version flag`);
    // The staging modules come from their published v0 releases.
    assert.deepEqual(
      spec.replaces?.(
        "module k8s.io/kubernetes\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n)\n",
      ),
      [{ from: "k8s.io/api", to: "k8s.io/api", toVersion: "v0.36.3" }],
    );
  }
  assert.equal(binarySpec(SAMPLE_DEVICE_PLUGIN).verify, checkSampleDevicePluginSource);
  assert.equal(binarySpec(DRA_TEST_DRIVER).verify, undefined);
});

Deno.test("selectComponents keeps DEVICE_COMPONENTS order and names an unknown program", () => {
  assert.deepEqual(
    selectComponents(["dra-test-driver", "sampledeviceplugin"]).map((c) => c.name),
    ["sampledeviceplugin", "dra-test-driver"],
  );
  assert.equal(selectComponents().length, 2);
  assert.throws(
    () => selectComponents(["sample-device-plugin"]),
    (e: unknown) => e instanceof DeviceBuildError && /'sample-device-plugin'/.test(e.message),
  );
});

async function kubernetesModuleDir(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("go", { args: ["env", "GOMODCACHE"], stdout: "piped" })
      .output();
    const dir = `${new TextDecoder().decode(out.stdout).trim()}/k8s.io/kubernetes@v1.36.3`;
    await Deno.stat(`${dir}/test/images/sample-device-plugin/VERSION`);
    return dir;
  } catch {
    return undefined;
  }
}

const moduleDir = await kubernetesModuleDir();
const inCI = Deno.env.get("CI") === "true";
if (!moduleDir && !inCI) {
  console.warn(
    "SKIPPING the sample-device-plugin source check: k8s.io/kubernetes@v1.36.3 is not in the " +
      "Go module cache (go mod download k8s.io/kubernetes@v1.36.3)",
  );
}

Deno.test({
  name: "checkSampleDevicePluginSource takes v1.36.3's files and names what changed",
  ignore: !moduleDir && !inCI,
  async fn() {
    assert.ok(moduleDir, "CI=true but k8s.io/kubernetes@v1.36.3 is not in the module cache");
    await checkSampleDevicePluginSource(moduleDir);

    // A copy of the four files it reads, changed one at a time.
    const dir = await Deno.makeTempDir({ prefix: "device-build-test-" });
    try {
      const files = [
        "test/images/sample-device-plugin/VERSION",
        "test/images/sample-device-plugin/Dockerfile",
        "test/e2e/testing-manifests/sample-device-plugin/sample-device-plugin.yaml",
        "test/e2e/testing-manifests/sample-device-plugin/" +
        "sample-device-plugin-control-registration.yaml",
      ];
      const reset = async () => {
        for (const f of files) {
          await Deno.mkdir(join(dir, f, ".."), { recursive: true });
          await Deno.copyFile(join(moduleDir, f), join(dir, f));
        }
      };
      const rejects = async (file: string, from: string, to: string, message: RegExp) => {
        await reset();
        const text = await Deno.readTextFile(join(dir, file));
        assert.ok(text.includes(from), `${file} holds '${from}'`);
        await Deno.writeTextFile(join(dir, file), text.replace(from, to));
        await assert.rejects(
          checkSampleDevicePluginSource(dir),
          (e: unknown) => e instanceof DeviceBuildError && message.test(e.message),
        );
      };
      await reset();
      await checkSampleDevicePluginSource(dir);
      await rejects(files[0]!, "1.8.0", "1.9.0", /VERSION .* says '1\.9\.0'/);
      await rejects(files[1]!, '"-alsologtostderr"', '"-v=4"', /ENTRYPOINT .*-v=4/);
      await rejects(files[2]!, "sample-device-plugin:1.7", "sample-device-plugin:1.8", /:1\.8,? /);
      await rejects(files[3]!, "sample-device-plugin:1.7", "sample-device-plugin:1.8", /:1\.8,? /);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

const busybox = await findProgram(BUSYBOX_BINARY);
if (!busybox) console.warn(`SKIPPING the device image layout test: ${BUSYBOX_BINARY} is missing`);

Deno.test({
  name: "imageSpec puts the program at /<name>, executable, under upstream's entrypoint",
  ignore: !busybox,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "device-build-test-" });
    try {
      // Any static program stands in for the Go build: busybox-static is one.
      const built = await buildImageLayout({
        image: imageSpec(SAMPLE_DEVICE_PLUGIN, busybox!),
        cacheDir: dir,
      });
      assert.equal(built.name, "registry.k8s.io/e2e-test-images/sample-device-plugin:1.7");
      const config = JSON.parse(
        await Deno.readTextFile(`${built.layoutDir}/${blobPath(built.configDigest)}`),
      );
      assert.deepEqual(config.config.Entrypoint, ["/sampledeviceplugin", "-alsologtostderr"]);
      assert.equal(config.config.Labels["org.opencontainers.image.version"], "v1.36.3");
      const layer = readTar(
        gunzipSync(await Deno.readFile(`${built.layoutDir}/${blobPath(built.layerDigest)}`)),
      );
      const program = layer.find((e) => e.path === "sampledeviceplugin");
      assert.ok(program?.type === "file");
      assert.equal(program.mode, 0o755);
      assert.deepEqual(new Uint8Array(program.data), await Deno.readFile(busybox!));
      assert.ok(layer.some((e) => e.path === "tmp/"), "the plugin makes its fake devices in /tmp");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// ---- built from the module, run in a real containerd ----

const gate = await requireRoot("the device image e2e test", [
  "containerd",
  "ctr",
  "runc",
  "go",
  BUSYBOX_BINARY,
]);

const NODE = "device-node";

/** Polls `check` every 100 ms until it returns a value, or fails after `ms`. */
async function poll<T>(what: string, check: () => Promise<T | undefined>, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = await check();
    if (got !== undefined) return got;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** `ctr run --rm` in the foreground, as a child whose output is collected. */
function ctrRun(socket: string, args: string[], signal: AbortSignal) {
  const child = new Deno.Command("ctr", {
    args: ["--address", socket, "--namespace", "k8s.io", "run", "--rm", ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).spawn();
  const run = {
    ended: false,
    done: child.output().then((out) => {
      run.ended = true;
      const dec = new TextDecoder();
      return { code: out.code, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
    }),
  };
  return run;
}

const bind = (src: string, dst: string) =>
  `--mount=type=bind,src=${src},dst=${dst},options=rbind:rw`;

async function getInfo(socket: string) {
  const client = await dialRegistration()(socket, { timeoutMs: 10_000 });
  try {
    return await client.getInfo({ timeoutMs: 5_000 });
  } finally {
    client.close();
  }
}

Deno.test({
  name: "ensureDeviceImages imports both programs, and each runs as upstream's e2e runs it",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    // A cold build (empty Go build cache) takes minutes on two CPUs; a warm one seconds.
    const signal = AbortSignal.timeout(30 * 60_000);
    const dir = await Deno.makeTempDir({ prefix: "device-build-e2e-" });
    try {
      await using containerd = await startContainerd({ dir: join(dir, "containerd"), signal });
      const socket = containerd.socket;
      const { images, binaries } = await ensureDeviceImages({ containerdSocket: socket, signal });
      assert.deepEqual(images.map((i) => i.name), [
        "registry.k8s.io/e2e-test-images/sample-device-plugin:1.7",
        "kubelet-ts.local/dra-test-driver:v1.36.3",
      ]);
      assert.deepEqual([...binaries.keys()], ["sampledeviceplugin", "dra-test-driver"]);

      // The sample plugin as sample-device-plugin.yaml runs it, with CDI_ENABLED as the node
      // e2e adds it. No kubelet.sock: it serves, writes its CDI spec, then fails to register.
      const pluginDir = join(dir, "device-plugins");
      const cdiDir = join(dir, "cdi");
      await Deno.mkdir(pluginDir);
      await Deno.mkdir(cdiDir);
      const sample = ctrRun(socket, [
        "--env=PLUGIN_SOCK_DIR=/var/lib/kubelet/device-plugins",
        "--env=CDI_ENABLED=1",
        bind(pluginDir, "/var/lib/kubelet/device-plugins"),
        bind(cdiDir, "/var/run/cdi"),
        SAMPLE_DEVICE_PLUGIN.image,
        "sample-device-plugin",
      ], signal);
      const cdiFile = join(cdiDir, SAMPLE_CDI_SPEC_PATH.slice("/var/run/cdi/".length));
      const cdi = await poll("the CDI spec", async () => {
        if (sample.ended) throw new Error(`the plugin ended: ${JSON.stringify(await sample.done)}`);
        try {
          return JSON.parse(await Deno.readTextFile(cdiFile));
        } catch {
          return undefined;
        }
      }, 30_000);
      assert.deepEqual(cdi, {
        cdiVersion: "0.3.0",
        kind: SAMPLE_DEVICE_RESOURCE,
        devices: SAMPLE_DEVICE_IDS.map((id, i) => ({
          name: `CDI-${id}`,
          containerEdits: {
            env: [`CDI_DEVICE=CDI-${id}`],
            deviceNodes: [{ path: `/tmp/CDI-${id}`, type: "b", major: 1, minor: i }],
          },
        })),
      });
      const dpSocket = [...Deno.readDirSync(pluginDir)].map((e) => e.name)
        .find((n) => /^dp\.\d+$/.test(n));
      assert.ok(dpSocket, "the plugin's socket dp.<unix time> is in PLUGIN_SOCK_DIR");
      // Its stub also answers the plugin watcher's GetInfo.
      assert.deepEqual(await getInfo(join(pluginDir, dpSocket)), {
        type: "DevicePlugin",
        name: SAMPLE_DEVICE_RESOURCE,
        endpoint: "",
        supportedVersions: ["v1beta1"],
      });
      const ended = await sample.done;
      assert.notEqual(ended.code, 0, ended.output);
      assert.match(ended.output, /panic: context deadline exceeded/);
      assert.match(ended.output, /Determined configuration.*CDI_ENABLED="1"/);
      assert.ok(!(await exists(cdiFile)), "the plugin removes its CDI spec when it ends");

      // The DRA test driver's kubelet plugin against a real apiserver, as README.md runs it:
      // its own datadir made first (server.go creates only the parent), a Node to own the
      // ResourceSlice it publishes. Until the apiserver answers it neither publishes nor
      // handles SIGTERM (StartController waits for its informer before the signal handler).
      await using cp = await startControlPlane({ dir: join(dir, "cp"), signal });
      const created = await cp.kubectl(["create", "-f", "-"], {
        stdin: JSON.stringify({ apiVersion: "v1", kind: "Node", metadata: { name: NODE } }),
        signal,
      });
      assert.equal(created.code, 0, created.stderr);
      const pluginsDir = join(dir, "plugins");
      const registryDir = join(dir, "plugins_registry");
      await Deno.mkdir(join(pluginsDir, DRA_TEST_DRIVER_NAME), { recursive: true });
      await Deno.mkdir(registryDir);
      const driver = ctrRun(socket, [
        "--net-host",
        // The admin kubeconfig names its certificates by host path: the same path inside.
        bind(join(dir, "cp"), join(dir, "cp")),
        bind(pluginsDir, "/var/lib/kubelet/plugins"),
        bind(registryDir, "/var/lib/kubelet/plugins_registry"),
        bind(cdiDir, "/var/run/cdi"),
        DRA_TEST_DRIVER.image,
        "dra-test-driver",
        "/dra-test-driver",
        `--kubeconfig=${cp.adminKubeconfig}`,
        "kubelet-plugin",
        `--node-name=${NODE}`,
      ], signal);
      const regSocket = join(registryDir, `${DRA_TEST_DRIVER_NAME}-reg.sock`);
      await poll("the registration socket", async () => {
        if (driver.ended) {
          throw new Error(`the driver ended: ${await driver.done.then(JSON.stringify)}`);
        }
        return (await exists(regSocket)) || undefined;
      }, 30_000);
      assert.ok(await exists(join(pluginsDir, DRA_TEST_DRIVER_NAME, "dra.sock")));
      assert.deepEqual(await getInfo(regSocket), {
        type: "DRAPlugin",
        name: DRA_TEST_DRIVER_NAME,
        endpoint: `/var/lib/kubelet/plugins/${DRA_TEST_DRIVER_NAME}/dra.sock`,
        supportedVersions: ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"],
      });
      const slice = await poll("the driver's ResourceSlice", async () => {
        const got = await cp.kubectl(["get", "resourceslices", "-o", "json"], { signal });
        assert.equal(got.code, 0, got.stderr);
        return JSON.parse(got.stdout).items[0];
      }, 60_000);
      // <index as 5 hex digits>-<driver>-<owner>-<apiserver's suffix>
      const prefix = `00000-${DRA_TEST_DRIVER_NAME}-${NODE}-`;
      assert.ok(slice.metadata.name.startsWith(prefix), slice.metadata.name);
      assert.deepEqual(
        slice.metadata.ownerReferences.map((o: { kind: string; name: string }) => [o.kind, o.name]),
        [["Node", NODE]],
      );
      assert.equal(slice.spec.driver, DRA_TEST_DRIVER_NAME);
      assert.equal(slice.spec.nodeName, NODE);
      assert.deepEqual(slice.spec.pool, { name: NODE, generation: 1, resourceSliceCount: 1 });
      assert.deepEqual(
        slice.spec.devices.map((d: { name: string }) => d.name),
        ["device-00", "device-01", "device-02", "device-03"],
      );
      await ctrOrThrow(socket, "k8s.io", ["tasks", "kill", "dra-test-driver"], {
        what: "SIGTERM the driver",
        signal,
      });
      const stopped = await driver.done;
      assert.equal(stopped.code, 0, stopped.output);
      assert.match(stopped.output, /Received signal, shutting down/);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
