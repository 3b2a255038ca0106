/**
 * The approval policy as named, pure rules (the shape of
 * postfinance/kubelet-csr-approver's checks, with kube-controller-manager's
 * csrapproving SubjectAccessReview as the last step, done by the caller).
 * Each rule looks at one property of a CSR and returns the problem, or null.
 * The first rule that fails names the violation in the Event, the log line
 * and the metrics, so an operator can tell exactly what to fix.
 */
import { BlockList, isIP } from 'node:net';
import { dns1123SubdomainProblem } from '../config/values.js';
import { KUBE_APISERVER_CLIENT_SIGNER, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, SHORT_LIVED_SECONDS } from '../identity.js';
import { bindingAllows, bindingRef, type Replacement, type Revocation, type TokenBinding } from '../records/bindings.js';
import { INVENTORY_REF, inventoryHasIp, type InventoryEntry, type InventoryLookup } from '../records/inventory.js';
import { recordRef } from '../records/kinds.js';
import { reservedNameProblem } from '../pki/names.js';
import { excerpt } from '../text.js';
import type { ApiServerFacts } from './apiserver.js';
import { keyAlgorithmName, type RequestFacts } from './request.js';
import { tpmAttested } from './tpm-attested.js';

export interface ApproverPolicy {
  kubeProxy: { commonName: string; organizations: string[] };
  /** Largest spec.expirationSeconds approved; an unset one leaves the signer's --cluster-signing-duration in charge. */
  maxExpirationSeconds: number;
  /**
   * --max-proxy-serving-expiration: kube-proxy client and kubelet serving CSRs
   * must set spec.expirationSeconds, at most this (unset: SHORT_LIVED_SECONDS).
   */
  maxProxyServingExpirationSeconds?: number;
  /** `ecdsa-p256`, `rsa-2048`, ...; RSA below 2048 bits is refused whatever this says. */
  keyAlgorithms: string[];
  serving: { enabled: boolean; dnsSuffixes: string[]; ipCidrs: string[] };
  /** Absent or not enabled: kubelet client CSRs are left to kube-controller-manager, as before. */
  kubeletClient?: KubeletClientPolicy;
  /**
   * --inventory: `inventories.kubeboot.io/inventory` (agent/records/inventory.ts) is the authority: kubelet client CSRs
   * (first issue and renewal) only for listed names, serving IP SANs only among the listed addresses.
   */
  inventory?: boolean;
}

export interface KubeletClientPolicy {
  enabled: boolean;
  /** --unsafe-approve-unbound-tokens: a token with no binding may have any name (kube-controller-manager's prefix check). */
  unboundTokens: boolean;
  /** --protect-nodes: `key` or `key=value`; an existing Node with such a label is never issued to a bootstrap token. */
  protectNodes: string[];
}

export type PolicyName = 'kube-proxy-client' | 'kubelet-serving' | 'kubelet-client';

/** The parts of a CertificateSigningRequest the rules read. */
export interface CsrFacts {
  name: string;
  /** metadata.uid: what a token's binding and a replacement mark are spent on. */
  uid: string;
  /** metadata.creationTimestamp (RFC 3339, whole seconds). */
  created: string | undefined;
  signerName: string;
  username: string;
  groups: string[];
  usages: string[];
  expirationSeconds: number | undefined;
  /** Null when spec.request does not parse, or could be read two ways (requestProblem says why). */
  request: RequestFacts | null;
  requestProblem: string | null;
}

export interface NodeAddress {
  type: string;
  address: string;
}

/** What the cluster says about the requester, looked up before the rules run. */
export interface World {
  /** The Node the certificate is for (PolicySpec.node), or null when there is none. */
  node: { name: string; addresses: NodeAddress[]; labels?: Record<string, string> } | null;
  /**
   * Other CSRs of the same policy and requester that stand before this one:
   * approved but not yet issued (whatever their name or age), or pending and
   * older. Neither issued, denied nor failed.
   */
  blocking: string[];
  /** The API server's names and addresses (apiserver.ts); null for a policy that does not read them. */
  apiServer: ApiServerFacts | null;
  /** What the records of agent/records/bindings.ts say of this token and name: kubelet-client, and the revocation for every node requester (null otherwise). */
  records: NodeRecords | null;
  /** With --inventory, for kubelet-client and kubelet-serving (null otherwise): the node's entry in `inventories.kubeboot.io/inventory`. */
  inventory?: InventoryLookup | null;
}

