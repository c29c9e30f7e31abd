/**
 * @module
 * The launcher's planner (permission_set.ts {@link planLaunch}), run as a short-lived Worker that
 * may read files but not write them, connect or run anything: it parses the command line and
 * the configuration, answers with the plan, and is terminated. Its isolate goes with it, so
 * the parsers it loads never stay in the launcher's. Has no upstream counterpart.
 */

import { type LaunchPlan, type LaunchPlanRequest, planLaunch } from "./permission_set.ts";

/** What the planner answers: the plan, or why it could not make one. */
export type LaunchPlanAnswer = { readonly plan: LaunchPlan } | { readonly error: string };

/** The worker's global scope (Deno's lib types `self` as a window). */
const scope = self as unknown as {
  onmessage: ((e: MessageEvent<LaunchPlanRequest>) => void) | null;
  postMessage(m: LaunchPlanAnswer): void;
};

scope.onmessage = async (e) => {
  try {
    scope.postMessage({ plan: await planLaunch(e.data) });
  } catch (err) {
    scope.postMessage({ error: err instanceof Error ? err.message : String(err) });
  }
};
