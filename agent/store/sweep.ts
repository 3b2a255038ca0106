/**
 * Startup sweep of kubeboot's own temp files (`.<name>.tmp-<12 hex>`, and the
 * link temps `<name>.tmp-<12 hex>`) in every directory it writes. A kill -9
 * between create and rename leaves one behind, and one of them
 * (`.kubelet-client-….pem.tmp-…`) holds a complete private key.
 */
import { lstat, readdir } from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config/types.js';
import { identitiesFor } from '../config/identities.js';
import type { Log } from '../log-lines.js';
import { ensureDir, errnoCode, isTempName, removeFileDurably } from './atomic.js';

/** Creates the node's directories as the store would (0700 for state and keys), so a watcher can watch them before the first write. */
export async function ensureNodeDirs(config: Config): Promise<void> {
  await ensureDir(config.stateDir, 0o700);
  for (const identity of identitiesFor(config)) {
    await ensureDir(identity.certDir, 0o700);
    if (identity.kubeconfigPath) await ensureDir(path.dirname(identity.kubeconfigPath), 0o755);
  }
  await ensureDir(path.dirname(config.bootstrapKubeconfig), 0o755);
}

/** Every directory kubeboot writes into under `config`, without duplicates. */
export function writtenDirs(config: Config): string[] {
  const dirs = [config.stateDir];
  for (const identity of identitiesFor(config)) {
    dirs.push(identity.certDir);
    if (identity.kubeconfigPath) dirs.push(path.dirname(identity.kubeconfigPath));
  }
  return [...new Set(dirs.map((d) => path.resolve(d)))];
}

/**
 * Removes leftover temp files (regular files and symlinks only) from `dirs`;
 * a missing directory is skipped. Returns the removed paths.
 */
export async function sweepTempFiles(dirs: readonly string[], logger: Log): Promise<string[]> {
  const removed: string[] = [];
  for (const dir of dirs) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if (errnoCode(err) === 'ENOENT' || errnoCode(err) === 'ENOTDIR') continue;
      throw err;
    }
    for (const name of names.filter(isTempName).sort()) {
      const file = path.join(dir, name);
      const stat = await lstat(file).catch(() => null);
      if (stat === null || !(stat.isFile() || stat.isSymbolicLink())) continue;
      await removeFileDurably(file);
      logger.info(`removed ${file}, left by an interrupted write`);
      removed.push(file);
    }
  }
  return removed;
}
