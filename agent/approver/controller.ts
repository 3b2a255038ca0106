/**
 * The approver as kube-controller-manager's certificate controller is laid
 * out (pkg/controller/certificates/certificate_controller.go): informer
 * handlers add CSR names to a rate-limited work queue (queue.ts); WORKERS
 * workers take batches off it and call the sync function (sync.ts), which
 * decides and acts while this process holds the lease (leader.ts); what is
 * to be looked at again goes back into the queue after its back-off. A
 * requester is decided in one batch at a time, and of a signer whose rules
 * read the CSRs standing before one (one-unissued-per-node) a batch holds one
 * CSR of a requester, held until its decision is written; of the others any
 * number (a pool token's first issues: batch.ts spends its names in order),
 * and the requester's next batch is decided once this one's claims are
 * written, while its approvals are.
 */
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import { RecordInformers } from '../records/informer.js';
import { recordRef, type RecordResource } from '../records/kinds.js';
import { systemClock, type Clock, type TimerHandle } from '../time/clock.js';
import { logFields } from './act.js';
import { warnOnCsr } from './api.js';
import { cachedApiServerFacts, readApiServerFacts, type ApiServerFacts } from './apiserver.js';
import { BeaconKeeper } from './beacon.js';
import { isSettled, isUnissued, type ApproverCsr } from './csr-facts.js';
import { CsrInformer } from './informer.js';
import { LeaderElector, type LeaderOptions } from './leader.js';
import { clusterLookups, timedCalls } from './lookups.js';
import { CsrMemory } from './memory.js';
import type { ApproverMetrics } from './metrics.js';
import { BOOTSTRAP_USER_PREFIX, NODE_USER_PREFIX, type ApproverPolicy } from './rules/rule.js';
import { signersReading } from './policy.js';
import { WorkQueue, type Placement } from './queue.js';
import { syncCertificateRequests, type SyncContext } from './sync.js';
import { excerpt } from '../text.js';

/** Workers, each deciding one batch at a time. */
const WORKERS = 4;
/** CSRs one batch takes at most: what is queued when a worker is free, up to this. */
const BATCH_SIZE = 64;
/**
 * API requests of the batches in flight at once (Node GETs, records,
 * SubjectAccessReviews, claims, approvals, denials, Events). More only queue inside the API
 * server on a small control plane (measured: docs/benchmarks.md).
 */
const REQUESTS_IN_FLIGHT = 16;
/** Signers whose rules read the CSRs standing before one: a batch holds one CSR of each requester of these. */
const BLOCKING_SIGNERS = signersReading('blocking');
/** A burst of record changes is one look at the CSRs left pending, this long after the first. */
const RECORD_SETTLE_MS = 1000;

export interface ControllerOptions {
  policy: ApproverPolicy;
  denyViolations: boolean;
  lease: Omit<LeaderOptions, 'onChange' | 'clock'>;
  resyncMs: number;
  /** A CSR whose decision failed (API error) is retried after this long, then twice as long ... up to resyncMs. */
  retryMs?: number;
  /** The informer's resync, the lease and every re-check run on it. */
  clock?: Clock;
  /** Seam for tests: the API server's names and addresses (default: read from the cluster, apiserver.ts). */
  apiServer?: () => Promise<ApiServerFacts>;
  /** The bound on what the CSR cache keeps (retain.ts); default MAX_CACHE_BYTES. */
  maxCacheBytes?: number;
  /** --max-pending-per-requester: each requester's share of the CSR cache, in bytes; default MAX_PENDING_PER_REQUESTER. */
  maxPendingPerRequester?: number;
}

export class CertificateController {
  readonly informer: CsrInformer;
  /** The records decisions read (agent/records/), through their informers. */
  readonly records: RecordInformers;
  readonly leader: LeaderElector;
  /** The freshness beacon TPM quotes bind, published while this process leads. */
  readonly beacon: BeaconKeeper;
  readonly #queue: WorkQueue<string>;
  readonly #memory = new CsrMemory();
  readonly #client: KubeClient;
  readonly #logger: Logger;
  readonly #metrics: ApproverMetrics;
  readonly #clock: Clock;
  readonly #sync: SyncContext;
  /** A record changed: the CSRs left pending are looked at again (coalesced). */
  #recheckPending: TimerHandle | null = null;
  #signal: AbortSignal | null = null;

