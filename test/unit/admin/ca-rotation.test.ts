// The admin's side of a CA rotation (agent/admin/ca-rotation.ts) against
// undici's MockAgent: what each node's annotation says about its progress,
// and publishing a bundle without losing a concurrent change.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { parse } from 'yaml';
import { createPrivateKey } from 'node:crypto';
import { bundleFromFile, publishTrust, retireCa, rotationProgress, type Publication } from '../../../agent/admin/ca-rotation.js';
import { nextStatement, signStatement, statementFor, verifyStatement } from '../../../agent/trust/statement.js';
import { ExitCode, InputError } from '../../../agent/errors.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { trustedBundle } from '../../../agent/trust/bundle.js';
import { clusterInfoKubeconfig } from '../../support/kubeconfig.js';
import { createCa } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const ca1 = await createCa('ca-1');
const ca2 = await createCa('ca-2');
const both = trustedBundle(ca1.certPem + ca2.certPem);
const pin1 = trustedBundle(ca1.certPem).pins[0]!;
const pin2 = trustedBundle(ca2.certPem).pins[0]!;

function client(t: Test, agent: MockAgent): KubeClient {
  const c = new KubeClient({ server: SERVER, caPem: ca1.certPem }, { kind: 'anonymous' }, agent);
  t.teardown(() => agent.close());
  return c;
}

t.test('progress: who trusts the bundle, who holds certificates under the signer, who lags and why', async (t) => {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const note = (o: object) => ({ 'kubeboot.io/ca-rotation': JSON.stringify(o) });
  const nodes = [
    { name: 'ready', annotations: note({ bundle: both.hash, active: true, issuers: { kubelet: pin2 }, refused: null }) },
    { name: 'old-cert', annotations: note({ bundle: both.hash, active: true, issuers: { kubelet: pin1 }, refused: null }) },
    { name: 'waiting-restart', annotations: note({ bundle: both.hash, active: false, issuers: { kubelet: pin2 }, refused: null }) },
    { name: 'behind', annotations: note({ bundle: 'other', active: true, issuers: { kubelet: pin1 }, refused: null }) },
    { name: 'refusing', annotations: note({ bundle: 'other', active: true, issuers: {}, refused: 'node-writable-source' }) },
    { name: 'no-kubeboot', annotations: {} },
  ];
  agent
    .get(SERVER)
    .intercept({ path: '/api/v1/nodes', method: 'GET' })
    .reply(200, { kind: 'NodeList', items: nodes.map((n) => ({ metadata: n })) });
  const p = await rotationProgress(client(t, agent), both, pin2);
  const lag = Object.fromEntries(p.nodes.map((n) => [n.name, n.lag]));
  t.equal(lag.ready, null);
  t.match(lag['old-cert'], /still holds kubelet certificate\(s\) from another CA/);
  t.match(lag['waiting-restart'], /waits for its slot to restart/);
  t.match(lag.behind, /has not picked up the published bundle/);
  t.match(lag.refusing, /refuses the published bundle: node-writable-source/);
  t.match(lag['no-kubeboot'], /no kubeboot.io\/ca-rotation annotation/);
  t.equal(p.trusting, 2, 'trust and use it: ready, old-cert');
  t.equal(p.underSigner, 2, 'under the signer: ready, waiting-restart');
  t.notOk(p.ready, 'not finished while any node lags');
});

