/**
 * The kubelet's client certificate (signer kubernetes.io/kube-apiserver-client-kubelet):
 * its first issue, asked for by a bootstrap token, and its renewals, asked for by the node.
 */
import { dns1123SubdomainProblem } from '../../config/values.js';
import { reservedNameProblem } from '../../pki/names.js';
import { bindingAllows, bindingRef } from '../../records/bindings.js';
import { KUBELET_CLIENT_SIGNER } from '../../identity.js';
import {
  BOOTSTRAP_USER_PREFIX,
  BOOTSTRAPPERS_GROUP,
  CONTROL_PLANE_LABELS,
  forNode,
  fromNode,
  list,
  NODE_USER_PREFIX,
  NODES_GROUP,
  requesterKind,
  sameList,
  show,
  tokenIdOf,
  type PolicySpec,
  type Rule,
} from './rule.js';
import { tpmAttested } from './tpm-attested.js';
import { expiration, keyAlgorithm, noSans, notRevoked, notUnderDnsSuffix, requestSignature, trustedEntry, usagesRule } from './shared.js';

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
  reads: ['apiServer'],
  summary:
    "the node name is not the API server's (`kubernetes`, `kubernetes.*`, a name in its serving certificate or URL), a cluster Service name (`*.svc`, `*.svc.*`) or `localhost`",
  check: ({ world, nodeName }) => reservedNameProblem(nodeName!, world.apiServer),
};

const tokenBound: Rule = {
  name: 'token-bound',
  reads: ['records'],
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
  reads: ['node', 'records'],
  only: 'bootstrap',
  summary:
    'no Node `<n>` exists, unless the admin marked it as being replaced for this token (`kubeboot node replace`: `nodereplacements.kubeboot.io/<n>`) before this CSR was made and no other CSR has claimed the mark (the first one wins)',
  check: ({ csr, nodeName, world }) => {
    if (world.node === null) return null;
    const mark = world.records!.replacement;
    const live = `Node ${nodeName} exists: a bootstrap token never takes over a registered node's name`;
    if (mark === null)
      return `${live} (once that machine is gone, kubeboot node replace ${nodeName} --old-machine-gone marks it as being replaced; a machine that may still run keeps its name, and the new one gets another)`;
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
  reads: ['inventory'],
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

// As kube-controller-manager's nodeclient/selfnodeclient, under kubeboot's own names, so RBAC
// bindings decide which approver a cluster uses (packaging/manifests/approver/node-grants.yaml).
export const KUBELET_CLIENT: PolicySpec = {
  name: 'kubelet-client',
  signerName: KUBELET_CLIENT_SIGNER,
  rules: KUBELET_CLIENT_RULES,
  subresource: { bootstrap: 'kubebootnodeclient', node: 'kubebootselfnodeclient' },
  node: 'subject',
  enabled: (policy) => policy.kubeletClient?.enabled === true,
  recognizes: (csr) =>
    csr.signerName === KUBELET_CLIENT_SIGNER &&
    (fromNode(csr) || csr.username.startsWith(BOOTSTRAP_USER_PREFIX) || csr.groups.includes(BOOTSTRAPPERS_GROUP) || forNode(csr)),
};
