/**
 * Rules more than one signer's policy runs (the rows are listed, in order,
 * in each signer's file).
 */
import { dns1123SubdomainProblem } from '../../config/values.js';
import { SHORT_LIVED_SECONDS } from '../../identity.js';
import { INVENTORY_REF, type InventoryEntry, type InventoryLookup } from '../../records/inventory.js';
import { recordRef } from '../../records/kinds.js';
import { keyAlgorithmName } from '../request.js';
import { list, NODE_USER_PREFIX, NODES_GROUP, show, type Rule } from './rule.js';

const MIN_RSA_BITS = 2048;

export const requesterIsNode: Rule = {
  name: 'requester-is-node',
  summary:
    'requested by `system:node:<n>` in group `system:nodes`, `<n>` a valid Node name (not a bootstrap token, service account or user)',
  check: ({ csr, nodeName }) => {
    if (nodeName !== null && csr.groups.includes(NODES_GROUP)) return null;
    if (csr.username.startsWith(NODE_USER_PREFIX) && nodeName === null) {
      return `requester ${show(csr.username)}: the node name ${dns1123SubdomainProblem(csr.username.slice(NODE_USER_PREFIX.length))}`;
    }
    return `requester ${show(csr.username)} (groups ${list(csr.groups)}) is not a node in ${NODES_GROUP}`;
  },
};

export const requestSignature: Rule = {
  name: 'request-signature',
  summary:
    '`spec.request` is one PEM block that no parser could read differently (one CN, only CN and O, one extension list) and is signed by the key it carries',
  check: ({ csr }) =>
    csr.request === null
      ? (csr.requestProblem ?? 'spec.request is not a PEM certificate request')
      : csr.request.signatureValid
        ? null
        : 'spec.request is not signed by its own key',
};

export const nodeExists: Rule = {
  name: 'node-exists',
  reads: ['node'],
  summary: 'a Node object `<n>` exists (re-checked 5 s, 10 s, 20 s … later: the kubelet registers after its credential)',
  check: ({ world, nodeName }) => (world.node !== null && world.node.name === nodeName ? null : `no Node ${nodeName ?? ''} exists`),
};

export const keyAlgorithm: Rule = {
  name: 'key-algorithm',
  summary: 'one of `--allowed-key-algorithm` (default ECDSA P-256/P-384, RSA 2048/3072/4096); RSA < 2048 never',
  check: ({ csr, policy }) => {
    const key = csr.request!.key;
    const name = keyAlgorithmName(key);
    if (key.kind === 'rsa' && key.bits < MIN_RSA_BITS) return `RSA key of ${key.bits} bits (at least ${MIN_RSA_BITS} required)`;
    return policy.keyAlgorithms.includes(name) ? null : `key algorithm ${name} is not allowed (allowed: ${list(policy.keyAlgorithms)})`;
  },
};

export const expiration: Rule = {
  name: 'expiration',
  summary:
    "`spec.expirationSeconds`, when set, ≤ `--max-expiration` (default 8760h; unset leaves the signer's `--cluster-signing-duration` in charge)",
  check: ({ csr, policy }) =>
    csr.expirationSeconds === undefined || csr.expirationSeconds <= policy.maxExpirationSeconds
      ? null
      : `expirationSeconds ${csr.expirationSeconds} is above the maximum ${policy.maxExpirationSeconds}`,
};

export const notRevoked: Rule = {
  name: 'not-revoked',
  reads: ['records'],
  summary:
    'the node has no revocation `noderevocations.kubeboot.io/<n>` (`kubeboot node revoke`), nor an entry in an unmigrated ConfigMap `kubeboot/revocations`: a revoked node gets no certificate of any kind, its kubelet client renewed or issued again to any token, its kube-proxy or serving one, until `kubeboot node unrevoke` (what it holds dies at its notAfter)',
  check: ({ nodeName, world }) => {
    // Read for every node requester (decide.ts); none read is a revocation not checked, so nothing is approved.
    if (world.records === null) return `the revocation ${recordRef('noderevocations', nodeName!)} was not read`;
    const revoked = world.records.revocation;
    if (revoked === null) return null;
    const at = revoked.at ? ` at ${show(revoked.at)}` : '';
    return `node ${nodeName} was revoked${at}${revoked.reason ? `: ${show(revoked.reason)}` : ''} (${recordRef('noderevocations', nodeName!)})`;
  },
};