t.test('publish: the bundle goes into cluster-info, a conflict is retried, other keys stay', async (t) => {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const pool = agent.get(SERVER);
  const cm = (rv: string) => ({
    kind: 'ConfigMap',
    metadata: { name: 'cluster-info', namespace: 'kube-public', resourceVersion: rv },
    data: { kubeconfig: clusterInfoKubeconfig(SERVER, ca1.certPem), 'jws-kubeconfig-abcdef': 'sig' },
  });
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' }).reply(200, cm('1'));
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'PUT' }).reply(409, { kind: 'Status' });
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' }).reply(200, cm('2'));
  let put: { metadata: { resourceVersion: string; annotations: Record<string, string> }; data: Record<string, string> } | null = null;
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'PUT' }).reply((o) => {
    put = JSON.parse(String(o.body));
    return { statusCode: 200, data: '{}' };
  });
  const done = await publishTrust(client(t, agent), publication(both, pin2));
  const sent = put!;
  t.equal(sent.metadata.resourceVersion, '2', 'written over the version read after the conflict');
  t.equal(sent.metadata.annotations['kubeboot.io/signer-ca-hash'], pin2);
  t.equal(sent.data['jws-kubeconfig-abcdef'], 'sig', 'signatures stay (the bootstrapsigner renews them)');
  const doc = parse(sent.data.kubeconfig!) as { clusters: { cluster: Record<string, string> }[] };
  t.equal(trustedBundle(Buffer.from(doc.clusters[0]!.cluster['certificate-authority-data']!, 'base64').toString()).hash, both.hash);
  await t.rejects(
    publishTrust(client(t, new MockAgent()), publication(trustedBundle(ca1.certPem), pin2)),
    /not in the bundle/,
    'a signer CA outside the bundle',
  );
  // What a node verifies: a statement over exactly this bundle and signer, signed by CA 1 (trusted now).
  const check = statementFor(
    verifyStatement({
      signed: { payload: sent.data['kubeboot-trust']!, jws: sent.data['kubeboot-trust.jws']! },
      trusted: trustedBundle(ca1.certPem),
      now: new Date(),
    }),
    both.hash,
    0,
  );
  t.ok(check.ok, 'the statement verifies with CA 1 for exactly the published bundle');
  if (check.ok) {
    t.equal(check.statement.signerPin, pin2, 'and names the signer');
    t.equal(check.statement.version, done.version);
  }
  t.equal(done.signedBy, pin1);
  t.ok(done.signerMoved, 'no signer was published before: the nodes re-issue under CA 2');
});

/** cluster-info as published now: CA 1, with an optional earlier statement. */
function clusterInfoWith(data: Record<string, string> = {}) {
  return {
    kind: 'ConfigMap',
    metadata: { name: 'cluster-info', namespace: 'kube-public', resourceVersion: '1' },
    data: { kubeconfig: clusterInfoKubeconfig(SERVER, ca1.certPem), ...data },
  };
}

function publication(bundle: ReturnType<typeof trustedBundle>, signerPin: string | null, o: Partial<Publication> = {}): Publication {
  return {
    bundle,
    signerPin,
    caKey: createPrivateKey(ca1.keyPem),
    validForMs: 3600_000,
    joinPins: [pin1],
    dropJoinCa: false,
    now: () => new Date(),
    ...o,
  };
}

t.test('publish refuses, before writing anything, a key the nodes do not trust and a bundle that strands join commands', async (t) => {
  const rogue = await createCa('rogue');
  const cases: { name: string; p: Publication; match: RegExp }[] = [
    {
      name: 'the key of a CA the nodes do not trust yet (the new CA itself)',
      p: publication(both, null, { caKey: createPrivateKey(ca2.keyPem) }),
      match: /--ca-key: the key of no CA in the bundle published now/,
    },
    { name: 'a rogue key', p: publication(both, null, { caKey: createPrivateKey(rogue.keyPem) }), match: /--ca-key/ },
    {
      name: 'a bundle without the CA join commands pin',
      p: publication(trustedBundle(ca2.certPem), null),
      match: /drops sha256:[0-9a-f]{64}, the CA your join commands and user-data pin.*--drop-join-ca/,
    },
  ];
  for (const c of cases) {
    const agent = new MockAgent();
    agent.disableNetConnect();
    agent
      .get(SERVER)
      .intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' })
      .reply(200, clusterInfoWith());
    // No PUT intercepted: a write would fail the call with another error.
    await t.rejects(publishTrust(client(t, agent), c.p), c.match, c.name);
  }
});

