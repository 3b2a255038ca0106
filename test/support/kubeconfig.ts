// Kubeconfig files for the test cluster's clients, written the way kubeadm
// writes them (one cluster, one user, one context).
import { writeFile } from 'node:fs/promises';
import { stringify } from 'yaml';

export type CaSource = { file: string } | { pem: string } | 'none';
export type Credentials = { token: string } | { certPem: string; keyPem: string };

const b64 = (s: string) => Buffer.from(s).toString('base64');

export function kubeconfigObject(server: string, ca: CaSource, credentials: Credentials | undefined, user = 'default-user') {
  const cluster: Record<string, string> = { server };
  if (ca !== 'none' && 'file' in ca) cluster['certificate-authority'] = ca.file;
  if (ca !== 'none' && 'pem' in ca) cluster['certificate-authority-data'] = b64(ca.pem);
  const userEntry: Record<string, string> = {};
  if (credentials && 'token' in credentials) userEntry.token = credentials.token;
  if (credentials && 'certPem' in credentials) {
    userEntry['client-certificate-data'] = b64(credentials.certPem);
    userEntry['client-key-data'] = b64(credentials.keyPem);
  }
  return {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'default-cluster', cluster }],
    users: [{ name: user, user: userEntry }],
    contexts: [{ name: 'default-context', context: { cluster: 'default-cluster', user } }],
    'current-context': 'default-context',
  };
}

/** Written 0600: every kubeconfig here holds a credential. */
export async function writeKubeconfig(file: string, server: string, ca: CaSource, credentials: Credentials, user?: string): Promise<void> {
  await writeFile(file, stringify(kubeconfigObject(server, ca, credentials, user)), { mode: 0o600 });
}

/**
 * The `data.kubeconfig` of kube-public/cluster-info as kubeadm publishes it:
 * server and CA only, cluster named "", which bootstrapsigner signs per token.
 */
export function clusterInfoKubeconfig(server: string, caPem: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: '', cluster: { 'certificate-authority-data': b64(caPem), server } }],
    contexts: null,
    'current-context': '',
    preferences: {},
    users: null,
  });
}
