// Whether a CSR found under our name after a 409 is ours to adopt
// (client-go's ensureCompatible, plus kubernetes#65991: never an expired
// certificate), as a table over what can differ.
import t from 'tap';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { compatibility } from '../../../agent/credential/compatibility.js';
import type { CertificateSigningRequest } from '../../../agent/kube/csr-state.js';
import { generateKey } from '../../../agent/pki/keys.js';
import { createCsrPem } from '../../../agent/pki/pkcs10.js';
import { createCa, issueLeaf } from '../../support/pki.js';

const kubelet = identitiesFor(defaultConfig('worker-1'))[0]!;
const now = new Date('2026-06-01T00:00:00Z');
const key = await generateKey('ecdsa-p256');
const otherKey = await generateKey('ecdsa-p256');
const ca = await createCa('cluster-ca');
const certUntil = async (notAfter: Date) =>
  (await issueLeaf(ca, { ...kubelet.subject, usage: 'client', notBefore: new Date(notAfter.getTime() - 86_400_000), notAfter })).certPem;

const request = (o: { key?: typeof key; commonName?: string; organizations?: string[] } = {}) =>
  createCsrPem({
    key: o.key ?? key,
    subject: { commonName: o.commonName ?? kubelet.subject.commonName, organizations: o.organizations ?? kubelet.subject.organizations },
  });
const existing = (requestPem: string, o: { signerName?: string; certificate?: string } = {}): CertificateSigningRequest => ({
  kind: 'CertificateSigningRequest',
  metadata: { name: 'node-csr-x', uid: 'u' },
  spec: { request: Buffer.from(requestPem).toString('base64'), signerName: o.signerName ?? kubelet.signerName },
  ...(o.certificate ? { status: { certificate: Buffer.from(o.certificate).toString('base64') } } : {}),
});
/** The same request with one byte of its signature flipped. */
const tampered = (pem: string) => {
  const der = Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  der[der.length - 2]! ^= 0x01;
  return `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
};

const rows: [string, CertificateSigningRequest, string | null | RegExp][] = [
  ['ours, pending', existing(await request()), null],
  ['ours, issued and still valid', existing(await request(), { certificate: await certUntil(new Date(now.getTime() + 3600_000)) }), null],
  [
    'ours, but its certificate has expired (kubernetes#65991)',
    existing(await request(), { certificate: await certUntil(new Date(now.getTime() - 1000)) }),
    /^its certificate expired at 2026-05-31T23:59:59/,
  ],
  [
    'ours, its certificate expiring this very moment',
    existing(await request(), { certificate: await certUntil(now) }),
    /^its certificate expired at 2026-06-01T00:00:00/,
  ],
  [
    'another signer',
    existing(await request(), { signerName: 'kubernetes.io/kube-apiserver-client' }),
    'signer is kubernetes.io/kube-apiserver-client, want kubernetes.io/kube-apiserver-client-kubelet',
  ],
  ['a request that does not parse', existing('not a request'), 'its request cannot be parsed'],
  ['made with another key', existing(await request({ key: otherKey })), 'it was made with another key'],
  ['our key, but the signature does not verify', existing(tampered(await request())), 'it was made with another key'],
  [
    'another node name',
    existing(await request({ commonName: 'system:node:worker-2' })),
    'its subject is CN=system:node:worker-2, want CN=system:node:worker-1',
  ],
  [
    // The words name only the CN: the organizations differ here (an old wart, kept: behaviour unchanged).
    'another organization',
    existing(await request({ organizations: ['system:masters'] })),
    'its subject is CN=system:node:worker-1, want CN=system:node:worker-1',
  ],
];

t.test('a CSR found under our name is adopted only when it is ours', async (t) => {
  for (const [name, csr, want] of rows) {
    const got = await compatibility(csr, kubelet, key, now);
    if (want instanceof RegExp) t.match(got, want, name);
    else t.equal(got, want, name);
  }
});
