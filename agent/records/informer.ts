/**
 * The approver's view of the records (records/kinds.ts): one informer
 * (kube/informer.ts) per record resource, each feeding a store of whole
 * objects by name. Records are few and written by the admin, so no bound
 * beyond the API server's own on each object. The approver decides from the
 * stores (no GET per CSR), and what it writes itself is remembered at once,
 * so its next decision sees it even before the watch brings it. One more
 * informer follows each ConfigMap of an earlier release that the approver
 * must not trust (records/legacy.ts): only to refuse what they still say.
 */
import type { KubeClient } from '../kube/client.js';
import { Informer, type InformerOptions, type KubeObject } from '../kube/informer.js';
import { objectPath } from '../kube/objects.js';
import type { Logger } from '../log.js';
import type { Clock } from '../time/clock.js';
import { KINDS, RECORD_RESOURCES, recordsPath, type RecordObject, type RecordObjects, type RecordResource } from './kinds.js';
import { LEGACY_CONFIGMAPS, LEGACY_INVENTORY, LEGACY_REPLACEMENTS, LEGACY_REVOCATIONS, type LegacyConfigMap } from './legacy.js';

/** An object was added, changed or deleted (`type` as a watch event names it; a re-list says MODIFIED). */
type OnChange = (name: string, type: 'ADDED' | 'MODIFIED' | 'DELETED', resourceVersion: string) => void;

/** Whole objects by name, as the informer that feeds it last saw them (client-go's cache.Store). */
class ObjectStore<T extends KubeObject> {
  readonly #objects = new Map<string, T>();
  readonly informer: Informer<T>;

  constructor(client: KubeClient, opts: InformerOptions, logger: Logger, onChange: OnChange) {
    const objects = this.#objects;
    const changed = (name: string, type: 'ADDED' | 'MODIFIED' | 'DELETED', object?: T) =>
      onChange(name, type, object?.metadata.resourceVersion ?? '');
    this.informer = new Informer<T>(
      client,
      opts,
      {
        // A list replaces the store whole once complete: a failed list leaves it as it was.
        list: () => {
          const seen = new Map<string, T>();
          return {
            add: (object) => seen.set(object.metadata.name, object),
            done: () => {
              const before = [...objects.keys()];
              objects.clear();
              for (const [name, object] of seen) objects.set(name, object);
              for (const name of new Set([...before, ...seen.keys()]))
                changed(name, seen.has(name) ? 'MODIFIED' : 'DELETED', seen.get(name));
            },
          };
        },
        update: (object, type) => {
          objects.set(object.metadata.name, object);
          changed(object.metadata.name, type, object);
        },
        delete: (object) => {
          objects.delete(object.metadata.name);
          changed(object.metadata.name, 'DELETED', object);
        },
      },
      logger,
    );
  }

  get(name: string): T | undefined {
    return this.#objects.get(name);
  }

  /** What this process wrote or read past the informer, as the API server answered (null: none); the watch brings it again later. */
  set(name: string, object: T | null): void {
    if (object === null) this.#objects.delete(name);
    else this.#objects.set(name, object);
  }
}

/** The ConfigMaps of an earlier release the approver follows, to refuse what they still say. */
export const LEGACY_FOLLOWED = [LEGACY_REVOCATIONS, LEGACY_REPLACEMENTS, LEGACY_INVENTORY] as const;
export type LegacyFollowed = (typeof LEGACY_FOLLOWED)[number];

type RecordStores = { [R in RecordResource]: ObjectStore<RecordObjects[R]> };
type LegacyStores = Record<LegacyFollowed, ObjectStore<LegacyConfigMap>>;

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
    const clock = opts.clock ? { clock: opts.clock } : {};
    const make = <R extends RecordResource>(resource: R) =>
      new ObjectStore<RecordObjects[R]>(
        client,
        { path: recordsPath(resource), kind: KINDS[resource], ...clock },
        logger,
        (name, type, rv) => opts.onChange?.(resource, name, type, rv),
      );
    this.#records = Object.fromEntries(RECORD_RESOURCES.map((r) => [r, make(r)])) as RecordStores;
    const follow = (name: LegacyFollowed) =>
      new ObjectStore<LegacyConfigMap>(
        client,
        { path: LEGACY_CONFIGMAPS, kind: 'ConfigMap', query: { fieldSelector: `metadata.name=${name}` }, absentIfDenied: true, ...clock },
        logger,
        (_, type, rv) => opts.onChange?.('configmaps', name, type, rv),
      );
    this.#legacy = Object.fromEntries(LEGACY_FOLLOWED.map((name) => [name, follow(name)])) as LegacyStores;
  }

  get<R extends RecordResource>(resource: R, name: string): RecordObjects[R] | null {
    return (this.#records[resource] as ObjectStore<RecordObjects[R]>).get(name) ?? null;
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
    (this.#records[resource] as ObjectStore<RecordObject>).set(object.metadata.name, object);
  }

  /** An object this process read past the informer (null: none). */
  refresh(resource: RecordResource, name: string, object: RecordObject | null): void {
    (this.#records[resource] as ObjectStore<RecordObject>).set(name, object);
  }

  get synced(): boolean {
    return this.#all().every((i) => i.synced);
  }

  /** For /readyz: which informer is not in sync, and why. */
  get notSyncedBecause(): string | null {
    const informer = this.#all().find((i) => !i.synced);
    return informer === undefined ? null : `${informer.what}: ${informer.notSyncedBecause ?? ''}`;
  }

  /** The legacy ConfigMaps still there, for /readyz and the start-up warning. */
  legacyPresent(): string[] {
    return LEGACY_FOLLOWED.filter((name) => this.legacy(name) !== null);
  }

  #all(): Informer<KubeObject>[] {
    return [...Object.values(this.#records), ...Object.values(this.#legacy)].map((store) => (store as ObjectStore<KubeObject>).informer);
  }

  whenSynced(): Promise<unknown> {
    return Promise.all(this.#all().map((i) => i.whenSynced));
  }

  async run(signal: AbortSignal): Promise<void> {
    await Promise.all(this.#all().map((i) => i.run(signal)));
  }
}
