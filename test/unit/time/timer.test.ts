import t from 'tap';
import { FakeClock } from '../../../agent/time/clock.js';
import { DEFAULT_CHUNK_MS, delay, sleepUntil } from '../../../agent/time/timer.js';

const DAY = 24 * 60 * 60 * 1000;
const HOUR = 60 * 60 * 1000;

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

t.test('a one-year deadline is still pending after 25 days and resolves at the deadline', async (t) => {
  const clock = new FakeClock();
  const deadline = new Date(clock.now().getTime() + 365 * DAY);
  const sleep = track(sleepUntil(deadline, clock));
  await clock.tick(25 * DAY);
  t.notOk(sleep.settled, 'not fired past the 24.8-day setTimeout limit');
  t.ok((clock.nextTimerIn() ?? Infinity) <= DEFAULT_CHUNK_MS, 'no timer longer than one chunk');
  await clock.tick(deadline.getTime() - clock.now().getTime() - 1);
  t.notOk(sleep.settled, 'not early');
  await clock.tick(1);
  t.ok(sleep.settled);
  t.equal(clock.now().getTime(), deadline.getTime());
});

t.test('a wall-clock jump past the deadline is noticed at the next chunk wake', async (t) => {
  const clock = new FakeClock();
  const deadline = new Date(clock.now().getTime() + 300 * DAY);
  const chunkMs = HOUR;
  const sleep = track(sleepUntil(deadline, clock, { chunkMs }));
  await clock.tick(10 * 60 * 1000);
  clock.jump(400 * DAY); // resume after a long suspend, or an NTP step
  await clock.tick(chunkMs - 10 * 60 * 1000 - 1);
  t.notOk(sleep.settled, 'nothing wakes before the chunk ends');
  await clock.tick(1);
  t.ok(sleep.settled, 'overdue deadline noticed within one chunk');
});

t.test('a wall-clock step backwards postpones the wake to the real deadline', async (t) => {
  const clock = new FakeClock();
  const deadline = new Date(clock.now().getTime() + 2 * HOUR);
  const sleep = track(sleepUntil(deadline, clock));
  clock.jump(-HOUR);
  await clock.tick(2 * HOUR);
  t.notOk(sleep.settled);
  await clock.tick(HOUR);
  t.ok(sleep.settled);
});

t.test('a deadline already in the past resolves without arming a timer', async (t) => {
  const clock = new FakeClock();
  await sleepUntil(new Date(clock.now().getTime() - DAY), clock);
  t.equal(clock.pending, 0);
});

t.test('abort rejects with the signal reason and leaves no timer behind', async (t) => {
  const clock = new FakeClock();
  const controller = new AbortController();
  const p = sleepUntil(new Date(clock.now().getTime() + DAY), clock, { signal: controller.signal });
  t.equal(clock.pending, 1);
  controller.abort(new Error('shutting down'));
  await t.rejects(p, { message: 'shutting down' });
  t.equal(clock.pending, 0);
});

t.test('an already-aborted signal rejects at once', async (t) => {
  const clock = new FakeClock();
  const controller = new AbortController();
  controller.abort(new Error('gone'));
  await t.rejects(sleepUntil(new Date(clock.now().getTime() + DAY), clock, { signal: controller.signal }), { message: 'gone' });
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
