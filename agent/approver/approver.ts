/**
 * The approver loop: the informer feeds CSR names into a queue; while this
 * process leads, a worker takes each name, decides (decide.ts) and acts:
 * approve through /approval, or report the violated rule once (a log line
 * and an Event) and leave the CSR pending, or deny it under --deny-violations.
 * Workers run in parallel across requesters but one at a time per requester,
 * which the one-unissued-per-node rule relies on.
 */
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import { KubebootError } from '../errors.js';
import { decideCsr, getNode, getRecord, subjectAccessReview, warnOnCsr, writeClaim, type DecisionWrite } from './api.js';
import { cachedApiServerFacts, readApiServerFacts, type ApiServerFacts } from './apiserver.js';
import { isSettled, isUnissued, type ApproverCsr } from './csr-facts.js';
import { AUTHORIZED_RULE, decide, type Decision } from './decide.js';
import { CsrInformer } from './informer.js';
import { LeaderElector, type LeaderOptions } from './leader.js';
import type { ApproverMetrics } from './metrics.js';
import type { ApproverPolicy } from './policy.js';
import { decidedSigners } from './retain.js';
import { excerpt } from '../text.js';
import { systemClock, type Clock, type TimerHandle } from '../time/clock.js';

/** A CSR's own words for a log line: its name, requester and signer are anyone's text, so each is bounded and escaped. */
function logFields(csr: ApproverCsr): { csr: string; requester: string; signer: string } {
  return { csr: excerpt(csr.metadata.name), requester: excerpt(csr.spec.username ?? ''), signer: excerpt(csr.spec.signerName) };
}

/** Rules whose outcome changes without the CSR changing (a Node appears, RBAC is granted, the older CSR is issued). */
const TRANSIENT_RULES = new Set(['node-exists', AUTHORIZED_RULE, 'one-unissued-per-node']);

/** Decisions of one CSR in a row whose claims met a record changed meanwhile (409), before it is retried later. */
const SPEND_ATTEMPTS = 3;

/**
 * Decisions in flight at once: each is three API round trips (Node,
 * SubjectAccessReview, /approval), a kubelet client CSR's up to three more
 * (its records, and the claim on each).
 */
const WORKERS = 8;

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
}

export class Approver {
  readonly informer: CsrInformer;
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
  /** CSR uid → how often a transient rule failed, for the back-off of its re-check. */
  readonly #rechecks = new Map<string, number>();
  /** Requesters with a decision in flight. */
  readonly #busy = new Set<string>();
  #signal: AbortSignal | null = null;
  /** The API server's names and addresses, re-read at most once a minute. */
  readonly #apiServer: () => Promise<ApiServerFacts>;