t.test('publish: the version goes past the one published, and --drop-join-ca says what it dropped', async (t) => {
  for (const [ahead, expect, why] of [
    [300, 'past', 'a clock 5 min behind the last publisher: one past it, still within what nodes accept'],
    [Number.MAX_SAFE_INTEGER, 'now', 'a statement at 2^53-1 (a leaked key): nodes refused it, not gone past, said'],
  ] as const) {
    const agent = new MockAgent();
    agent.disableNetConnect();
    const pool = agent.get(SERVER);
    const second = Math.floor(Date.now() / 1000);
    const previous = ahead === Number.MAX_SAFE_INTEGER ? ahead : second + ahead;
    const earlier = signStatement(
      { ...nextStatement(trustedBundle(ca1.certPem), null, 0, new Date(), 3600_000), version: previous },
      createPrivateKey(ca1.keyPem),
      pin1,
    );
    pool
      .intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' })
      .reply(200, clusterInfoWith({ 'kubeboot-trust': earlier.payload, 'kubeboot-trust.jws': earlier.jws }));
    pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'PUT' }).reply(200, {});
    const done = await publishTrust(client(t, agent), publication(trustedBundle(ca2.certPem), null, { dropJoinCa: true }));
    if (expect === 'past') {
      t.equal(done.version, previous + 1, why);
      t.equal(done.aheadOfClock, null, `${why}: nothing to say`);
    } else {
      t.ok(done.version >= second && done.version <= second + 5, `${why}: the clock's second`);
      t.equal(done.aheadOfClock, previous, `${why}: reported`);
    }
    t.same(done.droppedJoinPins, [pin1], 'the dropped join pin is reported');
    t.notOk(done.signerMoved, 'no signer given: none moves');
  }
});

t.test('a bundle file is checked as a node will check it, naming the file', async (t) => {
  const err = (() => {
    try {
      bundleFromFile('/tmp/new.crt', ca1.keyPem, new Date());
    } catch (e) {
      return e;
    }
  })();
  t.type(err, InputError);
  t.match((err as Error).message, /^\/tmp\/new\.crt: CA bundle: /);
});

const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';

/** A cluster in the middle of a rotation: CA 1 and 2 published, the signer on `signer`, every node's annotation as `note` says. */
function rotating(t: Test, signer: string | null, note: object) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const pool = agent.get(SERVER);
  const published = {
    kind: 'ConfigMap',
    metadata: { name: 'cluster-info', resourceVersion: '7', annotations: signer ? { 'kubeboot.io/signer-ca-hash': signer } : {} },
    data: { kubeconfig: clusterInfoKubeconfig(SERVER, ca1.certPem + ca2.certPem) },
  };
  pool
    .intercept({ path: (p) => p.startsWith(CLUSTER_INFO), method: 'GET' })
    .reply(200, published)
    .persist();
  pool
    .intercept({ path: '/api/v1/nodes', method: 'GET' })
    .reply(200, {
      kind: 'NodeList',
      items: [{ metadata: { name: 'n1', annotations: { 'kubeboot.io/ca-rotation': JSON.stringify(note) } } }],
    })
    .persist();
  const puts: { metadata: { annotations: Record<string, string> }; data: Record<string, string> }[] = [];
  pool
    .intercept({ path: CLUSTER_INFO, method: 'PUT' })
    .reply((o) => {
      puts.push(JSON.parse(String(o.body)));
      return { statusCode: 200, data: '{}' };
    })
    .persist();
  return { kube: client(t, agent), puts };
}

const retiring = { bundle: trustedBundle(ca2.certPem), file: '/tmp/ca-2.crt', now: new Date() };
const signing = (asked: string[]) => async () => {
  asked.push('key');
  const { bundle: _b, signerPin: _s, ...rest } = publication(both, null, { caKey: createPrivateKey(ca2.keyPem) });
  return rest;
};

