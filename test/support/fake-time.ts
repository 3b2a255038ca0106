/**
 * Helpers for driving code on a FakeClock: let the code under test reach its
 * next timer (mocked responses and crypto finish on the real event loop),
 * then move the fake clock. Nothing here sleeps; the real-time bound only
 * turns a hang into a failure.
 */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../agent/log.js';
import type { FakeClock } from '../../agent/time/clock.js';

/** Yields to the event loop until `probe()` holds. */
export async function until(probe: () => boolean, what: string, boundMs = 10_000): Promise<void> {
  const end = performance.now() + boundMs;
  while (performance.now() < end) {
    if (probe()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`never saw: ${what}`);
}

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
    await until(() => done || clock.pending >= idle, 'the code to settle or arm its next timer');
    if (done) return result;
    clock.advance(clock.nextTimerIn()!);
  }
}
