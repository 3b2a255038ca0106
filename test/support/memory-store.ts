/**
 * An in-memory Store: the pass's files as a map, so issue, assess, the
 * requester and the bootstrap flow are unit-tested without a file system.
 * It keeps the kubelet's layout in its names (a timestamped file per
 * credential, `-current.pem` holding a copy of the current one), so
 * kubeconfigs that name `-current.pem` resolve as they do on disk; which
 * file it stands for is remembered as the link's target is on disk.
 */
import { currentCertPath, type Identity, type IdentityName } from '../../agent/identity.js';
import { newestFirst, splitCredential, timestampOf } from '../../agent/store/cert-store.js';
import { pendingKeyPath } from '../../agent/store/pending-key.js';
import type { Store } from '../../agent/store/store.js';

export interface MemoryStore extends Store {
  /** Every file by path: inputs placed by the test, and what the pass wrote. */
  readonly files: Map<string, string>;
  /** Paths written, in order. */
  readonly writes: string[];
  /** Paths removed, in order. */
  readonly removes: string[];
}

export function memoryStore(initial: Record<string, string> = {}): MemoryStore {
  const files = new Map(Object.entries(initial));
  const writes: string[] = [];
  const removes: string[] = [];
  /** `-current.pem` → the file it stands for, as `update` left it. */
  const links = new Map<string, string>();
  const targetOf = (currentPath: string): string | null => {
    const text = files.get(currentPath);
    if (text === undefined) return null;
    const target = links.get(currentPath);
    // Placed or replaced by the test itself: it stands for no other file.
    return target !== undefined && files.get(target) === text ? target : currentPath;
  };
  const put = (file: string, text: string): void => {
    files.set(file, text);
    writes.push(file);
  };
  return {
    files,
    writes,
    removes,
    read: async (file) => files.get(file) ?? null,
    assertWritable: async () => undefined,
    write: async (file, text) => put(file, text),
    current: async (identity: Identity) => {
      const current = currentCertPath(identity);
      const file = targetOf(current);
      if (file === null) return null;
      const credential = splitCredential(files.get(current)!);
      if (credential === null) throw new Error(`${file} is not a certificate and key bundle`);
      return { ...credential, file };
    },
    update: async (identity, certPem, keyPem, now) => {
      const file = `${identity.certDir}/${identity.filePrefix}-${timestampOf(now)}.pem`;
      const currentPath = currentCertPath(identity);
      // As storeCredential writes it: whole PEM blocks, each ending in a newline (a real TLS connection reads the
      // kubeconfig's `-current.pem` as the kubelet does). A test's placeholder text is kept as given.
      const credential = splitCredential(certPem + keyPem);
      const text = credential === null ? certPem + keyPem : credential.certPem + credential.keyPem;
      put(file, text);
      put(currentPath, text);
      links.set(currentPath, file);
      return { file, currentPath };
    },
    prune: async (identity, keep) => {
      const dir = `${identity.certDir}/`;
      const names = [...files.keys()].filter((f) => f.startsWith(dir)).map((f) => f.slice(dir.length));
      const current = currentCertPath(identity);
      const target = targetOf(current);
      // A test that replaced `-current.pem` by hand: the file with its content is the one it points at.
      const text = target === current ? files.get(current) : undefined;
      const removed = newestFirst(identity, names)
        .slice(keep)
        .map((name) => dir + name)
        .filter((file) => file !== target && (text === undefined || files.get(file) !== text));
      for (const file of removed) files.delete(file);
      return removed;
    },
    remove: async (file) => {
      if (!files.delete(file)) return { removed: [], keptTarget: null };
      removes.push(file);
      return { removed: [file], keptTarget: null };
    },
    recover: async () => [],
    pendingKey: {
      load: async (stateDir, name: IdentityName) => files.get(pendingKeyPath(stateDir, name)) ?? null,
      save: async (stateDir, name, keyPem) => put(pendingKeyPath(stateDir, name), keyPem),
      clear: async (stateDir, name) => void files.delete(pendingKeyPath(stateDir, name)),
    },
  };
}
