import t from 'tap';
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { inspect } from 'node:util';
import { KubebootError } from '../../../agent/errors.js';
import { KEY_ALGORITHMS } from '../../../agent/identity.js';
import { generateKey, keyMatchesCertificate, parsePrivateKey, publicKeyDerOfCertificate, samePublicKey } from '../../../agent/pki/keys.js';
import { x509 } from '../../../agent/pki/x509.js';

t.test('every algorithm round-trips generate → PEM → parse with the same public key', async (t) => {
  for (const algorithm of KEY_ALGORITHMS) {
    const key = await generateKey(algorithm);
    t.equal(key.algorithm, algorithm);
    const expectedType = algorithm.startsWith('ecdsa-') ? 'EC PRIVATE KEY' : 'RSA PRIVATE KEY';
    t.match(key.pem, new RegExp(`^-----BEGIN ${expectedType}-----\n`), `${algorithm} is written as ${expectedType}`);
    const parsed = await parsePrivateKey(key.pem);
    t.equal(parsed.algorithm, algorithm);
    t.same(Buffer.from(parsed.publicKeyDer), Buffer.from(key.publicKeyDer), `${algorithm} public key survives`);
    // The DER is a PKIX SubjectPublicKeyInfo Node can read back.
    t.equal(createPublicKey({ key: Buffer.from(key.publicKeyDer), format: 'der', type: 'spki' }).type, 'public');
  }
});

t.test('reads PKCS#8 and PKCS#1 keys written by other tools', async (t) => {
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-384' });
  const pkcs8 = ec.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const fromPkcs8 = await parsePrivateKey(pkcs8);
  t.equal(fromPkcs8.algorithm, 'ecdsa-p384');
  t.ok(samePublicKey(fromPkcs8.publicKeyDer, new Uint8Array(ec.publicKey.export({ type: 'spki', format: 'der' }))));

  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pkcs1 = rsa.privateKey.export({ type: 'pkcs1', format: 'pem' }).toString();
  t.equal((await parsePrivateKey(pkcs1)).algorithm, 'rsa-2048');
  t.equal((await parsePrivateKey(rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString())).algorithm, 'rsa-2048');
});

t.test('finds the key after EC PARAMETERS or certificates in the same file', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const params = '-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n';
  const parsed = await parsePrivateKey(params + key.pem);
  t.ok(samePublicKey(parsed.publicKeyDer, key.publicKeyDer));
});

t.test('rejects garbage, unsupported and encrypted keys without quoting the input', async (t) => {
  const secretLooking = 'MHcCAQEEIsecretsecretsecret';
  const cases: [string, RegExp][] = [
    ['not a pem at all', /no private key found/],
    [`-----BEGIN EC PRIVATE KEY-----\n${secretLooking}AAAAA\n-----END EC PRIVATE KEY-----\n`, /does not parse/],
    [`-----BEGIN EC PRIVATE KEY-----\n${secretLooking}*\n-----END EC PRIVATE KEY-----\n`, /not valid base64/],
    [generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), /unsupported private key type ed25519/],
    [
      generateKeyPairSync('ec', { namedCurve: 'secp256k1' }).privateKey.export({ type: 'sec1', format: 'pem' }).toString(),
      /unsupported EC curve secp256k1/,
    ],
    [
      generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs1', format: 'pem' }).toString(),
      /unsupported RSA key size 1024/,
    ],
    [
      generateKeyPairSync('ec', { namedCurve: 'P-256' })
        .privateKey.export({ type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'x' })
        .toString(),
      /encrypted private keys are not supported/,
    ],
  ];
  for (const [pem, message] of cases) {
    const err = await parsePrivateKey(pem).then(
      () => null,
      (e: unknown) => e,
    );
    t.type(err, KubebootError);
    t.match((err as Error).message, message);
    t.notMatch((err as Error).message, secretLooking);
    t.notMatch((err as Error).message, /BEGIN/);
  }
});

t.test('never shows the private key PEM when logged or serialised', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const body = key.pem.split('\n')[1] as string;
  t.notMatch(JSON.stringify(key), body);
  t.notMatch(inspect(key), body);
  t.notMatch(inspect({ nested: key }, { depth: 5 }), body);
  t.match(inspect(key), /ecdsa-p256/);
});

t.test('the private half cannot be exported from the WebCrypto pair', async (t) => {
  const key = await generateKey('ecdsa-p256');
  t.equal(key.keyPair.privateKey.extractable, false);
  t.ok(createPrivateKey(key.pem), 'the PEM is still the complete key');
});

t.test('keyMatchesCertificate tells our certificate from one for another key', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const other = await generateKey('ecdsa-p256');
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=self',
    keys: key.keyPair,
    signingAlgorithm: key.signingAlgorithm,
  });
  const pem = cert.toString('pem');
  t.equal(keyMatchesCertificate(key, pem), true);
  t.equal(keyMatchesCertificate(other, pem), false);
  t.ok(samePublicKey(publicKeyDerOfCertificate(pem), key.publicKeyDer));
  t.throws(() => publicKeyDerOfCertificate(key.pem), KubebootError);
});
