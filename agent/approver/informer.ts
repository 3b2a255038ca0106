/**
 * A CSR informer like client-go's reflector: list, then watch from the
 * list's resourceVersion; a watch that ends is resumed from the last
 * resourceVersion seen; 410 Gone (or any failure) re-lists. Every object
 * that changes, and every object again each resync period, is handed to
 * `onChange` by name; the cache is the informer's own. What it keeps of each
 * CSR is retain.ts's, bounded per requester (cache.ts: past its share, a
 * requester's youngest pending CSRs are left out and undecided; once one of
 * its kept ones settles or goes, a re-list, at most every RELIST_GAP_MS,
 * brings them back) and in total: past `maxCacheBytes` it empties the cache
 * and is not in sync (so not ready, and not leading) until a re-list fits.
 */
import { ApiError, KubebootError, ResponseTooLargeError, UnexpectedObjectError, WatchExpiredError } from '../errors.js';
import { MAX_OBJECT_BYTES, type KubeClient } from '../kube/client.js';
import { expectObject } from '../kube/objects.js';
import type { Logger } from '../log.js';
import { CsrCache } from './cache.js';
import { isSettled, type ApproverCsr } from './csr-facts.js';
import { sleep } from './leader.js';
import type { ApproverPolicy } from './rules/rule.js';
import { MAX_CACHE_BYTES, MAX_PENDING_PER_REQUESTER, retain, retainedBytes } from './retain.js';
import { systemClock, type Clock, type TimerHandle } from '../time/clock.js';
import { every } from '../time/timer.js';

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

/** The informer re-lists to bring back CSRs left out (informer-internal). */
class RelistWanted extends Error {}

/** The cache went past its bound: it was emptied, and the informer re-lists until what it keeps fits. */
export class CacheFullError extends KubebootError {
  override readonly name = 'CacheFullError';
}

const size = (bytes: number): string => (bytes < 1 << 20 ? `${Math.ceil(bytes / 1024)} KiB` : `${(bytes / (1 << 20)).toFixed(1)} MiB`);

interface CsrList {
  kind: 'CertificateSigningRequestList';
  metadata: { resourceVersion: string; continue?: string };
  items: ApproverCsr[];
}

/** CSRs per list page, as client-go's reflector asks (it pages by 500). */
export const LIST_PAGE_SIZE = 500;
/**
 * Bytes one page may take. A page that is larger is asked for again with a
 * smaller limit, down to one CSR, which may take MAX_OBJECT_BYTES: the most
 * one object the API server stores can take as JSON. So the bound is on
 * memory per request, never on the number of CSRs (a whole-list cap let three
 * 1.2 MB CSRs blind the approver).
 */
export const LIST_PAGE_BYTES = 8 << 20;

