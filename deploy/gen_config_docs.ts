/**
 * Regenerates the KubeletConfiguration reference in docs/configuration.md from the field table
 * (`deno task docs`); the page's text around the generated table is kept.
 */

import { REFERENCE_FILE, updateConfigReference } from "../src/apis/config_reference.ts";

const page = new URL(`../${REFERENCE_FILE}`, import.meta.url);
await Deno.writeTextFile(page, updateConfigReference(await Deno.readTextFile(page)));
