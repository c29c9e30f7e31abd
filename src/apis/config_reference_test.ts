import assert from "node:assert/strict";
import { renderConfigReference, updateReadme } from "./config_reference.ts";

Deno.test("renderConfigReference lists fields with type, default and flag", () => {
  const text = renderConfigReference();
  assert.match(
    text,
    /\| `syncFrequency` \| `metav1.Duration` \| `"1m0s"` \| `--sync-frequency` \|/,
  );
  assert.match(
    text,
    /\| `authentication.anonymous.enabled` \| `\*bool` \| `false` \| `--anonymous-auth` \|/,
  );
});

Deno.test("updateReadme keeps README.md's config reference in step with the field table", async () => {
  const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));
  assert.equal(readme, updateReadme(readme), "README.md is stale: run `deno task docs`");
});
