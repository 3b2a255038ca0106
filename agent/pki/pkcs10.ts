/**
 * PKCS#10 certificate requests: build ours, and read back one the API holds
 * (the 409 AlreadyExists check in client-go csr.RequestCertificate accepts an
 * existing CSR only if it was made with our key).
 */
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
    signatureValid = await csr.verify();
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