export class CsrInformer {
  readonly cache: CsrCache;
  #synced = false;
  /** Why the last list failed, while it has not succeeded since. */
  #listError: string | null = null;
  /** The cache went past maxCacheBytes and no list has fitted since. */
  #full = false;
  #markSynced!: () => void;
  /** Resolves once the first list has completed. */
  readonly whenSynced = new Promise<void>((resolve) => (this.#markSynced = resolve));
  readonly #client: KubeClient;
  readonly #opts: InformerOptions;
  readonly #logger: Logger;
  readonly #policy: ApproverPolicy;
  readonly #maxBytes: number;
  readonly #clock: Clock;
  /** Aborts the running watch when a re-list is wanted. */
  #watchStop: AbortController | null = null;
  #relistTimer: TimerHandle | null = null;
  #relistWanted = false;
  #lastListAt = Number.NEGATIVE_INFINITY;
  /** Requester → when it was last reported past its share (monotonic ms). */
  readonly #reported = new Map<string, number>();

  constructor(client: KubeClient, opts: InformerOptions, logger: Logger) {
    this.#client = client;
    this.#opts = opts;
    this.#logger = logger;
    this.#policy = opts.policy ?? ALL_POLICIES;
    this.#maxBytes = opts.maxCacheBytes ?? MAX_CACHE_BYTES;
    this.#clock = opts.clock ?? systemClock;
    this.cache = new CsrCache(retainedBytes, opts.maxPendingPerRequester ?? MAX_PENDING_PER_REQUESTER);
  }

  /** The cache went past its bound, and no re-list has fitted since (a metric, and the reason on /readyz). */
  get full(): boolean {
    return this.#full;
  }

  /** The cache follows the server: a list has completed and no list has failed since. */
  get synced(): boolean {
    return this.#synced;
  }

  /** For /readyz: why the cache is not in sync, when it is not. */
  get notSyncedBecause(): string | null {
    return this.#synced ? null : (this.#listError ?? 'the first list has not completed');
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
    const clock = this.#clock;
    const resync = every(this.#opts.resyncMs, clock, () => this.#resync());
    let failures = 0;
    try {
      while (!signal.aborted) {
        try {
          let rv = await this.#list(signal);
          failures = 0;
          for (;;) rv = await this.#watch(rv, signal);
        } catch (err) {
          if (signal.aborted) return;
          if (err instanceof RelistWanted) continue;
          if (err instanceof WatchExpiredError) {
            this.#logger.info('CSR watch expired (410 Gone); re-listing');
            continue;
          }
          failures++;
          if (err instanceof CacheFullError) this.#logger.warn(`${err.message}; not ready, not leading`, { attempt: failures });
          else this.#logger.warn('CSR list/watch failed; re-listing', { error: (err as Error).message, attempt: failures });
          // 1 s, 2 s, 4 s ... up to 30 s, like the reflector's backoff.
          await sleep(Math.min(30_000, 1000 * 2 ** Math.min(failures - 1, 5)), signal, clock);
        }
      }
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
      this.#relistWanted = true;
      this.#watchStop?.abort();
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
    const message = `CSR cache full: the ${held} CSRs kept took over ${size(this.#maxBytes)}; emptied, re-listing until they fit`;
    this.#full = true;
    this.#synced = false;
    this.#listError = message;
    throw new CacheFullError(message);
  }

  async #list(signal: AbortSignal): Promise<string> {
    const seen = new Set<string>();
    const seenIds = new Set<string>();
    let resourceVersion: string;
    this.#relistWanted = false;
    this.#lastListAt = this.#clock.monotonic();
    try {
      // Each page is kept as it comes, so a list holds one page whole at most. A paged list is
      // a snapshot from its first page: what this process wrote meanwhile (remember) is newer
      // and stays (the cache keeps the newer of the same object).
      resourceVersion = await this.#listPages(signal, (csr) => {
        seen.add(csr.metadata.name);
        seenIds.add(csr.metadata.uid ?? csr.metadata.name);
        this.#ingest(csr);
      });
    } catch (err) {
      this.#synced = false;
      this.#listError = (err as Error).message;
      throw err;
    }
    for (const csr of [...this.cache.values()]) if (!seen.has(csr.metadata.name)) this.#delete(csr.metadata.name, csr);
    this.cache.keepLeftOutOnly(seenIds);
    if (this.#full)
      this.#logger.info('CSR cache fits again; ready', {
        csrs: this.cache.size,
        kept: size(this.cache.bytes),
        limit: size(this.#maxBytes),
      });
    this.#full = false;
    this.#synced = true;
    this.#listError = null;
    this.#markSynced();
    this.#resync();
    return resourceVersion;
  }

  /** Hands every CSR to `each`, in pages (limit/continue) that each fit LIST_PAGE_BYTES; returns the list's resourceVersion. */
  async #listPages(signal: AbortSignal, each: (csr: ApproverCsr) => void): Promise<string> {
    let limit = LIST_PAGE_SIZE;
    let token: string | undefined;
    for (;;) {
      let page: CsrList;
      try {
        const maxBodyBytes = limit === 1 ? MAX_OBJECT_BYTES : LIST_PAGE_BYTES;
        const res = await this.#client.request('GET', CSR_PATH, {
          query: { limit, continue: token },
          maxBodyBytes,
          signal,
          timeoutMs: 60_000,
        });
        page = expectObject<CsrList>(res.body, 'CertificateSigningRequestList');
      } catch (err) {
        if (!(err instanceof ResponseTooLargeError) || limit === 1) throw err;
        limit = Math.max(1, Math.floor(limit / 8));
        this.#logger.info('a CSR list page was too large; asking for smaller pages', { limit });
        continue;
      }
      for (const csr of Array.isArray(page.items) ? page.items : []) each(csr);
      token = page.metadata?.continue || undefined;
      if (token === undefined) return page.metadata.resourceVersion;
      // Small pages were needed for big CSRs; the ones after may be small again.
      limit = Math.min(LIST_PAGE_SIZE, limit * 2);
    }
  }

  /** Returns the resourceVersion to resume from when the server ends the watch. */
  async #watch(rv: string, signal: AbortSignal): Promise<string> {
    const query = { resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: this.#opts.watchTimeoutSeconds ?? 300 };
    // Silence 15 s past the watch's own end means a dead connection (after a failover, a half-open socket): re-list.
    const idleMs = (query.timeoutSeconds + 15) * 1000;
    const stop = new AbortController();
    this.#watchStop = stop;
    // Room made while the list ran: re-list now (the timer fired without a watch to stop).
    if (this.#relistWanted) throw new RelistWanted('re-listing for CSRs left out');
    try {
      for await (const event of this.#client.watch<ApproverCsr & { code?: number }>(
        CSR_PATH,
        query,
        AbortSignal.any([signal, stop.signal]),
        idleMs,
      )) {
        if (event.type === 'ERROR') {
          if (event.object.code === 410) throw new WatchExpiredError('CSR watch expired (410 Gone)');
          throw new Error(`watch error: ${JSON.stringify(event.object).slice(0, 200)}`);
        }
        if (event.object?.kind !== 'CertificateSigningRequest')
          throw new UnexpectedObjectError(
            `CSR watch: a ${event.type} event carries a ${String(event.object?.kind).slice(0, 64)}, not a CertificateSigningRequest`,
          );
        rv = event.object.metadata.resourceVersion ?? rv;
        if (event.type === 'BOOKMARK') continue;
        const name = event.object.metadata.name;
        if (event.type === 'DELETED') this.#delete(name, event.object);
        else {
          this.#ingest(event.object);
          this.#opts.onChange(name);
        }
      }
    } catch (err) {
      if (this.#relistWanted && !signal.aborted) throw new RelistWanted('re-listing for CSRs left out');
      if (err instanceof ApiError && err.status === 410) throw new WatchExpiredError('CSR watch expired (410 Gone)');
      throw err;
    } finally {
      this.#watchStop = null;
    }
    if (signal.aborted) throw new Error('stopped');
    if (this.#relistWanted) throw new RelistWanted('re-listing for CSRs left out');
    return rv;
  }
}