  constructor(client: KubeClient, opts: ControllerOptions, logger: Logger, metrics: ApproverMetrics) {
    this.#client = client;
    this.#logger = logger;
    this.#metrics = metrics;
    const clock = (this.#clock = opts.clock ?? systemClock);
    this.#queue = new WorkQueue({
      clock,
      // 5 s, 10 s, 20 s ... up to the resync period: a CSR that keeps failing costs a log line and a request per period.
      backoff: { initial: opts.retryMs ?? 5_000, factor: 2, cap: opts.resyncMs, jitter: 0 },
      place: (name) => this.#place(name),
      waited: (seconds) => metrics.queueWait(seconds),
    });
    this.informer = new CsrInformer(
      client,
      {
        resyncMs: opts.resyncMs,
        onChange: (name) => this.#changed(name),
        onDelete: (csr) => this.#deleted(csr),
        clock,
        policy: opts.policy,
        onOverflow: (csr, report) => this.#overflowed(csr, report),
        ...(opts.maxCacheBytes !== undefined ? { maxCacheBytes: opts.maxCacheBytes } : {}),
        ...(opts.maxPendingPerRequester !== undefined ? { maxPendingPerRequester: opts.maxPendingPerRequester } : {}),
      },
      logger,
    );
    metrics.csrCache(() => ({ bytes: this.informer.cache.bytes, full: this.informer.full, overflow: this.informer.cache.overflow }));
    this.records = new RecordInformers(client, logger, {
      clock,
      onChange: (resource, name, type, rv) => this.#recordChanged(resource, name, type, rv),
    });
    this.leader = new LeaderElector(
      client,
      {
        ...opts.lease,
        clock,
        // A replica whose CSR cache is not in sync would hold the lease and approve nothing (a list it
        // cannot read, RBAC it lacks): it stands aside until it has synced, so a healthy one leads.
        mayLead: () => this.informer.synced && this.records.synced,
        onChange: (leading) => {
          metrics.leader(leading);
          this.beacon.lead(leading);
          // A new leader looks at everything: CSRs may have arrived while it waited.
          if (leading) for (const name of this.informer.cache.keys()) this.#queue.add(name);
        },
      },
      logger,
    );
    const signal = () => this.#signal ?? undefined;
    const timed = timedCalls(REQUESTS_IN_FLIGHT, clock, metrics);
    const apiServer = opts.apiServer ?? cachedApiServerFacts(() => readApiServerFacts(client, signal()), clock);
    const records = this.records;
    const informer = this.informer;
    this.beacon = new BeaconKeeper({ client, records, clock, logger, timed, signal });
    const io = clusterLookups({
      client,
      records,
      sameRequester: (csr) => informer.cache.sameRequester(csr),
      request: (csr) => this.#memory.request(csr),
      apiServer,
      timed,
      signal,
    });
    this.#sync = {
      client,
      policy: opts.policy,
      identity: opts.lease.identity,
      denyViolations: opts.denyViolations,
      csrs: informer,
      records,
      io,
      leading: () => this.leader.isLeader(),
      // A pool's next batch is decided on the names this one claimed while its approvals are written.
      claimed: (names) => {
        for (const name of names) this.#queue.release(name);
      },
      remember: (csr) => informer.remember(csr),
      memory: this.#memory,
      metrics,
      logger,
      clock,
      timed,
      get signal() {
        return signal();
      },
    };
  }

  async run(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    const workers = Array.from({ length: WORKERS }, () => this.#work());
    try {
      await Promise.all([this.informer.run(signal), this.records.run(signal), this.leader.run(signal)]);
    } finally {
      // Pending re-checks must not hold a stopping process open.
      this.#queue.shutDown();
      await this.beacon.stop();
      if (this.#recheckPending !== null) this.#clock.clearTimeout(this.#recheckPending);
      await Promise.all(workers);
    }
  }

  /** One worker: a batch off the queue, synced, its re-checks queued, until the queue shuts down. */
  async #work(): Promise<void> {
    for (let names = await this.#queue.get(BATCH_SIZE); names.length > 0; names = await this.#queue.get(BATCH_SIZE)) {
      try {
        for (const { name, error } of await syncCertificateRequests(names, this.#sync)) {
          if (this.#signal?.aborted) break;
          const delay = this.#queue.addRateLimited(name);
          if (error !== null)
            this.#logger.warn('could not decide on CSR; retrying', {
              csr: excerpt(name),
              error: error.message,
              retryInSeconds: delay / 1000,
            });
        }
      } catch (err) {
        this.#logger.error('a batch of CSRs failed past its sync; they are looked at again at the next resync', {
          error: (err as Error).message,
        });
      } finally {
        for (const name of names) this.#queue.done(name);
      }
    }
  }

  /** A queued name's requester, and whether a batch may hold it only alone of its requester; null when there is nothing to decide. */
  #place(name: string): Placement | null {
    const csr = this.informer.cache.get(name);
    if (csr === undefined || isSettled(csr)) return null;
    return { group: csr.spec.username ?? '', exclusive: BLOCKING_SIGNERS.has(csr.spec.signerName) };
  }

  /**
   * A CSR added or changed (or resynced). One that got its certificate (or
   * was denied) is forgotten, and may unblock a newer one of the same
   * requester (one-unissued-per-node): those are looked at again now.
   */
  #changed(name: string): void {
    const csr = this.informer.cache.get(name);
    if (csr === undefined) return;
    if (!isSettled(csr)) {
      this.#queue.add(name);
      return;
    }
    this.#forget(csr);
    if (isUnissued(csr) || !BLOCKING_SIGNERS.has(csr.spec.signerName)) return;
    for (const other of this.informer.cache.sameRequester(csr)) if (!isSettled(other)) this.#queue.add(other.metadata.name);
  }

  #deleted(csr: ApproverCsr): void {
    this.#forget(csr);
  }

  #forget(csr: ApproverCsr): void {
    this.#memory.forget(csr);
    this.#queue.forget(csr.metadata.name);
  }

  /**
   * A record an admin or an approver wrote arrived: what was refused from
   * the records before may pass now (a binding made, a mark given), so the
   * CSRs left pending are decided again, once for a burst of changes.
   */
  #recordChanged(resource: RecordResource | 'configmaps', name: string, type: string, resourceVersion: string): void {
    const what = resource === 'configmaps' ? `ConfigMap kubeboot/${name}` : recordRef(resource, name);
    // What the approver decides from, as it changes (a claim is the approval's own line, a beacon the keeper's).
    if (resource === 'tpmbeacons') this.beacon.changed();
    if (resource !== 'nodeclaims' && resource !== 'tpmbeacons')
      this.#logger.info(`record ${type === 'DELETED' ? 'removed' : 'seen'}: ${what} (resourceVersion ${resourceVersion})`);
    if (this.#recheckPending !== null || this.#signal?.aborted === true) return;
    this.#recheckPending = this.#clock.setTimeout(() => {
      this.#recheckPending = null;
      for (const name of this.#memory.pendingNames()) if (this.informer.cache.get(name) !== undefined) this.#queue.add(name);
    }, RECORD_SETTLE_MS);
  }

  /** A CSR its requester's share left out (informer.ts): counted; reported (the informer logs it) as an Event by the leader. */
  #overflowed(csr: ApproverCsr, report: boolean): void {
    const username = csr.spec.username ?? '';
    this.#metrics.overflow(
      username.startsWith(NODE_USER_PREFIX) ? 'node' : username.startsWith(BOOTSTRAP_USER_PREFIX) ? 'bootstrap' : 'other',
    );
    if (!report || !this.leader.isLeader()) return;
    const message = `kubeboot approver left this CSR undecided: its requester's pending CSRs are past their share of the approver's cache (--max-pending-per-requester); it is decided once older ones settle`;
    this.#sync
      .timed('event', () => warnOnCsr(this.#client, csr, 'RequesterOverShare', message, this.#clock.now(), this.#signal ?? undefined))
      .catch((err: Error) => this.#logger.warn('could not record the overflow as an Event', { ...logFields(csr), error: err.message }));
  }
}
