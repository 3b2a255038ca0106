/**
 * What the approver needs to know about a PKCS#10 request, read once:
 * subject, every kind of SAN (email and URI included, which the node-side
 * parser ignores), the key's type and size, and whether the request is signed
 * by the key it carries.
 */
import { createPublicKey } from 'node:crypto';
import { parseCsrPem } from '../pki/csr.js';
import { canonicalIp } from '../pki/names.js';
import { pemBlocks } from '../pki/pem.js';
import { x509 } from '../pki/x509.js';
import type { Subject } from '../identity.js';

export type RequestKey =
  | { kind: 'ecdsa'; curve: string }
  | { kind: 'rsa'; bits: number }
  | { kind: 'other'; type: string };

export interface RequestFacts {
  subject: Subject;
  dnsNames: string[];
  ipAddresses: string[];
  emailAddresses: string[];
  uris: string[];
  /** SAN kinds other than DNS, IP, email and URI (directory names, UPNs, ...). */
  otherNames: string[];
  key: RequestKey;
  signatureValid: boolean;
}

/** `ecdsa-p256`-style name of the key, comparable with KEY_ALGORITHMS. */
export function keyAlgorithmName(key: RequestKey): string {
  if (key.kind === 'rsa') return `rsa-${key.bits}`;
  if (key.kind === 'ecdsa') return `ecdsa-${key.curve.replace(/^(prime256v1|P-256)$/, 'p256').replace(/^(secp384r1|P-384)$/, 'p384').replace(/^(secp521r1|P-521)$/, 'p521').toLowerCase()}`;
  return key.type;
}

/** Throws (KubebootError) when `spec.request` is not a parsable CSR; the caller turns that into a violation. */
export async function requestFacts(requestBase64: string): Promise<RequestFacts> {
  const pem = Buffer.from(requestBase64, 'base64').toString('utf8');
  const parsed = await parseCsrPem(pem);
  const der = pemBlocks(pem).find((b) => b.type === 'CERTIFICATE REQUEST')!.der;
  const csr = new x509.Pkcs10CertificateRequest(der);
  const emailAddresses: string[] = [];
  const uris: string[] = [];
  const otherNames: string[] = [];
  for (const ext of csr.extensions) {
    if (ext.type !== '2.5.29.17') continue;
    const san = new x509.SubjectAlternativeNameExtension(ext.rawData);
    for (const name of san.names.items) {
      if (name.type === 'email') emailAddresses.push(name.value);
      else if (name.type === 'url') uris.push(name.value);
      else if (name.type !== 'dns' && name.type !== 'ip') otherNames.push(`${name.type}:${name.value}`);
    }
  }
  return {
    subject: parsed.subject,
    dnsNames: parsed.dnsNames,
    ipAddresses: parsed.ipAddresses.map(canonicalIp),
    emailAddresses,
    uris,
    otherNames,
    key: keyOf(parsed.publicKeyDer),
    signatureValid: parsed.signatureValid,
  };
}

function keyOf(spki: Uint8Array): RequestKey {
  const key = createPublicKey({ key: Buffer.from(spki), format: 'der', type: 'spki' });
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'rsa') return { kind: 'rsa', bits: details.modulusLength ?? 0 };
  if (key.asymmetricKeyType === 'ec') return { kind: 'ecdsa', curve: details.namedCurve ?? 'unknown' };
  return { kind: 'other', type: key.asymmetricKeyType ?? 'unknown' };
}
