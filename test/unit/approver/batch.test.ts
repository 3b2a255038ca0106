// A batch of CSRs decided on one view of the records (batch.ts): a pool
// token's CSRs spend its names one after another exactly as one at a time
// would, what they spend is written as one claim, and a record read and not
// written must be unchanged before anything is approved.
import t from 'tap';
import { MockAgent } from 'undici';
import { CertificateController } from '../../../agent/approver/controller.js';
import { decideBatch, RecordView, reviewKey } from '../../../agent/approver/batch.js';
import { limiter, type Lookups } from '../../../agent/approver/lookups.js';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { parsedRequest } from '../../../agent/approver/decide.js';
import { CSR_PATH } from '../../../agent/approver/informer.js';
import { createApproverMetrics } from '../../../agent/approver/metrics.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { bindingRecord } from '../../../agent/records/bindings.js';
import type { RecordObject, RecordObjects, RecordResource, TokenBindingObject } from '../../../agent/records/kinds.js';
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
function pool(maxNodes: number): TokenBindingObject {
  const made = bindingRecord('abcdef', { prefix: 'w', maxNodes }, 'secret-uid');
  return { ...made, metadata: { ...made.metadata, resourceVersion: '7' } };
}

/** Records by `resource/name`, as the informers would have them. */
function fakeIo(records: Record<string, RecordObject | null>) {
  const calls = { node: [] as string[], reviews: 0, records: [] as string[] };
  const io: Lookups = {
    node: async (name) => (calls.node.push(name), null),
    allowed: async () => (calls.reviews++, true),
    record: async <R extends RecordResource>(resource: R, name: string) => (
      calls.records.push(`${resource}/${name}`), (records[`${resource}/${name}`] ?? null) as RecordObjects[R] | null
    ),
    legacy: async () => null,
    apiServer: async () => ({ names: [], ips: [] }),
    sameRequester: () => [],
    request: parsedRequest,
  };
  return { io, calls };
}

t.test("a pool's CSRs in one batch spend its names in order, within max-nodes, and as one claim", async (t) => {
  const { io, calls } = fakeIo({ 'tokenbindings/abcdef': pool(2) });
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
    view
      .claims()
      .map((c) => [c.op, c.resource, c.name, 'resourceVersion' in c ? c.resourceVersion : null, c.op === 'status' ? c.status : null]),
    [
      [
        'status',
        'tokenbindings',
        'abcdef',
        '7',
        {
          issued: [
            { node: 'w1', csrUID: 'uid-w1' },
            { node: 'w2', csrUID: 'uid-w2' },
          ],
        },
      ],
      ['create', 'nodeclaims', 'w1', null, null],
      ['create', 'nodeclaims', 'w2', null, null],
    ],
    "one status, on the version every decision read, with both names (what two writes one after another would have left), and each name's claim",
  );
  t.equal(calls.records.filter((r) => r === 'tokenbindings/abcdef').length, 1, 'the binding read once');
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
  t.same(calls.records, ['noderevocations/w1'], 'its revocation read');
});

