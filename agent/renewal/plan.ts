/**
 * The renewal loop's judgement, as pure functions of values: what to do
 * next with one identity, how long to wait after a failure, and whether a
 * loop is still making progress. The daemon only carries these out.
 */
import type { Assessment, NodeCredential } from '../credential/assess.js';
import { ApiError, CsrRejectedError, NeedsBootstrapError, TimedOutError, UnreachableError } from '../errors.js';
import { MIN_RETRY_MS, nextDelay, retryAfterMs, type BackoffOptions } from '../time/backoff.js';
import { isDue, renewalDeadline, type Validity } from './deadline.js';
import type { Config } from '../config/types.js';
import { identitiesFor } from '../config/identities.js';

/** Renewal retries: 2 s doubling to 5 min; a denied CSR waits the full cap. */
export const RENEW_BACKOFF: Readonly<BackoffOptions> = { initial: 2_000, factor: 2, cap: 300_000, jitter: 0.1 };
/** How long a loop that cannot act waits between looks (besides file events and nudges). */
export const RECHECK_MS = 60_000;

export type Action =
  /** Valid and not due: look again at `until`. */
  | { kind: 'sleep'; until: Date }
  /** Ask for a new certificate with the node's kubelet credential. */
  | { kind: 'renew'; why: string; requester: NodeCredential }
  /** The kubelet has nothing that authenticates: use the bootstrap kubeconfig. */
  | { kind: 'bootstrap'; why: string }
  /** Another identity whose requester, the kubelet, has no credential yet: look again at `until`. */
  | { kind: 'wait-for-kubelet'; why: string; until: Date }
  /** Someone else (the kubelet's own rotation) renews this one: look again at `until`. */
  | { kind: 'step-aside'; why: string; until: Date };

/** How often a loop that steps aside looks at the files and the kubelet's configuration again (besides file events). */
export const STEP_ASIDE_RECHECK_MS = 5 * RECHECK_MS;
/** While the other party's files are briefly missing (the kubelet removes its link before it renames the new one in). */
export const STEP_ASIDE_SETTLE_MS = 10_000;

export interface ActionInput {
  own: Assessment;
  /** What can authenticate a CSR for this identity, or null. */
  requester: NodeCredential | null;
  /** Why the kubelet has no usable credential, when it has none. */
  kubeletProblem: string | null;
  /** The renewal deadline of `own` when it is usable. */
  deadline: Date | null;
  /** `kubeboot renew` or SIGHUP: renew even when not due. */
  force: boolean;
  /**
   * Why someone else renews this identity (the kubelet with
   * rotateCertificates: true), or null when kubeboot does. kubeboot then
   * neither renews nor is forced to, and issues only when nothing valid is
   * left (the other party cannot renew an expired certificate either).
   */
  renewedElsewhere?: string | null;
  now: Date;
}

export function nextAction(o: ActionInput): Action {
  const { own, now } = o;
  const elsewhere = o.renewedElsewhere ?? null;
  if (elsewhere !== null) {
    if (own.state === 'usable')
      return {
        kind: 'step-aside',
        why: elsewhere,
        until: new Date(Math.min(own.notAfter.getTime(), now.getTime() + STEP_ASIDE_RECHECK_MS)),
      };
    // A valid credential is still around (in memory): the files are in the other party's hands, mid-swap or about to be rewritten.
    if (o.requester !== null && own.identity.requester === 'bootstrap-token')
      return {
        kind: 'step-aside',
        why: `${elsewhere}; its files are not usable right now (${own.reason}), looking again shortly`,
        until: new Date(now.getTime() + STEP_ASIDE_SETTLE_MS),
      };
  }
  if (own.state === 'usable' && !o.force && o.deadline !== null && !isDue(o.deadline, now)) return { kind: 'sleep', until: o.deadline };
  const why = o.force
    ? 'renewal requested'
    : own.state === 'usable'
      ? `renewal due (deadline ${o.deadline?.toISOString()}, expires ${own.notAfter.toISOString()})`
      : `needs a certificate (${own.reason})`;
  if (o.requester !== null) return { kind: 'renew', why, requester: o.requester };
  if (own.identity.requester === 'bootstrap-token') return { kind: 'bootstrap', why };
  return {
    kind: 'wait-for-kubelet',
    why: `waiting for the kubelet credential (${o.kubeletProblem ?? 'not known yet'})`,
    until: new Date(now.getTime() + RECHECK_MS),
  };
}

