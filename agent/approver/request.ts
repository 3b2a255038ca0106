/**
 * What the approver needs to know about a PKCS#10 request, read once, with
 * the project's own DER reader (pki/der.ts), from the same bytes the
 * ambiguity checks read: subject, every kind of SAN (email and URI included,
 * which the node-side parser ignores), the key's type and size, and whether
 * the request is signed by the key it carries (one KeyObject for both).
 */
import { createPublicKey, verify as nodeVerify, type KeyObject } from 'node:crypto';
import { KubebootError } from '../errors.js';
import { parseCsrDer } from '../pki/pkcs10.js';
import { csrLayout, extensionsOf, generalNames, oidText, type CsrLayout, type DerValue } from '../pki/der.js';
import { canonicalIp } from '../pki/names.js';
import type { Subject } from '../identity.js';
import { csrEvidenceBlock, splitCsrEvidence, type CsrBinding } from '../tpm/csr-evidence.js';

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
  return unambiguousCsr(pem).der;
}

/** The layout unambiguousCsrDer read (to be read on, not parsed again). */
export function unambiguousCsrLayout(pem: string): CsrLayout {
  return unambiguousCsr(pem).layout;
}

/** unambiguousCsrDer, and the layout it read. */
function unambiguousCsr(pem: string): { der: Uint8Array; layout: CsrLayout; extensionRequest: Uint8Array | null } {
  const fail = (why: string): never => {
    throw new KubebootError(`spec.request ${why}`);
  };
  const split = splitCsrEvidence(pem);
  if ('problem' in split) return fail(split.problem);
  const body = ONE_CSR_PEM.exec(split.request)?.[1]?.replace(/[\r\n]/g, '');
  if (body === undefined) return fail('is not exactly one PEM CERTIFICATE REQUEST block without headers');
  const bytes = Buffer.from(body, 'base64');
  if (bytes.toString('base64') !== body) fail('is not canonical base64');
  const der = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
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
    const ids = extensionsOf(extensionRequest.values[0]!).map((e) => e.oid);
    if (new Set(ids).size !== ids.length) fail('requests an extension twice');
  }
  return { der, layout, extensionRequest: extensionRequest?.values[0] ?? null };
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });
const SUBJECT_ALT_NAME = '2.5.29.17';

/** A subject value's text: the API server refused invalid UTF-8 at creation (Go's asn1), so it is refused here too. */
function subjectText(value: DerValue): string {
  try {
    return value.tag === UTF8_STRING ? UTF8.decode(value.content) : Buffer.from(value.content).toString('latin1');
  } catch {
    throw new KubebootError('certificate request does not parse: a subject value is not UTF-8');
  }
}

/** An IA5String SAN's text (Go refuses any other byte at creation). */
function ia5Text(content: Uint8Array): string {
  if (content.some((byte) => byte > 0x7f)) throw new KubebootError('certificate request does not parse: a SAN is not IA5String');
  return Buffer.from(content).toString('latin1');
}

/** An iPAddress SAN's text before canonicalIp: dotted for 4 bytes, eight hex groups for 16 (Go refuses any other length). */
function ipText(content: Uint8Array): string {
  if (content.length === 4) return content.join('.');
  if (content.length !== 16) throw new KubebootError(`certificate request does not parse: a SAN IP address of ${content.length} bytes`);
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((content[i]! << 8) | content[i + 1]!).toString(16));
  return groups.join(':');
}

/** SAN kinds the rules refuse by name: how each is reported. */
const OTHER_NAME_KINDS: Record<number, string> = { 3: 'x400Address', 4: 'dirName', 5: 'ediPartyName' };

/** The SubjectAltName names of the extension request, sorted by kind. */
function altNames(extensionRequest: Uint8Array | null) {
  const names = {
    dnsNames: [] as string[],
    ipAddresses: [] as string[],
    emailAddresses: [] as string[],
    uris: [] as string[],
    otherNames: [] as string[],
  };
  const san = extensionRequest === null ? undefined : extensionsOf(extensionRequest).find((e) => e.oid === SUBJECT_ALT_NAME);
  for (const { kind, content } of san === undefined ? [] : generalNames(san.value)) {
    if (kind === 1) names.emailAddresses.push(ia5Text(content));
    else if (kind === 2) names.dnsNames.push(ia5Text(content));
    else if (kind === 6) names.uris.push(ia5Text(content));
    else if (kind === 7) names.ipAddresses.push(canonicalIp(ipText(content)));
    else if (kind === 0) names.otherNames.push(`otherName:${otherNameType(content)}`);
    else if (kind === 8) names.otherNames.push(`registeredID:${oidText(content)}`);
    else names.otherNames.push(OTHER_NAME_KINDS[kind] ?? `name of tag [${kind}]`);
  }
  return names;
}

