/**
 * Helpers for driving code on a FakeClock: let the code under test reach its
 * next timer (mocked responses and crypto finish on the real event loop),
 * then move the fake clock. Nothing here sleeps; the real-time bound only
 * turns a hang into a failure.
 */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../agent/log.js';
import type { Clock, TimerHandle } from '../../agent/time/clock.js';
import { until } from './until.js';

/** A logger whose lines (parsed JSON) a test can read. */
export function capturingLogger(level = 'info'): { logger: Logger; lines: { level: string; message: string }[] } {
  const lines: { level: string; message: string }[] = [];
  const logger = createLogger({
    level,
    format: 'json',
    stream: new Writable({ write: (chunk, _e, done) => (lines.push(JSON.parse(String(chunk))), done()) }),
  });
  return { logger, lines };
}

/**
 * Runs `p` to its end on `clock`: each time the code is idle (at least
 * `idle` timers armed), the clock moves to the next timer. Resolves with the
 * value or the error.
 */
export async function runOn<T>(clock: FakeClock, p: Promise<T>, idle = 1): Promise<T | unknown> {
  let done = false;
  const result = p.then(
    (v) => ((done = true), v),
    (e: unknown) => ((done = true), e),
  );
  for (;;) {
    await until('the code to settle or arm its next timer', () => done || clock.pending >= idle, 10_000);
    if (done) return result;
    clock.advance(clock.nextTimerIn()!);
  }
}

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
