/**
 * An in-memory Store: the pass's files as a map, so issue, assess, the
 * requester and the bootstrap flow are unit-tested without a file system.
 * It keeps the kubelet's layout in its names (a timestamped file per
 * credential, `-current.pem` holding the current one), so kubeconfigs that
 * name `-current.pem` resolve as they do on disk.
 */
import { currentCertPath, type Identity, type IdentityName } from '../../agent/identity.js';
import { splitCredential, timestampOf } from '../../agent/store/cert-store.js';
import { pendingKeyPath } from '../../agent/store/pending-key.js';
import type { Store } from '../../agent/store/store.js';

export interface MemoryStore extends Store {
  /** Every file by path: inputs placed by the test, and what the pass wrote. */
  readonly files: Map<string, string>;
  /** Paths written, in order. */
  readonly writes: string[];
}

export function memoryStore(initial: Record<string, string> = {}): MemoryStore {
  const files = new Map(Object.entries(initial));
  const writes: string[] = [];
  const put = (file: string, text: string): void => {
    files.set(file, text);
    writes.push(file);
  };
  return {
    files,
    writes,
    read: async (file) => files.get(file) ?? null,
    assertWritable: async () => undefined,
    write: async (file, text) => put(file, text),
    current: async (identity: Identity) => {
      const file = currentCertPath(identity);
      const text = files.get(file);
      if (text === undefined) return null;
      const credential = splitCredential(text);
      if (credential === null) throw new Error(`${file} is not a certificate and key bundle`);
      return { ...credential, file };
    },
    update: async (identity, certPem, keyPem, now) => {
      const file = `${identity.certDir}/${identity.filePrefix}-${timestampOf(now)}.pem`;
      const currentPath = currentCertPath(identity);
      put(file, certPem + keyPem);
      put(currentPath, certPem + keyPem);
      return { file, currentPath };
    },
    recover: async () => [],
    pendingKey: {
      load: async (stateDir, name: IdentityName) => files.get(pendingKeyPath(stateDir, name)) ?? null,
      save: async (stateDir, name, keyPem) => put(pendingKeyPath(stateDir, name), keyPem),
      clear: async (stateDir, name) => void files.delete(pendingKeyPath(stateDir, name)),
    },
  };
}
