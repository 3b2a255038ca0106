/**
 * Time as a value passed in. The wall clock (`now`) and the timers are
 * separate on purpose: Node's timers run on the monotonic clock, which does
 * not move when an administrator steps the wall clock or the machine is
 * suspended, so a deadline expressed in wall-clock time must be re-checked
 * against `now()` whenever a timer fires (see timer.ts).
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

interface FakeTimer {
  readonly id: number;
  readonly due: number; // on the fake monotonic clock
  readonly fn: () => void;
}

/**
 * A clock for tests. `advance` moves wall and monotonic time together and
 * fires due timers in order; `jump` moves only the wall clock, modelling an
 * NTP step, `date -s` or a suspend/resume (timers keep their own schedule).
 */
export class FakeClock implements Clock {
  #wall: number;
  #mono = 0;
  #nextId = 1;
  #timers: FakeTimer[] = [];

  constructor(start: Date | number = Date.UTC(2025, 0, 1)) {
    this.#wall = typeof start === 'number' ? start : start.getTime();
  }

  now(): Date {
    return new Date(this.#wall);
  }

  monotonic(): number {
    return this.#mono;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer: FakeTimer = { id: this.#nextId++, due: this.#mono + Math.max(0, ms), fn };
    this.#timers.push(timer);
    return timer;
  }

  clearTimeout(handle: TimerHandle): void {
    this.#timers = this.#timers.filter((t) => t !== handle);
  }

  /** Timers armed and not yet fired. */
  get pending(): number {
    return this.#timers.length;
  }

  /** Milliseconds until the next timer fires, or null when none is armed. */
  nextTimerIn(): number | null {
    const next = this.#earliest();
    return next ? next.due - this.#mono : null;
  }

  /** Moves wall-clock time only; no timer fires. Negative values step back. */
  jump(ms: number): void {
    this.#wall += ms;
  }

  /** Moves both clocks by `ms`, firing each due timer synchronously, in order. */
  advance(ms: number): void {
    const target = this.#mono + ms;
    for (let t = this.#earliest(); t && t.due <= target; t = this.#earliest()) {
      this.#fire(t);
    }
    this.#wall += target - this.#mono;
    this.#mono = target;
  }

  /**
   * Like `advance`, but lets promise chains and I/O callbacks run after each
   * timer, so code that awaits between timers re-arms them before the clock
   * moves on.
   */
  async tick(ms: number): Promise<void> {
    const target = this.#mono + ms;
    await flush();
    for (let t = this.#earliest(); t && t.due <= target; t = this.#earliest()) {
      this.#fire(t);
      await flush();
    }
    this.#wall += target - this.#mono;
    this.#mono = target;
  }

  #earliest(): FakeTimer | undefined {
    let best: FakeTimer | undefined;
    for (const t of this.#timers) {
      if (!best || t.due < best.due || (t.due === best.due && t.id < best.id)) best = t;
    }
    return best;
  }

  #fire(t: FakeTimer): void {
    this.#wall += t.due - this.#mono;
    this.#mono = t.due;
    this.clearTimeout(t);
    t.fn();
  }
}

/** Lets pending microtasks and immediates run; not a sleep. */
function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
