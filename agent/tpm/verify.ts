/**
 * The verifier's side, in node:crypto alone: TPM names, the EK's public-key
 * hash, MakeCredential, and the checks of a quote and of the key that signed
 * it. Each is a pure function of bytes; a refusal is an EvidenceError whose
 * `reason` names the check that failed (go-attestation's attest/ keeps its
 * checks the same way, as functions over parsed values).
 */
import {
  createCipheriv,
  createHash,
  createHmac,
  createPublicKey,
  constants as cryptoConstants,
  publicEncrypt,
  randomBytes,
  timingSafeEqual,
  verify as verifySignature,
  type KeyObject,
  type X509Certificate,
} from 'node:crypto';
import { digestSize, hashName, TPM_ALG, TPM_ECC, TPM_RH, TPM_ST, TPMA_OBJECT } from './constants.js';
import {
  publicBytes,
  unmarshalAttest,
  type Attest,
  type Credential,
  type PcrSelection,
  type Signature,
  type TpmtPublic,
} from './structures.js';
import { TpmFormatError, Writer } from './wire.js';

/** TPM_GENERATED_VALUE: every TPMS_ATTEST a TPM signs starts with it, so a restricted key never signs a look-alike. */
export const TPM_GENERATED = 0xff544347;

export type EvidenceReason =
  | 'format'
  | 'ak-attributes'
  | 'ak-name'
  | 'magic'
  | 'type'
  | 'nonce'
  | 'signer'
  | 'algorithm'
  | 'signature'
  | 'pcr-selection'
  | 'pcr-digest'
  | 'window'
  | 'beacon';

/** Evidence refused; `reason` names the check, the message says what was found. */
export class EvidenceError extends Error {
  override readonly name = 'EvidenceError';
  readonly reason: EvidenceReason;
  constructor(reason: EvidenceReason, message: string) {
    super(`${reason}: ${message}`);
    this.reason = reason;
  }
}

/** A TPM object's name: nameAlg ‖ H_nameAlg(TPMT_PUBLIC) (TPM 2.0 Part 1, 16). */
export function tpmName(pub: TpmtPublic): Buffer {
  const digest = createHash(hashName(pub.nameAlg)).update(publicBytes(pub)).digest();
  return new Writer().u16(pub.nameAlg).bytes(digest).done();
}

/**
 * The qualified name of a primary object of a hierarchy: nameAlg ‖
 * H(hierarchy handle ‖ name). A quote's qualifiedSigner is this for an AK
 * created under the endorsement hierarchy.
 */
export function primaryQualifiedName(name: Buffer, hierarchy: number = TPM_RH.ENDORSEMENT): Buffer {
  const alg = name.readUInt16BE(0);
  const digest = createHash(hashName(alg)).update(new Writer().u32(hierarchy).bytes(name).done()).digest();
  return new Writer().u16(alg).bytes(digest).done();
}

/** The public key of a TPM RSA or ECC (P-256, P-384) object as a node:crypto key. */
export function publicKeyOf(pub: TpmtPublic): KeyObject {
  if (pub.type === TPM_ALG.RSA) {
    const e = pub.exponent === 0 ? 65537 : pub.exponent;
    const eBytes = Buffer.from(e.toString(16).padStart(e.toString(16).length + (e.toString(16).length % 2), '0'), 'hex');
    return createPublicKey({ key: { kty: 'RSA', n: pub.modulus.toString('base64url'), e: eBytes.toString('base64url') }, format: 'jwk' });
  }
  const crv = pub.curve === TPM_ECC.NIST_P256 ? 'P-256' : pub.curve === TPM_ECC.NIST_P384 ? 'P-384' : undefined;
  if (crv === undefined) throw new TpmFormatError(`ECC curve 0x${pub.curve.toString(16)} is not P-256 or P-384`);
  return createPublicKey({ key: { kty: 'EC', crv, x: pub.x.toString('base64url'), y: pub.y.toString('base64url') }, format: 'jwk' });
}

