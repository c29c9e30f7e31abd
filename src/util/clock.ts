/**
 * @module
 * Time as the agent's managers see it: a `Clock` they are given rather than the global timers,
 * so tests drive time with {@link FakeClock} instead of sleeping; and {@link abortable}, a wait
 * that ends when a signal aborts. Corresponds to upstream's
 * `k8s.io/utils/clock` (`clock.Clock` and `testing.FakeClock`).
 */

/** The time source every manager takes. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/**
 * The reason a loop aborts a wait of its own with (a wake-up, a sleep it no longer needs): the
 * AbortError that `abort()` gives, made once. `abort()` makes a new DOMException, with its stack,
 * at each call: loops that wake tens of times a second with 250 pods paid 2 % of the agent's CPU
 * for them.
 */
export const WAIT_ENDED: DOMException = new DOMException(
  "The signal has been aborted",
  "AbortError",
);

/**
 * `p`, or the abort reason as soon as `signal` aborts, whichever comes first (`p` is left to
 * settle on its own). Without a signal, `p`.
 */
export function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) {
    p.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/**
 * The longest delay one timer takes (2^31 - 1 ms, about 24.8 days): a longer one fires at once
 * (the timers take a signed 32-bit delay), where Go's timers take any duration. A client
 * certificate valid for a year is rotated about 9 months on.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** The wall clock. */
export const realClock: Clock = {
  now: () => Date.now(),
  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      // Monotonic, as Go's timers: a step of the wall clock neither stretches nor cuts it.
      const end = performance.now() + ms;
      let timer: ReturnType<typeof setTimeout>;
      const onAbort = () => {
        clearTimeout(timer);
        reject(signal?.reason);
      };
      // A sleep past one timer's range takes several, each up to the end.
      const arm = (left: number) => {
        timer = setTimeout(() => {
          const rest = end - performance.now();
          if (rest > 0 && left > MAX_TIMER_MS) return arm(rest);
          signal?.removeEventListener("abort", onAbort);
          resolve();
        }, Math.min(Math.max(0, left), MAX_TIMER_MS));
      };
      arm(ms);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  },
};

interface Waiter {
  readonly at: number;
  readonly resolve: () => void;
}

/** A clock that moves only when a test calls {@link FakeClock.step}. */
export class FakeClock implements Clock {
  #now: number;
  #waiters: Waiter[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const waiter: Waiter = {
        at: this.#now + Math.max(0, ms),
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  /** How many sleeps are pending. */
  get waiters(): number {
    return this.#waiters.length;
  }

  /** Moves time to the earliest pending sleep's end and wakes it; does nothing when none. */
  stepToNext(): void {
    if (this.#waiters.length === 0) return;
    this.step(Math.min(...this.#waiters.map((w) => w.at)) - this.#now);
  }

  /** Moves time forward and wakes every sleep that is due, in time order. */
  step(ms: number): void {
    this.#now += ms;
    const due = this.#waiters.filter((w) => w.at <= this.#now).sort((a, b) => a.at - b.at);
    this.#waiters = this.#waiters.filter((w) => w.at > this.#now);
    for (const w of due) w.resolve();
  }
}
