/**
 * After every identity is proven: the bootstrap token goes. Matches kubelet
 * in deleting the bootstrap kubeconfig, but only after proof, never before
 * (kubeadm#2054). Copies kubeboot did not make are reported, not touched.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.js';
import type { BootstrapKubeconfig } from '../kubeconfig/parse.js';
import { removeFileDurably, type WriteObserver } from '../store/atomic.js';

const SCAN_LIMIT_BYTES = 1 << 20;

export async function removeBootstrapToken(bootstrap: BootstrapKubeconfig, cloudInitPaths: string[], logger: Logger, observer?: WriteObserver): Promise<void> {
  const opts = observer ? { observer } : {};
  await removeFileDurably(bootstrap.file, opts);
  logger.info(`deleted the bootstrap kubeconfig ${bootstrap.file}`);
  if (bootstrap.tokenFile) {
    await removeFileDurably(bootstrap.tokenFile, opts);
    logger.info(`deleted the bootstrap token file ${bootstrap.tokenFile}`);
  }
  if (bootstrap.auth.kind === 'client-certificate') return;
  const secret = bootstrap.auth.kind === 'bootstrap-token' ? bootstrap.auth.tokenSecret : bootstrap.auth.token;
  for (const file of await filesContaining(cloudInitPaths, secret)) {
    logger.warn(`the bootstrap token is still present in ${file} (cloud-init's cached user-data); it stays valid until it expires or is deleted from the cluster`);
  }
}

/** Files (a path, or the files directly inside a directory) whose text contains `needle`. */
export async function filesContaining(paths: string[], needle: string): Promise<string[]> {
  const found: string[] = [];
  for (const p of paths) {
    let candidates: string[];
    try {
      const info = await stat(p);
      candidates = info.isDirectory() ? (await readdir(p)).map((name) => path.join(p, name)) : [p];
    } catch {
      continue;
    }
    for (const file of candidates) {
      try {
        const info = await stat(file);
        if (!info.isFile() || info.size > SCAN_LIMIT_BYTES) continue;
        if ((await readFile(file, 'utf8')).includes(needle)) found.push(file);
      } catch {
        // Unreadable files are not ours to judge.
      }
    }
  }
  return found;
}
