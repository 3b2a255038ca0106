/**
 * "Is the credential already on disk still usable?" — read the files, then
 * let the pure assessCredential decide. Checks more than the kubelet does
 * (which only looks at expiry): key match, chain to the cluster CA, subject.
 */
import { readOptional } from '../read-optional.js';
import type { Identity } from '../identity.js';
import { parseClientKubeconfig } from '../kubeconfig/parse.js';
import { assessCredential } from '../pki/certificate.js';
import { loadCurrent } from '../store/cert-store.js';
import type { Endpoint } from '../kube/client.js';

export interface ExistingCredential {
  identity: Identity;
  usable: boolean;
  reason: string;
  notAfter: Date | null;
  /** Present when the files parse: what a renewal would authenticate with. */
  cluster: (Endpoint & { caPem: string }) | null;
  certPem: string | null;
  keyPem: string | null;
}

/**
 * `clusterCaPem` is needed only for identities without a kubeconfig (the
 * serving certificate), whose chain is checked against the cluster CA the
 * kubelet's kubeconfig names.
 */
export async function existingCredential(identity: Identity, now: Date, clusterCaPem: string | null): Promise<ExistingCredential> {
  const none = (reason: string): ExistingCredential => ({ identity, usable: false, reason, notAfter: null, cluster: null, certPem: null, keyPem: null });
  let cluster: (Endpoint & { caPem: string }) | null = null;
  let certPem: string;
  let keyPem: string;
  if (identity.kubeconfigPath !== null) {
    const text = await readOptional(identity.kubeconfigPath);
    if (text === null) return none(`${identity.kubeconfigPath} does not exist`);
    try {
      const kubeconfig = await parseClientKubeconfig(identity.kubeconfigPath, text, readOptional);
      if (!kubeconfig.caPem) return none(`${identity.kubeconfigPath} names no certificate authority`);
      cluster = { server: kubeconfig.server, caPem: kubeconfig.caPem, tlsServerName: kubeconfig.tlsServerName ?? null };
      certPem = kubeconfig.certPem;
      keyPem = kubeconfig.keyPem;
    } catch (err) {
      return none((err as Error).message);
    }
  } else {
    let current;
    try {
      current = await loadCurrent(identity);
    } catch (err) {
      return none((err as Error).message);
    }
    if (!current) return none(`no ${identity.filePrefix}-current.pem in ${identity.certDir}`);
    if (!clusterCaPem) return none('the cluster CA is not known yet');
    certPem = current.certPem;
    keyPem = current.keyPem;
  }
  const caPem = cluster?.caPem ?? clusterCaPem ?? '';
  const verdict = await assessCredential({ certPem, keyPem, caPems: [caPem], subject: identity.subject, now });
  return {
    identity,
    usable: verdict.usable,
    reason: verdict.reason ?? 'valid',
    notAfter: verdict.notAfter ?? null,
    cluster,
    certPem,
    keyPem,
  };
}
