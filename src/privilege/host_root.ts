/**
 * @module
 * Where this process reads the host's /proc and /sys: "/" normally, the host view's root
 * (host_view.ts) when the agent runs in its sandbox (permission_set.ts), where Deno denies the real
 * paths. Set once, before anything reads; the modules that read host files under a `root`
 * option default it to {@link hostRoot}. Has no upstream counterpart.
 */

import { posix } from "node:path";

let current = "/";

/** The root that stands for "/" when reading /proc, /sys and the machine's id files. */
export function hostRoot(): string {
  return current;
}

/** Sets {@link hostRoot}; the sandboxed agent calls it first thing. */
export function setHostRoot(root: string): void {
  if (!root.startsWith("/")) throw new Error(`host root '${root}' is not an absolute path`);
  current = root;
}

/** The absolute host `path` (e.g. "/proc/meminfo") as this process reaches it. */
export function hostPath(path: string): string {
  return current === "/" ? path : posix.join(current, path);
}