/**
 * kubeboot's EK hash: SHA-256 of the EK public key's SubjectPublicKeyInfo
 * DER, as lowercase hex. The same value as Teleport's `ekpub_hash`
 * (SHA-256 of the PKIX-encoded public key) and `openssl x509 -in EK.pem
 * -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum`; it does
 * not change when the EK certificate is re-issued.
 */
export function ekPublicKeyHash(key: KeyObject | TpmtPublic): string {
  const k = 'type' in key && typeof key.type === 'number' ? publicKeyOf(key as TpmtPublic) : (key as KeyObject);
  return createHash('sha256')
    .update(k.export({ type: 'spki', format: 'der' }))
    .digest('hex');
}

/**
 * What disqualifies a key as an attestation key, or null: it must be an
 * ECDSA-P256-SHA256 signing key the TPM made and keeps (fixedTPM,
 * fixedParent, sensitiveDataOrigin), restricted (it signs only what the
 * TPM generated, so it cannot sign a forged TPMS_ATTEST), and not a
 * decryption key.
 */
export function attestationKeyProblem(pub: TpmtPublic): string | null {
  const need: [keyof typeof TPMA_OBJECT, boolean][] = [
    ['restricted', true],
    ['sign', true],
    ['decrypt', false],
    ['fixedTPM', true],
    ['fixedParent', true],
    ['sensitiveDataOrigin', true],
  ];
  for (const [attribute, set] of need)
    if (Boolean(pub.attributes & TPMA_OBJECT[attribute]) !== set)
      return `the key ${set ? 'is not' : 'is'} ${attribute} (attributes 0x${pub.attributes.toString(16)})`;
  if (pub.type !== TPM_ALG.ECC || pub.curve !== TPM_ECC.NIST_P256) return 'the key is not an ECC P-256 key';
  if (pub.nameAlg !== TPM_ALG.SHA256) return `the key's nameAlg is 0x${pub.nameAlg.toString(16)}, not SHA-256`;
  if (!('hash' in pub.scheme) || pub.scheme.alg !== TPM_ALG.ECDSA || pub.scheme.hash !== TPM_ALG.SHA256)
    return 'the key is not an ECDSA SHA-256 key';
  return null;
}

/** The PCR digest a quote carries: H(PCR values in selection order), H the AK's signing hash. */
export function pcrDigest(values: readonly Buffer[], hash: number = TPM_ALG.SHA256): Buffer {
  const h = createHash(hashName(hash));
  for (const v of values) h.update(v);
  return h.digest();
}

export interface QuoteEvidence {
  /** The AK's TPMT_PUBLIC. */
  akPublic: TpmtPublic;
  /** TPMS_ATTEST as the TPM returned it (the signed bytes). */
  attest: Buffer;
  signature: Signature;
}

export interface QuoteExpectation {
  /** The qualifying data the verifier asked for (or recomputes): extraData must equal it. */
  nonce: Buffer;
  /** The AK name enrolled for this machine, when there is one: the AK must be that key. */
  akName?: Buffer;
  /** The selection asked for: the quote must cover exactly these PCRs. */
  pcrs?: readonly PcrSelection[];
  /** PCR values reported with the quote, in selection order: their digest must be the quoted one. */
  pcrValues?: readonly Buffer[];
}

/**
 * Verifies a quote: the AK is an attestation key (and the enrolled one),
 * the bytes are a TPM-generated TPMS_ATTEST of type quote, signed by that
 * AK as the primary it is under the endorsement hierarchy, over the nonce
 * asked for and the PCRs asked for. Returns the parsed attestation.
 */
