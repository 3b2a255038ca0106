/**
 * The leader's freshness beacon (records/tpm-beacon.ts): while this process
 * leads, `tpmbeacons.kubeboot.io/kubeboot` is published at once when it is
 * missing, unreadable or due, and replaced every ROTATE_SECONDS after, each
 * write conditional on the resourceVersion read (two leaders for a moment
 * write one rotation, the other gets a 409 and reads again). What it wrote
 * is remembered at once, so the next decision accepts quotes over it before
 * the watch brings it. A failed write is retried after RETRY_MS: meanwhile
 * the beacons published stay accepted, so nodes wait for nothing.
 */
import { randomBytes } from 'node:crypto';
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import type { RecordInformers } from '../records/informer.js';
import { BEACON_BYTES, BEACON_NAME, BEACON_REF, rotatedBeacon, rotationDueIn } from '../records/tpm-beacon.js';
import type { TpmBeaconObject } from '../records/kinds.js';
import type { Clock, TimerHandle } from '../time/clock.js';
import { getRecord, writeClaim } from './api.js';

/** After a failed write, the next try. */
const RETRY_MS = 10_000;

export interface BeaconKeeperOptions {
  client: KubeClient;
  records: Pick<RecordInformers, 'get' | 'remember' | 'refresh'>;
  clock: Clock;
  logger: Logger;
  /** Runs one API call within the requests in flight, timed by what it is (lookups.ts timedCalls). */
  timed<T>(call: string, request: () => Promise<T>): Promise<T>;
  signal(): AbortSignal | undefined;
  /** Seam for tests: the beacon's bytes. */
  random?: () => Buffer;
}

export class BeaconKeeper {
  readonly #o: BeaconKeeperOptions;
  #timer: TimerHandle | null = null;
  #leading = false;
  /** A write in flight: its own echo from the watch must not start another. */
  #writing = false;
  /** The turn running, awaited by stop(): no request of it outlives the process's client. */
  #turning: Promise<void> = Promise.resolve();
  /** Rotations written: a test's and an operator's evidence that the leader keeps it fresh. */
  rotations = 0;

  constructor(o: BeaconKeeperOptions) {
    this.#o = o;
  }

  /** Leadership gained or lost: publishing starts now, or stops. */
  lead(leading: boolean): void {
    this.#leading = leading;
    this.#cancel();
    if (leading) this.#schedule(0);
  }

  /**
   * The record changed under it (the watch brought someone's write, or its
   * deletion): looked at again now, so an admin who deletes it gets a fresh
   * beacon at once, and quotes over the old ones are refused from then on.
   */
  changed(): void {
    if (this.#leading && !this.#writing) this.#schedule(0);
  }

  /** Stops, once the turn running (a request in flight, not aborted: see #write) has ended. */
  async stop(): Promise<void> {
    this.#leading = false;
    this.#cancel();
    await this.#turning;
  }

  #cancel(): void {
    if (this.#timer !== null) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = null;
  }

  #schedule(ms: number): void {
    this.#cancel();
    if (!this.#leading || this.#o.signal()?.aborted === true) return;
    this.#timer = this.#o.clock.setTimeout(() => {
      this.#timer = null;
      this.#turning = this.#turn();
    }, ms);
  }

  /** One look: write a rotation when due, then wait until the next is. */
  async #turn(): Promise<void> {
    if (!this.#leading || this.#o.signal()?.aborted === true) return;
    const { records, clock } = this.#o;
    const record = records.get('tpmbeacons', BEACON_NAME);
    const due = rotationDueIn(record, clock.now());
    if (due > 0) return this.#schedule(due);
    this.#writing = true;
    try {
      const written = await this.#write(record);
      if (written === null) {
        // Someone wrote it since it was read (another leader for a moment, the admin): read it again and decide anew.
        records.refresh(
          'tpmbeacons',
          BEACON_NAME,
          await this.#o.timed('record', () => getRecord(this.#o.client, 'tpmbeacons', BEACON_NAME)),
        );
        return this.#schedule(0);
      }
      records.remember('tpmbeacons', written);
      this.rotations++;
      this.#o.logger.info(`published a new beacon in ${BEACON_REF}; quotes over the one before it stay accepted for one rotation`);
      this.#schedule(rotationDueIn(written, clock.now()));
    } catch (err) {
      if (this.#o.signal()?.aborted === true) return;
      this.#o.logger.warn(`could not publish a new beacon in ${BEACON_REF}; the current ones stay accepted, retrying`, {
        error: (err as Error).message,
        retryInSeconds: RETRY_MS / 1000,
      });
      this.#schedule(RETRY_MS);
    } finally {
      this.#writing = false;
    }
  }

  async #write(record: TpmBeaconObject | null): Promise<TpmBeaconObject | null> {
    const { client, clock, timed } = this.#o;
    const next = rotatedBeacon(record, (this.#o.random ?? (() => randomBytes(BEACON_BYTES)))(), clock.now());
    const claim =
      record === null || record.metadata.resourceVersion === undefined
        ? ({ op: 'create', resource: 'tpmbeacons', name: BEACON_NAME, object: next } as const)
        : ({
            op: 'replace',
            resource: 'tpmbeacons',
            name: BEACON_NAME,
            resourceVersion: record.metadata.resourceVersion,
            object: next,
          } as const);
    // Not aborted by the stop signal: stop() waits for it instead. Node 24.22.3 aborts the whole
    // process (std::bad_alloc in Http2Stream::RstStream) when a stream is reset as the approver stops.
    return (await timed('record', () => writeClaim(client, claim))) as TpmBeaconObject | null;
  }
}
