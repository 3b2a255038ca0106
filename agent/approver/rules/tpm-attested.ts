/**
 * The rule tpm-attested (kubelet client, with --inventory): a name whose
 * inventory entry carries a TPM identity (`tpm-ak`, `tpm-ek`:
 * records/inventory.ts) is issued, first issue and renewal alike, only on a
 * CSR whose spec.request carries a KUBEBOOT TPM EVIDENCE block: a quote by
 * the enrolled AK over this CSR's subject, key, creation window and one of
 * the two beacons the approver accepts now (tpm/csr-evidence.ts,
 * records/tpm-beacon.ts). Everything is recomputed from the CSR, the entry
 * and, for a name enrolled by its EK alone, its TpmEnrolment record
 * (records/tpm-enrolment.ts): once that holds an AK, it is the enrolled AK;
 * until then a CSR whose evidence carries that EK and a valid quote is
 * answered with a credential challenge (tpm/challenge.ts), and the CSR
 * answering it with a quote by the AK challenged enrols that AK when it is
 * approved. Pure: what to write is the decision's (decide.ts).
 */
import { INVENTORY_REF, tpmBinding, type InventoryEntry } from '../../records/inventory.js';
import type { TpmEnrolmentObject } from '../../records/kinds.js';
import { acceptedBeacons, BEACON_REF, ROTATE_SECONDS, type AcceptedBeacons } from '../../records/tpm-beacon.js';
import { answeredChallenge, CHALLENGE_TTL_SECONDS, enrolmentOf, enrolmentRef, type TpmEnrolment } from '../../records/tpm-enrolment.js';
import { credentialDigest } from '../../tpm/challenge.js';
import { TPM_ALG } from '../../tpm/constants.js';
import { EVIDENCE_PEM_TYPE, verifyCsrEvidence, WINDOW_SECONDS, type CsrEvidence } from '../../tpm/csr-evidence.js';
import { pcr7PolicyFor, pcr7Problem, type Pcr7Policy } from '../../tpm/pcr-policy.js';
import type { TpmtPublic } from '../../tpm/structures.js';
import { ekPublicKeyHash, EvidenceError, tpmName } from '../../tpm/verify.js';
import type { Rule, RuleInput } from './rule.js';
import type { RequestFacts } from '../request.js';

export const TPM_ATTESTED_RULE = 'tpm-attested';

/** What tpm-attested makes of a CSR: pass or refuse, or (a name enrolled by its EK alone) challenge it, or enrol its AK with the approval. */
export type TpmVerdict =
  /** `pcrValues`: the quoted PCRs (EVIDENCE_PCRS order) of the evidence verified, reported with the approval; absent for a name that is not TPM-bound. */
  | { kind: 'pass'; pcrValues?: readonly Buffer[] }
  | { kind: 'refuse'; problem: string }
  /** No AK enrolled for the EK yet: the CSR is denied with a challenge for this EK and AK. `current`: the record's enrolment as read. */
  | {
      kind: 'challenge';
      problem: string;
      ekPublic: TpmtPublic;
      akName: Buffer;
      ekHash: string;
      current: TpmEnrolment | null;
      pcrValues: readonly Buffer[];
    }
  /** The CSR answered a challenge with a quote by the AK challenged: approving it enrols that AK. */
  | { kind: 'enrol'; akName: string; ekHash: string; pcrValues: readonly Buffer[] };

const PASS: TpmVerdict = { kind: 'pass' };
const refuse = (problem: string): TpmVerdict => ({ kind: 'refuse', problem });

type Request = Pick<RequestFacts, 'binding' | 'tpmEvidence'>;

/** What a CSR's evidence is checked against besides itself: the beacons the approver accepts now (acceptedBeacons). */
type Beacons = readonly Buffer[];

/** Why this CSR of a TPM-bound name is refused, or null (approved by this rule; a name with no TPM identity always is). */
export function tpmAttestedProblem(
  entry: InventoryEntry,
  request: Request,
  created: string | undefined,
  beacons: AcceptedBeacons,
  enrolment: TpmEnrolmentObject | null = null,
): string | null {
  const verdict = tpmVerdict(entry, request, created, beacons, enrolment);
  return verdict.kind === 'refuse' || verdict.kind === 'challenge' ? verdict.problem : null;
}

function noEvidence(name: string, bound: string): string {
  return `node ${name} is TPM-bound (${bound}) and this CSR carries no ${EVIDENCE_PEM_TYPE}: only kubeboot with --tpm on that machine files such CSRs (the kubelet's own rotateCertificates CSRs carry none; let kubeboot renew)`;
}

