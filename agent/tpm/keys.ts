/**
 * kubeboot's keys in the TPM: an attestation key (AK) created as a primary
 * under the endorsement hierarchy from a fixed template, so the same TPM
 * gives the same AK each time and nothing sits on disk; the TPM's
 * endorsement key (EK) and its certificate, as the manufacturer put them
 * (TCG EK Credential Profile 2.0). Each function flushes what it loaded.
 */
import { EK, TPM_ALG, TPM_ECC, TPM_RH, TPMA_OBJECT } from './constants.js';
import { type Tpm, nvBufferMax } from './commands.js';
import { TPM_RC, TpmResponseError } from './errors.js';
import type { Credential, EccPublic, RsaPublic, TpmtPublic } from './structures.js';

/**
 * The AK template: a restricted ECDSA P-256 signing key (it signs only
 * digests the TPM made itself: quotes, certifications), fixed to this TPM,
 * its private part generated inside, usable with the empty password.
 * `tpm2_createprimary -C e -G ecc256:ecdsa-sha256:null -a
 * 'restricted|fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign'`
 * makes the same key.
 */
export function attestationKeyTemplate(): EccPublic {
  return {
    type: TPM_ALG.ECC,
    nameAlg: TPM_ALG.SHA256,
    attributes:
      TPMA_OBJECT.fixedTPM |
      TPMA_OBJECT.fixedParent |
      TPMA_OBJECT.sensitiveDataOrigin |
      TPMA_OBJECT.userWithAuth |
      TPMA_OBJECT.restricted |
      TPMA_OBJECT.sign,
    authPolicy: Buffer.alloc(0),
    symmetric: { alg: TPM_ALG.NULL },
    scheme: { alg: TPM_ALG.ECDSA, hash: TPM_ALG.SHA256 },
    curve: TPM_ECC.NIST_P256,
    kdf: { alg: TPM_ALG.NULL },
    x: Buffer.alloc(0),
    y: Buffer.alloc(0),
  };
}

/** PolicySecret(TPM_RH_ENDORSEMENT): the standard EK's authPolicy (TCG EK Credential Profile 2.0, B.3.3). */
export const EK_POLICY = Buffer.from('837197674484b3f81a90cc8d46a5d724fd52d76e06520b64f2a1da1b331469aa', 'hex');

/** The standard RSA-2048 EK template (TCG EK Credential Profile 2.0, template L-1): the key the EK certificate at 0x01C00002 is for. */
export function rsaEkTemplate(): RsaPublic {
  return {
    type: TPM_ALG.RSA,
    nameAlg: TPM_ALG.SHA256,
    attributes:
      TPMA_OBJECT.fixedTPM |
      TPMA_OBJECT.fixedParent |
      TPMA_OBJECT.sensitiveDataOrigin |
      TPMA_OBJECT.adminWithPolicy |
      TPMA_OBJECT.restricted |
      TPMA_OBJECT.decrypt,
    authPolicy: EK_POLICY,
    symmetric: { alg: TPM_ALG.AES, keyBits: 128, mode: TPM_ALG.CFB },
    scheme: { alg: TPM_ALG.NULL },
    keyBits: 2048,
    exponent: 0,
    modulus: Buffer.alloc(256),
  };
}

export interface LoadedKey {
  handle: number;
  public: TpmtPublic;
  name: Buffer;
}

/** Creates the AK, runs `use` with it, and flushes it whatever happens. */
export async function withAttestationKey<T>(tpm: Tpm, use: (ak: LoadedKey) => Promise<T>): Promise<T> {
  const ak = await tpm.createPrimary(TPM_RH.ENDORSEMENT, attestationKeyTemplate());
  try {
    return await use(ak);
  } finally {
    await tpm.flushContext(ak.handle).catch(() => undefined);
  }
}

/**
 * The RSA EK: the persistent one at 0x81010001 when it is there and is the
 * standard EK (most provisioned TPMs, swtpm_setup), else created from the
 * standard template (the same key: the template and seed decide it) and
 * flushed after `use`.
 */
