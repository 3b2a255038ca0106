// A batch of CSRs decided on one view of the records (batch.ts): a pool
// token's CSRs spend its names one after another exactly as one at a time
// would, what they spend is written as one claim, and a record read and not
// written must be unchanged before anything is approved.
import t from 'tap';
import { MockAgent } from 'undici';
import type { RecordConfigMap } from '../../../agent/approver/api.js';
import { Approver } from '../../../agent/approver/approver.js';
import { decideBatch, limiter, RecordView, reviewKey, type BatchIo } from '../../../agent/approver/batch.js';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { parsedRequest } from '../../../agent/approver/decide.js';
import { CSR_PATH } from '../../../agent/approver/informer.js';
import { createApproverMetrics } from '../../../agent/approver/metrics.js';
import type { ApproverPolicy } from '../../../agent/approver/policy.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { bindingConfigMap } from '../../../agent/kube/join-bindings.js';
import { silentLogger } from '../../../agent/log.js';
import { craftCsrPem } from '../../support/approver.js';
import { until } from '../../support/until.js';
import { leadAndAllow } from '../../support/mock-approver.js';

const policy: ApproverPolicy = {
  keyAlgorithms: ['ecdsa-p256'],
  maxExpirationSeconds: 86_400,
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
  kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] },
};

async function kubeletCsr(node: string, requester: 'token' | 'node'): Promise<ApproverCsr> {
  return {
    kind: 'CertificateSigningRequest',
    metadata: { name: `csr-${node}`, uid: `uid-${node}`, resourceVersion: '5', creationTimestamp: '2026-12-01T16:00:00Z' },
    spec: {
      request: Buffer.from(await craftCsrPem({ cn: `system:node:${node}`, o: ['system:nodes'] })).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      username: requester === 'token' ? 'system:bootstrap:abcdef' : `system:node:${node}`,
      groups: requester === 'token' ? ['system:bootstrappers', 'system:authenticated'] : ['system:nodes', 'system:authenticated'],
      usages: ['digital signature', 'client auth'],
    },
    status: {},
  };
}

/** A pool binding `w*` of `maxNodes`, at resourceVersion 7. */
function pool(maxNodes: number): RecordConfigMap {
  const cm = bindingConfigMap('abcdef', { prefix: 'w', maxNodes }) as RecordConfigMap;
  return { ...cm, metadata: { ...cm.metadata, resourceVersion: '7' } };
}

function fakeIo(records: Record<string, RecordConfigMap | null>) {
  const calls = { node: [] as string[], reviews: 0, records: [] as string[] };
  const io: BatchIo = {
    node: async (name) => (calls.node.push(name), null),
    allowed: async () => (calls.reviews++, true),
    record: async (name) => (calls.records.push(name), records[name] ?? null),
    apiServer: async () => ({ names: [], ips: [] }),
    sameRequester: () => [],
    request: parsedRequest,
  };
  return { io, calls };
}

t.test("a pool's CSRs in one batch spend its names in order, within max-nodes, and as one claim", async (t) => {
  const { io, calls } = fakeIo({ 'token-abcdef': pool(2) });
  const view = new RecordView(io.record);
  const csrs = await Promise.all(['w1', 'w2', 'w3'].map((n) => kubeletCsr(n, 'token')));
  const outcomes = await decideBatch(csrs, policy, io, view);
  const byName = Object.fromEntries(
    outcomes.map((o) => [
      o.csr.metadata.name,
      'decision' in o ? (o.decision.kind === 'violation' ? o.decision.rule : o.decision.kind) : 'error',
    ]),
  );
  t.same(byName, { 'csr-w1': 'approve', 'csr-w2': 'approve', 'csr-w3': 'token-bound' }, 'the third sees the first two spent');
  const w3 = outcomes.find((o) => o.csr.metadata.name === 'csr-w3');
  t.match(w3 && 'decision' in w3 && w3.decision.kind === 'violation' ? w3.decision.message : '', /joined 2 of its 2 node/);
  t.same(
    view.claims(),
    [
      {
        name: 'token-abcdef',
        resourceVersion: '7',
        patch: { metadata: { annotations: { 'kubeboot.io/issued': JSON.stringify({ w1: 'uid-w1', w2: 'uid-w2' }) } } },
      },
    ],
    'one claim, on the version every decision read, with both names (what two claims one after another would have left)',
  );
  t.equal(calls.records.filter((r) => r === 'token-abcdef').length, 1, 'the binding read once');
  t.same([...calls.node].sort(), ['w1', 'w2', 'w3'], 'each Node read once (no-takeover)');
  t.equal(calls.reviews, 1, "one SubjectAccessReview for the token's user, groups, uid and extra in this batch");
});

