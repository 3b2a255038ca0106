/**
 * A CSR informer like client-go's reflector: list, then watch from the
 * list's resourceVersion; a watch that ends is resumed from the last
 * resourceVersion seen; 410 Gone (or any failure) re-lists. Every object
 * that changes, and every object again each resync period, is handed to
 * `onChange` by name; the cache is the informer's own.
 */
import { ApiError, WatchExpiredError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import type { ApproverCsr } from './csr.js';
import { sleep } from './leader.js';

export const CSR_PATH = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

export interface InformerOptions {
  resyncMs: number;
  onChange: (name: string) => void;
  /** A CSR left the cache (deleted, or gone from a re-list). */
  onDelete?: (csr: ApproverCsr) => void;
  /** Server-side watch timeout; the watch is then resumed. */
  watchTimeoutSeconds?: number;
}

interface CsrList {
  metadata: { resourceVersion: string };
  items: ApproverCsr[];
}


export class CsrInformer {
  readonly cache = new Map<string, ApproverCsr>();
  #synced = false;
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

  /** The first list has completed. */
  get synced(): boolean {
    return this.#synced;
  }

  async run(signal: AbortSignal): Promise<void> {
    const resync = setInterval(() => this.#resync(), this.#opts.resyncMs);
    resync.unref();
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
          await sleep(Math.min(30_000, 1000 * 2 ** Math.min(failures - 1, 5)), signal);
        }
      }
    } finally {
      clearInterval(resync);
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
    const res = await this.#client.request<CsrList>('GET', CSR_PATH, { signal, timeoutMs: 60_000 });
    const seen = new Set<string>();
    for (const csr of res.body.items) {
      seen.add(csr.metadata.name);
      this.cache.set(csr.metadata.name, csr);
    }
    for (const [name, csr] of [...this.cache]) if (!seen.has(name)) this.#delete(name, csr);
    this.#synced = true;
    this.#markSynced();
    this.#resync();
    return res.body.metadata.resourceVersion;
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
        rv = event.object.metadata.resourceVersion ?? rv;
        if (event.type === 'BOOKMARK') continue;
        const name = event.object.metadata.name;
        if (event.type === 'DELETED') this.#delete(name, event.object);
        else {
          this.cache.set(name, event.object);
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
