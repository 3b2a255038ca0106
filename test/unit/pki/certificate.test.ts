import t from 'tap';
import { randomBytes, type webcrypto } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { KubebootError } from '../../../agent/errors.js';
import type { KeyUsage, Subject } from '../../../agent/identity.js';
import { assessCredential, checkIssuedCertificate, parseCertificateChain } from '../../../agent/pki/certificate.js';
import { generateKey, type PrivateKey } from '../../../agent/pki/keys.js';
import { x509 } from '../../../agent/pki/x509.js';

const now = new Date('2030-06-01T12:00:00Z');
const hour = 3600_000;
const day = 24 * hour;
const ecdsa = { name: 'ECDSA', namedCurve: 'P-256' };
const sha256 = { name: 'ECDSA', hash: 'SHA-256' };

const node: Subject = { commonName: 'system:node:worker-1', organizations: ['system:nodes'] };
const clientUsages: KeyUsage[] = ['digital signature', 'client auth'];

interface Ca {
  cert: x509.X509Certificate;
  pem: string;
  keys: webcrypto.CryptoKeyPair;
}

const serial = () => '01' + randomBytes(8).toString('hex');

async function makeCa(
  cn: string,
  validity = { notBefore: new Date(now.getTime() - 365 * day), notAfter: new Date(now.getTime() + 365 * day) },
  issuer?: Ca,
): Promise<Ca> {
  const keys = (await crypto.subtle.generateKey(ecdsa, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const extensions = [
    new x509.BasicConstraintsExtension(true, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
  ];
  const cert = issuer
    ? await x509.X509CertificateGenerator.create({
        subject: `CN=${cn}`,
        issuer: issuer.cert.subjectName,
        publicKey: keys.publicKey,
        signingKey: issuer.keys.privateKey,
        signingAlgorithm: sha256,
        serialNumber: serial(),
        extensions,
        ...validity,
      })
    : await x509.X509CertificateGenerator.createSelfSigned({
        name: `CN=${cn}`,
        keys,
        signingAlgorithm: sha256,
        serialNumber: serial(),
        extensions,
        ...validity,
      });
  return { cert, pem: cert.toString('pem') + '\n', keys };
}

interface LeafSpec {
  key: PrivateKey;
  subject?: Subject;
  eku?: string[] | null;
  ku?: number | null;
  notBefore?: Date;
  notAfter?: Date;
  dnsNames?: string[];
  ipAddresses?: string[];
  /** BasicConstraints CA flag (a misbehaving signer). */
  ca?: boolean;
}

/** Signs a leaf the way kube-controller-manager's signer would (5 minutes backdated, 1 year). */
async function issue(ca: Ca, spec: LeafSpec): Promise<string> {
  const subject = spec.subject ?? node;
  const extensions: x509.Extension[] = [new x509.BasicConstraintsExtension(spec.ca ?? false, undefined, true)];
  const ku = spec.ku === undefined ? x509.KeyUsageFlags.digitalSignature : spec.ku;
  if (ku !== null) extensions.push(new x509.KeyUsagesExtension(ku, true));
  const eku = spec.eku === undefined ? [x509.ExtendedKeyUsage.clientAuth] : spec.eku;
  if (eku !== null) extensions.push(new x509.ExtendedKeyUsageExtension(eku));
  if (spec.dnsNames || spec.ipAddresses) {
    extensions.push(
      new x509.SubjectAlternativeNameExtension([
        ...(spec.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
        ...(spec.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
      ]),
    );
  }
  const cert = await x509.X509CertificateGenerator.create({
    // CN first here, O first in our CSRs: order must not matter.
    subject: [{ CN: [subject.commonName] }, ...subject.organizations.map((o) => ({ O: [o] }))],
    issuer: ca.cert.subjectName,
    publicKey: spec.key.keyPair.publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm: sha256,
    serialNumber: serial(),
    notBefore: spec.notBefore ?? new Date(now.getTime() - 5 * 60_000),
    notAfter: spec.notAfter ?? new Date(now.getTime() + 365 * day),
    extensions,
  });
  return cert.toString('pem') + '\n';
}

t.test('parseCertificateChain reads every certificate and skips the key in a combined file', async (t) => {
  const ca = await makeCa('kubernetes');
  const key = await generateKey('ecdsa-p256');
  const leafPem = await issue(ca, { key, dnsNames: ['worker-1'], ipAddresses: ['10.0.0.7'] });
  const chain = parseCertificateChain(leafPem + ca.pem + key.pem);
  t.equal(chain.length, 2);
  const [leaf, root] = chain as [(typeof chain)[0], (typeof chain)[0]];
  t.same(leaf.subject, node);
  t.equal(leaf.issuerCommonName, 'kubernetes');
  t.same(leaf.extKeyUsages, ['client auth']);
  t.same(leaf.keyUsages, ['digital signature']);
  t.same(leaf.dnsNames, ['worker-1']);
  t.same(leaf.ipAddresses, ['10.0.0.7']);
  t.equal(leaf.isCa, false);
  t.equal(root.isCa, true);
  t.equal(leaf.notAfter.getTime(), now.getTime() + 365 * day);
  t.match(leaf.serialNumber, /^01[0-9a-f]{16}$/);
  t.equal(leaf.pem, leafPem, 'pem is this certificate alone');
  t.equal(root.subject.organizations.length, 0);
});

t.test('parseCertificateChain refuses text without certificates', async (t) => {
  const key = await generateKey('ecdsa-p256');
  t.throws(() => parseCertificateChain(key.pem), KubebootError);
  t.throws(() => parseCertificateChain(''), KubebootError);
  t.throws(() => parseCertificateChain('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n'), {
    message: /certificate 1 in PEM does not parse/,
  });
});

t.test('checkIssuedCertificate', async (t) => {
  const ca = await makeCa('kubernetes');
  const key = await generateKey('ecdsa-p256');
  const request = { caPems: [ca.pem], publicKeyDer: key.publicKeyDer, subject: node, usages: clientUsages, now };

  t.test('accepts the certificate we asked for', async (t) => {
    t.same(await checkIssuedCertificate({ ...request, certPem: await issue(ca, { key }) }), []);
  });

  t.test('accepts a CA given as part of a bundle, and an intermediate sent with the leaf', async (t) => {
    const oldCa = await makeCa('old-ca');
    const intermediate = await makeCa('intermediate', undefined, ca);
    const leaf = await issue(intermediate, { key });
    t.same(await checkIssuedCertificate({ ...request, caPems: [oldCa.pem + ca.pem], certPem: leaf + intermediate.pem }), []);
    t.match(await checkIssuedCertificate({ ...request, certPem: leaf }), [/not signed by the cluster CA/], 'the intermediate is needed');
  });

  t.test('accepts organizations in another order and an RSA key with key encipherment', async (t) => {
    const rsa = await generateKey('rsa-2048');
    const subject = { commonName: 'system:node:worker-1', organizations: ['a', 'b'] };
    const certPem = await issue(ca, {
      key: rsa,
      subject: { ...subject, organizations: ['b', 'a'] },
      ku: x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
    });
    const usages: KeyUsage[] = ['digital signature', 'key encipherment', 'client auth'];
    t.same(await checkIssuedCertificate({ ...request, publicKeyDer: rsa.publicKeyDer, subject, usages, certPem }), []);
  });

  t.test('refuses a certificate for another key', async (t) => {
    const other = await generateKey('ecdsa-p256');
    t.match(await checkIssuedCertificate({ ...request, certPem: await issue(ca, { key: other }) }), [/different public key/]);
  });

  t.test('refuses a certificate for another CN', async (t) => {
    const certPem = await issue(ca, { key, subject: { ...node, commonName: 'system:node:worker-2' } });
    t.same(await checkIssuedCertificate({ ...request, certPem }), [
      'certificate is for CN=system:node:worker-2, requested CN=system:node:worker-1',
    ]);
  });

  t.test('refuses a certificate with other organizations', async (t) => {
    for (const organizations of [['system:masters'], [], ['system:nodes', 'system:masters']]) {
      const certPem = await issue(ca, { key, subject: { ...node, organizations } });
      t.match(await checkIssuedCertificate({ ...request, certPem }), [/^certificate has O=\[.*\], requested O=\[system:nodes\]$/]);
    }
  });

  t.test('refuses a certificate without client auth or digital signature', async (t) => {
    const serverOnly = await issue(ca, { key, eku: [x509.ExtendedKeyUsage.serverAuth] });
    t.same(await checkIssuedCertificate({ ...request, certPem: serverOnly }), ['certificate does not allow client auth']);
    const noSignature = await issue(ca, { key, ku: x509.KeyUsageFlags.keyEncipherment });
    t.same(await checkIssuedCertificate({ ...request, certPem: noSignature }), ['certificate does not allow digital signature']);
  });

  t.test('treats absent usage extensions as unrestricted (RFC 5280)', async (t) => {
    t.same(await checkIssuedCertificate({ ...request, certPem: await issue(ca, { key, eku: null, ku: null }) }), []);
  });

  t.test('refuses a certificate signed by another CA, even one with the same name', async (t) => {
    const impostor = await makeCa('kubernetes');
    t.match(await checkIssuedCertificate({ ...request, certPem: await issue(impostor, { key }) }), [
      /^certificate \(issuer CN=kubernetes\) is not signed by the cluster CA$/,
    ]);
  });

  t.test('refuses a certificate that has expired or is not yet valid', async (t) => {
    const expired = await issue(ca, { key, notBefore: new Date(now.getTime() - 2 * day), notAfter: new Date(now.getTime() - day) });
    t.match(await checkIssuedCertificate({ ...request, certPem: expired }), [/^certificate expired at 2030-05-31T12:00:00.000Z$/]);
    const atNotAfter = await issue(ca, { key, notBefore: new Date(now.getTime() - day), notAfter: now });
    t.match(await checkIssuedCertificate({ ...request, certPem: atNotAfter }), [/expired/], 'notAfter itself is too late');
    const future = await issue(ca, { key, notBefore: new Date(now.getTime() + hour) });
    t.match(await checkIssuedCertificate({ ...request, certPem: future }), [/^certificate is not valid until 2030-06-01T13:00:00.000Z$/]);
  });

  t.test('refuses a certificate whose CA has expired', async (t) => {
    const oldCa = await makeCa('kubernetes', { notBefore: new Date(now.getTime() - 2 * day), notAfter: new Date(now.getTime() - day) });
    t.match(await checkIssuedCertificate({ ...request, caPems: [oldCa.pem], certPem: await issue(oldCa, { key }) }), [
      /^CA certificate CN=kubernetes expired at/,
    ]);
  });

  t.test('refuses a serving certificate that lacks a requested name', async (t) => {
    const serving = { ...request, usages: ['digital signature', 'server auth'] as KeyUsage[] };
    const certPem = await issue(ca, { key, eku: [x509.ExtendedKeyUsage.serverAuth], dnsNames: ['worker-1'], ipAddresses: ['::1'] });
    t.same(await checkIssuedCertificate({ ...serving, certPem, dnsNames: ['worker-1'], ipAddresses: ['0:0:0:0:0:0:0:1'] }), []);
    t.same(await checkIssuedCertificate({ ...serving, certPem, dnsNames: ['worker-1.example'], ipAddresses: ['10.0.0.7'] }), [
      'certificate lacks DNS name worker-1.example',
      'certificate lacks IP address 10.0.0.7',
    ]);
  });

  t.test('refuses a leaf that is a CA or may sign certificates or CRLs', async (t) => {
    t.match(await checkIssuedCertificate({ ...request, certPem: await issue(ca, { key, ca: true }) }), [
      /^certificate is a CA \(basic constraints CA:TRUE\)$/,
    ]);
    const signer = await issue(ca, { key, ku: x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyCertSign });
    t.match(await checkIssuedCertificate({ ...request, certPem: signer }), [/^certificate allows cert sign$/]);
    const crl = await issue(ca, { key, ku: x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.cRLSign });
    t.match(await checkIssuedCertificate({ ...request, certPem: crl }), [/^certificate allows crl sign$/]);
  });

  t.test('refuses DNS or IP names on a client certificate', async (t) => {
    const named = await issue(ca, { key, dnsNames: ['evil.example'], ipAddresses: ['10.0.0.9'] });
    t.same(await checkIssuedCertificate({ ...request, certPem: named }), [
      'client certificate carries DNS names or IP addresses it did not ask for',
    ]);
  });

  t.test('refuses a chain longer than the cap without trying every order', async (t) => {
    // Self-issued CAs under one name: each could be the issuer of each other;
    // trying every permutation took 17 s for eight of them.
    const keys = (await crypto.subtle.generateKey(ecdsa, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
    const loops: string[] = [];
    for (let i = 0; i < 12; i++) {
      const c = await x509.X509CertificateGenerator.createSelfSigned({
        name: 'CN=loop',
        keys,
        signingAlgorithm: sha256,
        serialNumber: serial(),
        extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
        notBefore: new Date(now.getTime() - day),
        notAfter: new Date(now.getTime() + day),
      });
      loops.push(c.toString('pem') + '\n');
    }
    const loopCa = { cert: new x509.X509Certificate(loops[0]!), pem: loops[0]!, keys };
    const leaf = await issue(loopCa, { key });
    const started = performance.now();
    t.match(await checkIssuedCertificate({ ...request, certPem: leaf + loops.slice(1, 9).join('') }), [/not signed by the cluster CA/]);
    t.ok(performance.now() - started < 2_000, 'eight self-issued intermediates are walked in bounded time');
    t.match(await checkIssuedCertificate({ ...request, certPem: leaf + loops.slice(1).join('') }), [
      /chain has 12 certificates; at most 9 are accepted/,
    ]);
  });

  t.test('follows intermediates sent in any order', async (t) => {
    const a = await makeCa('intermediate-a', undefined, ca);
    const b = await makeCa('intermediate-b', undefined, a);
    const leaf = await issue(b, { key });
    t.same(await checkIssuedCertificate({ ...request, certPem: leaf + a.pem + b.pem }), []);
  });

  t.test('reports every problem at once', async (t) => {
    const impostor = await makeCa('other');
    const other = await generateKey('ecdsa-p256');
    const certPem = await issue(impostor, { key: other, subject: { commonName: 'x', organizations: [] }, eku: [] });
    t.equal((await checkIssuedCertificate({ ...request, certPem })).length, 5);
  });

  t.test('reports a certificate that does not parse as a problem', async (t) => {
    t.match(await checkIssuedCertificate({ ...request, certPem: 'garbage' }), [/does not parse/]);
  });
});

t.test('assessCredential', async (t) => {
  const ca = await makeCa('kubernetes');
  const key = await generateKey('ecdsa-p256');
  const certPem = await issue(ca, { key });
  const base = { certPem, keyPem: key.pem, caPems: [ca.pem], subject: node, now };

  t.test('keeps a valid credential and reports when it expires', async (t) => {
    t.same(await assessCredential(base), { usable: true, notAfter: new Date(now.getTime() + 365 * day) });
    t.same(
      (await assessCredential({ ...base, certPem: certPem + key.pem, keyPem: certPem + key.pem })).usable,
      true,
      'combined kubelet-client-current.pem',
    );
  });

  t.test('replaces a credential whose certificate or key does not parse', async (t) => {
    t.match(await assessCredential({ ...base, certPem: '' }), { usable: false, reason: /certificate does not parse/ });
    const noKey = await assessCredential({ ...base, keyPem: certPem });
    t.match(noKey, { usable: false, reason: /private key does not parse/ });
    t.ok(noKey.notAfter, 'notAfter is known once the certificate parsed');
  });

  t.test('replaces a credential whose key is not the certificate key', async (t) => {
    const other = await generateKey('ecdsa-p256');
    t.match(await assessCredential({ ...base, keyPem: other.pem }), { usable: false, reason: 'certificate and private key do not match' });
  });

  t.test('replaces an expired credential (kubernetes#65991)', async (t) => {
    const later = new Date(now.getTime() + 366 * day);
    t.match(await assessCredential({ ...base, now: later }), { usable: false, reason: /^certificate expired at/ });
  });

  t.test('keeps a credential that is not yet valid: that is clock skew', async (t) => {
    t.match(await assessCredential({ ...base, now: new Date(now.getTime() - hour) }), { usable: true });
  });

  t.test('replaces a credential from another cluster CA', async (t) => {
    const newCa = await makeCa('kubernetes');
    t.match(await assessCredential({ ...base, caPems: [newCa.pem] }), { usable: false, reason: /not signed by the cluster CA/ });
    t.match(await assessCredential({ ...base, caPems: [newCa.pem + ca.pem] }), { usable: true }, 'a bundle with the old CA still works');
  });

  t.test('replaces a credential for another identity', async (t) => {
    t.match(await assessCredential({ ...base, subject: { ...node, commonName: 'system:node:worker-2' } }), {
      usable: false,
      reason: 'certificate is for CN=system:node:worker-1, O=[system:nodes], configured CN=system:node:worker-2, O=[system:nodes]',
    });
    t.match(await assessCredential({ ...base, subject: { ...node, organizations: [] } }), { usable: false, reason: /configured/ });
  });

  t.test('never quotes the key in its reason', async (t) => {
    const broken = key.pem.replace(/\n(.)/, '\nA$1');
    const result = await assessCredential({ ...base, keyPem: broken });
    t.equal(result.usable, false);
    for (const line of key.pem.split('\n').filter((l) => l.length > 20)) t.notMatch(result.reason ?? '', line);
  });
});
