// Retrying one API call through failures that pass by themselves, on a
// FakeClock: the back-off, the server's Retry-After (read against the
// clock's wall time) and the overall bound, without waiting for any of them.
import t from 'tap';
import { ApiError, ExitCode, KubebootError, TransportError, UnreachableError } from '../../../agent/errors.js';
import { isTransient, retryTransient, transientWaitMs } from '../../../agent/kube/retry.js';
import { silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { runOn } from '../../support/fake-time.js';
import { until } from '../../support/until.js';

const logger = silentLogger();
const api = (status: number, retryAfter?: string) =>
  new ApiError({ method: 'POST', path: '/apis/x', status, reason: 'R', message: '', ...(retryAfter ? { retryAfter } : {}) });
const refused = () => new TransportError('POST https://api.test/apis/x: ECONNREFUSED: connect ECONNREFUSED');

/** A call that fails with each of `failures` in turn, then returns 'ok'; records the clock at every attempt. */
function flaky(clock: FakeClock, failures: unknown[]) {
  const at: number[] = [];
  const call = async () => {
    at.push(clock.monotonic());
    const next = failures.shift();
    if (next !== undefined) throw next;
    return 'ok';
  };
  return { call, at };
}

t.test('which failures are worth retrying', async (t) => {
  const cases: [string, unknown, boolean][] = [
    ['connection refused or reset', refused(), true],
    ['429 from API Priority and Fairness', api(429), true],
    ['500', api(500), true],
    ['503', api(503), true],
    ['400', api(400), false],
    ['401', api(401), false],
    ['403', api(403), false],
    ['409', api(409), false],
    ['a kubeboot error that is not the transport', new KubebootError('bad'), false],
    ['a programming error', new TypeError('x'), false],
  ];
  for (const [name, err, transient] of cases) t.equal(isTransient(err), transient, name);
});

t.test('the wait before a retry: back-off, or Retry-After within [1 s, 32 s]', async (t) => {
  const now = new Date('2026-03-01T12:00:00Z');
  const cases: [string, unknown, number, number][] = [
    ['first retry, no jitter', refused(), 0, 2_000],
    ['third retry, no jitter', refused(), 2, 8_000],
    ['far retry: capped', refused(), 10, 32_000],
    ['Retry-After seconds', api(503, '7'), 0, 7_000],
    ['Retry-After 0: never a hot loop', api(429, '0'), 0, 1_000],
    ['Retry-After beyond the cap', api(429, '3600'), 0, 32_000],
    ['Retry-After as an HTTP date, against the given wall time', api(503, 'Sun, 01 Mar 2026 12:00:10 GMT'), 0, 10_000],
    ['Retry-After malformed: back-off', api(503, 'soon'), 1, 4_000],
  ];
  for (const [name, err, attempt, ms] of cases)
    t.equal(
      transientWaitMs(err, attempt, () => 0, now),
      ms,
      name,
    );
});

t.test('on a fake clock: retries after 2, 4, 8 s and returns the answer', async (t) => {
  const clock = new FakeClock();
  const { call, at } = flaky(clock, [refused(), api(503), api(500)]);
  const result = await runOn(clock, retryTransient('creating CSR x', call, { timeoutMs: 60_000, logger, random: () => 0, clock }));
  t.equal(result, 'ok');
  t.same(at, [0, 2_000, 6_000, 14_000]);
  t.equal(clock.pending, 0, 'no timer left behind');
});

t.test("on a fake clock: Retry-After as an HTTP date is read against the clock's wall time", async (t) => {
  const clock = new FakeClock(new Date('2026-03-01T12:00:00Z'));
  const { call, at } = flaky(clock, [api(503, 'Sun, 01 Mar 2026 12:00:05 GMT')]);
  t.equal(await runOn(clock, retryTransient('x', call, { timeoutMs: 60_000, logger, random: () => 0, clock })), 'ok');
  t.same(at, [0, 5_000]);
});

t.test('on a fake clock: gives up when the next pause would pass the bound, with the last failure', async (t) => {
  const clock = new FakeClock();
  const { call, at } = flaky(clock, Array.from({ length: 20 }, refused));
  const err = await runOn(clock, retryTransient('creating CSR x', call, { timeoutMs: 20_000, logger, random: () => 0, clock }));
  t.type(err, UnreachableError);
  t.equal(
    (err as KubebootError).code,
    ExitCode.other,
    'exit 1: the API server could not be reached (exit 4 is a CSR not approved in time)',
  );
  t.match((err as Error).message, /^creating CSR x: gave up after 20s of failures; last: .*ECONNREFUSED/);
  t.same(at, [0, 2_000, 6_000, 14_000], 'a 16 s pause at 14 s would pass 20 s: no fifth attempt');
});

t.test('a failure that will not pass by itself is thrown at once, with no pause', async (t) => {
  const clock = new FakeClock();
  const { call, at } = flaky(clock, [api(403)]);
  const err = await retryTransient('x', call, { timeoutMs: 60_000, logger, clock }).catch((e: unknown) => e);
  t.type(err, ApiError);
  t.same(at, [0]);
  t.equal(clock.pending, 0);
});

t.test("stopping during a pause rejects with Node's abort error, as before the Clock", async (t) => {
  const clock = new FakeClock();
  const stop = new AbortController();
  const { call } = flaky(clock, [refused()]);
  const p = retryTransient('x', call, { timeoutMs: 60_000, logger, clock, signal: stop.signal }).catch((e: unknown) => e);
  await until('the pause', () => clock.pending > 0);
  stop.abort(new KubebootError('interrupted by SIGTERM'));
  const err = (await p) as Error & { code?: string };
  t.equal(err.name, 'AbortError');
  t.equal(err.code, 'ABORT_ERR');
  t.equal(err.message, 'The operation was aborted');
  t.equal(clock.pending, 0, 'the pause timer was cleared');
});
