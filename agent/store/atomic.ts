/**
 * Crash-safe file primitives. A reader (the kubelet, kube-proxy, kubectl)
 * sees either the whole old file or the whole new one, never a prefix:
 * content goes to a temp file in the same directory, is fsynced, renamed over
 * the target, and the directory is fsynced so the rename survives power loss.
 */
import { randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import path from 'node:path';
import { ExitCode, KubebootError } from '../errors.js';

/**
 * The file-system calls this module makes. Production uses node:fs/promises;
 * tests pass a wrapper that fails one call to simulate a crash at that step.
 */
export interface FsOps {
  open: typeof fsp.open;
  rename: typeof fsp.rename;
  unlink: typeof fsp.unlink;
  symlink: typeof fsp.symlink;
  link: typeof fsp.link;
  mkdir: typeof fsp.mkdir;
  chmod: typeof fsp.chmod;
  lstat: typeof fsp.lstat;
}

export const realFs: FsOps = {
  open: fsp.open,
  rename: fsp.rename,
  unlink: fsp.unlink,
  symlink: fsp.symlink,
  link: fsp.link,
  mkdir: fsp.mkdir,
  chmod: fsp.chmod,
  lstat: fsp.lstat,
};

/**
 * Told the final path before kubeboot replaces or removes it, so the file
 * watcher can tell its own writes from an operator's. Temp names are not
 * reported; `isTempName` recognises them.
 */
export interface WriteObserver {
  willWrite(file: string): void;
  /** Told before kubeboot itself deletes `file`; falls back to willWrite. */
  willRemove?(file: string): void;
  /** Told once `file` holds what kubeboot wrote, so later changes can be told apart. */
  didWrite?(file: string): void;
}

export interface WriteOptions {
  observer?: WriteObserver | undefined;
  /** For tests only: inject failures. */
  fs?: FsOps | undefined;
}

const TEMP_MARKER = '.tmp-';

/** A unique sibling name for `file`: `<dir>/<prefix><base>.tmp-<hex>`. */
export function tempPathFor(file: string, prefix = '.'): string {
  return path.join(path.dirname(file), `${prefix}${path.basename(file)}${TEMP_MARKER}${randomBytes(6).toString('hex')}`);
}

/** True for names this module (or a crashed run of it) leaves while writing. */
export function isTempName(name: string): boolean {
  return /\.tmp-[0-9a-f]{12}$/.test(path.basename(name));
}

/** The errno name (`ENOENT`, ...) of a Node file-system error, if any. */
export function errnoCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}

/**
 * A file-system failure as the operator needs it: the file kubeboot meant
 * (not a temp name), what went wrong in words, and no stack. ENOSPC, EROFS
 * and EACCES are what a full disk, a read-only mount and a locked-down
 * directory look like.
 */
export function fileError(action: 'write' | 'delete' | 'read', file: string, err: unknown): KubebootError {
  const code = errnoCode(err);
  if (code === undefined)
    return err instanceof KubebootError
      ? err
      : new KubebootError(`cannot ${action} ${file}: ${(err as Error).message}`, undefined, { cause: err });
  const words: Record<string, string> = {
    ENOSPC: 'no space left on the device; free some and kubeboot retries',
    EDQUOT: 'disk quota exceeded',
    EROFS: 'the file system is read-only; make the directory writable (a unit drop-in with ReadWritePaths=, or remount)',
    EACCES: 'permission denied',
    EPERM: 'operation not permitted',
    ENOENT: 'its directory does not exist',
    ENOTDIR: 'a path component is not a directory',
    EISDIR: 'it is a directory',
  };
  return new KubebootError(`cannot ${action} ${file}: ${code}: ${words[code] ?? (err as Error).message}`, undefined, { cause: err });
}

/** Makes a rename, link or unlink in `dir` durable. */
export async function fsyncDir(dir: string, fs: FsOps = realFs): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } catch (err) {
    // Some file systems (certain FUSE and network mounts) cannot fsync a
    // directory; the rename itself is still atomic there.
    if (errnoCode(err) !== 'EINVAL') throw err;
  } finally {
    await handle.close();
  }
}

async function removeQuietly(file: string, fs: FsOps): Promise<void> {
  try {
    await fs.unlink(file);
  } catch {
    // Best effort: the caller is already reporting the original failure,
    // and recoverStore sweeps leftover temp names at the next start.
  }
}

/**
 * Replaces `file` with `data` atomically. The temp file is created with
 * `mode` (never wider, never chmod'ed after content is written); on any
 * failure it is removed and `file` is untouched.
 */
