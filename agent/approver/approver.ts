/**
 * The approver loop: the informer feeds CSR names into a queue; while this
 * process leads, a worker takes a batch of names, decides them (batch.ts,
 * decide.ts) and acts: approve through /approval, or report the violated rule
 * once (a log line and an Event) and leave the CSR pending, or deny it under
 * --deny-violations. A requester is in one batch at a time; a batch holds at
 * most one CSR of a requester for a policy whose rules read the CSRs standing
 * before it (one-unissued-per-node relies on that), and any number for the
 * others (a pool token's first issues: batch.ts spends its names in order).
 */
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import { KubebootError } from '../errors.js';
import { decideCsr, getNode, getRecord, subjectAccessReview, warnOnCsr, writeClaim, type DecisionWrite } from './api.js';
import { LEGACY_FOLLOWED, RecordInformers, type LegacyFollowed } from '../records/informer.js';
import { recordRef, type RecordResource } from '../records/kinds.js';
import { cachedApiServerFacts, readApiServerFacts, type ApiServerFacts } from './apiserver.js';
import { decideBatch, limiter, RecordView, type BatchIo, type Outcome } from './batch.js';
import { isSettled, isUnissued, type ApproverCsr } from './csr-facts.js';
import { AUTHORIZED_RULE, parsedRequest, type Decision } from './decide.js';
import { CsrInformer } from './informer.js';
import { LeaderElector, type LeaderOptions } from './leader.js';
import type { ApproverMetrics } from './metrics.js';
import { BOOTSTRAP_USER_PREFIX, NODE_USER_PREFIX, signersReading, type ApproverPolicy } from './policy.js';
import type { RequestFacts } from './request.js';
import { decidedSigners } from './retain.js';
import { excerpt } from '../text.js';
import { systemClock, type Clock, type TimerHandle } from '../time/clock.js';

/** A CSR's own words for a log line: its name, requester and signer are anyone's text, so each is bounded and escaped. */
function logFields(csr: ApproverCsr): { csr: string; requester: string; signer: string } {
  return { csr: excerpt(csr.metadata.name), requester: excerpt(csr.spec.username ?? ''), signer: excerpt(csr.spec.signerName) };
}

/** Rules whose outcome changes without the CSR changing (a Node appears, RBAC is granted, the older CSR is issued). */
const TRANSIENT_RULES = new Set(['node-exists', AUTHORIZED_RULE, 'one-unissued-per-node']);

/** Decisions of one batch in a row that met a record changed meanwhile (409, or read again changed), before its CSRs are retried later. */
const SPEND_ATTEMPTS = 3;

/** Batches in flight at once. */
const WORKERS = 4;
/** CSRs one batch takes at most: what is queued when a worker is free, up to this. */
export const BATCH_SIZE = 64;
/**
 * API requests of the batches in flight at once (Node GETs, records,
 * SubjectAccessReviews, claims, approvals). More only queue inside the API
 * server on a small control plane (measured: docs/benchmarks.md).
 */
const REQUESTS_IN_FLIGHT = 16;
/** Parsed requests kept (a CSR's spec.request never changes; a re-check reads the same one). */
const PARSED_KEPT = 4096;
/** Signers whose rules read the CSRs standing before one: a batch holds one CSR of each requester of these. */
const BLOCKING_SIGNERS = signersReading('blocking');

