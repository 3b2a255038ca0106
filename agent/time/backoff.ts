/**
 * Retry pacing after a failed renewal attempt: pure, so the schedule is a
 * function of the attempt number and a random number.
 */

export interface BackoffOptions {
  /** Delay before the first retry, ms. */
  initial: number;
  factor: number;
  /** Upper bound on the delay before jitter, ms. */
  cap: number;
  /** Adds up to this fraction of the delay at random (0.1 = up to +10 %). */
  jitter: number;
}

/**
 * matches client-go certificate_manager: Backoff{Duration: 2s, Factor: 2,
 * Jitter: 0.1, Steps: 5}, then PollInfinite(32s) — i.e. 2, 4, 8, 16, 32 s and
 * 32 s from then on. Expressed here as a cap of 32 s.
 */
export const DEFAULT_BACKOFF: Readonly<BackoffOptions> = {
  initial: 2_000,
  factor: 2,
  cap: 32_000,
  jitter: 0.1,
};

/** No retry comes sooner than this, whatever a server says (Retry-After: 0) or a short lifetime allows: never a hot loop. */
export const MIN_RETRY_MS = 1_000;

/**
 * Delay before retry number `attempt` (0 = first retry). Like apimachinery's
 * wait.Jitter, jitter only lengthens the delay and is applied after the cap.
 */
export function nextDelay(attempt: number, opts: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const base = Math.min(opts.cap, opts.initial * Math.pow(opts.factor, Math.max(0, attempt)));
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.round(base * (1 + opts.jitter * r));
}

/**
 * Parses an HTTP Retry-After header (RFC 9110 §10.2.3): delta-seconds or an
 * HTTP-date. Returns the wait in ms (0 for a date in the past), or null when
 * absent or malformed.
 */
export function retryAfterMs(headerValue: string | undefined, now: Date): number | null {
  if (headerValue === undefined) return null;
  const value = headerValue.trim();
  if (value === '') return null;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  // The three HTTP-date forms: IMF-fixdate and RFC 850 end in GMT; asctime
  // carries no zone but means UTC. Anything else (Date.parse would take "2025")
  // is rejected.
  const asctime = /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$/.test(value);
  if (!asctime && !/ GMT$/.test(value)) return null;
  const at = Date.parse(asctime ? `${value} GMT` : value);
  if (Number.isNaN(at)) return null;
  return Math.max(0, at - now.getTime());
}
