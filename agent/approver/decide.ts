/**
 * One decision about one CSR: recognise it, look up what the rules need,
 * run the rules, then ask the API server whether the requester may have
 * this kind of certificate (a SubjectAccessReview, as kube-controller-
 * manager's csrapproving controller does). An approval of a bootstrap
 * token's kubelet client CSR carries what it spends (the claims the caller
 * writes first). The lookups are injected, so the whole decision runs in
 * unit tests without a cluster.
 */
import { KubebootError } from '../errors.js';
import {
  bindingName,
  ISSUED_ANNOTATION,
  parseBinding,
  parseReplacements,
  parseRevocations,
  REPLACEMENTS,
  REVOCATIONS,
  type Replacement,
  type Revocation,
  type TokenBinding,
} from '../kube/join-bindings.js';
import { INVENTORY, inventoryEntry, type InventoryLookup } from '../kube/inventory.js';
import type { Claim, RecordConfigMap } from './api.js';
import type { ApiServerFacts } from './apiserver.js';
import { blocks, csrFacts, isSettled, type ApproverCsr } from './csr-facts.js';
import {
  applicable,
  AUTHORIZED_RULE,
  evaluate,
  nodeNameFor,
  POLICIES,
  readsWorld,
  recognize,
  requesterKind,
  subresourceFor,
  tokenIdOf,
  type ApproverPolicy,
  type CsrFacts,
  type NodeRecords,
  type PolicyName,
  type World,
} from './policy.js';
import { requestFacts, type RequestFacts } from './request.js';
import { oversizedRequestProblem } from './retain.js';

export type Decision =
  | { kind: 'ignore'; why: 'not-ours' | 'settled' }
  /** `claims`: to be written, in order, before the approval (empty but for a bootstrap token's kubelet client CSR). */
  | { kind: 'approve'; policy: PolicyName; message: string; claims: Claim[] }
  | { kind: 'violation'; policy: PolicyName; rule: string; message: string };

export interface Lookups {
  node(name: string): Promise<World['node']>;
  /** SubjectAccessReview as the CSR's requester for `create certificatesigningrequests/<subresource>`. */
  allowed(csr: ApproverCsr, subresource: string): Promise<boolean>;
  /** The CSRs the informer knows of the same requester and signer, for the one-unissued-per-node rule. */
  sameRequester(csr: ApproverCsr): Iterable<ApproverCsr>;
  /** The API server's names and addresses (apiserver.ts), for the serving and kubelet client rules. */
  apiServer(): Promise<ApiServerFacts>;
  /** A record of agent/kube/join-bindings.ts, `kubeboot/<name>`, or null when there is none. */
  record(name: string): Promise<RecordConfigMap | null>;
}

/** The records, parsed for the rules, and the ConfigMaps they came from (for the claims). */
interface ReadRecords {
  records: NodeRecords;
  binding: RecordConfigMap | null;
  replacements: RecordConfigMap | null;
}

/*
 * Each record parsed once per ConfigMap object, not once per CSR: a batch's
 * view (batch.ts) hands every decision the same object until a spend replaces
 * it, and a spend of a binding hands on its parse with the one name added
 * (spentBindings), so a pool's binding is parsed once per batch however many
 * of its CSRs the batch judges. A record is never changed in place (a spend
 * makes a new object), so a parse kept for an object stays true of it.
 */
const bindings = new WeakMap<RecordConfigMap, { tokenId: string; parsed: TokenBinding | { problem: string } }>();
const replacementsOf = new WeakMap<RecordConfigMap, Map<string, Replacement>>();
const revocationsOf = new WeakMap<RecordConfigMap, Map<string, Revocation>>();
/** The binding as a claim leaves it, by claim: RecordView.spend hands it to the ConfigMap it makes (carrySpentBinding). */
const spentBindings = new WeakMap<Claim, { tokenId: string; parsed: TokenBinding }>();

function parsedBinding(tokenId: string, cm: RecordConfigMap): TokenBinding | { problem: string } {
  const kept = bindings.get(cm);
  if (kept !== undefined && kept.tokenId === tokenId) return kept.parsed;
  const parsed = parseBinding(tokenId, cm);
  bindings.set(cm, { tokenId, parsed });
  return parsed;
}

function parsedOnce<T>(
  kept: WeakMap<RecordConfigMap, Map<string, T>>,
  cm: RecordConfigMap | null,
  parse: (data: Record<string, string> | undefined) => Map<string, T>,
): Map<string, T> {
  if (cm === null) return parse(undefined);
  let parsed = kept.get(cm);
  if (parsed === undefined) kept.set(cm, (parsed = parse(cm.data)));
  return parsed;
}

/**
 * `after` is the ConfigMap `claim` made of the record (its patch applied):
 * the binding's parse with the claim's name added is kept for it, so the next
 * decision does not parse the whole issued map again.
 */
