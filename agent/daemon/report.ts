/**
 * What the daemon tells the outside about its identities: /readyz, systemd's
 * READY=1 and STATUS=, the log's "ready" lines and `<stateDir>/status.json`.
 * The daemon hands over one record per identity (state.ts) after every change; the
 * words are chosen here, from the records, never by filtering formatted text.
 */
import { IDENTITY_ROLES } from '../config/identities.js';
import type { Log } from '../log-lines.js';
import type { Readiness } from '../service/http.js';
import type { Notifier } from '../service/notify.js';
import { validUntil, type IdentityRecord } from '../renewal/record.js';
import { writeDaemonState } from './state.js';

function describe(record: IdentityRecord, now: Date): string {
  const valid = validUntil(record, now);
  if (valid) return `valid until ${valid.toISOString()}`;
  const csr = record.pendingCsr;
  if (csr) return `waiting for CSR ${csr} to be approved (kubectl certificate approve ${csr})`;
  return record.lastError ?? (record.notAfter ? `expired at ${record.notAfter}` : 'no valid certificate');
}

const line = (now: Date) => (record: IdentityRecord) => `${record.name}: ${describe(record, now)}`;

/** /readyz: every identity holds a certificate valid right now. */
export function readinessOf(records: IdentityRecord[], now: Date): Readiness {
  return { ready: records.every((r) => validUntil(r, now) !== null), detail: records.map(line(now)) };
}

const holdsReady = (r: IdentityRecord) => IDENTITY_ROLES[r.name].holdsReady;

/** READY=1: the kubelet's credential is valid; the other identities may still be pending. */
export function nodeReadyOf(records: IdentityRecord[], now: Date): boolean {
  const held = records.filter(holdsReady);
  return held.length > 0 && held.every((r) => validUntil(r, now) !== null);
}

/** The identities READY=1 does not wait for that still have no valid credential. */
function pendingOthers(records: IdentityRecord[], now: Date): string {
  return records
    .filter((r) => !holdsReady(r) && validUntil(r, now) === null)
    .map(line(now))
    .join('; ');
}

/** systemd's STATUS= line. */
export function statusText(records: IdentityRecord[], now: Date): string {
  const { ready, detail } = readinessOf(records, now);
  if (ready) return `credentials valid: ${detail.join('; ')}`;
  if (nodeReadyOf(records, now)) return `kubelet ready; pending: ${pendingOthers(records, now)}`;
  return `not ready: ${detail.join('; ')}`;
}

export interface ReporterOptions {
  notifier: Notifier;
  logger: Log;
  stateDir: () => string;
  now: () => Date;
}

/** Sends READY=1 once, STATUS= on every change, logs each transition to all-valid once, keeps status.json current. */
export class Reporter {
  readonly #o: ReporterOptions;
  #readySent = false;
  #allValidLogged = false;
  /** While the status listener is not bound, why: appended to STATUS= and kept in status.json. */
  listenerProblem: string | null = null;

  constructor(options: ReporterOptions) {
    this.#o = options;
  }

  /** `status` with the listener's problem, if any. */
  withListener(status: string): string {
    return this.listenerProblem === null ? status : `${status}; ${this.listenerProblem}`;
  }

  async publish(records: IdentityRecord[]): Promise<void> {
    const { notifier, logger } = this.#o;
    const now = this.#o.now();
    const { ready } = readinessOf(records, now);
    const status = this.withListener(statusText(records, now));
    if (nodeReadyOf(records, now) && !this.#readySent) {
      this.#readySent = true;
      await notifier.ready(status);
      logger.info(
        ready
          ? 'all credentials valid; ready'
          : `kubelet credential valid; ready (the kubelet may start); pending: ${pendingOthers(records, now)}`,
      );
    } else {
      await notifier.status(status);
      if (ready && !this.#allValidLogged) logger.info('all credentials valid');
    }
    this.#allValidLogged = ready;
    const identities = Object.fromEntries(records.map((r) => [r.name, r]));
    const listener = this.listenerProblem === null ? {} : { statusListener: this.listenerProblem };
    await writeDaemonState(this.#o.stateDir(), { pid: process.pid, updated: now.toISOString(), identities, ...listener }).catch(
      (err: Error) => logger.warn(`cannot write status file: ${err.message}`),
    );
  }
}
