/**
 * Waits on a `Clock`, safe for spans months long: Node's setTimeout
 * overflows above 2^31−1 ms (~24.8 days) and fires at once, so no timer is
 * armed for longer than one chunk. The daemon's sleep toward a wall-clock
 * deadline is its own loop (daemon/daemon.ts): chunks of `delay`, each
 * wake reading the schedule again.
 */
import type { Clock, TimerHandle } from './clock.js';

/** The longest single timer. */
export const DEFAULT_CHUNK_MS = 60 * 60 * 1000;

export interface SleepOptions {
  signal?: AbortSignal;
  /** Longest single timer, ms. */
  chunkMs?: number;
}

/**
 * Resolves after `ms` of monotonic time (unaffected by wall-clock steps);
 * for retry back-off, where "2 s later" must not become "an hour later"
 * because NTP stepped the clock back.
 */
export function delay(ms: number, clock: Clock, options: SleepOptions = {}): Promise<void> {
  const chunk = options.chunkMs ?? DEFAULT_CHUNK_MS;
  let remaining = Math.max(0, ms);
  return wait(options.signal, clock, (arm, done) => {
    const step = (): void => {
      if (remaining <= 0) {
        done();
        return;
      }
      const slice = Math.min(remaining, chunk);
      remaining -= slice;
      arm(step, slice);
    };
    step();
  });
}

/**
 * `delay` with Node's abort error: a drop-in for node:timers/promises'
 * `setTimeout(ms, undefined, { signal })` on a `Clock`. An abort rejects with
 * an `AbortError` ("The operation was aborted", the signal's reason as its
 * cause), as Node's does, so what callers log and exit with stays the same.
 */
export function pause(ms: number, clock: Clock, signal?: AbortSignal): Promise<void> {
  return delay(ms, clock, signal ? { signal } : {}).catch((reason: unknown) => {
    throw abortError(reason);
  });
}

/** Node's AbortError as node:timers/promises throws it (its class is internal). */
function abortError(cause: unknown): Error {
  return Object.assign(new Error('The operation was aborted', { cause }), { name: 'AbortError', code: 'ABORT_ERR' });
}

/** AbortSignal.timeout on a Clock: aborts with a TimeoutError as that one does. */
export function abortAfter(ms: number, clock: Clock): { signal: AbortSignal; cancel: () => void } {
  const controller = new AbortController();
  const handle = clock.setTimeout(() => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')), ms);
  return { signal: controller.signal, cancel: () => clock.clearTimeout(handle) };
}

/** setInterval on a Clock: `fn` every `ms` until cancelled. */
export function every(ms: number, clock: Clock, fn: () => void): { cancel: () => void } {
  let handle: TimerHandle;
  const tick = (): void => {
    handle = clock.setTimeout(tick, ms);
    fn();
  };
  handle = clock.setTimeout(tick, ms);
  return { cancel: () => clock.clearTimeout(handle) };
}

type Arm = (fn: () => void, ms: number) => void;

/** Shared plumbing: one live timer at a time, cleared on abort. */
function wait(signal: AbortSignal | undefined, clock: Clock, run: (arm: Arm, done: () => void) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    let handle: TimerHandle | undefined;
    const onAbort = (): void => {
      if (handle) clock.clearTimeout(handle);
      reject(signal?.reason);
    };
    const done = (): void => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    run((fn, ms) => {
      handle = clock.setTimeout(fn, ms);
    }, done);
  });
}