export interface ApproverOptions {
  policy: ApproverPolicy;
  denyViolations: boolean;
  lease: Omit<LeaderOptions, 'onChange' | 'clock'>;
  resyncMs: number;
  /** A CSR whose decision failed (API error) is retried after this long. */
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

export class Approver {
  readonly informer: CsrInformer;
  /** The records decisions read (agent/records/), through their informers. */
  readonly records: RecordInformers;
  /** A record changed: the CSRs left pending are looked at again (coalesced). */
  #recheckPending: TimerHandle | null = null;
  readonly leader: LeaderElector;
  readonly #client: KubeClient;
  readonly #opts: ApproverOptions;
  readonly #logger: Logger;
  readonly #metrics: ApproverMetrics;
  readonly #clock: Clock;
  /** CSR names waiting for a worker, by requester, in arrival order. */
  readonly #queue = new Map<string, Set<string>>();
  /** CSR uid → its pending re-check: at most one per CSR, however often it is looked at meanwhile. */
  readonly #timers = new Map<string, TimerHandle>();
  /** CSR uid → the resourceVersion the API server answered 404 for on /approval: not decided again until it changes. */
  readonly #unroutable = new Map<string, string | undefined>();
  /** CSR uid → the violation last reported, so a resync does not repeat the Event. */
  readonly #reported = new Map<string, string>();
  /** CSR uid → name, of the CSRs left pending on a violation: decided again when a record changes. */
  readonly #leftPending = new Map<string, string>();
  /** CSR uid → how often a transient rule failed, for the back-off of its re-check. */
  readonly #rechecks = new Map<string, number>();
  /** Requesters with a batch in flight. */
  readonly #busy = new Set<string>();
  /** Batches in flight. */
  #batches = 0;
  /** Bounds the requests of every batch together. */
  readonly #request = limiter(REQUESTS_IN_FLIGHT);
  /** CSR uid → its spec.request as read, and what it parsed to (kept until the CSR is forgotten). */
  readonly #parsed = new Map<string, { request: string; facts: Promise<RequestFacts | string> }>();
  /** CSR name → when it was queued (monotonic ms), for the queue-wait metric. */
  readonly #queuedAt = new Map<string, number>();
  /** The signers this approver decides (another's CSR in a batch is ignored, never retried). */
  readonly #signers: ReadonlySet<string>;
  #signal: AbortSignal | null = null;
  /** The API server's names and addresses, re-read at most once a minute. */
  readonly #apiServer: () => Promise<ApiServerFacts>;

  constructor(client: KubeClient, opts: ApproverOptions, logger: Logger, metrics: ApproverMetrics) {
    this.#client = client;
    this.#opts = opts;
    this.#logger = logger;
    this.#metrics = metrics;
    this.#clock = opts.clock ?? systemClock;
    this.#signers = decidedSigners(opts.policy);
    this.#apiServer = opts.apiServer ?? cachedApiServerFacts(() => readApiServerFacts(client, this.#signal ?? undefined), this.#clock);
    this.informer = new CsrInformer(
      client,
      {
        resyncMs: opts.resyncMs,
        onChange: (name) => this.#changed(name),
        onDelete: (csr) => this.#forget(csr),
        clock: this.#clock,
        policy: opts.policy,
        onOverflow: (csr, report) => this.#overflowed(csr, report),
        ...(opts.maxCacheBytes !== undefined ? { maxCacheBytes: opts.maxCacheBytes } : {}),
        ...(opts.maxPendingPerRequester !== undefined ? { maxPendingPerRequester: opts.maxPendingPerRequester } : {}),
      },
      logger,
    );
    metrics.csrCache(() => ({ bytes: this.informer.cache.bytes, full: this.informer.full, overflow: this.informer.cache.overflow }));
    this.records = new RecordInformers(client, logger, {
      clock: this.#clock,
      onChange: (resource, name, type, rv) => this.#recordChanged(resource, name, type, rv),
    });
    this.leader = new LeaderElector(
      client,
      {
        ...opts.lease,
        clock: this.#clock,
        // A replica whose CSR cache is not in sync would hold the lease and approve nothing (a list it
        // cannot read, RBAC it lacks): it stands aside until it has synced, so a healthy one leads.
        mayLead: () => this.informer.synced && this.records.synced,
        onChange: (leading) => {
          metrics.leader(leading);
          // A new leader looks at everything: CSRs may have arrived while it waited.
          if (leading) for (const name of this.informer.cache.keys()) this.#enqueue(name);
        },
      },
      logger,
    );
  }

