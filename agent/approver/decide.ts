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
  claimRecord,
  nameClaim,
  parseBinding,
  replacementOf,
  revocationOf,
  type NameTaken,
  type Replacement,
  type TokenBinding,
} from '../records/bindings.js';
import { inventoryEntry, type InventoryLookup } from '../records/inventory.js';
import { INVENTORY_NAME, type RecordObjects, type TokenBindingObject } from '../records/kinds.js';
import { legacyBindingName, legacyEntries, unmigrated } from '../records/legacy.js';
import type { Claim } from './api.js';
import type { Lookups } from './lookups.js';
import { blocks, csrFacts, isSettled, type ApproverCsr } from './csr-facts.js';
import { applicable, AUTHORIZED_RULE, evaluate, nodeNameFor, POLICIES, readsWorld, recognize, subresourceFor } from './policy.js';
import {
  requesterKind,
  tokenIdOf,
  type ApproverPolicy,
  type CsrFacts,
  type NodeRecords,
  type PolicyName,
  type World,
  type WorldRead,
} from './rules/rule.js';
import { requestFacts, subjectOnlyFacts, type RequestFacts } from './request.js';
import { oversizedRequestProblem } from './retain.js';

export type Decision =
  | { kind: 'ignore'; why: 'not-ours' | 'settled' }
  /** `claims`: to be written, in order, before the approval (empty but for a bootstrap token's kubelet client CSR). */
  | { kind: 'approve'; policy: PolicyName; message: string; claims: Claim[] }
  | { kind: 'violation'; policy: PolicyName; rule: string; message: string };

/** The records, parsed for the rules, and the objects they came from (for the claims). */
interface ReadRecords {
  records: NodeRecords;
  tokenId: string | null;
  binding: RecordObjects['tokenbindings'] | null;
  claim: RecordObjects['nodeclaims'] | null;
  mark: RecordObjects['nodereplacements'] | null;
}

/*
 * A binding parsed once per object, not once per CSR: a batch's view
 * (batch.ts) hands every decision the same object until a spend replaces it.
 * A record is never changed in place (a spend makes a new object), so a
 * parse kept for an object stays true of it.
 */
const bindings = new WeakMap<TokenBindingObject, TokenBinding | { problem: string }>();

function parsedBinding(tokenId: string, object: TokenBindingObject): TokenBinding | { problem: string } {
  let parsed = bindings.get(object);
  if (parsed === undefined) bindings.set(object, (parsed = parseBinding(tokenId, object)));
  return parsed;
}

/** The mark frees the name for this CSR: bound to its token, unclaimed or claimed by it, and older than the CSR. */
function markFrees(mark: Replacement | null, tokenId: string, facts: CsrFacts): boolean {
  if (mark === null || mark.tokenId !== tokenId || (mark.claimedBy !== null && mark.claimedBy !== facts.uid)) return false;
  return Date.parse(facts.created ?? '') >= Math.floor(Date.parse(mark.at) / 1000) * 1000;
}

/** The node's revocation: its record, or (fail closed) an entry a legacy ConfigMap still holds, refused as unmigrated. */
async function revocationFor(nodeName: string, lookups: Lookups): Promise<NodeRecords['revocation']> {
  const revocation = await lookups.record('noderevocations', nodeName);
  if (revocation !== null) return revocationOf(revocation);
  const legacy = await lookups.legacy('revocations');
  return legacy !== null && legacyEntries(legacy.data).has(nodeName) ? { at: '', reason: unmigrated('revocations') } : null;
}

/** The informer's records, each only when a rule of this requester reads it. */
async function readRecords(facts: CsrFacts, nodeName: string, lookups: Lookups): Promise<ReadRecords> {
  const tokenId = tokenIdOf(facts.username);
  // A revoked name is not re-joined by a new token either, until `kubeboot node unrevoke`.
  const revocation = await revocationFor(nodeName, lookups);
  if (requesterKind(facts) !== 'bootstrap' || tokenId === null)
    return { records: { binding: null, replacement: null, revocation }, tokenId: null, binding: null, claim: null, mark: null };
  const binding = await lookups.record('tokenbindings', bindingName(tokenId));
  const claim = await lookups.record('nodeclaims', nodeName);
  const mark = await lookups.record('nodereplacements', nodeName);
  const replacement = mark === null ? null : replacementOf(mark);
  let parsed: NodeRecords['binding'] = null;
  if (binding !== null) {
    parsed = parsedBinding(tokenId, binding);
    const spent = claim === null ? null : nameClaim(claim);
    const taken: NameTaken | null = spent !== null && spent.csrUid !== facts.uid && !markFrees(replacement, tokenId, facts) ? spent : null;
    if (!('problem' in parsed) && taken !== null) parsed = { ...parsed, nameTaken: taken };
  } else if ((await lookups.legacy(legacyBindingName(tokenId))) !== null) {
    parsed = { problem: unmigrated(legacyBindingName(tokenId)) };
  }
  return { records: { binding: parsed, replacement, revocation }, tokenId, binding, claim, mark };
}

