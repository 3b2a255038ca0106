/**
 * Time as a value passed in. The wall clock (`now`) and the timers are
 * separate on purpose: Node's timers run on the monotonic clock, which does
 * not move when an administrator steps the wall clock or the machine is
 * suspended, so a deadline expressed in wall-clock time must be re-checked
 * against `now()` whenever a timer fires (see timer.ts). Tests drive the
 * same code on `FakeClock` (test/support/fake-time.ts), which the product
 * does not ship.
 */

/** Opaque; only meaningful to the clock that returned it. */
export type TimerHandle = object;

export interface Clock {
  now(): Date;
  /** Milliseconds on a clock that never steps (for "how long ago", not "what time"). */
  monotonic(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** Node clamps a longer delay to 1 ms (TimeoutOverflowWarning) and fires at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export const systemClock: Clock = {
  now: () => new Date(),
  monotonic: () => performance.now(),
  // Clamped rather than overflowing: firing early is harmless to callers that
  // re-check now(), firing after 1 ms is not.
  setTimeout: (fn, ms) => setTimeout(fn, Math.min(Math.max(ms, 0), MAX_TIMER_MS)),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};
