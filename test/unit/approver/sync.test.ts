// The sync function against a mocked API server: one batch of CSR names in,
// the approval or the report written, and what is to be looked at again out.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { getNode, subjectAccessReview } from '../../../agent/approver/api.js';
import { CsrCache } from '../../../agent/approver/cache.js';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { CSR_PATH } from '../../../agent/approver/informer.js';
import { CsrMemory } from '../../../agent/approver/memory.js';
import { createApproverMetrics } from '../../../agent/approver/metrics.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { syncCertificateRequests, type SyncContext } from '../../../agent/approver/sync.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { silentLogger } from '../../../agent/log.js';
import { bindingRecord, claimRecord } from '../../../agent/records/bindings.js';
import type { RecordObject } from '../../../agent/records/kinds.js';
import { craftCsrPem, kubeProxyCsrOfNode } from '../../support/approver.js';
import { FakeClock } from '../../support/fake-time.js';

const server = 'https://api.test';
const RECORDS = '/apis/kubeboot.io/v1alpha1';
const policy: ApproverPolicy = {
  keyAlgorithms: ['ecdsa-p256'],
  maxExpirationSeconds: 86_400,
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
};

interface Seen {
  approvals: string[];
  events: string[];
  /** Writes that reached the API server while no ctx.timed call ran: outside the requests in flight. */
  untimed: string[];
}

/** The API server: Node n1 present or not, /approval answering `approval`, every review allowed. */
function setup(t: Test, node: 'present' | 'missing', approval = 200) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const seen: Seen = { approvals: [], events: [], untimed: [] };
  const timed: string[] = [];
  let running = 0;
  pool
    .intercept({ path: '/api/v1/nodes/n1', method: 'GET' })
    .reply(node === 'present' ? 200 : 404, node === 'present' ? { kind: 'Node', metadata: { name: 'n1' } } : { kind: 'Status' })
    .persist();
  pool
    .intercept({ path: '/apis/authorization.k8s.io/v1/subjectaccessreviews', method: 'POST' })
    .reply(201, { status: { allowed: true } })
    .persist();
  pool
    .intercept({ path: (p) => p.startsWith(CSR_PATH) && p.endsWith('/approval'), method: 'PUT' })
    .reply<object>((req) => {
      const body = JSON.parse(String(req.body)) as ApproverCsr;
      seen.approvals.push(body.metadata.name);
      if (running === 0) seen.untimed.push(`decision ${body.metadata.name}`);
      return { statusCode: approval, data: approval === 200 ? body : { kind: 'Status', code: approval } };
    })
    .persist();
  pool
    .intercept({ path: (p) => p.includes('/events'), method: 'POST' })
    .reply<object>((req) => {
      const { reason } = JSON.parse(String(req.body)) as { reason: string };
      seen.events.push(reason);
      if (running === 0) seen.untimed.push(`event ${reason}`);
      return { statusCode: 201, data: {} };
    })
    .persist();
  const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock);
  const cache = new CsrCache();
  const memory = new CsrMemory();
  const state = { leading: true };
  const ctx: SyncContext = {
    client,
    policy,
    identity: 'me',
    denyViolations: false,
    csrs: { cache, synced: true },
    records: { remember: () => {}, refresh: () => {} },
    io: {
      node: (name) => getNode(client, name),
      allowed: (csr, subresource) => subjectAccessReview(client, csr, subresource),
      record: async () => null,
      legacy: async () => null,
      apiServer: async () => ({ names: [], ips: [] }),
      sameRequester: (csr) => cache.sameRequester(csr),
      request: (csr) => memory.request(csr),
    },
    leading: () => state.leading,
    remember: (csr) => void cache.set(csr),
    memory,
    metrics: createApproverMetrics({ defaultMetrics: false }),
    logger: silentLogger(),
    clock: new FakeClock(),
    timed: async (call, request) => {
      timed.push(call);
      running++;
      try {
        return await request();
      } finally {
        running--;
      }
    },
  };
  return { ctx, cache, seen, state, timed };
}

t.test('a CSR every rule passes is approved, and nothing is left to look at again', async (t) => {
  const { ctx, cache, seen } = setup(t, 'present');
  cache.set(await kubeProxyCsrOfNode('c1'));
  t.same(await syncCertificateRequests(['c1'], ctx), []);
  t.same(seen.approvals, ['c1']);
  t.match(cache.get('c1')?.status, { conditions: [{ type: 'Approved' }] }, 'the approval is kept before the watch brings it');
});

