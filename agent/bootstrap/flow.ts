/**
 * The bootstrap of a node, top to bottom:
 * recover half-done swaps → keep what is still usable → the kubelet's
 * credential with the bootstrap token (CA from the kubeconfig or pinned
 * discovery) → the other identities, requested by the node itself (the
 * kubelet never waits for them) → only when all are proven, delete the
 * bootstrap kubeconfig.
 */
import type { Config } from '../config/types.js';
import { KubebootError } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import type { BootstrapKubeconfig } from '../kubeconfig/parse.js';
import { storeOf } from '../store/store.js';
import {
  allOf,
  assessIdentity,
  assessNode,
  isNodeCredential,
  type Assessment,
  type NodeCredential,
  type Usable,
} from '../credential/assess.js';
import { issueContext, issueCredential, type Issued, type RunDeps } from '../credential/issue.js';
import { bootstrapRequester, explainBootstrapFailure, nodeRequester } from '../credential/requester.js';
import { finishBootstrap } from './cleanup.js';

export interface IdentityOutcome {
  identity: string;
  action: 'kept' | 'issued';
  notAfter: Date;
  issued?: Issued;
}

export interface BootstrapReport {
  outcomes: IdentityOutcome[];
  /** The bootstrap kubeconfig this run authenticated with, if any. */
  usedBootstrap: BootstrapKubeconfig | null;
  bootstrapKubeconfigDeleted: boolean;
}

export interface BootstrapOptions {
  /** Only obtain the kubelet's credential (the daemon's other loops request the rest). */
  onlyKubelet?: boolean;
}

export async function bootstrapNode(config: Config, deps: RunDeps, options: BootstrapOptions = {}): Promise<BootstrapReport> {
  await recoverNode(config, deps);
  const node = await assessNode(config, deps.clock.now(), undefined, storeOf(deps));
  for (const a of allOf(node)) {
    deps.logger.info(
      a.state === 'usable'
        ? `${a.identity.name}: credential valid until ${a.notAfter.toISOString()}; keeping it`
        : `${a.identity.name}: needs a certificate (${a.reason})`,
    );
  }
  const outcomes: IdentityOutcome[] = allOf(node)
    .filter((a): a is Usable => a.state === 'usable')
    .map(kept);

  // 1. The kubelet, with the bootstrap credential (or its own, still valid one).
  let kubelet = node.kubelet;
  let usedBootstrap: BootstrapKubeconfig | null = null;
  if (kubelet.state !== 'usable') {
    const first = await issueKubelet(config, kubelet, deps);
    usedBootstrap = first.bootstrap;
    outcomes.unshift(issuedOutcome(first.issued, kubelet));
    kubelet = await assessIdentity(kubelet.identity, deps.clock.now(), null, storeOf(deps));
  }
  if (!isNodeCredential(kubelet))
    throw new KubebootError(
      `the kubelet credential is not usable after bootstrap (${kubelet.state === 'unusable' ? kubelet.reason : 'no cluster'})`,
    );

  // 2. The other identities, requested by the node itself: the kubelet never
  //    waits for them, and an approver sees which node asked.
  const missing = options.onlyKubelet ? [] : node.others.filter((a) => a.state !== 'usable');
  outcomes.push(...(await issueByNode(config, kubelet, missing, deps)));

  // 3. Every identity proven: the token goes. A kubelet credential that was
  //    only kept, not issued now, is shown to the API server first.
  const everyone = outcomes.length === identitiesFor(config).length;
  const deleted = everyone ? await finishBootstrap(config, deps, usedBootstrap ? null : kubelet) : false;
  return { outcomes, usedBootstrap, bootstrapKubeconfigDeleted: deleted };
}

/** Half-done swaps from a crash are put right before anything is judged. */
export async function recoverNode(config: Config, deps: RunDeps): Promise<void> {
  const store = storeOf(deps);
  for (const identity of identitiesFor(config)) {
    for (const line of await store.recover(identity)) deps.logger.warn(`${identity.name}: ${line}`);
  }
}

/** The kubelet's credential, asked for with the bootstrap kubeconfig. */
export async function issueKubelet(
  config: Config,
  kubelet: Assessment,
  deps: RunDeps,
): Promise<{ issued: Issued; bootstrap: BootstrapKubeconfig | null }> {
  const source = await bootstrapRequester(config, kubelet.state === 'unusable' ? kubelet.reason : 'valid', deps);
  try {
    return { issued: await issueCredential(kubelet.identity, issueContext(config, source, deps)), bootstrap: source.bootstrap };
  } catch (err) {
    throw explainBootstrapFailure(err, source.bootstrap);
  } finally {
    await source.client.close();
  }
}

/** Every identity in `missing`, at once, asked for with the node's kubelet credential; the first failure is thrown, the others logged. */
async function issueByNode(config: Config, node: NodeCredential, missing: Assessment[], deps: RunDeps): Promise<IdentityOutcome[]> {
  if (missing.length === 0) return [];
  const source = nodeRequester(node, deps.dispatcher);
  try {
    const results = await Promise.allSettled(missing.map((a) => issueCredential(a.identity, issueContext(config, source, deps))));
    const failures = results.flatMap((r, i) =>
      r.status === 'rejected' ? [{ identity: missing[i]!.identity.name, error: r.reason as Error }] : [],
    );
    for (const f of failures.slice(1)) deps.logger.error(`${f.identity}: ${f.error.message}`);
    if (failures[0]) throw failures[0].error;
    return results.map((r, i) => issuedOutcome((r as PromiseFulfilledResult<Issued>).value, missing[i]!));
  } finally {
    await source.client.close();
  }
}

function kept(a: Usable): IdentityOutcome {
  return { identity: a.identity.name, action: 'kept', notAfter: a.notAfter };
}

function issuedOutcome(issued: Issued, a: Assessment): IdentityOutcome {
  return { identity: a.identity.name, action: 'issued', notAfter: issued.notAfter, issued };
}
