/**
 * The identities a Config asks for, in the order they are bootstrapped: the
 * kubelet client first, because its kubeconfig is what proves the node.
 */
import type { Config } from './types.js';
import { KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, usagesFor } from '../identity.js';
import type { Identity } from '../identity.js';

export function identitiesFor(config: Config): Identity[] {
  const alg = config.keyAlgorithm;
  const nodeSubject = { commonName: `system:node:${config.nodeName}`, organizations: ['system:nodes'] };
  const identities: Identity[] = [
    {
      name: 'kubelet',
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
