// A kubelet client identity for unit tests; override what the test is about.
import { IDENTITY_ROLES } from '../../agent/config/identities.js';
import { KUBELET_CLIENT_SIGNER, type Identity } from '../../agent/identity.js';

export function kubeletIdentity(overrides: Partial<Identity> = {}): Identity {
  return {
    name: 'kubelet',
    ...IDENTITY_ROLES.kubelet,
    subject: { commonName: 'system:node:n1', organizations: ['system:nodes'] },
    signerName: KUBELET_CLIENT_SIGNER,
    usages: ['digital signature', 'client auth'],
    dnsNames: [],
    ipAddresses: [],
    certDir: '/var/lib/kubelet/pki',
    filePrefix: 'kubelet-client',
    kubeconfigPath: '/etc/kubernetes/kubelet.conf',
    hooks: [],
    ...overrides,
  };
}
