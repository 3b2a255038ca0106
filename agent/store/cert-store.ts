/**
 * The kubelet's on-disk layout for one identity, as client-go's
 * certificate_store writes it: `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` holds the
 * certificate chain then the key (0600), and `<prefix>-current.pem` is a
 * symlink to its absolute path. Kubeconfigs point at the link, so rotating is
 * one rename.
 *
 * Unlike upstream, the link is replaced by renaming a new link over it; the
 * old one is never removed first, so there is no moment without a
 * `-current.pem` (upstream's crash window, patched there by recover()).
 */
import * as fsp from 'node:fs/promises';
import path from 'node:path';
import { KubebootError } from '../errors.js';
import { currentCertPath } from '../identity.js';
import type { Identity } from '../identity.js';
import { ensureDir, errnoCode, fsyncDir, realFs, removeFileDurably, tempPathFor, writeFileAtomic } from './atomic.js';
import type { WriteOptions } from './atomic.js';
import { intactPemBlocks, isPrivateKeyBlock } from '../pki/pem.js';

export type StoreOptions = WriteOptions;

export interface Credential {
  /** Leaf first, then intermediates, as issued. */
  certPem: string;
  keyPem: string;
}

/** Null unless `text` holds at least one CERTIFICATE block and exactly one private key block. */
export function splitCredential(text: string): Credential | null {
  const blocks = intactPemBlocks(text);
  if (blocks === null) return null;
  const certs = blocks.filter((b) => b.type === 'CERTIFICATE');
  const keys = blocks.filter(isPrivateKeyBlock);
  if (certs.length === 0 || keys.length !== 1) return null;
  return { certPem: certs.map((b) => b.text).join(''), keyPem: keys[0]?.text ?? '' };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

const TS = '\\d{4}-\\d{2}-\\d{2}-\\d{2}-\\d{2}-\\d{2}';

function timestampedName(identity: Identity): RegExp {
  return new RegExp(`^${escapeRegExp(identity.filePrefix)}-(${TS})(?:-(\\d+))?\\.pem$`);
}

/**
 * `<prefix>-current.pem` or a timestamped credential file the store writes
 * (`<prefix>-<timestamp>.pem`, or `-<n>.pem` when two land in one second);
 * never a temp name. The file watcher uses this same matcher.
 */
export function isCredentialFileName(identity: Identity, name: string): boolean {
  return name === path.basename(currentCertPath(identity)) || timestampedName(identity).test(name);
}

/** Temp files and temp links this module leaves only if it is interrupted. */
function leftoverName(identity: Identity): RegExp {
  return new RegExp(`^\\.?${escapeRegExp(identity.filePrefix)}-(?:current\\.pem(?:\\.bak)?|${TS}(?:-\\d+)?\\.pem)\\.tmp-[0-9a-f]{12}$`);
}

/** client-go's "2006-01-02-15-04-05", in UTC so names sort the same on every node. */
export function timestampOf(now: Date): string {
  return now.toISOString().slice(0, 19).replace(/[T:]/g, '-');
}

async function exists(file: string): Promise<boolean> {
  try {
    await fsp.lstat(file);
    return true;
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return false;
    throw err;
  }
}

/** The identity's timestamped credential files, newest first (by name, then suffix). */
export async function listCredentialFiles(identity: Identity): Promise<string[]> {
  let names: string[];
  try {
    names = await fsp.readdir(identity.certDir);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw err;
  }
  return newestFirst(identity, names).map((name) => path.join(path.resolve(identity.certDir), name));
}

/** Pure: of the names in the identity's directory, its timestamped credential files, newest first (by name, then suffix). */
export function newestFirst(identity: Identity, names: readonly string[]): string[] {
  const pattern = timestampedName(identity);
  const found: { name: string; ts: string; n: number }[] = [];
  for (const name of names) {
    const m = pattern.exec(name);
    if (m) found.push({ name, ts: m[1] ?? '', n: Number(m[2] ?? 0) });
  }
  found.sort((a, b) => (a.ts === b.ts ? b.n - a.n : a.ts < b.ts ? 1 : -1));
  return found.map((f) => f.name);
}

/**
 * Writes a new timestamped credential file and points `-current.pem` at it.
 * The previous file stays on disk (pruneOld removes old ones), so a crash at
 * any step leaves `-current.pem` resolving to a complete old or new credential.
 */
export async function storeCredential(
  identity: Identity,
  certPem: string,
  keyPem: string,
  now: Date,
  opts: StoreOptions = {},
): Promise<{ file: string; currentPath: string }> {
  const certs = (intactPemBlocks(certPem) ?? []).filter((b) => b.type === 'CERTIFICATE');
  const keys = (intactPemBlocks(keyPem) ?? []).filter(isPrivateKeyBlock);
  if (certs.length === 0) throw new KubebootError(`${identity.name}: refusing to store a credential without a PEM certificate`);
  if (keys.length !== 1) throw new KubebootError(`${identity.name}: refusing to store a credential without exactly one PEM private key`);
  const content = certs.map((b) => b.text).join('') + (keys[0]?.text ?? '');

  const dir = path.resolve(identity.certDir);
  try {
    await ensureDir(dir, 0o700, opts.fs);
    const base = `${identity.filePrefix}-${timestampOf(now)}`;
    let file = path.join(dir, `${base}.pem`);
    // Two stores within one second must not overwrite the file the link may
    // still point at.
    for (let n = 1; await exists(file); n++) file = path.join(dir, `${base}-${n}.pem`);
    await writeFileAtomic(file, content, { ...opts, mode: 0o600 });
    await pointCurrentAt(identity, file, opts);
    return { file, currentPath: currentCertPath(identity) };
  } catch (err) {
    if (err instanceof KubebootError) throw err;
    throw new KubebootError(`cannot store the ${identity.name} credential in ${dir}: ${(err as Error).message}`, undefined, { cause: err });
  }
}

/**
 * Atomically makes `-current.pem` a symlink to `file`. A regular file found
 * there (put by hand, or by an old tool) is first hard-linked to
 * `-current.pem.bak`, which keeps its content, owner and mode without ever
 * reading the key, and without a moment where `-current.pem` is missing.
 */
async function pointCurrentAt(identity: Identity, file: string, opts: StoreOptions): Promise<void> {
  const fs = opts.fs ?? realFs;
  const current = currentCertPath(identity);
  const dir = path.dirname(current);
  let stat;
  try {
    stat = await fs.lstat(current);
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
  }
  if (stat?.isDirectory()) throw new KubebootError(`${current} is a directory; remove it so kubeboot can place the credential link there`);
  if (stat?.isFile()) {
    const bak = `${current}.bak`;
    const tmpBak = tempPathFor(bak, '');
    await fs.link(current, tmpBak);
    try {
      await fs.rename(tmpBak, bak);
    } catch (err) {
      await fs.unlink(tmpBak).catch(() => undefined);
      throw err;
    }
  }
  const tmpLink = tempPathFor(current, '');
  await fs.symlink(path.resolve(file), tmpLink);
  try {
    opts.observer?.willWrite(current);
    await fs.rename(tmpLink, current);
    opts.observer?.didWrite?.(current);
  } catch (err) {
    await fs.unlink(tmpLink).catch(() => undefined);
    throw err;
  }
  await fsyncDir(dir, fs);
}

/**
 * Reads the credential `-current.pem` resolves to. Null when there is none
 * (no link, or a dangling one: recoverStore reports that case). Errors name
 * the file, never its content.
 */
export async function loadCurrent(identity: Identity): Promise<(Credential & { file: string }) | null> {
  const current = currentCertPath(identity);
  let file: string;
  let text: string;
  try {
    // Resolve once and read that file, so a concurrent rotation cannot pair
    // one file's name with another's content.
    file = await fsp.realpath(current);
    text = await fsp.readFile(file, 'utf8');
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return null;
    throw new KubebootError(`cannot read ${current}: ${errnoCode(err) ?? (err as Error).message}`, undefined, { cause: err });
  }
  const credential = splitCredential(text);
  if (credential === null) {
    throw new KubebootError(
      `${file} (via ${current}) is not a certificate and key bundle: expected CERTIFICATE blocks and one PRIVATE KEY block; remove the link to request a new credential`,
    );
  }
  return { ...credential, file };
}

async function isComplete(file: string): Promise<boolean> {
  try {
    return splitCredential(await fsp.readFile(file, 'utf8')) !== null;
  } catch {
    return false;
  }
}

/**
 * Startup recovery after a crash or power loss: removes this identity's
 * leftover temp files and temp links, and repoints a `-current.pem` whose
 * target is gone or incomplete at the newest complete credential file.
 * Returns one line per action, for the log.
 */
export async function recoverStore(identity: Identity, opts: StoreOptions = {}): Promise<string[]> {
  const dir = path.resolve(identity.certDir);
  let names: string[];
  try {
    names = await fsp.readdir(dir);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw err;
  }
  const lines: string[] = [];
  const leftover = leftoverName(identity);
  for (const name of names.filter((n) => leftover.test(n)).sort()) {
    const file = path.join(dir, name);
    await removeFileDurably(file, opts);
    lines.push(`removed ${file}, left by an interrupted write`);
  }

  const current = currentCertPath(identity);
  let target: string;
  try {
    target = path.resolve(dir, await fsp.readlink(current));
  } catch (err) {
    // Missing, or a regular file an operator put there: nothing to repair.
    if (errnoCode(err) === 'ENOENT' || errnoCode(err) === 'EINVAL') return lines;
    throw err;
  }
  if (await isComplete(target)) return lines;
  for (const candidate of await listCredentialFiles(identity)) {
    if (candidate !== target && (await isComplete(candidate))) {
      await pointCurrentAt(identity, candidate, opts);
      lines.push(`${current} pointed at ${target}, which is missing or incomplete; it now points at ${candidate}`);
      return lines;
    }
  }
  lines.push(`${current} points at ${target}, which is missing or incomplete, and no complete credential file is left in ${dir}`);
  return lines;
}

/**
 * Removes timestamped files beyond the newest `keep`, so renewals do not pile
 * up (client-go never deletes them). The file `-current.pem` points at is
 * always kept. Returns the removed paths.
 */
export async function pruneOld(identity: Identity, keep: number, opts: StoreOptions = {}): Promise<string[]> {
  if (!Number.isInteger(keep) || keep < 0) throw new KubebootError(`pruneOld: keep must be a whole number, got ${keep}`);
  // Compared by inode, not by path: certDir may be reached through a symlink.
  let target: { dev: number; ino: number } | null = null;
  try {
    target = await fsp.stat(currentCertPath(identity));
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
  }
  const removed: string[] = [];
  for (const file of (await listCredentialFiles(identity)).slice(keep)) {
    const stat = await fsp.lstat(file);
    if (target !== null && stat.dev === target.dev && stat.ino === target.ino) continue;
    await removeFileDurably(file, opts);
    removed.push(file);
  }
  return removed;
}
