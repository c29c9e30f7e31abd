/**
 * @module
 * The agent's entry point inside its sandbox (launcher.ts): a Worker that takes the command
 * line and the host view's root from the launcher, runs the kubelet command (app/kubelet_command.ts) under the
 * Worker's permission set, and tells the launcher its exit code.
 */

import { main } from "../app/kubelet_command.ts";
import { setHostRoot } from "./host_root.ts";
import type { AgentExit, AgentStart } from "./permission_set.ts";
import { answered, type HostCall, type HostCallAnswer, useLauncher } from "./launcher_calls.ts";

/** The worker's global scope (Deno's lib types `self` as a window). */
const scope = self as unknown as {
  onmessage: ((e: MessageEvent<AgentStart | HostCallAnswer>) => void) | null;
  postMessage(m: AgentExit | HostCall): void;
};

scope.onmessage = async (e) => {
  if ("call" in e.data) return answered(e.data);
  const start = e.data;
  useLauncher((call) => scope.postMessage(call));
  setHostRoot(start.hostRoot);
  const exit = (code: number) => scope.postMessage({ exit: code });
  exit(await main(start.args, { exit, sandboxed: true }));
};
