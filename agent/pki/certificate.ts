/**
 * Reading certificates and the two pure decisions about them: "is the
 * certificate the signer issued what we asked for?" and "is the credential
 * already on disk still usable?". Both take the clock as `now`.
 */
import { X509Certificate as NodeX509Certificate } from 'node:crypto';
import { KubebootError } from '../errors.js';
import type { KeyUsage, Subject } from '../identity.js';
import { subjectPublicKeyInfoOf } from './der.js';
import { parsePrivateKey, samePublicKey } from './keys.js';
import { altNamesOf, canonicalIp, describeSubject, sameSet, sameSubject, subjectOfName } from './names.js';
import { pemBlocks, toPem } from './pem.js';
import { x509 } from './x509.js';

export interface CertInfo {
  subject: Subject;
  issuerCommonName: string;
  /** Lower-case hex. */
  serialNumber: string;
  notBefore: Date;
  notAfter: Date;
  /** SubjectPublicKeyInfo DER exactly as in the certificate. */
  publicKeyDer: Uint8Array;
  /** 'client auth', 'server auth', or the OID for others; empty when the extension is absent. */
  extKeyUsages: string[];
  /** Names as in certificates.k8s.io/v1 ('digital signature', 'key encipherment', ...); empty when absent. */
  keyUsages: string[];
  hasExtKeyUsage: boolean;
  hasKeyUsage: boolean;
  /** Basic constraints CA flag. */
  isCa: boolean;
  dnsNames: string[];
  /** Canonical text form (see canonicalIp). */
  ipAddresses: string[];
  /** This certificate alone, as DER and as PEM. */
  der: Uint8Array;
  pem: string;
  raw: x509.X509Certificate;
}

const EKU_NAMES: Record<string, string> = {
  '1.3.6.1.5.5.7.3.1': 'server auth',
  '1.3.6.1.5.5.7.3.2': 'client auth',
};
const ANY_EKU = '2.5.29.37.0';

const KU_NAMES: [x509.KeyUsageFlags, string][] = [
  [x509.KeyUsageFlags.digitalSignature, 'digital signature'],
  [x509.KeyUsageFlags.nonRepudiation, 'content commitment'],
  [x509.KeyUsageFlags.keyEncipherment, 'key encipherment'],
  [x509.KeyUsageFlags.dataEncipherment, 'data encipherment'],
  [x509.KeyUsageFlags.keyAgreement, 'key agreement'],
  [x509.KeyUsageFlags.keyCertSign, 'cert sign'],
  [x509.KeyUsageFlags.cRLSign, 'crl sign'],
  [x509.KeyUsageFlags.encipherOnly, 'encipher only'],
  [x509.KeyUsageFlags.decipherOnly, 'decipher only'],
];

/**
 * Every CERTIFICATE block in `pem`, in order; other blocks (a key in a
 * combined file) are skipped, as client-go certutil.ParseCertsPEM does.
 * Throws when there is none or one does not parse.
 */
export function parseCertificateChain(pem: string): CertInfo[] {
  const blocks = pemBlocks(pem).filter((b) => b.type === 'CERTIFICATE');
  if (blocks.length === 0) throw new KubebootError('no certificate found in PEM');
  return blocks.map((block, i) => {
    try {
      return certInfo(block.der);
    } catch (cause) {
      throw new KubebootError(`certificate ${i + 1} in PEM does not parse`, undefined, { cause });
    }
  });
}

function certInfo(der: Uint8Array): CertInfo {
  const raw = new x509.X509Certificate(der);
  const eku = raw.getExtension(x509.ExtendedKeyUsageExtension);
  const ku = raw.getExtension(x509.KeyUsagesExtension);
  const bc = raw.getExtension(x509.BasicConstraintsExtension);
  const names = altNamesOf(raw.extensions);
  return {
    subject: subjectOfName(raw.subjectName),
    issuerCommonName: raw.issuerName.getField('CN')[0] ?? '',
    serialNumber: raw.serialNumber.toLowerCase(),
    notBefore: raw.notBefore,
    notAfter: raw.notAfter,
    publicKeyDer: subjectPublicKeyInfoOf(der),
    extKeyUsages: (eku?.usages ?? []).map((oid) => EKU_NAMES[String(oid)] ?? String(oid)),
    keyUsages: ku ? KU_NAMES.filter(([flag]) => (ku.usages & flag) !== 0).map(([, name]) => name) : [],
    hasExtKeyUsage: eku !== null,
    hasKeyUsage: ku !== null,
    isCa: bc?.ca ?? false,
    dnsNames: names.dnsNames,
    ipAddresses: names.ipAddresses,
    der,
    pem: toPem('CERTIFICATE', der),
    raw,
  };
}

function parseCas(caPems: readonly string[]): CertInfo[] {
  return caPems.flatMap((pem) => parseCertificateChain(pem));
}

