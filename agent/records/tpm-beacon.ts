/**
 * The freshness beacon: `tpmbeacons.kubeboot.io/kubeboot` (records/kinds.ts),
 * 32 random bytes the approver's leader publishes and replaces every
 * ROTATE_SECONDS, keeping the one before it. A node reads it before each
 * quote and binds it into the quote's qualifying data
 * (tpm/csr-evidence.ts); the approver accepts only the two beacons the
 * record holds. So a quote can be made no earlier than the beacon it binds
 * was published, and it is useless once two rotations have passed: root on
 * a node for an hour cannot leave behind quotes for next month's CSRs (the
 * time window alone could not stop that: the node chooses it).
 *
 * The beacon is not a secret: every node and bootstrap token may get it
 * (knowing it only lets a TPM quote now). Who may write it is who may write
 * kubeboot.io records cluster-wide: the admin, and the approver.
 *
 * Pure: reading the record and the one to write. The requests are the callers'.
 */
import { newRecord, recordRef, type TpmBeaconObject } from './kinds.js';

/** The one beacon record. */
export const BEACON_NAME = 'kubeboot';
export const BEACON_REF = recordRef('tpmbeacons', BEACON_NAME);
/** How often the leader publishes a new beacon: a quote stays good for one to two of these. */
export const ROTATE_SECONDS = 300;
/** The beacons a record keeps: the current one and the one before it, for a quote made just before a rotation. */
const KEPT = 2;
export const BEACON_BYTES = 32;
const BASE64_32 = /^[A-Za-z0-9+/]{43}=$/;

/** The beacons a quote may bind now, newest first (none when there is no record), or why the record cannot be read. */
export type AcceptedBeacons = readonly Buffer[] | { problem: string };

/** The beacons a quote may bind now, newest first: none when there is no record, or a problem when it cannot be read. */
export function acceptedBeacons(record: TpmBeaconObject | null): AcceptedBeacons {
  if (record === null) return [];
  const entries = record.spec?.beacons;
  if (!Array.isArray(entries) || entries.length === 0 || entries.length > KEPT)
    return { problem: `${BEACON_REF} spec.beacons does not hold one or two beacons` };
  const values: Buffer[] = [];
  for (const [i, entry] of entries.entries()) {
    if (typeof entry?.value !== 'string' || !BASE64_32.test(entry.value))
      return { problem: `${BEACON_REF} spec.beacons[${i}].value is not ${BEACON_BYTES} bytes of base64` };
    values.push(Buffer.from(entry.value, 'base64'));
  }
  return values;
}

/** When the newest beacon was published, or null when the record has none that reads. */
function newestPublished(record: TpmBeaconObject): number | null {
  const at = Date.parse(record.spec?.beacons?.[0]?.published ?? '');
  return Number.isNaN(at) ? null : at;
}

/**
 * Milliseconds until the record is due to rotate, 0 when it is due now: it
 * is missing or unreadable, or its newest beacon is ROTATE_SECONDS old, or
 * dated in the future by more than that (a clock that jumped back).
 */
export function rotationDueIn(record: TpmBeaconObject | null, now: Date): number {
  if (record === null || 'problem' in acceptedBeacons(record)) return 0;
  const published = newestPublished(record);
  if (published === null) return 0;
  const age = now.getTime() - published;
  if (age < -ROTATE_SECONDS * 1000) return 0;
  return Math.max(0, ROTATE_SECONDS * 1000 - age);
}

/**
 * The record with `fresh` published now as the newest beacon and the
 * current one kept behind it (an unreadable record is replaced whole).
 */
export function rotatedBeacon(record: TpmBeaconObject | null, fresh: Buffer, now: Date): TpmBeaconObject {
  if (fresh.length !== BEACON_BYTES) throw new Error(`a beacon is ${BEACON_BYTES} bytes, not ${fresh.length}`);
  const entry = { value: fresh.toString('base64'), published: now.toISOString() };
  const current = record === null || 'problem' in acceptedBeacons(record) ? undefined : record.spec?.beacons?.[0];
  return newRecord('tpmbeacons', BEACON_NAME, {
    spec: { beacons: current === undefined ? [entry] : [entry, { value: current.value!, published: current.published ?? '' }] },
  });
}
