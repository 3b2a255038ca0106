// The approver's loop against a mocked API server: a CSR that cannot be
// decided yet, or cannot be addressed at all, costs a bounded number of
// requests per resync period, however often it is looked at.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { CertificateController } from '../../../agent/approver/controller.js';
import { CSR_PATH } from '../../../agent/approver/informer.js';
import { createApproverMetrics } from '../../../agent/approver/metrics.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { type Logger, silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { kubeProxyCsrOfNode } from '../../support/approver.js';
import { emptyRecords, leadAndAllow } from '../../support/mock-approver.js';
import { until } from '../../support/until.js';

const server = 'https://api.test';
const policy: ApproverPolicy = {
  keyAlgorithms: ['ecdsa-p256'],
  maxExpirationSeconds: 86_400,
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
};
const RESYNC_MS = 100;
const PERIODS = 12;

async function run(
  t: Test,
  node: 'missing' | 'present',
  approval: number,
  logger: Logger = silentLogger(),
): Promise<{ nodeGets: number; approvalPuts: number }> {
  const csr = await kubeProxyCsrOfNode('stuck', 'u1');
  const mock = new MockAgent();
  mock.disableNetConnect();
  const pool = mock.get(server);
  const count = { nodeGets: 0, approvalPuts: 0 };
  pool
    .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'CertificateSigningRequestList', metadata: { resourceVersion: '10' }, items: [csr] })
    .persist();
  pool
    .intercept({ path: (p) => p.includes('watch=true'), method: 'GET' })
    .reply(200, '')
    .delay(60_000)
    .persist();
  pool
    .intercept({ path: '/api/v1/nodes/n1', method: 'GET' })
    .reply<object>(
      () => (
        count.nodeGets++,
        node === 'present'
          ? { statusCode: 200, data: { kind: 'Node', metadata: { name: 'n1' } } }
          : { statusCode: 404, data: { kind: 'Status', code: 404 } }
      ),
    )
    .persist();
  leadAndAllow(pool);
  pool
    .intercept({ path: '/api/v1/namespaces/kubeboot/configmaps/revocations', method: 'GET' })
    .reply(404, { kind: 'Status', code: 404 })
    .persist();
  pool
    .intercept({ path: `${CSR_PATH}/stuck/approval`, method: 'PUT' })
    .reply<object>(() => (count.approvalPuts++, { statusCode: approval, data: { kind: 'Status', code: approval } }))
    .persist();
  pool
    .intercept({ path: (p) => p.includes('/events'), method: 'POST' })
    .reply(201, {})
    .persist();
  const approver = new CertificateController(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    {
      policy,
      denyViolations: false,
      resyncMs: RESYNC_MS,
      retryMs: 20,
      lease: { namespace: 'kube-system', name: 'l', identity: 'me', leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 20 },
    },
    logger,
    createApproverMetrics(),
  );
  const stop = new AbortController();
  const running = approver.run(stop.signal);
  // A window of PERIODS resyncs; the counts, not the time, are what is asserted.
  await new Promise((resolve) => setTimeout(resolve, RESYNC_MS * PERIODS).unref());
  stop.abort();
  await running;
  await mock.close();
  t.comment(
    `${node} Node, /approval ${approval}: ${count.nodeGets} Node GETs, ${count.approvalPuts} approval PUTs in ${PERIODS} resync periods`,
  );
  return count;
}

t.test('a CSR waiting for its Node is looked at about twice a period, never in growing chains of re-checks', async (t) => {
  const { nodeGets } = await run(t, 'missing', 200);
  t.ok(nodeGets >= PERIODS / 2, 'it is looked at again');
  t.ok(nodeGets <= 3 * PERIODS, `at most 3 looks per period (${nodeGets} in ${PERIODS})`);
});

t.test('a CSR the API server answers 404 for on /approval is not decided again until it changes', async (t) => {
  const { approvalPuts } = await run(t, 'present', 404);
  t.equal(approvalPuts, 1, 'one PUT, however many resyncs');
});

