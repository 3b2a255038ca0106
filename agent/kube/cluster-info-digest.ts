/**
 * What of kube-public/cluster-info the node's CA keeper acts on (trust/keeper.ts),
 * as one digest. The resting daemon compares a fresh GET's digest with the one
 * the keeper last acted on, and starts a worker only when they differ
 * (daemon/ca-look.ts). Node's crypto only: the resting daemon loads this.
 */
import { createHash } from 'node:crypto';

/** On cluster-info: the pin of the CA the cluster's signer issues under (set by `kubeboot ca-rotation signer`). */
export const SIGNER_ANNOTATION = 'kubeboot.io/signer-ca-hash';
/** In cluster-info's data: the signed trust statement (agent/trust/statement.ts) and its detached JWS. */
export const STATEMENT_KEY = 'kubeboot-trust';
export const STATEMENT_JWS_KEY = 'kubeboot-trust.jws';

export interface ClusterInfoObject {
  metadata?: { name?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

/**
 * SHA-256 over the fields readPublishedTrust reads, and only those: a
 * bootstrap token's signature (`jws-kubeconfig-<id>`) coming or going is no
 * reason for every node to wake.
 */
export function clusterInfoDigest(cm: ClusterInfoObject): string {
  const read = [
    cm.data?.kubeconfig ?? null,
    cm.data?.[STATEMENT_KEY] ?? null,
    cm.data?.[STATEMENT_JWS_KEY] ?? null,
    cm.metadata?.annotations?.[SIGNER_ANNOTATION] ?? null,
  ];
  return createHash('sha256').update(JSON.stringify(read)).digest('hex');
}
