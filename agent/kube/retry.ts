/**
 * Retries one API call through the failures that pass by themselves: a
 * connection refused or reset while the API server restarts, 429 from API
 * Priority and Fairness, 5xx. cloud-init runs `kubeboot bootstrap` once, so
 * giving up at the first refused connection would strand the node. Retrying
 * a CSR create is safe: the name is a digest of the request, so a create
 * whose answer was lost comes back as 409 and is adopted.
 */
import { ApiError, TransportError, UnreachableError } from '../errors.js';
import type { Logger } from '../log.js';
import { DEFAULT_BACKOFF, MIN_RETRY_MS, nextDelay, retryAfterMs } from '../time/backoff.js';
import { systemClock, type Clock } from '../time/clock.js';
import { pause } from '../time/timer.js';

export function isTransient(err: unknown): boolean {
  return err instanceof TransportError || (err instanceof ApiError && (err.status === 429 || err.status >= 500));
}

/** Waits before retry `attempt`: the server's Retry-After when it gave one, else the backoff; never past the backoff cap. */
export function transientWaitMs(err: unknown, attempt: number, random: () => number, now: Date): number {
  const told = err instanceof ApiError ? retryAfterMs(err.retryAfter, now) : null;
  return Math.max(MIN_RETRY_MS, Math.min(told ?? nextDelay(attempt, DEFAULT_BACKOFF, random), DEFAULT_BACKOFF.cap));
}

export async function retryTransient<T>(
  what: string,
  call: () => Promise<T>,
  o: { timeoutMs: number; logger: Logger; signal?: AbortSignal; random?: () => number; clock?: Clock },
): Promise<T> {
  const clock = o.clock ?? systemClock;
  const deadline = clock.monotonic() + o.timeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      if (!isTransient(err) || o.signal?.aborted) throw err;
      const wait = transientWaitMs(err, attempt, o.random ?? Math.random, clock.now());
      if (clock.monotonic() + wait > deadline) {
        throw new UnreachableError(
          `${what}: gave up after ${Math.round(o.timeoutMs / 1000)}s of failures; last: ${(err as Error).message}`,
        );
      }
      o.logger.warn(`${what}: ${(err as Error).message}; retrying in ${(wait / 1000).toFixed(1)}s`);
      await pause(wait, clock, o.signal);
    }
  }
}
