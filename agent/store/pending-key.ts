/**
 * The key of an in-flight CSR, saved before the CSR is sent so a restart
 * reuses it and the CSR already on the server (same name, same key) still
 * matches. Matches kubelet's `kubelet-client.key.tmp`, removed once the
 * credential is stored.
 */
import { lstat, readFile } from 'node:fs/promises';
import path from 'node:path';
import { ExitCode, KubebootError } from '../errors.js';
import type { IdentityName } from '../identity.js';
import { assertTrustedDir, ensureDir, errnoCode, removeFileDurably, trustProblem, writeFileAtomic } from './atomic.js';
import type { WriteOptions } from './atomic.js';
import { intactPemBlocks, isPrivateKeyBlock } from '../pki/pem.js';

export function pendingKeyPath(stateDir: string, identityName: IdentityName): string {
  return path.join(stateDir, `${identityName}.key.pending`);
}

export async function savePendingKey(stateDir: string, identityName: IdentityName, keyPem: string, opts: WriteOptions = {}): Promise<void> {
  if (!isOnePrivateKey(keyPem)) throw new KubebootError(`${identityName}: refusing to save a pending key that is not one PEM private key`);
  await ensureDir(stateDir, 0o700, opts.fs);
  await writeFileAtomic(pendingKeyPath(stateDir, identityName), keyPem, { ...opts, mode: 0o600 });
}

/** The saved key, or null when no CSR is in flight. */
export async function loadPendingKey(stateDir: string, identityName: IdentityName): Promise<string | null> {
  const file = pendingKeyPath(stateDir, identityName);
  let stat;
  try {
    stat = await lstat(file);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return null;
    throw new KubebootError(`cannot read ${file}: ${errnoCode(err) ?? (err as Error).message}`, undefined, { cause: err });
  }
  // A key someone else could have planted would get a certificate issued for
  // a key they know: the file and its directory must be ours alone.
  if (!stat.isFile())
    throw new KubebootError(
      `${file} is not a regular file; refusing to use it as a private key (remove it to start over)`,
      ExitCode.badInput,
    );
  await assertTrustedDir(stateDir);
  const problem = trustProblem(file, stat);
  if (problem !== null) throw new KubebootError(problem, ExitCode.badInput);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new KubebootError(`cannot read ${file}: ${errnoCode(err) ?? (err as Error).message}`, undefined, { cause: err });
  }
  if (!isOnePrivateKey(text)) {
    throw new KubebootError(`${file} is not a PEM private key; remove it to start over with a new key and CSR`);
  }
  return text;
}

export async function clearPendingKey(stateDir: string, identityName: IdentityName, opts: WriteOptions = {}): Promise<void> {
  await removeFileDurably(pendingKeyPath(stateDir, identityName), opts);
}

function isOnePrivateKey(text: string): boolean {
  const blocks = intactPemBlocks(text);
  return blocks !== null && blocks.length === 1 && blocks[0] !== undefined && isPrivateKeyBlock(blocks[0]);
}
