import t from 'tap';
import { MAX_TIMER_MS, systemClock } from '../../../agent/time/clock.js';
import { FakeClock } from '../../support/fake-time.js';

t.test('advance fires due timers in order and moves the wall clock with them', async (t) => {
  const clock = new FakeClock(0);
  const seen: Array<[string, number]> = [];
  clock.setTimeout(() => seen.push(['b', clock.now().getTime()]), 200);
  clock.setTimeout(() => seen.push(['a', clock.now().getTime()]), 100);
  clock.setTimeout(() => seen.push(['c', clock.now().getTime()]), 300);
  clock.advance(250);
  t.same(seen, [
    ['a', 100],
    ['b', 200],
  ]);
  t.equal(clock.now().getTime(), 250);
  t.equal(clock.pending, 1);
  t.equal(clock.nextTimerIn(), 50);
});

t.test('a timer armed by a firing timer fires within the same advance', async (t) => {
  const clock = new FakeClock(0);
  let fired = 0;
  clock.setTimeout(() => clock.setTimeout(() => fired++, 10), 10);
  clock.advance(20);
  t.equal(fired, 1);
});

t.test('jump moves only the wall clock; timers keep their own schedule', async (t) => {
  const clock = new FakeClock(0);
  let fired = false;
  clock.setTimeout(() => (fired = true), 1000);
  clock.jump(10_000);
  t.equal(clock.now().getTime(), 10_000);
  t.notOk(fired);
  clock.advance(1000);
  t.ok(fired);
  t.equal(clock.now().getTime(), 11_000);
});

t.test('a cleared timer never fires', async (t) => {
  const clock = new FakeClock(0);
  let fired = false;
  const h = clock.setTimeout(() => (fired = true), 10);
  clock.clearTimeout(h);
  clock.advance(100);
  t.notOk(fired);
  t.equal(clock.nextTimerIn(), null);
});

t.test('tick lets awaited code re-arm timers between firings', async (t) => {
  const clock = new FakeClock(0);
  let rounds = 0;
  const loop = async () => {
    for (let i = 0; i < 3; i++) {
      await new Promise<void>((r) => clock.setTimeout(r, 100));
      await Promise.resolve();
      rounds++;
    }
  };
  const done = loop();
  await clock.tick(300);
  await done;
  t.equal(rounds, 3);
});

t.test('the system clock does not overflow on delays beyond 2^31−1 ms', async (t) => {
  // Node turns an overflowing delay into 1 ms and says so with a TimeoutOverflowWarning.
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  let fired = false;
  const h = systemClock.setTimeout(() => (fired = true), MAX_TIMER_MS * 4);
  await new Promise((r) => setImmediate(r));
  systemClock.clearTimeout(h);
  process.off('warning', onWarning);
  t.notOk(fired);
  t.notOk(warnings.includes('TimeoutOverflowWarning'), 'no overflow warning');
  t.ok(Math.abs(systemClock.now().getTime() - Date.now()) < 1000);
});