  async run(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    try {
      await Promise.all([this.informer.run(signal), this.records.run(signal), this.leader.run(signal)]);
    } finally {
      // Pending re-checks must not hold a stopping process open (they were unref'd Node timers before the Clock).
      for (const handle of this.#timers.values()) this.#clock.clearTimeout(handle);
      this.#timers.clear();
      if (this.#recheckPending !== null) this.#clock.clearTimeout(this.#recheckPending);
    }
  }

  /**
   * A record an admin or an approver wrote arrived: what was refused from
   * the records before may pass now (a binding made, a mark given), so the
   * CSRs left pending are decided again, once for a burst of changes.
   */
  #recordChanged(resource: RecordResource | 'configmaps', name: string, type: string, resourceVersion: string): void {
    const what = resource === 'configmaps' ? `ConfigMap kubeboot/${name}` : recordRef(resource, name);
    // What the approver decides from, as it changes (a claim is the approval's own line).
    if (resource !== 'nodeclaims')
      this.#logger.info(`record ${type === 'DELETED' ? 'removed' : 'seen'}: ${what} (resourceVersion ${resourceVersion})`);
    if (this.#recheckPending !== null || this.#stopped()) return;
    this.#recheckPending = this.#clock.setTimeout(() => {
      this.#recheckPending = null;
      for (const name of this.#leftPending.values()) if (this.informer.cache.get(name) !== undefined) this.#enqueue(name);
    }, 1000);
  }

  #stopped(): boolean {
    return this.#signal?.aborted === true;
  }

  /**
   * A CSR that got its certificate (or was denied) may unblock a newer one of
   * the same requester (one-unissued-per-node), so those are looked at again now.
   */
  #changed(name: string): void {
    this.#enqueue(name);
    const csr = this.informer.cache.get(name);
    if (csr === undefined || isUnissued(csr) || !BLOCKING_SIGNERS.has(csr.spec.signerName)) return;
    for (const other of this.informer.cache.sameRequester(csr)) if (!isSettled(other)) this.#enqueue(other.metadata.name);
  }

  #enqueue(name: string): void {
    const requester = this.informer.cache.get(name)?.spec.username ?? '';
    let names = this.#queue.get(requester);
    if (names === undefined) this.#queue.set(requester, (names = new Set()));
    names.add(name);
    if (!this.#queuedAt.has(name)) this.#queuedAt.set(name, this.#clock.monotonic());
    this.#pump();
  }

