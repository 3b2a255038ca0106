// The signed trust statement: what `kubeboot ca-rotation publish --ca-key`
// signs and what a node verifies before it adds a CA, for every key type a
// cluster CA has (kubeadm's RSA, ECDSA, Ed25519).
import { KeyObject, type webcrypto } from 'node:crypto';
import t from 'tap';
import { x509 } from '../../../agent/pki/x509.js';
import { trustedBundle } from '../../../agent/trust/bundle.js';
import {
  algorithmOf,
  effectiveFloor,
  MAX_VERSION_AHEAD_S,
  nextStatement,
  nextVersion,
  signStatement,
  statementFor,
  verifyStatement,
  type TrustStatement,
} from '../../../agent/trust/statement.js';
import { subjectName } from '../../support/pki.js';

const now = new Date('2026-12-02T10:00:00Z');
const day = 24 * 3600_000;

/** A self-signed CA on a key of the given kind, and its Node KeyObject. */
async function caOn(kind: 'rsa' | 'P-256' | 'P-384' | 'ed25519'): Promise<{ pem: string; key: KeyObject }> {
  const alg =
    kind === 'rsa'
      ? { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256', publicExponent: new Uint8Array([1, 0, 1]), modulusLength: 2048 }
      : kind === 'ed25519'
        ? { name: 'Ed25519' }
        : { name: 'ECDSA', namedCurve: kind, hash: kind === 'P-384' ? 'SHA-384' : 'SHA-256' };
  const keys = (await crypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01',
    name: subjectName({ commonName: `ca-${kind}` }),
    notBefore: new Date(now.getTime() - day),
    notAfter: new Date(now.getTime() + 365 * day),
    keys,
    signingAlgorithm: alg,
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
  });
  return { pem: cert.toString('pem'), key: KeyObject.from(keys.privateKey) };
}

t.test('every CA key type signs, and the node verifies with the key its bundle holds', async (t) => {
  const expected = { rsa: 'RS256', 'P-256': 'ES256', 'P-384': 'ES384', ed25519: 'EdDSA' } as const;
  for (const kind of ['rsa', 'P-256', 'P-384', 'ed25519'] as const) {
    const ca = await caOn(kind);
    const other = await caOn('P-256');
    const trusted = trustedBundle(ca.pem);
    const bundle = trustedBundle(ca.pem + other.pem);
    t.equal(algorithmOf(ca.key), expected[kind], `${kind}: signs ${expected[kind]}`);
    const signed = signStatement(nextStatement(bundle, null, 0, now, day), ca.key, trusted.pins[0]!);
    const check = statementFor(verifyStatement({ signed, trusted, now }), bundle.hash, 0);
    t.ok(check.ok, `${kind}: verified`);
    if (check.ok) t.equal(check.signedBy, trusted.pins[0], `${kind}: names the CA that signed`);
    const flipped = { ...signed, payload: signed.payload.replace('"cas"', '"cas" ') };
    t.match(verifyStatement({ signed: flipped, trusted, now }), { ok: false, problem: 'bad-signature' }, `${kind}: one byte changed fails`);
  }
});

t.test('a version only moves forward, even when the ConfigMap lost the last statement', async (t) => {
  const ca = await caOn('P-256');
  const bundle = trustedBundle(ca.pem);
  const first = nextStatement(bundle, null, 0, now, day);
  t.equal(first.version, Math.floor(now.getTime() / 1000), 'from the clock when nothing was published');
  t.equal(nextStatement(bundle, null, first.version, now, day).version, first.version + 1, 'one past the last, in the same second');
  t.ok(nextStatement(bundle, null, 0, new Date(now.getTime() + 1000), day).version > first.version, 'a wiped statement still goes forward');
  const signed = signStatement(first, ca.key, bundle.pins[0]!);
  const check = verifyStatement({ signed, trusted: bundle, now });
  t.match(statementFor(check, bundle.hash, first.version), { ok: false, problem: 'replayed' }, 'the same version again: replayed');
  t.match(statementFor(check, 'f'.repeat(64), 0), { ok: false, problem: 'signature-mismatch' }, 'for another bundle: mismatch');
  t.match(verifyStatement({ signed, trusted: bundle, now: new Date(now.getTime() + 2 * day) }), {
    ok: false,
    problem: 'signature-expired',
  });
});

