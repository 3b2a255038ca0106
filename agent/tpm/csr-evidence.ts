/**
 * TPM evidence in a kubelet client CSR: a quote by the machine's AK,
 * carried as one PEM block `KUBEBOOT TPM EVIDENCE` after the CERTIFICATE
 * REQUEST in spec.request. kube-apiserver and kube-controller-manager's
 * signer read only the first PEM block and keep the rest unchanged
 * (test/e2e/approver.test.ts), as GKE's approver relies on for its own
 * blocks (kubernetes/cloud-provider-gcp cmd/gke-exec-auth-plugin/tpm.go).
 *
 * The quote's qualifying data binds the evidence to its CSR:
 *
 *   SHA-256( "kubeboot kubelet-client CSR v2\0"
 *            ‖ u32 len ‖ subject Name DER ‖ u32 len ‖ SubjectPublicKeyInfo DER
 *            ‖ u64 window ‖ u32 len ‖ beacon )
 *
 * (evidence without a beacon, of kubeboot before it, hashed the v1 label
 * and no beacon; the approver refuses it).
 *
 * - the SubjectPublicKeyInfo: a copy of the evidence with another key (a
 *   stolen disk image's, an attacker's) is refused: the key is what the
 *   certificate is for, and the CSR's self-signature proves the asker holds it;
 * - the subject: the same key asking for another name is refused;
 * - the window, WINDOW_SECONDS long, numbered from the Unix epoch: the
 *   approver compares it with the CSR's metadata.creationTimestamp, which
 *   the API server sets, so an old copy is useless later, and the check stays
 *   stateless (no nonce to hand out, no round trip, no new listener);
 * - the beacon, the approver's (records/tpm-beacon.ts), read by the node
 *   just before it quotes: the window is the node's to choose, so root on
 *   the node could make quotes for any future window; a beacon cannot be
 *   known before the approver publishes it, and the approver accepts only
 *   its current and previous one.
 * Both sides read the subject and key bytes from the request's DER
 * (pki/der.ts csrLayout), so what is hashed is what the signer signs.
 *
 * The block's bytes, TPM-style big-endian: u32 magic `KBTE`, u16 version 2,
 * u64 window, TPM2B_PUBLIC of the AK, TPM2B_ATTEST, TPMT_SIGNATURE, u8 count
 * and as many TPM2B_DIGEST PCR values (SHA-256 PCRs 0-7, as quoted); then
 * (version 2) TPM2B_PUBLIC of the EK and a TPM2B credential, each empty when
 * absent: what enrolment from the EK alone reads (tpm/challenge.ts), the EK
 * to make a challenge for, and the credential its activation opened; then
 * (version 3) the TPM2B beacon, empty when the node read none. Versions 1
 * (without the EK and credential) and 2 (without the beacon) are still read.
 */
import { createHash } from 'node:crypto';
import { csrLayout } from '../pki/der.js';
import { TPM_ALG } from './constants.js';
import type { Tpm } from './commands.js';
import { withAttestationKey, withEndorsementKey } from './keys.js';
import {
  marshalPublic,
  marshalSignature,
  unmarshalAttest,
  unmarshalPublic,
  unmarshalSignature,
  type PcrSelection,
  type Signature,
  type TpmtPublic,
} from './structures.js';
import { EvidenceError, pcrDigest, verifyQuote } from './verify.js';
import { Reader, TpmFormatError, Writer } from './wire.js';

export const EVIDENCE_PEM_TYPE = 'KUBEBOOT TPM EVIDENCE';
/** The length of a freshness window; the approver accepts the CSR's creation window and the one either side (clock skew). */
export const WINDOW_SECONDS = 300;
/** The PCRs quoted and reported: SHA-256 0-7 (firmware, boot loader, secure-boot state). */
export const EVIDENCE_PCRS: readonly PcrSelection[] = [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7] }];

/** The quoted PCRs as `index=hex` (EVIDENCE_PCRS order), as the approval reports them: what a PCR policy would be written from. */
export function pcrReport(values: readonly Buffer[]): string {
  const indices = EVIDENCE_PCRS[0]!.pcrs;
  return values.map((v, i) => `${indices[i]}=${v.toString('hex')}`).join(' ');
}