t.test('the review is shared only by the same user, uid, groups, extra and subresource', async (t) => {
  const a = await kubeletCsr('w1', 'token');
  const key = reviewKey(a, 'kubebootnodeclient');
  t.equal(reviewKey({ ...a, spec: { ...a.spec, extra: {} } }, 'kubebootnodeclient'), key, 'no extra is no extra');
  for (const [what, other, sub] of [
    ['another user', { ...a, spec: { ...a.spec, username: 'system:bootstrap:zzzzzz' } }, 'kubebootnodeclient'],
    ['another uid', { ...a, spec: { ...a.spec, uid: 'u2' } }, 'kubebootnodeclient'],
    ['another group', { ...a, spec: { ...a.spec, groups: ['system:bootstrappers'] } }, 'kubebootnodeclient'],
    ['an extra', { ...a, spec: { ...a.spec, extra: { scopes: ['x'] } } }, 'kubebootnodeclient'],
    ['another subresource', a, 'kubebootselfnodeclient'],
  ] as const)
    t.not(reviewKey(other as ApproverCsr, sub), key, what);
});

t.test('a renewal makes no Node GET (no rule of a renewal reads the Node)', async (t) => {
  const { io, calls } = fakeIo({});
  const outcomes = await decideBatch([await kubeletCsr('w1', 'node')], policy, io, new RecordView(io.record));
  t.match(outcomes, [{ decision: { kind: 'approve' } }]);
  t.same(calls.node, [], 'no Node read');
  t.same(calls.records, ['revocations'], 'its revocation read');
});

t.test('a record read and not written is read again: a change meanwhile is reported, no change is not', async (t) => {
  const records: Record<string, RecordConfigMap | null> = { revocations: null };
  const { io } = fakeIo(records);
  const view = new RecordView(io.record);
  await decideBatch([await kubeletCsr('w1', 'node')], policy, io, view);
  t.equal(await view.changedSinceRead(), null, 'still absent');
  records.revocations = { kind: 'ConfigMap', metadata: { name: 'revocations', resourceVersion: '3' }, data: { w1: '{}' } };
  t.equal(await view.changedSinceRead(), 'revocations', 'appeared since');
});

t.test('the limiter runs at most n at once and every call in the end', async (t) => {
  const run = limiter(2);
  let now = 0;
  let most = 0;
  const done = await Promise.all(
    Array.from({ length: 7 }, (_, i) =>
      run(async () => {
        most = Math.max(most, ++now);
        await new Promise((r) => setTimeout(r, 2));
        now--;
        return i;
      }),
    ),
  );
  t.same(done, [0, 1, 2, 3, 4, 5, 6]);
  t.equal(most, 2);
});

