/**
 * Installs what the test suite needs before `deno test` runs (the first half of
 * `deno task test`): as root, the container runtime, image-building and registry packages
 * from apt when their programs are missing, and the control plane binaries built from their Go
 * modules (tests/control_plane_build.ts). Elsewhere it says what it could not install; the
 * tests that need those programs then skip loudly, or fail under CI=true.
 */

import { ensureRuntimePackages } from "./containerd_harness.ts";
import { ensureImagePackages } from "./images.ts";
import { ensureRegistryPackages } from "./registry_harness.ts";
import { ensureControlPlaneBinaries } from "./control_plane_build.ts";
import { ensureDBusPackages } from "./dbus_harness.ts";
import { removeStaleTestCgroups } from "./node_harness.ts";
import { saveKernelTunables } from "./kernel_tunables.ts";

const root = Deno.uid() === 0;
if (root) {
  await ensureRuntimePackages();
  await ensureImagePackages();
  await ensureRegistryPackages();
  await ensureDBusPackages();
  console.error("tests/setup: runtime, image and registry packages present");
  // Earlier runs' agents leave their pods' cgroups behind (pods outlive a kubelet); hundreds of
  // them slow every cgroup operation on the machine.
  // The kernel tunables both kubelets write at start go back to these (tests/kernel_tunables.ts).
  saveKernelTunables(true);
  const stale = await removeStaleTestCgroups();
  if (stale > 0) console.error(`tests/setup: removed ${stale} cgroup trees of earlier runs`);
  // kube-apiserver, kubectl, crictl and etcd from their Go modules: minutes the first time on a
  // machine, then reused from the cache outside the repository.
  const bins = await ensureControlPlaneBinaries();
  console.error(`tests/setup: control plane binaries: ${Object.values(bins).join(", ")}`);
} else {
  const msg =
    "tests/setup: not root, so containerd, runc, the CNI plugins, busybox-static and docker-registry are not installed; tests that need them will skip";
  if (Deno.env.get("CI") === "true") {
    console.error(`${msg}, and CI=true makes that a failure`);
    Deno.exit(1);
  }
  console.error(msg);
}