  /** Looks at the CSR again after `ms`, unless a look is already due. */
  #later(csr: ApproverCsr, ms: number): void {
    const key = csr.metadata.uid ?? csr.metadata.name;
    if (this.#timers.has(key) || this.#stopped()) return;
    const timer = this.#clock.setTimeout(() => {
      this.#timers.delete(key);
      this.#enqueue(csr.metadata.name);
    }, ms);
    this.#timers.set(key, timer);
  }

  /**
   * Starts batches up to WORKERS, each of what is queued, up to BATCH_SIZE,
   * over requesters that have none in flight: different nodes are decided in
   * parallel, and of a requester one CSR of a blocking signer per batch
   * (one-unissued-per-node relies on that). The walk is over requesters, so a
   * node with thousands queued costs one step.
   */
  #pump(): void {
    while (this.#batches < WORKERS && !this.#stopped() && this.#queue.size > 0) {
      const batch: ApproverCsr[] = [];
      const requesters: string[] = [];
      for (const [requester, names] of this.#queue) {
        if (batch.length >= BATCH_SIZE) break;
        if (this.#busy.has(requester)) continue;
        let took = 0;
        for (const name of names) {
          if (batch.length >= BATCH_SIZE) break;
          const csr = this.informer.cache.get(name);
          const blocking = csr !== undefined && BLOCKING_SIGNERS.has(csr.spec.signerName);
          if (blocking && took > 0) break;
          names.delete(name);
          const queuedAt = this.#queuedAt.get(name);
          this.#queuedAt.delete(name);
          // A cache out of sync (a failed list, or emptied past its bound and re-listing) may miss
          // the CSR that blocks this one; the list that syncs it looks at everything again.
          if (csr === undefined || !this.informer.synced) continue;
          if (!this.leader.isLeader()) {
            this.#logger.debug('not the leader; CSR left to the leader', { csr: excerpt(name) });
            continue;
          }
          if (isSettled(csr)) {
            this.#forget(csr);
            continue;
          }
          const key = csr.metadata.uid ?? name;
          if (this.#unroutable.has(key) && this.#unroutable.get(key) === csr.metadata.resourceVersion) continue;
          if (queuedAt !== undefined) this.#metrics.queueWait((this.#clock.monotonic() - queuedAt) / 1000);
          batch.push(csr);
          took++;
          if (blocking) break;
        }
        if (names.size === 0) this.#queue.delete(requester);
        if (took > 0) requesters.push(requester);
      }
      if (batch.length === 0) return;
      for (const r of requesters) this.#busy.add(r);
      this.#batches++;
      void this.#process(batch).finally(() => {
        for (const r of requesters) this.#busy.delete(r);
        this.#batches--;
        this.#pump();
      });
    }
  }

  /** A failed decision or write: this CSR is looked at again after its back-off. */
  #failed(csr: ApproverCsr, err: Error): void {
    if (this.#stopped()) return;
    const delay = this.#backoff(csr);
    this.#logger.warn('could not decide on CSR; retrying', {
      csr: excerpt(csr.metadata.name),
      error: err.message,
      retryInSeconds: delay / 1000,
    });
    this.#later(csr, delay);
  }

  /** The parsed spec.request of this CSR, read once per uid (a CSR's spec never changes; the same bytes are checked). */
  #requestOf(csr: ApproverCsr): Promise<RequestFacts | string> {
    const key = csr.metadata.uid;
    if (key === undefined || csr.oversizedRequest) return parsedRequest(csr);
    const kept = this.#parsed.get(key);
    if (kept !== undefined && kept.request === csr.spec.request) return kept.facts;
    const facts = parsedRequest(csr);
    if (this.#parsed.size >= PARSED_KEPT) this.#parsed.delete(this.#parsed.keys().next().value as string);
    this.#parsed.set(key, { request: csr.spec.request, facts });
    return facts;
  }

  /** Times one API call of a decision, by what it is. */
  #timed<T>(call: string, request: () => Promise<T>): Promise<T> {
    return this.#request(async () => {
      const began = this.#clock.monotonic();
      try {
        return await request();
      } finally {
        this.#metrics.request(call, (this.#clock.monotonic() - began) / 1000);
      }
    });
  }

  async #process(batch: ApproverCsr[]): Promise<void> {
    const began = this.#clock.monotonic();
    try {
      await this.#handle(batch);
    } catch (err) {
      for (const csr of batch) if (this.#signers.has(csr.spec.signerName)) this.#failed(csr, err as Error);
    } finally {
      this.#metrics.batch(batch.length, (this.#clock.monotonic() - began) / 1000);
    }
  }

  /**
   * How long until this CSR is looked at again after a failure or a rule that
   * may pass later: 5 s, 10 s, 20 s ... up to the resync period, so a CSR that
   * keeps failing costs a log line and a request per period, not every 5 s.
   */
  #backoff(csr: ApproverCsr): number {
    const key = csr.metadata.uid ?? csr.metadata.name;
    const n = this.#rechecks.get(key) ?? 0;
    this.#rechecks.set(key, n + 1);
    return Math.min(this.#opts.resyncMs, (this.#opts.retryMs ?? 5_000) * 2 ** Math.min(n, 10));
  }

  /** False when the decision was not written; says why once. */
  #written(csr: ApproverCsr, write: DecisionWrite): write is Extract<DecisionWrite, { kind: 'written' }> {
    if (write.kind === 'conflict') this.#logger.info('CSR changed while deciding; it is looked at again', logFields(csr));
    if (write.kind === 'not-found') {
      this.#unroutable.set(csr.metadata.uid ?? csr.metadata.name, csr.metadata.resourceVersion);
      this.#logger.warn(
        'the API server has no CSR of this name to decide (deleted, or a name it cannot route); left as it is until it changes',
        logFields(csr),
      );
    }
    if (write.kind !== 'written') return false;
    // The next decision for this requester must see this one even if the watch has not
    // delivered it yet, or a second CSR could be approved while this one is unissued.
    this.informer.remember(write.csr);
    return true;
  }

  /** A CSR its requester's share left out (informer.ts): counted; reported (the informer logs it) as an Event by the leader. */
  #overflowed(csr: ApproverCsr, report: boolean): void {
    const username = csr.spec.username ?? '';
    this.#metrics.overflow(
      username.startsWith(NODE_USER_PREFIX) ? 'node' : username.startsWith(BOOTSTRAP_USER_PREFIX) ? 'bootstrap' : 'other',
    );
    if (!report || !this.leader.isLeader()) return;
    const message = `kubeboot approver left this CSR undecided: its requester's pending CSRs are past their share of the approver's cache (--max-pending-per-requester); it is decided once older ones settle`;
    warnOnCsr(this.#client, csr, 'RequesterOverShare', message, this.#clock.now(), this.#signal ?? undefined).catch((err: Error) =>
      this.#logger.warn('could not record the overflow as an Event', { ...logFields(csr), error: err.message }),
    );
  }

  #forget(csr: ApproverCsr): void {
    const key = csr.metadata.uid ?? csr.metadata.name;
    this.#reported.delete(key);
    this.#leftPending.delete(key);
    this.#rechecks.delete(key);
    this.#unroutable.delete(key);
    this.#parsed.delete(key);
    this.#queuedAt.delete(csr.metadata.name);
    const timer = this.#timers.get(key);
    if (timer) this.#clock.clearTimeout(timer);
    this.#timers.delete(key);
  }

  async #handle(batch: ApproverCsr[]): Promise<void> {
    const signal = this.#signal ?? undefined;
    const client = this.#client;
    const io: BatchIo = {
      node: (name) => this.#timed('node', () => getNode(client, name, signal)),
      allowed: (c, subresource) => this.#timed('subjectaccessreview', () => subjectAccessReview(client, c, subresource, signal)),
      record: async (resource, name) => this.records.get(resource, name),
      legacy: (name) =>
        (LEGACY_FOLLOWED as readonly string[]).includes(name)
          ? Promise.resolve(this.records.legacy(name as LegacyFollowed))
          : this.#timed('record', () => this.records.legacyBinding(name, signal)),
      apiServer: this.#apiServer,
      sameRequester: (c) => this.informer.cache.sameRequester(c),
      request: (c) => this.#requestOf(c),
    };
    for (let attempt = 1; ; attempt++) {
      const view = new RecordView(io.record);
      const outcomes = await decideBatch(batch, this.#opts.policy, io, view);
      // The look-ups took time; a leader that lost its lease meanwhile must not act.
      if (!this.leader.isLeader()) return;
      const changed = await this.#spend(view);
      if (changed === null) return this.#act(outcomes);
      if (attempt >= SPEND_ATTEMPTS)
        throw new KubebootError(`the records these CSRs spend or read changed ${attempt} times while they were decided (${changed})`);
      this.#logger.info(`record ${changed} changed while deciding; deciding again`, { csrs: batch.length });
    }
  }

  /**
   * Writes what the batch's approvals spend (a token's names, a replacement
   * mark), one claim per record on the resourceVersion its decisions read,
   * before any approval: two approvers deciding CSRs of one token never both
   * spend its last name. Then reads again what the decisions read and do not
   * write (the revocations, the inventory), which must be unchanged. Returns
   * the record that changed meanwhile (409, or read again different), and
   * the batch is decided again on what it now says; null when none did. A
   * claim written and an approval that then fails is retried as the same
   * CSR, which its own claims still allow.
   */
  async #spend(view: RecordView): Promise<string | null> {
    const signal = this.#signal ?? undefined;
    for (const claim of view.claims()) {
      const written = await this.#timed('claim', () => writeClaim(this.#client, claim, signal));
      if (written !== null) {
        this.records.remember(claim.resource, written);
        continue;
      }
      // Changed, made or gone meanwhile: the informer may not have it yet; the next decision must.
      this.records.refresh(
        claim.resource,
        claim.name,
        await this.#timed('record', () => getRecord(this.#client, claim.resource, claim.name, signal)),
      );
      return `${claim.resource}/${claim.name}`;
    }
    return view.changedSinceRead();
  }

  /** Approvals and violations of a batch whose records held, each CSR on its own: one failing is retried alone. */
  async #act(outcomes: Outcome[]): Promise<void> {
    await Promise.all(
      outcomes.map(async (outcome) => {
        const { csr } = outcome;
        if ('error' in outcome) return this.#failed(csr, outcome.error);
        const { decision } = outcome;
        try {
          if (decision.kind === 'violation') await this.#violation(csr, decision);
          if (decision.kind === 'approve') await this.#approve(csr, decision);
        } catch (err) {
          this.#failed(csr, err as Error);
        }
      }),
    );
  }

  async #approve(csr: ApproverCsr, decision: Extract<Decision, { kind: 'approve' }>): Promise<void> {
    const message = `Approved by kubeboot approver ${this.#opts.lease.identity}: ${decision.message}`;
    const write = await this.#timed('approval', () => decideCsr(this.#client, csr, 'Approved', message, this.#signal ?? undefined));
    if (!this.#written(csr, write)) return;
    this.#metrics.decision(csr.spec.signerName, 'approved', decision.policy);
    const created = Date.parse(csr.metadata.creationTimestamp ?? '');
    if (!Number.isNaN(created)) this.#metrics.approvalLatency((this.#clock.now().getTime() - created) / 1000);
    this.#logger.info('approved CSR', { ...logFields(csr), policy: decision.policy });
  }

  async #violation(csr: ApproverCsr, decision: Extract<Decision, { kind: 'violation' }>): Promise<void> {
    const fields = { ...logFields(csr), rule: decision.rule };
    // A transient rule (no Node yet, not yet authorized, an older CSR still
    // unissued) may pass later: it is never a reason to deny.
    if (this.#opts.denyViolations && !TRANSIENT_RULES.has(decision.rule)) {
      if (!this.#written(csr, await decideCsr(this.#client, csr, 'Denied', decision.message, this.#signal ?? undefined))) return;
      this.#metrics.decision(csr.spec.signerName, 'denied', decision.rule);
      // The reason names what the CSR says (its subject, its names): a field, never the message.
      this.#logger.warn('denied CSR', { ...fields, reason: decision.message });
      return;
    }
    const key = csr.metadata.uid ?? csr.metadata.name;
    if (TRANSIENT_RULES.has(decision.rule)) {
      // The kubelet registers its Node only after it has its credential, so the kube-proxy CSR may
      // come first; look again soon instead of a resync away.
      this.#later(csr, this.#backoff(csr));
    }
    this.#leftPending.set(key, csr.metadata.name);
    if (this.#reported.get(key) === decision.message) return;
    this.#reported.set(key, decision.message);
    this.#metrics.decision(csr.spec.signerName, 'left-pending', decision.rule);
    this.#logger.warn('left CSR pending', { ...fields, reason: decision.message });
    try {
      await warnOnCsr(
        this.#client,
        csr,
        'PolicyViolation',
        `kubeboot approver left this CSR pending: ${decision.message}`,
        this.#clock.now(),
        this.#signal ?? undefined,
      );
    } catch (err) {
      // An Event is a courtesy (client-go's recorder drops them too): its failure must not send the CSR round again.
      this.#logger.warn('could not record the violation as an Event', { ...fields, error: (err as Error).message });
    }
  }
}
