/**
 * Regenerates the KubeletConfiguration reference in README.md from the field table
 * (`deno task docs`).
 */

import { updateReadme } from "../src/apis/config_reference.ts";

const readme = new URL("../README.md", import.meta.url);
await Deno.writeTextFile(readme, updateReadme(await Deno.readTextFile(readme)));