/** The evidence verified for this CSR (by `akName`, or null: its own AK), or why not. */
function verified(request: Request, created: string | undefined, beacons: Beacons, akName: Buffer | null): CsrEvidence | string {
  const at = Date.parse(created ?? '');
  if (Number.isNaN(at)) return 'the CSR has no creationTimestamp to judge its evidence window by';
  try {
    return verifyCsrEvidence(request.tpmEvidence!, { binding: request.binding!, akName, created: new Date(at), beacons });
  } catch (err) {
    if (err instanceof EvidenceError)
      return `the TPM evidence is refused (${err.message}${err.reason === 'beacon' ? `; ${BEACON_REF}` : ''})`;
    throw err;
  }
}

/** A verdict that passes, enrols or challenges refused when its quoted PCR 7 is not one the name's pool allows (--tpm-pcr7). */
function withinPcrPolicy(verdict: TpmVerdict, name: string, pcr7: Pcr7Policy | null): TpmVerdict {
  // A machine outside the pool's boot state is not worth a challenge either.
  if (verdict.kind === 'refuse') return verdict;
  const problem = verdict.pcrValues === undefined ? null : pcr7Problem(name, verdict.pcrValues, pcr7);
  return problem === null ? verdict : refuse(problem);
}

/** A quote by `akName`, the AK `where` says is enrolled. */
function quotedBy(
  name: string,
  akName: string,
  where: string,
  request: Request,
  created: string | undefined,
  beacons: Beacons,
): TpmVerdict {
  if (request.tpmEvidence == null || request.binding == null) return refuse(noEvidence(name, where));
  const evidence = verified(request, created, beacons, Buffer.from(akName, 'hex'));
  return typeof evidence === 'string'
    ? refuse(`${evidence}; node ${name}'s enrolled AK is ${akName.slice(0, 12)}… (${where})`)
    : { kind: 'pass', pcrValues: evidence.pcrValues };
}

/** The standard RSA EK's encryption, which MakeCredential needs. */
function challengeableEk(ek: TpmtPublic): boolean {
  return ek.type === TPM_ALG.RSA && 'mode' in ek.symmetric && ek.symmetric.alg === TPM_ALG.AES && ek.symmetric.mode === TPM_ALG.CFB;
}

/** The verdict on one CSR of the inventory entry's name (see the header), its quote's PCR 7 within `pcr7` when given. */
export function tpmVerdict(
  entry: InventoryEntry,
  request: Request,
  created: string | undefined,
  beacons: AcceptedBeacons,
  enrolment: TpmEnrolmentObject | null,
  pcr7: Pcr7Policy | null = null,
): TpmVerdict {
  return withinPcrPolicy(quoteVerdict(entry, request, created, beacons, enrolment), entry.name, pcr7);
}

function quoteVerdict(
  entry: InventoryEntry,
  request: Request,
  created: string | undefined,
  accepted: AcceptedBeacons,
  enrolment: TpmEnrolmentObject | null,
): TpmVerdict {
  const name = entry.name;
  const binding = tpmBinding(entry);
  if (binding === 'none') return PASS;
  if ('problem' in accepted) return refuse(`${accepted.problem}: delete it and the approver's leader publishes a new one`);
  const beacons = accepted;
  if (entry.tpmAk !== undefined) return quotedBy(name, entry.tpmAk, `${INVENTORY_REF} key ${name}: tpm-ak`, request, created, beacons);
  const ekHash = entry.tpmEk!;
  const record = enrolment === null ? null : enrolmentOf(enrolment, ekHash);
  if (record !== null && 'problem' in record)
    return refuse(`${record.problem}: delete it and node ${name} is enrolled again from its EK (${INVENTORY_REF} key ${name}: tpm-ek)`);
  if (record?.akName != null)
    return quotedBy(name, record.akName, `its AK was enrolled from its EK: ${enrolmentRef(name)}`, request, created, beacons);
  const bound = `${INVENTORY_REF} key ${name}: tpm-ek alone`;
  if (request.tpmEvidence == null || request.binding == null) return refuse(noEvidence(name, bound));
  const evidence = verified(request, created, beacons, null);
  if (typeof evidence === 'string') return refuse(evidence);
  const ek = evidence.ekPublic;
  if (ek === undefined)
    return refuse(
      `node ${name} is enrolled by its TPM's EK alone (${bound}) and the evidence carries no EK to challenge (kubeboot before enrolment from the EK): enroll the AK too (kubeboot node enroll ${name} --tpm-ak …)`,
    );
  let sent: string;
  try {
    sent = ekPublicKeyHash(ek);
  } catch {
    return refuse('the TPM evidence is refused (format: its EK is not a public key)');
  }
  if (sent !== ekHash)
    return refuse(`the evidence's EK is ${sent.slice(0, 12)}…, not node ${name}'s enrolled ${ekHash.slice(0, 12)}… (${bound})`);
  if (!challengeableEk(ek)) return refuse("the evidence's EK is not an RSA EK with AES-CFB: no credential challenge can be made for it");
  const akName = tpmName(evidence.akPublic);
  const akHex = akName.toString('hex');
  const credential = evidence.credential;
  if (
    credential !== undefined &&
    record !== null &&
    answeredChallenge(record, akHex, credentialDigest(akName, credential), created ?? '') !== null
  )
    return { kind: 'enrol', akName: akHex, ekHash, pcrValues: evidence.pcrValues };
  const why =
    credential === undefined
      ? `its AK ${akHex.slice(0, 12)}… is not enrolled yet`
      : `the credential answered is none sent for AK ${akHex.slice(0, 12)}… within ${CHALLENGE_TTL_SECONDS / 60} minutes`;
  return {
    kind: 'challenge',
    problem: `node ${name} is enrolled by its TPM's EK alone (${bound}) and ${why}: this CSR is denied with a credential challenge for that EK and AK, which kubeboot --tpm answers in a new CSR (${enrolmentRef(name)})`,
    ekPublic: ek,
    akName,
    ekHash,
    current: record,
    pcrValues: evidence.pcrValues,
  };
}

