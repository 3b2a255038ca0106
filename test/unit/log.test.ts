import { PassThrough } from 'node:stream';
import t from 'tap';
import { createLogger, scrub } from '../../agent/log.js';

const token = 'abcdef.0123456789abcdef';
const key = '-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yiTO4Ow5Dz4pUBIY9uxgDMyrvoGoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n';

t.test('scrub removes bootstrap token secrets, bearer tokens and PEM private keys from text', async (t) => {
  const out = scrub(`token ${token} header Bearer eyJhbGciOi.abc.def key ${key}`);
  t.notMatch(out, '0123456789abcdef');
  t.match(out, 'abcdef.[redacted]', 'the token id stays for debugging');
  t.notMatch(out, 'eyJhbGciOi');
  t.notMatch(out, 'MHcCAQEEIBkg');
});

t.test('the logger redacts secret-named fields and secrets inside messages, in JSON and text', async (t) => {
  for (const format of ['json', 'text'] as const) {
    const stream = new PassThrough();
    let written = '';
    stream.on('data', (d: Buffer) => (written += d.toString()));
    const logger = createLogger({ format, stream });
    logger.info(`using ${token}`, { token, authorization: `Bearer ${token}`, key, csr: 'node-csr-x', hook: { argv: ['curl', '-H', `Authorization: Bearer ${token}`] } });
    await new Promise<void>((resolve) => logger.on('finish', resolve).end());
    t.notMatch(written, '0123456789abcdef', `${format}: no token secret`);
    t.notMatch(written, 'MHcCAQEEIBkg', `${format}: no key material`);
    t.match(written, 'node-csr-x', `${format}: ordinary fields survive`);
  }
});
