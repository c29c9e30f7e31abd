/**
 * @module
 * The parts the kubelet started, each with a name, and a wait until every one has stopped that
 * says, while it waits, which parts are still stopping. The command gives shutdown 15 s before
 * it exits anyway (`app/kubelet_command.ts`); these lines name what held it. This agent's own:
 * upstream's kubelet returns from Run on the signal without waiting for its goroutines.
 */
import type { Clock } from "./clock.ts";
import type { Logger } from "../klog/klog.ts";

/** A part the kubelet started: its name, and a promise that settles once it has stopped. */
export interface Running {
  readonly name: string;
  readonly done: Promise<unknown>;
}

/** Names `done`, a part that settles once it has stopped. */
export function running(name: string, done: Promise<unknown>): Running {
  return { name, done };
}

/** The same parts, each name prefixed with `prefix` and a slash. */
export function within(prefix: string, parts: readonly Running[]): Running[] {
  return parts.map((p) => running(`${prefix}/${p.name}`, p.done));
}

/** How often {@link awaitStopped} names the parts still stopping. */
export const STILL_STOPPING_EVERY_MS = 5_000;

/** Options of {@link awaitStopped}. */
export interface AwaitStoppedOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  /** @default STILL_STOPPING_EVERY_MS */
  readonly everyMs?: number;
}

/**
 * Resolves once every part has settled (a rejection counts as stopped and is not passed on);
 * meanwhile, every `everyMs`, logs the names of the parts not yet settled, in start order.
 */
export async function awaitStopped(
  parts: readonly Running[],
  o: AwaitStoppedOptions,
): Promise<void> {
  const left = new Set(parts);
  const all = Promise.allSettled(parts.map((p) => p.done.finally(() => left.delete(p))));
  const every = o.everyMs ?? STILL_STOPPING_EVERY_MS;
  const stop = new AbortController();
  const start = o.clock.now();
  const report = (async () => {
    for (;;) {
      try {
        await o.clock.sleep(every, stop.signal);
      } catch {
        return;
      }
      if (left.size === 0) return;
      o.logger.info("Still stopping", {
        parts: [...left].map((p) => p.name),
        waited: `${Math.round((o.clock.now() - start) / 1000)}s`,
      });
    }
  })();
  await all;
  stop.abort();
  await report;
}
