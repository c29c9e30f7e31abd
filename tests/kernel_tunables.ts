/**
 * @module
 * The host's kernel tunables around the suite's kubelets. Both kubelets, ours and upstream's,
 * write the six settings upstream's container manager wants (src/cm/kernel_tunables.ts:
 * `vm.overcommit_memory=1`, `kernel.panic=10`, `kernel.panic_on_oops=1`, ...) when they start
 * with `protectKernelDefaults: false`, as on a real node. This machine is shared, so the values
 * the suite found are kept in one file for every test process ({@link saveKernelTunables}:
 * tests/setup.ts writes it fresh, a lone test file writes it when missing), and each harness
 * writes them back once its kubelet is up (both check them only at start) and when it stops.
 * Synchronous, so a restore run as a child process ends leaves no pending op behind a test.
 * Test support only.
 */

import { KERNEL_TUNABLES } from "../src/cm/kernel_tunables.ts";

/** Where the suite keeps the values it found. */
const SAVED = "/run/kubelet-ts-tests/kernel-tunables.json";

function current(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name] of KERNEL_TUNABLES) {
    out[name] = Deno.readTextFileSync(`/proc/sys/${name}`).trim();
  }
  return out;
}

/** Notes the current values for the suite; `fresh` replaces a note already there. */
export function saveKernelTunables(fresh: boolean): void {
  if (Deno.uid() !== 0) return;
  Deno.mkdirSync("/run/kubelet-ts-tests", { recursive: true });
  try {
    Deno.writeTextFileSync(SAVED, JSON.stringify(current()), { createNew: !fresh });
  } catch (e) {
    if (!(e instanceof Deno.errors.AlreadyExists)) throw e;
  }
}

/** Writes back every value that differs from the suite's note; returns what it restored. */
export function restoreKernelTunables(): string[] {
  if (Deno.uid() !== 0) return [];
  let saved: Record<string, string>;
  try {
    saved = JSON.parse(Deno.readTextFileSync(SAVED));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
  const restored: string[] = [];
  for (const [name, value] of Object.entries(saved)) {
    const now = Deno.readTextFileSync(`/proc/sys/${name}`).trim();
    if (now === value) continue;
    Deno.writeTextFileSync(`/proc/sys/${name}`, value);
    restored.push(`${name.replaceAll("/", ".")} ${now} → ${value}`);
  }
  return restored;
}
