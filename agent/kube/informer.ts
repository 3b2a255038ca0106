/**
 * An informer as client-go's reflector feeds a store: list (in pages,
 * list.ts), then watch from the list's resourceVersion; a watch the server
 * ends is resumed from the last resourceVersion seen (bookmarks too); 410
 * Gone re-lists at once, any other failure after a back-off (1 s, 2 s ...
 * 30 s, as the reflector backs off). What is kept of each object, and what a
 * change means, is the store's: the approver's CSR cache
 * (approver/informer.ts), the records (records/informer.ts).
 */
import { ApiError, UnexpectedObjectError, WatchExpiredError } from '../errors.js';
import type { Logger } from '../log.js';
import { nextDelay, type BackoffOptions } from '../time/backoff.js';
import { systemClock, type Clock } from '../time/clock.js';
import { delay } from '../time/timer.js';
import type { KubeClient } from './client.js';
import { listPages } from './list.js';

export interface KubeObject {
  kind?: string;
  metadata: { name: string; resourceVersion?: string };
}

/** What one list hands its store: each object as its page comes, then `done` (what was not listed is gone). */
export interface ListSink<T> {
  add(object: T): void;
  done(): void;
}

/**
 * Where an informer puts what it reads. An error a store throws (a bound it
 * went past) leaves the informer not in sync, with the error's message as
 * the reason, until a list completes again.
 */
export interface InformerStore<T> {
  /** A list begins. */
  list(): ListSink<T>;
  /** A watch event: an object added or modified. */
  update(object: T, type: 'ADDED' | 'MODIFIED'): void;
  /** A watch event: an object deleted. */
  delete(object: T): void;
  /** Logs a failure of list or watch itself (true), instead of the informer's line. */
  failed?(err: Error, attempt: number): boolean;
}

export interface InformerOptions {
  /** The collection listed and watched. */
  path: string;
  /** The kind of its objects (the list is `<kind>List`). */
  kind: string;
  /** What the log lines call its objects; default the kind. */
  what?: string;
  /** Extra list/watch parameters (a fieldSelector). */
  query?: Record<string, string>;
  /** A list answered 403 or 404 is an empty collection, looked at again every ABSENT_RELIST_MS (an access an admin may remove). */
  absentIfDenied?: boolean;
  /** Server-side watch timeout; the watch is then resumed. */
  watchTimeoutSeconds?: number;
  /** The back-off and the look again after an absent list run on it. */
  clock?: Clock;
}

/** A list/watch that keeps failing is tried again after 1 s, 2 s, 4 s ... up to 30 s. */
export const INFORMER_BACKOFF: Readonly<BackoffOptions> = { initial: 1_000, factor: 2, cap: 30_000, jitter: 0 };
/** A collection it may not read (absentIfDenied) is listed again this often. */
export const ABSENT_RELIST_MS = 60_000;

/** relist() was asked for: the watch stops and the list runs again. */
class RelistWanted extends Error {}

export class Informer<T extends KubeObject> {
  readonly what: string;
  readonly #client: KubeClient;
  readonly #opts: InformerOptions;
  readonly #store: InformerStore<T>;
  readonly #logger: Logger;
  readonly #clock: Clock;
  #synced = false;
  /** Why the last list (or the store) failed, while no list has completed since. */
  #reason: string | null = null;
  #markSynced!: () => void;
  /** Resolves once the first list has completed. */
  readonly whenSynced = new Promise<void>((resolve) => (this.#markSynced = resolve));
  /** Stops the running watch when a re-list is wanted. */
  #watchStop: AbortController | null = null;
  #relistWanted = false;

  constructor(client: KubeClient, opts: InformerOptions, store: InformerStore<T>, logger: Logger) {
    this.#client = client;
    this.#opts = opts;
    this.#store = store;
    this.#logger = logger;
    this.#clock = opts.clock ?? systemClock;
    this.what = opts.what ?? opts.kind;
  }

  /** The store follows the server: a list has completed and nothing has failed that unsynced it since. */
  get synced(): boolean {
    return this.#synced;
  }

  /** For /readyz: why the store is not in sync, when it is not. */
  get notSyncedBecause(): string | null {
    return this.#synced ? null : (this.#reason ?? 'the first list has not completed');
  }

  /** Lists again now (after the list that runs, if one does). */
  relist(): void {
    this.#relistWanted = true;
    this.#watchStop?.abort();
  }

  async run(signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      try {
        let rv = await this.#list(signal);
        failures = 0;
        if (rv === null) await this.#pause(ABSENT_RELIST_MS, signal);
        else for (;;) rv = await this.#watch(rv, signal);
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof RelistWanted) continue;
        if (err instanceof WatchExpiredError) {
          this.#logger.info(`${this.what} watch expired (410 Gone); re-listing`);
          continue;
        }
        failures++;
        if (this.#store.failed?.(err as Error, failures) !== true)
          this.#logger.warn(`${this.what} list/watch failed; re-listing`, { error: (err as Error).message, attempt: failures });
        await this.#pause(nextDelay(failures - 1, INFORMER_BACKOFF), signal);
      }
    }
  }

  #pause(ms: number, signal: AbortSignal): Promise<void> {
    return delay(ms, this.#clock, { signal }).catch(() => undefined);
  }

  #unsynced(err: unknown): void {
    this.#synced = false;
    this.#reason = (err as Error).message;
  }

