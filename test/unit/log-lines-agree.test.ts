// The resting daemon logs through log-lines.ts's line logger, every other
// command and each pass through winston (log.ts): an operator reading the
// journal or a log shipper parsing JSON must not be able to tell which wrote
// a line. Both are driven with the same records and their lines compared
// byte for byte, the timestamp aside (winston reads the real clock).
import { PassThrough } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../agent/log.js';
import { createLineLogger, MAX_LOG_STRING } from '../../agent/log-lines.js';

type Level = 'error' | 'warn' | 'info' | 'debug';
type Format = 'json' | 'text' | 'journal';
type Entry = [Level, string, Record<string, unknown>?];

const token = 'abcdef.0123456789abcdef';
const key =
  '-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yiTO4Ow5Dz4pUBIY9uxgDMyrvoGoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n';

const entries: Entry[] = [
  ['info', 'kubelet: certificate renewed'],
  ['error', 'renewal failed', { identity: 'kubelet', attempt: 3, error: 'connect ECONNREFUSED 127.0.0.1:6443', ok: false }],
  ['warn', 'left CSR pending', { csr: 'node-csr-x', nested: { zeta: 1, alpha: [2, 'b', null], mid: { y: true, x: '' } } }],
  [
    'debug',
    'fields of every shape',
    { empty: '', spaced: 'a b', quoted: 'say "hi"', eq: 'x=y', n: 1.5, nil: null, gone: undefined, list: [] },
  ],
  ['info', 'a date field', { at: new Date('2026-12-02T10:00:00.000Z') }],
  // Secrets: named fields, and tokens, bearer credentials and PEM keys inside any string.
  ['warn', `using ${token}`, { token, authorization: `Bearer ${token}`, key, password: 'hunter2', 'client-key-data': 'LS0tLS1C' }],
  ['info', 'hook ran', { hook: { argv: ['curl', '-H', `Authorization: Bearer ${token}`], out: `kubeconfig:\n  token: s3cr3t\n${key}` } }],
  // One record stays one line: control characters in the message and in fields.
  ['warn', 'CN csr\u0000<0>fake\u001b[31m\r\nsecond line\u007f\u2028', { cn: 'a\nb\u0085', deep: { t: '\u001b]0;x\u0007' } }],
  ['info', 'x'.repeat(MAX_LOG_STRING + 100), { long: 'y'.repeat(MAX_LOG_STRING * 2) }],
];

/** The lines one logger writes for `write`'s records, with the timestamp replaced by T. */
async function lines(which: 'winston' | 'lines', format: Format, level: Level, write: Entry[]): Promise<string[]> {
  const stream = new PassThrough();
  let written = '';
  stream.on('data', (d: Buffer) => (written += d.toString()));
  if (which === 'winston') {
    const logger = createLogger({ format, stream, level });
    for (const [lvl, message, meta] of write) logger[lvl](message, meta);
    await new Promise<void>((resolve) => logger.on('finish', resolve).end());
  } else {
    const logger = createLineLogger({ format, stream, level });
    for (const [lvl, message, meta] of write) logger[lvl](message, meta);
  }
  const iso = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';
  return written
    .split('\n')
    .filter(Boolean)
    .map((l) => l.replace(new RegExp(`^${iso} `), 'T ').replace(new RegExp(`"timestamp":"${iso}"`), '"timestamp":"T"'));
}

t.test(
  'both loggers write the same lines for every level, field shape, secret and control character, in JSON, text and the journal',
  async (t) => {
    for (const format of ['json', 'text', 'journal'] as const) {
      const winston = await lines('winston', format, 'debug', entries);
      t.equal(winston.length, entries.length, `${format}: one line per record`);
      t.same(await lines('lines', format, 'debug', entries), winston, `${format}: the same lines`);
      t.notMatch(winston.join('\n'), /0123456789abcdef|MHcCAQEEIBkg|hunter2|s3cr3t|LS0tLS1C/, `${format}: and no secret in them`);
    }
  },
);

t.test('the level threshold drops the same records in both', async (t) => {
  const each: Entry[] = (['error', 'warn', 'info', 'debug'] as const).map((level) => [level, `a ${level} record`]);
  for (const threshold of ['error', 'warn', 'info', 'debug'] as const) {
    const winston = await lines('winston', 'journal', threshold, each);
    t.equal(winston.length, ['error', 'warn', 'info', 'debug'].indexOf(threshold) + 1, `${threshold}: it and the levels above`);
    t.same(await lines('lines', 'journal', threshold, each), winston, `${threshold}: the same records`);
  }
});

t.test('JSON lines: keys sorted at every depth as winston writes them, a bigint as a string, a cycle as [Circular]', async (t) => {
  const cycle: Record<string, unknown> = { name: 'loop' };
  cycle.self = cycle;
  const odd: Entry[] = [
    ['info', 'numbers as keys', { 10: 'ten', 9: 'nine', b: 1, a: 2 }],
    ['info', 'a bigint', { serial: 12345678901234567890n }],
    ['info', 'a cycle', { cycle }],
  ];
  const winston = await lines('winston', 'json', 'info', odd);
  t.match(winston[0], /^\{"10":"ten","9":"nine","a":2,"b":1,"level":"info","message":"numbers as keys","timestamp":"T"\}$/);
  t.same(await lines('lines', 'json', 'info', odd), winston);
});

// winston's own message handling, which log.ts bypasses: it read a printf
// token in the message as a format and dropped the fields, and appended a
// `message` field to the message.
t.test('a printf token in the message and a field named message: the same lines in both', async (t) => {
  const printf: Entry[] = [['warn', 'left CSR pending: CN system:node:x%s', { csr: 'node-csr-x', rule: 'subject' }]];
  t.same(await lines('lines', 'journal', 'info', printf), ['<4>left CSR pending: CN system:node:x%s csr=node-csr-x rule=subject']);
  const meta: Entry[] = [['info', 'status', { message: 'extra' }]];
  for (const format of ['json', 'text', 'journal'] as const) {
    t.same(await lines('winston', format, 'info', printf), await lines('lines', format, 'info', printf), `${format}: a printf token`);
    t.same(await lines('winston', format, 'info', meta), await lines('lines', format, 'info', meta), `${format}: a field named message`);
  }
});
