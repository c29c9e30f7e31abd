/**
 * Installs what the test suite needs before `deno test` runs (the first half of
 * `deno task test`): as root, the container runtime packages from apt when their programs are
 * missing. Elsewhere it says what it could not install; the tests that need those programs
 * then skip loudly, or fail under CI=true.
 */

import { ensureRuntimePackages } from "./containerd_harness.ts";

const root = Deno.uid() === 0;
if (root) {
  await ensureRuntimePackages();
  console.error("tests/setup: runtime packages present");
} else {
  const msg =
    "tests/setup: not root, so containerd, runc and the CNI plugins are not installed; tests that need them will skip";
  if (Deno.env.get("CI") === "true") {
    console.error(`${msg}, and CI=true makes that a failure`);
    Deno.exit(1);
  }
  console.error(msg);
}