t.test('on a fake clock: a CSR waiting for its Node is looked at again after 5, 10, 20, 40, 80 s', async (t) => {
  const csr = await kubeProxyCsrOfNode('early', 'u2');
  const clock = new FakeClock();
  const mock = new MockAgent();
  mock.disableNetConnect();
  const pool = mock.get(server);
  const lookedAt: number[] = [];
  // First: the records' watches are theirs, not the CSR watch's below.
  emptyRecords(pool);
  pool
    .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'CertificateSigningRequestList', metadata: { resourceVersion: '10' }, items: [csr] });
  // The watch brings nothing (it is answered when the test ends).
  pool
    .intercept({ path: (p) => p.includes('watch=true'), method: 'GET' })
    .reply(200, '')
    .delay(600_000);
  pool
    .intercept({ path: '/api/v1/nodes/n1', method: 'GET' })
    .reply(() => (lookedAt.push(clock.monotonic()), { statusCode: 404, data: { kind: 'Status', code: 404 } }))
    .persist();
  pool.intercept({ path: (p) => p.includes('/leases/'), method: 'GET' }).reply(404, { kind: 'Status', code: 404 });
  pool.intercept({ path: (p) => p.endsWith('/leases'), method: 'POST' }).reply(201, {});
  pool.intercept({ path: (p) => p.includes('/events'), method: 'POST' }).reply(201, {});
  const approver = new CertificateController(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    {
      policy,
      denyViolations: false,
      resyncMs: 7_200_000,
      clock,
      // The lease is taken at its first retry after the cache has synced (1 h), and not
      // renewed again within the test: after that the clock moves only for re-checks.
      lease: {
        namespace: 'kube-system',
        name: 'l',
        identity: 'me',
        leaseDurationMs: 7_200_000,
        renewDeadlineMs: 7_200_000,
        retryPeriodMs: 3_600_000,
      },
    },
    silentLogger(),
    createApproverMetrics(),
  );
  const stop = new AbortController();
  const running = approver.run(stop.signal);
  await until('the cache to sync', () => approver.informer.synced && clock.pending === 2);
  clock.advance(clock.nextTimerIn()!);
  const leading = clock.monotonic();
  // The new leader's first beacon is due at once: published before the clock moves on.
  await until("the leader's first beacon armed", () => clock.nextTimerIn() === 0);
  clock.advance(0);
  await until('the beacon published', () => approver.beacon.rotations === 1);
  // Armed while idle: the resync, the lease's retry period, the beacon's next rotation (5 min) and the CSR's re-check.
  for (let looks = 1; looks <= 6; looks++) {
    await until(`look ${looks} and its re-check armed`, () => lookedAt.length === looks && clock.pending === 4);
    if (looks < 6) clock.advance(clock.nextTimerIn()!);
  }
  t.same(
    lookedAt.map((at) => at - leading),
    [0, 5_000, 15_000, 35_000, 75_000, 155_000],
    'looked at once leading, then each re-check waits twice as long as the one before',
  );
  stop.abort();
  await running;
  t.equal(clock.pending, 0, 'stopping leaves no timer armed');
  await mock.close();
});

t.test('a CSR left pending is logged with a fixed message; what the CSR says (its requester, names) goes in fields only', async (t) => {
  const records: { message: string; fields: Record<string, unknown> }[] = [];
  const keep = (message: string, fields: Record<string, unknown> = {}) => void records.push({ message, fields });
  await run(t, 'missing', 200, { error: keep, warn: keep, info: keep, debug: keep });
  const pending = records.filter((r) => r.message.startsWith('left CSR pending'));
  t.ok(pending.length > 0, 'left pending while its Node is missing');
  for (const r of pending) {
    t.equal(r.message, 'left CSR pending');
    t.match(r.fields, { csr: 'stuck', requester: 'system:node:n1', rule: 'node-exists', reason: /n1/ });
  }
});
