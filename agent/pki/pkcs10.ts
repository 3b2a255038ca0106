/**
 * PKCS#10 certificate requests: build ours, and read back one the API holds
 * (the 409 AlreadyExists check in client-go csr.RequestCertificate accepts an
 * existing CSR only if it was made with our key).
 */
import { createPublicKey, verify as nodeVerify } from 'node:crypto';
import { KubebootError } from '../errors.js';
import type { Subject } from '../identity.js';
import type { PrivateKey } from './keys.js';
import { altNamesExtension, altNamesOf, canonicalIp, subjectOfName, subjectToName } from './names.js';
import { pemBlocks } from './pem.js';
import { x509 } from './x509.js';

export interface CsrOptions {
  key: PrivateKey;
  subject: Subject;
  dnsNames?: string[];
  ipAddresses?: string[];
}

/**
 * A `CERTIFICATE REQUEST` PEM that Go's x509.ParseCertificateRequest and
 * CheckSignature accept. SANs go in an extensionRequest attribute only when
 * asked for: the kubelet client approver rejects CSRs carrying any SAN.
 */
export async function createCsrPem(opts: CsrOptions): Promise<string> {
  const dnsNames = opts.dnsNames ?? [];
  const ipAddresses = opts.ipAddresses ?? [];
  const extensions = dnsNames.length + ipAddresses.length > 0 ? [altNamesExtension({ dnsNames, ipAddresses })] : [];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: subjectToName(opts.subject),
    keys: opts.key.keyPair,
    signingAlgorithm: opts.key.signingAlgorithm,
    extensions,
  });
  return csr.toString('pem') + '\n';
}

export interface ParsedCsr {
  subject: Subject;
  /** SubjectPublicKeyInfo DER of the requesting key. */
  publicKeyDer: Uint8Array;
  dnsNames: string[];
  /** Canonical text form (see canonicalIp). */
  ipAddresses: string[];
  /** The request is signed by the key it carries (Go's CheckSignature). */
  signatureValid: boolean;
  raw: x509.Pkcs10CertificateRequest;
}

export async function parseCsrPem(pem: string): Promise<ParsedCsr> {
  const block = pemBlocks(pem).find((b) => b.type === 'CERTIFICATE REQUEST');
  if (!block) throw new KubebootError('no CERTIFICATE REQUEST found in PEM');
  return parseCsrDer(block.der);
}

export async function parseCsrDer(der: Uint8Array): Promise<ParsedCsr> {
  let csr: x509.Pkcs10CertificateRequest;
  let names: { dnsNames: string[]; ipAddresses: string[] };
  try {
    csr = new x509.Pkcs10CertificateRequest(der);
    names = altNamesOf(csr.extensions);
  } catch (cause) {
    throw new KubebootError('certificate request does not parse', undefined, { cause });
  }
  let signatureValid: boolean;
  try {
    signatureValid = verifyWithNodeCrypto(csr) ?? (await csr.verify());
  } catch {
    signatureValid = false; // unsupported or malformed key/signature
  }
  return {
    subject: subjectOfName(csr.subjectName),
    publicKeyDer: new Uint8Array(csr.publicKey.rawData),
    dnsNames: names.dnsNames,
    ipAddresses: names.ipAddresses.map(canonicalIp),
    signatureValid,
    raw: csr,
  };
}

const NODE_HASHES: Record<string, string> = { 'SHA-1': 'sha1', 'SHA-256': 'sha256', 'SHA-384': 'sha384', 'SHA-512': 'sha512' };
/** The curves WebCrypto imports for ECDSA (OpenSSL names); any other curve is left to csr.verify(), which refuses it. */
const WEBCRYPTO_CURVES = new Set(['prime256v1', 'secp384r1', 'secp521r1']);

/**
 * The self-signature checked with node:crypto (one synchronous OpenSSL call,
 * no CryptoKey import, no promise): RSASSA-PKCS1-v1_5 on an rsaEncryption
 * key, ECDSA on a P-256/P-384/P-521 key, SHA-1/256/384/512, which is what
 * csr.verify() (WebCrypto) accepts for those. An ECDSA signature in X.509 is
 * a DER ECDSA-Sig-Value (WebCrypto wants IEEE-P1363 r||s, which csr.verify()
 * converts to): verified here as DER, strictly (OpenSSL re-encodes and
 * compares, as Go's ecdsa.VerifyASN1 does), so a non-minimal or negative
 * INTEGER, or bytes after the SEQUENCE, is refused. undefined for any other
 * algorithm or key (RSA-PSS, Ed25519, other curves, a key whose type does
 * not match the signature's): the caller falls back to csr.verify().
 */
export function verifyWithNodeCrypto(csr: x509.Pkcs10CertificateRequest): boolean | undefined {
  const alg = csr.signatureAlgorithm as { name?: string; hash?: { name?: string } | string };
  const hashName = typeof alg.hash === 'string' ? alg.hash : alg.hash?.name;
  const hash = hashName === undefined ? undefined : NODE_HASHES[hashName.toUpperCase()];
  if (hash === undefined) return undefined;
  const key = createPublicKey({ key: Buffer.from(csr.publicKey.rawData), format: 'der', type: 'spki' });
  const signature = new Uint8Array(csr.signature);
  // the CertificationRequestInfo exactly as received (the getter csr.verify() signs over; private only in its typings)
  const tbs = new Uint8Array((csr as unknown as { tbs: ArrayBuffer }).tbs);
  if (alg.name === 'RSASSA-PKCS1-v1_5') {
    if (key.asymmetricKeyType !== 'rsa') return undefined;
    return nodeVerify(hash, tbs, key, signature);
  }
  if (alg.name === 'ECDSA') {
    if (key.asymmetricKeyType !== 'ec' || !WEBCRYPTO_CURVES.has(key.asymmetricKeyDetails?.namedCurve ?? '')) return undefined;
    return nodeVerify(hash, tbs, { key, dsaEncoding: 'der' }, signature);
  }
  return undefined;
}
