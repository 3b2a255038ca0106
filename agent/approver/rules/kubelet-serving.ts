/** The kubelet's serving certificate (signer kubernetes.io/kubelet-serving), asked for by the node itself. */
import { BlockList, isIP } from 'node:net';
import { reservedNameProblem } from '../../pki/names.js';
import { INVENTORY_REF, inventoryHasIp } from '../../records/inventory.js';
import { KUBELET_SERVING_SIGNER } from '../../identity.js';
import { forNode, fromNode, list, NODE_USER_PREFIX, NODES_GROUP, sameList, show, type PolicySpec, type Rule } from './rule.js';
import {
  expiration,
  keyAlgorithm,
  nodeExists,
  notRevoked,
  notUnderDnsSuffix,
  requesterIsNode,
  requestSignature,
  shortLived,
  trustedEntry,
  usagesRule,
} from './shared.js';

const servingSubject: Rule = {
  name: 'subject',
  summary: 'CN `system:node:<n>`, O exactly `system:nodes`',
  check: ({ csr, nodeName }) => {
    const { commonName, organizations } = csr.request!.subject;
    if (commonName !== `${NODE_USER_PREFIX}${nodeName}`)
      return `CN ${show(commonName)} is not the requester's ${NODE_USER_PREFIX}${nodeName}`;
    return sameList(organizations, [NODES_GROUP]) ? null : `O ${list(organizations)} is not [${NODES_GROUP}]`;
  },
};

const hasSan: Rule = {
  name: 'has-san',
  summary: 'at least one DNS or IP SAN',
  check: ({ csr }) =>
    csr.request!.dnsNames.length + csr.request!.ipAddresses.length > 0 ? null : 'a serving certificate needs a DNS or IP SAN',
};

/**
 * The node name, and the node name under every configured suffix. Not the
 * hostnames in the Node's status.addresses: the node's own kubelet writes
 * those (NodeRestriction allows it), so a compromised node could list
 * another node's name, `kubernetes.default.svc` or a wildcard there and have
 * a serving certificate for it. The node name is bound to the requester by
 * the API server, which is the only binding a node cannot forge.
 */
export function allowedDnsNames(nodeName: string, suffixes: readonly string[]): Set<string> {
  const name = nodeName.toLowerCase();
  return new Set([name, ...suffixes.map((s) => `${name}.${s.replace(/^\./, '').toLowerCase()}`)]);
}

const dnsSans: Rule = {
  name: 'dns-sans',
  reads: ['node'],
  summary:
    "each DNS SAN is the node name, or the node name under a `--serving-dns-suffix` (never a hostname from the Node's `status.addresses`, which the node writes itself)",
  check: ({ csr, world, policy }) => {
    const allowed = allowedDnsNames(world.node!.name, policy.serving.dnsSuffixes);
    const stray = csr.request!.dnsNames.filter((d) => !allowed.has(d.toLowerCase()));
    return stray.length === 0 ? null : `DNS SANs ${list(stray)} are not this Node's names ${list([...allowed])}`;
  },
};

function cidrList(cidrs: readonly string[]): BlockList {
  const blocks = new BlockList();
  for (const cidr of cidrs) {
    const [net = '', prefix = ''] = cidr.split('/');
    blocks.addSubnet(net, Number(prefix), isIP(net) === 6 ? 'ipv6' : 'ipv4');
  }
  return blocks;
}

const ipSans: Rule = {
  name: 'ip-sans',
  reads: ['node'],
  inventory: 'off',
  summary: "each IP SAN is one of the Node's `status.addresses`, and inside a `--serving-ip-cidr` when any is set",
  check: ({ csr, world, policy }) => {
    const nodeIps = new Set(world.node!.addresses.filter((a) => isIP(a.address) !== 0).map((a) => canonical(a.address)));
    const blocks = policy.serving.ipCidrs.length > 0 ? cidrList(policy.serving.ipCidrs) : null;
    for (const ip of csr.request!.ipAddresses) {
      if (!nodeIps.has(ip)) return `IP SAN ${ip} is not one of this Node's addresses ${list([...nodeIps])}`;
      if (blocks !== null && !blocks.check(ip, isIP(ip) === 6 ? 'ipv6' : 'ipv4'))
        return `IP SAN ${ip} is outside ${list(policy.serving.ipCidrs)}`;
    }
    return null;
  },
};

