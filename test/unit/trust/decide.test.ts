// The trust decisions of a CA rotation as tables: which bundles a node
// accepts from the cluster, which files it rewrites and whom it restarts,
// and when each identity re-issues under the signer's new CA.
import t from 'tap';
import { MAX_BUNDLE_BYTES, MAX_BUNDLE_CERTS, checkBundle, trustedBundle } from '../../../agent/trust/bundle.js';
import {
  bundleChanged,
  decideBundle,
  issuerPin,
  kubeconfigFiles,
  reissuePlan,
  rewritePlan,
  spreadOffset,
  type BundleInput,
  type Source,
  type TrustFile,
} from '../../../agent/trust/decide.js';
import { createPrivateKey } from 'node:crypto';
import { parseCertificateChain } from '../../../agent/pki/certificate.js';
import { nextStatement, signStatement } from '../../../agent/trust/statement.js';
import { x509 } from '../../../agent/pki/x509.js';
import { kubeletIdentity } from '../../support/identity.js';
import { createCa, generateKeyPair, issueLeaf, subjectName, type CertAndKey } from '../../support/pki.js';

const now = new Date();
const day = 24 * 3600_000;

/** A CA with chosen dates, or not a CA at all. */
async function customCa(commonName: string, o: { notBefore: Date; notAfter: Date; isCa?: boolean }): Promise<string> {
  const pair = await generateKeyPair();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01' + Math.floor(Math.random() * 1e12).toString(16),
    name: subjectName({ commonName }),
    notBefore: o.notBefore,
    notAfter: o.notAfter,
    keys: pair.keys,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    extensions: [new x509.BasicConstraintsExtension(o.isCa ?? true, undefined, true)],
  });
  return cert.toString('pem');
}

