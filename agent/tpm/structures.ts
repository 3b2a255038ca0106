/**
 * The TPM 2.0 structures kubeboot reads and writes, each a small typed value
 * with one marshal and one unmarshal (go-tpm's tpm2/ shape). Only the
 * variants kubeboot meets are modelled; any other selector is a
 * TpmFormatError naming it, never a guess.
 */
import { TPM_ALG } from './constants.js';
import { Reader, TpmFormatError, Writer } from './wire.js';

/** TPMT_SYM_DEF_OBJECT: NULL, or a block cipher with its key size and mode. */
export type SymDef = { alg: typeof TPM_ALG.NULL } | { alg: number; keyBits: number; mode: number };

/** A scheme (TPMT_ECC_SCHEME, TPMT_RSA_SCHEME, TPMT_KDF_SCHEME, TPMT_SIG_SCHEME): NULL or an algorithm with its hash. */
export type Scheme = { alg: typeof TPM_ALG.NULL } | { alg: number; hash: number };

interface PublicBase {
  nameAlg: number;
  /** TPMA_OBJECT bits. */
  attributes: number;
  authPolicy: Buffer;
  symmetric: SymDef;
  scheme: Scheme;
}
export interface EccPublic extends PublicBase {
  type: typeof TPM_ALG.ECC;
  curve: number;
  kdf: Scheme;
  x: Buffer;
  y: Buffer;
}
export interface RsaPublic extends PublicBase {
  type: typeof TPM_ALG.RSA;
  keyBits: number;
  /** 0 means the default, 65537. */
  exponent: number;
  modulus: Buffer;
}
/** TPMT_PUBLIC for the two key types kubeboot uses (an ECC AK, an RSA or ECC EK). */
export type TpmtPublic = EccPublic | RsaPublic;

export function marshalSymDef(w: Writer, s: SymDef): void {
  w.u16(s.alg);
  if ('keyBits' in s) w.u16(s.keyBits).u16(s.mode);
}
export function unmarshalSymDef(r: Reader, field: string): SymDef {
  const alg = r.u16(`${field}.algorithm`);
  if (alg === TPM_ALG.NULL) return { alg: TPM_ALG.NULL };
  if (alg !== TPM_ALG.AES) throw new TpmFormatError(`${field}: symmetric algorithm 0x${alg.toString(16)} is not AES or NULL`);
  return { alg, keyBits: r.u16(`${field}.keyBits`), mode: r.u16(`${field}.mode`) };
}

export function marshalScheme(w: Writer, s: Scheme): void {
  w.u16(s.alg);
  if ('hash' in s) w.u16(s.hash);
}
export function unmarshalScheme(r: Reader, field: string): Scheme {
  const alg = r.u16(`${field}.scheme`);
  if (alg === TPM_ALG.NULL) return { alg: TPM_ALG.NULL };
  // Every scheme kubeboot meets (ECDSA, RSASSA, RSAPSS, OAEP, KDF1/2, MGF1) carries exactly a hash; ECDAA would carry a count too.
  if (alg === 0x001a) throw new TpmFormatError(`${field}: ECDAA schemes are not supported`);
  return { alg, hash: r.u16(`${field}.hashAlg`) };
}

export function marshalPublic(w: Writer, p: TpmtPublic): void {
  w.u16(p.type).u16(p.nameAlg).u32(p.attributes).sized(p.authPolicy);
  marshalSymDef(w, p.symmetric);
  marshalScheme(w, p.scheme);
  if (p.type === TPM_ALG.ECC) {
    w.u16(p.curve);
    marshalScheme(w, p.kdf);
    w.sized(p.x).sized(p.y);
  } else {
    w.u16(p.keyBits).u32(p.exponent).sized(p.modulus);
  }
}

/** TPMT_PUBLIC's bytes: what a TPM name hashes. */
export function publicBytes(p: TpmtPublic): Buffer {
  const w = new Writer();
  marshalPublic(w, p);
  return w.done();
}

