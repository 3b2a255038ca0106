/**
 * A small informer for the records (records/kinds.ts), like client-go's
 * reflector and store: list (in pages), then watch from the list's
 * resourceVersion; a watch that ends is resumed from the last
 * resourceVersion seen; 410 Gone or any failure re-lists after a back-off.
 * The store holds whole objects by name: records are few and written by the
 * admin, so no bound beyond the API server's own on each object. The
 * approver decides from the store (no GET per CSR), and what it writes
 * itself is remembered at once, so its next decision sees it even before
 * the watch brings it.
 *
 * `RecordInformers` is one informer per record resource, and one for each
 * ConfigMap of an earlier release that the approver must not trust
 * (records/legacy.ts): followed only to refuse what they still say.
 */
import { ApiError, ResponseTooLargeError, UnexpectedObjectError, WatchExpiredError } from '../errors.js';
import { MAX_OBJECT_BYTES, type KubeClient } from '../kube/client.js';
import { expectObject, objectPath } from '../kube/objects.js';
import type { Logger } from '../log.js';
import { systemClock, type Clock } from '../time/clock.js';
import { KINDS, RECORD_RESOURCES, recordsPath, type RecordObject, type RecordObjects, type RecordResource } from './kinds.js';
import { LEGACY_CONFIGMAPS, LEGACY_INVENTORY, LEGACY_REPLACEMENTS, LEGACY_REVOCATIONS, type LegacyConfigMap } from './legacy.js';

interface Named {
  kind?: string;
  metadata: { name: string; resourceVersion?: string };
}

export interface ObjectInformerOptions {
  /** The collection listed and watched. */
  path: string;
  /** The kind of its objects (the list is `<kind>List`). */
  kind: string;
  /** Extra list/watch parameters (a fieldSelector). */
  query?: Record<string, string>;
  /** A list answered 403 or 404 is an empty collection (not a failure): for the legacy ConfigMaps, whose access an admin may remove. */
  absentIfDenied?: boolean;
  clock?: Clock;
  watchTimeoutSeconds?: number;
  /** An object was added, changed or deleted (`type` as a watch event names it; a re-list says MODIFIED). */
  onChange?: (name: string, type: 'ADDED' | 'MODIFIED' | 'DELETED', resourceVersion: string) => void;
}

const PAGE = 500;
const PAGE_BYTES = 8 << 20;

