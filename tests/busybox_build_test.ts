import assert from "node:assert/strict";
import { adjustBusyboxConfig, BusyboxBuildError } from "./busybox_build.ts";

Deno.test("adjustBusyboxConfig links statically and leaves tc out, nothing else", () => {
  const defconfig = [
    "CONFIG_DESKTOP=y",
    "# CONFIG_STATIC is not set",
    "CONFIG_STATIC_LIBGCC=y",
    "CONFIG_TC=y",
    "CONFIG_FEATURE_TC_INGRESS=y",
    "",
  ].join("\n");
  assert.equal(
    adjustBusyboxConfig(defconfig),
    [
      "CONFIG_DESKTOP=y",
      "CONFIG_STATIC=y",
      "CONFIG_STATIC_LIBGCC=y",
      "# CONFIG_TC is not set",
      "CONFIG_FEATURE_TC_INGRESS=y",
      "",
    ].join("\n"),
  );
});

Deno.test("adjustBusyboxConfig refuses a config without the lines it changes", () => {
  assert.throws(
    () => adjustBusyboxConfig("CONFIG_DESKTOP=y\nCONFIG_TC=y\n"),
    (err: unknown) =>
      err instanceof BusyboxBuildError && /no line for CONFIG_STATIC/.test(err.message),
  );
});