function versionOf(object: { kind: string; metadata: { name: string; resourceVersion?: string } }): string {
  const rv = object.metadata.resourceVersion;
  // Without it the write would be unconditional, and two approvers could both spend the last name.
  if (!rv) throw new KubebootError(`${object.kind} ${object.metadata.name} came without a resourceVersion; nothing is spent without one`);
  return rv;
}

/**
 * What approving this CSR spends, unless it is already spent on it (the same
 * CSR decided again after a failed approval write): the name in the token's
 * binding, the name's claim, and the replacement mark bound to the token.
 * In that order: a binding's count is spent before the name, so a lost race
 * for the name costs the pool one of its count, never a name twice.
 */
function claimsOf(facts: CsrFacts, nodeName: string, read: ReadRecords): Claim[] {
  const claims: Claim[] = [];
  const { binding, replacement } = read.records;
  if (read.binding === null || read.tokenId === null || binding === null || 'problem' in binding) return claims;
  if (binding.issued.get(nodeName) !== facts.uid) {
    const issued = [...binding.issued].map(([node, csrUID]) => ({ node, csrUID }));
    claims.push({
      op: 'status',
      resource: 'tokenbindings',
      name: read.binding.metadata.name,
      resourceVersion: versionOf(read.binding),
      status: { issued: [...issued, { node: nodeName, csrUID: facts.uid }] },
    });
  }
  const object = claimRecord(nodeName, read.tokenId, facts.uid);
  if (read.claim === null) claims.push({ op: 'create', resource: 'nodeclaims', name: nodeName, object });
  else if (read.claim.spec?.csrUID !== facts.uid)
    claims.push({
      op: 'replace',
      resource: 'nodeclaims',
      name: nodeName,
      resourceVersion: versionOf(read.claim),
      object: { ...object, metadata: { ...read.claim.metadata } },
    });
  if (read.mark !== null && replacement !== null && replacement.tokenId === read.tokenId && replacement.claimedBy !== facts.uid)
    claims.push({
      op: 'status',
      resource: 'nodereplacements',
      name: nodeName,
      resourceVersion: versionOf(read.mark),
      status: { claimedBy: facts.uid },
    });
  return claims;
}

/** With --inventory, the node's entry for the kubelet client and serving rules (a legacy ConfigMap is named, never read as one). */
async function readInventory(nodeName: string, lookups: Lookups): Promise<InventoryLookup> {
  const inventory = await lookups.record('inventories', INVENTORY_NAME);
  if (inventory !== null) return { found: true, entry: inventoryEntry(inventory.spec?.nodes, nodeName) };
  return (await lookups.legacy('inventory')) === null ? { found: false } : { found: false, legacy: unmigrated('inventory') };
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
  return commonName == null ? null : subjectOnlyFacts(commonName);
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
  // Each look-up only when a rule that runs for this CSR declares it (a renewal's rules read no Node: no GET).
  const reads = (what: WorldRead) => readsWorld(spec.rules, facts, policy, what);
  const node = prepared.readsNode && nodeName !== null ? await lookups.node(nodeName) : null;
  // A requester of neither kind fails before any rule that reads the records.
  const read = nodeName !== null && requesterKind(facts) !== null && reads('records') ? await readRecords(facts, nodeName, lookups) : null;
  const world: World = {
    node,
    blocking: reads('blocking')
      ? [...lookups.sameRequester(csr)].filter((other) => blocks(other, csr)).map((other) => other.metadata.name)
      : [],
    apiServer: reads('apiServer') ? await lookups.apiServer() : null,
    records: read?.records ?? null,
    inventory: nodeName !== null && reads('inventory') ? await readInventory(nodeName, lookups) : null,
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
