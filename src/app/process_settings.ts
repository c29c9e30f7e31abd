/**
 * @module
 * What the kubelet sets for its whole process and host at start: its own OOM score
 * (`oomScoreAdj`), its limit on open files (`maxOpenFiles`) and the kernel tunables
 * (`protectKernelDefaults` checks them, else they are written). Each needs rights the kubelet's
 * sandbox does not have (Deno gives `/proc/self`, `/proc/sys` and FFI only to a process with
 * every permission), so the launcher applies them before the sandbox starts and the kubelet
 * applies them itself only when it runs without one. A refused OOM score or open-files limit is
 * logged and the start goes on; a kernel tunable that differs or cannot be written stops it.
 * Corresponds to upstream's RunKubelet (`ApplyOOMScoreAdj`, `rlimit.SetNumFiles`) and the
 * container manager's `setupKernelTunables`.
 */

import type { Logger } from "../klog/klog.ts";
import { kernelTunableBehavior, setupKernelTunables, type Sysctl } from "../cm/kernel_tunables.ts";
import { applyOOMScoreAdj } from "../util/oom_adjuster.ts";
import { type SetNoFileLimit, setNumFiles } from "../util/rlimit.ts";

/** The settings, from the KubeletConfiguration. */
export interface ProcessSettings {
  readonly oomScoreAdj: number;
  readonly maxOpenFiles: number;
  readonly protectKernelDefaults: boolean;
}

/** Options of {@link applyProcessSettings}: where each is applied (real ones by default). */
export interface ApplyProcessSettingsOptions {
  readonly logger: Logger;
  readonly applyOOMScoreAdj?: (value: number) => Promise<void>;
  readonly setNoFileLimit?: SetNoFileLimit;
  readonly sysctl?: Sysctl;
}

/** The error that stops the start: a kernel tunable, logged by the caller in upstream's words. */
export class KernelTunablesError extends Error {
  override name = "KernelTunablesError";
}

/**
 * Applies the settings in upstream's order; rejects with {@link KernelTunablesError} when the
 * kernel tunables stop the start ("Failed to start ContainerManager" upstream).
 */
export async function applyProcessSettings(
  settings: ProcessSettings,
  opts: ApplyProcessSettingsOptions,
): Promise<void> {
  try {
    await (opts.applyOOMScoreAdj ?? applyOOMScoreAdj)(settings.oomScoreAdj);
  } catch (e) {
    opts.logger.info("Failed to ApplyOOMScoreAdj", { err: String(e) });
  }
  try {
    setNumFiles(
      settings.maxOpenFiles,
      opts.setNoFileLimit ? { setrlimit: opts.setNoFileLimit } : {},
    );
  } catch (e) {
    opts.logger.error(e, "Failed to set rlimit on max file handles");
  }
  try {
    await setupKernelTunables({
      behavior: kernelTunableBehavior(settings.protectKernelDefaults),
      logger: opts.logger,
      ...(opts.sysctl ? { sysctl: opts.sysctl } : {}),
    });
  } catch (e) {
    throw new KernelTunablesError(e instanceof Error ? e.message : String(e));
  }
}
