/**
 * An identity is one credential kubeboot keeps alive: who it claims to be,
 * which signer issues it, and where its files live. Bootstrap, renewal,
 * status and metrics all take this one value; no module keeps its own copy
 * of "the kubelet paths".
 */
import path from 'node:path';

export type IdentityName = 'kubelet' | 'kube-proxy' | 'kubelet-serving';

/** Who renews the kubelet client certificate (renewal/owner.ts decides what `auto` means on a node). */
export const KUBELET_RENEWAL_MODES = ['auto', 'kubeboot', 'kubelet'] as const;
export type KubeletRenewalMode = (typeof KUBELET_RENEWAL_MODES)[number];

export type KeyAlgorithm = 'ecdsa-p256' | 'ecdsa-p384' | 'rsa-2048' | 'rsa-3072' | 'rsa-4096';
export const KEY_ALGORITHMS: readonly KeyAlgorithm[] = ['ecdsa-p256', 'ecdsa-p384', 'rsa-2048', 'rsa-3072', 'rsa-4096'];

/** Key usages as spelled in certificates.k8s.io/v1 `spec.usages`. */
export type KeyUsage = 'digital signature' | 'key encipherment' | 'client auth' | 'server auth';

export interface Subject {
  commonName: string;
  organizations: string[];
}

/** A process that reads its kubeconfig's CA only when it starts, so is restarted after a CA change (trust/keeper.ts). */
export type Consumer = 'kubelet' | 'kube-proxy';

/**
 * What one identity does differently from the others, declared as a row of
 * config/identities.ts's IDENTITY_ROLES and read everywhere instead of its name.
 */
export interface IdentityRole {
  /**
   * What authenticates its first CSR: the bootstrap token (the identity whose
   * credential proves the node), or the node's credential, waited for until it exists.
   */
  requester: 'bootstrap-token' | 'node-credential';
  /** Who reads its kubeconfig and restarts after a CA change; null when nobody must. */
  consumer: Consumer | null;
  /** Older timestamped credential files kept after a renewal. */
  keepOld: number;
  /** READY=1 waits for a valid credential of this identity. */
  holdsReady: boolean;
  /** The kubelet may rotate this certificate itself (kubelet.renewal, renewal/owner.ts); kubeboot then steps aside. */
  rotatedByKubelet: boolean;
}

export interface Identity extends IdentityRole {
  name: IdentityName;
  subject: Subject;
  signerName: string;
  usages: KeyUsage[];
  /** Subject alternative names; only the kubelet serving identity has any. */
  dnsNames: string[];
  ipAddresses: string[];
  /** Directory of `<prefix>-<timestamp>.pem` files and the `<prefix>-current.pem` link. */
  certDir: string;
  filePrefix: string;
  /** Kubeconfig that points at `<prefix>-current.pem`; null for the serving identity. */
  kubeconfigPath: string | null;
  /** Argv lists run (without a shell) after this identity's certificate changed. */
  hooks: string[][];
}

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
export const KUBE_APISERVER_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';

/**
 * A day: the longest a kube-proxy or serving certificate the node asks for
 * with its own credential may live (the node asks for no more, kubeboot
 * approver's --max-proxy-serving-expiration default allows no more): they
 * outlive a revocation of the node by their lifetime, and a day is the
 * kubelet client lifetime docs/node-identity.md recommends.
 */
export const SHORT_LIVED_SECONDS = 24 * 3600;

/**
 * matches kubelet: digital signature and client (or server) auth, with key
 * encipherment appended for RSA keys only. The order is part of the CSR's
 * digested name, so it follows the kubelet's exactly.
 */
export function usagesFor(algorithm: KeyAlgorithm, purpose: 'client' | 'server'): KeyUsage[] {
  const usages: KeyUsage[] = ['digital signature', purpose === 'client' ? 'client auth' : 'server auth'];
  if (algorithm.startsWith('rsa-')) usages.push('key encipherment');
  return usages;
}

export function currentCertPath(identity: Identity): string {
  return path.join(identity.certDir, `${identity.filePrefix}-current.pem`);
}