/** `child` names `parent` as issuer and `parent`'s key verifies its signature. */
function issuedBy(child: CertInfo, parent: CertInfo): boolean {
  try {
    const c = new NodeX509Certificate(child.der);
    const p = new NodeX509Certificate(parent.der);
    return c.checkIssued(p) && c.verify(p.publicKey);
  } catch {
    return false;
  }
}

/**
 * Longest chain accepted from a signer: the leaf and up to 8 intermediates.
 * Go's x509 Verify has no fixed cap but bounds its work (maxChainSignatureChecks
 * = 100); a kubelet CA chain is one or two deep in practice.
 */
export const MAX_CHAIN_LENGTH = 9;

/**
 * Certificates from the leaf's issuer up to a trusted CA, or null. Intermediates
 * come from the rest of the leaf's PEM and must be CAs, as in Go's x509 Verify.
 * One step per certificate, no backtracking: each certificate's issuer is the
 * first unused intermediate that signed it, so the work is at most n² checks,
 * never n! (eight self-issued certificates under one name once took 17 s).
 */
function pathToCa(leaf: CertInfo, intermediates: readonly CertInfo[], cas: readonly CertInfo[]): CertInfo[] | null {
  const unused = intermediates.filter((c) => c.isCa);
  const path: CertInfo[] = [];
  for (let cert = leaf; ; ) {
    const ca = cas.find((candidate) => issuedBy(cert, candidate));
    if (ca) return [...path, ca];
    const index = unused.findIndex((candidate) => issuedBy(cert, candidate));
    if (index < 0) return null;
    cert = unused.splice(index, 1)[0]!;
    path.push(cert);
  }
}

/**
 * The CA of `cas` that `chain` (leaf first, then any intermediates it came
 * with) leads to, or null. Validity dates are not checked: this answers
 * "which trust anchor does it hang from", e.g. for a CA rotation.
 */
export function anchorOf(chain: readonly CertInfo[], cas: readonly CertInfo[]): CertInfo | null {
  const [leaf, ...intermediates] = chain;
  if (!leaf || chain.length > MAX_CHAIN_LENGTH) return null;
  const path = pathToCa(leaf, intermediates, cas);
  return path ? path[path.length - 1]! : null;
}

function chainLengthProblem(chain: readonly CertInfo[]): string | null {
  return chain.length > MAX_CHAIN_LENGTH
    ? `certificate chain has ${chain.length} certificates; at most ${MAX_CHAIN_LENGTH} are accepted`
    : null;
}

/**
 * What a leaf must never be, whatever was requested: a CA, or a key allowed
 * to sign certificates or CRLs (the kube-controller-manager signer never sets
 * these; a signer that does is misbehaving, and such a key could mint
 * identities). A client certificate carries no DNS or IP names: the signer
 * for kubelet client certificates refuses CSRs with them.
 */
function leafProblems(leaf: CertInfo, usages: readonly KeyUsage[]): string[] {
  const problems: string[] = [];
  if (leaf.isCa) problems.push('certificate is a CA (basic constraints CA:TRUE)');
  for (const usage of ['cert sign', 'crl sign']) if (leaf.keyUsages.includes(usage)) problems.push(`certificate allows ${usage}`);
  const client = !usages.includes('server auth');
  if (client && (leaf.dnsNames.length > 0 || leaf.ipAddresses.length > 0)) {
    problems.push('client certificate carries DNS names or IP addresses it did not ask for');
  }
  return problems;
}

/** notBefore ≤ now < notAfter. */
function timeProblem(cert: CertInfo, now: Date, what: string): string | null {
  if (now < cert.notBefore) return `${what} is not valid until ${cert.notBefore.toISOString()}`;
  if (now >= cert.notAfter) return `${what} expired at ${cert.notAfter.toISOString()}`;
  return null;
}

function hasUsage(cert: CertInfo, usage: KeyUsage): boolean {
  // RFC 5280 §4.2.1.3 and §4.2.1.12: an absent extension restricts nothing;
  // Go's TLS client-certificate check treats a missing EKU the same way.
  if (usage === 'client auth' || usage === 'server auth') {
    return !cert.hasExtKeyUsage || cert.extKeyUsages.includes(usage) || cert.extKeyUsages.includes(ANY_EKU);
  }
  return !cert.hasKeyUsage || cert.keyUsages.includes(usage);
}

export interface IssuedCertificateCheck {
  certPem: string;
  /** One or more CA certificates; each entry may be a bundle. */
  caPems: readonly string[];
  publicKeyDer: Uint8Array;
  subject: Subject;
  usages: readonly KeyUsage[];
  now: Date;
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
}

/**
 * Everything wrong with a certificate the signer returned, as short
 * sentences; empty when it is what we asked for. A certificate that does not
 * parse is a problem, not an exception; CA PEM that does not parse throws
 * (it is our configuration).
 */