t.test('a record read and not written is read again: a change meanwhile is reported, no change is not', async (t) => {
  const records: Record<string, RecordObject | null> = {};
  const { io } = fakeIo(records);
  const view = new RecordView(io.record);
  await decideBatch([await kubeletCsr('w1', 'node')], policy, io, view);
  t.equal(await view.changedSinceRead(), null, 'still absent');
  records['noderevocations/w1'] = { kind: 'NodeRevocation', metadata: { name: 'w1', resourceVersion: '3' }, spec: {} };
  t.equal(await view.changedSinceRead(), 'noderevocations/w1', 'appeared since');
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

t.test('a renewal is decided on the revocations the informer listed: no GET per CSR, refused as revoked', async (t) => {
  const csr = await kubeletCsr('w1', 'node');
  const mock = new MockAgent();
  mock.disableNetConnect();
  const server = 'https://api.test';
  const p = mock.get(server);
  const seen = { approvals: 0, events: [] as string[] };
  p.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'CertificateSigningRequestList', metadata: { resourceVersion: '10' }, items: [csr] })
    .persist();
  p.intercept({ path: (x) => x.includes('watch=true'), method: 'GET' })
    .reply(200, '')
    .delay(60_000)
    .persist();
  p.intercept({ path: '/apis/kubeboot.io/v1alpha1/noderevocations?limit=500', method: 'GET' })
    .reply(200, {
      kind: 'NodeRevocationList',
      metadata: { resourceVersion: '12' },
      items: [{ metadata: { name: 'w1', resourceVersion: '12', creationTimestamp: '2026-12-01T16:00:01Z' }, spec: { reason: 'stolen' } }],
    })
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
  const approver = new CertificateController(
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
  t.equal(seen.approvals, 0, 'not approved');
  t.match(seen.events, [/kubelet-client rule not-revoked: node w1 was revoked at 2026-12-01T16:00:01Z: stolen/]);
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
  const BINDINGS = '/apis/kubeboot.io/v1alpha1/tokenbindings';
  p.intercept({ path: `${BINDINGS}?limit=500`, method: 'GET' })
    .reply<object>(() => ({ statusCode: 200, data: { kind: 'TokenBindingList', metadata: { resourceVersion: '7' }, items: [binding] } }))
    .persist();
  p.intercept({ path: `${BINDINGS}/abcdef`, method: 'GET' })
    .reply<object>(() => ({ statusCode: 200, data: binding }))
    .persist();
  p.intercept({ path: `${BINDINGS}/abcdef/status`, method: 'PATCH' })
    .reply<object>((req) => {
      seen.patches++;
      const body = JSON.parse(String(req.body)) as { metadata: { resourceVersion: string }; status: TokenBindingObject['status'] };
      if (body.metadata.resourceVersion !== binding.metadata.resourceVersion)
        return { statusCode: 409, data: { kind: 'Status', code: 409 } };
      const rv = String(Number(binding.metadata.resourceVersion) + 1);
      binding = { ...binding, metadata: { ...binding.metadata, resourceVersion: rv }, status: body.status };
      return { statusCode: 200, data: binding };
    })
    .persist();
  p.intercept({ path: '/apis/kubeboot.io/v1alpha1/nodeclaims', method: 'POST' })
    .reply<object>((req) => {
      const body = JSON.parse(String(req.body)) as { metadata: { name: string } };
      return { statusCode: 201, data: { ...body, metadata: { ...body.metadata, resourceVersion: '30' } } };
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
  const approver = new CertificateController(
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
    Object.fromEntries((binding.status?.issued ?? []).map((i) => [i.node, i.csrUID])),
    { w1: 'uid-w1', w2: 'uid-w2', w3: 'uid-w3', w4: 'uid-w4' },
    'each name spent on its own CSR',
  );
  t.ok(seen.patches <= 2, `${seen.patches} claims for four names (the first CSR queued starts a batch alone; the rest share one)`);
});

t.test("a pool's CSRs of one batch spend the same names as one at a time would, in one status", async (t) => {
  const n = 60;
  const { io } = fakeIo({ 'tokenbindings/abcdef': pool(n - 10) });
  const view = new RecordView(io.record);
  const csrs = await Promise.all(Array.from({ length: n }, (_, i) => kubeletCsr(`w${i}`, 'token')));
  const outcomes = await decideBatch(csrs, policy, io, view);
  const approved = outcomes.filter((o) => 'decision' in o && o.decision.kind === 'approve').map((o) => o.csr.metadata.name);
  t.same(
    approved,
    Array.from({ length: n - 10 }, (_, i) => `csr-w${i}`),
    'the first max-nodes, in order',
  );
  const rejected = outcomes.filter((o) => 'decision' in o && o.decision.kind === 'violation');
  t.equal(rejected.length, 10);
  const [status] = view.claims();
  t.same(
    status?.op === 'status' ? (status.status as { issued: { node: string }[] }).issued.map((i) => i.node) : null,
    approved.map((name) => name.slice(4)),
    'one status holding every name spent',
  );
  t.equal(view.claims().length, 1 + n - 10, 'and one claim per name');
});
