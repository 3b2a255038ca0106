/**
 * Notices credential files changed by someone other than kubeboot: an
 * operator restoring a backup, config management rewriting a kubeconfig, a
 * new bootstrap kubeconfig dropped in to recover an expired node.
 *
 * Watches DIRECTORIES (depth 0) and filters names: a per-file watch goes
 * deaf once the file is replaced by rename (chokidar#601, #1437), which is
 * how every careful writer, kubeboot included, replaces files. Events only
 * nudge the renewal loop to look again; its timer never depends on them.
 */
import { lstatSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { watch } from 'chokidar';
import { currentCertPath, type Identity, type IdentityName } from '../identity.js';
import type { Log } from '../log-lines.js';
import type { WriteObserver } from '../store/atomic.js';
import { isCredentialFileName } from '../store/cert-store.js';
import { systemClock } from '../time/clock.js';

/** kubeboot's own writes, announced by the store just before and after it makes them. */
export interface SelfWrites extends WriteObserver {
  willWrite(file: string): void;
  willRemove(file: string): void;
  didWrite(file: string): void;
  /**
   * Whether an event on `file` comes from kubeboot: an announcement younger
   * than the TTL, and — once the write finished — the file on disk still the
   * one kubeboot wrote. So an operator replacing or deleting a file kubeboot
   * has just written is still news.
   */
  isOwn(file: string, now?: number, kind?: 'changed' | 'removed'): boolean;
}

/** One write shows up as several events spread over a moment; a few seconds covers them. */
export const SELF_WRITE_TTL_MS = 5_000;

/** What a path is right now: inode, size, mtime and, for a link, its target. */
function fingerprint(file: string): string {
  try {
    const st = lstatSync(file);
    return `${st.ino}:${st.size}:${st.mtimeMs}:${st.isSymbolicLink() ? readlinkSync(file) : ''}`;
  } catch {
    return 'absent';
  }
}

export function createSelfWrites(options: { ttlMs?: number; now?: () => number } = {}): SelfWrites {
  const ttl = options.ttlMs ?? SELF_WRITE_TTL_MS;
  const clock = options.now ?? (() => systemClock.monotonic());
  /** path → when announced, and what it looked like once written (null while in progress). */
  const writes = new Map<string, { at: number; result: string | null }>();
  const removals = new Map<string, number>();
  const expire = (now: number): void => {
    for (const [f, w] of writes) if (now - w.at > ttl) writes.delete(f);
    for (const [f, at] of removals) if (now - at > ttl) removals.delete(f);
  };
  return {
    willWrite(file) {
      const now = clock();
      expire(now);
      writes.set(path.resolve(file), { at: now, result: null });
    },
    didWrite(file) {
      const entry = writes.get(path.resolve(file));
      if (entry) entry.result = fingerprint(file);
    },
    willRemove(file) {
      const now = clock();
      expire(now);
      removals.set(path.resolve(file), now);
    },
    isOwn(file, now = clock(), kind = 'changed') {
      const abs = path.resolve(file);
      if (kind === 'removed') {
        const at = removals.get(abs);
        return at !== undefined && now - at <= ttl;
      }
      const entry = writes.get(abs);
      if (entry === undefined || now - entry.at > ttl) return false;
      return entry.result === null || entry.result === fingerprint(abs);
    },
  };
}

export type CredentialFile = 'certificate' | 'kubeconfig' | 'bootstrap-kubeconfig';

export interface CredentialChange {
  /** Null for the bootstrap kubeconfig, which concerns every identity. */
  identity: IdentityName | null;
  file: CredentialFile;
  path: string;
  kind: 'changed' | 'removed';
}

/**
 * What a path is to kubeboot, or null. Certificates are `<prefix>-current.pem`
 * and the timestamped files it links to (client-go certificate_store names);
 * temp files never match.
 */
export function classify(
  file: string,
  identities: Identity[],
  bootstrapKubeconfig: string,
): Omit<CredentialChange, 'kind' | 'path'> | null {
  const abs = path.resolve(file);
  if (abs === path.resolve(bootstrapKubeconfig)) return { identity: null, file: 'bootstrap-kubeconfig' };
  for (const identity of identities) {
    if (identity.kubeconfigPath && abs === path.resolve(identity.kubeconfigPath)) return { identity: identity.name, file: 'kubeconfig' };
    if (path.dirname(abs) !== path.resolve(identity.certDir)) continue;
    if (isCredentialFileName(identity, path.basename(abs))) return { identity: identity.name, file: 'certificate' };
  }
  return null;
}

export interface WatchOptions {
  identities: Identity[];
  bootstrapKubeconfig: string;
  selfWrites: SelfWrites;
  logger: Log;
  onChange: (change: CredentialChange) => void;
  /** Events for one path closer together than this are reported once. */
  debounceMs?: number;
}

export interface CredentialWatcher {
  close(): Promise<void>;
}

/** Resolves once the watcher is armed. */
export async function watchCredentials(options: WatchOptions): Promise<CredentialWatcher> {
  const { identities, bootstrapKubeconfig, selfWrites, logger } = options;
  const debounceMs = options.debounceMs ?? 250;
  const dirs = new Set<string>([path.dirname(path.resolve(bootstrapKubeconfig))]);
  for (const identity of identities) {
    dirs.add(path.dirname(currentCertPath(identity)));
    if (identity.kubeconfigPath) dirs.add(path.dirname(path.resolve(identity.kubeconfigPath)));
  }

  const pending = new Map<string, { change: CredentialChange; timer: NodeJS.Timeout }>();
  // followSymlinks off: `<prefix>-current.pem` is a link, and replacing the
  // link is the change that matters.
  const watcher = watch([...dirs], { depth: 0, ignoreInitial: true, followSymlinks: false });

  // chokidar 5 reports symlinks found by its initial scan as 'add' even with
  // ignoreInitial when followSymlinks is off; nothing before 'ready' is news.
  let armed = false;
  watcher.on('all', (event, file) => {
    if (!armed) return;
    if (event !== 'add' && event !== 'change' && event !== 'unlink') return;
    const what = classify(file, identities, bootstrapKubeconfig);
    const kind = event === 'unlink' ? 'removed' : 'changed';
    if (!what || selfWrites.isOwn(file, undefined, kind)) return;
    const abs = path.resolve(file);
    const change: CredentialChange = { ...what, path: abs, kind };
    const before = pending.get(abs);
    if (before) clearTimeout(before.timer);
    const timer = setTimeout(() => {
      pending.delete(abs);
      // Asked again once the events settled: a pass announces its writes over
      // IPC, which may arrive after the file event it caused.
      if (selfWrites.isOwn(abs, undefined, kind)) return;
      options.onChange(change);
    }, debounceMs);
    pending.set(abs, { change, timer });
  });
  watcher.on('error', (err) => logger.warn('file watcher error; renewal timing is unaffected', { error: (err as Error).message }));

  await new Promise<void>((resolve) => watcher.once('ready', () => resolve()));
  armed = true;
  logger.debug('watching credential directories', { dirs: [...dirs] });

  return {
    async close() {
      for (const { timer } of pending.values()) clearTimeout(timer);
      pending.clear();
      await watcher.close();
    },
  };
}
