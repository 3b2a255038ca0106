/**
 * One renewal of one identity, authenticated by a certificate the node
 * already holds: the kubelet renews with its own certificate (the
 * approver's renewal rule applies: requester and subject the same node), kube-proxy
 * and the serving certificate are requested by the node's kubelet identity.
 * The current files stay in place until the new certificate is proven.
 */
import type { Config } from '../config/types.js';
import type { Identity } from '../identity.js';
import { storeOf } from '../store/store.js';
import type { Assessment, NodeCredential } from './assess.js';
import { runIdentityHooks, type HookResult } from './hooks.js';
import { issueContext, issueCredential, type Issued, type RunDeps } from './issue.js';
import { nodeRequester } from './requester.js';

/** `node` is the node's kubelet credential (for the kubelet itself, its current one). */
export async function renewIdentity(config: Config, own: Assessment, node: NodeCredential, deps: RunDeps): Promise<Issued> {
  const requester = nodeRequester(node, deps.dispatcher);
  const reuseKeyPem = config.renewal.reuseKey && own.state === 'usable' ? own.keyPem : null;
  try {
    return await issueCredential(own.identity, issueContext(config, requester, deps, reuseKeyPem));
  } finally {
    await requester.client.close();
  }
}

/**
 * After a renewed credential is on disk and proven, for `kubeboot renew` and
 * the daemon alike: the older files beyond the few kept go (through
 * `deps.store`, unset the files on disk), then the identity's hooks run
 * (stopped with `deps.signal`).
 */
export async function finishRenewal(
  config: Config,
  identity: Identity,
  deps: Pick<RunDeps, 'logger' | 'observer' | 'signal' | 'store'>,
): Promise<HookResult[]> {
  await storeOf(deps).prune(identity, identity.keepOld);
  if (identity.hooks.length === 0) return [];
  return runIdentityHooks(identity, deps.logger, { timeoutMs: config.renewal.hookTimeout * 1000, signal: deps.signal });
}
