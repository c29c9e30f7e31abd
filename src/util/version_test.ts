import assert from "node:assert/strict";
import {
  formatGenericVersion,
  highestSupportedVersion,
  parseGenericVersion,
  versionLessThan,
} from "./version.ts";

Deno.test("parseGenericVersion reads versions as apimachinery's ParseGeneric", () => {
  assert.deepEqual(parseGenericVersion("v1.2.3-rc.1").components, [1, 2, 3]);
  assert.deepEqual(parseGenericVersion("1.0").components, [1, 0]);
  assert.throws(() => parseGenericVersion("1"), /illegal version string "1"/);
  assert.throws(() => parseGenericVersion("x1.0"), /could not parse "x1.0" as version/);
  assert.throws(() => parseGenericVersion("01.0"), /illegal zero-prefixed version component "01"/);
  assert.ok(versionLessThan(parseGenericVersion("1.2"), parseGenericVersion("1.10")));
  assert.ok(!versionLessThan(parseGenericVersion("1.2.0"), parseGenericVersion("1.2")));
});

Deno.test("highestSupportedVersion takes the highest 1.x, as upstream's", () => {
  assert.equal(formatGenericVersion(highestSupportedVersion(["1.0.0", "1.3.0", "2.0.0"])), "1.3.0");
  assert.equal(formatGenericVersion(highestSupportedVersion(["v1.10.0", "1.9.0"])), "1.10.0");
  assert.throws(() => highestSupportedVersion([]), /empty array for supported versions/);
  assert.throws(
    () => highestSupportedVersion(["0.3.0"]),
    /highest supported version reported is 0.3.0, must be v1.x/,
  );
  assert.throws(
    () => highestSupportedVersion(["2.0.0", "bad"]),
    /could not find a highest supported version from versions \(\[2.0.0 bad\]\) reported: could not parse "bad" as version/,
  );
});