/** PCR `index` of the quoted values (EVIDENCE_PCRS order), or undefined when it was not quoted. */
export function quotedPcr(values: readonly Buffer[], index: number): Buffer | undefined {
  const at = EVIDENCE_PCRS[0]!.pcrs.indexOf(index);
  return at < 0 ? undefined : values[at];
}

const MAGIC = 0x4b425445; // "KBTE"
const VERSION = 3;
/** Evidence of the first release: no EK, no credential. */
const VERSION_1 = 1;
/** Evidence with the EK and credential, no beacon. */
const VERSION_2 = 2;
/** The qualifying data's label without a beacon (versions 1 and 2), and with one. */
const LABEL_V1 = Buffer.from('kubeboot kubelet-client CSR v1\0', 'latin1');
const LABEL_V2 = Buffer.from('kubeboot kubelet-client CSR v2\0', 'latin1');
/** A beacon is 32 bytes (records/tpm-beacon.ts); more than this is refused unread. */
const MAX_BEACON_BYTES = 64;
/** Far more than a P-256 AK's evidence needs (about 600 bytes): a larger block is refused unread. */
const MAX_EVIDENCE_BYTES = 4096;

export interface CsrEvidence {
  window: bigint;
  akPublic: TpmtPublic;
  /** TPMS_ATTEST as the TPM signed it. */
  attest: Buffer;
  signature: Signature;
  /** The quoted PCRs' values in selection order. */
  pcrValues: Buffer[];
  /** The TPM's RSA EK, when the node sent it (version 2): enrolment from the EK makes its challenge for it. */
  ekPublic?: TpmtPublic;
  /** The credential a challenge's activation opened (tpm/challenge.ts), in the CSR that answers it. */
  credential?: Buffer;
  /** The approver's beacon the node read before it quoted (version 3), bound into the qualifying data. */
  beacon?: Buffer;
}

/** What a CSR's evidence is bound to, read from the request's DER. */
export interface CsrBinding {
  subjectDer: Uint8Array;
  publicKeyDer: Uint8Array;
}

export function csrBinding(csrDer: Uint8Array): CsrBinding {
  const { subjectDer, publicKey } = csrLayout(csrDer);
  return { subjectDer, publicKeyDer: publicKey };
}

export function windowOf(at: Date): bigint {
  return BigInt(Math.floor(at.getTime() / 1000 / WINDOW_SECONDS));
}

/** The qualifying data a CSR's quote must carry (see the header); without a beacon, as kubeboot before it made it. */
export function csrQualifyingData(binding: CsrBinding, window: bigint, beacon?: Buffer): Buffer {
  const w = Buffer.alloc(8);
  w.writeBigUInt64BE(window);
  const hash = createHash('sha256')
    .update(beacon === undefined ? LABEL_V1 : LABEL_V2)
    .update(new Writer().u32(binding.subjectDer.length).done())
    .update(binding.subjectDer)
    .update(new Writer().u32(binding.publicKeyDer.length).done())
    .update(binding.publicKeyDer)
    .update(w);
  if (beacon !== undefined) hash.update(new Writer().u32(beacon.length).done()).update(beacon);
  return hash.digest();
}

export function marshalEvidence(e: CsrEvidence): Buffer {
  const window = Buffer.alloc(8);
  window.writeBigUInt64BE(e.window);
  const w = new Writer()
    .u32(MAGIC)
    .u16(VERSION)
    .bytes(window)
    .sizedOf((p) => marshalPublic(p, e.akPublic))
    .sized(e.attest);
  marshalSignature(w, e.signature);
  w.u8(e.pcrValues.length);
  for (const v of e.pcrValues) w.sized(v);
  const ek = e.ekPublic;
  if (ek === undefined) w.u16(0);
  else w.sizedOf((p) => marshalPublic(p, ek));
  w.sized(e.credential ?? Buffer.alloc(0));
  w.sized(e.beacon ?? Buffer.alloc(0));
  return w.done();
}

