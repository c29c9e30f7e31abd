/**
 * @module
 * The kernel settings the kubelet wants on its node, checked once at start: memory overcommit
 * always on (`vm/overcommit_memory` 1), the OOM killer rather than a panic on OOM
 * (`vm/panic_on_oom` 0), a reboot 10 s after a panic (`kernel/panic` 10), a panic on an oops
 * (`kernel/panic_on_oops` 1), and the root user's key quotas (`kernel/keys/root_maxkeys`
 * 1000000, `kernel/keys/root_maxbytes` 25000000). With `protectKernelDefaults` a value that
 * differs is an error that stops the start; without it (the default) the kubelet writes its
 * value and a write that fails stops the start. The launcher runs this for the sandboxed kubelet
 * (Deno lets only a process with every permission read /proc/sys).
 * Corresponds to upstream `setupKernelTunables` of `pkg/kubelet/cm/container_manager_linux.go`
 * and the sysctl helper of `component-helpers/node/util/sysctl`.
 */

import type { Logger } from "../klog/klog.ts";

/** The settings and their wanted values, in the order they are checked and reported. */
export const KERNEL_TUNABLES: readonly (readonly [string, number])[] = [
  ["vm/overcommit_memory", 1],
  ["vm/panic_on_oom", 0],
  ["kernel/panic", 10],
  ["kernel/panic_on_oops", 1],
  ["kernel/keys/root_maxkeys", 1000000],
  ["kernel/keys/root_maxbytes", 25000000],
];

/** Reads and writes kernel settings by their /proc/sys path ("vm/overcommit_memory"). */
export interface Sysctl {
  get(name: string): Promise<number>;
  set(name: string, value: number): Promise<void>;
}

/** The host's /proc/sys (or `root`, for tests). */
export function procSysctl(root = "/proc/sys"): Sysctl {
  return {
    get: async (name) => {
      const text = (await Deno.readTextFile(`${root}/${name}`)).trim();
      const n = Number(text);
      if (text === "" || !Number.isInteger(n)) {
        throw new Error(`${root}/${name}: not an integer: ${JSON.stringify(text)}`);
      }
      return n;
    },
    set: (name, value) => Deno.writeTextFile(`${root}/${name}`, String(value)),
  };
}

/** What a differing value does: "error" under protectKernelDefaults, else "modify". */
export type KernelTunableBehavior = "error" | "modify";

/** The behaviour `protectKernelDefaults` asks for. */
export function kernelTunableBehavior(protectKernelDefaults: boolean): KernelTunableBehavior {
  return protectKernelDefaults ? "error" : "modify";
}

/** Options of {@link setupKernelTunables}. */
export interface SetupKernelTunablesOptions {
  readonly behavior: KernelTunableBehavior;
  readonly logger: Logger;
  /** @default procSysctl() */
  readonly sysctl?: Sysctl;
}

/**
 * Checks (and, under "modify", writes) every tunable; throws one Error listing each that could
 * not be read, differs under "error", or could not be written, as upstream's aggregate reads:
 * the one message alone, or `[first, second]`.
 */
export async function setupKernelTunables(opts: SetupKernelTunablesOptions): Promise<void> {
  const sysctl = opts.sysctl ?? procSysctl();
  const errors: string[] = [];
  for (const [flag, expected] of KERNEL_TUNABLES) {
    let actual: number;
    try {
      actual = await sysctl.get(flag);
    } catch (e) {
      errors.push(e instanceof Error ? e.message : String(e));
      continue;
    }
    if (actual === expected) continue;
    if (opts.behavior === "error") {
      errors.push(
        `invalid kernel flag: ${flag}, expected value: ${expected}, actual value: ${actual}`,
      );
      continue;
    }
    opts.logger.v(2).info("Updating kernel flag", {
      flag,
      expectedValue: expected,
      actualValue: actual,
    });
    try {
      await sysctl.set(flag, expected);
    } catch (e) {
      errors.push(e instanceof Error ? e.message : String(e));
    }
  }
  if (errors.length === 1) throw new Error(errors[0]);
  if (errors.length > 1) throw new Error(`[${errors.join(", ")}]`);
}
