/**
 * The identities a Config asks for, in the order they are bootstrapped: the
 * kubelet client first, because its kubeconfig is what proves the node.
 */
import type { Config } from './types.js';
import { KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, usagesFor } from '../identity.js';
import type { Consumer, Identity, IdentityName, IdentityRole } from '../identity.js';

/** Older timestamped credential files a client identity keeps; the kubelet never prunes them, so they pile up. */
const KEEP_OLD_CREDENTIALS = 5;

/** What differs between the identities, as data: every other module reads these fields, never a name. */
export const IDENTITY_ROLES: Readonly<Record<IdentityName, Readonly<IdentityRole>>> = {
  kubelet: { requester: 'bootstrap-token', consumer: 'kubelet', keepOld: KEEP_OLD_CREDENTIALS, holdsReady: true, rotatedByKubelet: true },
  // READY=1 means the kubelet can start: it never waits for kube-proxy (docs/architecture.md).
  'kube-proxy': {
    requester: 'node-credential',
    consumer: 'kube-proxy',
    keepOld: KEEP_OLD_CREDENTIALS,
    holdsReady: false,
    rotatedByKubelet: false,
  },
  /**
   * Keeps no old file. matches kubelet (ReloadKubeletServerCertificateFile,
   * apiserver's DynamicCertKeyPairContent): it watches tlsCertFile with inotify,
   * which follows the `-current.pem` link to the file it then points at, and
   * reloads only when that file changes or goes. Kept, the replaced file never
   * goes, and the kubelet serves it until it expires; removed, the kubelet
   * reloads through the link and watches the new file.
   */
  'kubelet-serving': { requester: 'node-credential', consumer: null, keepOld: 0, holdsReady: false, rotatedByKubelet: false },
};

/** Each consumer with the restart that follows a CA change (`caRotation.*Restart`), the kubelet first. */
export function consumerRestarts(config: Config): { consumer: Consumer; restart: string[][] }[] {
  return [
    { consumer: 'kubelet', restart: config.caRotation.kubeletRestart },
    { consumer: 'kube-proxy', restart: config.caRotation.kubeProxyRestart },
  ];
}

/** The identity whose credential proves the node and requests the others: the kubelet client. */
export function nodeIdentity(config: Config): Identity {
  return identitiesFor(config).find((i) => i.requester === 'bootstrap-token')!;
}

export function identitiesFor(config: Config): Identity[] {
  const alg = config.keyAlgorithm;
  const nodeSubject = { commonName: `system:node:${config.nodeName}`, organizations: ['system:nodes'] };
  const identities: Identity[] = [
    {
      name: 'kubelet',
      ...IDENTITY_ROLES.kubelet,
      // matches the csrapproving controller: CN system:node:<name>, O exactly [system:nodes], no SANs.
      subject: { ...nodeSubject, organizations: [...nodeSubject.organizations] },
      signerName: KUBELET_CLIENT_SIGNER,
      usages: usagesFor(alg, 'client'),
      dnsNames: [],
      ipAddresses: [],
      certDir: config.kubelet.certDir,
      filePrefix: 'kubelet-client',
      kubeconfigPath: config.kubelet.kubeconfig,
      hooks: config.kubelet.hooks,
    },
  ];
  if (config.kubeProxy.enabled) {
    identities.push({
      name: 'kube-proxy',
      ...IDENTITY_ROLES['kube-proxy'],
      subject: { commonName: config.kubeProxy.commonName, organizations: [...config.kubeProxy.organizations] },
      signerName: config.kubeProxy.signerName,
      usages: usagesFor(alg, 'client'),
      dnsNames: [],
      ipAddresses: [],
      certDir: config.kubeProxy.certDir,
      filePrefix: 'kube-proxy-client',
      kubeconfigPath: config.kubeProxy.kubeconfig,
      hooks: config.kubeProxy.hooks,
    });
  }
  if (config.kubeletServing.enabled) {
    const serving = config.kubeletServing;
    identities.push({
      name: 'kubelet-serving',
      ...IDENTITY_ROLES['kubelet-serving'],
      subject: { ...nodeSubject, organizations: [...nodeSubject.organizations] },
      signerName: KUBELET_SERVING_SIGNER,
      usages: usagesFor(alg, 'server'),
      // Without configured DNS names the node name is used: it is what the API server dials by default.
      dnsNames: serving.dnsNames.length === 0 ? [config.nodeName] : [...serving.dnsNames],
      ipAddresses: [...serving.ipAddresses],
      certDir: serving.certDir,
      filePrefix: 'kubelet-server',
      kubeconfigPath: null,
      hooks: serving.hooks,
    });
  }
  return identities;
}
