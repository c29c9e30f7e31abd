/**
 * @module
 * The images kubeadm init runs (tests/kubeadm_images.ts): their names are what the kubeadm
 * binary of the build cache prints, their layout is upstream's, and, imported into a real
 * containerd, every program in them runs, kube-proxy's iptables with its modules included (in
 * the container's own network namespace). No control plane is started.
 *
 * The name check needs the cached kubeadm (`deno run -A tests/kubeadm_build.ts` builds it); the
 * import test needs root, containerd, ctr, runc, busybox-static, iptables and ldd, and builds
 * missing programs. Without them each is skipped loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import { binaryPath, ensureBinary, KUBERNETES_VERSION } from "./control_plane_build.ts";
import { startContainerd } from "./containerd_harness.ts";
import { BUSYBOX_BINARY, ctrOrThrow, PAUSE } from "./images.ts";
import {
  ensureKubeadmImages,
  KUBE_PROXY_IPTABLES_COMMANDS,
  KUBEADM_IMAGE_NAMES,
  type KubeadmImageBinaries,
  kubeadmImageList,
  kubeadmImageSpecs,
} from "./kubeadm_images.ts";
import { requireRoot } from "./requirements.ts";
import { KUBEADM_SPEC } from "./kubeadm_build.ts";

const KUBEADM = binaryPath("kubeadm", KUBERNETES_VERSION);
// kubeadm is built when missing (a fresh machine's cache has none until a test builds it).
const listGate = await requireRoot("kubeadm image name test", ["go"]);
const e2eGate = await requireRoot("kubeadm image import test", [
  "containerd",
  "ctr",
  "runc",
  "ldd",
  "iptables",
  BUSYBOX_BINARY,
]);

const FAKE_BINARIES: KubeadmImageBinaries = {
  kubeApiserver: "/cache/kube-apiserver",
  kubeControllerManager: "/cache/kube-controller-manager",
  kubeScheduler: "/cache/kube-scheduler",
  kubeProxy: "/cache/kube-proxy",
  etcd: "/cache/etcd",
  coredns: "/cache/coredns",
  goRunner: "/cache/kube-log-runner",
};
const FAKE_IPTABLES = { programs: ["/usr/sbin/iptables"], moduleDirs: ["/usr/lib/xtables"] };

Deno.test({
  name: "KUBEADM_IMAGE_NAMES is what kubeadm config images list prints",
  ignore: listGate.ignore,
  async fn() {
    listGate.check();
    const kubeadm = await ensureBinary(KUBEADM_SPEC);
    assert.equal(kubeadm, KUBEADM);
    assert.deepEqual(await kubeadmImageList(kubeadm), KUBEADM_IMAGE_NAMES);
  },
});

Deno.test("kubeadmImageSpecs names every image as kubeadm does and lays it out as upstream", () => {
  const specs = kubeadmImageSpecs(FAKE_BINARIES, FAKE_IPTABLES);
  assert.deepEqual(specs.map((s) => s.name), KUBEADM_IMAGE_NAMES);
  const byName = new Map(specs.map((s) => [s.name.replace(/^.*\/|:.*$/g, ""), s]));

  // build/server-image/Dockerfile: the program in /usr/local/bin, kube-log-runner as /go-runner.
  for (
    const name of ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"]
  ) {
    const spec = byName.get(name)!;
    assert.deepEqual(spec.entrypoint, ["/go-runner"], name);
    assert.deepEqual(spec.executables, {
      [`/usr/local/bin/${name}`]: `/cache/${name}`,
      "/go-runner": "/cache/kube-log-runner",
    });
  }
  assert.deepEqual(byName.get("kube-proxy")!.hostPrograms, FAKE_IPTABLES);
  for (const [name, spec] of byName) {
    if (name !== "kube-proxy") assert.equal(spec.hostPrograms, undefined, name);
  }

  const coredns = byName.get("coredns")!;
  assert.deepEqual(coredns.entrypoint, ["/coredns"]);
  assert.deepEqual(coredns.executables, { "/coredns": "/cache/coredns" });
  assert.deepEqual(coredns.exposedPorts, ["53/tcp", "53/udp"]);

  const etcd = byName.get("etcd")!;
  assert.deepEqual(etcd.executables, {
    "/usr/local/bin/etcd": "/cache/etcd",
    "/go-runner": "/cache/kube-log-runner",
  });

  const pause = byName.get("pause")!;
  assert.deepEqual({ ...pause, name: PAUSE.name }, PAUSE);
});

Deno.test({
  name: "ensureKubeadmImages imports every kubeadm image into containerd, each program runnable",
  ignore: e2eGate.ignore,
  async fn() {
    e2eGate.check();
    const dir = await Deno.makeTempDir({ prefix: "kubeadm-images-test-" });
    try {
      // One deadline for containerd's life and the images' build: on a machine without the build
      // cache the Go builds take minutes, and a containerd that stopped after 2 of them failed
      // the import ("failed to dial ... containerd.sock", a fresh clone's CI on a new machine).
      const deadline = AbortSignal.timeout(1_800_000);
      await using containerd = await startContainerd({ dir, signal: deadline });
      const socket = containerd.socket;
      const { images } = await ensureKubeadmImages({ containerdSocket: socket, signal: deadline });
      assert.deepEqual(images.map((i) => i.name), KUBEADM_IMAGE_NAMES);
      const [apiserver, controllerManager, scheduler, proxy, coredns, , etcd] = KUBEADM_IMAGE_NAMES;

      const run = async (image: string, args: string[], flags: string[] = []) =>
        await ctrOrThrow(
          socket,
          "k8s.io",
          ["run", "--rm", ...flags, image, `t-${crypto.randomUUID().slice(0, 8)}`, ...args],
          { what: `run ${args.join(" ")} in ${image}` },
        );
      const version = `Kubernetes ${KUBERNETES_VERSION}`;
      // Through PATH, as kubeadm's static pod manifests run them; go-runner runs the first.
      const viaRunner = await run(apiserver!, ["/go-runner", "kube-apiserver", "--version"]);
      assert.equal(viaRunner.trim(), version);
      assert.equal(
        (await run(controllerManager!, ["kube-controller-manager", "--version"])).trim(),
        version,
      );
      assert.equal((await run(scheduler!, ["kube-scheduler", "--version"])).trim(), version);
      assert.match(await run(etcd!, ["etcd", "--version"]), /^etcd Version: 3\.6\.8$/m);
      assert.match(await run(coredns!, ["/coredns", "-version"]), /^CoreDNS-1\.14\.2$/m);

      // kube-proxy's iptables: the host's backend, the xtables modules (comment, tcp, DNAT)
      // loaded, in the container's own network namespace (privileged for CAP_NET_ADMIN).
      const hostVersions: string[] = [];
      for (const command of KUBE_PROXY_IPTABLES_COMMANDS) {
        const got = await new Deno.Command(command, { args: ["--version"], stdout: "piped" })
          .output();
        hostVersions.push(new TextDecoder().decode(got.stdout).trim());
      }
      const script = [
        "set -e",
        "/usr/local/bin/kube-proxy --version",
        ...KUBE_PROXY_IPTABLES_COMMANDS.map((c) => `${c} --version`),
        "iptables -t nat -N KUBE-TEST",
        "iptables -t nat -A KUBE-TEST -p tcp -m comment --comment 'kubelet-ts test' " +
        "--dport 80 -j DNAT --to-destination 10.0.0.1:8080",
        "iptables-save -t nat",
      ].join("\n");
      const out = await run(proxy!, ["sh", "-c", `(${script}) 2>&1`], ["--privileged"]);
      const lines = out.split("\n");
      assert.equal(lines[0], version);
      assert.deepEqual(lines.slice(1, 1 + hostVersions.length), hostVersions, out);
      assert.match(
        out,
        /^-A KUBE-TEST -p tcp -m comment --comment "kubelet-ts test" -m tcp --dport 80 -j DNAT --to-destination 10\.0\.0\.1:8080$/m,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