export function unmarshalPublic(r: Reader): TpmtPublic {
  const type = r.u16('type');
  const nameAlg = r.u16('nameAlg');
  const attributes = r.u32('objectAttributes');
  const authPolicy = r.sized('authPolicy', 64);
  const symmetric = unmarshalSymDef(r, 'parameters.symmetric');
  const scheme = unmarshalScheme(r, 'parameters.scheme');
  if (type === TPM_ALG.ECC) {
    const curve = r.u16('parameters.curveID');
    const kdf = unmarshalScheme(r, 'parameters.kdf');
    return {
      type,
      nameAlg,
      attributes,
      authPolicy,
      symmetric,
      scheme,
      curve,
      kdf,
      x: r.sized('unique.x', 128),
      y: r.sized('unique.y', 128),
    };
  }
  if (type === TPM_ALG.RSA) {
    const keyBits = r.u16('parameters.keyBits');
    const exponent = r.u32('parameters.exponent');
    return { type, nameAlg, attributes, authPolicy, symmetric, scheme, keyBits, exponent, modulus: r.sized('unique.rsa', 512) };
  }
  throw new TpmFormatError(`TPMT_PUBLIC: key type 0x${type.toString(16)} is neither RSA nor ECC`);
}

/** TPM2B_PUBLIC from its bytes (size included), every byte used. */
export function parsePublicArea(bytes: Buffer): TpmtPublic {
  const r = new Reader(bytes, 'TPM2B_PUBLIC');
  const p = r.sizedOf('publicArea', unmarshalPublic);
  r.end();
  return p;
}

/** One bank of a TPML_PCR_SELECTION: a hash algorithm and the PCR indices selected in it. */
export interface PcrSelection {
  hash: number;
  pcrs: number[];
}

export function marshalPcrSelections(w: Writer, selections: readonly PcrSelection[]): void {
  w.u32(selections.length);
  for (const s of selections) {
    // At least 3 octets (PCR 0-23), as the TPM's platform profile requires.
    const size = Math.max(3, Math.ceil((Math.max(-1, ...s.pcrs) + 1) / 8));
    const bits = Buffer.alloc(size);
    for (const pcr of s.pcrs) bits[pcr >> 3] = (bits[pcr >> 3] as number) | (1 << (pcr & 7));
    w.u16(s.hash).u8(size).bytes(bits);
  }
}
export function unmarshalPcrSelections(r: Reader, field: string): PcrSelection[] {
  const count = r.u32(`${field}.count`);
  if (count > 16) throw new TpmFormatError(`${field}: ${count} PCR banks, more than a TPM has`);
  const out: PcrSelection[] = [];
  for (let i = 0; i < count; i++) {
    const hash = r.u16(`${field}[${i}].hash`);
    const size = r.u8(`${field}[${i}].sizeofSelect`);
    const bits = r.bytes(size, `${field}[${i}].pcrSelect`);
    const pcrs: number[] = [];
    for (let pcr = 0; pcr < size * 8; pcr++) if (((bits[pcr >> 3] as number) >> (pcr & 7)) & 1) pcrs.push(pcr);
    out.push({ hash, pcrs });
  }
  return out;
}

/** TPMS_CLOCK_INFO. */
export interface ClockInfo {
  clock: bigint;
  resetCount: number;
  restartCount: number;
  safe: boolean;
}

/** TPMS_ATTEST: what a TPM signs. `quote` is set for a TPM_ST_ATTEST_QUOTE, `attested` keeps any other type's raw bytes. */
export interface Attest {
  magic: number;
  type: number;
  qualifiedSigner: Buffer;
  extraData: Buffer;
  clockInfo: ClockInfo;
  firmwareVersion: bigint;
  quote?: { pcrSelect: PcrSelection[]; pcrDigest: Buffer };
  attested?: Buffer;
}

export function unmarshalAttest(bytes: Buffer): Attest {
  const r = new Reader(bytes, 'TPMS_ATTEST');
  const magic = r.u32('magic');
  const type = r.u16('type');
  const qualifiedSigner = r.sized('qualifiedSigner', 2 + 64);
  const extraData = r.sized('extraData', 64);
  const clockInfo = {
    clock: r.u64('clockInfo.clock'),
    resetCount: r.u32('clockInfo.resetCount'),
    restartCount: r.u32('clockInfo.restartCount'),
    safe: r.u8('clockInfo.safe') !== 0,
  };
  const firmwareVersion = r.u64('firmwareVersion');
  const head = { magic, type, qualifiedSigner, extraData, clockInfo, firmwareVersion };
  if (type !== 0x8018) return { ...head, attested: r.rest() };
  const pcrSelect = unmarshalPcrSelections(r, 'attested.quote.pcrSelect');
  const pcrDigest = r.sized('attested.quote.pcrDigest', 64);
  r.end();
  return { ...head, quote: { pcrSelect, pcrDigest } };
}

