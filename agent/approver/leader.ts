/**
 * Leader election on a coordination.k8s.io/v1 Lease, after client-go's
 * leaderelection package: try to take or renew the Lease every retry period,
 * with optimistic concurrency through resourceVersion; another holder's
 * lease counts as valid for leaseDuration after *we* saw it change (local
 * clock, so skew between nodes does not matter); a leader that has not
 * renewed within renewDeadline stops leading at once, before its lease can
 * expire for the others (renewDeadline < leaseDuration).
 *
 * The renew deadline runs from when the last successful write was sent: the
 * others see the renewal only once it is written, so the lease is ours until
 * at least then + leaseDuration however late the answer came. A leader
 * renews with one PUT on the Lease as it last wrote it (client-go's fast
 * path), reading it first only after a conflict, and its next attempt is due
 * retryPeriod after this one began, not after a slow answer. A slow API
 * server then costs the renew deadline one round trip, where it cost four
 * (GET and PUT of this renewal and of the last) plus a whole retry period:
 * a leader whose every renewal succeeded could stop leading and queue
 * every CSR again on taking the lease back.
 */
import { ApiError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { expectObject } from '../kube/objects.js';
import type { Logger } from '../log.js';
import { systemClock, type Clock } from '../time/clock.js';
import { delay } from '../time/timer.js';

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  /** Lease timing on its monotonic clock, Lease times from its wall clock, the retry period on its timers. */
  clock?: Clock;
  onChange?: (leading: boolean) => void;
  /**
   * Whether this process can do a leader's work now; while it cannot, it
   * neither takes the lease nor keeps it (a leader that cannot work would
   * keep every healthy standby out).
   */
  mayLead?: () => boolean;
}

interface LeaseSpec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

interface Lease {
  apiVersion: 'coordination.k8s.io/v1';
  kind: 'Lease';
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec: LeaseSpec;
}

/** MicroTime wants exactly six fractional digits. */
export function microTime(date: Date): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** ms until the next attempt: retryPeriod after the last one began, at once when it took longer. */
export function nextAttemptIn(began: number, now: number, retryPeriodMs: number): number {
  return Math.max(0, began + retryPeriodMs - now);
}

/** The answer to a write, when it is a Lease with a resourceVersion to renew on; otherwise the next renewal reads it first. */
function asLease(body: unknown): Lease | null {
  const lease = body as Partial<Lease> | null;
  return lease?.kind === 'Lease' && typeof lease.metadata?.resourceVersion === 'string' && typeof lease.spec === 'object'
    ? (lease as Lease)
    : null;
}

export class LeaderElector {
  readonly #client: KubeClient;
  readonly #opts: LeaderOptions;
  readonly #logger: Logger;
  readonly #clock: Clock;
  #leading = false;
  /** When the last successful write of the lease (its renewal) was *sent*. */
  #renewedAt = -Infinity;
  /** The Lease as our last successful write left it, for the next renewal's PUT; null when it must be read first. */
  #written: Lease | null = null;
  #observed: { key: string; at: number } | null = null;

  constructor(client: KubeClient, opts: LeaderOptions, logger: Logger) {
    this.#client = client;
    this.#opts = opts;
    this.#logger = logger;
    this.#clock = opts.clock ?? systemClock;
  }

  get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(this.#opts.namespace)}/leases/${encodeURIComponent(this.#opts.name)}`;
  }

