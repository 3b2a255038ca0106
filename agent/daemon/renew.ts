/**
 * One renewal of one identity, authenticated by a certificate the node
 * already holds: the kubelet renews with its own certificate (so
 * kube-controller-manager's selfnodeclient auto-approval applies), kube-proxy
 * and the serving certificate are requested by the node's kubelet identity.
 * The current files stay in place until the new certificate is proven.
 */
import type { Config } from '../config/types.js';
import { KubebootError } from '../errors.js';
import type { Identity } from '../identity.js';
import type { Logger } from '../log.js';
import { KubeClient } from '../kube/client.js';
import type { ExistingCredential } from '../bootstrap/existing.js';
import { issueCredential, type Issued } from '../bootstrap/issue.js';
import type { WriteObserver } from '../store/atomic.js';

export interface RenewDeps {
  logger: Logger;
  now: () => Date;
  signal: AbortSignal;
  observer?: WriteObserver;
  onCsrWait?: (seconds: number) => void;
}

/** Thrown when nothing on the node can authenticate a CSR any more. */
export class NeedsBootstrapError extends KubebootError {
  override readonly name = 'NeedsBootstrapError';
}

/** Another identity waits while the kubelet's credential is being obtained; not a failure. */
export class WaitingForKubeletError extends KubebootError {
  override readonly name = 'WaitingForKubeletError';
}

/** `requester` is the node's kubelet credential (for the kubelet itself, its current one). */
export async function renewIdentity(config: Config, identity: Identity, own: ExistingCredential, requesterCredential: ExistingCredential, deps: RenewDeps): Promise<Issued> {
  if (!requesterCredential.usable || !requesterCredential.cluster || !requesterCredential.certPem || !requesterCredential.keyPem) {
    throw new NeedsBootstrapError(`${identity.name}: the kubelet credential cannot authenticate a renewal (${requesterCredential.reason})`);
  }
  const cluster = requesterCredential.cluster;
  const requester = new KubeClient(cluster, { kind: 'client-certificate', certPem: requesterCredential.certPem, keyPem: requesterCredential.keyPem });
  try {
    return await issueCredential(identity, {
      cluster,
      requester,
      stateDir: config.stateDir,
      keyAlgorithm: config.keyAlgorithm,
      expirationSeconds: config.expirationSeconds,
      reuseKeyPem: config.renewal.reuseKey && own.usable ? own.keyPem : null,
      waitTimeoutMs: config.waitTimeout * 1000,
      pendingNoticeMs: config.pendingNoticeInterval * 1000,
      logger: deps.logger,
      now: deps.now,
      signal: deps.signal,
      ...(deps.observer ? { observer: deps.observer } : {}),
      ...(deps.onCsrWait ? { onCsrWait: deps.onCsrWait } : {}),
    });
  } finally {
    await requester.close();
  }
}