t.test('a CSR waiting for its Node is reported once and handed back to look at again', async (t) => {
  const { ctx, cache, seen } = setup(t, 'missing');
  cache.set(await kubeProxyCsrOfNode('c1'));
  t.same(await syncCertificateRequests(['c1'], ctx), [{ name: 'c1', error: null }]);
  t.same(await syncCertificateRequests(['c1'], ctx), [{ name: 'c1', error: null }], 'still transient');
  t.same(seen.events, ['PolicyViolation'], 'one Event, however often it is looked at');
  t.same(seen.approvals, []);
});

t.test('while another replica leads, nothing is asked of the API server', async (t) => {
  const { ctx, cache, seen, state } = setup(t, 'present');
  cache.set(await kubeProxyCsrOfNode('c1'));
  state.leading = false;
  t.same(await syncCertificateRequests(['c1'], ctx), []);
  t.same(seen, { approvals: [], events: [], untimed: [] });
});

t.test('an approval the API server fails is handed back with its error; a name it cannot route is not decided again', async (t) => {
  const failing = setup(t, 'present', 500);
  failing.cache.set(await kubeProxyCsrOfNode('c1'));
  const [retry] = await syncCertificateRequests(['c1'], failing.ctx);
  t.equal(retry?.name, 'c1');
  t.ok(retry?.error instanceof Error, 'with the error to log');

  const unroutable = setup(t, 'present', 404);
  unroutable.cache.set(await kubeProxyCsrOfNode('c2'));
  t.same(await syncCertificateRequests(['c2'], unroutable.ctx), []);
  t.same(await syncCertificateRequests(['c2'], unroutable.ctx), []);
  t.same(unroutable.seen.approvals, ['c2'], 'one PUT until the CSR changes');
});

t.test('every write of a decision (approval, denial, Event) runs within the requests in flight', async (t) => {
  const { ctx, cache, seen, timed } = setup(t, 'present');
  // Asks for ten days: past maxExpirationSeconds, a rule that never passes later.
  const tooLong = async (name: string) => {
    const csr = await kubeProxyCsrOfNode(name);
    return { ...csr, spec: { ...csr.spec, expirationSeconds: 10 * 86_400 } };
  };
  cache.set(await kubeProxyCsrOfNode('ok'));
  cache.set(await tooLong('reported'));
  t.same(await syncCertificateRequests(['ok', 'reported'], ctx), []);
  ctx.denyViolations = true;
  cache.set(await tooLong('denied'));
  t.same(await syncCertificateRequests(['denied'], ctx), []);
  t.same(seen.approvals.sort(), ['denied', 'ok'], 'the approval and the denial were written');
  t.same(seen.events, ['PolicyViolation'], 'the violation left pending was reported');
  t.same(seen.untimed, [], 'none of them outside a request slot');
  t.same(
    timed.filter((c) => ['approval', 'denial', 'event'].includes(c)).sort(),
    ['approval', 'denial', 'event'],
    'each timed as what it is',
  );
});

t.test('names gone from the cache, and settled CSRs, are passed over', async (t) => {
  const { ctx, cache, seen } = setup(t, 'present');
  const settled = await kubeProxyCsrOfNode('done');
  cache.set({ ...settled, status: { conditions: [{ type: 'Approved', status: 'True' }], certificate: 'x' } });
  t.same(await syncCertificateRequests(['gone', 'done'], ctx), []);
  t.same(seen, { approvals: [], events: [], untimed: [] });
});

