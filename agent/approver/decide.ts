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
import type { Claim } from './api.js';
import type { Lookups } from './lookups.js';
import { claimsOf, readInventory, readRecords } from './node-records.js';
import { blocks, csrFacts, isSettled, type ApproverCsr } from './csr-facts.js';
import { applicable, AUTHORIZED_RULE, evaluate, nodeNameFor, POLICIES, readsWorld, recognize, subresourceFor } from './policy.js';
import { requesterKind, type ApproverPolicy, type CsrFacts, type PolicyName, type World, type WorldRead } from './rules/rule.js';
import { requestFacts, subjectOnlyFacts, type RequestFacts } from './request.js';
import { oversizedRequestProblem } from './retain.js';

export type Decision =
  | { kind: 'ignore'; why: 'not-ours' | 'settled' }
  /** `claims`: to be written, in order, before the approval (empty but for a bootstrap token's kubelet client CSR). */
  | { kind: 'approve'; policy: PolicyName; message: string; claims: Claim[] }
  | { kind: 'violation'; policy: PolicyName; rule: string; message: string };

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