/** The type-id OID of an otherName ([0] { type-id OID, [0] EXPLICIT value }), for its report. */
function otherNameType(content: Uint8Array): string {
  return content[0] === 0x06 && content[1]! < 0x80 ? oidText(content.subarray(2, 2 + content[1]!)) : 'unknown';
}

/** Signature algorithms checked here on node:crypto; any other is left to @peculiar/x509's csr.verify() (pkcs10.ts). */
const SIGNATURES: Record<string, { key: 'rsa' | 'ec'; hash: string }> = {
  '1.2.840.113549.1.1.5': { key: 'rsa', hash: 'sha1' },
  '1.2.840.113549.1.1.11': { key: 'rsa', hash: 'sha256' },
  '1.2.840.113549.1.1.12': { key: 'rsa', hash: 'sha384' },
  '1.2.840.113549.1.1.13': { key: 'rsa', hash: 'sha512' },
  '1.2.840.10045.4.1': { key: 'ec', hash: 'sha1' },
  '1.2.840.10045.4.3.2': { key: 'ec', hash: 'sha256' },
  '1.2.840.10045.4.3.3': { key: 'ec', hash: 'sha384' },
  '1.2.840.10045.4.3.4': { key: 'ec', hash: 'sha512' },
};
/** The curves WebCrypto verifies ECDSA on (OpenSSL names): on any other, csr.verify() refuses, and so does this. */
const VERIFIED_CURVES = new Set(['prime256v1', 'secp384r1', 'secp521r1']);

/**
 * Whether the request is signed by `key`, as pkcs10.ts verifyWithNodeCrypto
 * and csr.verify() say (test/unit/pki/csr-verify.test.ts): RSASSA-PKCS1-v1_5
 * or ECDSA (a strict DER ECDSA-Sig-Value) with SHA-1/256/384/512 on one
 * synchronous OpenSSL call; any other algorithm, or a key that does not
 * match it, through @peculiar/x509 as before (rare: no kubelet sends one).
 */
async function signedBy(der: Uint8Array, layout: CsrLayout, key: KeyObject): Promise<boolean> {
  const alg = SIGNATURES[layout.signatureAlgorithm];
  const matches =
    alg !== undefined &&
    layout.signature !== null &&
    key.asymmetricKeyType === alg.key &&
    (alg.key === 'rsa' || VERIFIED_CURVES.has(key.asymmetricKeyDetails?.namedCurve ?? ''));
  if (!matches) return (await parseCsrDer(der)).signatureValid;
  try {
    return nodeVerify(alg.hash, layout.info, alg.key === 'ec' ? { key, dsaEncoding: 'der' } : key, layout.signature!);
  } catch {
    return false; // a malformed signature
  }
}

/** Throws (KubebootError) when `spec.request` is not an unambiguous, parsable CSR; the caller turns that into a violation naming why. */
export async function requestFacts(requestBase64: string): Promise<RequestFacts> {
  const pem = Buffer.from(requestBase64, 'base64').toString('utf8');
  const { der, layout, extensionRequest } = unambiguousCsr(pem);
  const organizations: string[] = [];
  let commonName = '';
  for (const [value] of layout.subject as [DerValue][]) {
    if (value.oid === COMMON_NAME) commonName = subjectText(value);
    else organizations.push(subjectText(value));
  }
  const names = altNames(extensionRequest);
  let key: KeyObject;
  try {
    key = createPublicKey({
      key: Buffer.from(layout.publicKey.buffer, layout.publicKey.byteOffset, layout.publicKey.length),
      format: 'der',
      type: 'spki',
    });
  } catch (cause) {
    throw new KubebootError('certificate request does not parse', undefined, { cause });
  }
  return {
    subject: { commonName, organizations },
    ...names,
    key: keyOf(key),
    signatureValid: await signedBy(der, layout, key),
    binding: { subjectDer: layout.subjectDer, publicKeyDer: layout.publicKey },
    tpmEvidence: csrEvidenceBlock(pem),
  };
}

function keyOf(key: KeyObject): RequestKey {
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
