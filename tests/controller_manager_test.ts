/**
 * @module
 * Tests of tests/controller_manager.ts that start no cluster: kube-controller-manager's command
 * line (conformance's, unchanged), and that the flags {@link FAST_VOLUME_CONTROLLER_ARGS} names
 * are flags of the pinned kube-controller-manager (its `--help`; the cached binary is used, and
 * built only under CI=true; without it and outside CI the test is skipped loudly).
 */

import assert from "node:assert/strict";
import {
  controllerManagerArgs,
  DEFAULT_CONTROLLERS,
  FAST_VOLUME_CONTROLLER_ARGS,
} from "./controller_manager.ts";
import {
  binaryPath,
  ensureKubeControllerManager,
  KUBERNETES_VERSION,
} from "./control_plane_build.ts";

const cp = {
  adminKubeconfig: "/cp/admin.conf",
  pki: {
    ca: { cert: "/cp/ca.crt", key: "/cp/ca.key" },
    serviceAccount: { key: "/cp/sa.key", pub: "/cp/sa.pub" },
  },
} as unknown as Parameters<typeof controllerManagerArgs>[0];

Deno.test("controllerManagerArgs runs conformance's controllers with the cluster CA by default", () => {
  assert.deepEqual(controllerManagerArgs(cp), [
    "--kubeconfig=/cp/admin.conf",
    "--authentication-kubeconfig=/cp/admin.conf",
    "--authorization-kubeconfig=/cp/admin.conf",
    "--bind-address=127.0.0.1",
    "--secure-port=0",
    "--leader-elect=false",
    "--use-service-account-credentials=true",
    "--service-account-private-key-file=/cp/sa.key",
    "--root-ca-file=/cp/ca.crt",
    "--cluster-signing-cert-file=/cp/ca.crt",
    "--cluster-signing-key-file=/cp/ca.key",
    "--controllers=*,bootstrapsigner,tokencleaner",
    "--v=1",
  ]);
  assert.deepEqual(DEFAULT_CONTROLLERS, ["*", "bootstrapsigner", "tokencleaner"]);
});

Deno.test("controllerManagerArgs takes the controllers given and puts extraArgs last", () => {
  const args = controllerManagerArgs(
    cp,
    ["persistentvolume-binder-controller", "persistentvolume-attach-detach-controller"],
    [...FAST_VOLUME_CONTROLLER_ARGS, "--v=4"],
  );
  assert.ok(
    args.includes(
      "--controllers=persistentvolume-binder-controller,persistentvolume-attach-detach-controller",
    ),
  );
  assert.deepEqual(args.slice(-3), [
    "--attach-detach-reconcile-sync-period=1s",
    "--pvclaimbinder-sync-period=1s",
    "--v=4",
  ]);
});

const cached = binaryPath("kube-controller-manager", KUBERNETES_VERSION);
const haveBinary = await Deno.stat(cached).then(() => true, () => false);
const inCI = Deno.env.get("CI") === "true";
if (!haveBinary && !inCI) {
  console.warn(`SKIPPING the kube-controller-manager --help test: ${cached} is not built`);
}

Deno.test({
  name: "FAST_VOLUME_CONTROLLER_ARGS are flags of the pinned kube-controller-manager",
  ignore: !haveBinary && !inCI,
  async fn() {
    const binary = haveBinary ? cached : await ensureKubeControllerManager();
    const out = await new Deno.Command(binary, { args: ["--help"], stdout: "piped" }).output();
    const help = new TextDecoder().decode(out.stdout);
    for (const arg of FAST_VOLUME_CONTROLLER_ARGS) {
      const flag = arg.replace(/=.*$/, "");
      assert.match(help, new RegExp(`^\\s+${flag} duration\\s`, "m"), flag);
    }
  },
});
