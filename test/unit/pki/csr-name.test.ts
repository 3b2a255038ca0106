import t from 'tap';
import { createHash } from 'node:crypto';
import type { KeyUsage, Subject } from '../../../agent/identity.js';
import { csrName } from '../../../agent/pki/csr-name.js';
import { generateKey } from '../../../agent/pki/keys.js';

const subject: Subject = { commonName: 'system:node:worker-1', organizations: ['system:nodes'] };
const usages: KeyUsage[] = ['digital signature', 'client auth'];

// A fixed P-256 SubjectPublicKeyInfo and the name Go computed for it with
// sha512.New512_256 and base64.RawURLEncoding, the primitives the kubelet's
// digestedName uses (Go 1.26, run once by hand).
const goSpki = Buffer.from(
  'MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAELqr3ueHruQHEjWdv3XK7AKWQAo5ZKiKgDMNY4eEaclphf2/oE6twLRj3eNYh46+0rVLojVSPoFxaheAYRgiU8g==',
  'base64',
);
const goName = 'node-csr-BRORCDSRG_TC5DccfQL4wFinbfQcou7pdlFVGh_IfW0';

t.test('names the CSR exactly as the kubelet would for the same key, subject and usages', async (t) => {
  t.equal(csrName(goSpki, subject, usages), goName);
});

t.test('agrees with a step-by-step recomputation of the digest', async (t) => {
  // Independent path: standard base64 made URL-safe by hand, one buffer, one digest.
  const b64url = (b: Buffer) => b.toString('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const fields = [
    goSpki,
    Buffer.from(subject.commonName),
    ...subject.organizations.map((o) => Buffer.from(o)),
    ...usages.map((u) => Buffer.from(u)),
  ];
  const input = fields.map((f) => b64url(f) + '|').join('');
  const digest = createHash('sha512-256').update(Buffer.from(input, 'latin1')).digest();
  t.equal(csrName(goSpki, subject, usages), 'node-csr-' + b64url(digest));
});

t.test('is stable for the same inputs so a restarted agent finds its earlier CSR', async (t) => {
  const key = await generateKey('ecdsa-p256');
  t.equal(csrName(key.publicKeyDer, subject, usages), csrName(new Uint8Array(key.publicKeyDer), { ...subject }, [...usages]));
});

t.test('changes with the key, the CN, the organizations and the usage order', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const other = await generateKey('ecdsa-p256');
  const base = csrName(key.publicKeyDer, subject, usages);
  const variants = [
    csrName(other.publicKeyDer, subject, usages),
    csrName(key.publicKeyDer, { ...subject, commonName: 'system:node:worker-2' }, usages),
    csrName(key.publicKeyDer, { ...subject, organizations: [] }, usages),
    csrName(key.publicKeyDer, { ...subject, organizations: ['system:nodes', 'extra'] }, usages),
    csrName(key.publicKeyDer, subject, ['client auth', 'digital signature']),
    csrName(key.publicKeyDer, subject, ['digital signature', 'key encipherment', 'client auth']),
    // The separator keeps field boundaries: CN "ab" + O "c" differs from CN "a" + O "bc".
    csrName(key.publicKeyDer, { commonName: 'ab', organizations: ['c'] }, usages),
    csrName(key.publicKeyDer, { commonName: 'a', organizations: ['bc'] }, usages),
  ];
  t.equal(new Set([base, ...variants]).size, variants.length + 1, 'all names differ');
});

t.test('is a valid Kubernetes object name', async (t) => {
  const key = await generateKey('rsa-2048');
  const name = csrName(key.publicKeyDer, { commonName: 'x'.repeat(300), organizations: ['y'.repeat(300)] }, usages);
  t.ok(name.length <= 253, `length ${name.length}`);
  t.equal(name.length, 'node-csr-'.length + 43, 'SHA-512/256 is 32 bytes, 43 base64url characters');
  t.match(name, /^node-csr-[A-Za-z0-9_-]+$/);
  t.notMatch(name, /=/);
});
