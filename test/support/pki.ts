// Certificates for a throw-away test cluster: one ECDSA P-256 CA signs the
// apiserver and controller-manager serving certs and every client cert, and is
// also the controller manager's CSR signing CA (as in a kubeadm cluster).
import { randomBytes, KeyObject, type webcrypto } from 'node:crypto';
import { x509 } from '../../agent/pki/x509.js';

export const ecdsaP256 = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const signingAlgorithm = { name: 'ECDSA', hash: 'SHA-256' } as const;

export interface KeyPair {
  keys: webcrypto.CryptoKeyPair;
  /** PKCS#8 `PRIVATE KEY`, which Go's keyutil and Node both read. */
  keyPem: string;
}

export interface CertAndKey extends KeyPair {
  cert: x509.X509Certificate;
  certPem: string;
}

export interface SubjectSpec {
  commonName: string;
  organizations?: string[];
}

export interface LeafSpec extends SubjectSpec {
  usage: 'server' | 'client';
  dnsNames?: string[];
  ipAddresses?: string[];
  notBefore?: Date;
  notAfter?: Date;
}

const hour = 3600_000;
const day = 24 * hour;

export async function generateKeyPair(): Promise<KeyPair> {
  const keys = (await crypto.subtle.generateKey(ecdsaP256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  return { keys, keyPem: privateKeyPem(keys.privateKey) };
}

export function privateKeyPem(key: webcrypto.CryptoKey): string {
  return KeyObject.from(key).export({ type: 'pkcs8', format: 'pem' }).toString();
}

export function publicKeyPem(key: webcrypto.CryptoKey): string {
  return KeyObject.from(key).export({ type: 'spki', format: 'pem' }).toString();
}

/** A distinguished name as JSON, so values such as `system:masters` need no escaping. */
export function subjectName({ commonName, organizations = [] }: SubjectSpec): x509.JsonName {
  return [{ CN: [commonName] }, ...organizations.map((o) => ({ O: [o] }))];
}

// RFC 5280: positive, at most 20 octets; a leading 0x01 keeps it positive.
function serialNumber(): string {
  return '01' + randomBytes(15).toString('hex');
}

export async function createCa(commonName: string): Promise<CertAndKey> {
  const pair = await generateKeyPair();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name: subjectName({ commonName }),
    // Backdated so a slightly skewed clock in a child process never sees it as not-yet-valid.
    notBefore: new Date(Date.now() - hour),
    notAfter: new Date(Date.now() + 10 * day),
    keys: pair.keys,
    signingAlgorithm,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature, true),
      await x509.SubjectKeyIdentifierExtension.create(pair.keys.publicKey),
    ],
  });
  return { ...pair, cert, certPem: cert.toString('pem') };
}

export async function issueLeaf(ca: CertAndKey, spec: LeafSpec): Promise<CertAndKey> {
  const pair = await generateKeyPair();
  const sans: x509.JsonGeneralName[] = [
    ...(spec.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
    ...(spec.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
  ];
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: subjectName(spec),
    issuer: ca.cert.subject,
    notBefore: spec.notBefore ?? new Date(Date.now() - hour),
    notAfter: spec.notAfter ?? new Date(Date.now() + 5 * day),
    publicKey: pair.keys.publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension(
        [spec.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth],
        false,
      ),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
      ...(sans.length > 0 ? [new x509.SubjectAlternativeNameExtension(sans)] : []),
    ],
  });
  return { ...pair, cert, certPem: cert.toString('pem') };
}

/** Everything the control plane's components are started with. */
export interface ClusterPki {
  ca: CertAndKey;
  apiserverServing: CertAndKey;
  controllerManagerServing: CertAndKey;
  admin: CertAndKey;
  controllerManagerClient: CertAndKey;
  /** What the apiserver shows a kubelet (logs, exec, proxy), as kubeadm's apiserver-kubelet-client. */
  apiserverKubeletClient: CertAndKey;
  serviceAccount: KeyPair & { publicKeyPem: string };
}

/** `apiserverIps`: more addresses the apiserver serves on (a node in its own network namespace dials one). */
export async function createClusterPki(apiserverIps: string[] = []): Promise<ClusterPki> {
  const ca = await createCa('kubeboot-test-ca');
  const loopback = { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] };
  const serviceAccount = await generateKeyPair();
  return {
    ca,
    apiserverServing: await issueLeaf(ca, {
      commonName: 'kube-apiserver',
      usage: 'server',
      dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
      ipAddresses: ['127.0.0.1', ...apiserverIps],
    }),
    controllerManagerServing: await issueLeaf(ca, { commonName: 'kube-controller-manager', usage: 'server', ...loopback }),
    admin: await issueLeaf(ca, { commonName: 'kubeboot-admin', organizations: ['system:masters'], usage: 'client' }),
    // The identity kubeadm gives the controller manager; its ClusterRole is bootstrapped by the apiserver.
    controllerManagerClient: await issueLeaf(ca, { commonName: 'system:kube-controller-manager', usage: 'client' }),
    apiserverKubeletClient: await issueLeaf(ca, {
      commonName: 'kube-apiserver-kubelet-client',
      organizations: ['system:masters'],
      usage: 'client',
    }),
    serviceAccount: { ...serviceAccount, publicKeyPem: publicKeyPem(serviceAccount.keys.publicKey) },
  };
}

/** What a signer would issue for a PKCS#10 request: its key and subject, signed by `ca`. */
export async function signRequest(
  ca: CertAndKey,
  requestPem: string,
  opts: { usage: 'server' | 'client'; notAfter?: Date },
): Promise<string> {
  const request = new x509.Pkcs10CertificateRequest(requestPem);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: request.subject,
    issuer: ca.cert.subject,
    notBefore: new Date(Date.now() - 5 * 60_000),
    notAfter: opts.notAfter ?? new Date(Date.now() + day),
    publicKey: await request.publicKey.export(),
    signingKey: ca.keys.privateKey,
    signingAlgorithm,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension(
        [opts.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth],
        false,
      ),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  return cert.toString('pem');
}
