/**
 * "Is the credential already on disk still usable?" — read the files, then
 * let the pure assessCredential decide. Checks more than the kubelet does
 * (which only looks at expiry): key match, chain to the cluster CA, subject.
 */
import type { Config } from '../config/types.js';
import { identitiesFor } from '../config/identities.js';
import type { Identity } from '../identity.js';
import type { Endpoint } from '../kube/client.js';
import { parseClientKubeconfig } from '../kubeconfig/parse.js';
import { assessCredential } from '../pki/certificate.js';
import { fileStore, type Store } from '../store/store.js';

/** The API server and the CA a kubeconfig names. */
export type Cluster = Endpoint & { caPem: string };

/**
 * One identity's credential as found on disk. `cluster` is what its
 * kubeconfig names, whenever that parses (even for an expired certificate:
 * the CA is still the cluster's); null for the serving identity, which has no
 * kubeconfig.
 */
export type Assessment =
  | { identity: Identity; state: 'usable'; certPem: string; keyPem: string; notAfter: Date; cluster: Cluster | null }
  | { identity: Identity; state: 'unusable'; reason: string; cluster: Cluster | null };

export type Usable = Extract<Assessment, { state: 'usable' }>;

/** A usable credential with a cluster: what can authenticate a CSR. */
export type NodeCredential = Usable & { cluster: Cluster };

export interface NodeAssessment {
  /** Always first: its kubeconfig proves the node, and the others are requested with it. */
  kubelet: Assessment;
  others: Assessment[];
}

export function isNodeCredential(a: Assessment): a is NodeCredential {
  return a.state === 'usable' && a.cluster !== null;
}

/** Every enabled identity, the kubelet first; the others' chains are checked against the kubelet's cluster CA. */
export async function assessNode(
  config: Config,
  now: Date,
  clusterCaPem?: string | null,
  store: Store = fileStore(),
): Promise<NodeAssessment> {
  const [kubeletIdentity, ...rest] = identitiesFor(config) as [Identity, ...Identity[]];
  const kubelet = await assessIdentity(kubeletIdentity, now, null, store);
  const ca = kubelet.cluster?.caPem ?? clusterCaPem ?? null;
  const others = await Promise.all(rest.map((identity) => assessIdentity(identity, now, ca, store)));
  return { kubelet, others };
}

export function allOf(node: NodeAssessment): Assessment[] {
  return [node.kubelet, ...node.others];
}

/**
 * `clusterCaPem` is needed only for identities without a kubeconfig (the
 * serving certificate), whose chain is checked against the cluster CA the
 * kubelet's kubeconfig names.
 */
export async function assessIdentity(
  identity: Identity,
  now: Date,
  clusterCaPem: string | null,
  store: Store = fileStore(),
): Promise<Assessment> {
  let cluster: Cluster | null = null;
  const none = (reason: string): Assessment => ({ identity, state: 'unusable', reason, cluster });
  let certPem: string;
  let keyPem: string;
  if (identity.kubeconfigPath !== null) {
    const text = await store.read(identity.kubeconfigPath);
    if (text === null) return none(`${identity.kubeconfigPath} does not exist`);
    try {
      const kubeconfig = await parseClientKubeconfig(identity.kubeconfigPath, text, store.read);
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
      current = await store.current(identity);
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
  if (!verdict.usable || !verdict.notAfter) return none(verdict.reason ?? 'not usable');
  return { identity, state: 'usable', certPem, keyPem, notAfter: verdict.notAfter, cluster };
}
