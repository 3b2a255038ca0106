import t from 'tap';
import { KubebootError } from '../../../agent/errors.js';
import { KEY_ALGORITHMS, type Subject } from '../../../agent/identity.js';
import { createCsrPem, parseCsrPem } from '../../../agent/pki/pkcs10.js';
import { generateKey, samePublicKey } from '../../../agent/pki/keys.js';
import { x509 } from '../../../agent/pki/x509.js';

const node: Subject = { commonName: 'system:node:worker-1', organizations: ['system:nodes'] };

t.test('every algorithm makes a CSR whose signature verifies with our key', async (t) => {
  for (const algorithm of KEY_ALGORITHMS) {
    const key = await generateKey(algorithm);
    const pem = await createCsrPem({ key, subject: node });
    t.match(pem, /^-----BEGIN CERTIFICATE REQUEST-----\n[\s\S]+-----END CERTIFICATE REQUEST-----\n$/);
    const csr = await parseCsrPem(pem);
    t.equal(csr.signatureValid, true, `${algorithm} signature verifies`);
    t.ok(samePublicKey(csr.publicKeyDer, key.publicKeyDer), `${algorithm} carries our public key`);
    t.same(csr.subject, node);
  }
});

t.test('signs P-384 requests with SHA-384 and the others with SHA-256, as Go does', async (t) => {
  const hashOf = async (algorithm: (typeof KEY_ALGORITHMS)[number]) => {
    const key = await generateKey(algorithm);
    const csr = new x509.Pkcs10CertificateRequest(await createCsrPem({ key, subject: node }));
    return csr.signatureAlgorithm.hash.name;
  };
  t.equal(await hashOf('ecdsa-p256'), 'SHA-256');
  t.equal(await hashOf('ecdsa-p384'), 'SHA-384');
  t.equal(await hashOf('rsa-2048'), 'SHA-256');
});

t.test('a kubelet client CSR carries no SAN extension, which the approver would refuse', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const pem = await createCsrPem({ key, subject: node, dnsNames: [], ipAddresses: [] });
  const csr = new x509.Pkcs10CertificateRequest(pem);
  t.equal(csr.extensions.length, 0);
  t.same((await parseCsrPem(pem)).dnsNames, []);
});

t.test('a serving CSR requests its DNS names and IP addresses', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const pem = await createCsrPem({
    key,
    subject: node,
    dnsNames: ['worker-1', 'worker-1.example.com'],
    ipAddresses: ['10.0.0.7', '0:0:0:0:0:0:0:1'],
  });
  const csr = await parseCsrPem(pem);
  t.same(csr.dnsNames, ['worker-1', 'worker-1.example.com']);
  t.same(csr.ipAddresses, ['10.0.0.7', '::1']);
  t.equal(csr.signatureValid, true);
});

t.test('keeps several, or no, organizations and awkward characters intact', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const subjects: Subject[] = [
    { commonName: 'system:kube-proxy', organizations: [] },
    { commonName: 'system:node:a', organizations: ['system:nodes', 'team, "ops"', '#hash', 'back\\slash', 'ünïcode'] },
  ];
  for (const subject of subjects) {
    const csr = await parseCsrPem(await createCsrPem({ key, subject }));
    t.same(csr.subject, subject);
  }
});

t.test('notices a request whose signature was tampered with', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const der = new Uint8Array(x509.PemConverter.decodeFirst(await createCsrPem({ key, subject: node })));
  der[der.length - 1] = (der[der.length - 1] as number) ^ 0x01;
  const tampered = x509.PemConverter.encode(der, 'CERTIFICATE REQUEST');
  t.equal((await parseCsrPem(tampered)).signatureValid, false);
});

t.test('refuses text that holds no request', async (t) => {
  await t.rejects(parseCsrPem('nope'), KubebootError);
  await t.rejects(parseCsrPem('-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n'), KubebootError);
});
