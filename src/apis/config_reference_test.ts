import assert from "node:assert/strict";
import {
  REFERENCE_END,
  REFERENCE_FILE,
  REFERENCE_START,
  renderConfigReference,
  updateConfigReference,
} from "./config_reference.ts";

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

Deno.test("updateConfigReference replaces only the text between the markers", () => {
  const page = `# Title\n\nBefore.\n\n${REFERENCE_START}\nold table\n${REFERENCE_END}\n\nAfter.\n`;
  const updated = updateConfigReference(page);
  assert.ok(updated.startsWith(`# Title\n\nBefore.\n\n${REFERENCE_START}\n\n| Field |`));
  assert.ok(updated.endsWith(`|\n\n${REFERENCE_END}\n\nAfter.\n`));
  assert.ok(!updated.includes("old table"));
  assert.equal(updateConfigReference(updated), updated);
});

Deno.test("updateConfigReference names the file and the markers when they are missing", () => {
  assert.throws(
    () => updateConfigReference("# Title\n"),
    (e: Error) => e.message.includes(REFERENCE_FILE) && e.message.includes(REFERENCE_START),
  );
  assert.throws(
    () => updateConfigReference(`${REFERENCE_END}\n${REFERENCE_START}\n`),
    /lacks the config-reference markers/,
  );
});

Deno.test("updateConfigReference keeps docs/configuration.md in step with the field table", async () => {
  const path = new URL(`../../${REFERENCE_FILE}`, import.meta.url);
  const page = await Deno.readTextFile(path);
  assert.equal(
    page,
    updateConfigReference(page),
    `${REFERENCE_FILE} is stale: run \`deno task docs\``,
  );
});
