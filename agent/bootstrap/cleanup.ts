/**
 * After every identity is proven: the bootstrap token goes. Matches kubelet
 * in deleting the bootstrap kubeconfig, but only after proof, never before
 * (kubeadm#2054). Copies kubeboot did not make are reported, not touched.
 */
import { readdir, readFile, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config/types.js';
import type { NodeCredential } from '../credential/assess.js';
import type { RunDeps } from '../credential/issue.js';
import { nodeRequester } from '../credential/requester.js';
import { IdentityMismatchError, KubebootError } from '../errors.js';
import { whoAmI } from '../kube/whoami.js';
import type { BootstrapKubeconfig } from '../kubeconfig/parse.js';
import type { Logger } from '../log.js';
import { type Removed, type Store, storeOf } from '../store/store.js';

const SCAN_LIMIT_BYTES = 1 << 20;

/**
 * Deletes the bootstrap kubeconfig (and a token file it names) once every
 * identity holds a proven credential; `found` is the bootstrap kubeconfig as
 * the pass read it, null when there was none. `unproven` is a kubelet
 * credential that was kept rather than issued by this run: one
 * SelfSubjectReview shows it works before the only way back is deleted. A
 * file that does not parse is deleted all the same: it is no longer needed
 * and may hold a token. Returns whether a bootstrap kubeconfig was there and
 * is now gone.
 */
export async function finishBootstrap(
  config: Config,
  found: { kind: 'invalid' } | { kind: 'kubeconfig'; bootstrap: BootstrapKubeconfig } | null,
  deps: Pick<RunDeps, 'logger' | 'observer' | 'signal' | 'dispatcher' | 'store'>,
  unproven: NodeCredential | null,
): Promise<boolean> {
  if (found === null) return false;
  if (unproven) await proveNode(unproven, deps);
  const store = storeOf(deps);
  if (found.kind === 'invalid') await removeSecretFile(store, config.bootstrapKubeconfig, 'bootstrap kubeconfig', deps.logger);
  else await removeBootstrapToken(found.bootstrap, config.cloudInitPaths, store, deps.logger);
  return true;
}

/** The node's kubelet credential authenticates as itself; otherwise the bootstrap kubeconfig is still needed. */
async function proveNode(node: NodeCredential, deps: Pick<RunDeps, 'signal' | 'dispatcher'>): Promise<void> {
  const requester = nodeRequester(node, deps.dispatcher);
  try {
    const user = await whoAmI(requester.client, deps.signal);
    if (user.username !== node.identity.subject.commonName) {
      throw new IdentityMismatchError(
        `the kubelet credential authenticates as ${user.username}, want ${node.identity.subject.commonName}; keeping the bootstrap kubeconfig`,
      );
    }
  } finally {
    await requester.client.close();
  }
}

export async function removeBootstrapToken(
  bootstrap: BootstrapKubeconfig,
  cloudInitPaths: string[],
  store: Store,
  logger: Logger,
): Promise<void> {
  // The token file first: once the kubeconfig is gone, nothing names it any more.
  if (bootstrap.tokenFile) await removeSecretFile(store, bootstrap.tokenFile, 'bootstrap token file', logger);
  await removeSecretFile(store, bootstrap.file, 'bootstrap kubeconfig', logger);
  if (bootstrap.auth.kind === 'client-certificate') return;
  const secret = bootstrap.auth.kind === 'bootstrap-token' ? bootstrap.auth.tokenSecret : bootstrap.auth.token;
  // Reported, not edited: cloud-init rewrites its cache from the datasource
  // at every boot, and a cloud's metadata service keeps serving the
  // user-data anyway. The token's TTL and `kubeboot token delete` end it.
  for (const file of await filesContaining(cloudInitPaths, secret)) {
    logger.warn(
      `the bootstrap token is still present in ${file} (cloud-init's copy of the user-data, root-only); it stays valid until it expires or \`kubeboot token delete ${bootstrap.auth.kind === 'bootstrap-token' ? bootstrap.auth.tokenId : 'ID'}\``,
    );
  }
}

/**
 * Removes a file holding a secret through the Store. A failure names the
 * file and what to do; the credentials are in place either way.
 */
async function removeSecretFile(store: Store, file: string, what: string, logger: Logger): Promise<void> {
  let gone: Removed;
  try {
    gone = await store.remove(file);
  } catch (err) {
    throw new KubebootError(
      `${(err as Error).message} (the ${what}); the node's credentials are in place, so delete it by hand (the token stays valid until it expires or is deleted from the cluster)`,
      undefined,
      { cause: err },
    );
  }
  if (gone.keptTarget !== null) {
    const { target, why } = gone.keptTarget;
    logger.warn(
      `${file} links to ${target}, which kubeboot will not delete (${why}); removing only the link: delete the token in ${target} by hand`,
    );
  }
  if (gone.removed.length === 0) return;
  logger.info(
    gone.removed.length === 2 ? `deleted the ${what} ${gone.removed[0]} and the link to it, ${file}` : `deleted the ${what} ${file}`,
  );
}

/**
 * Files (a path, or the files directly inside a directory) whose bytes
 * contain `needle`, each once, by its real path (cloud-init's `instance` is
 * a link to `instances/<id>`). Bytes, not text: obj.pkl is a pickle.
 */
export async function filesContaining(paths: string[], needle: string): Promise<string[]> {
  const found = new Set<string>();
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
        if ((await readFile(file)).includes(needle)) found.add(await realpath(file));
      } catch {
        // Unreadable files are not ours to judge.
      }
    }
  }
  return [...found];
}