  /** True only while the last renewal is younger than the renew deadline. */
  isLeader(): boolean {
    if (this.#leading && this.#clock.monotonic() - this.#renewedAt >= this.#opts.renewDeadlineMs)
      this.#setLeading(false, 'renew deadline passed');
    return this.#leading;
  }

  #setLeading(leading: boolean, why: string): void {
    if (leading === this.#leading) return;
    this.#leading = leading;
    if (!leading) this.#written = null;
    this.#logger.info(leading ? 'became the leader' : 'stopped leading', {
      lease: `${this.#opts.namespace}/${this.#opts.name}`,
      identity: this.#opts.identity,
      why,
    });
    this.#opts.onChange?.(leading);
  }

  /** Runs until the signal aborts; then releases the lease if held. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const began = this.#clock.monotonic();
      await this.step(signal);
      // An abort ends the wait early; the loop condition then stops.
      await delay(nextAttemptIn(began, this.#clock.monotonic(), this.#opts.retryPeriodMs), this.#clock, { signal }).catch(() => undefined);
    }
    await this.release('stopping');
  }

  /** One attempt to take or renew the lease; a failed attempt only counts against the renew deadline. */
  async step(signal: AbortSignal): Promise<void> {
    if (this.#opts.mayLead?.() === false) {
      if (this.#leading) await this.release("cannot do a leader's work (CSR cache or records not in sync)");
      return;
    }
    try {
      const sent = await this.#tryAcquireOrRenew(signal);
      if (sent !== null) {
        this.#renewedAt = Math.max(this.#renewedAt, sent);
        this.#setLeading(true, 'lease acquired or renewed');
      } else {
        this.#setLeading(false, 'lease held by another');
      }
    } catch (err) {
      if (signal.aborted) return;
      this.#logger.warn('lease update failed', { lease: `${this.#opts.namespace}/${this.#opts.name}`, error: (err as Error).message });
    }
    this.isLeader();
  }

  /** When the write that made the lease ours was sent, or null when another holds it (or won the race). */
  async #tryAcquireOrRenew(signal: AbortSignal): Promise<number | null> {
    const written = this.#written;
    if (this.#leading && written !== null) {
      const renewal = { ...written, spec: { ...written.spec, renewTime: microTime(this.#clock.now()) } };
      const sent = await this.#write('PUT', this.path, renewal, signal);
      if (sent !== null) return sent;
      // Someone else wrote it since: read it, as any candidate does.
      this.#written = null;
    }
    const wall = this.#clock.now();
    const got = await this.#client.request('GET', this.path, { accept: [404], signal, timeoutMs: this.#opts.renewDeadlineMs });
    const mine: LeaseSpec = {
      holderIdentity: this.#opts.identity,
      leaseDurationSeconds: Math.ceil(this.#opts.leaseDurationMs / 1000),
      acquireTime: microTime(wall),
      renewTime: microTime(wall),
      leaseTransitions: 0,
    };
    if (got.status === 404) {
      const lease: Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.#opts.name, namespace: this.#opts.namespace },
        spec: mine,
      };
      return this.#write('POST', this.path.replace(/\/[^/]+$/, ''), lease, signal);
    }
    const lease = expectObject<Lease>(got.body, 'Lease', this.#opts.name);
    const spec = lease.spec ?? {};
    const key = `${spec.holderIdentity ?? ''}|${spec.renewTime ?? ''}|${lease.metadata.resourceVersion ?? ''}`;
    if (this.#observed?.key !== key) this.#observed = { key, at: this.#clock.monotonic() };
    const holder = spec.holderIdentity ?? '';
    const heldByOther = holder !== '' && holder !== this.#opts.identity;
    const validForMs = (spec.leaseDurationSeconds ?? 0) * 1000;
    if (heldByOther && this.#observed.at + validForMs > this.#clock.monotonic()) return null;
    const next: LeaseSpec =
      holder === this.#opts.identity
        ? { ...spec, ...mine, acquireTime: spec.acquireTime ?? mine.acquireTime, leaseTransitions: spec.leaseTransitions ?? 0 }
        : { ...spec, ...mine, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 };
    return this.#write('PUT', this.path, { ...lease, spec: next }, signal);
  }

  /** Writes the lease, conditional on its resourceVersion (PUT) or its absence (POST): when it was sent, or null on a conflict. */
  async #write(method: 'PUT' | 'POST', path: string, lease: Lease, signal: AbortSignal): Promise<number | null> {
    const sent = this.#clock.monotonic();
    const res = await this.#client.request(method, path, {
      body: lease,
      accept: [409],
      signal,
      timeoutMs: this.#opts.renewDeadlineMs,
    });
    if (res.status === 409) return null;
    this.#written = asLease(res.body);
    return sent;
  }

  /** matches client-go's ReleaseOnCancel: an empty holder lets the next candidate take over at once. */
  async release(why: string): Promise<void> {
    if (!this.#leading) return;
    this.#setLeading(false, `releasing the lease: ${why}`);
    try {
      const got = await this.#client.request('GET', this.path, { timeoutMs: 5_000 });
      const lease = expectObject<Lease>(got.body, 'Lease', this.#opts.name);
      if (lease.spec?.holderIdentity !== this.#opts.identity) return;
      const now = microTime(this.#clock.now());
      const spec: LeaseSpec = {
        leaseDurationSeconds: 1,
        acquireTime: now,
        renewTime: now,
        leaseTransitions: lease.spec.leaseTransitions ?? 0,
      };
      await this.#client.request('PUT', this.path, { body: { ...lease, spec }, timeoutMs: 5_000 });
      this.#logger.info('released the lease', { lease: `${this.#opts.namespace}/${this.#opts.name}` });
    } catch (err) {
      const detail = err instanceof ApiError ? `${err.status} ${err.reason}` : (err as Error).message;
      this.#logger.warn('could not release the lease; the next leader waits for it to expire', { error: detail });
    }
  }
}