const ca1 = await createCa('ca-1');
const ca2 = await createCa('ca-2');
const rogue = await createCa('rogue');
const serving = (ca: CertAndKey) => issueLeaf(ca, { commonName: 'kube-apiserver', usage: 'server', ipAddresses: ['127.0.0.1'] });
const servingCa1 = parseCertificateChain((await serving(ca1)).certPem);
const servingCa2 = parseCertificateChain((await serving(ca2)).certPem);
const kubeletCa1 = (await issueLeaf(ca1, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' })).certPem;
const kubeletCa2 = (await issueLeaf(ca2, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' })).certPem;
const proxyCa1 = (await issueLeaf(ca1, { commonName: 'system:kube-proxy', usage: 'client' })).certPem;
const expiredCa = await customCa('expired', { notBefore: new Date(now.getTime() - 10 * day), notAfter: new Date(now.getTime() - day) });
const futureCa = await customCa('future', { notBefore: new Date(now.getTime() + day), notAfter: new Date(now.getTime() + 10 * day) });
const notCa = (await issueLeaf(ca1, { commonName: 'leaf', usage: 'client' })).certPem;

/** What `kubeboot ca-rotation publish --ca-key` puts beside a bundle: a statement over it, signed by `by`. */
const signedBy = (by: CertAndKey, pem: string, o: { version?: number; validForMs?: number; signerPin?: string | null } = {}) => {
  const statement = nextStatement(trustedBundle(pem), o.signerPin ?? null, (o.version ?? 7) - 1, new Date(0), o.validForMs ?? day);
  statement.issuedAt = now.toISOString();
  statement.expiresAt = new Date(now.getTime() + (o.validForMs ?? day)).toISOString();
  return signStatement(statement, createPrivateKey(by.keyPem), trustedBundle(by.certPem).pins[0]!);
};

const good: Source = { verifiedTls: true, clientCertificate: true, authenticatedAs: 'system:node:n1', nodeCanWrite: false };
const base: BundleInput = {
  nodeName: 'n1',
  current: trustedBundle(ca1.certPem),
  candidatePem: ca1.certPem + ca2.certPem,
  what: 'kube-public/cluster-info',
  source: good,
  presented: servingCa1,
  held: [{ identity: 'kubelet', certPem: kubeletCa1 }],
  signed: signedBy(ca1, ca1.certPem + ca2.certPem),
  floor: 0,
  lastChangeAt: null,
  minChangeIntervalMs: 15 * 60_000,
  now,
};

t.test('checkBundle: what may become the node trust', async (t) => {
  const cases: { name: string; pem: string; problem: string | null; match?: RegExp }[] = [
    { name: 'one CA', pem: ca1.certPem, problem: null },
    { name: 'old and new CA', pem: ca1.certPem + ca2.certPem, problem: null },
    { name: 'text between blocks is ignored, as Go does', pem: `# old\n${ca1.certPem}# new\n${ca2.certPem}`, problem: null },
    { name: 'empty', pem: '', problem: 'unparseable', match: /no intact PEM certificate/ },
    { name: 'a torn write', pem: ca1.certPem + ca2.certPem.slice(0, 200), problem: 'unparseable' },
    { name: 'not base64', pem: '-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n', problem: 'unparseable' },
    {
      name: 'base64 that is no certificate',
      pem: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n',
      problem: 'unparseable',
      match: /entry 1 does not parse/,
    },
    { name: 'a key among the CAs', pem: ca1.certPem + ca1.keyPem, problem: 'unparseable', match: /"PRIVATE KEY" block/ },
    { name: 'a leaf certificate', pem: ca1.certPem + notCa, problem: 'not-ca', match: /entry 2 \(CN=leaf\) is not a CA/ },
    { name: 'an expired CA', pem: ca1.certPem + expiredCa, problem: 'expired', match: /CN=expired\) expired at/ },
    { name: 'a CA not valid yet', pem: ca1.certPem + futureCa, problem: 'not-yet-valid' },
    { name: 'too many entries', pem: ca1.certPem.repeat(MAX_BUNDLE_CERTS + 1), problem: 'too-big', match: /entries/ },
    { name: 'too many bytes', pem: ca1.certPem + ' '.repeat(MAX_BUNDLE_BYTES), problem: 'too-big', match: /bytes/ },
  ];
  for (const c of cases) {
    const r = checkBundle(c.pem, now, 'kube-public/cluster-info');
    t.equal(r.ok ? null : r.problem, c.problem, c.name);
    if (!r.ok) {
      t.match(r.message, /^kube-public\/cluster-info: /, `${c.name}: names the source`);
      t.notMatch(r.message, /\n/, `${c.name}: one line`);
      if (c.match) t.match(r.message, c.match, `${c.name}: says why`);
    }
  }
});

t.test('a bundle is the set of its CAs: order and duplicates do not change it', async (t) => {
  const a = checkBundle(ca1.certPem + ca2.certPem, now, 'x');
  const b = checkBundle(ca2.certPem + ca1.certPem + ca2.certPem, now, 'x');
  t.ok(a.ok && b.ok);
  if (!a.ok || !b.ok) return;
  t.equal(a.bundle.hash, b.bundle.hash);
  t.equal(b.bundle.cas.length, 2, 'duplicates dropped');
  t.notOk(bundleChanged(trustedBundle(ca2.certPem + ca1.certPem), ca1.certPem + ca2.certPem, now));
  t.ok(bundleChanged(trustedBundle(ca1.certPem), ca1.certPem + ca2.certPem, now));
  t.ok(bundleChanged(trustedBundle(ca1.certPem), 'garbage', now), 'unparseable text is judged, and refused, by decideBundle');
  t.notOk(bundleChanged(trustedBundle(ca1.certPem), null, now), 'nothing published: nothing to do');
});

t.test('decideBundle: adopt, keep or refuse', async (t) => {
  const cases: { name: string; input: Partial<BundleInput>; kind: string; reason?: string; match?: RegExp }[] = [
    { name: 'publish old + new CA: adopted', input: {}, kind: 'adopt' },
    { name: 'the same CAs again: kept', input: { candidatePem: ca1.certPem }, kind: 'keep' },
    { name: 'nothing published: kept', input: { candidatePem: null }, kind: 'keep' },
    {
      name: 'retire the old CA once everything is under the new one',
      input: {
        current: trustedBundle(ca1.certPem + ca2.certPem),
        candidatePem: ca2.certPem,
        presented: servingCa2,
        held: [{ identity: 'kubelet', certPem: kubeletCa2 }],
      },
      kind: 'adopt',
    },
    {
      name: 'read over an unverified connection',
      input: { source: { ...good, verifiedTls: false } },
      kind: 'refuse',
      reason: 'unverified-source',
      match: /not verified/,
    },
    {
      name: 'an unverified read is refused before its content is even looked at',
      input: { source: { ...good, verifiedTls: false }, candidatePem: 'garbage' },
      kind: 'refuse',
      reason: 'unverified-source',
    },
    {
      name: 'read without the client certificate',
      input: { source: { ...good, clientCertificate: false } },
      kind: 'refuse',
      reason: 'unauthenticated-source',
    },
    {
      name: 'the API server sees someone else',
      input: { source: { ...good, authenticatedAs: 'system:anonymous' } },
      kind: 'refuse',
      reason: 'unauthenticated-source',
      match: /saw system:anonymous/,
    },
    {
      name: 'a ConfigMap the node may write',
      input: { source: { ...good, nodeCanWrite: true } },
      kind: 'refuse',
      reason: 'node-writable-source',
      match: /system:node:n1 may change it/,
    },
    {
      name: 'writability unknown',
      input: { source: { ...good, nodeCanWrite: null } },
      kind: 'refuse',
      reason: 'node-writable-source',
    },
    {
      name: 'drops the CA the API server presents',
      input: { candidatePem: ca2.certPem, held: [] },
      kind: 'refuse',
      reason: 'drops-presented-ca',
      match: /would cut this node off/,
    },
    {
      name: 'presented certificate unknown',
      input: { presented: null },
      kind: 'refuse',
      reason: 'drops-presented-ca',
    },
    {
      name: 'drops the CA of a certificate the node holds',
      input: {
        current: trustedBundle(ca1.certPem + ca2.certPem),
        candidatePem: ca2.certPem,
        presented: servingCa2,
        held: [
          { identity: 'kubelet', certPem: kubeletCa2 },
          { identity: 'kube-proxy', certPem: proxyCa1 },
        ],
      },
      kind: 'refuse',
      reason: 'strands-credential',
      match: /kube-proxy certificate/,
    },
    { name: 'a non-CA entry', input: { candidatePem: ca1.certPem + notCa }, kind: 'refuse', reason: 'not-ca' },
    { name: 'an expired entry', input: { candidatePem: ca1.certPem + expiredCa }, kind: 'refuse', reason: 'expired' },
    {
      name: 'a huge bundle',
      input: { candidatePem: ca1.certPem + ' '.repeat(MAX_BUNDLE_BYTES) },
      kind: 'refuse',
      reason: 'too-big',
    },
    { name: 'an unparseable bundle', input: { candidatePem: 'not pem' }, kind: 'refuse', reason: 'unparseable' },
    {
      name: 'a rogue CA added by whoever may write cluster-info, unsigned: refused',
      input: { candidatePem: ca1.certPem + rogue.certPem, signed: { payload: null, jws: null } },
      kind: 'refuse',
      reason: 'unsigned',
      match: /adds sha256:[0-9a-f]{64} without a valid signature/,
    },
    {
      name: 'a rogue CA vouched for by itself: refused (only a CA trusted now may sign)',
      input: { candidatePem: ca1.certPem + rogue.certPem, signed: signedBy(rogue, ca1.certPem + rogue.certPem) },
      kind: 'refuse',
      reason: 'untrusted-signer',
    },
    {
      name: 'the new CA signing for itself before the node trusts it: refused',
      input: { signed: signedBy(ca2, ca1.certPem + ca2.certPem) },
      kind: 'refuse',
      reason: 'untrusted-signer',
    },
    {
      name: "the admin's signature over old + new, republished with a rogue CA in the bundle: refused",
      input: { candidatePem: ca1.certPem + ca2.certPem + rogue.certPem },
      kind: 'refuse',
      reason: 'signature-mismatch',
    },
    {
      name: 'a statement edited after signing (its bundle hash swapped): refused',
      input: {
        candidatePem: ca1.certPem + rogue.certPem,
        signed: {
          payload: base.signed.payload!.replace(
            trustedBundle(ca1.certPem + ca2.certPem).hash,
            trustedBundle(ca1.certPem + rogue.certPem).hash,
          ),
          jws: base.signed.jws,
        },
      },
      kind: 'refuse',
      reason: 'bad-signature',
    },
    {
      name: 'an older signed statement replayed: refused',
      input: { floor: 7 },
      kind: 'refuse',
      reason: 'replayed',
      match: /already accepted version 7/,
    },
    {
      name: 'an expired statement: refused',
      input: { signed: signedBy(ca1, ca1.certPem + ca2.certPem, { validForMs: -1 }) },
      kind: 'refuse',
      reason: 'signature-expired',
    },
    {
      name: 'a header that names its own key: refused',
      input: {
        signed: {
          payload: base.signed.payload,
          jws: `${Buffer.from(JSON.stringify({ alg: 'ES256', kid: trustedBundle(ca1.certPem).pins[0], jwk: {} })).toString('base64url')}..${base.signed.jws!.split('.')[2]}`,
        },
      },
      kind: 'refuse',
      reason: 'malformed-signature',
    },
    {
      name: 'alg none: refused',
      input: {
        signed: {
          payload: base.signed.payload,
          jws: `${Buffer.from(JSON.stringify({ alg: 'none', kid: trustedBundle(ca1.certPem).pins[0] })).toString('base64url')}..`,
        },
      },
      kind: 'refuse',
      reason: 'bad-signature',
    },
    {
      name: 'a removal stands on the checks alone, unsigned',
      input: {
        current: trustedBundle(ca1.certPem + ca2.certPem),
        candidatePem: ca2.certPem,
        presented: servingCa2,
        held: [{ identity: 'kubelet', certPem: kubeletCa2 }],
        signed: { payload: null, jws: null },
      },
      kind: 'adopt',
    },
    {
      name: 'a second change within the restart window waits for it',
      input: { lastChangeAt: new Date(now.getTime() - 60_000) },
      kind: 'defer',
    },
    {
      name: 'a change after the window is followed',
      input: { lastChangeAt: new Date(now.getTime() - 16 * 60_000) },
      kind: 'adopt',
    },
  ];
  for (const c of cases) {
    const d = decideBundle({ ...base, ...c.input });
    t.equal(d.kind, c.kind, c.name);
    if (d.kind === 'refuse') {
      t.equal(d.reason, c.reason, `${c.name}: reason`);
      t.match(d.message, /^kube-public\/cluster-info: .*; keeping the current CA bundle$/, `${c.name}: one line naming the source`);
      t.notMatch(d.message, /\n|BEGIN/, `${c.name}: no PEM in the message`);
      if (c.match) t.match(d.message, c.match, `${c.name}: says why`);
    }
  }
});

t.test('adopting reports which CAs come and go', async (t) => {
  const d = decideBundle({
    ...base,
    current: trustedBundle(ca1.certPem + ca2.certPem),
    candidatePem: ca2.certPem,
    presented: servingCa2,
    held: [{ identity: 'kubelet', certPem: kubeletCa2 }],
  });
  t.equal(d.kind, 'adopt');
  if (d.kind !== 'adopt') return;
  t.same(d.added, []);
  t.same(d.removed, trustedBundle(ca1.certPem).pins);
  t.equal(d.bundle.pem, trustedBundle(ca2.certPem).pem, 'canonical PEM, re-encoded from the checked DER');
});

t.test('rewritePlan: what is rewritten, in which order, and who restarts', async (t) => {
  const f = (path: string, kind: TrustFile['kind'], consumer: TrustFile['consumer'], heldHash: string | null): TrustFile => ({
    path,
    kind,
    consumer,
    heldHash,
  });
  const cases: { name: string; files: TrustFile[]; rewrite: string[]; restart: string[] }[] = [
    {
      name: 'everything stale: client CA first, kubelet kubeconfig last; both kubeconfig readers restart',
      files: [
        f('kubelet.conf', 'kubeconfig', 'kubelet', 'old'),
        f('ca.crt', 'client-ca', 'kubelet', 'old'),
        f('proxy.conf', 'kubeconfig', 'kube-proxy', 'old'),
      ],
      rewrite: ['ca.crt', 'proxy.conf', 'kubelet.conf'],
      restart: ['kube-proxy', 'kubelet'],
    },
    {
      name: 'only the client-CA file: the kubelet reloads it by itself, nobody restarts',
      files: [f('kubelet.conf', 'kubeconfig', 'kubelet', 'new'), f('ca.crt', 'client-ca', 'kubelet', null)],
      rewrite: ['ca.crt'],
      restart: [],
    },
    {
      name: 'a crash left only kube-proxy behind: only kube-proxy restarts',
      files: [f('kubelet.conf', 'kubeconfig', 'kubelet', 'new'), f('proxy.conf', 'kubeconfig', 'kube-proxy', 'old')],
      rewrite: ['proxy.conf'],
      restart: ['kube-proxy'],
    },
    { name: 'all current: nothing', files: [f('kubelet.conf', 'kubeconfig', 'kubelet', 'new')], rewrite: [], restart: [] },
    {
      name: 'a kubeconfig nobody must restart for is rewritten and restarts nothing',
      files: [f('kubelet.conf', 'kubeconfig', 'kubelet', 'new'), f('other.conf', 'kubeconfig', null, 'old')],
      rewrite: ['other.conf'],
      restart: [],
    },
  ];
  for (const c of cases) {
    const plan = rewritePlan('new', c.files);
    t.same(
      plan.rewrite.map((x) => x.path),
      c.rewrite,
      `${c.name}: rewrite`,
    );
    t.same(plan.restart, c.restart, `${c.name}: restart`);
  }
});

t.test("a kubeconfig's consumer is the one its identity declares, whatever the identity's name", async (t) => {
  const proxy = kubeletIdentity({ name: 'kube-proxy', kubeconfigPath: 'proxy.conf', consumer: 'kube-proxy' });
  const files = kubeconfigFiles([
    { identity: kubeletIdentity({ kubeconfigPath: 'kubelet.conf' }), heldHash: 'old' },
    { identity: proxy, heldHash: 'old' },
    // A new identity is not the kubelet's by default: declared with no consumer, nothing restarts for it.
    { identity: kubeletIdentity({ name: 'kube-proxy', kubeconfigPath: 'new.conf', consumer: null }), heldHash: 'old' },
    { identity: kubeletIdentity({ name: 'kubelet-serving', kubeconfigPath: null, consumer: null }), heldHash: null },
  ]);
  t.same(
    files.map((f) => [f.path, f.consumer]),
    [
      ['kubelet.conf', 'kubelet'],
      ['proxy.conf', 'kube-proxy'],
      ['new.conf', null],
    ],
    'read from the declaration; an identity without a kubeconfig has no file',
  );
  t.same(rewritePlan('new', files).restart, ['kube-proxy', 'kubelet']);
  const swapped = kubeconfigFiles([
    { identity: kubeletIdentity({ kubeconfigPath: 'kubelet.conf', consumer: 'kube-proxy' }), heldHash: 'old' },
  ]);
  t.same(rewritePlan('new', swapped).restart, ['kube-proxy'], 'the name "kubelet" alone restarts no kubelet');
});

t.test('spreadOffset: stable per node, within the window, spread over the fleet', async (t) => {
  const window = 600_000;
  t.equal(spreadOffset('n1', 'k', window), spreadOffset('n1', 'k', window), 'the same slot after a restart');
  t.equal(spreadOffset('n1', 'k', 0), 0, 'no window: now');
  const slots = Array.from({ length: 1000 }, (_, i) => spreadOffset(`node-${i}`, 'k', window));
  t.ok(
    slots.every((s) => s >= 0 && s < window),
    'inside the window',
  );
  const perTenth = Array.from({ length: 10 }, (_, b) => slots.filter((s) => Math.floor(s / (window / 10)) === b).length);
  t.ok(
    perTenth.every((n) => n > 50 && n < 150),
    `1,000 nodes spread over ten tenths of the window: ${perTenth.join(', ')}`,
  );
});

t.test('reissuePlan: early re-issue under the signer CA', async (t) => {
  const both = trustedBundle(ca1.certPem + ca2.certPem);
  const signerPin = trustedBundle(ca2.certPem).pins[0]!;
  const since = new Date('2026-06-01T00:00:00Z');
  const input = {
    nodeName: 'n1',
    signerPin,
    bundle: both,
    held: [
      { identity: 'kubelet' as const, certPem: kubeletCa1 },
      { identity: 'kube-proxy' as const, certPem: proxyCa1 },
    ],
    since,
    windowMs: 3600_000,
    attempted: new Set<never>(),
  };
  const plan = reissuePlan(input);
  t.same(
    plan.map((r) => r.identity),
    ['kubelet', 'kube-proxy'],
    'every certificate under the old CA',
  );
  t.ok(
    plan.every((r) => r.at >= since && r.at.getTime() < since.getTime() + 3600_000),
    'each at a slot in the window',
  );
  t.same(reissuePlan({ ...input, held: [{ identity: 'kubelet', certPem: kubeletCa2 }] }), [], 'already under the signer CA');
  t.same(reissuePlan({ ...input, signerPin: null }), [], 'no signer published');
  t.same(
    reissuePlan({ ...input, bundle: trustedBundle(ca1.certPem) }),
    [],
    'the signer CA is not trusted yet: the new certificate would be refused',
  );
  t.same(
    reissuePlan({ ...input, attempted: new Set(['kubelet'] as const) }).map((r) => r.identity),
    ['kube-proxy'],
    'an identity re-issued once and still under the old CA is not retried in a loop',
  );
});

t.test('issuerPin names the CA a certificate hangs from', async (t) => {
  const both = trustedBundle(ca1.certPem + ca2.certPem);
  t.equal(issuerPin(kubeletCa1, both), both.pins[0]);
  t.equal(issuerPin(kubeletCa2, both), both.pins[1]);
  t.equal(issuerPin(kubeletCa2, trustedBundle(ca1.certPem)), null);
  t.equal(issuerPin('garbage', both), null);
});
