// PEM framing: the blocks found are the ones the earlier regex found, and
// finding them is linear in the text, whatever a server sends (cluster-info's
// CA, a CSR's status.certificate).
import t from 'tap';
import { intactPemBlocks, pemBlocks, toPem } from '../../../agent/pki/pem.js';
import { cpuMs } from '../../support/cpu-time.js';
import { prng } from '../../support/prng.js';

/** The definition the scanner replaces: simple, and quadratic on BEGIN lines without an END. */
const REFERENCE = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([\s\S]*?)-----END \1-----/g;
const reference = (text: string) => [...text.matchAll(REFERENCE)].map((m) => ({ type: m[1], text: `${m[0]}\n` }));
const found = (text: string) => pemBlocks(text).map((b) => ({ type: b.type, text: b.text }));

t.test('finds what the reference regex finds, on 3,000 generated texts', async (t) => {
  const rand = prng(0x70656d);
  const labels = ['A', 'B', 'CERTIFICATE', 'EC PRIVATE KEY', 'A B'];
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)]!;
  const pieces = [
    () => `-----BEGIN ${pick(labels)}-----${pick(['\n', '\r\n', '', ' \n'])}`,
    () => `-----END ${pick(labels)}-----`,
    () => pick(['-----BEGIN ', '-----END ', '-----', 'A', ' ', '\n', '\r\n', 'QUJD', 'RA==', 'x:y', '-']),
  ];
  let mismatches = 0;
  let withBlocks = 0;
  for (let i = 0; i < 3_000; i++) {
    let text = '';
    for (let n = Math.floor(rand() * 12); n > 0; n--) text += pick(pieces)();
    let want: unknown;
    let got: unknown;
    try {
      want = reference(text);
      got = found(text);
    } catch {
      continue; // not base64: both refuse, and the scanner's refusal is tested below
    }
    if ((want as unknown[]).length > 0) withBlocks++;
    if (JSON.stringify(want) !== JSON.stringify(got)) mismatches++;
  }
  t.equal(mismatches, 0, 'same blocks, same order');
  t.ok(withBlocks > 100, `${withBlocks} texts held blocks`);
  const cert = toPem('CERTIFICATE', new Uint8Array([1, 2, 3]));
  t.same(
    found(`junk\n${cert}between\n${toPem('EC PRIVATE KEY', new Uint8Array([4]))}`).map((b) => b.type),
    ['CERTIFICATE', 'EC PRIVATE KEY'],
  );
  t.throws(() => pemBlocks('-----BEGIN A-----\n!!!!\n-----END A-----'), /not valid base64/);
  t.same(intactPemBlocks(`${cert}-----BEGIN CERTIFICATE-----\nAAAA\n`), null, 'an unterminated block still makes the text torn');
});

/** CPU milliseconds for one call; the best of three. */
async function timed(run: () => unknown): Promise<number> {
  let best = Infinity;
  for (let i = 0; i < 3; i++) best = Math.min(best, await cpuMs(run));
  return best;
}

t.test('worst-case texts of 4 MiB (the client body cap) are scanned in linear time', async (t) => {
  const size = 4 << 20;
  const fill = (unit: string) => unit.repeat(Math.floor(size / unit.length));
  let label = 0;
  const cases: Record<string, string> = {
    'BEGIN lines without an END': fill('-----BEGIN A-----\n'),
    'BEGIN lines with distinct labels': Array.from(
      { length: size / 24 },
      () => `-----BEGIN ${(label++).toString(36).toUpperCase()}-----\n`,
    ).join(''),
    'one BEGIN, then END lines of another label': `-----BEGIN A-----\n${fill('-----END B-----\n')}`,
    'END lines only': fill('-----END A-----\n'),
    'a long label run without dashes': `-----BEGIN ${'A'.repeat(size)}`,
    'blocks of one byte each': fill('-----BEGIN A-----\nAA==\n-----END A-----\n'),
  };
  // Linear: about 10-50 ms each on this project's machines. The regex took 0.5 s on
  // 144 KB of the first case and grows with the square: minutes at 4 MiB.
  const BOUND_MS = 1_500;
  for (const [what, text] of Object.entries(cases)) {
    const ms = await timed(() => pemBlocks(text));
    t.ok(ms < BOUND_MS, `${what}: ${Math.round(ms)} ms of CPU (bound ${BOUND_MS} ms)`);
  }
});
