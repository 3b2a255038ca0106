/**
 * A CSR informer like client-go's reflector: list, then watch from the
 * list's resourceVersion; a watch that ends is resumed from the last
 * resourceVersion seen; 410 Gone (or any failure) re-lists. Every object
 * that changes, and every object again each resync period, is handed to
 * `onChange` by name; the cache is the informer's own.
 */
import { ApiError, ResponseTooLargeError, UnexpectedObjectError, WatchExpiredError } from '../errors.js';
import { MAX_OBJECT_BYTES, type KubeClient } from '../kube/client.js';
import { expectObject } from '../kube/objects.js';
import type { Logger } from '../log.js';
import { CsrCache } from './cache.js';
import type { ApproverCsr } from './csr-facts.js';
import { sleep } from './leader.js';
import { systemClock, type Clock } from '../time/clock.js';
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
}

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
  readonly cache = new CsrCache();
  #synced = false;
  /** Why the last list failed, while it has not succeeded since. */
  #listError: string | null = null;
  #markSynced!: () => void;
  /** Resolves once the first list has completed. */
  readonly whenSynced = new Promise<void>((resolve) => (this.#markSynced = resolve));
  readonly #client: KubeClient;
  readonly #opts: InformerOptions;
  readonly #logger: Logger;

  constructor(client: KubeClient, opts: InformerOptions, logger: Logger) {
    this.#client = client;
    this.#opts = opts;
    this.#logger = logger;
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
    this.cache.set(csr);
  }

  async run(signal: AbortSignal): Promise<void> {
    const clock = this.#opts.clock ?? systemClock;
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
          if (err instanceof WatchExpiredError) {
            this.#logger.info('CSR watch expired (410 Gone); re-listing');
            continue;
          }
          failures++;
          this.#logger.warn('CSR list/watch failed; re-listing', { error: (err as Error).message, attempt: failures });
          // 1 s, 2 s, 4 s ... up to 30 s, like the reflector's backoff.
          await sleep(Math.min(30_000, 1000 * 2 ** Math.min(failures - 1, 5)), signal, clock);
        }
      }
    } finally {
      resync.cancel();
    }
  }

  #delete(name: string, csr: ApproverCsr): void {
    this.cache.delete(name);
    this.#opts.onDelete?.(csr);
  }

  #resync(): void {
    for (const name of this.cache.keys()) this.#opts.onChange(name);
  }

  async #list(signal: AbortSignal): Promise<string> {
    let listed: { items: ApproverCsr[]; resourceVersion: string };
    try {
      listed = await this.#listPages(signal);
    } catch (err) {
      this.#synced = false;
      this.#listError = (err as Error).message;
      throw err;
    }
    const seen = new Set<string>();
    // A paged list is a snapshot from its first page: what this process wrote meanwhile
    // (remember) is newer and stays (the cache keeps the newer of the same object).
    for (const csr of listed.items) {
      seen.add(csr.metadata.name);
      this.cache.set(csr);
    }
    for (const csr of [...this.cache.values()]) if (!seen.has(csr.metadata.name)) this.#delete(csr.metadata.name, csr);
    this.#synced = true;
    this.#listError = null;
    this.#markSynced();
    this.#resync();
    return listed.resourceVersion;
  }

  /** Every CSR, in pages (limit/continue) that each fit LIST_PAGE_BYTES. */
  async #listPages(signal: AbortSignal): Promise<{ items: ApproverCsr[]; resourceVersion: string }> {
    const items: ApproverCsr[] = [];
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
      items.push(...(Array.isArray(page.items) ? page.items : []));
      token = page.metadata?.continue || undefined;
      if (token === undefined) return { items, resourceVersion: page.metadata.resourceVersion };
      // Small pages were needed for big CSRs; the ones after may be small again.
      limit = Math.min(LIST_PAGE_SIZE, limit * 2);
    }
  }

  /** Returns the resourceVersion to resume from when the server ends the watch. */
  async #watch(rv: string, signal: AbortSignal): Promise<string> {
    const query = { resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: this.#opts.watchTimeoutSeconds ?? 300 };
    // Silence 15 s past the watch's own end means a dead connection (after a failover, a half-open socket): re-list.
    const idleMs = (query.timeoutSeconds + 15) * 1000;
    try {
      for await (const event of this.#client.watch<ApproverCsr & { code?: number }>(CSR_PATH, query, signal, idleMs)) {
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
          this.cache.set(event.object);
          this.#opts.onChange(name);
        }
      }
    } catch (err) {
      if (err instanceof ApiError && err.status === 410) throw new WatchExpiredError('CSR watch expired (410 Gone)');
      throw err;
    }
    if (signal.aborted) throw new Error('stopped');
    return rv;
  }
}
