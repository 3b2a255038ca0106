import t from 'tap';
import { createHash, X509Certificate, type webcrypto } from 'node:crypto';
import { KubebootError } from '../../../agent/errors.js';
import { caCertHash, caCertHashes, matchesAnyPin } from '../../../agent/pki/pin.js';
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
  t.equal(matchesAnyPin([ca], [caCertHash(ca)]), true);
  t.equal(matchesAnyPin([older + ca], [caCertHash(ca)]), true, 'any certificate in a bundle may match');
  t.equal(matchesAnyPin([ca], ['sha256:' + '0'.repeat(64), caCertHash(ca).toUpperCase().replace('SHA256', 'sha256')]), true);
  t.equal(matchesAnyPin([other], [caCertHash(ca)]), false, 'same name, different key');
  t.equal(matchesAnyPin([ca], []), false);
  t.equal(matchesAnyPin([ca], ['not-a-pin']), false);
  t.same(caCertHashes([older + ca]), [caCertHash(older), caCertHash(ca)]);
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
  t.throws(() => matchesAnyPin(['nothing here'], []), KubebootError);
});
