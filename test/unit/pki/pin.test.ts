import t from 'tap';
import { createHash, X509Certificate, type webcrypto } from 'node:crypto';
import { KubebootError } from '../../../agent/errors.js';
import { caCertHash, pinnedCertificates } from '../../../agent/pki/pin.js';
import { canonicalPin, isValidPin } from '../../../agent/pki/pin-format.js';
import { x509 } from '../../../agent/pki/x509.js';

async function selfSigned(cn: string): Promise<string> {
  const alg = { name: 'ECDSA', namedCurve: 'P-256' };
  const keys = (await crypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: `CN=${cn}`,
    keys,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
  });
  return cert.toString('pem') + '\n';
}

t.test('hashes the CA public key as kubeadm token create --print-join-command shows it', async (t) => {
  const ca = await selfSigned('kubernetes');
  // Independently: Node's view of the certificate's public key, re-encoded as SPKI.
  const spki = new X509Certificate(ca).publicKey.export({ type: 'spki', format: 'der' });
  const expected = 'sha256:' + createHash('sha256').update(spki).digest('hex');
  t.equal(caCertHash(ca), expected);
  t.match(caCertHash(ca), /^sha256:[0-9a-f]{64}$/);
});

t.test('a CA in the bundle matching a pin is accepted; none matching is refused', async (t) => {
  const ca = await selfSigned('kubernetes');
  const other = await selfSigned('kubernetes');
  const older = await selfSigned('old-ca');
  const count = (pem: string, pins: string[]) => pinnedCertificates(pem, pins).count;
  t.equal(count(ca, [caCertHash(ca)]), 1);
  t.equal(count(older + ca, [caCertHash(ca)]), 1, 'a pinned certificate in a bundle is found');
  t.equal(count(ca, ['sha256:' + '0'.repeat(64), caCertHash(ca).toUpperCase().replace('SHA256', 'sha256')]), 1);
  t.equal(count(other, [caCertHash(ca)]), 0, 'same name, different key');
  t.equal(count(ca, []), 0);
  t.equal(count(ca, ['not-a-pin']), 0);
  t.equal(pinnedCertificates(older + ca, [caCertHash(older), caCertHash(ca)]).count, 2, 'every certificate of a bundle is hashed');
});

t.test('only the pinned certificates of a bundle are handed on: an appended CA is dropped, whatever its block type', async (t) => {
  const ca = await selfSigned('kubernetes');
  const rogue = await selfSigned('kubernetes');
  // OpenSSL also loads TRUSTED CERTIFICATE and X509 CERTIFICATE blocks as trust anchors.
  const relabelled = (label: string) => rogue.replace(/CERTIFICATE-----/g, `${label}-----`);
  const bundle = ca + rogue + relabelled('TRUSTED CERTIFICATE') + relabelled('X509 CERTIFICATE');
  const { pinned, count, dropped } = pinnedCertificates(bundle, [caCertHash(ca)]);
  t.same([count, dropped], [1, 3]);
  t.equal(pinned, ca, 'exactly the pinned certificate, re-encoded from the DER that was hashed');
  t.equal(caCertHash(pinned), caCertHash(ca));
  const both = pinnedCertificates(bundle, [caCertHash(ca), caCertHash(rogue)]);
  t.same([both.count, both.dropped], [2, 2], 'a CA rotation pins both; other block types still never pass');
});

t.test('validates and normalises pins as kubeadm accepts them', async (t) => {
  const hex = 'AB'.repeat(32);
  t.equal(isValidPin(`sha256:${hex}`), true);
  t.equal(canonicalPin(`SHA256:${hex}`), `sha256:${hex.toLowerCase()}`);
  t.equal(canonicalPin(` sha256:${hex}\n`), `sha256:${hex.toLowerCase()}`);
  for (const bad of ['', hex, `sha256:${hex.slice(2)}`, `sha256:${hex}00`, `sha1:${hex}`, `sha256:${'g'.repeat(64)}`, `sha256: ${hex}`]) {
    t.equal(isValidPin(bad), false, JSON.stringify(bad));
    t.equal(canonicalPin(bad), null, `${JSON.stringify(bad)} has no canonical form`);
  }
});

t.test('refuses CA text that holds no certificate', async (t) => {
  t.throws(() => caCertHash('nothing here'), KubebootError);
});
