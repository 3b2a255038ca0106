/**
 * After every identity is proven: the bootstrap token goes. Matches kubelet
 * in deleting the bootstrap kubeconfig, but only after proof, never before
 * (kubeadm#2054). Copies kubeboot did not make are reported, not touched.
 */
import { lstat, readdir, readFile, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config/types.js';
import type { NodeCredential } from '../credential/assess.js';
import type { RunDeps } from '../credential/issue.js';
import { nodeRequester } from '../credential/requester.js';
import { IdentityMismatchError, KubebootError } from '../errors.js';
import { whoAmI } from '../kube/whoami.js';
import type { BootstrapKubeconfig } from '../kubeconfig/parse.js';
import type { Logger } from '../log.js';
import { errnoCode, fileError, removeFileDurably, trustProblem, type WriteObserver } from '../store/atomic.js';

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
  deps: Pick<RunDeps, 'logger' | 'observer' | 'signal' | 'dispatcher'>,
  unproven: NodeCredential | null,
): Promise<boolean> {
  if (found === null) return false;
  if (unproven) await proveNode(unproven, deps);
  if (found.kind === 'invalid') await removeSecretFile(config.bootstrapKubeconfig, 'bootstrap kubeconfig', deps.logger, deps.observer);
  else await removeBootstrapToken(found.bootstrap, config.cloudInitPaths, deps.logger, deps.observer);
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
  logger: Logger,
  observer?: WriteObserver,
): Promise<void> {
  // The token file first: once the kubeconfig is gone, nothing names it any more.
  if (bootstrap.tokenFile) await removeSecretFile(bootstrap.tokenFile, 'bootstrap token file', logger, observer);
  await removeSecretFile(bootstrap.file, 'bootstrap kubeconfig', logger, observer);
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
 * Removes a file holding a secret. A symlink is followed: unlinking only the
 * link would leave the token where it was while saying it is gone, so the
 * file it points at goes too (then the link). A failure names the file and
 * what to do; the credentials are in place either way.
 */
async function removeSecretFile(file: string, what: string, logger: Logger, observer?: WriteObserver): Promise<void> {
  const fail = (target: string, err: unknown): never => {
    throw new KubebootError(
      `${fileError('delete', target, err).message} (the ${what}); the node's credentials are in place, so delete it by hand (the token stays valid until it expires or is deleted from the cluster)`,
      undefined,
      { cause: err },
    );
  };
  let isLink: boolean;
  try {
    isLink = (await lstat(file)).isSymbolicLink();
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return;
    return fail(file, err);
  }
  let target: string | null = null;
  if (isLink) {
    // A dangling link has nothing behind it: only the link goes.
    target = await realpath(file).catch((err: unknown) => (errnoCode(err) === 'ENOENT' ? null : fail(file, err)));
    // As root, deleting whatever a link names would let anyone who can plant
    // the link delete any file: the target goes only if the link is ours, in a
    // directory only we can write (else anyone who can write there chose the
    // target), and the target and its directory are ours and nobody else's to
    // write, as kubeboot's own files are.
    const distrust = target === null ? null : await untrustedLink(file, target);
    if (distrust !== null) {
      logger.warn(
        `${file} links to ${target}, which kubeboot will not delete (${distrust}); removing only the link: delete the token in ${target} by hand`,
      );
      target = null;
    }
  }
  if (target !== null) await removeFileDurably(target, { observer }).catch((err: unknown) => fail(target, err));
  await removeFileDurably(file, { observer }).catch((err: unknown) => fail(file, err));
  logger.info(target !== null ? `deleted the ${what} ${target} and the link to it, ${file}` : `deleted the ${what} ${file}`);
}

/**
 * Why the target of `link` is not kubeboot's to delete, or null: the link's
 * directory, the target or the target's directory is someone else's or
 * writable by others, or the link itself is someone else's (a link's own
 * mode bits mean nothing, so only its owner is looked at).
 */
async function untrustedLink(link: string, target: string): Promise<string | null> {
  const linkOwner = await lstat(link);
  const problem =
    trustProblem(`the directory of ${link}`, await lstat(path.dirname(link))) ??
    trustProblem(`the link ${link}`, { uid: linkOwner.uid, mode: 0 });
  if (problem !== null) return problem;
  for (const p of [path.dirname(target), target]) {
    const targetProblem = trustProblem(p, await lstat(p));
    if (targetProblem !== null) return targetProblem;
  }
  return null;
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