export async function withEndorsementKey<T>(tpm: Tpm, use: (ek: LoadedKey & { persistent: boolean }) => Promise<T>): Promise<T> {
  try {
    const persistent = await tpm.readPublic(EK.rsaPersistentHandle);
    if (isStandardRsaEk(persistent.public)) return await use({ handle: EK.rsaPersistentHandle, ...persistent, persistent: true });
  } catch (err) {
    if (!(err instanceof TpmResponseError && err.base === TPM_RC.HANDLE)) throw err;
  }
  const ek = await tpm.createPrimary(TPM_RH.ENDORSEMENT, rsaEkTemplate());
  try {
    return await use({ ...ek, persistent: false });
  } finally {
    await tpm.flushContext(ek.handle).catch(() => undefined);
  }
}

/** Same attributes, policy and parameters as the standard template (only the modulus differs). */
function isStandardRsaEk(p: TpmtPublic): boolean {
  const t = rsaEkTemplate();
  return (
    p.type === TPM_ALG.RSA &&
    p.nameAlg === t.nameAlg &&
    p.attributes === t.attributes &&
    p.authPolicy.equals(t.authPolicy) &&
    p.keyBits === t.keyBits &&
    (p.exponent === 0 || p.exponent === 65537) &&
    'keyBits' in p.symmetric &&
    p.symmetric.keyBits === 128
  );
}

const NV_AUTHREAD = 1 << 18;
const NV_OWNERREAD = 1 << 17;

/** The DER certificate at an EK certificate index, or undefined when the index is not defined. Read in NV_BUFFER_MAX chunks. */
export async function readEkCertificate(tpm: Tpm, index: number = EK.rsaCertIndex): Promise<Buffer | undefined> {
  let nv: Awaited<ReturnType<Tpm['nvReadPublic']>>;
  try {
    nv = await tpm.nvReadPublic(index);
  } catch (err) {
    if (err instanceof TpmResponseError && err.base === TPM_RC.HANDLE) return undefined;
    throw err;
  }
  const auth = nv.public.attributes & NV_AUTHREAD ? index : nv.public.attributes & NV_OWNERREAD ? TPM_RH.OWNER : index;
  const chunk = await nvBufferMax(tpm);
  const parts: Buffer[] = [];
  for (let offset = 0; offset < nv.public.dataSize; offset += chunk)
    parts.push(await tpm.nvRead(auth, index, Math.min(chunk, nv.public.dataSize - offset), offset));
  return trimDer(Buffer.concat(parts));
}

/**
 * Some vendors pad the index past the certificate: keep the one DER
 * SEQUENCE at the start (its own length says where it ends).
 */
function trimDer(b: Buffer): Buffer {
  if (b.length < 4 || b[0] !== 0x30) return b;
  const first = b[1] as number;
  if (first < 0x80) return b.subarray(0, 2 + first);
  const n = first & 0x7f;
  if (n === 0 || n > 3 || b.length < 2 + n) return b;
  let len = 0;
  for (let i = 0; i < n; i++) len = len * 256 + (b[2 + i] as number);
  return b.length >= 2 + n + len ? b.subarray(0, 2 + n + len) : b;
}

/**
 * Opens a credential made for `ak` with the EK (credential activation): a
 * policy session satisfying the EK's PolicySecret(endorsement), then
 * TPM2_ActivateCredential. The session ends with the command (or is
 * flushed when it fails).
 */
export async function activateCredential(tpm: Tpm, ak: LoadedKey, ek: LoadedKey, credential: Credential): Promise<Buffer> {
  const session = await tpm.startPolicySession();
  try {
    await tpm.policySecret(TPM_RH.ENDORSEMENT, session.handle);
    return await tpm.activateCredential(ak.handle, ek.handle, session.handle, credential);
  } catch (err) {
    await tpm.flushContext(session.handle).catch(() => undefined);
    throw err;
  }
}