export async function checkIssuedCertificate(opts: IssuedCertificateCheck): Promise<string[]> {
  const cas = parseCas(opts.caPems);
  let chain: CertInfo[];
  try {
    chain = parseCertificateChain(opts.certPem);
  } catch (err) {
    return [`issued certificate does not parse: ${(err as Error).message}`];
  }
  const [leaf, ...intermediates] = chain as [CertInfo, ...CertInfo[]];
  const problems: string[] = [];
  const add = (problem: string | null) => {
    if (problem) problems.push(problem);
  };

  if (!samePublicKey(leaf.publicKeyDer, opts.publicKeyDer)) {
    add('certificate is for a different public key than the one in our request');
  }
  if (leaf.subject.commonName !== opts.subject.commonName) {
    add(`certificate is for CN=${leaf.subject.commonName}, requested CN=${opts.subject.commonName}`);
  }
  if (!sameSet(leaf.subject.organizations, opts.subject.organizations)) {
    add(`certificate has O=[${leaf.subject.organizations.join(', ')}], requested O=[${opts.subject.organizations.join(', ')}]`);
  }
  for (const usage of opts.usages) {
    if (!hasUsage(leaf, usage)) add(`certificate does not allow ${usage}`);
  }
  for (const name of opts.dnsNames ?? []) {
    if (!leaf.dnsNames.includes(name)) add(`certificate lacks DNS name ${name}`);
  }
  for (const ip of opts.ipAddresses ?? []) {
    if (!leaf.ipAddresses.includes(canonicalIp(ip))) add(`certificate lacks IP address ${ip}`);
  }
  add(timeProblem(leaf, opts.now, 'certificate'));
  for (const problem of leafProblems(leaf, opts.usages)) add(problem);

  const tooLong = chainLengthProblem(chain);
  const path = tooLong === null ? pathToCa(leaf, intermediates, cas) : null;
  if (tooLong !== null) {
    add(tooLong);
  } else if (!path) {
    add(`certificate (issuer CN=${leaf.issuerCommonName}) is not signed by the cluster CA`);
  } else {
    // matches Go's x509 Verify: every certificate on the path must be valid now.
    for (const cert of path) add(timeProblem(cert, opts.now, `CA certificate CN=${cert.subject.commonName}`));
  }
  return problems;
}

export interface CredentialCheck {
  certPem: string;
  keyPem: string;
  caPems: readonly string[];
  subject: Subject;
  now: Date;
}

export interface CredentialAssessment {
  usable: boolean;
  /** Why not, for the log; never quotes key material. */
  reason?: string;
  /** The leaf's notAfter, whenever the certificate parsed. */
  notAfter?: Date;
}

/**
 * Whether an existing client credential can be kept rather than
 * re-bootstrapped. Stricter than the kubelet, which only checks that the
 * files parse and nothing has passed notAfter (kubernetes#65991 reused an
 * expired cert; a cert from another cluster's CA or for another node name
 * would also be kept there). A not-yet-valid certificate stays usable: the
 * signer backdates 5 minutes, so that is clock skew, which re-bootstrapping
 * would not fix.
 */
export async function assessCredential(opts: CredentialCheck): Promise<CredentialAssessment> {
  let chain: CertInfo[];
  try {
    chain = parseCertificateChain(opts.certPem);
  } catch (err) {
    return { usable: false, reason: `certificate does not parse: ${(err as Error).message}` };
  }
  const [leaf, ...intermediates] = chain as [CertInfo, ...CertInfo[]];
  const notAfter = leaf.notAfter;
  const no = (reason: string): CredentialAssessment => ({ usable: false, reason, notAfter });

  let keyDer: Uint8Array;
  try {
    keyDer = (await parsePrivateKey(opts.keyPem)).publicKeyDer;
  } catch (err) {
    return no(`private key does not parse: ${(err as Error).message}`);
  }
  if (!samePublicKey(leaf.publicKeyDer, keyDer)) return no('certificate and private key do not match');
  const expired = chain.find((cert) => opts.now >= cert.notAfter);
  if (expired) {
    return no(`certificate ${expired === leaf ? '' : `CN=${expired.subject.commonName} `}expired at ${expired.notAfter.toISOString()}`);
  }
  let cas: CertInfo[];
  try {
    cas = parseCas(opts.caPems);
  } catch (err) {
    return no(`cluster CA does not parse: ${(err as Error).message}`);
  }
  const tooLong = chainLengthProblem(chain);
  if (tooLong !== null) return no(tooLong);
  if (!pathToCa(leaf, intermediates, cas)) {
    return no(`certificate (issuer CN=${leaf.issuerCommonName}) is not signed by the cluster CA`);
  }
  if (!sameSubject(leaf.subject, opts.subject)) {
    return no(`certificate is for ${describeSubject(leaf.subject)}, configured ${describeSubject(opts.subject)}`);
  }
  return { usable: true, notAfter };
}
