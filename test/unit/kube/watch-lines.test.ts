// A watch body turned into lines: whatever the chunking, the same lines, each
// chunk searched once (linear in what was received), a line over the cap refused.
import t from 'tap';
import { WatchLines } from '../../../agent/kube/watch-lines.js';

const tooLong = () => new Error('too long');
const feed = (lines: WatchLines, text: string, size: number): string[] => {
  const bytes = Buffer.from(text, 'utf8');
  const out: string[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(...lines.push(bytes.subarray(at, at + size)));
  return out;
};

t.test('the same lines whatever the chunking, a UTF-8 character cut in two included', async (t) => {
  const text = '{"a":"ü—名"}\n\n  {"b":2}  \n{"c":"\u{1F600}"}\n{"partial":';
  for (const size of [1, 2, 3, 5, 64]) {
    const lines = new WatchLines(1024, tooLong);
    t.same(feed(lines, text, size), ['{"a":"ü—名"}', '{"b":2}', '{"c":"\u{1F600}"}'], `chunks of ${size} bytes`);
  }
});

t.test('each character received is searched once: a long line in small chunks and many tiny lines', async (t) => {
  const cap = 4 << 20;
  const long = `{"x":"${'x'.repeat(cap - 16)}"}\n`;
  const one = new WatchLines(cap, tooLong);
  t.equal(feed(one, long, 1024).length, 1);
  t.equal(
    one.examined,
    long.length,
    `${long.length} characters examined for ${long.length} received (a re-scan per chunk would be ${Math.round(long.length ** 2 / 2048)})`,
  );
  const tiny = '{"type":"BOOKMARK"}\n';
  const many = new WatchLines(cap, tooLong);
  t.equal(feed(many, tiny.repeat(100_000), 1 << 16).length, 100_000);
  t.equal(many.examined, tiny.length * 100_000);
});

t.test('a line over the cap is refused as soon as it is over, ended or not', async (t) => {
  t.throws(() => feed(new WatchLines(10, tooLong), `${'x'.repeat(11)}\n`, 64), { message: 'too long' }, 'ended in one chunk');
  const open = new WatchLines(10, tooLong);
  t.same(open.push(Buffer.from('x'.repeat(10))), []);
  t.throws(() => open.push(Buffer.from('x')), { message: 'too long' }, 'still open: refused at the eleventh character');
  t.same(
    feed(new WatchLines(10, tooLong), `${'x'.repeat(10)}\n${'y'.repeat(10)}\n`, 3),
    ['x'.repeat(10), 'y'.repeat(10)],
    'at the cap: kept',
  );
});