t.test('a version from the future is refused: one leaked key cannot freeze every later CA addition', async (t) => {
  const ca = await caOn('P-256');
  const bundle = trustedBundle(ca.pem);
  const at = (version: number): TrustStatement => ({ ...nextStatement(bundle, null, 0, now, day), version });
  const check = (version: number) =>
    statementFor(verifyStatement({ signed: signStatement(at(version), ca.key, bundle.pins[0]!), trusted: bundle, now }), bundle.hash, 0);
  const second = Math.floor(now.getTime() / 1000);
  t.match(
    check(Number.MAX_SAFE_INTEGER),
    { ok: false, problem: 'future-version', message: /ahead of this node's clock.*not recorded/ },
    '2^53-1: refused',
  );
  t.match(check(second + MAX_VERSION_AHEAD_S + 1), { ok: false, problem: 'future-version' }, 'one second past the skew: refused');
  t.ok(check(second + MAX_VERSION_AHEAD_S).ok, 'within the skew: a clock a few minutes apart still agrees');
  t.ok(check(second - 3600).ok, 'an hour old: the usual case');
  t.ok(check(3).ok, 'a small integer version (older statements) is an old one, still compared against the floor');
});

t.test('a recorded floor from the future is brought back to the clock, so the next publish is followed', async (t) => {
  const second = Math.floor(now.getTime() / 1000);
  t.same(effectiveFloor(Number.MAX_SAFE_INTEGER, now), { floor: second, clamped: true }, '2^53-1 recorded by an earlier release');
  t.same(
    effectiveFloor(second + MAX_VERSION_AHEAD_S, now),
    { floor: second + MAX_VERSION_AHEAD_S, clamped: false },
    'within the skew: kept',
  );
  t.same(effectiveFloor(7, now), { floor: 7, clamped: false }, 'an old-style floor: kept');
  const after = nextStatement(trustedBundle((await caOn('P-256')).pem), null, 0, new Date(now.getTime() + 1000), day);
  t.ok(after.version > effectiveFloor(Number.MAX_SAFE_INTEGER, now).floor, "the admin's next publish is above the clamped floor");
});

t.test('the admin publishes the current second, one past a version published this second, never past the skew', async (t) => {
  const second = Math.floor(now.getTime() / 1000);
  t.same(nextVersion(0, now), { version: second, ignoredAhead: null }, 'nothing before: the clock');
  t.same(nextVersion(second - 60, now), { version: second, ignoredAhead: null }, 'an older one: the clock');
  t.same(nextVersion(second, now), { version: second + 1, ignoredAhead: null }, 'twice in one second: one past');
  t.same(nextVersion(second + 300, now), { version: second + 301, ignoredAhead: null }, 'a clock behind the last publisher: one past');
  t.same(nextVersion(Number.MAX_SAFE_INTEGER, now), { version: second, ignoredAhead: Number.MAX_SAFE_INTEGER }, '2^53-1: ignored, said');
});

t.test('what is not a signed statement is named as such', async (t) => {
  const ca = await caOn('P-256');
  const trusted = trustedBundle(ca.pem);
  const signed = signStatement(nextStatement(trusted, null, 0, now, day), ca.key, trusted.pins[0]!);
  const cases: { name: string; payload: string | null; jws: string | null; problem: string }[] = [
    { name: 'nothing', payload: null, jws: null, problem: 'unsigned' },
    { name: 'a statement without a signature', payload: signed.payload, jws: null, problem: 'unsigned' },
    { name: 'an attached JWS', payload: signed.payload, jws: signed.jws.replace('..', '.eA.'), problem: 'malformed-signature' },
    {
      name: 'a header that is not JSON',
      payload: signed.payload,
      jws: `bm90IGpzb24..${signed.jws.split('.')[2]}`,
      problem: 'malformed-signature',
    },
    { name: 'a huge statement', payload: 'x'.repeat(100_000), jws: signed.jws, problem: 'malformed-signature' },
  ];
  for (const c of cases) {
    const r = verifyStatement({ signed: { payload: c.payload, jws: c.jws }, trusted, now });
    t.equal(r.ok ? 'ok' : r.problem, c.problem, c.name);
    if (!r.ok) t.notMatch(r.message, /\n/, `${c.name}: one line`);
  }
  const wrongKind = signStatement(
    { ...nextStatement(trusted, null, 0, now, day), kind: 'other' as 'kubeboot.io/trust-statement' },
    ca.key,
    trusted.pins[0]!,
  );
  t.match(
    verifyStatement({ signed: wrongKind, trusted, now }),
    { ok: false, problem: 'malformed-signature' },
    'a signed text that is no trust statement',
  );
});
