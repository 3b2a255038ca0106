/**
 * Enrolment of an AK from the EK alone (credential activation, TPM 2.0
 * Part 1, 24): the approver wraps a random credential for the node's EK and
 * AK name (verify.ts makeCredential); only the TPM holding that EK opens
 * it, and only while an object of that name is loaded in it. The node opens
 * it (TPM2_ActivateCredential) and sends the credential back in the
 * evidence of its next CSR, with a quote by that same AK: the AK that
 * quotes is the AK that was activated (Keylime's CVE-2022-1053).
 *
 * The challenge travels in the Denied condition of the CSR that asked
 * (reason KubebootTpmChallenge), which its requester already watches: no
 * new port, no listener. It is encrypted to the EK, so that every
 * bootstrapper can read it costs nothing. The approver keeps a digest of
 * the credential with the AK name (records/tpm-enrolment.ts), never the
 * credential. The answer is the credential itself: it is bound to one AK
 * name and useless without that AK's quote over the answering CSR, so that
 * it is readable in that CSR (every bootstrapper reads every CSR) gives
 * nothing to anyone without the TPM; an HMAC over the CSR would need the
 * approver to keep the credential, a secret, in a record.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Tpm } from './commands.js';
import { activateCredential, withAttestationKey, withEndorsementKey } from './keys.js';
import type { Credential, TpmtPublic } from './structures.js';
import { makeCredential } from './verify.js';
import { Reader, TpmFormatError, Writer } from './wire.js';

/** The reason of the Denied condition that carries a challenge: the node answers it instead of giving up. */
export const CHALLENGE_REASON = 'KubebootTpmChallenge';
/** Where the blob starts in the condition's message. */
const MARK = 'kubeboot-tpm-challenge:';
export const CREDENTIAL_BYTES = 32;
const DIGEST_LABEL = Buffer.from('kubeboot tpm credential v1\0', 'latin1');

/** SHA-256(label ‖ AK name ‖ credential), hex: what the approver keeps of a challenge it sent. */
export function credentialDigest(akName: Buffer, credential: Buffer): string {
  return createHash('sha256').update(DIGEST_LABEL).update(akName).update(credential).digest('hex');
}

export interface Challenge {
  blob: Credential;
  /** credentialDigest of the credential inside. */
  digest: string;
}

/** A fresh challenge for the AK named `akName` in the TPM holding `ek` (an RSA EK: MakeCredential's seed is encrypted to it). */
export function makeChallenge(ek: TpmtPublic, akName: Buffer, random: (n: number) => Buffer = randomBytes): Challenge {
  const credential = random(CREDENTIAL_BYTES);
  return { blob: makeCredential(ek, akName, credential, random(32)), digest: credentialDigest(akName, credential) };
}

/** The Denied condition's message: `text`, then the blob (TPM2B_ID_OBJECT ‖ TPM2B_ENCRYPTED_SECRET, base64) after the mark. */
export function challengeMessage(text: string, blob: Credential): string {
  return `${text} ${MARK}${new Writer().sized(blob.idObject).sized(blob.encryptedSecret).done().toString('base64')}`;
}

/** The blob of a challenge message, or null when the message carries none that reads. */
export function challengeIn(message: string): Credential | null {
  const at = message.lastIndexOf(MARK);
  if (at < 0) return null;
  const text = message.slice(at + MARK.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || text.length > 2048) return null;
  try {
    const r = new Reader(Buffer.from(text, 'base64'), 'TPM credential challenge');
    const blob = { idObject: r.sized('credentialBlob', 256), encryptedSecret: r.sized('secret', 1024) };
    r.end();
    return blob;
  } catch (err) {
    if (err instanceof TpmFormatError) return null;
    throw err;
  }
}

/**
 * The node's answer: the credential, opened with this TPM's EK for its AK
 * (created from its template, as for every quote). A challenge made for
 * another TPM or another AK fails in the TPM (a TpmResponseError).
 */
export async function answerChallenge(tpm: Tpm, blob: Credential): Promise<Buffer> {
  return withEndorsementKey(tpm, (ek) => withAttestationKey(tpm, (ak) => activateCredential(tpm, ak, ek, blob)));
}
