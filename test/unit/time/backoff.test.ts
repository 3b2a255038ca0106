import t from 'tap';
import { DEFAULT_BACKOFF, nextDelay, retryAfterMs } from '../../../agent/time/backoff.js';

t.test('the default schedule doubles from 2 s and stays at 32 s, like client-go', async (t) => {
  const delays = [0, 1, 2, 3, 4, 5, 6, 50].map((a) => nextDelay(a, DEFAULT_BACKOFF, () => 0));
  t.same(delays, [2000, 4000, 8000, 16000, 32000, 32000, 32000, 32000]);
});

t.test('jitter lengthens a delay by at most its fraction, applied after the cap', async (t) => {
  t.equal(
    nextDelay(0, DEFAULT_BACKOFF, () => 0.5),
    2100,
  );
  t.equal(
    nextDelay(10, DEFAULT_BACKOFF, () => 1),
    35200,
  );
});

t.test('a huge attempt number neither overflows nor exceeds the cap', async (t) => {
  const opts = { initial: 1000, factor: 3, cap: 300_000, jitter: 0 };
  t.equal(
    nextDelay(10_000, opts, () => 0),
    300_000,
  );
});

t.test('Retry-After in seconds is converted to milliseconds', async (t) => {
  const now = new Date('2025-01-01T00:00:00Z');
  t.equal(retryAfterMs('120', now), 120_000);
  t.equal(retryAfterMs(' 0 ', now), 0);
});

t.test('Retry-After as an HTTP-date waits until that time, in all three forms', async (t) => {
  const now = new Date('1994-11-06T08:49:00Z');
  t.equal(retryAfterMs('Sun, 06 Nov 1994 08:49:37 GMT', now), 37_000);
  t.equal(retryAfterMs('Sunday, 06-Nov-94 08:49:37 GMT', now), 37_000);
  t.equal(retryAfterMs('Sun Nov  6 08:49:37 1994', now), 37_000);
});

t.test('a Retry-After date in the past means retry now', async (t) => {
  t.equal(retryAfterMs('Sun, 06 Nov 1994 08:49:37 GMT', new Date('2025-01-01T00:00:00Z')), 0);
});

t.test('a missing or malformed Retry-After is ignored', async (t) => {
  const now = new Date();
  for (const v of [undefined, '', '-5', '1.5', 'soon', '2025-01-01', 'Sun, 06 Nov 1994 08:49:37']) {
    t.equal(retryAfterMs(v, now), null, JSON.stringify(v));
  }
});
