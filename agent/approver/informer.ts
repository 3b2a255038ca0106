/**
 * The CSR informer: kube/informer.ts lists and watches, this is its store.
 * Every CSR that changes, and every CSR again each resync period, is handed
 * to `onChange` by name; the cache is the informer's own. What it keeps of
 * each CSR is retain.ts's, bounded per requester (cache.ts: past its share,
 * a requester's youngest pending CSRs are left out and undecided; once one
 * of its kept ones settles or goes, a re-list, at most every RELIST_GAP_MS,
 * brings them back) and in total: past `maxCacheBytes` it empties the cache
 * and is not in sync (so not ready, and not leading) until a re-list fits.
 */
import { KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { Informer, type ListSink } from '../kube/informer.js';
import type { Logger } from '../log.js';
import { systemClock, type Clock, type TimerHandle } from '../time/clock.js';
import { every } from '../time/timer.js';
import { CsrCache } from './cache.js';
import { isSettled, type ApproverCsr } from './csr-facts.js';
import type { ApproverPolicy } from './rules/rule.js';
import { MAX_CACHE_BYTES, MAX_PENDING_PER_REQUESTER, retain, retainedBytes } from './retain.js';

export const CSR_PATH = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

export interface InformerOptions {
  resyncMs: number;
  onChange: (name: string) => void;
  /** A CSR left the cache (deleted, or gone from a re-list). */
  onDelete?: (csr: ApproverCsr) => void;
  /** Server-side watch timeout; the watch is then resumed. */
  watchTimeoutSeconds?: number;
  /** The resync period and the re-list back-off run on it. */
  clock?: Clock;
  /** Which CSRs are ours, so kept for a decision (retain.ts); default every policy enabled (ALL_POLICIES). */
  policy?: ApproverPolicy;
  /** Most bytes (retainedBytes) the cache holds; default MAX_CACHE_BYTES. */
  maxCacheBytes?: number;
  /** Most bytes (retainedBytes) one requester's kept pending CSRs take; default MAX_PENDING_PER_REQUESTER. */
  maxPendingPerRequester?: number;
  /**
   * A pending CSR was left out because its requester is past its share
   * (each CSR once); `report` at most once per requester every OVERFLOW_REPORT_MS.
   */
  onOverflow?: (csr: ApproverCsr, report: boolean) => void;
}

/** Every policy enabled: what an informer keeps when not told whose CSRs are decided. */
export const ALL_POLICIES: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 0,
  keyAlgorithms: [],
  serving: { enabled: true, dnsSuffixes: [], ipCidrs: [] },
  kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] },
};

/** The least time between two re-lists that bring back CSRs left out (each reads every CSR). */
export const RELIST_GAP_MS = 5_000;
/** A requester past its share is logged (and reported) at most this often. */
export const OVERFLOW_REPORT_MS = 10 * 60_000;

/** The cache went past its bound: it was emptied, and the informer re-lists until what it keeps fits. */
export class CacheFullError extends KubebootError {
  override readonly name = 'CacheFullError';
}

const size = (bytes: number): string => (bytes < 1 << 20 ? `${Math.ceil(bytes / 1024)} KiB` : `${(bytes / (1 << 20)).toFixed(1)} MiB`);

export class CsrInformer {
  readonly cache: CsrCache;
  /** The cache went past maxCacheBytes and no list has fitted since. */
  #full = false;
  readonly #informer: Informer<ApproverCsr>;
  readonly #opts: InformerOptions;
  readonly #logger: Logger;
  readonly #policy: ApproverPolicy;
  readonly #maxBytes: number;
  readonly #clock: Clock;
  #relistTimer: TimerHandle | null = null;
  #lastListAt = Number.NEGATIVE_INFINITY;
  /** Requester → when it was last reported past its share (monotonic ms). */
  readonly #reported = new Map<string, number>();