export function verifyQuote(evidence: QuoteEvidence, expect: QuoteExpectation): Attest {
  const { akPublic } = evidence;
  const problem = attestationKeyProblem(akPublic);
  if (problem !== null) throw new EvidenceError('ak-attributes', problem);
  const name = tpmName(akPublic);
  if (expect.akName !== undefined && !sameBytes(name, expect.akName))
    throw new EvidenceError('ak-name', `the AK is ${name.toString('hex')}, not the enrolled ${expect.akName.toString('hex')}`);
  let attest: Attest;
  try {
    attest = unmarshalAttest(evidence.attest);
  } catch (err) {
    if (err instanceof TpmFormatError) throw new EvidenceError('format', err.message);
    throw err;
  }
  if (attest.magic !== TPM_GENERATED) throw new EvidenceError('magic', `magic 0x${attest.magic.toString(16)}, not TPM_GENERATED_VALUE`);
  if (attest.type !== TPM_ST.ATTEST_QUOTE || attest.quote === undefined)
    throw new EvidenceError('type', `attestation type 0x${attest.type.toString(16)}, not a quote (0x8018)`);
  if (!sameBytes(attest.extraData, expect.nonce)) throw new EvidenceError('nonce', 'the quote is over other qualifying data');
  checkSignature(akPublic, evidence.attest, evidence.signature);
  if (!sameBytes(attest.qualifiedSigner, primaryQualifiedName(name)))
    throw new EvidenceError('signer', 'the quote names another signer than this AK under the endorsement hierarchy');
  if (expect.pcrs !== undefined && !sameSelection(attest.quote.pcrSelect, expect.pcrs))
    throw new EvidenceError('pcr-selection', 'the quote covers other PCRs than asked for');
  if (expect.pcrValues !== undefined && !sameBytes(pcrDigest(expect.pcrValues), attest.quote.pcrDigest))
    throw new EvidenceError('pcr-digest', 'the PCR values reported are not the ones quoted');
  return attest;
}

/** The AK's ECDSA P-256 SHA-256 signature over `signed`, the only scheme its template allows. */
export function checkSignature(akPublic: TpmtPublic, signed: Buffer, signature: Signature): void {
  if (signature.alg !== TPM_ALG.ECDSA || signature.hash !== TPM_ALG.SHA256 || !('r' in signature))
    throw new EvidenceError(
      'algorithm',
      `signature algorithm 0x${signature.alg.toString(16)} with hash 0x${signature.hash.toString(16)}, not ECDSA SHA-256`,
    );
  if (signature.r.length > 32 || signature.s.length > 32)
    throw new EvidenceError('format', 'an ECDSA P-256 signature value is over 32 bytes');
  const raw = Buffer.concat([leftPad(signature.r, 32), leftPad(signature.s, 32)]);
  const ok = verifySignature('sha256', signed, { key: publicKeyOf(akPublic), dsaEncoding: 'ieee-p1363' }, raw);
  if (!ok) throw new EvidenceError('signature', "the signature is not the AK's over these bytes");
}

/**
 * KDFa (TPM 2.0 Part 1, 11.4.10.2): SP 800-108 counter-mode HMAC, each block
 * HMAC(key, i ‖ label ‖ 0 ‖ contextU ‖ contextV ‖ bits), truncated to `bits`.
 */
export function kdfa(hash: number, key: Buffer, label: string, contextU: Buffer, contextV: Buffer, bits: number): Buffer {
  const out: Buffer[] = [];
  const bitsBytes = new Writer().u32(bits).done();
  const labelBytes = Buffer.concat([Buffer.from(label, 'latin1'), Buffer.alloc(1)]);
  for (let i = 1, have = 0; have < bits / 8; i++) {
    const block = createHmac(hashName(hash), key)
      .update(new Writer().u32(i).done())
      .update(labelBytes)
      .update(contextU)
      .update(contextV)
      .update(bitsBytes)
      .digest();
    out.push(block);
    have += block.length;
  }
  return Buffer.concat(out).subarray(0, Math.ceil(bits / 8));
}

/**
 * TPM2_MakeCredential, off the TPM: wraps `secret` so that only the TPM
 * holding `ek` opens it, and only for the object named `objectName`
 * (TPM 2.0 Part 1, 24; go-tpm's credactivation does the same). A random
 * seed is RSA-OAEP(SHA-256, label "IDENTITY\0")-encrypted to the EK; from
 * it KDFa derives an AES key ("STORAGE", bound to the name) that encrypts
 * the secret in CFB mode, and an HMAC key ("INTEGRITY") over the encrypted
 * secret and the name.
 */