/** Waits `ms` on `clock`, or until `signal` aborts. */
function pause(ms: number, signal: AbortSignal, clock: Clock): Promise<void> {
  return new Promise((resolve) => {
    const timer = clock.setTimeout(done, ms);
    function done() {
      signal.removeEventListener('abort', done);
      clock.clearTimeout(timer);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

export class ObjectInformer<T extends Named> {
  readonly #store = new Map<string, T>();
  readonly #client: KubeClient;
  readonly #opts: ObjectInformerOptions;
  readonly #logger: Logger;
  #synced = false;
  #listError: string | null = null;
  #markSynced!: () => void;
  readonly whenSynced = new Promise<void>((resolve) => (this.#markSynced = resolve));

  constructor(client: KubeClient, opts: ObjectInformerOptions, logger: Logger) {
    this.#client = client;
    this.#opts = opts;
    this.#logger = logger;
  }

  get synced(): boolean {
    return this.#synced;
  }

  get notSyncedBecause(): string | null {
    return this.#synced ? null : (this.#listError ?? 'the first list has not completed');
  }

  get(name: string): T | undefined {
    return this.#store.get(name);
  }

  values(): IterableIterator<T> {
    return this.#store.values();
  }

  get size(): number {
    return this.#store.size;
  }

  /** An object this process wrote or read itself, as the API server answered: kept now (the watch brings it again later). */
  remember(object: T): void {
    this.#store.set(object.metadata.name, object);
  }

  /** What a read of `name` past the store answered: the object, or null for none. */
  refresh(name: string, object: T | null): void {
    if (object === null) this.#store.delete(name);
    else this.#store.set(name, object);
  }

  async run(signal: AbortSignal): Promise<void> {
    const clock = this.#opts.clock ?? systemClock;
    let failures = 0;
    while (!signal.aborted) {
      try {
        let rv = await this.#list(signal);
        failures = 0;
        for (;;) rv = await this.#watch(rv, signal);
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof WatchExpiredError) continue;
        failures++;
        this.#logger.warn(`${this.#opts.kind} list/watch failed; re-listing`, { error: (err as Error).message, attempt: failures });
        await pause(Math.min(30_000, 1000 * 2 ** Math.min(failures - 1, 5)), signal, clock);
      }
    }
  }

  async #list(signal: AbortSignal): Promise<string> {
    const seen = new Map<string, T>();
    let rv: string;
    try {
      rv = await this.#listPages(signal, (item) => seen.set(item.metadata.name, item));
    } catch (err) {
      this.#synced = false;
      this.#listError = `${this.#opts.kind}: ${(err as Error).message}`;
      throw err;
    }
    const before = new Set(this.#store.keys());
    this.#store.clear();
    for (const [name, item] of seen) this.#store.set(name, item);
    this.#synced = true;
    this.#listError = null;
    this.#markSynced();
    for (const name of new Set([...before, ...seen.keys()]))
      this.#opts.onChange?.(name, seen.has(name) ? 'MODIFIED' : 'DELETED', seen.get(name)?.metadata.resourceVersion ?? '');
    return rv;
  }

  async #listPages(signal: AbortSignal, each: (item: T) => void): Promise<string> {
    let limit = PAGE;
    let token: string | undefined;
    for (;;) {
      let page: { metadata: { resourceVersion: string; continue?: string }; items?: T[] };
      try {
        const res = await this.#client.request('GET', this.#opts.path, {
          query: { ...this.#opts.query, limit, continue: token },
          maxBodyBytes: limit === 1 ? MAX_OBJECT_BYTES : PAGE_BYTES,
          accept: this.#opts.absentIfDenied ? [403, 404] : [],
          signal,
          timeoutMs: 60_000,
        });
        if (res.status === 403 || res.status === 404) return '';
        page = expectObject(res.body, `${this.#opts.kind}List`);
      } catch (err) {
        if (!(err instanceof ResponseTooLargeError) || limit === 1) throw err;
        limit = Math.max(1, Math.floor(limit / 8));
        continue;
      }
      for (const item of Array.isArray(page.items) ? page.items : []) each({ ...item, kind: this.#opts.kind });
      token = page.metadata?.continue || undefined;
      if (token === undefined) return page.metadata.resourceVersion;
      limit = Math.min(PAGE, limit * 2);
    }
  }

  async #watch(rv: string, signal: AbortSignal): Promise<string> {
    const clock = this.#opts.clock ?? systemClock;
    // Denied (an admin removed the approver's access to the legacy ConfigMaps): none, looked at again in a minute.
    if (rv === '') {
      await pause(60_000, signal, clock);
      throw new WatchExpiredError('looking again');
    }
    const query = {
      ...this.#opts.query,
      resourceVersion: rv,
      allowWatchBookmarks: true,
      timeoutSeconds: this.#opts.watchTimeoutSeconds ?? 300,
    };
    const idleMs = (query.timeoutSeconds + 15) * 1000;
    try {
      for await (const event of this.#client.watch<T & { code?: number }>(this.#opts.path, query, signal, idleMs)) {
        if (event.type === 'ERROR') {
          if (event.object.code === 410) throw new WatchExpiredError(`${this.#opts.kind} watch expired (410 Gone)`);
          throw new Error(`watch error: ${JSON.stringify(event.object).slice(0, 200)}`);
        }
        if (event.object?.kind !== this.#opts.kind)
          throw new UnexpectedObjectError(
            `${this.#opts.kind} watch: a ${event.type} event carries a ${String(event.object?.kind).slice(0, 64)}`,
          );
        rv = event.object.metadata.resourceVersion ?? rv;
        if (event.type === 'BOOKMARK') continue;
        const name = event.object.metadata.name;
        if (event.type === 'DELETED') this.#store.delete(name);
        else this.#store.set(name, event.object);
        this.#opts.onChange?.(name, event.type, event.object.metadata.resourceVersion ?? '');
      }
    } catch (err) {
      if (err instanceof ApiError && err.status === 410) throw new WatchExpiredError(`${this.#opts.kind} watch expired (410 Gone)`);
      throw err;
    }
    if (signal.aborted) throw new Error('stopped');
    return rv;
  }
}

/** The ConfigMaps of an earlier release the approver follows, to refuse what they still say. */
export const LEGACY_FOLLOWED = [LEGACY_REVOCATIONS, LEGACY_REPLACEMENTS, LEGACY_INVENTORY] as const;
export type LegacyFollowed = (typeof LEGACY_FOLLOWED)[number];

type RecordStores = { [R in RecordResource]: ObjectInformer<RecordObjects[R]> };
type LegacyStores = Record<LegacyFollowed, ObjectInformer<LegacyConfigMap>>;

/** The approver's view of the records: one informer per resource, and one per legacy ConfigMap. */
export class RecordInformers {
  readonly #records: RecordStores;
  readonly #legacy: LegacyStores;
  readonly #client: KubeClient;

  constructor(
    client: KubeClient,
    logger: Logger,
    opts: {
      clock?: Clock;
      onChange?: (resource: RecordResource | 'configmaps', name: string, type: string, resourceVersion: string) => void;
    } = {},
  ) {
    this.#client = client;
    const make = <R extends RecordResource>(resource: R) =>
      new ObjectInformer<RecordObjects[R]>(
        client,
        {
          path: recordsPath(resource),
          kind: KINDS[resource],
          clock: opts.clock,
          onChange: (name, type, rv) => opts.onChange?.(resource, name, type, rv),
        },
        logger,
      );
    this.#records = Object.fromEntries(RECORD_RESOURCES.map((r) => [r, make(r)])) as RecordStores;
    this.#legacy = Object.fromEntries(
      LEGACY_FOLLOWED.map((name) => [
        name,
        new ObjectInformer<LegacyConfigMap>(
          client,
          {
            path: LEGACY_CONFIGMAPS,
            kind: 'ConfigMap',
            query: { fieldSelector: `metadata.name=${name}` },
            absentIfDenied: true,
            clock: opts.clock,
            onChange: (_, type, rv) => opts.onChange?.('configmaps', name, type, rv),
          },
          logger,
        ),
      ]),
    ) as LegacyStores;
  }

  get<R extends RecordResource>(resource: R, name: string): RecordObjects[R] | null {
    return (this.#records[resource] as ObjectInformer<RecordObjects[R]>).get(name) ?? null;
  }

  informer<R extends RecordResource>(resource: R): ObjectInformer<RecordObjects[R]> {
    return this.#records[resource] as ObjectInformer<RecordObjects[R]>;
  }

  /** A legacy ConfigMap the approver follows, or null when there is none (or it may not read them). */
  legacy(name: LegacyFollowed): LegacyConfigMap | null {
    return this.#legacy[name].get(name) ?? null;
  }

  /** A legacy `token-<id>` ConfigMap, read when a token has no TokenBinding: null when there is none, or it may not read it. */
  async legacyBinding(name: string, signal?: AbortSignal): Promise<LegacyConfigMap | null> {
    const res = await this.#client.request<LegacyConfigMap>('GET', objectPath(LEGACY_CONFIGMAPS, name), { accept: [403, 404], signal });
    return res.status === 200 ? res.body : null;
  }

  /** An object this process wrote, as the API server answered. */
  remember(resource: RecordResource, object: RecordObject): void {
    (this.#records[resource] as ObjectInformer<RecordObject>).remember(object);
  }

  /** An object this process read past the informer (null: none). */
  refresh(resource: RecordResource, name: string, object: RecordObject | null): void {
    (this.#records[resource] as ObjectInformer<RecordObject>).refresh(name, object);
  }

  get synced(): boolean {
    return this.#all().every((i) => i.synced);
  }

  /** For /readyz: which informer is not in sync, and why. */
  get notSyncedBecause(): string | null {
    return this.#all().find((i) => !i.synced)?.notSyncedBecause ?? null;
  }

  /** The legacy ConfigMaps still there, for /readyz and the start-up warning. */
  legacyPresent(): string[] {
    return LEGACY_FOLLOWED.filter((name) => this.legacy(name) !== null);
  }

  #all(): ObjectInformer<Named>[] {
    return [...Object.values(this.#records), ...Object.values(this.#legacy)] as ObjectInformer<Named>[];
  }

  whenSynced(): Promise<unknown> {
    return Promise.all(this.#all().map((i) => i.whenSynced));
  }

  async run(signal: AbortSignal): Promise<void> {
    await Promise.all(this.#all().map((i) => i.run(signal)));
  }
}