export function carrySpentBinding(claim: Claim, after: RecordConfigMap): void {
  const spent = spentBindings.get(claim);
  if (spent !== undefined) bindings.set(after, spent);
}

/** Plain GETs, each only when a rule of this requester reads it: no informer for them yet. */
async function readRecords(facts: CsrFacts, nodeName: string, nodeExists: boolean, lookups: Lookups): Promise<ReadRecords> {
  const tokenId = tokenIdOf(facts.username);
  if (requesterKind(facts) === 'bootstrap' && tokenId !== null) {
    const binding = await lookups.record(bindingName(tokenId));
    const replacements = nodeExists ? await lookups.record(REPLACEMENTS) : null;
    // A revoked name is not re-joined by a new token either, until `kubeboot node unrevoke`.
    const revocations = await lookups.record(REVOCATIONS);
    return {
      records: {
        binding: binding === null ? null : parsedBinding(tokenId, binding),
        replacement: parsedOnce(replacementsOf, replacements, parseReplacements).get(nodeName) ?? null,
        revocation: parsedOnce(revocationsOf, revocations, parseRevocations).get(nodeName) ?? null,
      },
      binding,
      replacements,
    };
  }
  const revocations = await lookups.record(REVOCATIONS);
  return {
    records: {
      binding: null,
      replacement: null,
      revocation: parsedOnce(revocationsOf, revocations, parseRevocations).get(nodeName) ?? null,
    },
    binding: null,
    replacements: null,
  };
}

function versionOf(cm: RecordConfigMap): string {
  const rv = cm.metadata.resourceVersion;
  // Without it the write would be unconditional, and two approvers could both spend the last name.
  if (!rv) throw new KubebootError(`ConfigMap ${cm.metadata.name} came without a resourceVersion; nothing is spent without one`);
  return rv;
}

/**
 * What approving this CSR spends, unless it is already spent on it (the same
 * CSR decided again after a failed approval write): the token's name, and
 * the replacement mark of the Node it takes over.
 */
function claimsOf(facts: CsrFacts, nodeName: string, read: ReadRecords): Claim[] {
  const claims: Claim[] = [];
  const { binding, replacement } = read.records;
  if (read.binding !== null && binding !== null && !('problem' in binding) && binding.issued[nodeName] !== facts.uid) {
    const after = { ...binding.issued, [nodeName]: facts.uid };
    const claim: Claim = {
      name: read.binding.metadata.name,
      resourceVersion: versionOf(read.binding),
      patch: { metadata: { annotations: { [ISSUED_ANNOTATION]: JSON.stringify(after) } } },
    };
    spentBindings.set(claim, { tokenId: binding.tokenId, parsed: { ...binding, issued: after } });
    claims.push(claim);
  }
  const mark = read.replacements?.data?.[nodeName];
  if (read.replacements !== null && mark !== undefined && replacement !== null && replacement.claimedBy !== facts.uid) {
    const claimed = JSON.stringify({ ...(JSON.parse(mark) as object), claimedBy: facts.uid });
    claims.push({ name: REPLACEMENTS, resourceVersion: versionOf(read.replacements), patch: { data: { [nodeName]: claimed } } });
  }
  return claims;
}

/** With --inventory, the node's entry for the kubelet client and serving rules; one GET of `kubeboot/inventory` per CSR. */
async function readInventory(
  policyName: PolicyName,
  nodeName: string | null,
  policy: ApproverPolicy,
  lookups: Lookups,
): Promise<InventoryLookup | null> {
  if (policy.inventory !== true || policyName === 'kube-proxy-client' || nodeName === null) return null;
  const cm = await lookups.record(INVENTORY);
  return cm === null ? { found: false } : { found: true, entry: inventoryEntry(cm.data, nodeName) };
}

export { AUTHORIZED_RULE } from './policy.js';

/** The request's facts, or why there are none (a violation of the request rule). */
export async function parsedRequest(csr: ApproverCsr): Promise<RequestFacts | string> {
  if (csr.oversizedRequest) return oversizedRequestProblem(csr.oversizedRequest.bytes);
  try {
    return await requestFacts(csr.spec.request);
  } catch (err) {
    return err instanceof KubebootError ? err.message : 'spec.request is not a PEM certificate request';
  }
}

/**
 * For recognition alone (it reads only the CN): the CN retain.ts kept of a
 * request too large to keep, so such a CSR is ours exactly when it would
 * have been, and reported under the rule it breaks.
 */
function keptSubject(csr: ApproverCsr): RequestFacts | null {
  const commonName = csr.oversizedRequest?.commonName;
  if (commonName == null) return null;
  const none: string[] = [];
  return {
    subject: { commonName, organizations: none },
    dnsNames: none,
    ipAddresses: none,
    emailAddresses: none,
    uris: none,
    otherNames: none,
    key: { kind: 'other', type: 'unread' },
    signatureValid: false,
  };
}

