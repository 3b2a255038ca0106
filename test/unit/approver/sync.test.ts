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
import { kubeProxyCsrOfNode } from '../../support/approver.js';
import { FakeClock } from '../../support/fake-time.js';

const server = 'https://api.test';
const policy: ApproverPolicy = {
  keyAlgorithms: ['ecdsa-p256'],
  maxExpirationSeconds: 86_400,
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
};

interface Seen {
  approvals: string[];
  events: string[];
}

/** The API server: Node n1 present or not, /approval answering `approval`, every review allowed. */
function setup(t: Test, node: 'present' | 'missing', approval = 200) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const seen: Seen = { approvals: [], events: [] };
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
      return { statusCode: approval, data: approval === 200 ? body : { kind: 'Status', code: approval } };
    })
    .persist();
  pool
    .intercept({ path: (p) => p.includes('/events'), method: 'POST' })
    .reply<object>((req) => (seen.events.push((JSON.parse(String(req.body)) as { reason: string }).reason), { statusCode: 201, data: {} }))
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
    timed: (_call, request) => request(),
  };
  return { ctx, cache, seen, state };
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
  t.same(seen, { approvals: [], events: [] });
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

t.test('names gone from the cache, and settled CSRs, are passed over', async (t) => {
  const { ctx, cache, seen } = setup(t, 'present');
  const settled = await kubeProxyCsrOfNode('done');
  cache.set({ ...settled, status: { conditions: [{ type: 'Approved', status: 'True' }], certificate: 'x' } });
  t.same(await syncCertificateRequests(['gone', 'done'], ctx), []);
  t.same(seen, { approvals: [], events: [] });
});
