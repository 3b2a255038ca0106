import { PassThrough } from 'node:stream';
import t from 'tap';
import { createLogger, isJournalStream, journalLine, resolveLogFormat, scrub } from '../../agent/log.js';
import { cpuMs } from '../support/cpu-time.js';

const token = 'abcdef.0123456789abcdef';
const key =
  '-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yiTO4Ow5Dz4pUBIY9uxgDMyrvoGoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n';

t.test('scrub removes bootstrap token secrets, bearer tokens and PEM private keys from text', async (t) => {
  const out = scrub(`token ${token} header Bearer eyJhbGciOi.abc.def key ${key}`);
  t.notMatch(out, '0123456789abcdef');
  t.match(out, 'abcdef.[redacted]', 'the token id stays for debugging');
  t.notMatch(out, 'eyJhbGciOi');
  t.notMatch(out, 'MHcCAQEEIBkg');
});

t.test('scrub removes the values of kubeconfig secret fields, whatever they look like (a hook may print a kubeconfig)', async (t) => {
  const out = scrub(
    'users:\n- user:\n    token: s3cr3t-static-token\n    client-key-data: LS0tLS1CRUdJTiBFQw==\n{"password": "hunter2"} token=abc',
  );
  for (const secret of ['s3cr3t-static-token', 'LS0tLS1CRUdJTiBFQw', 'hunter2', 'token=abc']) t.notMatch(out, secret);
  t.match(out, 'client-key-data: [redacted]');
  for (const prose of [
    'kubelet: certificate renewed; token file /etc/kubernetes/bootstrap-token deleted',
    '/etc/kubeboot/config.yaml: token: not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}; the value is not shown)',
  ]) {
    t.equal(scrub(prose), prose, "kubeboot's own words about tokens are left alone");
  }
});

t.test('the logger redacts secret-named fields and secrets inside messages, in JSON and text', async (t) => {
  for (const format of ['json', 'text', 'journal'] as const) {
    const stream = new PassThrough();
    let written = '';
    stream.on('data', (d: Buffer) => (written += d.toString()));
    const logger = createLogger({ format, stream });
    logger.info(`using ${token}`, {
      token,
      authorization: `Bearer ${token}`,
      key,
      csr: 'node-csr-x',
      hook: { argv: ['curl', '-H', `Authorization: Bearer ${token}`] },
    });
    await new Promise<void>((resolve) => logger.on('finish', resolve).end());
    t.notMatch(written, '0123456789abcdef', `${format}: no token secret`);
    t.notMatch(written, 'MHcCAQEEIBkg', `${format}: no key material`);
    t.match(written, 'node-csr-x', `${format}: ordinary fields survive`);
  }
});

async function logged(format: 'json' | 'text' | 'journal', write: (logger: ReturnType<typeof createLogger>) => void): Promise<string> {
  const stream = new PassThrough();
  let written = '';
  stream.on('data', (d: Buffer) => (written += d.toString()));
  const logger = createLogger({ format, stream, level: 'debug' });
  write(logger);
  await new Promise<void>((resolve) => logger.on('finish', resolve).end());
  return written;
}

t.test('a message holding printf tokens is written as it is, with every field, in every format', async (t) => {
  // A CSR's requester chooses the names that reach messages; winston's own splat path read them as a format and dropped the fields.
  const message = 'left CSR pending: CN system:node:x%s %d %i %f %j %o %O %c %%';
  const meta = { csr: 'node-csr-x', rule: 'subject', attempt: 2 };
  const json = JSON.parse(await logged('json', (l) => l.warn(message, meta)));
  t.match(json, { level: 'warn', message, ...meta });
  t.equal(await logged('journal', (l) => l.warn(message, meta)), `<4>${message} csr=node-csr-x rule=subject attempt=2\n`);
  t.match(await logged('text', (l) => l.warn(message, meta)), `warn ${message} {"csr":"node-csr-x","rule":"subject","attempt":2}`);
  t.equal(JSON.parse(await logged('json', (l) => l.info('100%d done'))).message, '100%d done', 'and without fields');
});

t.test('a field named message does not change the message; the level cannot be overridden by a field', async (t) => {
  const json = JSON.parse(await logged('json', (l) => l.info('status', { message: 'extra', level: 'error', identity: 'kubelet' })));
  t.match(json, { level: 'info', message: 'status', identity: 'kubelet' });
});

t.test('the level threshold still applies', async (t) => {
  const stream = new PassThrough();
  let written = '';
  stream.on('data', (d: Buffer) => (written += d.toString()));
  const logger = createLogger({ format: 'journal', stream, level: 'warn' });
  logger.info('dropped %s', { a: 1 });
  logger.debug('dropped');
  logger.warn('kept %s', { a: 1 });
  await new Promise<void>((resolve) => logger.on('finish', resolve).end());
  t.equal(written, '<4>kept %s a=1\n');
});

t.test('journal lines carry the sd-daemon priority of their level, so journalctl -p filters them', async (t) => {
  const out = await logged('journal', (l) => {
    l.error('e');
    l.warn('w');
    l.info('i');
    l.debug('d');
  });
  t.same(out.split('\n').filter(Boolean), ['<3>e', '<4>w', '<6>i', '<7>d']);
});

