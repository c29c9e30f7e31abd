/**
 * Installs what the test suite needs before `deno test` runs (the first half of
 * `deno task test`): as root, the container runtime, image-building and registry packages
 * from apt when their programs are missing. Elsewhere it says what it could not install; the
 * tests that need those programs then skip loudly, or fail under CI=true.
 */

import { ensureRuntimePackages } from "./containerd_harness.ts";
import { ensureImagePackages } from "./images.ts";
import { ensureRegistryPackages } from "./registry_harness.ts";

const root = Deno.uid() === 0;
if (root) {
  await ensureRuntimePackages();
  await ensureImagePackages();
  await ensureRegistryPackages();
  console.error("tests/setup: runtime, image and registry packages present");
} else {
  const msg =
    "tests/setup: not root, so containerd, runc, the CNI plugins, busybox-static and docker-registry are not installed; tests that need them will skip";
  if (Deno.env.get("CI") === "true") {
    console.error(`${msg}, and CI=true makes that a failure`);
    Deno.exit(1);
  }
  console.error(msg);
}
