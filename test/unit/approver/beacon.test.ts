// The leader's beacon (approver/beacon.ts): published at once when it
// leads, rotated every period on the resourceVersion read, republished at
// once when deleted, a lost race read again, nothing written by a follower.
import t from 'tap';
import { BeaconKeeper } from '../../../agent/approver/beacon.js';
import type { KubeClient } from '../../../agent/kube/client.js';
import type { TpmBeaconObject } from '../../../agent/records/kinds.js';
import { acceptedBeacons, ROTATE_SECONDS } from '../../../agent/records/tpm-beacon.js';
import { capturingLogger, FakeClock } from '../../support/fake-time.js';
import { until } from '../../support/until.js';

/** An API server holding the one record, answering creates and conditional replaces as the real one does. */
function cluster() {
  let stored: TpmBeaconObject | null = null;
  let rv = 0;
  const writes: string[] = [];
  const failNext = { status: 0 };
  const client = {
    async request(method: string, _path: string, opts: { body?: TpmBeaconObject } = {}) {
      if (failNext.status !== 0) {
        const status = failNext.status;
        failNext.status = 0;
        throw Object.assign(new Error(`HTTP ${status}`), { status });
      }
      if (method === 'GET') return stored === null ? { status: 404, body: {} } : { status: 200, body: stored };
      const body = opts.body!;
      if (method === 'POST' && stored !== null) return { status: 409, body: {} };
      if (method === 'PUT' && (stored === null || body.metadata.resourceVersion !== stored.metadata.resourceVersion))
        return { status: stored === null ? 404 : 409, body: {} };
      writes.push(method);
      stored = { ...body, metadata: { ...body.metadata, resourceVersion: String(++rv) } };
      return { status: method === 'POST' ? 201 : 200, body: stored };
    },
  } as unknown as KubeClient;
  return {
    client,
    writes,
    failNext,
    get stored() {
      return stored;
    },
    /** Someone else's write (the admin, another leader for a moment). */
    set stored(object: TpmBeaconObject | null) {
      stored = object === null ? null : { ...object, metadata: { ...object.metadata, resourceVersion: String(++rv) } };
    },
  };
}

function keeper(api: ReturnType<typeof cluster>, clock: FakeClock) {
  let cached: TpmBeaconObject | null = null;
  let n = 0;
  const records = {
    get: () => cached,
    remember: (_: string, o: TpmBeaconObject) => (cached = o),
    refresh: (_: string, __: string, o: TpmBeaconObject | null) => (cached = o),
  };
  const { logger, lines } = capturingLogger();
  const k = new BeaconKeeper({
    client: api.client,
    // biome-ignore lint/suspicious/noExplicitAny: the fake store answers the one record
    records: records as any,
    clock,
    logger,
    timed: (_call, request) => request(),
    signal: () => undefined,
    random: () => Buffer.alloc(32, ++n),
  });
  return { k, lines, records, setCached: (o: TpmBeaconObject | null) => (cached = o) };
}

t.test('a leader publishes at once, then every period; a follower writes nothing', async (t) => {
  const api = cluster();
  const clock = new FakeClock(new Date('2026-12-04T13:00:00Z'));
  const { k, records } = keeper(api, clock);
  k.lead(true);
  await clock.tick(0);
  await until('the first beacon', () => api.writes.length === 1);
  t.same(api.writes, ['POST'], 'created');
  t.same(acceptedBeacons(records.get()), [Buffer.alloc(32, 1)], 'and remembered at once');
  await clock.tick(ROTATE_SECONDS * 1000 - 1);
  t.equal(api.writes.length, 1, 'nothing before the period is up');
  await clock.tick(1);
  await until('the rotation', () => api.writes.length === 2);
  t.same(api.writes, ['POST', 'PUT'], 'replaced on the resourceVersion read');
  t.same(acceptedBeacons(api.stored), [Buffer.alloc(32, 2), Buffer.alloc(32, 1)]);
  k.lead(false);
  await clock.tick(10 * ROTATE_SECONDS * 1000);
  t.equal(api.writes.length, 2, 'a process that lost the lease stops rotating');
  t.equal(clock.pending, 0, 'and keeps no timer');
});

