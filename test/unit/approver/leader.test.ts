// Lease leader election against a mocked API: acquiring, respecting another
// holder for the lease duration on our own clock, taking over after it, and
// stopping at once when renewals fail past the renew deadline.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { LeaderElector } from '../../../agent/approver/leader.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { until } from '../../support/until.js';

const server = 'https://api.test';
const leases = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases';
const lease = `${leases}/kubeboot-approver`;

function setup(t: Test, mayLead?: () => boolean, retryPeriodMs = 2_000) {
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
      retryPeriodMs,
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

/**
 * An API server holding one Lease, as slow as `answerMs` on the fake clock
 * (each answer moves the clock), writes conditional on the resourceVersion;
 * `asked` is what a worker would have seen at each answer.
 */
function slowServer(t: Test, answerMs: number, retryPeriodMs?: number) {
  const { pool, elector, clock, changes } = setup(t, undefined, retryPeriodMs);
  let stored: { metadata: { resourceVersion: string }; spec: object } | null = null;
  let version = 0;
  const requests: string[] = [];
  const asked: boolean[] = [];
  const answer = (method: string, body: () => [number, object]) => {
    requests.push(method);
    clock.advance(answerMs);
    const [status, value] = body();
    return { statusCode: status, data: value };
  };
  const written = (opts: { body?: unknown }) => {
    const lease = JSON.parse(String(opts.body)) as NonNullable<typeof stored>;
    lease.metadata.resourceVersion = String(++version);
    return (stored = lease);
  };
  pool
    .intercept({ path: lease, method: 'GET' })
    .reply(() => answer('GET', () => (stored === null ? [404, { kind: 'Status', reason: 'NotFound' }] : [200, stored])))
    .persist();
  pool.intercept({ path: leases, method: 'POST' }).reply((opts) => answer('POST', () => [201, written(opts)]));
  pool
    .intercept({ path: lease, method: 'PUT' })
    .reply((opts) =>
      answer('PUT', () =>
        (JSON.parse(String(opts.body)) as NonNullable<typeof stored>).metadata.resourceVersion === stored?.metadata.resourceVersion
          ? [200, written(opts)]
          : [409, { kind: 'Status', reason: 'Conflict' }],
      ),
    )
    .persist();
  // A worker asks whether it leads whenever the fake clock moves (each answer, each timer).
  const watch = () => clock.setTimeout(() => (asked.push(elector.isLeader()), watch()), 500);
  watch();
  return { elector, clock, changes, requests, asked, bump: () => (stored!.metadata.resourceVersion = String(++version)) };
}

// Before: GET and PUT, the deadline from before the GET, the next attempt a retry period after the answer: 2.5 + 2.5 + 3 + 2.5 s
// before the next renewal's GET is answered, past the 10 s deadline, though every renewal succeeded.
t.test(
  'a leader whose renewals all succeed, each answer 2.5 s late, leads throughout: the deadline runs from the write sent, one PUT a renewal, the next due a retry period after the last began',
  async (t) => {
    const { elector, clock, changes, requests, asked } = slowServer(t, 2_500, 3_000);
    const stop = new AbortController();
    const running = elector.run(stop.signal);
    // 60 s of fake time: the answers move the clock, and each timer the loop arms (between renewals) is fired in turn.
    while (clock.monotonic() < 60_000) {
      await until('the elector to arm its next timer', () => clock.pending >= 2, 10_000);
      clock.advance(clock.nextTimerIn()!);
    }
    t.ok(elector.isLeader(), 'still the leader');
    t.same(changes, [true], 'never stopped leading, so never re-queued everything');
    t.notOk(asked.slice(asked.indexOf(true)).includes(false), 'no worker saw it not leading once it led');
    t.same(requests.slice(0, 3), ['GET', 'POST', 'PUT'], 'created, then renewed with a PUT alone');
    t.notOk(requests.slice(2).includes('GET'), 'no read before a renewal while its writes hold');
    t.ok(requests.length >= 18, `renewed every retry period (${requests.length} requests in 60 s)`);
    stop.abort();
    await running;
  },
);

t.test('a leader whose renewal meets a conflict (the Lease written by someone else) reads it and renews on what it read', async (t) => {
  const { elector, changes, requests, bump } = slowServer(t, 0);
  const signal = new AbortController().signal;
  await elector.step(signal);
  await elector.step(signal);
  t.same(requests, ['GET', 'POST', 'PUT']);
  bump();
  await elector.step(signal);
  t.same(requests.slice(3), ['PUT', 'GET', 'PUT'], 'the PUT on the version it wrote is refused; read, then written again');
  t.ok(elector.isLeader());
  t.same(changes, [true]);
});
