// The CSR conversation against undici's MockAgent: adoption after 409, and
// every way the wait for a certificate can end. The real API server proves
// the same paths end to end (test/e2e); these pin the branches it rarely takes.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { ApiError, CsrRejectedError, CsrUnusableError, TimedOutError } from '../../../agent/errors.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { createCsr, waitForCertificate } from '../../../agent/kube/csr-requests.js';
import type { CertificateSigningRequest } from '../../../agent/kube/csr-state.js';
import { createLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { capturingLogger, runOn } from '../../support/fake-time.js';

const SERVER = 'https://api.test:6443';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const CERT = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const logger = createLogger({ level: 'error', format: 'json' });

function csr(
  o: { uid?: string; conditions?: { type: string; status: string; reason?: string; message?: string }[]; certificate?: string } = {},
): CertificateSigningRequest {
  return {
    kind: 'CertificateSigningRequest',
    metadata: { name: 'node-csr-abc', uid: o.uid ?? 'uid-1', resourceVersion: '10' },
    spec: { request: 'UkVR', signerName: 'kubernetes.io/kube-apiserver-client-kubelet' },
    status: { conditions: o.conditions, certificate: o.certificate ? Buffer.from(o.certificate).toString('base64') : undefined },
  };
}
const approved = (extra: { certificate?: string } = {}) =>
  csr({ conditions: [{ type: 'Approved', status: 'True', reason: 'AutoApproved' }], ...extra });
const list = (...items: CertificateSigningRequest[]) => JSON.stringify({ metadata: { resourceVersion: '11' }, items });
const events = (...evs: { type: string; object: unknown }[]) => evs.map((e) => JSON.stringify(e) + '\n').join('');

const isWatch = (p: string) => p.startsWith(CSRS) && p.includes('watch=true');
const isList = (p: string) => p.startsWith(`${CSRS}?`) && !p.includes('watch=true');

function setup(t: Test) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const pool = agent.get(SERVER);
  const client = new KubeClient({ server: SERVER, caPem: null }, { kind: 'anonymous' }, agent);
  t.teardown(() => agent.close());
  const wait = (timeoutMs = 5_000) =>
    waitForCertificate(client, csr(), { logger, timeoutMs, pendingNoticeMs: 60_000, pollIntervalMs: 1, random: () => 0 });
  return { agent, pool, client, wait };
}

t.test('a certificate that arrives on the watch ends the wait', async (t) => {
  const { pool, wait } = setup(t);
  pool.intercept({ path: isList, method: 'GET' }).reply(200, list(csr()));
  pool
    .intercept({ path: isWatch, method: 'GET' })
    .reply(200, events({ type: 'MODIFIED', object: approved() }, { type: 'MODIFIED', object: approved({ certificate: CERT }) }));
  t.equal(await wait(), CERT, 'approved without a certificate keeps waiting; with one, done');
});

t.test('a refused watch (403 or 405) falls back to polling the list', async (t) => {
  for (const status of [403, 405]) {
    const { pool, wait, agent } = setup(t);
    pool.intercept({ path: isList, method: 'GET' }).reply(200, list(csr()));
    pool
      .intercept({ path: isWatch, method: 'GET' })
      .reply(status, JSON.stringify({ kind: 'Status', reason: 'Forbidden', message: 'no watch' }));
    pool.intercept({ path: isList, method: 'GET' }).reply(200, list(csr()));
    pool.intercept({ path: isList, method: 'GET' }).reply(200, list(approved({ certificate: CERT })));
    t.equal(await wait(), CERT, `watch ${status}: polled until issued`);
    t.same(agent.pendingInterceptors(), [], `watch ${status}: every expected request was made, and no second watch`);
  }
});

t.test('a 403 on the list itself is not mistaken for a refused watch', async (t) => {
  const { pool, wait } = setup(t);
  pool
    .intercept({ path: isList, method: 'GET' })
    .reply(403, JSON.stringify({ kind: 'Status', reason: 'Forbidden', message: 'cannot list' }));
  const err = await wait().catch((e: unknown) => e);
  t.type(err, ApiError);
  t.equal((err as ApiError).phase, 'request');
  t.equal((err as ApiError).status, 403);
});

