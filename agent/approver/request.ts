/**
 * What the approver needs to know about a PKCS#10 request, read once:
 * subject, every kind of SAN (email and URI included, which the node-side
 * parser ignores), the key's type and size, and whether the request is signed
 * by the key it carries.
 */
import { createPublicKey } from 'node:crypto';
import { KubebootError } from '../errors.js';
import { parseCsrDer } from '../pki/pkcs10.js';
import { csrLayout, extensionIds, type DerValue } from '../pki/der.js';
import { canonicalIp } from '../pki/names.js';
import { x509 } from '../pki/x509.js';
import type { Subject } from '../identity.js';
import { csrBinding, csrEvidenceBlock, splitCsrEvidence, type CsrBinding } from '../tpm/csr-evidence.js';

export type RequestKey = { kind: 'ecdsa'; curve: string } | { kind: 'rsa'; bits: number } | { kind: 'other'; type: string };

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
  /** What TPM evidence is bound to (the subject and key DER); null for a request not kept whole. */
  binding?: CsrBinding | null;
  /** The DER of the request's one KUBEBOOT TPM EVIDENCE block (tpm/csr-evidence.ts), or null: the rule tpm-attested reads it. */
  tpmEvidence?: Buffer | null;
}

/** `ecdsa-p256`-style name of the key, comparable with KEY_ALGORITHMS. */
export function keyAlgorithmName(key: RequestKey): string {
  if (key.kind === 'rsa') return `rsa-${key.bits}`;
  if (key.kind === 'ecdsa')
    return `ecdsa-${key.curve
      .replace(/^(prime256v1|P-256)$/, 'p256')
      .replace(/^(secp384r1|P-384)$/, 'p384')
      .replace(/^(secp521r1|P-521)$/, 'p521')
      .toLowerCase()}`;
  return key.type;
}

const ONE_CSR_PEM = /^-----BEGIN CERTIFICATE REQUEST-----\r?\n([A-Za-z0-9+/=\r\n]+\n)-----END CERTIFICATE REQUEST-----[ \t\r\n]*$/;
const COMMON_NAME = '2.5.4.3';
const ORGANIZATION = '2.5.4.10';
const UTF8_STRING = 0x0c;
const PRINTABLE_STRING = 0x13;
const EXTENSION_REQUEST = '1.2.840.113549.1.9.14';

/**
 * The DER of `spec.request`, refused unless no other parser could read it
 * differently. The API server and the signer read it with Go: pem.Decode
 * skips a block it cannot decode and takes the next, pkix.Name keeps the
 * last CN of several, and every extensionRequest attribute is merged. So a
 * request whose first readable block, first CN or first extension list is
 * not the whole story could be approved for one identity and signed for
 * another. Accepted: exactly one PEM block and nothing else, no headers,
 * canonical base64; nothing after the DER but one KUBEBOOT TPM EVIDENCE
 * block (tpm/csr-evidence.ts; Go's parsers read only the first block); a subject of single-valued
 * CN and O attributes only, as UTF8String or PrintableString, exactly one CN;
 * at most one extensionRequest with one value and no extension twice.
 */
export function unambiguousCsrDer(pem: string): Uint8Array {
  const fail = (why: string): never => {
    throw new KubebootError(`spec.request ${why}`);
  };
  const split = splitCsrEvidence(pem);
  if ('problem' in split) return fail(split.problem);
  const body = ONE_CSR_PEM.exec(split.request)?.[1]?.replace(/[\r\n]/g, '');
  if (body === undefined) return fail('is not exactly one PEM CERTIFICATE REQUEST block without headers');
  const der = new Uint8Array(Buffer.from(body, 'base64'));
  if (Buffer.from(der).toString('base64') !== body) fail('is not canonical base64');
  const layout = csrLayout(der);
  let commonNames = 0;
  for (const rdn of layout.subject) {
    if (rdn.length !== 1) fail('has a multi-valued relative distinguished name in its subject');
    const [{ oid, tag }] = rdn as [DerValue];
    if (oid !== COMMON_NAME && oid !== ORGANIZATION) fail(`has subject attribute ${oid}; only CN and O are accepted`);
    if (tag !== UTF8_STRING && tag !== PRINTABLE_STRING)
      fail(`has a subject value of ASN.1 type ${tag}; only UTF8String and PrintableString are accepted`);
    if (oid === COMMON_NAME) commonNames++;
  }
  if (commonNames !== 1) fail(`has ${commonNames} CNs in its subject; exactly one is accepted`);
  const extensionRequests = layout.attributes.filter((a) => a.oid === EXTENSION_REQUEST);
  if (extensionRequests.length > 1) fail(`has ${extensionRequests.length} extensionRequest attributes; at most one is accepted`);
  const [extensionRequest] = extensionRequests;
  if (extensionRequest) {
    if (extensionRequest.values.length !== 1)
      fail(`has an extensionRequest with ${extensionRequest.values.length} values; exactly one is accepted`);
    const ids = extensionIds(extensionRequest.values[0]!);
    if (new Set(ids).size !== ids.length) fail('requests an extension twice');
  }
  return der;
}

/** Throws (KubebootError) when `spec.request` is not an unambiguous, parsable CSR; the caller turns that into a violation naming why. */
export async function requestFacts(requestBase64: string): Promise<RequestFacts> {
  const pem = Buffer.from(requestBase64, 'base64').toString('utf8');
  const der = unambiguousCsrDer(pem);
  const parsed = await parseCsrDer(der);
  const csr = parsed.raw;
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
    binding: csrBinding(der),
    tpmEvidence: csrEvidenceBlock(pem),
  };
}

function keyOf(spki: Uint8Array): RequestKey {
  const key = createPublicKey({ key: Buffer.from(spki), format: 'der', type: 'spki' });
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'rsa') return { kind: 'rsa', bits: details.modulusLength ?? 0 };
  if (key.asymmetricKeyType === 'ec') return { kind: 'ecdsa', curve: details.namedCurve ?? 'unknown' };
  return { kind: 'other', type: key.asymmetricKeyType ?? 'unknown' };
}

/** Request facts carrying only a CN, for a request not kept whole: all recognition reads, and the signature rule fails. */
export function subjectOnlyFacts(commonName: string): RequestFacts {
  const none: string[] = [];
  return {
    subject: { commonName, organizations: none },
    dnsNames: none,
    ipAddresses: none,
    emailAddresses: none,
    uris: none,
    otherNames: none,
    key: { kind: 'other', type: 'unread' },
    signatureValid: false,
    binding: null,
    tpmEvidence: null,
  };
}