/**
 * A node's kube-proxy and serving certificates outlive a revocation (no CRL
 * or OCSP in Kubernetes): the signer issues min(expirationSeconds,
 * --cluster-signing-duration), a year by default, and the approver cannot
 * change a CSR's spec. So the CSR must ask for a short one itself: a
 * kube-proxy CSR always (only kubeboot files those, and it asks for a day);
 * a serving CSR when it asks at all, because the kubelet's own
 * serverTLSBootstrap CSRs (install.md's recommended way) carry none and the
 * kubelet has no setting for it. Such a certificate is only ever for the
 * node's own name and addresses (dns-sans, ip-sans); docs/node-identity.md
 * says how long it lives.
 */
export function shortLived(unset: 'refused' | 'allowed'): Rule {
  return {
    name: 'short-lived',
    summary:
      unset === 'refused'
        ? "`spec.expirationSeconds` is set and ≤ `--max-proxy-serving-expiration` (default 24h): a revoked node's certificate dies within it (kubeboot asks for at most 24h)"
        : "`spec.expirationSeconds`, when set, ≤ `--max-proxy-serving-expiration` (default 24h; kubeboot asks for at most 24h). Unset is allowed: the kubelet's own `serverTLSBootstrap` CSRs cannot set it, and the certificate, for the node's own names and addresses only, then lives the signer's `--cluster-signing-duration`",
    check: ({ csr, policy }) => {
      const max = policy.maxProxyServingExpirationSeconds ?? SHORT_LIVED_SECONDS;
      if (csr.expirationSeconds === undefined)
        return unset === 'allowed'
          ? null
          : `spec.expirationSeconds is not set: the signer would issue its --cluster-signing-duration, and a revoked node would keep the certificate that long; ask for at most ${max} (kubeboot does)`;
      return csr.expirationSeconds <= max
        ? null
        : `expirationSeconds ${csr.expirationSeconds} is above ${max} (--max-proxy-serving-expiration): a revoked node would keep the certificate that long`;
    },
  };
}

/** `name` is, or is under, one of `suffixes` (case-insensitive, a leading dot ignored): the suffix that matched. */
function suffixOf(name: string, suffixes: readonly string[]): string | null {
  const n = name.toLowerCase();
  for (const raw of suffixes) {
    const s = raw.replace(/^\./, '').toLowerCase();
    if (n === s || n.endsWith(`.${s}`)) return s;
  }
  return null;
}

/**
 * With --serving-dns-suffix, a node may have `<n>.<suffix>` as a serving
 * DNS SAN. A node named `<m>.<suffix>` would hold honest node `<m>`'s FQDN
 * as its bare name, and with nested suffixes (`a.example`, `b.a.example`) a
 * name `<m>.b` would hold `<m>.b.a.example`, node `<m>`'s name under the
 * other: such names are never issued, nor served.
 */
export function dnsSuffixNameProblem(nodeName: string, suffixes: readonly string[]): string | null {
  const under = suffixOf(nodeName, suffixes);
  if (under !== null)
    return `node name ${show(nodeName)} ends in the serving DNS suffix ${show(under)} (--serving-dns-suffix): it is another node's FQDN under it`;
  for (const outer of suffixes)
    for (const inner of suffixes) {
      const o = outer.replace(/^\./, '').toLowerCase();
      const i = inner.replace(/^\./, '').toLowerCase();
      if (o === i || !o.endsWith(`.${i}`)) continue;
      const between = o.slice(0, -i.length - 1);
      if (suffixOf(nodeName, [between]) !== null)
        return `node name ${show(nodeName)} under the serving DNS suffix ${show(i)} is another node's name under ${show(o)} (--serving-dns-suffix)`;
    }
  return null;
}