t.test('a watch ERROR event (410 Gone) re-lists and watches again', async (t) => {
  const { pool, wait, agent } = setup(t);
  pool.intercept({ path: isList, method: 'GET' }).reply(200, list(csr()));
  pool
    .intercept({ path: isWatch, method: 'GET' })
    .reply(200, events({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } }));
  pool.intercept({ path: isList, method: 'GET' }).reply(200, list(approved({ certificate: CERT })));
  t.equal(await wait(), CERT);
  t.same(agent.pendingInterceptors(), [], 'the re-list happened');
});

t.test('a watch that the server ends re-lists', async (t) => {
  const { pool, wait } = setup(t);
  pool.intercept({ path: isList, method: 'GET' }).reply(200, list(csr()));
  pool
    .intercept({ path: isWatch, method: 'GET' })
    .reply(200, events({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '12' } } }));
  pool.intercept({ path: isList, method: 'GET' }).reply(200, list(approved({ certificate: CERT })));
  t.equal(await wait(), CERT);
});

t.test('the wait ends with the right error', async (t) => {
  const cases: {
    name: string;
    listed: CertificateSigningRequest[];
    watched?: { type: string; object: unknown };
    error: new (...a: never[]) => Error;
    match: RegExp;
  }[] = [
    { name: 'deleted before the list', listed: [], error: CsrUnusableError, match: /was deleted while waiting/ },
    {
      name: 'deleted on the watch',
      listed: [csr()],
      watched: { type: 'DELETED', object: csr() },
      error: CsrUnusableError,
      match: /was deleted while waiting/,
    },
    { name: 'replaced by another object (uid changed)', listed: [csr({ uid: 'uid-2' })], error: CsrUnusableError, match: /uid changed/ },
    {
      name: 'denied',
      listed: [csr()],
      watched: { type: 'MODIFIED', object: csr({ conditions: [{ type: 'Denied', status: 'True', reason: 'PolicyX', message: 'no' }] }) },
      error: CsrRejectedError,
      match: /was denied: PolicyX \(no\)/,
    },
    {
      name: 'failed by the signer',
      listed: [csr({ conditions: [{ type: 'Failed', status: 'True', reason: 'SignerValidationFailure' }] })],
      error: CsrRejectedError,
      match: /failed: SignerValidationFailure/,
    },
  ];
  for (const c of cases) {
    const { pool, wait } = setup(t);
    pool.intercept({ path: isList, method: 'GET' }).reply(200, list(...c.listed));
    if (c.watched) pool.intercept({ path: isWatch, method: 'GET' }).reply(200, events(c.watched));
    const err = await wait().catch((e: unknown) => e);
    t.type(err, c.error, `${c.name}: ${c.error.name}`);
    t.match((err as Error).message, c.match, `${c.name}: says so`);
  }
});

t.test('create adopts an existing CSR only when it is compatible', async (t) => {
  const request = {
    name: 'node-csr-abc',
    requestPem: '-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n',
    signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
    usages: ['client auth'],
    expirationSeconds: null,
  };
  {
    const { pool, client } = setup(t);
    pool.intercept({ path: CSRS, method: 'POST' }).reply(409, JSON.stringify({ kind: 'Status', reason: 'AlreadyExists' }));
    pool.intercept({ path: `${CSRS}/node-csr-abc`, method: 'GET' }).reply(200, JSON.stringify(csr({ uid: 'theirs' })));
    const adopted = await createCsr(client, request, async () => null);
    t.equal(adopted.metadata.uid, 'theirs', 'a compatible CSR is adopted after 409');
  }
  {
    const { pool, client } = setup(t);
    pool.intercept({ path: CSRS, method: 'POST' }).reply(409, JSON.stringify({ kind: 'Status', reason: 'AlreadyExists' }));
    pool.intercept({ path: `${CSRS}/node-csr-abc`, method: 'GET' }).reply(200, JSON.stringify(csr()));
    const err = await createCsr(client, request, async () => 'it was made with another key').catch((e: unknown) => e);
    t.type(err, CsrUnusableError, 'an incompatible one is refused');
    t.match((err as Error).message, /not compatible: it was made with another key/);
  }
});