t.test('a revocation written while a renewal was decided stops its approval: decided again, left pending as revoked', async (t) => {
  const csr = await kubeletCsr('w1', 'node');
  const mock = new MockAgent();
  mock.disableNetConnect();
  const server = 'https://api.test';
  const p = mock.get(server);
  const seen = { revocationReads: 0, approvals: 0, events: [] as string[] };
  p.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'CertificateSigningRequestList', metadata: { resourceVersion: '10' }, items: [csr] })
    .persist();
  p.intercept({ path: (x) => x.includes('watch=true'), method: 'GET' })
    .reply(200, '')
    .delay(60_000)
    .persist();
  // The first read (the decision's) finds no revocation; every later one (the check before approving, the next decision) finds w1 revoked.
  p.intercept({ path: '/api/v1/namespaces/kubeboot/configmaps/revocations', method: 'GET' })
    .reply<object>(() =>
      ++seen.revocationReads === 1
        ? { statusCode: 404, data: { kind: 'Status', code: 404 } }
        : {
            statusCode: 200,
            data: {
              kind: 'ConfigMap',
              metadata: { name: 'revocations', resourceVersion: '12' },
              data: { w1: JSON.stringify({ at: '2026-12-01T16:00:01Z', reason: 'stolen' }) },
            },
          },
    )
    .persist();
  leadAndAllow(p);
  p.intercept({ path: `${CSR_PATH}/csr-w1/approval`, method: 'PUT' })
    .reply<object>(() => (seen.approvals++, { statusCode: 200, data: { ...csr, status: { conditions: [{ type: 'Approved' }] } } }))
    .persist();
  p.intercept({ path: (x) => x.includes('/events'), method: 'POST' })
    .reply<object>(
      (req) => (seen.events.push((JSON.parse(String(req.body)) as { message: string }).message), { statusCode: 201, data: {} }),
    )
    .persist();
  const approver = new Approver(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    {
      policy,
      denyViolations: false,
      resyncMs: 600_000,
      apiServer: async () => ({ names: [], ips: [] }),
      lease: { namespace: 'kube-system', name: 'l', identity: 'me', leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 20 },
    },
    silentLogger(),
    createApproverMetrics({ defaultMetrics: false }),
  );
  const stop = new AbortController();
  const running = approver.run(stop.signal);
  await until('an approval or a reported violation', () => seen.events.length > 0 || seen.approvals > 0);
  stop.abort();
  await running;
  await mock.close();
  t.equal(seen.approvals, 0, 'not approved on the revocations it read first');
  t.match(seen.events, [/kubelet-client rule not-revoked: node w1 was revoked/]);
  t.equal(seen.revocationReads, 4, 'read, read again (changed); read by the decision made again, read again (unchanged)');
});

