/**
 * @module
 * FlexVolume drivers in `volumePluginDir`: upstream's prober loads each driver directory there
 * (`<vendor>~<driver>/<driver>`, an executable the kubelet runs for every mount); this kubelet
 * runs none, so at start it says which are installed, and a pod with a `flexVolume` volume fails
 * to mount naming the volume type (volume_manager.ts). Nothing is created: upstream makes the
 * directory only for its watcher to have something to watch.
 * Corresponds to upstream `pkg/volume/flexvolume/probe.go` (probeAll).
 */

import type { Logger } from "../klog/klog.ts";

/**
 * The drivers installed in `dir`, as pods name them ("vendor/driver"): each directory whose
 * name does not begin with "."; none when `dir` does not exist.
 */
export async function probeFlexVolumeDrivers(dir: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) {
      if (e.isDirectory && !e.name.startsWith(".")) out.push(e.name.replaceAll("~", "/"));
    }
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw new Error(
      `error reading the Flexvolume directory: ${e instanceof Error ? e.message : e}`,
      {
        cause: e,
      },
    );
  }
  return out.sort();
}

/** Logs the drivers installed in `volumePluginDir`, which this kubelet does not run. */
export async function warnFlexVolumeDrivers(
  opts: { readonly volumePluginDir: string; readonly logger: Logger },
): Promise<void> {
  let drivers: string[];
  try {
    drivers = await probeFlexVolumeDrivers(opts.volumePluginDir);
  } catch (e) {
    opts.logger.error(e, "Failed to probe the FlexVolume drivers", {
      volumePluginDir: opts.volumePluginDir,
    });
    return;
  }
  if (drivers.length === 0) return;
  opts.logger.warning(
    "FlexVolume drivers are installed but this kubelet does not support FlexVolume: pods with their flexVolume volumes fail to mount",
    { volumePluginDir: opts.volumePluginDir, drivers: drivers.join(",") },
  );
}
