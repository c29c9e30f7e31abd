import assert from "node:assert/strict";
import { containerRuntimeVersion, normalizeRuntimeVersion } from "./runtime_version.ts";

Deno.test("normalizeRuntimeVersion reads versions as apimachinery's ParseSemantic, else ParseGeneric", () => {
  const cases: [string, string | undefined][] = [
    ["1.6.20~ds1", "1.6.20"], // Debian's containerd: generic, the suffix dropped
    ["v2.4.2", "2.4.2"], // containerd 2.x
    ["1.7.27", "1.7.27"],
    ["2.1.0-rc.1", "2.1.0-rc.1"], // semantic pre-release kept
    ["1.2.3+build.5", "1.2.3+build.5"],
    ["1.8", "1.8"], // generic: two numbers are enough
    ["1.2.3.4", "1.2.3.4"],
    ["01.02.03", "1.2.3"], // numbers printed as numbers
    ["0.1.0-dev", "0.1.0-dev"],
    ["7", undefined], // one number is not a version
    ["unknown", undefined],
  ];
  for (const [input, want] of cases) assert.equal(normalizeRuntimeVersion(input), want, input);
});

Deno.test("containerRuntimeVersion names the runtime and keeps a version no parser takes", () => {
  assert.equal(
    containerRuntimeVersion({ runtimeName: "containerd", runtimeVersion: "1.6.20~ds1" }),
    "containerd://1.6.20",
  );
  assert.equal(
    containerRuntimeVersion({ runtimeName: "fake", runtimeVersion: "dev" }),
    "fake://dev",
  );
});