/** A pool token abcdef (names w*, up to 10) and its first-issue CSRs for `names`, in a batch against a mocked API server. */
async function poolBatch(t: Test, names: string[], taken: ReadonlySet<string> = new Set()) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const api = mock.get(server);
  const log: string[] = [];
  const made = bindingRecord('abcdef', { prefix: 'w', maxNodes: 10 }, 'secret-uid');
  const records = new Map<string, RecordObject>([
    ['tokenbindings/abcdef', { ...made, metadata: { ...made.metadata, resourceVersion: '7' } }],
  ]);
  api
    .intercept({ path: (p) => p.startsWith('/api/v1/nodes/'), method: 'GET' })
    .reply(404, { kind: 'Status' })
    .persist();
  api
    .intercept({ path: '/apis/authorization.k8s.io/v1/subjectaccessreviews', method: 'POST' })
    .reply(201, { status: { allowed: true } })
    .persist();
  api
    .intercept({ path: `${RECORDS}/tokenbindings/abcdef/status`, method: 'PATCH' })
    .reply<object>((req) => {
      const body = JSON.parse(String(req.body)) as { status: { issued: { node: string }[] } };
      log.push(`binding ${body.status.issued.map((i) => i.node).join(',')}`);
      return { statusCode: 200, data: { ...made, metadata: { ...made.metadata, resourceVersion: '8' }, status: body.status } };
    })
    .persist();
  api
    .intercept({ path: `${RECORDS}/nodeclaims`, method: 'POST' })
    .reply<object>((req) => {
      const claim = JSON.parse(String(req.body)) as RecordObject;
      log.push(`claim ${claim.metadata.name}`);
      return taken.has(claim.metadata.name)
        ? { statusCode: 409, data: { kind: 'Status', code: 409, reason: 'AlreadyExists' } }
        : { statusCode: 201, data: { ...claim, metadata: { ...claim.metadata, resourceVersion: '9' } } };
    })
    .persist();
  api
    .intercept({ path: (p) => p.startsWith(`${RECORDS}/nodeclaims/`), method: 'GET' })
    .reply<object>((req) => {
      const name = req.path.split('/').pop()!;
      return { statusCode: 200, data: { ...claimRecord(name, 'zzzzzz', 'uid-of-another'), metadata: { name, resourceVersion: '3' } } };
    })
    .persist();
  api
    .intercept({ path: (p) => p.startsWith(CSR_PATH) && p.endsWith('/approval'), method: 'PUT' })
    .reply<object>((req) => {
      const body = JSON.parse(String(req.body)) as ApproverCsr;
      log.push(`approval ${body.metadata.name}`);
      return { statusCode: 200, data: body };
    })
    .persist();
  api
    .intercept({ path: (p) => p.includes('/events'), method: 'POST' })
    .reply(201, {})
    .persist();
  const { ctx, cache } = setup(t, 'missing');
  const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock);
  let inFlight = 0;
  let mostClaims = 0;
  ctx.client = client;
  ctx.policy = { ...policy, kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] } };
  ctx.io = {
    ...ctx.io,
    node: (name) => getNode(client, name),
    allowed: (csr, subresource) => subjectAccessReview(client, csr, subresource),
    record: async (resource, name) => (records.get(`${resource}/${name}`) ?? null) as never,
  };
  ctx.records = {
    remember: (resource, object) => void records.set(`${resource}/${object.metadata.name}`, object),
    refresh: (resource, name, object) =>
      void (object === null ? records.delete(`${resource}/${name}`) : records.set(`${resource}/${name}`, object)),
  };
  ctx.claimed = (claimed) => log.push(`claimed ${claimed.join(',')}`);
  ctx.timed = async (call, request) => {
    if (call !== 'claim') return request();
    mostClaims = Math.max(mostClaims, ++inFlight);
    try {
      return await request();
    } finally {
      inFlight--;
    }
  };
  for (const [i, name] of names.entries()) {
    const pem = await craftCsrPem({ cn: `system:node:${name}`, o: ['system:nodes'] });
    cache.set({
      kind: 'CertificateSigningRequest',
      metadata: { name: `csr-${name}`, uid: `uid-${i}`, resourceVersion: '5', creationTimestamp: '2026-12-01T16:00:00Z' },
      spec: {
        request: Buffer.from(pem).toString('base64'),
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        username: 'system:bootstrap:abcdef',
        groups: ['system:bootstrappers', 'system:authenticated'],
        usages: ['digital signature', 'client auth'],
      },
      status: {},
    } as ApproverCsr);
  }
  const retries = await syncCertificateRequests(
    names.map((n) => `csr-${n}`),
    ctx,
  );
  return { log, retries, mostClaims: () => mostClaims, records };
}

t.test("a pool's first issues in one batch: its binding written once, then its names side by side, then the approvals", async (t) => {
  const { log, retries, mostClaims } = await poolBatch(t, ['w1', 'w2', 'w3']);
  t.same(retries, []);
  t.equal(log[0], 'binding w1,w2,w3', 'the count is spent first, in one write');
  t.same(log.slice(1, 4).sort(), ['claim w1', 'claim w2', 'claim w3']);
  t.equal(mostClaims(), 3, 'the names are created at once, not one after another');
  t.equal(log[4], 'claimed csr-w1,csr-w2,csr-w3', 'the requester is handed on once its claims are written, before any approval');
  t.same(log.slice(5).sort(), ['approval csr-w1', 'approval csr-w2', 'approval csr-w3']);
});

t.test(
  'a name another token spent meanwhile (409) is refused on the decision made again; the others of the batch are approved',
  async (t) => {
    const { log, retries } = await poolBatch(t, ['w1', 'w2', 'w3'], new Set(['w2']));
    t.same(
      log.filter((l) => l.startsWith('binding')),
      ['binding w1,w2,w3'],
      'the count lost to the race stays spent: never a name twice',
    );
    t.same(
      log.filter((l) => l.startsWith('approval')).sort(),
      ['approval csr-w1', 'approval csr-w3'],
      'w2 is never approved; w1 and w3 on their own claims',
    );
    t.same(retries, [], 'token-bound is not transient: w2 is reported, not retried');
  },
);