export const notUnderDnsSuffix: Rule = {
  name: 'not-under-dns-suffix',
  summary:
    "the node name neither is nor ends in a `--serving-dns-suffix` (nor, with nested suffixes, is another node's name under one): `<m>.<suffix>` is honest node `<m>`'s serving name",
  check: ({ nodeName, policy }) => dnsSuffixNameProblem(nodeName!, policy.serving.dnsSuffixes),
};

/**
 * Exactly `digital signature` and the purpose, plus `key encipherment` where
 * it is allowed: for a kube-proxy client CSR (only kubeboot asks for those)
 * with an RSA key, as kubeboot requests it; for a kubelet's client or serving
 * CSR with any key, as upstream's ValidateKubeletClientCSR and
 * ValidateKubeletServingCSR accept, because the kubelet asks for it with
 * ECDSA keys too (bootstrap.go always does).
 */
export function usagesRule(purpose: 'client auth' | 'server auth', keyEncipherment: 'rsa' | 'any'): Rule {
  const anyKeyMayEncipher = keyEncipherment === 'any';
  const [who, upstream] =
    purpose === 'server auth'
      ? ['older kubelets ask', 'ValidateKubeletServingCSR']
      : ["the kubelet's bootstrap asks", 'ValidateKubeletClientCSR'];
  return {
    name: 'usages',
    summary: anyKeyMayEncipher
      ? `exactly \`digital signature\`, \`${purpose}\` (+ \`key encipherment\` optionally, for any key: ${who} for it with ECDSA keys, and upstream's \`${upstream}\` accepts both sets)`
      : `exactly \`digital signature\`, \`${purpose}\` (+ \`key encipherment\` for RSA keys)`,
    check: ({ csr }) => {
      const required = ['digital signature', purpose];
      const allowed = anyKeyMayEncipher || csr.request?.key.kind === 'rsa' ? [...required, 'key encipherment'] : required;
      const usages = csr.usages;
      const unique = new Set(usages);
      const ok = unique.size === usages.length && required.every((u) => unique.has(u)) && usages.every((u) => allowed.includes(u));
      return ok
        ? null
        : `usages ${list(usages)} are not exactly ${list(required)}${allowed.length > required.length ? ' (+ key encipherment)' : ''}`;
    },
  };
}

export const noSans: Rule = {
  name: 'no-sans',
  summary: 'no DNS, IP, email, URI or other SANs',
  check: ({ csr }) => {
    const r = csr.request!;
    const sans = [
      ...r.dnsNames.map((d) => `DNS:${d}`),
      ...r.ipAddresses.map((i) => `IP:${i}`),
      ...r.emailAddresses.map((e) => `email:${e}`),
      ...r.uris.map((u) => `URI:${u}`),
      ...r.otherNames,
    ];
    return sans.length === 0 ? null : `a client certificate carries no SANs, got ${list(sans)}`;
  },
};

/** The node's inventory entry, or why there is none an inventory rule can trust. */
export function trustedEntry(lookup: InventoryLookup | null | undefined, nodeName: string): InventoryEntry | string {
  if (lookup === null || lookup === undefined || !lookup.found)
    return `the inventory ${INVENTORY_REF} does not exist: with --inventory no kubelet client or serving CSR is approved without it (docs/node-identity.md: an Inventory named inventory, spec.nodes.${nodeName}: 'ips: ...')${lookup?.found === false && lookup.legacy ? `; ${lookup.legacy}` : ''}`;
  if (lookup.entry === null) return `node ${nodeName} is not in the inventory ${INVENTORY_REF} (add a key ${nodeName} to spec.nodes)`;
  return 'problem' in lookup.entry ? `the inventory entry cannot be trusted: ${lookup.entry.problem}` : lookup.entry;
}