/** One verdict per rule input: the rule's check and the decision that acts on it (decide.ts) read the same one. */
const verdicts = new WeakMap<RuleInput, TpmVerdict>();

/** The verdict for this input, or null when the rule has nothing to judge (no entry to trust: inventory-listed refuses). */
export function tpmVerdictOf(input: RuleInput): TpmVerdict | null {
  const { csr, world } = input;
  const lookup = world.inventory;
  if (lookup == null || !lookup.found || lookup.entry === null || 'problem' in lookup.entry || csr.request === null) return null;
  let verdict = verdicts.get(input);
  if (verdict === undefined) {
    verdict = tpmVerdict(
      lookup.entry,
      csr.request,
      csr.created,
      acceptedBeacons(world.tpmBeacon ?? null),
      world.tpmEnrolment ?? null,
      pcr7PolicyFor(lookup.entry.name, input.policy.tpmPcr7),
    );
    verdicts.set(input, verdict);
  }
  return verdict;
}

/** Its row in KUBELET_CLIENT_RULES (policy.ts). */
export const tpmAttested: Rule = {
  name: TPM_ATTESTED_RULE,
  reads: ['inventory', 'tpmEnrolment', 'tpmBeacon'],
  inventory: 'on',
  summary: `when the node's entry in \`${INVENTORY_REF}\` carries \`tpm-ak\` (\`kubeboot node enroll\`), \`spec.request\` carries a \`${EVIDENCE_PEM_TYPE}\` block after the request: a quote by that AK (restricted, fixedTPM, ECDSA P-256 signing key), its signature valid, over SHA-256 of this CSR's subject, public key, a ${WINDOW_SECONDS / 60}-minute window within one of the CSR's creationTimestamp and the current or previous beacon of \`${BEACON_REF}\` (published by the approver's leader every ${ROTATE_SECONDS / 60} minutes), covering SHA-256 PCRs 0-7 (docs/tpm.md). A name with only \`tpm-ek\`: the AK enrolled from that EK (\`tpmenrolments.kubeboot.io/<n>\`) as if it were \`tpm-ak\`; while none is, a CSR whose evidence carries that EK and a valid quote by its AK passes this rule and, once every other rule and the review pass too, is denied with a credential challenge for that EK and AK (condition reason \`KubebootTpmChallenge\`); the CSR that answers it (the credential, and a quote by the AK challenged, within 10 minutes) enrols that AK, once. With \`--tpm-pcr7 PREFIX=SHA256\`, a TPM-bound name under PREFIX (the longest that matches) must also quote one of its PCR 7 values. Names without either are not checked (and an unlisted name is refused by \`inventory-listed\`)`,
  // A challenge passes here: it is sent only to a CSR every other rule and the review pass (decide.ts).
  check: (input) => {
    const verdict = tpmVerdictOf(input);
    return verdict?.kind === 'refuse' ? verdict.problem : null;
  },
};