/** The evidence from its bytes, every byte used; anything else is a TpmFormatError naming the field. */
export function unmarshalEvidence(bytes: Buffer): CsrEvidence {
  if (bytes.length > MAX_EVIDENCE_BYTES) throw new TpmFormatError(`evidence of ${bytes.length} bytes, more than ${MAX_EVIDENCE_BYTES}`);
  const r = new Reader(bytes, EVIDENCE_PEM_TYPE);
  if (r.u32('magic') !== MAGIC) throw new TpmFormatError(`${EVIDENCE_PEM_TYPE}: magic is not KBTE`);
  const version = r.u16('version');
  if (version !== VERSION && version !== VERSION_2 && version !== VERSION_1)
    throw new TpmFormatError(`${EVIDENCE_PEM_TYPE}: version ${version}, not ${VERSION_1} to ${VERSION}`);
  const window = r.u64('window');
  const akPublic = r.sizedOf('akPublic', unmarshalPublic);
  const attest = r.sized('attest', 1024);
  const signature = unmarshalSignature(r);
  const count = r.u8('pcrValues.count');
  if (count > 24) throw new TpmFormatError(`${EVIDENCE_PEM_TYPE}: ${count} PCR values, more than a bank has`);
  const pcrValues: Buffer[] = [];
  for (let i = 0; i < count; i++) pcrValues.push(r.sized(`pcrValues[${i}]`, 64));
  const evidence: CsrEvidence = { window, akPublic, attest, signature, pcrValues };
  if (version >= VERSION_2) {
    const ek = r.sized('ekPublic');
    if (ek.length > 0) {
      const inner = new Reader(ek, `${EVIDENCE_PEM_TYPE}: ekPublic`);
      evidence.ekPublic = unmarshalPublic(inner);
      inner.end();
    }
    const credential = r.sized('credential', 64);
    if (credential.length > 0) evidence.credential = credential;
  }
  if (version >= VERSION) {
    const beacon = r.sized('beacon', MAX_BEACON_BYTES);
    if (beacon.length > 0) evidence.beacon = beacon;
  }
  r.end();
  return evidence;
}