/** What a CSR is, read from it alone (its request parsed): what the look-ups are for, before any is made. */
export interface Prepared {
  csr: ApproverCsr;
  facts: CsrFacts;
  policyName: PolicyName;
  /** The node the certificate is for (RuleInput.nodeName). */
  nodeName: string | null;
  /** Whether a rule that runs reads the Node (so it is looked up). */
  readsNode: boolean;
  /** The SubjectAccessReview asked once every rule has passed. */
  subresource: string;
}

/**
 * Recognises the CSR and reads its request, making no look-up: a CSR none
 * of the approver's business, or settled, is the `ignore` decision. `request`
 * is the parsed spec.request (the caller may keep it per CSR; the request of
 * a CSR never changes).
 */
export async function prepare(
  csr: ApproverCsr,
  policy: ApproverPolicy,
  request: (csr: ApproverCsr) => Promise<RequestFacts | string> = parsedRequest,
): Promise<Prepared | Extract<Decision, { kind: 'ignore' }>> {
  // Settled first: it is cheap, and most watch events are for CSRs already decided.
  if (isSettled(csr)) return { kind: 'ignore', why: 'settled' };
  const facts = csrFacts(csr, await request(csr));
  const policyName = recognize({ ...facts, request: facts.request ?? keptSubject(csr) }, policy);
  if (policyName === null) return { kind: 'ignore', why: 'not-ours' };
  const spec = POLICIES[policyName];
  const nodeName = nodeNameFor(spec, facts);
  return {
    csr,
    facts,
    policyName,
    nodeName,
    readsNode: nodeName !== null && readsWorld(spec.rules, facts, policy, 'node'),
    subresource: subresourceFor(spec, facts),
  };
}

/**
 * Whether approving it may spend a record (a bootstrap token's kubelet client
 * CSR: the token's name, a replacement mark): such CSRs of a batch are judged
 * one after another (batch.ts), each on the records the one before spent.
 */
export function spendsRecords(prepared: Prepared): boolean {
  return prepared.policyName === 'kubelet-client' && requesterKind(prepared.facts) === 'bootstrap';
}

/** The look-ups, the rules and the SubjectAccessReview for a prepared CSR. */
export async function judge(prepared: Prepared, policy: ApproverPolicy, lookups: Lookups): Promise<Decision> {
  const { csr, facts, policyName, nodeName, subresource } = prepared;
  const spec = POLICIES[policyName];
  // Only a rule that runs reads the Node (a renewal's rules do not): no GET for the others.
  const node = prepared.readsNode && nodeName !== null ? await lookups.node(nodeName) : null;
  // Read only when the rules that need them can be reached: a requester of neither kind fails first,
  // and not-revoked reads a node's revocation whatever it asks for (the other policies: a node only).
  const kind = requesterKind(facts);
  const read =
    nodeName !== null && (policyName === 'kubelet-client' ? kind !== null : kind === 'node')
      ? await readRecords(facts, nodeName, node !== null, lookups)
      : null;
  const world: World = {
    node,
    blocking: readsWorld(spec.rules, facts, policy, 'blocking')
      ? [...lookups.sameRequester(csr)].filter((other) => blocks(other, csr)).map((other) => other.metadata.name)
      : [],
    apiServer: policyName !== 'kube-proxy-client' ? await lookups.apiServer() : null,
    records: read?.records ?? null,
    inventory: await readInventory(policyName, nodeName, policy, lookups),
  };
  const verdict = evaluate(spec.rules, { csr: facts, nodeName, world, policy });
  if (!verdict.ok)
    return { kind: 'violation', policy: policyName, rule: verdict.rule, message: `${policyName} rule ${verdict.rule}: ${verdict.problem}` };
  if (!(await lookups.allowed(csr, subresource))) {
    return {
      kind: 'violation',
      policy: policyName,
      rule: AUTHORIZED_RULE,
      message: `${policyName} rule ${AUTHORIZED_RULE}: SubjectAccessReview denies ${facts.username} create certificatesigningrequests/${subresource} (grant it with RBAC)`,
    };
  }
  return {
    kind: 'approve',
    policy: policyName,
    message: `${policyName}: every rule passed (${applicable(spec.rules, facts, policy)
      .map((r) => r.name)
      .join(', ')}) and ${facts.username} may create certificatesigningrequests/${subresource}`,
    claims: read !== null && nodeName !== null ? claimsOf(facts, nodeName, read) : [],
  };
}

export async function decide(csr: ApproverCsr, policy: ApproverPolicy, lookups: Lookups): Promise<Decision> {
  const prepared = await prepare(csr, policy);
  return 'kind' in prepared ? prepared : judge(prepared, policy, lookups);
}
