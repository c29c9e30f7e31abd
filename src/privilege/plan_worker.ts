/**
 * @module
 * The launcher's planner (permission_set.ts {@link planSandbox}), run as a short-lived Worker that
 * may read files but not write them, connect or run anything: it parses the command line and
 * the configuration, answers with the plan, and is terminated. Its isolate goes with it, so
 * the parsers it loads never stay in the launcher's. Has no upstream counterpart.
 */

import { planSandbox, type SandboxPlan, type SandboxPlanRequest } from "./permission_set.ts";

/** What the planner answers: the plan, or why it could not make one. */
export type SandboxPlanAnswer = { readonly plan: SandboxPlan } | { readonly error: string };

/** The worker's global scope (Deno's lib types `self` as a window). */
const scope = self as unknown as {
  onmessage: ((e: MessageEvent<SandboxPlanRequest>) => void) | null;
  postMessage(m: SandboxPlanAnswer): void;
};

scope.onmessage = async (e) => {
  try {
    scope.postMessage({ plan: await planSandbox(e.data) });
  } catch (err) {
    scope.postMessage({ error: err instanceof Error ? err.message : String(err) });
  }
};
