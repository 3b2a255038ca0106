// The CSR informer against a mocked API: list, watch from the list's
// resourceVersion, re-list on 410 Gone (dropping what disappeared), resume;
// and what it keeps is bounded, whatever the CSRs bring.
import t from 'tap';
import { MockAgent } from 'undici';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { CSR_PATH, CsrInformer, OVERFLOW_REPORT_MS, RELIST_GAP_MS } from '../../../agent/approver/informer.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { retain, retainedBytes } from '../../../agent/approver/retain.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { createLogger, silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { capturingLogger } from '../../support/fake-time.js';
import { until } from '../../support/until.js';
import { PassThrough } from 'node:stream';

const defaultPolicy: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 86_400,
  keyAlgorithms: ['ecdsa-p256'],
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
};

const server = 'https://api.test';
const csr = (name: string, rv: string) => ({
  kind: 'CertificateSigningRequest',
  metadata: { name, resourceVersion: rv },
  spec: { request: '', signerName: 'x' },
});
const list = (rv: string, items: unknown[], more?: string) => ({
  kind: 'CertificateSigningRequestList',
  metadata: { resourceVersion: rv, ...(more ? { continue: more } : {}) },
  items,
});
const lines = (...events: unknown[]) => events.map((e) => JSON.stringify(e) + '\n').join('');

t.test('lists, watches from the list resourceVersion, re-lists on 410 and resumes', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const seen: string[] = [];
  const deleted: string[] = [];
  const isList = () => (path: string) => path === `${CSR_PATH}?limit=500`;
  const isWatch = (rv: string) => (path: string) =>
    path.startsWith(`${CSR_PATH}?`) && path.includes('watch=true') && path.includes(`resourceVersion=${rv}&`);
  pool.intercept({ path: isList(), method: 'GET' }).reply(200, list('10', [csr('a', '5'), csr('b', '6')]));
  pool
    .intercept({ path: isWatch('10'), method: 'GET' })
    .reply(
      200,
      lines({ type: 'ADDED', object: csr('c', '11') }, { type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } }),
    );
  pool.intercept({ path: isList(), method: 'GET' }).reply(200, list('20', [csr('a', '5'), csr('c', '11')]));
  pool
    .intercept({ path: isWatch('20'), method: 'GET' })
    .reply(200, lines({ type: 'BOOKMARK', object: { kind: 'CertificateSigningRequest', metadata: { resourceVersion: '25' } } }));
  pool.intercept({ path: isWatch('25'), method: 'GET' }).reply(200, lines({ type: 'MODIFIED', object: csr('a', '26') }));
  const stop = new AbortController();
  const informer = new CsrInformer(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    {
      resyncMs: 3_600_000,
      onDelete: (csr) => deleted.push(csr.metadata.name),
      onChange: (name) => {
        seen.push(`${name}@${informer.cache.get(name)?.metadata.resourceVersion}`);
        if (name === 'a' && informer.cache.get('a')?.metadata.resourceVersion === '26') stop.abort();
      },
    },
    silentLogger(),
  );
  t.notOk(informer.synced, 'not synced before the first list');
  await informer.run(stop.signal);
  t.ok(informer.synced);
  t.same(
    seen,
    ['a@5', 'b@6', 'c@11', 'a@5', 'c@11', 'a@26'],
    'first list, the watch, the re-list after 410, the resumed watch after a bookmark',
  );
  t.same([...informer.cache.keys()].sort(), ['a', 'c'], 'b, gone while the watch was expired, is dropped');
  t.same(deleted, ['b'], 'and reported as deleted');
});

