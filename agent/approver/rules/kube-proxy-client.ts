/** kube-proxy's client certificate (signer kubernetes.io/kube-apiserver-client), asked for by a node. */
import { KUBE_APISERVER_CLIENT_SIGNER } from '../../identity.js';
import { fromNode, list, sameList, show, type PolicySpec, type Rule } from './rule.js';
import {
  expiration,
  keyAlgorithm,
  nodeExists,
  noSans,
  notRevoked,
  requesterIsNode,
  requestSignature,
  shortLived,
  usagesRule,
} from './shared.js';

const proxySubject: Rule = {
  name: 'subject',
  summary: 'CN exactly `kubeProxy.commonName` (default `system:kube-proxy`), O exactly `kubeProxy.organizations` (default none)',
  check: ({ csr, policy }) => {
    const { commonName, organizations } = csr.request!.subject;
    const want = policy.kubeProxy;
    if (commonName !== want.commonName) return `CN ${show(commonName)} is not ${want.commonName}`;
    return sameList(organizations, want.organizations) ? null : `O ${list(organizations)} is not ${list(want.organizations)}`;
  },
};

const oneUnissuedPerNode: Rule = {
  name: 'one-unissued-per-node',
  reads: ['blocking'],
  summary:
    'no other kube-proxy CSR of the same node is approved and not yet issued, and none older is pending (a flood is approved one at a time, whatever its names or order)',
  check: ({ world }) => (world.blocking.length === 0 ? null : `another CSR of this node is still unissued: ${list(world.blocking)}`),
};

export const KUBE_PROXY_RULES: readonly Rule[] = [
  requesterIsNode,
  requestSignature,
  notRevoked,
  nodeExists,
  proxySubject,
  noSans,
  usagesRule('client auth', 'rsa'),
  keyAlgorithm,
  expiration,
  shortLived('refused'),
  oneUnissuedPerNode,
];

export const KUBE_PROXY_CLIENT: PolicySpec = {
  name: 'kube-proxy-client',
  signerName: KUBE_APISERVER_CLIENT_SIGNER,
  rules: KUBE_PROXY_RULES,
  subresource: 'kubeproxyclient',
  node: 'requester',
  enabled: () => true,
  recognizes: (csr, policy) =>
    csr.signerName === KUBE_APISERVER_CLIENT_SIGNER && (fromNode(csr) || csr.request?.subject.commonName === policy.kubeProxy.commonName),
};