  /** Returns the list's resourceVersion, or null when the collection may not be read (absentIfDenied). */
  async #list(signal: AbortSignal): Promise<string | null> {
    this.#relistWanted = false;
    const sink = this.#store.list();
    const { kind } = this.#opts;
    let resourceVersion: string | null;
    try {
      // A paged list is a snapshot from its first page; the store keeps each page as it comes.
      resourceVersion = await listPages<T>(
        this.#client,
        this.#opts.path,
        {
          kind,
          ...(this.#opts.query ? { query: this.#opts.query } : {}),
          ...(this.#opts.absentIfDenied ? { absentIf: [403, 404] } : {}),
          signal,
          onSmallerPages: (limit) => this.#logger.info(`a ${this.what} list page was too large; asking for smaller pages`, { limit }),
        },
        // A list's items carry no kind; the watch's do.
        (item) => sink.add(item.kind === kind ? item : { ...item, kind }),
      );
      sink.done();
    } catch (err) {
      this.#unsynced(err);
      throw err;
    }
    this.#synced = true;
    this.#reason = null;
    this.#markSynced();
    return resourceVersion;
  }

  /** Returns the resourceVersion to resume from when the server ends the watch. */
  async #watch(rv: string, signal: AbortSignal): Promise<string> {
    const { kind } = this.#opts;
    const query = {
      ...this.#opts.query,
      resourceVersion: rv,
      allowWatchBookmarks: true,
      timeoutSeconds: this.#opts.watchTimeoutSeconds ?? 300,
    };
    // Silence 15 s past the watch's own end means a dead connection (after a failover, a half-open socket): re-list.
    const idleMs = (query.timeoutSeconds + 15) * 1000;
    const stop = new AbortController();
    this.#watchStop = stop;
    // Asked for while the list ran (there was no watch to stop).
    if (this.#relistWanted) throw new RelistWanted();
    try {
      const events = this.#client.watch<T & { code?: number }>(this.#opts.path, query, AbortSignal.any([signal, stop.signal]), idleMs);
      for await (const event of events) {
        if (event.type === 'ERROR') {
          if (event.object.code === 410) throw new WatchExpiredError(`${this.what} watch expired (410 Gone)`);
          throw new Error(`watch error: ${JSON.stringify(event.object).slice(0, 200)}`);
        }
        if (event.object?.kind !== kind)
          throw new UnexpectedObjectError(
            `${this.what} watch: a ${event.type} event carries a ${String(event.object?.kind).slice(0, 64)}, not a ${kind}`,
          );
        rv = event.object.metadata.resourceVersion ?? rv;
        if (event.type === 'BOOKMARK') continue;
        try {
          if (event.type === 'DELETED') this.#store.delete(event.object);
          else this.#store.update(event.object, event.type);
        } catch (err) {
          this.#unsynced(err);
          throw err;
        }
      }
    } catch (err) {
      if (this.#relistWanted && !signal.aborted) throw new RelistWanted();
      if (err instanceof ApiError && err.status === 410) throw new WatchExpiredError(`${this.what} watch expired (410 Gone)`);
      throw err;
    } finally {
      this.#watchStop = null;
    }
    if (signal.aborted) throw new Error('stopped');
    if (this.#relistWanted) throw new RelistWanted();
    return rv;
  }
}