t.test('lists in pages, and asks for smaller pages when one is too large, so big CSRs never blind it (finding 3)', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const big = (name: string) => ({ ...csr(name, '7'), spec: { request: 'x'.repeat(3 << 20), signerName: 'example.com/foreign' } });
  // Three 3 MiB CSRs are over LIST_PAGE_BYTES in one page: the same page is asked for with
  // 500/8 = 62, then 7, then 1 CSR; the pages after grow again (2, 4).
  for (const limit of [500, 62, 7])
    pool.intercept({ path: `${CSR_PATH}?limit=${limit}`, method: 'GET' }).reply(200, list('30', [big('a'), big('b'), big('c')], 'p2'));
  pool.intercept({ path: `${CSR_PATH}?limit=1`, method: 'GET' }).reply(200, list('30', [big('a')], 'p2'));
  pool.intercept({ path: `${CSR_PATH}?limit=2&continue=p2`, method: 'GET' }).reply(200, list('30', [big('b'), csr('small', '8')], 'p3'));
  pool.intercept({ path: `${CSR_PATH}?limit=4&continue=p3`, method: 'GET' }).reply(200, list('30', [big('c')]));
  const stop = new AbortController();
  const informer = new CsrInformer(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    { resyncMs: 3_600_000, onChange: () => undefined },
    silentLogger(),
  );
  void informer.whenSynced.then(() => stop.abort());
  await informer.run(stop.signal);
  t.same([...informer.cache.keys()].sort(), ['a', 'b', 'c', 'small'], 'every CSR is in the cache');
  t.same(mock.pendingInterceptors(), [], 'each smaller page was asked for, in turn');
  t.ok(informer.synced);
});

t.test('a list it cannot read leaves it unsynced, saying why (so it takes no lease)', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  pool
    .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(403, { kind: 'Status', reason: 'Forbidden', message: 'cannot list' });
  pool
    .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'NodeList', metadata: { resourceVersion: '1' }, items: [] });
  const stop = new AbortController();
  const reasons: (string | null)[] = [];
  // Each failed list is logged once; what /readyz would say is read at that moment.
  const lines = new PassThrough();
  let informer: CsrInformer | undefined;
  lines.on('data', (line: Buffer) => {
    if (!line.toString().includes('list/watch failed')) return;
    reasons.push(informer!.notSyncedBecause);
    if (reasons.length === 2) stop.abort();
  });
  informer = new CsrInformer(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    { resyncMs: 3_600_000, onChange: () => undefined },
    createLogger({ format: 'json', stream: lines }),
  );
  await informer.run(stop.signal);
  t.match(reasons[0], /403 Forbidden/, 'a 403 is the reason');
  t.match(reasons[1], /expected a CertificateSigningRequestList, the API server answered a NodeList/, 'so is a list of another kind');
  t.notOk(informer.synced);
});

t.test('one CSR larger than a page still fits: a page of one may take what one object can (review finding 1)', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  // 1.4 MB of `<` in a free-text field comes back as 8.4 MB of `\u003c`; here 9 MiB of JSON in one CSR.
  const huge = { ...csr('huge', '7'), metadata: { name: 'huge', resourceVersion: '7', ownerReferences: [{ name: 'x'.repeat(9 << 20) }] } };
  for (const limit of [500, 62, 7, 1]) pool.intercept({ path: `${CSR_PATH}?limit=${limit}`, method: 'GET' }).reply(200, list('30', [huge]));
  const stop = new AbortController();
  const informer = new CsrInformer(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    { resyncMs: 3_600_000, onChange: () => undefined },
    silentLogger(),
  );
  void informer.whenSynced.then(() => stop.abort());
  await informer.run(stop.signal);
  t.ok(informer.synced, 'synced');
  t.same([...informer.cache.keys()], ['huge']);
});