/**
 * When a certificate is due. The 70–90 % jitter is drawn by the caller once
 * per certificate. A margin close to the whole lifetime would make every
 * fresh certificate due at once: never renew again within 5 % of the
 * remaining lifetime after the last success.
 */
export function deadlineFor(cert: Validity, margin: number, random: () => number, lastSuccess: Date | null): { at: Date; held: boolean } {
  const at = renewalDeadline(cert, { margin }, random);
  if (lastSuccess === null) return { at, held: false };
  const floor = lastSuccess.getTime() + 0.05 * (cert.notAfter.getTime() - lastSuccess.getTime());
  return at.getTime() < floor ? { at: new Date(floor), held: true } : { at, held: false };
}

export interface RetryPlan {
  /** Metric label: denied, needs-bootstrap, timeout, http-<status>, error. */
  reason: string;
  waitMs: number;
  /** The attempt number for the next failure's backoff. */
  attempt: number;
}

/**
 * How long to wait after a failed pass. Every wait is bounded: by the
 * backoff cap, and by the current certificate's remaining lifetime (a
 * Retry-After of a year must not let a certificate expire unrenewed), and
 * never below MIN_RETRY_MS.
 */
export function retryPlan(
  err: unknown,
  attempt: number,
  o: { now: Date; notAfter: Date | null; random: () => number; backoff?: BackoffOptions },
): RetryPlan {
  const backoff = o.backoff ?? RENEW_BACKOFF;
  if (err instanceof NeedsBootstrapError) return { reason: 'needs-bootstrap', waitMs: RECHECK_MS, attempt };
  let reason = 'error';
  let wait: number | null = null;
  let next = attempt;
  if (err instanceof CsrRejectedError) {
    reason = 'denied';
    wait = backoff.cap;
  } else if (err instanceof ApiError) {
    reason = `http-${err.status}`;
    wait = retryAfterMs(err.retryAfter, o.now);
  } else if (err instanceof TimedOutError || err instanceof UnreachableError) {
    reason = 'timeout';
  }
  if (wait === null) {
    wait = nextDelay(attempt, backoff, o.random);
    next = attempt + 1;
  }
  wait = Math.min(wait, backoff.cap);
  const lifetimeLeft = o.notAfter === null ? 0 : o.notAfter.getTime() - o.now.getTime();
  if (lifetimeLeft > 0) wait = Math.min(wait, lifetimeLeft);
  return { reason, waitMs: Math.max(MIN_RETRY_MS, wait), attempt: next };
}

/** A sleeping daemon shows progress at least this often, so liveness can tell asleep from stuck. */
export const SLEEP_CHUNK_MS = 60_000;
/** Slack on every liveness bound: an event loop under load is late, not stuck. */
export const LIVENESS_GRACE_MS = 30_000;
/** Beyond the CSR waits and hooks, what requests and disk writes of one step may take. */
const STEP_OVERHEAD_MS = 5 * 60_000;

/**
 * The longest one step may take: CA discovery, retrying the CSR create, the
 * CSR wait and retrying the proof (each bounded by waitTimeout), the hooks,
 * and requests.
 */
export function stepBoundMs(config: Config): number {
  const hooks = Math.max(0, ...identitiesFor(config).map((i) => i.hooks.length));
  return (4 * config.waitTimeout + hooks * config.renewal.hookTimeout) * 1000 + STEP_OVERHEAD_MS;
}

/**
 * Liveness, on the monotonic clock: the time by which something started at
 * `startedAt` that may take `spanMs` (a step, a chunk of sleep, a look) must
 * show progress again. Past it, it is stuck, and /healthz and the watchdog say so.
 */
export function progressBy(startedAt: number, spanMs: number): number {
  return startedAt + spanMs + LIVENESS_GRACE_MS;
}
