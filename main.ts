/**
 * @module
 * The kubelet's only entry point: the launcher (src/privilege/launcher.ts) runs the kubelet
 * command (src/app/kubelet_command.ts, upstream's NewKubeletCommand) in its permission set, or in
 * this process's own when it cannot. Imports nothing else, so that the launcher's isolate
 * stays small.
 */

import { launch } from "./src/privilege/launcher.ts";

if (import.meta.main) {
  Deno.exit(await launch(Deno.args));
}
