/**
 * One renewal of one identity, authenticated by a certificate the node
 * already holds: the kubelet renews with its own certificate (so
 * kube-controller-manager's selfnodeclient auto-approval applies), kube-proxy
 * and the serving certificate are requested by the node's kubelet identity.
 * The current files stay in place until the new certificate is proven.
 */
import type { Config } from '../config/types.js';
import type { Assessment, NodeCredential } from './assess.js';
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