export async function writeFileAtomic(file: string, data: string | Uint8Array, opts: WriteOptions & { mode: number }): Promise<void> {
  const fs = opts.fs ?? realFs;
  const tmp = tempPathFor(file);
  const handle = await fs.open(tmp, 'wx', opts.mode).catch((err: unknown) => {
    throw fileError('write', file, err);
  });
  try {
    try {
      // The umask may have narrowed the mode (0644 under umask 077); set it
      // exactly while the file is still empty.
      await handle.chmod(opts.mode);
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    opts.observer?.willWrite(file);
    await fs.rename(tmp, file);
    opts.observer?.didWrite?.(file);
  } catch (err) {
    await removeQuietly(tmp, fs);
    throw fileError('write', file, err);
  }
  await fsyncDir(path.dirname(file), fs);
}

/**
 * Why `stat` (of `what`, a directory or a key file) cannot be trusted with
 * keys, or null: it must belong to the uid kubeboot runs as and must not be
 * writable by group or others. Someone else who can write there can plant a
 * key (`kubelet.key.pending`) or swap a file between our write and rename.
 */
export function trustProblem(what: string, stat: { uid: number; mode: number }, uid: number = process.getuid?.() ?? 0): string | null {
  if (stat.uid !== uid)
    return `${what} is owned by uid ${stat.uid}, not by uid ${uid} that kubeboot runs as; refusing to keep credentials there (chown ${uid} it)`;
  if ((stat.mode & 0o022) !== 0) {
    return `${what} is writable by group or others (mode ${(stat.mode & 0o7777).toString(8).padStart(4, '0')}); refusing to keep credentials there (chmod go-w it)`;
  }
  return null;
}

/** An existing directory kubeboot writes into passes trustProblem; exit 2 otherwise. */
export async function assertTrustedDir(dir: string, fs: FsOps = realFs): Promise<void> {
  const stat = await fs.lstat(dir);
  const problem = trustProblem(dir, stat);
  if (problem !== null) throw new KubebootError(problem, ExitCode.badInput);
}

/**
 * Creates `dir` and any missing parents with exactly `mode` and returns the
 * directories it created, outermost first. Existing directories keep their
 * mode and owner: /var/lib/kubelet/pki is 0755 on kubeadm nodes and is not
 * ours to tighten; but an existing `dir` someone else owns or can write is
 * refused (assertTrustedDir).
 */
export async function ensureDir(dir: string, mode: number, fs: FsOps = realFs): Promise<string[]> {
  const missing: string[] = [];
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    try {
      const stat = await fs.lstat(current);
      if (!stat.isDirectory()) throw new KubebootError(`${current} exists and is not a directory`);
      break;
    } catch (err) {
      // ENOTDIR: a file further up is in the way; the walk reaches it and says so.
      if (errnoCode(err) !== 'ENOENT' && errnoCode(err) !== 'ENOTDIR') throw err;
      missing.unshift(current);
      if (path.dirname(current) === current) break;
    }
  }
  if (missing.length === 0) await assertTrustedDir(path.resolve(dir), fs);
  const created: string[] = [];
  for (const d of missing) {
    try {
      await fs.mkdir(d, { mode });
    } catch (err) {
      // Created meanwhile by someone else: kept as it is, but only if it could
      // have been made by us (ours, not writable by others), as an existing one.
      if (errnoCode(err) === 'EEXIST') {
        await assertTrustedDir(d, fs);
        continue;
      }
      throw err;
    }
    // mkdir's mode is filtered by the umask. Set it through a handle opened
    // without following links: if a writable parent let someone swap in a
    // link meanwhile, a chmod by path would change the mode of its target.
    const handle = await fs.open(d, fsp.constants.O_RDONLY | fsp.constants.O_DIRECTORY | fsp.constants.O_NOFOLLOW);
    try {
      const problem = trustProblem(d, { ...(await handle.stat()), mode: 0 });
      if (problem !== null) throw new KubebootError(problem, ExitCode.badInput);
      await handle.chmod(mode);
    } finally {
      await handle.close();
    }
    await fsyncDir(path.dirname(d), fs);
    created.push(d);
  }
  return created;
}

/** Unlinks `file` and makes that durable; a file already gone is not an error. */
export async function removeFileDurably(file: string, opts: WriteOptions = {}): Promise<void> {
  const fs = opts.fs ?? realFs;
  if (opts.observer?.willRemove) opts.observer.willRemove(file);
  else opts.observer?.willWrite(file);
  try {
    await fs.unlink(file);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return;
    throw fileError('delete', file, err);
  }
  await fsyncDir(path.dirname(file), fs);
}
