/**
 * Every kubeconfig kubeboot writes, in one shape: the kubelet's and
 * kube-proxy's (shaped like kubeadm's kubelet.conf: the CA is embedded, the
 * client credential is a file reference to the `-current.pem` link, so
 * renewals never rewrite it), the approver's (embedded), and the bootstrap
 * kubeconfig a join writes (a bootstrap token).
 */
import path from 'node:path';
import { stringify } from 'yaml';
import { KubebootError } from '../errors.js';
import { currentCertPath, type Identity } from '../identity.js';

export interface ClientKubeconfigOptions {
  server: string;
  caPem: string;
  certFile: string;
  keyFile: string;
  clusterName?: string;
  userName: string;
  tlsServerName?: string | null;
}

/**
 * A self-contained kubeconfig (certificate and key embedded), for a service
 * that gets the file as a whole, e.g. the approver through LoadCredential=.
 */
export function renderEmbeddedKubeconfig(
  opts: Omit<ClientKubeconfigOptions, 'certFile' | 'keyFile'> & { certPem: string; keyPem: string },
): string {
  const b64 = (pem: string) => Buffer.from(pem, 'utf8').toString('base64');
  return render(opts, { 'client-certificate-data': b64(opts.certPem), 'client-key-data': b64(opts.keyPem) });
}

/**
 * A bootstrap kubeconfig, as a join writes it. With a token file it names
 * the file rather than copying the token, so deleting the kubeconfig after
 * the join deletes the file too.
 */
export function renderBootstrapKubeconfig(opts: {
  server: string;
  caPem: string;
  credential: { token: string } | { tokenFile: string };
}): string {
  const user: Record<string, string> =
    'token' in opts.credential ? { token: opts.credential.token } : { tokenFile: opts.credential.tokenFile };
  return render({ server: opts.server.replace(/\/$/, ''), caPem: opts.caPem, userName: 'kubeboot-bootstrap' }, user);
}

/**
 * An identity's kubeconfig (the kubelet's, kube-proxy's): `cluster`'s server
 * and CA, and the identity's `-current.pem` link as both certificate and key.
 * Issuance and a CA rotation write it alike, so a file that did not change
 * compares equal.
 */
export function renderIdentityKubeconfig(
  identity: Identity,
  cluster: { server: string; caPem: string; tlsServerName?: string | null | undefined },
): string {
  const current = currentCertPath(identity);
  return renderClientKubeconfig({
    server: cluster.server,
    caPem: cluster.caPem,
    certFile: current,
    keyFile: current,
    userName: 'default-auth',
    tlsServerName: cluster.tlsServerName ?? null,
  });
}

export function renderClientKubeconfig(opts: ClientKubeconfigOptions): string {
  // A relative path would be read relative to the kubeconfig's directory by clients: never intended here.
  for (const file of [opts.certFile, opts.keyFile]) {
    if (!path.isAbsolute(file)) throw new KubebootError(`kubeconfig credential path must be absolute, got ${file}`);
  }
  return render(opts, { 'client-certificate': opts.certFile, 'client-key': opts.keyFile });
}

function render(opts: Omit<ClientKubeconfigOptions, 'certFile' | 'keyFile'>, user: Record<string, string>): string {
  const clusterName = opts.clusterName ?? 'default-cluster';
  const cluster: Record<string, string> = {
    'certificate-authority-data': Buffer.from(opts.caPem, 'utf8').toString('base64'),
    server: opts.server,
  };
  if (opts.tlsServerName) cluster['tls-server-name'] = opts.tlsServerName;
  // Keys in kubectl's order (alphabetical) so the file diffs cleanly against kubeadm's.
  const doc = {
    apiVersion: 'v1',
    clusters: [{ cluster, name: clusterName }],
    contexts: [{ context: { cluster: clusterName, namespace: 'default', user: opts.userName }, name: 'default-context' }],
    'current-context': 'default-context',
    kind: 'Config',
    preferences: {},
    users: [{ name: opts.userName, user }],
  };
  return stringify(doc, { indentSeq: false, lineWidth: 0 });
}
