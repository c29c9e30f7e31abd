import assert from "node:assert/strict";
import { join } from "node:path";
import { probeFlexVolumeDrivers, warnFlexVolumeDrivers } from "./flex_volume.ts";
import { captureLogger } from "../testing/cm_fixtures.ts";

Deno.test("the FlexVolume drivers of volumePluginDir are named at start, as pods name them", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const { logger, lines } = captureLogger();
    await warnFlexVolumeDrivers({ volumePluginDir: join(dir, "missing"), logger });
    await warnFlexVolumeDrivers({ volumePluginDir: dir, logger });
    assert.deepEqual(lines, []);
    await Deno.mkdir(join(dir, "example.com~nfs"));
    await Deno.writeTextFile(join(dir, "example.com~nfs", "nfs"), "#!/bin/sh\n");
    await Deno.mkdir(join(dir, "cifs"));
    await Deno.mkdir(join(dir, ".hidden"));
    await Deno.writeTextFile(join(dir, "README"), "not a driver\n");
    assert.deepEqual(await probeFlexVolumeDrivers(dir), ["cifs", "example.com/nfs"]);
    await warnFlexVolumeDrivers({ volumePluginDir: dir, logger });
    assert.equal(lines.length, 1);
    assert.match(
      lines[0]!,
      /^W.*"FlexVolume drivers are installed but this kubelet does not support FlexVolume: pods with their flexVolume volumes fail to mount" volumePluginDir=".*" drivers="cifs,example.com\/nfs"$/,
    );
    // A file where the directory should be: said, and the start goes on.
    const file = join(dir, "README");
    await warnFlexVolumeDrivers({ volumePluginDir: file, logger });
    assert.match(
      lines[1]!,
      /^E.*"Failed to probe the FlexVolume drivers" err="error reading the Flexvolume directory: /,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