t.test("a pool token's CSRs queued together are approved in batches: its names spent in order, within max-nodes, few claims", async (t) => {
  const csrs = await Promise.all(['w1', 'w2', 'w3', 'w4', 'w5'].map((n) => kubeletCsr(n, 'token')));
  const mock = new MockAgent();
  mock.disableNetConnect();
  const server = 'https://api.test';
  const p = mock.get(server);
  let binding = pool(4);
  const seen = { patches: 0, approved: [] as string[], events: [] as string[] };
  p.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'CertificateSigningRequestList', metadata: { resourceVersion: '10' }, items: csrs })
    .persist();
  p.intercept({ path: (x) => x.includes('watch=true'), method: 'GET' })
    .reply(200, '')
    .delay(60_000)
    .persist();
  p.intercept({ path: (x) => x.startsWith('/api/v1/nodes/'), method: 'GET' })
    .reply(404, { kind: 'Status', code: 404 })
    .persist();
  p.intercept({ path: '/api/v1/namespaces/kubeboot/configmaps/revocations', method: 'GET' })
    .reply(404, { kind: 'Status', code: 404 })
    .persist();
  p.intercept({ path: '/api/v1/namespaces/kubeboot/configmaps/token-abcdef', method: 'GET' })
    .reply<object>(() => ({ statusCode: 200, data: binding }))
    .persist();
  p.intercept({ path: '/api/v1/namespaces/kubeboot/configmaps/token-abcdef', method: 'PATCH' })
    .reply<object>((req) => {
      seen.patches++;
      const body = JSON.parse(String(req.body)) as { metadata: { resourceVersion: string; annotations: Record<string, string> } };
      if (body.metadata.resourceVersion !== binding.metadata.resourceVersion)
        return { statusCode: 409, data: { kind: 'Status', code: 409 } };
      const rv = String(Number(binding.metadata.resourceVersion) + 1);
      binding = { ...binding, metadata: { ...binding.metadata, resourceVersion: rv, annotations: body.metadata.annotations } };
      return { statusCode: 200, data: binding };
    })
    .persist();
  leadAndAllow(p);
  p.intercept({ path: (x) => x.endsWith('/approval'), method: 'PUT' })
    .reply<object>((req) => {
      const body = JSON.parse(String(req.body)) as ApproverCsr;
      seen.approved.push(body.metadata.name);
      return { statusCode: 200, data: { ...body, status: { conditions: [{ type: 'Approved' }] } } };
    })
    .persist();
  p.intercept({ path: (x) => x.includes('/events'), method: 'POST' })
    .reply<object>(
      (req) => (seen.events.push((JSON.parse(String(req.body)) as { message: string }).message), { statusCode: 201, data: {} }),
    )
    .persist();
  const approver = new Approver(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    {
      policy,
      denyViolations: false,
      resyncMs: 600_000,
      apiServer: async () => ({ names: [], ips: [] }),
      lease: { namespace: 'kube-system', name: 'l', identity: 'me', leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 20 },
    },
    silentLogger(),
    createApproverMetrics({ defaultMetrics: false }),
  );
  const stop = new AbortController();
  const running = approver.run(stop.signal);
  await until('every CSR approved or reported', () => seen.approved.length + seen.events.length >= 5);
  stop.abort();
  await running;
  await mock.close();
  t.same([...seen.approved].sort(), ['csr-w1', 'csr-w2', 'csr-w3', 'csr-w4'], 'the first four, in the order they came');
  t.match(seen.events, [/token-bound: token abcdef is spent: it joined 4 of its 4 node/], 'the fifth finds the token spent');
  t.same(
    JSON.parse(binding.metadata.annotations!['kubeboot.io/issued']!),
    { w1: 'uid-w1', w2: 'uid-w2', w3: 'uid-w3', w4: 'uid-w4' },
    'each name spent on its own CSR',
  );
  t.ok(seen.patches <= 2, `${seen.patches} claims for four names (the first CSR queued starts a batch alone; the rest share one)`);
});

t.test("a pool's binding is parsed once per batch, not once per CSR, and spends the same names", async (t) => {
  const n = 60;
  const { io } = fakeIo({ 'token-abcdef': pool(n - 10) });
  const view = new RecordView(io.record);
  const csrs = await Promise.all(Array.from({ length: n }, (_, i) => kubeletCsr(`w${i}`, 'token')));
  const parse = JSON.parse;
  let issuedParses = 0;
  JSON.parse = ((text: string, reviver?: never) => {
    if (typeof text === 'string' && text.startsWith('{"w')) issuedParses++;
    return parse(text, reviver);
  }) as typeof JSON.parse;
  let outcomes: Awaited<ReturnType<typeof decideBatch>>;
  try {
    outcomes = await decideBatch(csrs, policy, io, view);
  } finally {
    JSON.parse = parse;
  }
  t.equal(issuedParses, 0, 'no issued map parsed again after a spend (the read one was empty)');
  const approved = outcomes.filter((o) => 'decision' in o && o.decision.kind === 'approve').map((o) => o.csr.metadata.name);
  t.same(
    approved,
    Array.from({ length: n - 10 }, (_, i) => `csr-w${i}`),
    'the first max-nodes, in order',
  );
  const rejected = outcomes.filter((o) => 'decision' in o && o.decision.kind === 'violation');
  t.equal(rejected.length, 10);
  const [claim] = view.claims();
  const issued = parse(claim?.patch.metadata?.annotations?.['kubeboot.io/issued'] ?? 'null') as Record<string, string>;
  t.same(
    Object.keys(issued),
    approved.map((name) => name.slice(4)),
    'one claim holding every name spent',
  );
});