t.test('past maxCacheBytes it empties the cache and is not in sync, saying why, until a re-list fits', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  // Pending kube-proxy CSRs of nodes, each kept whole and counted at about 9 KiB: four fit in 40,000 bytes.
  const pending = (name: string) => ({
    kind: 'CertificateSigningRequest',
    metadata: { name, uid: `u-${name}`, resourceVersion: '5' },
    spec: { request: 'A'.repeat(8000), signerName: 'kubernetes.io/kube-apiserver-client', username: `system:node:${name}` },
  });
  const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
  pool.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' }).reply(200, list('10', names('a', 6).map(pending)));
  pool.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' }).reply(200, list('20', names('b', 3).map(pending)));
  pool
    .intercept({ path: (p) => p.includes('watch=true') && p.includes('resourceVersion=20&'), method: 'GET' })
    .reply(200, lines(...names('c', 3).map((n) => ({ type: 'ADDED', object: pending(n) }))));
  pool.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' }).reply(200, list('30', names('d', 2).map(pending)));
  pool
    .intercept({ path: (p) => p.includes('watch=true') && p.includes('resourceVersion=30&'), method: 'GET' })
    .reply(200, '')
    .delay(600_000);
  const clock = new FakeClock();
  const { logger, lines: logged } = capturingLogger();
  const deleted: string[] = [];
  const informer = new CsrInformer(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    { resyncMs: 3_600_000, clock, maxCacheBytes: 40_000, onChange: () => undefined, onDelete: (csr) => deleted.push(csr.metadata.name) },
    logger,
  );
  const stop = new AbortController();
  const running = informer.run(stop.signal);
  // The list's fifth CSR takes it past the bound; the re-list waits its back-off (1 s).
  await until('the first list to overflow', () => informer.full && clock.pending === 2);
  t.notOk(informer.synced, 'not in sync: not ready, and it stands aside from the lease');
  t.equal(
    informer.notSyncedBecause,
    'CSR cache full: the 5 CSRs kept took over 40 KiB; emptied, re-listing until they fit',
    '/readyz says why',
  );
  t.equal(informer.cache.size, 0, 'emptied, not grown');
  t.same(deleted, names('a', 5), 'what it held is reported gone');
  t.match(logged, [{ level: 'warn', message: `${informer.notSyncedBecause}; not ready, not leading` }], 'one log line says so');
  clock.advance(1000);
  // The re-list fits; the watch then brings three more, past the bound again.
  await until('the re-list to fit', () => logged.some((l) => l.message === 'CSR cache fits again; ready'));
  await until('the watch to overflow', () => informer.full && clock.pending === 2);
  t.match(informer.notSyncedBecause, /^CSR cache full: the 5 CSRs kept/, 'a watch event past the bound does the same');
  clock.advance(1000);
  await until('a re-list that fits', () => informer.synced);
  t.notOk(informer.full, 'no longer full');
  t.same([...informer.cache.keys()], names('d', 2), 'it holds what the server has');
  t.equal(informer.cache.bytes, 2 * retainedBytes(retain(pending('d0') as ApproverCsr, defaultPolicy)), 'and counts it');
  stop.abort();
  await running;
});

t.test("a flood of another signer's 1 MB CSRs, listed and watched, costs the cache about a kilobyte each", async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const request = 'I'.repeat(1_333_336);
  const foreign = (name: string) => ({
    ...csr(name, '5'),
    spec: { request, signerName: 'example.com/foreign', username: 'system:bootstrap:x' },
  });
  pool.intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' }).reply(200, list('10', ['l0', 'l1', 'l2', 'l3', 'l4'].map(foreign)));
  pool
    .intercept({ path: (p) => p.includes('watch=true'), method: 'GET' })
    .reply(200, lines(...['w0', 'w1', 'w2', 'w3', 'w4'].map((n) => ({ type: 'ADDED', object: foreign(n) }))));
  const stop = new AbortController();
  const informer = new CsrInformer(
    new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
    { resyncMs: 3_600_000, onChange: () => (informer.cache.size === 10 ? stop.abort() : undefined) },
    silentLogger(),
  );
  await informer.run(stop.signal);
  t.equal(informer.cache.size, 10, 'every CSR is in the cache');
  t.ok(informer.cache.bytes < 10 * 1500, `10 MB of requests counted as ${informer.cache.bytes} bytes`);
  t.ok(
    [...informer.cache.values()].every((c) => c.spec.request === ''),
    'no request is kept',
  );
});

