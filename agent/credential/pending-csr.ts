/**
 * Which CSR an identity is waiting on, read from the node's own files: the
 * pending key is saved just before the CSR is sent, and the CSR's name is a
 * digest of that key and the identity, so its name and age need neither the
 * daemon nor the API server. `kubeboot status` and `kubeboot wait` show it.
 */
import { stat } from 'node:fs/promises';
import { formatDuration } from '../config/values.js';
import type { Identity } from '../identity.js';
import { csrName } from '../pki/csr-name.js';
import { parsePrivateKey } from '../pki/keys.js';
import { loadPendingKey, pendingKeyPath } from '../store/pending-key.js';

export interface PendingCsr {
  name: string;
  /** When the key was saved: the CSR was sent a moment later. */
  since: Date;
}

/** The CSR in flight for this identity, or null when none is (or its key is unreadable). */
export async function pendingCsr(stateDir: string, identity: Identity): Promise<PendingCsr | null> {
  try {
    const pem = await loadPendingKey(stateDir, identity.name);
    if (pem === null) return null;
    const key = await parsePrivateKey(pem);
    const { mtime } = await stat(pendingKeyPath(stateDir, identity.name));
    return { name: csrName(key.publicKeyDer, identity.subject, identity.usages), since: mtime };
  } catch {
    return null;
  }
}

/** "CSR node-csr-… pending for 3m12s; approve it with: kubectl certificate approve node-csr-…" */
export function describePending(pending: PendingCsr, now: Date): string {
  const seconds = Math.max(0, Math.round((now.getTime() - pending.since.getTime()) / 1000));
  return `CSR ${pending.name} pending for ${formatDuration(seconds)}; approve it with: kubectl certificate approve ${pending.name}`;
}