export function evidencePem(e: CsrEvidence): string {
  const lines =
    marshalEvidence(e)
      .toString('base64')
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${EVIDENCE_PEM_TYPE}-----\n${lines.join('\n')}\n-----END ${EVIDENCE_PEM_TYPE}-----\n`;
}

const CSR_END = '-----END CERTIFICATE REQUEST-----';
const EVIDENCE_BLOCK = new RegExp(
  `^[ \\t\\r\\n]*-----BEGIN ${EVIDENCE_PEM_TYPE}-----\\r?\\n([A-Za-z0-9+/=\\r\\n]+\\n)-----END ${EVIDENCE_PEM_TYPE}-----[ \\t\\r\\n]*$`,
);

/**
 * spec.request's text cut into the CERTIFICATE REQUEST part (everything up
 * to its END line, for the caller's own strict check) and the DER of the one
 * evidence block after it, if any. Anything else after the request (another
 * block type, two evidence blocks, headers, non-canonical base64, stray
 * text) is a problem: the approver refuses such a request, as any parser
 * could read more into it than kubeboot does.
 */
export function splitCsrEvidence(pem: string): { request: string; evidence: Buffer | null } | { problem: string } {
  const end = pem.indexOf(CSR_END);
  if (end < 0) return { request: pem, evidence: null };
  const request = pem.slice(0, end + CSR_END.length);
  const rest = pem.slice(end + CSR_END.length);
  if (rest.trim() === '') return { request, evidence: null };
  const body = EVIDENCE_BLOCK.exec(rest)?.[1]?.replace(/[\r\n]/g, '');
  if (body === undefined)
    return {
      problem: `is not exactly one PEM CERTIFICATE REQUEST block without headers, followed by at most one PEM ${EVIDENCE_PEM_TYPE} block`,
    };
  if (body.length > (MAX_EVIDENCE_BYTES * 4) / 3 + 4)
    return { problem: `has a ${EVIDENCE_PEM_TYPE} block over ${MAX_EVIDENCE_BYTES} bytes` };
  const der = Buffer.from(body, 'base64');
  if (der.toString('base64') !== body) return { problem: `has a ${EVIDENCE_PEM_TYPE} block that is not canonical base64` };
  return { request, evidence: der };
}

/** The DER of spec.request's evidence block, or null when it has none (or is not one splitCsrEvidence accepts). */
export function csrEvidenceBlock(pem: string): Buffer | null {
  const split = splitCsrEvidence(pem);
  return 'evidence' in split ? split.evidence : null;
}

/**
 * The evidence for a CSR, made with this TPM now: the AK (created from its
 * template, flushed after) quotes SHA-256 PCRs 0-7 over the CSR's binding
 * and `beacon` (null: the node could read none; the approver refuses that),
 * and the EK's public area goes with it (an EK-only enrolment challenges
 * it), and `credential` when this CSR answers a challenge (tpm/challenge.ts).
 * The PCRs are read before the quote and read again if one moved between
 * the two (an extend at that moment), so the values match the quote.
 */
export async function quoteCsr(tpm: Tpm, csrDer: Uint8Array, now: Date, beacon: Buffer | null, credential?: Buffer): Promise<CsrEvidence> {
  const window = windowOf(now);
  const nonce = csrQualifyingData(csrBinding(csrDer), window, beacon ?? undefined);
  const ekPublic = await withEndorsementKey(tpm, async (ek) => ek.public);
  return withAttestationKey(tpm, async (ak) => {
    for (let attempt = 0; ; attempt++) {
      const { values } = await tpm.pcrRead(EVIDENCE_PCRS);
      const q = await tpm.quote(ak.handle, nonce, EVIDENCE_PCRS);
      const quoted = unmarshalAttest(q.attest).quote?.pcrDigest;
      if (quoted?.equals(pcrDigest(values)) === true || attempt >= 3)
        return {
          window,
          akPublic: ak.public,
          attest: q.attest,
          signature: q.signature,
          pcrValues: values,
          ekPublic,
          ...(credential !== undefined ? { credential } : {}),
          ...(beacon !== null ? { beacon } : {}),
        };
    }
  });
}

export interface CsrExpectation {
  binding: CsrBinding;
  /** The enrolled AK's TPM name; null: the evidence's own AK (an enrolment from the EK decides whether to trust it). */
  akName: Buffer | null;
  /** The CSR's metadata.creationTimestamp: the window must be its own or one either side. */
  created: Date;
  /** The beacons the approver accepts now (records/tpm-beacon.ts): the evidence must bind one. */
  beacons: readonly Buffer[];
}

/**
 * Verifies a CSR's evidence from the CSR, the enrolled AK name and the
 * beacons accepted now: the window is fresh for the CSR's creation, the
 * beacon is one of those, and the quote (verify.ts verifyQuote) is by that
 * AK, over the qualifying data recomputed from this CSR's subject, key, the
 * window and the beacon, covering SHA-256
 * PCRs 0-7 whose reported values are the quoted ones. Returns the evidence
 * as read; refusals are EvidenceErrors naming the check.
 */
export function verifyCsrEvidence(bytes: Buffer, expect: CsrExpectation): CsrEvidence {
  let evidence: CsrEvidence;
  try {
    evidence = unmarshalEvidence(bytes);
  } catch (err) {
    if (err instanceof TpmFormatError) throw new EvidenceError('format', err.message);
    throw err;
  }
  const created = windowOf(expect.created);
  const skew = evidence.window - created;
  if (skew < -1n || skew > 1n)
    throw new EvidenceError(
      'window',
      `the quote is for the ${WINDOW_SECONDS / 60}-minute window starting ${windowStart(evidence.window)}, the CSR was created at ${expect.created.toISOString()} (a copy of older evidence, or the node's clock is off)`,
    );
  const beacon = evidence.beacon;
  if (beacon === undefined)
    throw new EvidenceError(
      'beacon',
      "the quote binds no beacon: kubeboot on the node predates beacons, or could not read the approver's (it logs why)",
    );
  if (expect.beacons.length === 0) throw new EvidenceError('beacon', 'the approver has published no beacon yet to check it against');
  if (!expect.beacons.some((b) => b.equals(beacon)))
    throw new EvidenceError(
      'beacon',
      "the quote binds a beacon that is neither the approver's current nor its previous one: made before it was published, or more than one rotation ago (a quote made ahead of time)",
    );
  verifyQuote(
    { akPublic: evidence.akPublic, attest: evidence.attest, signature: evidence.signature },
    {
      nonce: csrQualifyingData(expect.binding, evidence.window, beacon),
      ...(expect.akName !== null ? { akName: expect.akName } : {}),
      pcrs: EVIDENCE_PCRS,
      pcrValues: evidence.pcrValues,
    },
  );
  return evidence;
}

function windowStart(window: bigint): string {
  const ms = Number(window) * WINDOW_SECONDS * 1000;
  return Number.isFinite(ms) && Math.abs(ms) < 8.64e15 ? new Date(ms).toISOString() : `number ${window}`;
}
