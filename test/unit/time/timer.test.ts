import t from 'tap';
import { FakeClock } from '../../support/fake-time.js';
import { delay } from '../../../agent/time/timer.js';

const DAY = 24 * 60 * 60 * 1000;

/** Records when a promise settles, without awaiting it. */
function track(p: Promise<void>) {
  const state = { settled: false, error: undefined as unknown };
  p.then(
    () => (state.settled = true),
    (err) => {
      state.settled = true;
      state.error = err;
    },
  );
  return state;
}

t.test('abort rejects with the signal reason and leaves no timer behind', async (t) => {
  const clock = new FakeClock();
  const controller = new AbortController();
  const p = delay(DAY, clock, { signal: controller.signal });
  t.equal(clock.pending, 1);
  controller.abort(new Error('shutting down'));
  await t.rejects(p, { message: 'shutting down' });
  t.equal(clock.pending, 0);
});

t.test('an already-aborted signal rejects at once', async (t) => {
  const clock = new FakeClock();
  const controller = new AbortController();
  controller.abort(new Error('gone'));
  await t.rejects(delay(1000, clock, { signal: controller.signal }), { message: 'gone' });
});

t.test('delay counts monotonic time and ignores wall-clock jumps', async (t) => {
  const clock = new FakeClock();
  const wait = track(delay(2000, clock));
  clock.jump(-DAY);
  await clock.tick(1999);
  t.notOk(wait.settled);
  await clock.tick(1);
  t.ok(wait.settled);
});

t.test('a delay longer than one chunk is served in chunks', async (t) => {
  const clock = new FakeClock();
  const wait = track(delay(30 * DAY, clock, { chunkMs: DAY }));
  t.equal(clock.nextTimerIn(), DAY);
  await clock.tick(30 * DAY - 1);
  t.notOk(wait.settled);
  await clock.tick(1);
  t.ok(wait.settled);
});
