/**
 * Removing a file that holds a secret (a bootstrap kubeconfig, its token
 * file). A symlink is followed: unlinking only the link would leave the
 * token where it was while saying it is gone, so the file it points at goes
 * too (then the link), when that file is kubeboot's to delete.
 */
import { lstat, realpath } from 'node:fs/promises';
import path from 'node:path';
import { errnoCode, fileError, removeFileDurably, trustProblem, type WriteObserver } from './atomic.js';

export interface Removed {
  /** The paths that are gone, the link's target first; empty when there was nothing. */
  removed: string[];
  /** A link's target left in place, and why (someone else could have chosen it). */
  keptTarget: { target: string; why: string } | null;
}

/** Throws a `fileError('delete', …)` naming the path that could not go. */
export async function removeSecret(file: string, observer?: WriteObserver): Promise<Removed> {
  let isLink: boolean;
  try {
    isLink = (await lstat(file)).isSymbolicLink();
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { removed: [], keptTarget: null };
    throw fileError('delete', file, err);
  }
  let target: string | null = null;
  let keptTarget: Removed['keptTarget'] = null;
  if (isLink) {
    // A dangling link has nothing behind it: only the link goes.
    target = await realpath(file).catch((err: unknown) => {
      if (errnoCode(err) === 'ENOENT') return null;
      throw fileError('delete', file, err);
    });
    // As root, deleting whatever a link names would let anyone who can plant
    // the link delete any file: the target goes only if the link is ours, in a
    // directory only we can write (else anyone who can write there chose the
    // target), and the target and its directory are ours and nobody else's to
    // write, as kubeboot's own files are.
    const distrust = target === null ? null : await untrustedLink(file, target);
    if (target !== null && distrust !== null) {
      keptTarget = { target, why: distrust };
      target = null;
    }
  }
  if (target !== null) await removeFileDurably(target, { observer });
  await removeFileDurably(file, { observer });
  return { removed: target !== null ? [target, file] : [file], keptTarget };
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