t.test('retire refuses, naming the file, before the signer CA is published in the bundle; the key is not asked for', async (t) => {
  const ready = { bundle: both.hash, active: true, issuers: { kubelet: pin2 } };
  for (const [signer, why] of [
    [null, 'no signer published'],
    [pin1, 'the signer published is not in the bundle'],
  ] as const) {
    const { kube, puts } = rotating(t, signer, ready);
    const asked: string[] = [];
    await t.rejects(
      retireCa(kube, retiring, signing(asked)),
      {
        message:
          '/tmp/ca-2.crt: retiring needs the signer CA published first (kubeboot ca-rotation publish BUNDLE --signer-ca-hash …) and in this bundle',
        code: ExitCode.badInput,
      },
      why,
    );
    t.same([puts, asked], [[], []], `${why}: nothing written, no key read`);
  }
});

t.test('retire while a node lags publishes nothing and hands back the progress; the key is not asked for', async (t) => {
  const { kube, puts } = rotating(t, pin2, { bundle: both.hash, active: false, issuers: { kubelet: pin2 } });
  const asked: string[] = [];
  const outcome = await retireCa(kube, retiring, signing(asked));
  t.match(outcome, { notReady: { ready: false, nodes: [{ name: 'n1', lag: /waits for its slot to restart/ }] } });
  t.same([puts, asked], [[], []]);
});

t.test('retire with every node ready publishes the final bundle, dropping the old CA join commands pin', async (t) => {
  const { kube, puts } = rotating(t, pin2, { bundle: both.hash, active: true, issuers: { kubelet: pin2 } });
  const asked: string[] = [];
  const outcome = await retireCa(kube, retiring, signing(asked));
  t.match(outcome, { retired: { signedBy: pin2, droppedJoinPins: [pin1] } });
  t.same(asked, ['key']);
  t.equal(puts.length, 1);
  t.equal(puts[0]!.metadata.annotations['kubeboot.io/signer-ca-hash'], pin2, 'the signer stays');
});

t.test('retire --skip-node: a node whose annotation stalls the retire is not waited for, by name only', async (t) => {
  // n1 writes an annotation that would hold every retire back (a broken or lying node).
  const stalled = { bundle: 'f'.repeat(64), active: false, issuers: {}, refused: 'x'.repeat(300) };
  {
    const { kube, puts } = rotating(t, pin2, stalled);
    t.match(await retireCa(kube, retiring, signing([])), { notReady: { nodes: [{ name: 'n1', skipped: false }] } }, 'without: refused');
    t.equal(puts.length, 0);
  }
  {
    const { kube, puts } = rotating(t, pin2, stalled);
    const asked: string[] = [];
    const outcome = await retireCa(kube, { ...retiring, skip: ['n1'] }, signing(asked));
    t.match(
      outcome,
      { retired: { signedBy: pin2 }, progress: { nodes: [{ name: 'n1', skipped: true, lag: /refuses/ }] } },
      'skipped: retired',
    );
    t.same([puts.length, asked], [1, ['key']]);
  }
  {
    const { kube, puts } = rotating(t, pin2, stalled);
    await t.rejects(
      retireCa(kube, { ...retiring, skip: ['n1', 'n2'] }, signing([])),
      { message: '--skip-node n2: no Node of that name; nothing was published', code: ExitCode.badInput },
      'a name that is no Node (a typo) is refused, not taken as skipped',
    );
    t.equal(puts.length, 0);
  }
});

t.test('retire words a failed request by what it was for', async (t) => {
  const agent = new MockAgent();
  agent.disableNetConnect();
  agent
    .get(SERVER)
    .intercept({ path: (p) => p.startsWith(CLUSTER_INFO), method: 'GET' })
    .reply(403, { kind: 'Status', message: 'no' });
  const explained = await retireCa(client(t, agent), retiring, signing([]), (_err, doing) => new Error(`while trying to ${doing}`)).catch(
    (e: unknown) => e,
  );
  t.match(explained, { message: 'while trying to read kube-public/cluster-info' });
});
