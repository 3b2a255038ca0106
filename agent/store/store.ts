/**
 * What kubeboot keeps on a node's disk, as a value passed in (client-go's
 * certificate Store is two methods, Current and Update; a pass also reads
 * its inputs, writes kubeconfigs, keeps the key of an in-flight CSR, and
 * prunes the credentials a renewal left behind, removes the bootstrap token
 * once it is no longer needed; a join writes the bootstrap
 * kubeconfig through it, the CA keeper the kubelet's client-CA file, the
 * kubeconfigs' CA and its bookkeeping).
 * `fileStore` is the real one; tests use an in-memory one, so the pass is
 * unit-tested without a file system.
 */
import { access, constants } from 'node:fs/promises';
import path from 'node:path';
import type { Identity, IdentityName } from '../identity.js';
import { readOptional, type ReadFile } from '../read-optional.js';
import { ensureDir, fileError, writeFileAtomic, type WriteObserver } from './atomic.js';
import { loadCurrent, pruneOld, recoverStore, storeCredential, type Credential } from './cert-store.js';
import { clearPendingKey, loadPendingKey, savePendingKey } from './pending-key.js';
import { type Removed, removeSecret } from './remove.js';

export type { Removed } from './remove.js';

export interface Store {
  /** An input's text (a kubeconfig, a file it names), or null when there is none. */
  read: ReadFile;
  /** Throws the error a write of `file` would, before anything is changed. */
  assertWritable(file: string): Promise<void>;
  /**
   * Replaces a file whole: 0600, or `mode` for one every reader may see (a CA
   * bundle, 0644); with `dirMode`, its missing directories are made first.
   */
  write(file: string, text: string, options?: { mode?: number; dirMode?: number }): Promise<void>;
  /** The identity's current credential (what `-current.pem` resolves to), or null. */
  current(identity: Identity): Promise<(Credential & { file: string }) | null>;
  /** Keeps a new credential and makes it current; the previous one stays until pruned. */
  update(identity: Identity, certPem: string, keyPem: string, now: Date): Promise<{ file: string; currentPath: string }>;
  /** Removes the identity's credential files beyond the newest `keep`, never the current one; returns the paths removed. */
  prune(identity: Identity, keep: number): Promise<string[]>;
  /**
   * Removes a file holding a secret, durably (its directory synced); a link
   * is followed to a target that is kubeboot's to delete. Nothing there is no error.
   */
  remove(file: string): Promise<Removed>;
  /** Puts right what a crash left half done; one line per action, for the log. */
  recover(identity: Identity): Promise<string[]>;
  /** The key of an in-flight CSR, kept from before the CSR is sent until it is answered. */
  pendingKey: {
    load(stateDir: string, name: IdentityName): Promise<string | null>;
    save(stateDir: string, name: IdentityName, keyPem: string): Promise<void>;
    clear(stateDir: string, name: IdentityName): Promise<void>;
  };
}

/** The kubelet's layout on disk (cert-store.ts, pending-key.ts, atomic writes); `observer` is told of every write. */
export function fileStore(options: { observer?: WriteObserver | undefined } = {}): Store {
  const opts = { observer: options.observer };
  return {
    read: (file) => readOptional(file),
    assertWritable: async (file) => {
      await access(path.dirname(file), constants.W_OK).catch((err: unknown) => {
        throw fileError('write', file, err);
      });
    },
    write: async (file, text, options = {}) => {
      if (options.dirMode !== undefined) await ensureDir(path.dirname(file), options.dirMode);
      await writeFileAtomic(file, text, { ...opts, mode: options.mode ?? 0o600 });
    },
    current: (identity) => loadCurrent(identity),
    update: (identity, certPem, keyPem, now) => storeCredential(identity, certPem, keyPem, now, opts),
    prune: (identity, keep) => pruneOld(identity, keep, opts),
    remove: (file) => removeSecret(file, opts.observer),
    recover: (identity) => recoverStore(identity, opts),
    pendingKey: {
      load: (stateDir, name) => loadPendingKey(stateDir, name),
      save: (stateDir, name, keyPem) => savePendingKey(stateDir, name, keyPem, opts),
      clear: (stateDir, name) => clearPendingKey(stateDir, name, opts),
    },
  };
}

/** The run's store: the one passed in, or the files on disk. */
export function storeOf(deps: { store?: Store | undefined; observer?: WriteObserver | undefined }): Store {
  return deps.store ?? fileStore({ observer: deps.observer });
}