  constructor(client: KubeClient, opts: InformerOptions, logger: Logger) {
    this.#opts = opts;
    this.#logger = logger;
    this.#policy = opts.policy ?? ALL_POLICIES;
    this.#maxBytes = opts.maxCacheBytes ?? MAX_CACHE_BYTES;
    this.#clock = opts.clock ?? systemClock;
    this.cache = new CsrCache(retainedBytes, opts.maxPendingPerRequester ?? MAX_PENDING_PER_REQUESTER);
    const informerOptions = {
      path: CSR_PATH,
      kind: 'CertificateSigningRequest',
      what: 'CSR',
      clock: this.#clock,
      ...(opts.watchTimeoutSeconds !== undefined ? { watchTimeoutSeconds: opts.watchTimeoutSeconds } : {}),
    };
    this.#informer = new Informer<ApproverCsr>(
      client,
      informerOptions,
      {
        list: () => this.#listing(),
        update: (csr) => {
          this.#ingest(csr);
          this.#opts.onChange(csr.metadata.name);
        },
        delete: (csr) => this.#delete(csr.metadata.name, csr),
        failed: (err, attempt) => {
          if (!(err instanceof CacheFullError)) return false;
          this.#logger.warn(`${err.message}; not ready, not leading`, { attempt });
          return true;
        },
      },
      logger,
    );
  }

  /** The cache went past its bound, and no re-list has fitted since (a metric, and the reason on /readyz). */
  get full(): boolean {
    return this.#full;
  }

  /** The cache follows the server: a list has completed and no list has failed since. */
  get synced(): boolean {
    return this.#informer.synced;
  }

  /** For /readyz: why the cache is not in sync, when it is not. */
  get notSyncedBecause(): string | null {
    return this.#informer.notSyncedBecause;
  }

  /** Resolves once the first list has completed. */
  get whenSynced(): Promise<void> {
    return this.#informer.whenSynced;
  }

  /**
   * An object this process wrote, as the API server answered the write: kept
   * at once so the next decision sees it, unless the watch already brought a
   * newer one.
   */
  remember(csr: ApproverCsr): void {
    const cached = this.cache.get(csr.metadata.name);
    if (cached !== undefined && cached.metadata.uid !== undefined && cached.metadata.uid !== csr.metadata.uid) return;
    this.#keep(csr);
  }

  async run(signal: AbortSignal): Promise<void> {
    const resync = every(this.#opts.resyncMs, this.#clock, () => this.#resync());
    try {
      await this.#informer.run(signal);
    } finally {
      resync.cancel();
      if (this.#relistTimer !== null) this.#clock.clearTimeout(this.#relistTimer);
    }
  }

  #delete(name: string, csr: ApproverCsr): void {
    const cached = this.cache.delete(name);
    this.cache.forgetLeftOut(csr);
    this.#opts.onDelete?.(csr);
    if (cached !== undefined && !isSettled(cached) && cached.notOurs !== true) this.#roomMade(cached);
  }

  /** Keeps what retain.ts keeps of `csr`, within its requester's share (cache.ts); reports what that left out. */
  #keep(csr: ApproverCsr): void {
    const kept = retain(csr, this.#policy);
    const before = this.cache.get(kept.metadata.name);
    const wasLeftOut = this.cache.isLeftOut(kept);
    const admission = this.cache.set(kept);
    for (const evicted of admission.evicted) {
      if (evicted.metadata.name !== kept.metadata.name) this.#opts.onDelete?.(evicted);
      this.#leftOut(evicted);
    }
    if (!admission.kept && !wasLeftOut) this.#leftOut(kept);
    // A pending CSR that settled made room in its requester's share.
    if (before !== undefined && !isSettled(before) && isSettled(kept)) this.#roomMade(kept);
  }

  #leftOut(csr: ApproverCsr): void {
    const requester = csr.spec.username ?? '';
    const now = this.#clock.monotonic();
    const last = this.#reported.get(requester);
    const report = last === undefined || now - last >= OVERFLOW_REPORT_MS;
    if (report) {
      for (const [who, at] of this.#reported) if (now - at >= OVERFLOW_REPORT_MS) this.#reported.delete(who);
      this.#reported.set(requester, now);
      this.#logger.warn(
        `CSRs of ${JSON.stringify(requester.slice(0, 256))} past its share of the CSR cache (${size(this.cache.pendingBytes(requester))} pending kept): its youngest are left undecided until older ones settle (docs/approver.md, Flood)`,
        { csr: csr.metadata.name.slice(0, 256), leftOut: this.cache.leftOut(requester) },
      );
    }
    this.#opts.onOverflow?.(csr, report);
  }

  /** A requester with CSRs left out has room again: a re-list brings them back, at most every RELIST_GAP_MS. */
  #roomMade(csr: ApproverCsr): void {
    if (this.cache.leftOut(csr.spec.username ?? '') === 0 || this.#relistTimer !== null) return;
    const wait = Math.max(0, this.#lastListAt + RELIST_GAP_MS - this.#clock.monotonic());
    this.#relistTimer = this.#clock.setTimeout(() => {
      this.#relistTimer = null;
      this.#informer.relist();
    }, wait);
  }

  #resync(): void {
    for (const name of this.cache.keys()) this.#opts.onChange(name);
  }

  /** Keeps what retain.ts keeps of a CSR the server sent; past the bound, empties the cache and throws CacheFullError. */
  #ingest(csr: ApproverCsr): void {
    this.#keep(csr);
    if (this.cache.bytes <= this.#maxBytes) return;
    const held = this.cache.size;
    for (const cached of [...this.cache.values()]) this.#delete(cached.metadata.name, cached);
    this.#full = true;
    throw new CacheFullError(`CSR cache full: the ${held} CSRs kept took over ${size(this.#maxBytes)}; emptied, re-listing until they fit`);
  }

  /**
   * One list: each CSR kept as its page comes, so a list holds one page whole
   * at most. A paged list is a snapshot from its first page: what this process
   * wrote meanwhile (remember) is newer and stays (the cache keeps the newer of
   * the same object). What the list did not have is gone.
   */
  #listing(): ListSink<ApproverCsr> {
    const seen = new Set<string>();
    const seenIds = new Set<string>();
    this.#lastListAt = this.#clock.monotonic();
    return {
      add: (csr) => {
        seen.add(csr.metadata.name);
        seenIds.add(csr.metadata.uid ?? csr.metadata.name);
        this.#ingest(csr);
      },
      done: () => {
        for (const csr of [...this.cache.values()]) if (!seen.has(csr.metadata.name)) this.#delete(csr.metadata.name, csr);
        this.cache.keepLeftOutOnly(seenIds);
        if (this.#full)
          this.#logger.info('CSR cache fits again; ready', {
            csrs: this.cache.size,
            kept: size(this.cache.bytes),
            limit: size(this.#maxBytes),
          });
        this.#full = false;
        this.#resync();
      },
    };
  }
}