export interface NodeRecords {
  /** First issue: the token's binding (`tokenbindings.kubeboot.io/<id>`), why it cannot be trusted, or null when there is none. */
  binding: TokenBinding | { problem: string } | null;
  /** First issue: the replacement mark of the name, if any (the rule checks it is for this token). */
  replacement: Replacement | null;
  /** The node's revocation: every policy reads it (not-revoked). */
  revocation: Revocation | null;
}

export interface RuleInput {
  csr: CsrFacts;
  /**
   * The node the certificate is for (PolicySpec.node): the requester's
   * `system:node:<n>`, or the CN's for kubelet-client (whose first
   * requester is a bootstrap token); null when that is not a valid Node name.
   */
  nodeName: string | null;
  world: World;
  policy: ApproverPolicy;
}

export interface Rule {
  name: string;
  /** Its row in docs/approver.md's rule table (renderRuleTables; test/unit/docs.test.ts keeps them in sync). */
  summary: string;
  /** Runs only for this kind of requester (a policy with two: kubelet-client); absent: always. */
  only?: RequesterKind;
  /** Runs only with `--inventory` (`on`) or only without it (`off`); absent: either way. */
  inventory?: 'on' | 'off';
  /**
   * The parts of the World it reads that cost a look-up per CSR: the Node is
   * fetched, and the CSRs standing before it listed, only when a rule that
   * runs reads them (policy.test.ts holds every rule to its declaration).
   */
  reads?: readonly WorldRead[];
  check(input: RuleInput): string | null;
}

/** World fields looked up per CSR only for the rules that declare them. */
export type WorldRead = 'node' | 'blocking';

export const NODE_USER_PREFIX = 'system:node:';
export const NODES_GROUP = 'system:nodes';
export const BOOTSTRAP_USER_PREFIX = 'system:bootstrap:';
export const BOOTSTRAPPERS_GROUP = 'system:bootstrappers';
/** Labels of a control-plane Node (kubeadm sets the first; `master` before 1.24): never issued to a bootstrap token. */
export const CONTROL_PLANE_LABELS = ['node-role.kubernetes.io/control-plane', 'node-role.kubernetes.io/master'] as const;
const MIN_RSA_BITS = 2048;

/**
 * `system:node:<n>` → `<n>` when `<n>` can be a Node's name (a DNS-1123
 * subdomain, as the API validates Node names); anything else → null. A
 * bootstrap token can get a kubelet certificate for any name under the
 * prefix (kube-controller-manager checks only the prefix), so `system:node:.`
 * exists; nothing is looked up or built from a name that is not valid.
 */
export function nodeNameOf(username: string): string | null {
  if (!username.startsWith(NODE_USER_PREFIX)) return null;
  const name = username.slice(NODE_USER_PREFIX.length);
  return dns1123SubdomainProblem(name) === null ? name : null;
}

/** matches cluster-bootstrap: the user `system:bootstrap:<id>` of a token `<id>.<secret>`, id `[a-z0-9]{6}`; anything else → null. */
export function tokenIdOf(username: string): string | null {
  const id = username.startsWith(BOOTSTRAP_USER_PREFIX) ? username.slice(BOOTSTRAP_USER_PREFIX.length) : '';
  return /^[a-z0-9]{6}$/.test(id) ? id : null;
}

/** A bootstrap token (a node's first credential) or a node itself (renewal). */
export type RequesterKind = 'bootstrap' | 'node';

export function requesterKind(csr: Pick<CsrFacts, 'username' | 'groups'>): RequesterKind | null {
  if (tokenIdOf(csr.username) !== null && csr.groups.includes(BOOTSTRAPPERS_GROUP)) return 'bootstrap';
  if (nodeNameOf(csr.username) !== null && csr.groups.includes(NODES_GROUP)) return 'node';
  return null;
}

/** Untrusted values in a rule's message: each bounded and escaped, and at most ten of them. */
const list = (values: readonly string[]): string => {
  const more = values.length > 10 ? ` and ${values.length - 10} more` : '';
  return `[${values
    .slice(0, 10)
    .map((v) => excerpt(v))
    .join(', ')}${more}]`;
};
const show = (value: string): string => excerpt(value);

function sameList(a: readonly string[], b: readonly string[]): boolean {
  const sa = [...a].sort();
  const sb = [...b].sort();
  return sa.length === sb.length && sa.every((v, i) => v === sb[i]);
}

