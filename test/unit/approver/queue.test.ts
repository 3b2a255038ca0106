// The approver's work queue: client-go workqueue's add/get/done/forget and
// rate limit, on a fake clock, plus its batches and the one-blocking-key-per-group rule.
import t from 'tap';
import { WorkQueue, type Placement } from '../../../agent/approver/queue.js';
import { FakeClock } from '../../support/fake-time.js';

const BACKOFF = { initial: 5_000, factor: 2, cap: 60_000, jitter: 0 };

/** Keys "group/name"; a name starting with "b" is exclusive; one named in `gone` has nothing to do. */
function queue(clock = new FakeClock(), gone = new Set<string>(), waited: number[] = []) {
  const place = (key: string): Placement | null =>
    gone.has(key) ? null : { group: key.split('/')[0]!, exclusive: key.split('/')[1]!.startsWith('b') };
  return new WorkQueue<string>({ clock, backoff: BACKOFF, place, waited: (s) => waited.push(s) });
}

t.test('a key added twice is in the queue once', async (t) => {
  const q = queue();
  q.add('a/1');
  q.add('a/1');
  t.equal(q.length, 1);
  t.same(await q.get(10), ['a/1']);
  t.equal(q.length, 0);
});

t.test('a key added while a worker has it is handed out again only after done', async (t) => {
  const q = queue();
  q.add('a/1');
  t.same(await q.get(10), ['a/1']);
  q.add('a/1');
  q.add('x/2');
  t.same(await q.get(10), ['x/2'], 'not while processing');
  q.done('x/2');
  q.done('a/1');
  t.same(await q.get(10), ['a/1'], 'queued again at done');
});

t.test('a worker waits for a key; shutting down wakes it with none', async (t) => {
  const q = queue();
  const waiting = q.get(10);
  q.add('a/1');
  t.same(await waiting, ['a/1']);
  const idle = q.get(10);
  q.shutDown();
  t.same(await idle, []);
  q.add('a/2');
  t.equal(q.length, 0, 'nothing is added after shutdown');
});

t.test('a batch takes at most max keys, and a group with a batch in flight is passed over until done', async (t) => {
  const q = queue();
  for (const key of ['a/1', 'a/2', 'a/3', 'c/1']) q.add(key);
  t.same(await q.get(2), ['a/1', 'a/2']);
  t.same(await q.get(10), ['c/1'], 'a/3 waits: group a is in flight');
  q.done('a/1');
  const next = q.get(10);
  q.done('a/2');
  t.same(await next, ['a/3'], 'handed out once the whole batch of a is done');
});

t.test('a released batch frees its group for the next batch before done; an exclusive key is never released', async (t) => {
  const q = queue();
  for (const key of ['a/1', 'a/2', 'a/3', 'a/4', 'e/b1', 'e/b2']) q.add(key);
  t.same(await q.get(2), ['a/1', 'a/2']);
  t.same(await q.get(10), ['e/b1'], 'group a in flight');
  q.release('a/1');
  q.release('e/b1');
  const next = q.get(10);
  q.release('a/2');
  t.same(await next, ['a/3', 'a/4'], 'group a taken once its whole batch is released, before done; group e still held');
  q.add('a/1');
  q.done('a/1');
  q.done('a/2');
  q.done('e/b1');
  t.same(await q.get(10), ['e/b2'], 'group e at done; a/1, added again, waits while a/3 and a/4 are in flight');
  q.done('a/3');
  q.done('a/4');
  t.same(await q.get(10), ['a/1']);
});

t.test('an exclusive key is only ever the one key of its group in a batch', async (t) => {
  const q = queue();
  for (const key of ['a/1', 'a/b1', 'a/b2', 'a/3']) q.add(key);
  t.same(await q.get(10), ['a/1'], 'stops before the exclusive key');
  q.done('a/1');
  t.same(await q.get(10), ['a/b1'], 'alone');
  q.done('a/b1');
  t.same(await q.get(10), ['a/b2']);
  q.done('a/b2');
  t.same(await q.get(10), ['a/3']);
});

t.test('a key with nothing to do when taken is dropped', async (t) => {
  const gone = new Set<string>();
  const q = queue(new FakeClock(), gone);
  q.add('a/1');
  q.add('a/2');
  gone.add('a/1');
  t.same(await q.get(10), ['a/2']);
  t.equal(q.length, 0);
});

t.test('addAfter adds when the clock reaches it, once, the earliest asked winning', async (t) => {
  const clock = new FakeClock();
  const q = queue(clock);
  q.addAfter('a/1', 10_000);
  q.addAfter('a/1', 20_000);
  t.equal(clock.pending, 1, 'one timer');
  q.addAfter('a/1', 3_000);
  t.equal(clock.pending, 1, 'replaced by the sooner one');
  clock.advance(2_999);
  t.equal(q.length, 0);
  clock.advance(1);
  t.equal(q.length, 1);
  t.equal(clock.pending, 0);
});

t.test('addRateLimited waits 5, 10, 20, 40 s ... up to the cap, and forget starts again', async (t) => {
  const clock = new FakeClock();
  const q = queue(clock);
  const waits: number[] = [];
  for (let i = 0; i < 6; i++) {
    waits.push(q.addRateLimited('a/1'));
    clock.advance(clock.nextTimerIn()!);
    q.done((await q.get(1))[0]!);
  }
  t.same(waits, [5_000, 10_000, 20_000, 40_000, 60_000, 60_000]);
  t.equal(q.numRequeues('a/1'), 6);
  q.forget('a/1');
  t.equal(q.addRateLimited('a/1'), 5_000);
});

t.test('shutting down cancels every pending add', async (t) => {
  const clock = new FakeClock();
  const q = queue(clock);
  q.addAfter('a/1', 1_000);
  q.addRateLimited('b/1');
  q.shutDown();
  t.equal(clock.pending, 0);
});

t.test('the wait from add to take is reported', async (t) => {
  const clock = new FakeClock();
  const waited: number[] = [];
  const q = queue(clock, new Set(), waited);
  q.add('a/1');
  clock.advance(1_500);
  await q.get(1);
  t.same(waited, [1.5]);
});