t.test('deleted: republished at once; a write that lost a race is read again, then made on what is there', async (t) => {
  const api = cluster();
  const clock = new FakeClock(new Date('2026-12-04T13:00:00Z'));
  const { k, records, setCached } = keeper(api, clock);
  k.lead(true);
  await clock.tick(0);
  await until('the first beacon', () => api.writes.length === 1);
  // The admin deletes it: the watch brings the deletion.
  api.stored = null;
  setCached(null);
  k.changed();
  await clock.tick(0);
  await until('republished', () => api.writes.length === 2);
  t.same(acceptedBeacons(api.stored), [Buffer.alloc(32, 2)], 'a fresh beacon alone');
  // Another writer replaced it (its cache not yet told): the due rotation meets a 409, reads, and rotates on that.
  const theirs = {
    ...api.stored!,
    spec: { beacons: [{ value: Buffer.alloc(32, 9).toString('base64'), published: '2026-12-04T12:00:00Z' }] },
  };
  api.stored = theirs;
  await clock.tick(ROTATE_SECONDS * 1000);
  await until('the rotation after the conflict', () => api.writes.length === 3);
  t.same(acceptedBeacons(api.stored), [Buffer.alloc(32, 4), Buffer.alloc(32, 9)], 'the one read kept behind the new');
  t.same(acceptedBeacons(records.get()), acceptedBeacons(api.stored));
  await k.stop();
});

t.test('a failed write is retried; the beacons published stay as they are meanwhile', async (t) => {
  const api = cluster();
  const clock = new FakeClock(new Date('2026-12-04T13:00:00Z'));
  const { k, lines } = keeper(api, clock);
  api.failNext.status = 503;
  k.lead(true);
  await clock.tick(0);
  await until('the warning', () => lines.some((l) => l.level === 'warn'));
  t.match(lines.find((l) => l.level === 'warn')?.message, /could not publish a new beacon in tpmbeacons\.kubeboot\.io\/kubeboot/);
  t.equal(api.writes.length, 0);
  await clock.tick(10_000);
  await until('the retry', () => api.writes.length === 1);
  t.ok(
    lines.every((l) => !/[A-Za-z0-9+/]{43}=/.test(l.message)),
    'no beacon value is logged',
  );
  await k.stop();
});

t.test(
  'stopping waits for a write in flight instead of aborting it (an HTTP/2 reset as the process stops aborts Node 24.22.3)',
  async (t) => {
    const clock = new FakeClock(new Date('2026-12-04T13:00:00Z'));
    let answer: (() => void) | undefined;
    let signalled: unknown = 'unset';
    const client = {
      request: (_m: string, _p: string, opts: { body?: TpmBeaconObject; signal?: AbortSignal }) => {
        signalled = opts.signal;
        return new Promise((resolve) => {
          answer = () => resolve({ status: 201, body: { ...opts.body, metadata: { name: 'kubeboot', resourceVersion: '1' } } });
        });
      },
    } as unknown as KubeClient;
    const stopping = new AbortController();
    const k = new BeaconKeeper({
      client,
      // biome-ignore lint/suspicious/noExplicitAny: no record yet
      records: { get: () => null, remember: () => {}, refresh: () => {} } as any,
      clock,
      logger: capturingLogger().logger,
      timed: (_call, request) => request(),
      signal: () => stopping.signal,
    });
    k.lead(true);
    await clock.tick(0);
    await until('the write in flight', () => answer !== undefined);
    t.equal(signalled, undefined, 'the write carries no abort signal');
    stopping.abort();
    let stopped = false;
    const stop = k.stop().then(() => (stopped = true));
    await clock.tick(0);
    t.notOk(stopped, 'stop() waits while the write is in flight');
    answer!();
    await stop;
    t.ok(stopped);
    t.equal(k.rotations, 1, 'the write that was in flight is counted');
    t.equal(clock.pending, 0, 'and nothing is scheduled after it');
  },
);
