/**
 * What the daemon tells the outside about its identities: /readyz, systemd's
 * READY=1 and STATUS=, the log's "ready" lines and `<stateDir>/status.json`.
 * The daemon hands over one typed view per identity after every change; the
 * words are chosen here, from the views, never by filtering formatted text.
 */
import { IDENTITY_ROLES } from '../config/identities.js';
import type { IdentityName } from '../identity.js';
import type { Log } from '../log-lines.js';
import type { Notifier } from './notify.js';
import { writeDaemonState, type IdentityState } from './state.js';

/** One identity as the daemon sees it at this moment. */
export interface IdentityView {
  name: IdentityName;
  /** notAfter of the credential that is valid right now; null when none is. */
  validUntil: Date | null;
  /** notAfter of the credential on disk when it has expired. */
  expiredAt: Date | null;
  state: IdentityState;
}

export interface Readiness {
  ready: boolean;
  detail: string[];
}

function describe(view: IdentityView): string {
  if (view.validUntil) return `valid until ${view.validUntil.toISOString()}`;
  const csr = view.state.pendingCsr;
  if (csr) return `waiting for CSR ${csr} to be approved (kubectl certificate approve ${csr})`;
  return view.state.lastError ?? (view.expiredAt ? `expired at ${view.expiredAt.toISOString()}` : 'no valid certificate');
}

function line(view: IdentityView): string {
  return `${view.name}: ${describe(view)}`;
}

/** /readyz: every identity holds a certificate valid right now. */
export function readinessOf(views: IdentityView[]): Readiness {
  return { ready: views.every((v) => v.validUntil !== null), detail: views.map(line) };
}

const holdsReady = (v: IdentityView) => IDENTITY_ROLES[v.name].holdsReady;

/** READY=1: the kubelet's credential is valid; the other identities may still be pending. */
export function nodeReadyOf(views: IdentityView[]): boolean {
  const held = views.filter(holdsReady);
  return held.length > 0 && held.every((v) => v.validUntil !== null);
}

/** The identities READY=1 does not wait for that still have no valid credential. */
function pendingOthers(views: IdentityView[]): string {
  return views
    .filter((v) => !holdsReady(v) && v.validUntil === null)
    .map(line)
    .join('; ');
}

/** systemd's STATUS= line. */
export function statusText(views: IdentityView[]): string {
  const { ready, detail } = readinessOf(views);
  if (ready) return `credentials valid: ${detail.join('; ')}`;
  if (nodeReadyOf(views)) return `kubelet ready; pending: ${pendingOthers(views)}`;
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

  constructor(options: ReporterOptions) {
    this.#o = options;
  }

  async publish(views: IdentityView[]): Promise<void> {
    const { notifier, logger } = this.#o;
    const { ready } = readinessOf(views);
    const status = statusText(views);
    if (nodeReadyOf(views) && !this.#readySent) {
      this.#readySent = true;
      await notifier.ready(status);
      logger.info(
        ready
          ? 'all credentials valid; ready'
          : `kubelet credential valid; ready (the kubelet may start); pending: ${pendingOthers(views)}`,
      );
    } else {
      await notifier.status(status);
      if (ready && !this.#allValidLogged) logger.info('all credentials valid');
    }
    this.#allValidLogged = ready;
    const identities: Record<string, IdentityState> = {};
    for (const v of views) identities[v.name] = v.state;
    await writeDaemonState(this.#o.stateDir(), { pid: process.pid, updated: this.#o.now().toISOString(), identities }).catch((err: Error) =>
      logger.warn(`cannot write status file: ${err.message}`),
    );
  }
}
