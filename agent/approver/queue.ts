/**
 * A keyed work queue in the shape of client-go's workqueue (util/workqueue):
 * a key is in the queue once however often it is added; a worker that takes
 * it has it alone until `done`, and a key added again meanwhile is queued
 * again at `done` (dirty, processing). `addAfter` and `addRateLimited` wait
 * on the injected Clock, the rate limit being the key's failures paced by
 * time/backoff.ts until it is forgotten.
 *
 * Two things client-go's does not: a worker takes a batch of keys at once
 * (the approver decides a batch on one view of the records), and keys fall
 * in groups (a CSR's requester) of which one batch at a time is in flight,
 * holding at most one key of the group's exclusive kind and nothing after it:
 * the one-blocking-CSR-per-requester rule (one-unissued-per-node relies on it).
 * A worker may `release` keys of the other kind before `done`, once what the
 * group's next batch must see is written: the group goes to the next batch.
 */
import type { Clock, TimerHandle } from '../time/clock.js';
import { nextDelay, type BackoffOptions } from '../time/backoff.js';

/** Where a key goes: its group, and whether a batch may hold it only as the group's first and last key. */
export interface Placement {
  group: string;
  exclusive: boolean;
}

export interface WorkQueueOptions<K> {
  clock: Clock;
  /** The pacing of `addRateLimited` (jitter 0 keeps it a function of the failures). */
  backoff: Readonly<BackoffOptions>;
  /** A key's placement, asked when it is queued and again when it is taken; null when there is nothing to do for it (it is dropped). */
  place(key: K): Placement | null;
  /** Seconds a key waited from its add to a worker taking it (workqueue's queue_duration). */
  waited?(seconds: number): void;
}

export class WorkQueue<K> {
  readonly #opts: WorkQueueOptions<K>;
  /** Keys waiting for a worker, by group, in the order added. */
  readonly #ready = new Map<string, Set<K>>();
  /** Keys to be processed: waiting for a worker, or added again while a worker has them. */
  readonly #dirty = new Set<K>();
  readonly #processing = new Set<K>();
  /** Group → its keys a worker has. */
  readonly #busy = new Map<string, number>();
  /** Key a worker has → its group, and whether it was taken as the group's exclusive kind. */
  readonly #groupOf = new Map<K, { group: string; exclusive: boolean }>();
  /** Key → its one pending add-after: the earliest asked. */
  readonly #later = new Map<K, { due: number; timer: TimerHandle }>();
  readonly #failures = new Map<K, number>();
  readonly #addedAt = new Map<K, number>();
  #workers: (() => void)[] = [];
  #shutDown = false;

  constructor(opts: WorkQueueOptions<K>) {
    this.#opts = opts;
  }

  add(key: K): void {
    if (this.#shutDown || this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (!this.#addedAt.has(key)) this.#addedAt.set(key, this.#opts.clock.monotonic());
    if (this.#processing.has(key)) return;
    this.#queue(key);
  }

  /** Adds the key after `ms`, unless an add of it is due sooner. */
  addAfter(key: K, ms: number): void {
    if (this.#shutDown) return;
    if (ms <= 0) {
      this.add(key);
      return;
    }
    const { clock } = this.#opts;
    const due = clock.monotonic() + ms;
    const pending = this.#later.get(key);
    if (pending !== undefined) {
      if (pending.due <= due) return;
      clock.clearTimeout(pending.timer);
    }
    const timer = clock.setTimeout(() => {
      this.#later.delete(key);
      this.add(key);
    }, ms);
    this.#later.set(key, { due, timer });
  }

  /** Adds the key after its back-off (one more failure); returns the wait, ms. */
  addRateLimited(key: K): number {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    const ms = nextDelay(failures, this.#opts.backoff, () => 0);
    this.addAfter(key, ms);
    return ms;
  }

  /** Stops counting the key's failures: its next rate-limited add waits the first back-off again. */
  forget(key: K): void {
    this.#failures.delete(key);
  }

  /** How often the key was added rate-limited since it was last forgotten. */
  numRequeues(key: K): number {
    return this.#failures.get(key) ?? 0;
  }

  /**
   * Up to `max` keys for one worker, waiting until there are some; none once
   * the queue is shut down. Every key taken must be given back with `done`.
   */
  async get(max: number): Promise<K[]> {
    for (;;) {
      if (this.#shutDown) return [];
      const batch = this.#take(max);
      if (batch.length > 0) return batch;
      await new Promise<void>((resolve) => this.#workers.push(resolve));
    }
  }

  /** The worker is done with the key: added again meanwhile, it is queued again. */
  done(key: K): void {
    if (!this.#processing.delete(key)) return;
    const busy = this.#leaveGroup(key);
    if (this.#dirty.has(key)) this.#queue(key);
    else if (busy === 0) this.#wake();
  }

  /**
   * The worker still has the key, but its group may go to another batch:
   * what the next batch of the group must see is written already (a pool's
   * names claimed; their approvals still to come). Not for a key of the
   * exclusive kind, whose next one must see its decision written.
   */
  release(key: K): void {
    if (this.#groupOf.get(key)?.exclusive !== false) return;
    if (this.#leaveGroup(key) === 0) this.#wake();
  }

  /** The key no longer holds its group; the group's keys still held (null: it held none). */
  #leaveGroup(key: K): number | null {
    const group = this.#groupOf.get(key)?.group;
    if (group === undefined) return null;
    this.#groupOf.delete(key);
    const busy = (this.#busy.get(group) ?? 1) - 1;
    if (busy > 0) this.#busy.set(group, busy);
    else this.#busy.delete(group);
    return busy;
  }

  /** Keys to be processed (waiting for a worker, or added again while one has them). */
  get length(): number {
    return this.#dirty.size;
  }

  /** Stops handing out keys and cancels every pending add-after: a stopping process holds no timer. */
  shutDown(): void {
    this.#shutDown = true;
    for (const { timer } of this.#later.values()) this.#opts.clock.clearTimeout(timer);
    this.#later.clear();
    this.#wake();
  }

  #queue(key: K): void {
    const group = this.#opts.place(key)?.group ?? '';
    let keys = this.#ready.get(group);
    if (keys === undefined) this.#ready.set(group, (keys = new Set()));
    keys.add(key);
    this.#wake();
  }

  #wake(): void {
    const workers = this.#workers;
    this.#workers = [];
    for (const resume of workers) resume();
  }

  /** The walk is over groups, so a group with thousands queued costs one step. */
  #take(max: number): K[] {
    const batch: K[] = [];
    for (const [group, keys] of this.#ready) {
      if (batch.length >= max) break;
      if (this.#busy.has(group)) continue;
      let took = 0;
      for (const key of keys) {
        if (batch.length >= max) break;
        const placement = this.#opts.place(key);
        if (placement?.exclusive && took > 0) break;
        keys.delete(key);
        this.#dirty.delete(key);
        const addedAt = this.#addedAt.get(key);
        this.#addedAt.delete(key);
        if (placement === null) continue;
        if (addedAt !== undefined) this.#opts.waited?.((this.#opts.clock.monotonic() - addedAt) / 1000);
        this.#processing.add(key);
        this.#groupOf.set(key, { group, exclusive: placement.exclusive });
        batch.push(key);
        took++;
        if (placement.exclusive) break;
      }
      if (keys.size === 0) this.#ready.delete(group);
      if (took > 0) this.#busy.set(group, took);
    }
    return batch;
  }
}