const inventoryAddresses: Rule = {
  name: 'inventory-addresses',
  reads: ['inventory'],
  inventory: 'on',
  summary:
    "the node is listed in `inventories.kubeboot.io/inventory` and each IP SAN is one of its entry's `ips` or inside one of its CIDRs (instead of the Node's `status.addresses`, which its kubelet writes: kubernetes/kubernetes#50635), and inside a `--serving-ip-cidr` when any is set",
  check: ({ csr, world, policy, nodeName }) => {
    const entry = trustedEntry(world.inventory, nodeName!);
    if (typeof entry === 'string') return entry;
    const blocks = policy.serving.ipCidrs.length > 0 ? cidrList(policy.serving.ipCidrs) : null;
    for (const ip of csr.request!.ipAddresses) {
      if (!inventoryHasIp(entry, ip))
        return `IP SAN ${ip} is not among node ${nodeName}'s inventory addresses ${list([...entry.ips, ...entry.cidrs])} (${INVENTORY_REF})`;
      if (blocks !== null && !blocks.check(ip, isIP(ip) === 6 ? 'ipv6' : 'ipv4'))
        return `IP SAN ${ip} is outside ${list(policy.serving.ipCidrs)}`;
    }
    return null;
  },
};

function canonical(ip: string): string {
  return isIP(ip) === 6 ? new URL(`http://[${ip}]/`).hostname.replace(/^\[|\]$/g, '') : ip;
}

const reservedNames: Rule = {
  name: 'reserved-names',
  reads: ['apiServer'],
  summary:
    "neither the node name nor any DNS SAN is the API server's (`kubernetes`, `kubernetes.*`, a name in its serving certificate or URL), a cluster Service name (`*.svc`, `*.svc.*`) or `localhost`",
  check: ({ csr, world, nodeName }) => {
    for (const name of [nodeName ?? '', ...csr.request!.dnsNames]) {
      const problem = reservedNameProblem(name, world.apiServer);
      if (problem !== null) return problem;
    }
    return null;
  },
};

/** Addresses no node serves on for others: loopback, unspecified, link-local (the cloud's metadata service among them). */
const NEVER_SERVING = (() => {
  const b = new BlockList();
  b.addSubnet('127.0.0.0', 8, 'ipv4');
  b.addSubnet('0.0.0.0', 8, 'ipv4');
  b.addSubnet('169.254.0.0', 16, 'ipv4');
  b.addAddress('::1', 'ipv6');
  b.addAddress('::', 'ipv6');
  b.addSubnet('fe80::', 10, 'ipv6');
  return b;
})();

const notApiServerIps: Rule = {
  name: 'not-api-server-ips',
  reads: ['apiServer'],
  summary:
    "no IP SAN is loopback, unspecified or link-local, nor one of the API server's addresses (its serving certificate's IP SANs, the `kubernetes` Service's cluster IPs and Endpoints): a Node's `status.addresses` are what its kubelet says",
  check: ({ csr, world }) => {
    const theirs = new Set(world.apiServer?.ips ?? []);
    for (const ip of csr.request!.ipAddresses) {
      if (NEVER_SERVING.check(ip, isIP(ip) === 6 ? 'ipv6' : 'ipv4')) return `IP SAN ${ip} is loopback, unspecified or link-local`;
      if (theirs.has(canonical(ip))) return `IP SAN ${ip} is the API server's`;
    }
    return null;
  },
};

const noEmailUriSans: Rule = {
  name: 'no-email-uri-sans',
  summary: 'no email, URI or other SANs',
  check: ({ csr }) => {
    const r = csr.request!;
    const other = [...r.emailAddresses.map((e) => `email:${e}`), ...r.uris.map((u) => `URI:${u}`), ...r.otherNames];
    return other.length === 0 ? null : `a serving certificate carries only DNS and IP SANs, got ${list(other)}`;
  },
};

export const KUBELET_SERVING_RULES: readonly Rule[] = [
  requesterIsNode,
  requestSignature,
  notRevoked,
  nodeExists,
  servingSubject,
  hasSan,
  reservedNames,
  notUnderDnsSuffix,
  dnsSans,
  notApiServerIps,
  ipSans,
  inventoryAddresses,
  noEmailUriSans,
  usagesRule('server auth', 'any'),
  keyAlgorithm,
  expiration,
  shortLived('allowed'),
];

export const KUBELET_SERVING: PolicySpec = {
  name: 'kubelet-serving',
  signerName: KUBELET_SERVING_SIGNER,
  rules: KUBELET_SERVING_RULES,
  subresource: 'selfnodeserving',
  node: 'requester',
  enabled: (policy) => policy.serving.enabled,
  recognizes: (csr) => csr.signerName === KUBELET_SERVING_SIGNER && (fromNode(csr) || forNode(csr)),
};
