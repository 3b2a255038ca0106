/**
 * What a rule is and what it reads: the parts of a CSR (CsrFacts), what the
 * cluster says of its requester (World), the policy the flags make, and the
 * requester's identity (a node, a bootstrap token). Each signer's rules are
 * rows in a file of their own (kube-proxy-client.ts, kubelet-serving.ts,
 * kubelet-client.ts; shared.ts holds the rows two signers share).
 */
import { dns1123SubdomainProblem } from '../../config/values.js';
import type { Replacement, Revocation, TokenBinding } from '../../records/bindings.js';
import type { InventoryLookup } from '../../records/inventory.js';
import type { TpmBeaconObject, TpmEnrolmentObject } from '../../records/kinds.js';
import type { Pcr7Policy } from '../../tpm/pcr-policy.js';
import { excerpt } from '../../text.js';
import type { ApiServerFacts } from '../apiserver.js';
import type { RequestFacts } from '../request.js';

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
  /** --tpm-pcr7: the PCR 7 values each pool's TPM-bound names may quote (tpm/pcr-policy.ts). */
  tpmPcr7?: Pcr7Policy[];
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
  /** With --inventory, for kubelet-client: the name's `tpmenrolments.kubeboot.io/<n>` (records/tpm-enrolment.ts), null when there is none. */
  tpmEnrolment?: TpmEnrolmentObject | null;
  /** With --inventory, for a TPM-bound name's kubelet client CSR: `tpmbeacons.kubeboot.io/kubeboot` (records/tpm-beacon.ts), null when there is none. */
  tpmBeacon?: TpmBeaconObject | null;
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
   * The parts of the World it reads, each a look-up per CSR: the Node is
   * fetched, the CSRs standing before it listed, the API server's names
   * read, the node's records and inventory entry read, only when a rule that
   * runs reads them (policy.test.ts holds every rule to its declaration).
   */
  reads?: readonly WorldRead[];
  check(input: RuleInput): string | null;
}

/** World fields looked up per CSR only for the rules that declare them. */
export type WorldRead = 'node' | 'blocking' | 'apiServer' | 'records' | 'inventory' | 'tpmEnrolment' | 'tpmBeacon';

export const NODE_USER_PREFIX = 'system:node:';
export const NODES_GROUP = 'system:nodes';
export const BOOTSTRAP_USER_PREFIX = 'system:bootstrap:';
export const BOOTSTRAPPERS_GROUP = 'system:bootstrappers';
/** Labels of a control-plane Node (kubeadm sets the first; `master` before 1.24): never issued to a bootstrap token. */
export const CONTROL_PLANE_LABELS = ['node-role.kubernetes.io/control-plane', 'node-role.kubernetes.io/master'] as const;

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
export const list = (values: readonly string[]): string => {
  const more = values.length > 10 ? ` and ${values.length - 10} more` : '';
  return `[${values
    .slice(0, 10)
    .map((v) => excerpt(v))
    .join(', ')}${more}]`;
};
export const show = (value: string): string => excerpt(value);

export function sameList(a: readonly string[], b: readonly string[]): boolean {
  const sa = [...a].sort();
  const sb = [...b].sort();
  return sa.length === sb.length && sa.every((v, i) => v === sb[i]);
}

/** What recognising a CSR reads: its signer, requester and (parsed, or its kept CN) request. */
export type Recognized = Pick<CsrFacts, 'signerName' | 'username' | 'groups' | 'request'>;

/** One signer's policy: its rows, the review asked after them, and which of the signer's CSRs are its business. */
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
  /**
   * Whether the CSR is this policy's to decide: for its signer, and from a
   * node (or, for the kubelet client, a bootstrap token) or asking for the
   * identity it issues, so a bootstrap token asking for `system:kube-proxy`
   * is reported, while a user's own client CSR is left to whoever handles it.
   */
  recognizes(csr: Recognized, policy: ApproverPolicy): boolean;
}

/** The requester says it is a node (its name or its group), whether or not it is a valid one. */
export function fromNode(csr: Pick<CsrFacts, 'username' | 'groups'>): boolean {
  return csr.username.startsWith(NODE_USER_PREFIX) || csr.groups.includes(NODES_GROUP);
}

/** The request asks for a node's identity (CN `system:node:...`). */
export function forNode(csr: Pick<CsrFacts, 'request'>): boolean {
  return csr.request?.subject.commonName.startsWith(NODE_USER_PREFIX) === true;
}
