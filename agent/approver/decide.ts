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
import { tpmBinding } from '../records/inventory.js';
import type { TpmEnrolmentObject } from '../records/kinds.js';
import { withChallenge, withEnrolledAk } from '../records/tpm-enrolment.js';
import { BEACON_NAME } from '../records/tpm-beacon.js';
import { challengeMessage, makeChallenge } from '../tpm/challenge.js';
import { pcrReport } from '../tpm/csr-evidence.js';
import { TPM_ATTESTED_RULE, tpmVerdictOf, type TpmVerdict } from './rules/tpm-attested.js';

export type Decision =
  | { kind: 'ignore'; why: 'not-ours' | 'settled' }
  /** `claims`: to be written, in order, before the approval (empty but for a bootstrap token's kubelet client CSR). */
  /** `pcrValues`: the PCRs of the TPM quote tpm-attested verified (EVIDENCE_PCRS order), reported with the approval. */
  | { kind: 'approve'; policy: PolicyName; message: string; claims: Claim[]; pcrValues?: readonly Buffer[] }
  | { kind: 'violation'; policy: PolicyName; rule: string; message: string }
  /**
   * A CSR that passed every rule but is from a TPM whose AK is not enrolled
   * yet (rules/tpm-attested.ts): denied with a credential challenge in its
   * condition's `message`, once `claims` (the challenge kept) are written.
   */
  | { kind: 'challenge'; policy: PolicyName; rule: string; problem: string; message: string; claims: Claim[] };

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
  if (prepared.policyName !== 'kubelet-client') return false;
  // TPM evidence may challenge, or enrol an AK: a TpmEnrolment written (rules/tpm-attested.ts).
  return requesterKind(prepared.facts) === 'bootstrap' || prepared.facts.request?.tpmEvidence != null;
}

/** A record written whole: created when it was not read (or was made in this batch), else replaced on the version read. */
function wholeClaim(name: string, object: TpmEnrolmentObject): Claim {
  const rv = object.metadata.resourceVersion;
  return rv
    ? { op: 'replace', resource: 'tpmenrolments', name, resourceVersion: rv, object }
    : { op: 'create', resource: 'tpmenrolments', name, object };
}

/** The challenge for a CSR tpm-attested challenges: made now, its digest kept in the name's TpmEnrolment before the CSR is denied with it. */
function challenge(
  policyName: PolicyName,
  facts: CsrFacts,
  nodeName: string,
  verdict: Extract<TpmVerdict, { kind: 'challenge' }>,
  read: TpmEnrolmentObject | null,
): Decision {
  const made = makeChallenge(verdict.ekPublic, verdict.akName);
  const entry = { akName: verdict.akName.toString('hex'), digest: made.digest, csrUid: facts.uid, at: facts.created ?? '' };
  return {
    kind: 'challenge',
    policy: policyName,
    rule: TPM_ATTESTED_RULE,
    problem: verdict.problem,
    message: challengeMessage(`${policyName} rule ${TPM_ATTESTED_RULE}: ${verdict.problem}`, made.blob),
    claims: [wholeClaim(nodeName, withChallenge(nodeName, read, verdict.current, verdict.ekHash, entry))],
  };
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
  const inventory = nodeName !== null && reads('inventory') ? await readInventory(nodeName, lookups) : null;
  // The enrolment record only for a name enrolled by its EK alone: no other CSR reads it.
  const binding =
    inventory?.found === true && inventory.entry !== null && !('problem' in inventory.entry) ? tpmBinding(inventory.entry) : 'none';
  const ekOnly = binding === 'ek-only';
  const tpmBound = binding !== 'none';
  const world: World = {
    node,
    blocking: reads('blocking')
      ? [...lookups.sameRequester(csr)].filter((other) => blocks(other, csr)).map((other) => other.metadata.name)
      : [],
    apiServer: reads('apiServer') ? await lookups.apiServer() : null,
    records: read?.records ?? null,
    inventory,
    tpmEnrolment: nodeName !== null && ekOnly && reads('tpmEnrolment') ? await lookups.record('tpmenrolments', nodeName) : null,
    // The beacon only for a TPM-bound name: no other CSR's evidence is checked.
    tpmBeacon: tpmBound && reads('tpmBeacon') ? await lookups.record('tpmbeacons', BEACON_NAME) : null,
  };
  const input = { csr: facts, nodeName, world, policy };
  const verdict = evaluate(spec.rules, input);
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
  const tpm = nodeName !== null && world.inventory != null ? tpmVerdictOf(input) : null;
  if (tpm?.kind === 'challenge') return challenge(policyName, facts, nodeName!, tpm, world.tpmEnrolment ?? null);
  const claims = read !== null && nodeName !== null ? claimsOf(facts, nodeName, read) : [];
  // Last, after the name's: a lost race for the name leaves the AK enrolled, which is that TPM's AK all the same.
  if (tpm?.kind === 'enrol' && world.tpmEnrolment != null)
    claims.push(wholeClaim(nodeName!, withEnrolledAk(nodeName!, world.tpmEnrolment, tpm.ekHash, tpm.akName, facts.uid)));
  const pcrValues = tpm?.kind === 'pass' || tpm?.kind === 'enrol' ? tpm.pcrValues : undefined;
  // The quoted PCRs on the approval itself: where an admin reads a node's boot state, and writes a PCR policy from.
  const quoted = pcrValues === undefined ? '' : `; its TPM quoted SHA-256 PCRs ${pcrReport(pcrValues)}`;
  return {
    kind: 'approve',
    policy: policyName,
    message: `${policyName}: every rule passed (${applicable(spec.rules, facts, policy)
      .map((r) => r.name)
      .join(', ')}) and ${facts.username} may create certificatesigningrequests/${subresource}${quoted}`,
    claims,
    ...(pcrValues === undefined ? {} : { pcrValues }),
  };
}

export async function decide(csr: ApproverCsr, policy: ApproverPolicy, lookups: Lookups): Promise<Decision> {
  const prepared = await prepare(csr, policy);
  return 'kind' in prepared ? prepared : judge(prepared, policy, lookups);
}
