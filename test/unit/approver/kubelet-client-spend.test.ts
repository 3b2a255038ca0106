// Spending a bootstrap token's name is a compare-and-swap: the approver writes
// the binding's status with the resourceVersion it decided on, then creates
// the name's claim, before the approval. When another approver (or an admin)
// changed the binding meanwhile (409), the binding is read again and the CSR
// decided again on what it now says.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { CertificateController } from '../../../agent/approver/controller.js';
import { CSR_PATH } from '../../../agent/approver/informer.js';
import { createApproverMetrics } from '../../../agent/approver/metrics.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { bindingRecord } from '../../../agent/records/bindings.js';
import { silentLogger } from '../../../agent/log.js';
import { craftCsrPem } from '../../support/approver.js';
import { leadAndAllow } from '../../support/mock-approver.js';
import { until } from '../../support/until.js';

const server = 'https://api.test';
const BINDINGS = '/apis/kubeboot.io/v1alpha1/tokenbindings';
const BINDING = `${BINDINGS}/abcdef`;
const policy: ApproverPolicy = {
  keyAlgorithms: ['ecdsa-p256'],
  maxExpirationSeconds: 86_400,
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
  kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] },
};

/** The binding of `kubeboot token create --node w1` at a resourceVersion, `issued` as the approver wrote it. */
function binding(resourceVersion: string, issued: Record<string, string>) {
  const made = bindingRecord('abcdef', { names: ['w1'] }, 'secret-uid');
  return {
    ...made,
    metadata: { ...made.metadata, resourceVersion },
    status: { issued: Object.entries(issued).map(([node, csrUID]) => ({ node, csrUID })) },
  };
}

interface Seen {
  patches: { resourceVersion: string; issued: string }[];
  approvals: number;
  events: string[];
}

/**
 * One pending CSR of token abcdef for w1; the binding's first PATCH answers
 * 409, after which it reads as `after`.
 */
async function run(t: Test, after: Record<string, string>): Promise<Seen> {
  const csr = {
    kind: 'CertificateSigningRequest',
    metadata: { name: 'node-csr-1', uid: 'uid-1', resourceVersion: '5', creationTimestamp: '2026-12-01T16:00:00Z' },
    spec: {
      request: Buffer.from(await craftCsrPem({ cn: 'system:node:w1', o: ['system:nodes'] })).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      username: 'system:bootstrap:abcdef',
      groups: ['system:bootstrappers', 'system:authenticated'],
      usages: ['digital signature', 'key encipherment', 'client auth'],
    },
    status: {},
  };
  const seen: Seen = { patches: [], approvals: 0, events: [] };
  const mock = new MockAgent();
  mock.disableNetConnect();
  const pool = mock.get(server);
  pool
    .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'CertificateSigningRequestList', metadata: { resourceVersion: '10' }, items: [csr] })
    .persist();
  pool
    .intercept({ path: (p) => p.includes('watch=true'), method: 'GET' })
    .reply(200, '')
    .delay(60_000)
    .persist();
  pool.intercept({ path: '/api/v1/nodes/w1', method: 'GET' }).reply(404, { kind: 'Status', code: 404 }).persist();
  pool
    .intercept({ path: `${BINDINGS}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'TokenBindingList', metadata: { resourceVersion: '7' }, items: [binding('7', {})] })
    .persist();
  pool
    .intercept({ path: BINDING, method: 'GET' })
    .reply<object>(() => ({ statusCode: 200, data: binding('8', after) }))
    .persist();
  pool
    .intercept({ path: `${BINDING}/status`, method: 'PATCH' })
    .reply<object>((req) => {
      const body = JSON.parse(String(req.body)) as { metadata: { resourceVersion: string }; status: { issued: object[] } };
      seen.patches.push({ resourceVersion: body.metadata.resourceVersion, issued: JSON.stringify(body.status.issued) });
      return seen.patches.length === 1
        ? { statusCode: 409, data: { kind: 'Status', code: 409, reason: 'Conflict' } }
        : { statusCode: 200, data: { ...binding('9', {}), status: body.status } };
    })
    .persist();
  pool
    .intercept({ path: '/apis/kubeboot.io/v1alpha1/nodeclaims', method: 'POST' })
    .reply<object>((req) => ({
      statusCode: 201,
      data: { ...JSON.parse(String(req.body)), metadata: { name: 'w1', resourceVersion: '10' } },
    }))
    .persist();
  leadAndAllow(pool);
  pool
    .intercept({ path: `${CSR_PATH}/node-csr-1/approval`, method: 'PUT' })
    .reply<object>(() => (seen.approvals++, { statusCode: 200, data: { ...csr, status: { conditions: [{ type: 'Approved' }] } } }))
    .persist();
  pool
    .intercept({ path: (p) => p.includes('/events'), method: 'POST' })
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
    createApproverMetrics(),
  );
  const stop = new AbortController();
  const running = approver.run(stop.signal);
  await until('an approval or a reported violation', () => seen.approvals > 0 || seen.events.length > 0);
  stop.abort();
  await running;
  await mock.close();
  t.comment(JSON.stringify(seen));
  return seen;
}

t.test(
  'a binding changed meanwhile (409) is read again and the CSR decided again: still free, the name is spent on the new version',
  async (t) => {
    const seen = await run(t, {});
    t.same(
      seen.patches,
      [
        { resourceVersion: '7', issued: '[{"node":"w1","csrUID":"uid-1"}]' },
        { resourceVersion: '8', issued: '[{"node":"w1","csrUID":"uid-1"}]' },
      ],
      'each claim is made on the version it was decided on',
    );
    t.equal(seen.approvals, 1, 'approved once, after the claim held');
  },
);

t.test('a binding another approver spent meanwhile (409, then the name taken) is refused, and nothing is approved', async (t) => {
  const seen = await run(t, { w1: 'uid-of-another-csr' });
  t.equal(seen.patches.length, 1, 'no second claim');
  t.equal(seen.approvals, 0, 'no approval');
  t.match(seen.events, [/kubelet-client rule token-bound: token abcdef was already spent on w1/], 'reported under token-bound');
});
