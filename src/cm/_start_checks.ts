/**
 * @module
 * The container manager's start-up checks: which cgroup driver to use (upstream
 * `getCgroupDriverFromCRI` of `cmd/kubelet/app/server.go`) and whether the cgroup controllers
 * the kubelet needs are there (`validateSystemRequirements` of `container_manager_linux.go`).
 * Private to node_container_manager.ts, which re-exports them.
 */

import type * as api from "../../proto/runtime/v1/api.ts";
import { CgroupDriver as CriCgroupDriver } from "../../proto/runtime/v1/api.ts";
import type { CgroupLayout } from "./cgroup_layout.ts";
import type { CgroupDriver } from "./cgroup_manager.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { GrpcCode, isCriCode } from "../cri/connection.ts";
import type { Logger } from "../klog/klog.ts";
import type { Gauge } from "../metrics/metrics.ts";

/** The CRI call {@link checkCgroupDriver} makes. */
export interface RuntimeConfigService {
  runtimeConfig(signal?: AbortSignal): Promise<api.RuntimeConfigResponse>;
}

/** Options of {@link checkCgroupDriver}. */
export interface CheckCgroupDriverOptions {
  logger: Logger;
  /** Paces the retries. @default realClock */
  clock?: Clock;
  signal?: AbortSignal;
  /**
   * kubelet_cri_losing_support{version}: set to 1 for "1.37.0" when the runtime lacks
   * RuntimeConfig, as upstream's getCgroupDriverFromCRI registers and sets it. @default none
   */
  criLosingSupport?: Gauge;
}

/**
 * The cgroup driver to use: the runtime's when RuntimeConfig reports one (it wins over the
 * configured one, as upstream since KubeletCgroupDriverFromCRI went GA), the configured one when
 * the runtime does not implement RuntimeConfig. Other errors are retried twice, 2 s apart.
 */
export async function checkCgroupDriver(
  configured: CgroupDriver,
  runtime: RuntimeConfigService,
  opts: CheckCgroupDriverOptions,
): Promise<CgroupDriver> {
  const clock = opts.clock ?? realClock;
  opts.logger.v(4).info("Getting CRI runtime configuration information");
  let response: api.RuntimeConfigResponse | undefined;
  for (let attempt = 1; response === undefined; attempt++) {
    try {
      response = await runtime.runtimeConfig(opts.signal);
    } catch (e) {
      if (isCriCode(e, GrpcCode.UNIMPLEMENTED)) {
        opts.criLosingSupport?.set(1, { version: "1.37.0" });
        opts.logger.info(
          "CRI implementation should be updated to support RuntimeConfig. Falling back to using cgroupDriver from kubelet config.",
        );
        return configured;
      }
      if (attempt === 3) throw e;
      // Most likely the runtime is still starting: give it a little more time.
      await clock.sleep(2000, opts.signal);
    }
  }
  if (response.linux === undefined) return configured;
  let driver: CgroupDriver;
  switch (response.linux.cgroupDriver) {
    case CriCgroupDriver.SYSTEMD:
      driver = "systemd";
      break;
    case CriCgroupDriver.CGROUPFS:
      driver = "cgroupfs";
      break;
    default:
      throw new Error(`runtime returned an unknown cgroup driver ${response.linux.cgroupDriver}`);
  }
  opts.logger.info("Using cgroup driver setting received from the CRI runtime", {
    cgroupDriver: driver,
  });
  if (driver !== configured) {
    opts.logger.warning("The runtime's cgroup driver replaces the configured one", {
      configured,
      runtime: driver,
    });
  }
  return driver;
}

/** Soft requirements found by {@link validateSystemRequirements}. */
export interface SystemFeatures {
  /** cpu.cfs_period_us and cpu.cfs_quota_us exist (always on v2). */
  cpuHardcapping: boolean;
}

/**
 * Upstream validateSystemRequirements: on v1 and hybrid hosts cpu, cpuacct, cpuset and memory
 * must be mounted. On v2 upstream checks nothing; with `cgroupsPerQOS` this also requires cpu
 * and memory among the root's controllers, since every QoS and pod cgroup needs them.
 */
export async function validateSystemRequirements(
  layout: CgroupLayout,
  opts: { cgroupsPerQOS: boolean },
): Promise<SystemFeatures> {
  const failed = "system validation failed";
  if (layout.mode === "v2") {
    if (opts.cgroupsPerQOS) {
      const file = `${layout.unified}/cgroup.controllers`;
      const have = new Set((await Deno.readTextFile(file)).split(/\s+/));
      const missing = ["cpu", "memory"].filter((c) => !have.has(c));
      if (missing.length > 0) {
        throw new Error(
          `${failed} - Following Cgroup controllers not available in ${file}: [${
            missing.join(" ")
          }]`,
        );
      }
    }
    return { cpuHardcapping: true };
  }
  const missing = ["cpu", "cpuacct", "cpuset", "memory"].filter((c) => !layout.v1.has(c)).sort();
  if (missing.length > 0) {
    throw new Error(`${failed} - Following Cgroup subsystem not mounted: [${missing.join(" ")}]`);
  }
  const cpu = layout.v1.get("cpu")!;
  const has = (f: string) => Deno.stat(`${cpu}/${f}`).then(() => true, () => false);
  return { cpuHardcapping: await has("cpu.cfs_period_us") && await has("cpu.cfs_quota_us") };
}