// ---- rules shared by both policies ----

const requesterIsNode: Rule = {
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

const requestSignature: Rule = {
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

const nodeExists: Rule = {
  name: 'node-exists',
  reads: ['node'],
  summary: 'a Node object `<n>` exists (re-checked 5 s, 10 s, 20 s … later: the kubelet registers after its credential)',
  check: ({ world, nodeName }) => (world.node !== null && world.node.name === nodeName ? null : `no Node ${nodeName ?? ''} exists`),
};

const keyAlgorithm: Rule = {
  name: 'key-algorithm',
  summary: 'one of `--allowed-key-algorithm` (default ECDSA P-256/P-384, RSA 2048/3072/4096); RSA < 2048 never',
  check: ({ csr, policy }) => {
    const key = csr.request!.key;
    const name = keyAlgorithmName(key);
    if (key.kind === 'rsa' && key.bits < MIN_RSA_BITS) return `RSA key of ${key.bits} bits (at least ${MIN_RSA_BITS} required)`;
    return policy.keyAlgorithms.includes(name) ? null : `key algorithm ${name} is not allowed (allowed: ${list(policy.keyAlgorithms)})`;
  },
};

const expiration: Rule = {
  name: 'expiration',
  summary:
    "`spec.expirationSeconds`, when set, ≤ `--max-expiration` (default 8760h; unset leaves the signer's `--cluster-signing-duration` in charge)",
  check: ({ csr, policy }) =>
    csr.expirationSeconds === undefined || csr.expirationSeconds <= policy.maxExpirationSeconds
      ? null
      : `expirationSeconds ${csr.expirationSeconds} is above the maximum ${policy.maxExpirationSeconds}`,
};

const notRevoked: Rule = {
  name: 'not-revoked',
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
function shortLived(unset: 'refused' | 'allowed'): Rule {
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

const notUnderDnsSuffix: Rule = {
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
function usagesRule(purpose: 'client auth' | 'server auth', keyEncipherment: 'rsa' | 'any'): Rule {
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

// ---- kube-proxy client ----

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

const noSans: Rule = {
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

// ---- kubelet serving ----

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

/** The node's inventory entry, or why there is none an inventory rule can trust. */
function trustedEntry(lookup: InventoryLookup | null | undefined, nodeName: string): InventoryEntry | string {
  if (lookup === null || lookup === undefined || !lookup.found)
    return `the inventory ${INVENTORY_REF} does not exist: with --inventory no kubelet client or serving CSR is approved without it (docs/node-identity.md: an Inventory named inventory, spec.nodes.${nodeName}: 'ips: ...')${lookup?.found === false && lookup.legacy ? `; ${lookup.legacy}` : ''}`;
  if (lookup.entry === null) return `node ${nodeName} is not in the inventory ${INVENTORY_REF} (add a key ${nodeName} to spec.nodes)`;
  return 'problem' in lookup.entry ? `the inventory entry cannot be trusted: ${lookup.entry.problem}` : lookup.entry;
}

const inventoryAddresses: Rule = {
  name: 'inventory-addresses',
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

// Moved to pki/names.ts so `kubeboot token create --node` refuses the same names without importing the approver.
export { reservedNameProblem };

const reservedNames: Rule = {
  name: 'reserved-names',
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

// ---- kubelet client ----

const clientRequester: Rule = {
  name: 'requester',
  summary:
    'a bootstrap token (`system:bootstrap:<id>` in group `system:bootstrappers`: first issue) or a node (`system:node:<n>` in group `system:nodes`, `<n>` a valid Node name: renewal)',
  check: ({ csr }) =>
    requesterKind(csr) !== null
      ? null
      : `requester ${show(csr.username)} (groups ${list(csr.groups)}) is neither a bootstrap token in ${BOOTSTRAPPERS_GROUP} nor a node in ${NODES_GROUP}`,
};

const clientSubject: Rule = {
  name: 'subject',
  summary: "CN `system:node:<n>`, `<n>` a valid Node name (for a renewal the requester's own), O exactly `system:nodes`",
  check: ({ csr, nodeName }) => {
    const { commonName, organizations } = csr.request!.subject;
    if (nodeName === null)
      return commonName.startsWith(NODE_USER_PREFIX)
        ? `CN ${show(commonName)}: the node name ${dns1123SubdomainProblem(commonName.slice(NODE_USER_PREFIX.length))}`
        : `CN ${show(commonName)} is not ${NODE_USER_PREFIX}<node name>`;
    if (requesterKind(csr) === 'node' && commonName !== csr.username)
      return `CN ${show(commonName)} is not the requester's own ${show(csr.username)}`;
    return sameList(organizations, [NODES_GROUP]) ? null : `O ${list(organizations)} is not [${NODES_GROUP}]`;
  },
};

const reservedNodeName: Rule = {
  name: 'reserved-names',
  summary:
    "the node name is not the API server's (`kubernetes`, `kubernetes.*`, a name in its serving certificate or URL), a cluster Service name (`*.svc`, `*.svc.*`) or `localhost`",
  check: ({ world, nodeName }) => reservedNameProblem(nodeName!, world.apiServer),
};

const tokenBound: Rule = {
  name: 'token-bound',
  only: 'bootstrap',
  summary:
    "the token's binding `tokenbindings.kubeboot.io/<id>` (`kubeboot token create --node/--pool`) allows `<n>`: one of its names or under its prefix, within its max-nodes, and a name spent (by any token: `nodeclaims.kubeboot.io/<n>`) only for that same CSR, or freed by a replacement mark for this token; a token with no binding only under `--unsafe-approve-unbound-tokens`",
  check: ({ csr, nodeName, world, policy }) => {
    const binding = world.records!.binding;
    const where = bindingRef(tokenIdOf(csr.username)!);
    if (binding === null)
      return policy.kubeletClient?.unboundTokens === true
        ? null
        : `token ${tokenIdOf(csr.username)} has no binding ${where} (make tokens with kubeboot token create --node or --pool; --unsafe-approve-unbound-tokens approves unbound ones for any name)`;
    if ('problem' in binding) return `the binding ${where} cannot be trusted: ${binding.problem}`;
    if (csr.uid === '') return 'the CSR has no uid to spend the token on';
    return bindingAllows(binding, nodeName!, csr.uid);
  },
};

const noTakeover: Rule = {
  name: 'no-takeover',
  reads: ['node'],
  only: 'bootstrap',
  summary:
    'no Node `<n>` exists, unless the admin marked it as being replaced for this token (`kubeboot node replace`: `nodereplacements.kubeboot.io/<n>`) before this CSR was made and no other CSR has claimed the mark (the first one wins)',
  check: ({ csr, nodeName, world }) => {
    if (world.node === null) return null;
    const mark = world.records!.replacement;
    const live = `Node ${nodeName} exists: a bootstrap token never takes over a registered node's name`;
    if (mark === null) return `${live} (kubeboot node replace ${nodeName} marks it as being replaced)`;
    if (mark.claimedBy === csr.uid) return null;
    if (mark.tokenId !== tokenIdOf(csr.username))
      return `${live}; its replacement mark is for ${mark.tokenId ? `token ${show(mark.tokenId)}` : 'no token yet (kubeboot token create --node binds it)'}`;
    if (mark.claimedBy !== null) return `${live}; its replacement mark was claimed by the CSR with uid ${show(mark.claimedBy)}`;
    // A CSR filed before the mark (an attacker's, pending since) must not win it: the replacement machine boots after.
    const marked = Math.floor(Date.parse(mark.at) / 1000) * 1000;
    return Date.parse(csr.created ?? '') >= marked
      ? null
      : `${live}; this CSR was made before it was marked as being replaced (at ${show(mark.at)})`;
  },
};

/** `key` (the label is set) or `key=value`, as --protect-nodes takes them. */
function hasLabel(labels: Readonly<Record<string, string>>, requirement: string): boolean {
  const at = requirement.indexOf('=');
  return at < 0 ? Object.hasOwn(labels, requirement) : labels[requirement.slice(0, at)] === requirement.slice(at + 1);
}

const notControlPlane: Rule = {
  name: 'not-control-plane',
  reads: ['node'],
  only: 'bootstrap',
  summary:
    'an existing Node `<n>` has neither `node-role.kubernetes.io/control-plane` nor `node-role.kubernetes.io/master`, nor a label of `--protect-nodes`: such a name is never issued to a bootstrap token, marked as being replaced or not',
  check: ({ nodeName, world, policy }) => {
    const labels = world.node?.labels ?? {};
    const protectedBy = [...CONTROL_PLANE_LABELS, ...(policy.kubeletClient?.protectNodes ?? [])].find((r) => hasLabel(labels, r));
    return protectedBy === undefined
      ? null
      : `Node ${nodeName} is protected (${show(protectedBy)}): its name is never issued to a bootstrap token; join it with an admin-approved CSR`;
  },
};

const inventoryListed: Rule = {
  name: 'inventory-listed',
  inventory: 'on',
  summary:
    'the node name is a key of `inventories.kubeboot.io/inventory` (spec.nodes) whose entry parses, for a renewal too: removing a node from the inventory stops its renewals as a revocation does; a missing inventory approves nothing',
  check: ({ world, nodeName }) => {
    const entry = trustedEntry(world.inventory, nodeName!);
    return typeof entry === 'string' ? entry : null;
  },
};

export const KUBELET_CLIENT_RULES: readonly Rule[] = [
  clientRequester,
  requestSignature,
  clientSubject,
  noSans,
  usagesRule('client auth', 'any'),
  keyAlgorithm,
  expiration,
  reservedNodeName,
  notUnderDnsSuffix,
  tpmAttested,
  tokenBound,
  noTakeover,
  notControlPlane,
  notRevoked,
  inventoryListed,
];

export interface PolicySpec {
  name: PolicyName;
  signerName: string;
  rules: readonly Rule[];
  /**
   * Virtual subresource of certificatesigningrequests the requester must be
   * allowed to `create`; one per kind of requester where a policy has two.
   */
  subresource: string | Readonly<Record<RequesterKind, string>>;
  /** Whose Node the rules read: the requester's (`system:node:<n>`), or the one the certificate is for (its CN). */
  node: 'requester' | 'subject';
  /** Whether this approver decides the policy's CSRs at all. */
  enabled(policy: ApproverPolicy): boolean;
}

export const POLICIES: Record<PolicyName, PolicySpec> = {
  'kube-proxy-client': {
    name: 'kube-proxy-client',
    signerName: KUBE_APISERVER_CLIENT_SIGNER,
    rules: KUBE_PROXY_RULES,
    subresource: 'kubeproxyclient',
    node: 'requester',
    enabled: () => true,
  },
  'kubelet-serving': {
    name: 'kubelet-serving',
    signerName: KUBELET_SERVING_SIGNER,
    rules: KUBELET_SERVING_RULES,
    subresource: 'selfnodeserving',
    node: 'requester',
    enabled: (policy) => policy.serving.enabled,
  },
  // As kube-controller-manager's nodeclient/selfnodeclient, under kubeboot's own names, so RBAC
  // bindings decide which approver a cluster uses (packaging/manifests/approver/node-grants.yaml).
  'kubelet-client': {
    name: 'kubelet-client',
    signerName: KUBELET_CLIENT_SIGNER,
    rules: KUBELET_CLIENT_RULES,
    subresource: { bootstrap: 'kubebootnodeclient', node: 'kubebootselfnodeclient' },
    node: 'subject',
    enabled: (policy) => policy.kubeletClient?.enabled === true,
  },
};

/** The subresource the SubjectAccessReview asks about, for a CSR that passed the rules (so its requester has a kind). */
export function subresourceFor(spec: PolicySpec, csr: Pick<CsrFacts, 'username' | 'groups'>): string {
  return typeof spec.subresource === 'string' ? spec.subresource : spec.subresource[requesterKind(csr) ?? 'node'];
}

/** The node the certificate is for (RuleInput.nodeName). */
export function nodeNameFor(spec: PolicySpec, csr: Pick<CsrFacts, 'username' | 'request'>): string | null {
  return nodeNameOf(spec.node === 'requester' ? csr.username : (csr.request?.subject.commonName ?? ''));
}

/**
 * Which policy a CSR falls under, or null when it is none of the approver's
 * business (left untouched). A CSR is ours when it is for one of our signers
 * and either comes from a node (or, for the kubelet client, a bootstrap
 * token) or asks for the identity we issue, so a bootstrap token asking for
 * `system:kube-proxy` is reported, while a user's own client CSR for
 * kube-apiserver-client is left to whoever handles it.
 */
export function recognize(
  csr: Pick<CsrFacts, 'signerName' | 'username' | 'groups' | 'request'>,
  policy: ApproverPolicy,
): PolicyName | null {
  const fromNode = csr.username.startsWith(NODE_USER_PREFIX) || csr.groups.includes(NODES_GROUP);
  const cn = csr.request?.subject.commonName;
  if (csr.signerName === KUBE_APISERVER_CLIENT_SIGNER && (fromNode || cn === policy.kubeProxy.commonName)) return 'kube-proxy-client';
  if (policy.serving.enabled && csr.signerName === KUBELET_SERVING_SIGNER && (fromNode || cn?.startsWith(NODE_USER_PREFIX) === true))
    return 'kubelet-serving';
  const fromBootstrap = csr.username.startsWith(BOOTSTRAP_USER_PREFIX) || csr.groups.includes(BOOTSTRAPPERS_GROUP);
  if (
    POLICIES['kubelet-client'].enabled(policy) &&
    csr.signerName === KUBELET_CLIENT_SIGNER &&
    (fromNode || fromBootstrap || cn?.startsWith(NODE_USER_PREFIX) === true)
  )
    return 'kubelet-client';
  return null;
}

export type Verdict = { ok: true } | { ok: false; rule: string; problem: string };

/** The rules that run for this CSR: all of them, but for a rule of the other kind of requester or the other --inventory. */
export function applicable(rules: readonly Rule[], csr: Pick<CsrFacts, 'username' | 'groups'>, policy: ApproverPolicy): Rule[] {
  const kind = requesterKind(csr);
  const inventory = policy.inventory === true ? 'on' : 'off';
  return rules.filter((rule) => (rule.only === undefined || rule.only === kind) && (rule.inventory ?? inventory) === inventory);
}

/** Whether a rule that runs for this CSR reads `what` (so it must be looked up). */
export function readsWorld(
  rules: readonly Rule[],
  csr: Pick<CsrFacts, 'username' | 'groups'>,
  policy: ApproverPolicy,
  what: WorldRead,
): boolean {
  return applicable(rules, csr, policy).some((rule) => rule.reads?.includes(what) === true);
}

/** Signers of the policies with a rule reading `what`: a CSR of another signer never needs it. */
export function signersReading(what: WorldRead): Set<string> {
  return new Set(
    Object.values(POLICIES)
      .filter((spec) => spec.rules.some((rule) => rule.reads?.includes(what) === true))
      .map((spec) => spec.signerName),
  );
}

/** Runs the rules in order; the first failure is the verdict. */
export function evaluate(rules: readonly Rule[], input: RuleInput): Verdict {
  for (const rule of applicable(rules, input.csr, input.policy)) {
    const problem = rule.check(input);
    if (problem !== null) return { ok: false, rule: rule.name, problem };
  }
  return { ok: true };
}

/** The rule the SubjectAccessReview is reported as. */
export const AUTHORIZED_RULE = 'authorized';

const REQUESTER_KINDS: Record<RequesterKind, string> = { bootstrap: 'first issue', node: 'renewal' };
const INVENTORY_MODES = { on: 'with `--inventory` only', off: 'without `--inventory` only' } as const;

/** A rule's row: its summary, after the conditions under which it runs at all. */
function ruleRow(rule: Rule): string {
  const when = [
    ...(rule.only === undefined ? [] : [`${REQUESTER_KINDS[rule.only]} only`]),
    ...(rule.inventory === undefined ? [] : [INVENTORY_MODES[rule.inventory]]),
  ];
  return when.length === 0 ? rule.summary : `${when.join(', ')}: ${rule.summary}`;
}

/** The last check of every policy, made by the caller (decide.ts) once every rule has passed. */
export function authorizedSummary(spec: PolicySpec): string {
  const on =
    typeof spec.subresource === 'string'
      ? `\`certificatesigningrequests/${spec.subresource}\``
      : Object.entries(spec.subresource)
          .map(([kind, sub]) => `\`certificatesigningrequests/${sub}\` (${REQUESTER_KINDS[kind as RequesterKind]})`)
          .join(' or ');
  return `a SubjectAccessReview as the CSR's user, uid, groups and extra allows \`create\` on ${on}`;
}

/** docs/approver.md's rule tables: each policy's rules in the order they run, the first failure being the one reported. */
export function renderRuleTables(): string {
  return Object.values(POLICIES)
    .map((spec) => {
      const rows = [...spec.rules.map((r) => [r.name, ruleRow(r)]), [AUTHORIZED_RULE, authorizedSummary(spec)]];
      return [
        `**${spec.name}** (signer \`${spec.signerName}\`)`,
        '',
        '| Rule | Requires |',
        '|---|---|',
        ...rows.map(([name, summary]) => `| \`${name}\` | ${summary} |`),
        '',
      ].join('\n');
    })
    .join('\n');
}