// The same wait on a FakeClock: the bounds, the notices and the pauses are
// the clock's, so minutes of waiting are proven without waiting.

t.test('on a fake clock: polls every interval and gives up at the wait timeout, naming the approve command', async (t) => {
  const { pool, client } = setup(t);
  const clock = new FakeClock();
  const { logger, lines } = capturingLogger();
  const listedAt: number[] = [];
  pool
    .intercept({ path: isList, method: 'GET' })
    .reply(() => (listedAt.push(clock.monotonic()), { statusCode: 200, data: list(csr()) }))
    .persist();
  pool.intercept({ path: isWatch, method: 'GET' }).reply(403, JSON.stringify({ kind: 'Status', reason: 'Forbidden' }));
  const wait = waitForCertificate(client, csr(), {
    logger,
    timeoutMs: 60_000,
    pendingNoticeMs: 25_000,
    pollIntervalMs: 5_000,
    random: () => 0,
    clock,
  });
  const err = await runOn(clock, wait, 3); // idle: the bound, the notice and a pause armed
  t.type(err, TimedOutError);
  t.match((err as Error).message, /timed out after 60s waiting for CSR node-csr-abc .*kubectl certificate approve node-csr-abc/);
  t.equal(clock.monotonic(), 60_000, 'gave up exactly at the bound, on the fake clock');
  t.same(
    listedAt,
    [0, 0, 5_000, 10_000, 15_000, 20_000, 25_000, 30_000, 35_000, 40_000, 45_000, 50_000, 55_000],
    'listed, re-listed once the watch was refused, then every 5 s',
  );
  const notices = lines.filter((l) => l.level === 'warn' && l.message.includes('pending approval'));
  t.same(
    notices.map((l) => l.message.match(/for (\d+)s/)?.[1]),
    ['25', '50'],
    'a pending notice every 25 s with the time waited so far',
  );
  t.ok(
    notices.every((l) => l.message.includes('kubectl certificate approve node-csr-abc')),
    'each names the approve command',
  );
  t.equal(clock.pending, 0, 'no timer left behind');
});

t.test('on a fake clock: a failed list is retried after the back-off, or after Retry-After when the server gives one', async (t) => {
  const cases = [
    { name: '500: back-off 2 s then 4 s (no jitter)', replies: [500, 500], headers: {}, retriedAt: [2_000, 6_000] },
    { name: '503 with Retry-After: 7', replies: [503], headers: { 'retry-after': '7' }, retriedAt: [7_000] },
    { name: '429 with Retry-After beyond the 32 s cap', replies: [429], headers: { 'retry-after': '600' }, retriedAt: [32_000] },
  ];
  for (const c of cases) {
    const { pool, client } = setup(t);
    const clock = new FakeClock();
    const listedAt: number[] = [];
    for (const status of c.replies) {
      pool.intercept({ path: isList, method: 'GET' }).reply(
        () => (
          listedAt.push(clock.monotonic()),
          {
            statusCode: status,
            data: JSON.stringify({ kind: 'Status', reason: 'Busy' }),
            responseOptions: { headers: c.headers },
          }
        ),
      );
    }
    pool
      .intercept({ path: isList, method: 'GET' })
      .reply(() => (listedAt.push(clock.monotonic()), { statusCode: 200, data: list(approved({ certificate: CERT })) }));
    const wait = waitForCertificate(client, csr(), { logger, timeoutMs: 300_000, pendingNoticeMs: 600_000, random: () => 0, clock });
    t.equal(await runOn(clock, wait, 3), CERT, `${c.name}: issued after the retries`);
    t.same(listedAt.slice(1), c.retriedAt, `${c.name}: retried at ${c.retriedAt.join(', ')} ms`);
  }
});