t.test(
  'one requester past its share: its youngest are left out and reported once, then brought back by a re-list as older ones settle',
  async (t) => {
    const mock = new MockAgent();
    mock.disableNetConnect();
    t.teardown(() => mock.close());
    const pool = mock.get(server);
    // Pending kube-proxy CSRs of node n1, counted at about 9 KiB each: three fit in its 30,000-byte share.
    const pending = (i: number, username = 'system:node:n1', rv = '5') => ({
      kind: 'CertificateSigningRequest',
      metadata: { name: `p${i}`, uid: `u-p${i}`, resourceVersion: rv, creationTimestamp: `2026-01-01T00:00:0${i}Z`, labels: { pad: 'x' } },
      spec: { request: 'A'.repeat(8000), signerName: 'kubernetes.io/kube-apiserver-client', username },
    });
    const settled = {
      ...pending(0, 'system:node:n1', '11'),
      status: { conditions: [{ type: 'Approved', status: 'True' }], certificate: 'Yw==' },
    };
    // Listed youngest first (a list comes in name order, not age): the older ones still win the share.
    pool
      .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
      .reply(
        200,
        list('10', [
          pending(4),
          pending(3),
          pending(2),
          pending(1),
          pending(0),
          { ...pending(9, 'system:node:n2'), metadata: { ...pending(9).metadata, name: 'other', uid: 'u-other' } },
        ]),
      );
    pool
      .intercept({ path: (p) => p.includes('watch=true') && p.includes('resourceVersion=10&'), method: 'GET' })
      .reply(200, lines({ type: 'MODIFIED', object: settled }));
    pool
      .intercept({ path: (p) => p.includes('watch=true') && p.includes('resourceVersion=11&'), method: 'GET' })
      .reply(200, '')
      .delay(600_000);
    pool
      .intercept({ path: `${CSR_PATH}?limit=500`, method: 'GET' })
      .reply(200, list('20', [settled, pending(1), pending(2), pending(3), pending(4)]));
    pool
      .intercept({ path: (p) => p.includes('watch=true') && p.includes('resourceVersion=20&'), method: 'GET' })
      .reply(200, '')
      .delay(600_000);
    const clock = new FakeClock();
    const { logger, lines: logged } = capturingLogger();
    const overflowed: [string, boolean][] = [];
    const deleted: string[] = [];
    const informer = new CsrInformer(
      new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock),
      {
        resyncMs: 3_600_000,
        clock,
        maxPendingPerRequester: 30_000,
        onChange: () => undefined,
        onDelete: (csr) => deleted.push(csr.metadata.name),
        onOverflow: (csr, report) => overflowed.push([csr.metadata.name, report]),
      },
      logger,
    );
    const stop = new AbortController();
    const running = informer.run(stop.signal);
    await until('the list, and the re-list due once p0 settled', () => informer.synced && clock.pending === 2);
    t.ok(informer.synced, 'ready: a requester past its share changes nothing for the others');
    t.same([...informer.cache.keys()].sort(), ['other', 'p0', 'p1', 'p2'], "the oldest three of n1 are kept, and n2's");
    t.same(informer.cache.overflow, { requesters: 1, csrs: 2 }, 'p3 and p4 are left out, only counted');
    t.same(deleted, ['p4', 'p3'], 'younger ones kept first made room for older ones');
    t.same(
      overflowed,
      [
        ['p4', true],
        ['p3', false],
      ],
      'each counted once, reported once per requester',
    );
    t.equal(logged.filter((l) => /past its share/.test(l.message)).length, 1, 'one log line');
    t.notOk(informer.cache.get('p1')?.metadata && 'labels' in informer.cache.get('p1')!.metadata, 'no labels kept');
    clock.advance(RELIST_GAP_MS);
    await until('the re-list to bring p3 back', () => informer.cache.get('p3') !== undefined);
    t.same([...informer.cache.keys()].sort(), ['p0', 'p1', 'p2', 'p3'], "p0 settled: p3 now has its place (and n2's CSR is gone)");
    t.same(informer.cache.overflow, { requesters: 1, csrs: 1 }, 'p4 still left out');
    t.same(overflowed.length, 2, 'and not counted again');
    t.ok(OVERFLOW_REPORT_MS >= 60_000, 'reports are at most one per requester in minutes');
    stop.abort();
    await running;
  },
);