t.test('a journal line is the message and its fields as key=value, one line, no timestamp', async (t) => {
  const out = await logged('journal', (l) =>
    l.warn('renewal failed\nretrying', {
      identity: 'kubelet',
      attempt: 3,
      error: 'connect ECONNREFUSED 127.0.0.1:6443',
      hook: { argv: ['systemctl', 'restart'] },
      ok: false,
    }),
  );
  t.equal(
    out,
    '<4>renewal failed\\nretrying identity=kubelet attempt=3 error="connect ECONNREFUSED 127.0.0.1:6443" hook={"argv":["systemctl","restart"]} ok=false\n',
  );
});

t.test('journalLine quotes values that would not read back as one word', async (t) => {
  t.equal(
    journalLine({ level: 'info', message: 'm', a: '', b: 'x=y', c: 'say "hi"', d: 'plain/path-1.pem' }),
    '<6>m a="" b="x=y" c="say \\"hi\\"" d=plain/path-1.pem',
  );
  t.equal(journalLine({ level: 'info', message: 'm', gone: undefined }), '<6>m', 'undefined fields are left out');
});

t.test('auto picks journal when stderr is the journal, text on a terminal, JSON otherwise; explicit formats win', async (t) => {
  t.equal(resolveLogFormat('auto', { journal: true, tty: false }), 'journal');
  t.equal(resolveLogFormat(undefined, { journal: false, tty: true }), 'text');
  t.equal(resolveLogFormat('auto', { journal: false, tty: false }), 'json');
  t.equal(resolveLogFormat('json', { journal: true, tty: false }), 'json', 'log shippers can still ask for JSON');
  t.equal(resolveLogFormat('journal', { journal: false, tty: true }), 'journal');
});

t.test('stderr is the journal only when JOURNAL_STREAM names the device and inode fstat reports', async (t) => {
  const stat = () => ({ dev: 64769n, ino: 123456789n });
  t.ok(isJournalStream({ JOURNAL_STREAM: '64769:123456789' }, 2, stat));
  t.notOk(isJournalStream({ JOURNAL_STREAM: '64769:123456780' }, 2, stat), 'an inherited variable after a redirection');
  t.notOk(isJournalStream({}, 2, stat), 'not under systemd');
  t.notOk(isJournalStream({ JOURNAL_STREAM: 'garbage' }, 2, stat));
  t.notOk(
    isJournalStream({ JOURNAL_STREAM: '1:2' }, 2, () => {
      throw new Error('EBADF');
    }),
    'a closed stderr',
  );
});

// Names the API server accepts for a CSR (40,000+ characters, newlines, NUL,
// ESC) and text shaped to make a backtracking regex go superlinear.
function hostileTexts(n: number): Record<string, string> {
  return {
    'newline-space runs (the 7,002-character CSR name of finding 2, scaled)': `x${'\n '.repeat(n / 2)}x`,
    'whitespace runs': `${' '.repeat(n)}-${'\t'.repeat(n)}`,
    'newline runs': '\n'.repeat(n),
    'a YAML key after a whitespace run': `${' \n'.repeat(n / 2)}token:${' '.repeat(n)}`,
    'many list dashes': '- '.repeat(n / 2),
    'JSON keys with whitespace': `"token"${' '.repeat(n)}:${' '.repeat(n)}`,
    'an unterminated PEM key': `-----BEGIN ${'A '.repeat(n / 4)}PRIVATE KEY-----${'-----END '.repeat(n / 9)}`,
    'bearer runs': 'Bearer '.repeat(n / 7),
    'token-like runs': 'abcdef.'.repeat(n / 7),
    'NUL and ESC': '\u0000\u001b[2J<3>'.repeat(n / 8),
  };
}

t.test('the logger stays linear on hostile text in every format (finding 2)', async (t) => {
  // 40,000 characters: a size the API server accepts as a CSR name. The old YAML-key
  // pattern took about an hour on this; linear work takes milliseconds. The bound is
  // generous on purpose: it fails on superlinear work, not on a slow machine.
  const boundMs = 2_000;
  for (const format of ['json', 'text', 'journal'] as const) {
    for (const [what, text] of Object.entries(hostileTexts(40_000))) {
      let out = '';
      const ms = await cpuMs(async () => {
        out = await logged(format, (l) => l.warn(text, { csr: text, requester: text, nested: { name: text } }));
      });
      t.ok(ms < boundMs, `${format}, ${what}: ${ms.toFixed(1)} ms of CPU (bound ${boundMs} ms)`);
      t.ok(out.length < 4 * (4096 + 40) * 6 + 1024, `${format}, ${what}: every string is capped (${out.length} characters written)`);
    }
  }
});

t.test('no control character reaches a log line in any format (finding 5)', async (t) => {
  const name = 'csr\u0000<0>fake-emergency\u001b[31m\r\nsecond line\u007f\u0085\u2028';
  for (const format of ['json', 'text', 'journal'] as const) {
    const out = await logged(format, (l) => l.warn(`left CSR pending: CN ${name}`, { csr: name, nested: { cn: name } }));
    const lines = out.split('\n').filter(Boolean);
    t.equal(lines.length, 1, `${format}: one record is one line`);
    t.notMatch(lines[0], /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/, `${format}: no raw control character`);
    if (format === 'journal') t.match(lines[0], /^<4>/, 'the journal line keeps its own priority only');
    if (format === 'json') t.equal(JSON.parse(lines[0]!).csr, name, 'JSON lines still read back as the exact text');
  }
});
