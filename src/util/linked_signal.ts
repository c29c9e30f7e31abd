/**
 * @module
 * {@link linkSignals}: a signal that aborts when any of its sources does, as `AbortSignal.any`,
 * and lets go of its sources when disposed. Deno's `AbortSignal.any` keeps each signal it made
 * reachable from its sources until they abort (about 450 bytes each, measured with 20,000 calls
 * against one source that lives on): a loop that combines its long-lived stop signal with a
 * per-wait one at every wait grows without bound. Loops that wait often use this instead, and
 * dispose of it when the wait ends.
 */

/** A signal linked to its sources until disposed. */
export interface LinkedSignal extends Disposable {
  /** Aborts with the reason of the first source that aborts (at once if one already has). */
  readonly signal: AbortSignal;
}

/** Links a new signal to `sources`; dispose of it to remove its listeners from them. */
export function linkSignals(...sources: AbortSignal[]): LinkedSignal {
  const ctl = new AbortController();
  const aborted = sources.find((s) => s.aborted);
  if (aborted) {
    ctl.abort(aborted.reason);
    return { signal: ctl.signal, [Symbol.dispose]() {} };
  }
  const unlink = () => {
    for (const s of sources) s.removeEventListener("abort", onAbort);
  };
  function onAbort(this: AbortSignal) {
    unlink();
    ctl.abort(this.reason);
  }
  for (const s of sources) s.addEventListener("abort", onAbort, { once: true });
  return { signal: ctl.signal, [Symbol.dispose]: unlink };
}
