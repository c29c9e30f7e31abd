/**
 * @module
 * The cost of one klog text line logged from under 30 awaits, as a pod worker logs: most of it is
 * finding the call site (klog/klog.ts caller). `deno task bench:micro`.
 */

import { createLogger } from "../klog/klog.ts";

const log = createLogger({ write: () => {}, now: () => new Date(0), pid: 1 });
const pod = log.with({ pod: "default/web-0" });

async function under(awaits: number, fn: () => void): Promise<void> {
  if (awaits > 0) {
    await Promise.resolve();
    return under(awaits - 1, fn);
  }
  fn();
}

Deno.bench("klog: one info line under 30 awaits", async () => {
  await under(30, () => pod.info("Pod started", { attempt: 1 }));
});

Deno.bench("klog: 30 awaits, nothing logged (the baseline)", async () => {
  await under(30, () => {});
});