export function makeCredential(ek: TpmtPublic, objectName: Buffer, secret: Buffer, seed: Buffer = randomBytes(32)): Credential {
  if (ek.type !== TPM_ALG.RSA) throw new TpmFormatError('MakeCredential: only an RSA EK is supported');
  if (!('keyBits' in ek.symmetric) || ek.symmetric.alg !== TPM_ALG.AES || ek.symmetric.mode !== TPM_ALG.CFB)
    throw new TpmFormatError("MakeCredential: the EK's symmetric algorithm is not AES-CFB");
  const hash = ek.nameAlg;
  if (secret.length > digestSize(hash)) throw new RangeError(`MakeCredential: a secret of at most ${digestSize(hash)} bytes`);
  const encryptedSecret = publicEncrypt(
    {
      key: publicKeyOf(ek),
      padding: cryptoConstants.RSA_PKCS1_OAEP_PADDING,
      oaepHash: hashName(hash),
      oaepLabel: Buffer.from('IDENTITY\0', 'latin1'),
    },
    seed,
  );
  const keyBits = ek.symmetric.keyBits;
  const symKey = kdfa(hash, seed, 'STORAGE', objectName, Buffer.alloc(0), keyBits);
  const cipher = createCipheriv(`aes-${keyBits}-cfb`, symKey, Buffer.alloc(16));
  const plain = new Writer().sized(secret).done();
  const encIdentity = Buffer.concat([cipher.update(plain), cipher.final()]);
  const hmacKey = kdfa(hash, seed, 'INTEGRITY', Buffer.alloc(0), Buffer.alloc(0), digestSize(hash) * 8);
  const integrity = createHmac(hashName(hash), hmacKey).update(encIdentity).update(objectName).digest();
  const idObject = new Writer().sized(integrity).bytes(encIdentity).done();
  return { idObject, encryptedSecret };
}

/**
 * Whether an EK certificate was issued by one of the CAs in `bundle` (the
 * admin's file of EK CAs: a vendor's roots and intermediates, or a
 * hypervisor's swtpm local CA), each certificate of which is trusted as
 * given. The issuer must be a CA valid now; the EK certificate's own dates
 * are reported, not enforced (it is the TPM's birth certificate, and vendors
 * date them as they please).
 *
 * node:crypto's verify(publicKey) checks the signature alone, so the EK
 * certificate's critical SubjectAltName (TCG EK Credential Profile 2.0,
 * 3.2.9: the TPM's manufacturer, model and version as directory names) is no
 * obstacle, as it is for a path validator that knows no TCG names.
 */
export function issuedByOneOf(cert: X509Certificate, bundle: readonly X509Certificate[], now: Date): { ok: boolean; why: string } {
  const named = bundle.filter((c) => c.subject === cert.issuer);
  if (named.length === 0) return { ok: false, why: `its issuer ${oneLine(cert.issuer)} is not in the bundle` };
  const issuer = named.find((c) => cert.verify(c.publicKey));
  if (issuer === undefined) return { ok: false, why: `no certificate named ${oneLine(cert.issuer)} in the bundle signed it` };
  if (!issuer.ca) return { ok: false, why: `${oneLine(issuer.subject)} is not a CA` };
  if (!(new Date(issuer.validFrom) <= now && now <= new Date(issuer.validTo)))
    return { ok: false, why: `${oneLine(issuer.subject)} is not valid now (${issuer.validFrom} to ${issuer.validTo})` };
  return { ok: true, why: `issued by ${oneLine(issuer.subject)}` };
}

/** An X.509 name as node prints it (one attribute a line), on one line. */
export function oneLine(name: string): string {
  return name.split('\n').filter(Boolean).join(', ');
}

function leftPad(b: Buffer, size: number): Buffer {
  return b.length >= size ? b : Buffer.concat([Buffer.alloc(size - b.length), b]);
}

function sameBytes(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

function sameSelection(a: readonly PcrSelection[], b: readonly PcrSelection[]): boolean {
  const key = (s: readonly PcrSelection[]) => s.map((x) => `${x.hash}:${[...x.pcrs].sort((p, q) => p - q).join(',')}`).join(';');
  return key(a) === key(b);
}
