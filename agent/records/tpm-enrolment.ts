/**
 * The AK enrolled from an EK: the record `tpmenrolments.kubeboot.io/<node>`
 * (records/kinds.ts) for a name whose inventory entry carries `tpm-ek` and
 * no `tpm-ak`. The approver writes it, always on the resourceVersion read
 * (or by a create, which a 409 refuses), so two approvers never enrol two
 * AKs:
 *
 * - each challenge it sends adds {akName, digest, csrUID, at} (at: the
 *   asking CSR's creationTimestamp, the API server's clock); at most
 *   MAX_CHALLENGES are kept, the oldest dropped first, and one older than
 *   CHALLENGE_TTL_SECONDS is never answered. A challenge asked with a software
 *   AK only adds an entry that is never answered: it cannot lock the name;
 * - the first CSR that answers one (its credential's digest, for the AK that
 *   quotes in that CSR) sets akName, once. From then on that AK, and only
 *   it, must quote in every kubelet client CSR of the name, exactly as an
 *   admin-enrolled `tpm-ak`.
 *
 * A record made for another EK than the inventory's `tpm-ek` (the admin
 * enrolled a new mainboard) is stale: read as none, and written over.
 *
 * Pure: parsing and the records to write. The requests are the callers'.
 */
import { newRecord, recordRef, type ChallengeEntry, type TpmEnrolmentObject } from './kinds.js';
import { TPM_AK, TPM_EK } from './inventory.js';

/** At most this many challenges are kept per name: a flood of them drops the oldest, and the node asks again. */
export const MAX_CHALLENGES = 8;
/** A challenge is answered within this many seconds of the CSR that asked for it (a node answers within seconds). */
export const CHALLENGE_TTL_SECONDS = 600;

export function enrolmentRef(node: string): string {
  return recordRef('tpmenrolments', node);
}

export interface PendingChallenge {
  akName: string;
  digest: string;
  csrUid: string;
  /** RFC 3339: the asking CSR's creationTimestamp. */
  at: string;
}

export interface TpmEnrolment {
  ekHash: string;
  /** The AK enrolled, or null while none is. */
  akName: string | null;
  /** The CSR that enrolled it. */
  enrolledBy: string | null;
  challenges: PendingChallenge[];
}

const DIGEST = /^[0-9a-f]{64}$/;

/** The record's enrolment for the EK `ekHash`, null when it is for another EK (stale), or why it cannot be trusted. */
export function enrolmentOf(object: TpmEnrolmentObject, ekHash: string): TpmEnrolment | null | { problem: string } {
  const spec = object.spec ?? {};
  const where = enrolmentRef(object.metadata.name);
  if (typeof spec.ekHash !== 'string' || !TPM_EK.test(spec.ekHash)) return { problem: `${where} spec.ekHash is not an EK hash` };
  if (spec.ekHash !== ekHash) return null;
  if (spec.akName !== undefined && !TPM_AK.test(spec.akName)) return { problem: `${where} spec.akName is not an AK name` };
  const challenges: PendingChallenge[] = [];
  for (const c of spec.challenges ?? [])
    if (typeof c?.akName === 'string' && typeof c.digest === 'string' && DIGEST.test(c.digest) && typeof c.at === 'string')
      challenges.push({ akName: c.akName, digest: c.digest, csrUid: c.csrUID ?? '', at: c.at });
  return { ekHash, akName: spec.akName ?? null, enrolledBy: spec.csrUID ?? null, challenges };
}

/** The challenge for this AK whose credential has this digest, asked at most CHALLENGE_TTL_SECONDS before `created`; null when there is none. */
export function answeredChallenge(e: TpmEnrolment, akName: string, digest: string, created: string): PendingChallenge | null {
  const at = Date.parse(created);
  return e.challenges.find((c) => c.akName === akName && c.digest === digest && within(c, at)) ?? null;
}

function within(c: PendingChallenge, at: number): boolean {
  const asked = Date.parse(c.at);
  return !Number.isNaN(asked) && !Number.isNaN(at) && at >= asked && at - asked <= CHALLENGE_TTL_SECONDS * 1000;
}

function entries(challenges: readonly PendingChallenge[]): ChallengeEntry[] {
  return challenges.map((c) => ({ akName: c.akName, digest: c.digest, csrUID: c.csrUid, at: c.at }));
}

/**
 * The record with one more challenge: the one before for the same AK is
 * replaced, those past their time (at the new CSR's creation) dropped, and
 * the oldest beyond MAX_CHALLENGES. `read` is the record as read (null:
 * none, or stale: written over), keeping its metadata for the write.
 */
export function withChallenge(
  node: string,
  read: TpmEnrolmentObject | null,
  current: TpmEnrolment | null,
  ekHash: string,
  c: PendingChallenge,
): TpmEnrolmentObject {
  const at = Date.parse(c.at);
  const kept = (current?.challenges ?? []).filter((o) => o.akName !== c.akName && within(o, at));
  return record(node, read, { ekHash, challenges: entries([...kept, c].slice(-MAX_CHALLENGES)) });
}

/** The record with `akName` enrolled by the CSR `csrUid`: written once, the challenges then spent. */
export function withEnrolledAk(node: string, read: TpmEnrolmentObject, ekHash: string, akName: string, csrUid: string): TpmEnrolmentObject {
  return record(node, read, { ekHash, akName, csrUID: csrUid, challenges: [] });
}

function record(node: string, read: TpmEnrolmentObject | null, spec: NonNullable<TpmEnrolmentObject['spec']>): TpmEnrolmentObject {
  const fresh = newRecord('tpmenrolments', node, { spec });
  return read === null ? fresh : { ...fresh, metadata: { ...read.metadata } };
}