  constructor(client: KubeClient, opts: ApproverOptions, logger: Logger, metrics: ApproverMetrics) {
    this.#client = client;
    this.#opts = opts;
    this.#logger = logger;
    this.#metrics = metrics;
    this.#clock = opts.clock ?? systemClock;
    this.#apiServer = opts.apiServer ?? cachedApiServerFacts(() => readApiServerFacts(client, this.#signal ?? undefined), this.#clock);
    this.informer = new CsrInformer(
      client,
      {
        resyncMs: opts.resyncMs,
        onChange: (name) => this.#changed(name),
        onDelete: (csr) => this.#forget(csr),
        clock: this.#clock,
        signers: decidedSigners(opts.policy),
        ...(opts.maxCacheBytes !== undefined ? { maxCacheBytes: opts.maxCacheBytes } : {}),
      },
      logger,
    );
    metrics.csrCache(() => ({ bytes: this.informer.cache.bytes, full: this.informer.full }));
    this.leader = new LeaderElector(
      client,
      {
        ...opts.lease,
        clock: this.#clock,
        // A replica whose CSR cache is not in sync would hold the lease and approve nothing (a list it
        // cannot read, RBAC it lacks): it stands aside until it has synced, so a healthy one leads.
        mayLead: () => this.informer.synced,
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
      await Promise.all([this.informer.run(signal), this.leader.run(signal)]);
    } finally {
      // Pending re-checks must not hold a stopping process open (they were unref'd Node timers before the Clock).
      for (const handle of this.#timers.values()) this.#clock.clearTimeout(handle);
      this.#timers.clear();
    }
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
    if (csr === undefined || isUnissued(csr)) return;
    for (const other of this.informer.cache.sameRequester(csr)) if (!isSettled(other)) this.#enqueue(other.metadata.name);
  }

  #enqueue(name: string): void {
    const requester = this.informer.cache.get(name)?.spec.username ?? '';
    let names = this.#queue.get(requester);
    if (names === undefined) this.#queue.set(requester, (names = new Set()));
    names.add(name);
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
   * Starts workers up to WORKERS, each on the next queued CSR of a requester
   * that has none in flight: different nodes are decided in parallel, one
   * node's CSRs one at a time (one-unissued-per-node relies on that). The
   * walk is over requesters, so a node with thousands queued costs one step.
   */
  #pump(): void {
    for (const [requester, names] of this.#queue) {
      if (this.#busy.size >= WORKERS || this.#stopped()) return;
      if (this.#busy.has(requester)) continue;
      const name = names.values().next().value as string;
      names.delete(name);
      if (names.size === 0) this.#queue.delete(requester);
      const csr = this.informer.cache.get(name);
      // A cache out of sync (a failed list, or emptied past its bound and re-listing) may miss
      // the CSR that blocks this one; the list that syncs it looks at everything again.
      if (csr === undefined || !this.informer.synced) continue;
      if (!this.leader.isLeader()) {
        this.#logger.debug('not the leader; CSR left to the leader', { csr: excerpt(name) });
        continue;
      }
      this.#busy.add(requester);
      void this.#process(csr).finally(() => {
        this.#busy.delete(requester);
        this.#pump();
      });
    }
  }

  async #process(csr: ApproverCsr): Promise<void> {
    const name = csr.metadata.name;
    if (isSettled(csr)) {
      this.#forget(csr);
      return;
    }
    const key = csr.metadata.uid ?? name;
    if (this.#unroutable.has(key) && this.#unroutable.get(key) === csr.metadata.resourceVersion) return;
    try {
      await this.#handle(csr);
    } catch (err) {
      if (this.#stopped()) return;
      const delay = this.#backoff(csr);
      this.#logger.warn('could not decide on CSR; retrying', {
        csr: excerpt(name),
        error: (err as Error).message,
        retryInSeconds: delay / 1000,
      });
      this.#later(csr, delay);
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

  #forget(csr: ApproverCsr): void {
    const key = csr.metadata.uid ?? csr.metadata.name;
    this.#reported.delete(key);
    this.#rechecks.delete(key);
    this.#unroutable.delete(key);
    const timer = this.#timers.get(key);
    if (timer) this.#clock.clearTimeout(timer);
    this.#timers.delete(key);
  }

  async #handle(csr: ApproverCsr): Promise<void> {
    const signal = this.#signal ?? undefined;
    for (let attempt = 1; ; attempt++) {
      const decision = await decide(csr, this.#opts.policy, {
        node: (name) => getNode(this.#client, name, signal),
        allowed: (c, subresource) => subjectAccessReview(this.#client, c, subresource, signal),
        sameRequester: (c) => this.informer.cache.sameRequester(c),
        apiServer: this.#apiServer,
        record: (name) => getRecord(this.#client, name, signal),
      });
      if (decision.kind === 'ignore') return;
      // The look-ups took time; a leader that lost its lease meanwhile must not act.
      if (!this.leader.isLeader()) return;
      if (decision.kind === 'violation') return this.#violation(csr, decision);
      if (await this.#spend(csr, decision)) return this.#approve(csr, decision);
      if (attempt >= SPEND_ATTEMPTS) throw new KubebootError(`the records this CSR spends changed ${attempt} times while it was decided`);
    }
  }

  /**
   * Writes what the approval spends (a token's name, a replacement mark),
   * each on the resourceVersion it was decided on, before the approval: two
   * approvers deciding two CSRs of one token never both spend its last name.
   * False when a record changed meanwhile: the CSR is decided again on what
   * it now says. A claim written and an approval that then fails is retried
   * as the same CSR, which its own claims still allow.
   */
  async #spend(csr: ApproverCsr, decision: Extract<Decision, { kind: 'approve' }>): Promise<boolean> {
    for (const claim of decision.claims) {
      if (!(await writeClaim(this.#client, claim, this.#signal ?? undefined))) {
        this.#logger.info(`ConfigMap kubeboot/${claim.name} changed while deciding; deciding again`, logFields(csr));
        return false;
      }
    }
    return true;
  }

  async #approve(csr: ApproverCsr, decision: Extract<Decision, { kind: 'approve' }>): Promise<void> {
    const message = `Approved by kubeboot approver ${this.#opts.lease.identity}: ${decision.message}`;
    if (!this.#written(csr, await decideCsr(this.#client, csr, 'Approved', message, this.#signal ?? undefined))) return;
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
      this.#logger.warn(`denied CSR: ${decision.message}`, fields);
      return;
    }
    const key = csr.metadata.uid ?? csr.metadata.name;
    if (TRANSIENT_RULES.has(decision.rule)) {
      // The kubelet registers its Node only after it has its credential, so the kube-proxy CSR may
      // come first; look again soon instead of a resync away.
      this.#later(csr, this.#backoff(csr));
    }
    if (this.#reported.get(key) === decision.message) return;
    this.#reported.set(key, decision.message);
    this.#metrics.decision(csr.spec.signerName, 'left-pending', decision.rule);
    this.#logger.warn(`left CSR pending: ${decision.message}`, fields);
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
