/**
 * The one shape of an identity's state: what the daemon holds, what a worker
 * answers after a step, what `<stateDir>/status.json` holds and what /readyz,
 * READY=1 and the reporter read. Plain JSON, the same in memory and on the
 * wire; whether a certificate is valid is asked of the clock (`validUntil`),
 * never stored.
 */
import type { IdentityName } from '../identity.js';

export interface HookOutcome {
  argv: string[];
  ok: boolean;
  exitCode: number | null;
  at: string;
}

export interface IdentityRecord {
  name: IdentityName;
  /** notAfter of the certificate last seen usable on disk (or just issued), valid or expired by now; null when none was. */
  notAfter: string | null;
  nextRenewal: string | null;
  lastSuccess: string | null;
  lastError: string | null;
  /** The CSR this identity waits on, while it waits. */
  pendingCsr: string | null;
  lastHooks: HookOutcome[];
  /**
   * The renewal deadline drawn (with jitter) for one certificate under one
   * renew margin: drawn once per certificate, drawn again when SIGHUP
   * changes the margin.
   */
  deadline: { certKey: string; at: string } | null;
  /** Consecutive failures, for the retry back-off. */
  attempt: number;
  /** Who renews the kubelet's certificate, as last logged. */
  renewerSaid: string | null;
}

export function emptyRecord(name: IdentityName): IdentityRecord {
  return {
    name,
    notAfter: null,
    nextRenewal: null,
    lastSuccess: null,
    lastError: null,
    pendingCsr: null,
    lastHooks: [],
    deadline: null,
    attempt: 0,
    renewerSaid: null,
  };
}

/** What `kubeboot status` shows of a record: the operator's fields, not the scheduler's. */
export type IdentityState = Pick<IdentityRecord, 'nextRenewal' | 'lastSuccess' | 'lastError' | 'pendingCsr' | 'lastHooks'>;

export function publicState(record: IdentityRecord): IdentityState {
  const { nextRenewal, lastSuccess, lastError, pendingCsr, lastHooks } = record;
  return { nextRenewal, lastSuccess, lastError, pendingCsr, lastHooks };
}

/** notAfter of the certificate when it is valid at `now`; null when none is. */
export function validUntil(record: IdentityRecord, now: Date): Date | null {
  if (record.notAfter === null) return null;
  const notAfter = new Date(record.notAfter);
  return notAfter > now ? notAfter : null;
}
