// Lease leader election against a mocked API: acquiring, respecting another
// holder for the lease duration on our own clock, taking over after it, and
// stopping at once when renewals fail past the renew deadline.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { LeaderElector } from '../../../agent/approver/leader.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';

const server = 'https://api.test';
const leases = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases';
const lease = `${leases}/kubeboot-approver`;

function setup(t: Test, mayLead?: () => boolean) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock);
  const clock = new FakeClock();
  const changes: boolean[] = [];
  const sent: unknown[] = [];
  const elector = new LeaderElector(
    client,
    {
      namespace: 'kube-system',
      name: 'kubeboot-approver',
      identity: 'me',
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 2_000,
      clock,
      onChange: (l) => changes.push(l),
      ...(mayLead ? { mayLead } : {}),
    },
    silentLogger(),
  );
  return { pool, elector, clock, changes, sent, signal: new AbortController().signal };
}

const held = (holder: string, renewTime = '2026-01-01T00:00:00.000000Z', rv = '1') => ({
  apiVersion: 'coordination.k8s.io/v1',
  kind: 'Lease',
  metadata: { name: 'kubeboot-approver', namespace: 'kube-system', resourceVersion: rv },
  spec: { holderIdentity: holder, leaseDurationSeconds: 15, renewTime, leaseTransitions: 3 },
});

t.test('creates the Lease when there is none and leads', async (t) => {
  const { pool, elector, changes, signal } = setup(t);
  pool.intercept({ path: lease, method: 'GET' }).reply(404, { kind: 'Status', reason: 'NotFound' });
  let created: { spec: { holderIdentity: string } } | undefined;
  pool.intercept({ path: leases, method: 'POST' }).reply(201, (opts) => ((created = JSON.parse(String(opts.body))), created!));
  await elector.step(signal);
  t.equal(created?.spec.holderIdentity, 'me');
  t.ok(elector.isLeader());
  t.same(changes, [true]);
});

t.test("waits out another holder's lease on its own clock, then takes over with one more transition", async (t) => {
  const { pool, elector, clock, changes, signal } = setup(t);
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held('other')).times(2);
  await elector.step(signal);
  t.notOk(elector.isLeader(), 'held by another: not leading');
  clock.advance(14_999 - clock.monotonic());
  await elector.step(signal);
  t.notOk(elector.isLeader(), 'still within its lease duration (unchanged record)');
  clock.advance(15_000 - clock.monotonic());
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held('other'));
  let put: { spec: { holderIdentity: string; leaseTransitions: number }; metadata: { resourceVersion: string } } | undefined;
  pool.intercept({ path: lease, method: 'PUT' }).reply(200, (opts) => ((put = JSON.parse(String(opts.body))), put!));
  await elector.step(signal);
  t.ok(elector.isLeader(), 'expired: taken over');
  t.equal(put?.spec.holderIdentity, 'me');
  t.equal(put?.spec.leaseTransitions, 4);
  t.equal(put?.metadata.resourceVersion, '1', 'the update is conditional on the resourceVersion read');
  t.same(changes, [true]);
});

t.test('a renewed record from another holder restarts the wait', async (t) => {
  const { pool, elector, clock, signal } = setup(t);
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held('other', '2026-01-01T00:00:00.000000Z', '1'));
  await elector.step(signal);
  clock.advance(10_000 - clock.monotonic());
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held('other', '2026-01-01T00:00:10.000000Z', '2'));
  await elector.step(signal);
  clock.advance(20_000 - clock.monotonic());
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held('other', '2026-01-01T00:00:10.000000Z', '2'));
  let updated = false;
  pool.intercept({ path: lease, method: 'PUT' }).reply(200, () => ((updated = true), {}));
  await elector.step(signal);
  t.notOk(updated, '10 s after the last change (20 s after the first sight): no attempt to take it');
  t.notOk(elector.isLeader());
});

t.test('a leader whose renewals fail stops leading once the renew deadline has passed', async (t) => {
  const { pool, elector, clock, changes, signal } = setup(t);
  pool.intercept({ path: lease, method: 'GET' }).reply(404, {});
  pool.intercept({ path: leases, method: 'POST' }).reply(201, {});
  await elector.step(signal);
  pool.intercept({ path: lease, method: 'GET' }).reply(500, { kind: 'Status', message: 'etcd down' }).times(2);
  clock.advance(9_999 - clock.monotonic());
  await elector.step(signal);
  t.ok(elector.isLeader(), 'within the renew deadline it still leads');
  clock.advance(10_000 - clock.monotonic());
  t.notOk(elector.isLeader(), 'at the deadline it stops, without waiting for another request');
  t.same(changes, [true, false]);
});

t.test('losing the race for the update (409) is not leading', async (t) => {
  const { pool, elector, signal } = setup(t);
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held(''));
  pool.intercept({ path: lease, method: 'PUT' }).reply(409, { kind: 'Status', reason: 'Conflict' });
  await elector.step(signal);
  t.notOk(elector.isLeader());
});

t.test('a replica that cannot do the work takes no lease, and a leader that stops being able to releases it (finding 3)', async (t) => {
  let able = false;
  const { pool, elector, changes, signal } = setup(t, () => able);
  await elector.step(signal);
  t.notOk(elector.isLeader(), 'no request, no lease while unable');
  able = true;
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held(''));
  pool.intercept({ path: lease, method: 'PUT' }).reply(200, (opts) => JSON.parse(String(opts.body)));
  await elector.step(signal);
  t.ok(elector.isLeader(), 'leads once able');
  able = false;
  let released: { spec: { holderIdentity?: string } } | undefined;
  pool.intercept({ path: lease, method: 'GET' }).reply(200, held('me'));
  pool.intercept({ path: lease, method: 'PUT' }).reply(200, (opts) => ((released = JSON.parse(String(opts.body))), released!));
  await elector.step(signal);
  t.notOk(elector.isLeader(), 'steps down');
  t.notOk(released?.spec.holderIdentity, 'and empties the holder, so a standby takes over at once');
  t.same(changes, [true, false]);
});