export function marshalAttest(a: Attest): Buffer {
  const w = new Writer()
    .u32(a.magic)
    .u16(a.type)
    .sized(a.qualifiedSigner)
    .sized(a.extraData)
    .bytes(u64(a.clockInfo.clock))
    .u32(a.clockInfo.resetCount)
    .u32(a.clockInfo.restartCount)
    .u8(a.clockInfo.safe ? 1 : 0)
    .bytes(u64(a.firmwareVersion));
  if (a.quote !== undefined) {
    marshalPcrSelections(w, a.quote.pcrSelect);
    w.sized(a.quote.pcrDigest);
  } else if (a.attested !== undefined) w.bytes(a.attested);
  return w.done();
}

function u64(v: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(v);
  return b;
}

/** TPMT_SIGNATURE: ECDSA (r, s) or an RSA signature, with its hash. */
export type Signature = { alg: typeof TPM_ALG.ECDSA; hash: number; r: Buffer; s: Buffer } | { alg: number; hash: number; sig: Buffer };

export function unmarshalSignature(r: Reader): Signature {
  const alg = r.u16('sigAlg');
  if (alg === TPM_ALG.ECDSA) return { alg, hash: r.u16('signature.hash'), r: r.sized('signature.r', 128), s: r.sized('signature.s', 128) };
  if (alg === TPM_ALG.RSASSA || alg === TPM_ALG.RSAPSS) return { alg, hash: r.u16('signature.hash'), sig: r.sized('signature.sig', 512) };
  throw new TpmFormatError(`TPMT_SIGNATURE: signature algorithm 0x${alg.toString(16)} is not ECDSA, RSASSA or RSAPSS`);
}
export function marshalSignature(w: Writer, s: Signature): void {
  w.u16(s.alg).u16(s.hash);
  if ('r' in s) w.sized(s.r).sized(s.s);
  else w.sized(s.sig);
}
/** A TPMT_SIGNATURE from its bytes, every byte used. */
export function parseSignature(bytes: Buffer): Signature {
  const r = new Reader(bytes, 'TPMT_SIGNATURE');
  const s = unmarshalSignature(r);
  r.end();
  return s;
}
export function signatureBytes(s: Signature): Buffer {
  const w = new Writer();
  marshalSignature(w, s);
  return w.done();
}

/** TPMS_NV_PUBLIC. */
export interface NvPublic {
  index: number;
  nameAlg: number;
  attributes: number;
  authPolicy: Buffer;
  dataSize: number;
}
export function unmarshalNvPublic(r: Reader): NvPublic {
  return {
    index: r.u32('nvIndex'),
    nameAlg: r.u16('nameAlg'),
    attributes: r.u32('attributes'),
    authPolicy: r.sized('authPolicy', 64),
    dataSize: r.u16('dataSize'),
  };
}

/** A credential blob and its seed, as TPM2_MakeCredential returns them (TPM2B_ID_OBJECT, TPM2B_ENCRYPTED_SECRET contents). */
export interface Credential {
  idObject: Buffer;
  encryptedSecret: Buffer;
}

/** tpm2-tools' credential file (tpm2_makecredential -o): magic 0xBADCC0DE, version 1, TPM2B_ID_OBJECT, TPM2B_ENCRYPTED_SECRET. */
export function marshalToolsCredential(c: Credential): Buffer {
  return new Writer().u32(0xbadcc0de).u32(1).sized(c.idObject).sized(c.encryptedSecret).done();
}
export function unmarshalToolsCredential(bytes: Buffer): Credential {
  const r = new Reader(bytes, 'tpm2-tools credential file');
  if (r.u32('magic') !== 0xbadcc0de) throw new TpmFormatError('tpm2-tools credential file: magic is not 0xBADCC0DE');
  if (r.u32('version') !== 1) throw new TpmFormatError('tpm2-tools credential file: version is not 1');
  const c = { idObject: r.sized('credentialBlob'), encryptedSecret: r.sized('secret') };
  r.end();
  return c;
}
