// The one informer (kube/informer.ts) against a mocked API, with a store that
// records what it is handed: what the records' stores and the CSR cache rely on.
import t from 'tap';
import { MockAgent, type MockPool } from 'undici';
import { KubeClient } from '../../../agent/kube/client.js';
import { ABSENT_RELIST_MS, Informer, type InformerStore, type KubeObject } from '../../../agent/kube/informer.js';
import { listAll } from '../../../agent/kube/list.js';
import { capturingLogger, FakeClock } from '../../support/fake-time.js';
import { until } from '../../support/until.js';

const server = 'https://api.test';
const PATH = '/apis/kubeboot.io/v1alpha1/tokenbindings';
const KIND = 'TokenBinding';
const item = (name: string, rv: string) => ({ metadata: { name, resourceVersion: rv } });
const object = (name: string, rv: string) => ({ kind: KIND, ...item(name, rv) });
const list = (rv: string, items: unknown[], more?: string) => ({
  kind: `${KIND}List`,
  metadata: { resourceVersion: rv, ...(more ? { continue: more } : {}) },
  items,
});
const lines = (...events: unknown[]) => events.map((e) => JSON.stringify(e) + '\n').join('');
const isWatch = (rv: string) => (path: string) => path.includes('watch=true') && path.includes(`resourceVersion=${rv}&`);
/** A watch from `rv` that sends nothing for ten minutes: the informer sits in it until stopped. */
const quietWatch = (pool: { intercept: MockPool['intercept'] }, rv: string) =>
  pool
    .intercept({ path: isWatch(rv), method: 'GET' })
    .reply(200, '')
    .delay(600_000);

/** A store that writes down every call, and can be told to refuse an object. */
function recordingStore(refuse?: string): { store: InformerStore<KubeObject>; calls: string[] } {
  const calls: string[] = [];
  const store: InformerStore<KubeObject> = {
    list: () => {
      calls.push('list');
      return {
        add: (o) => calls.push(`add ${o.kind} ${o.metadata.name}@${o.metadata.resourceVersion}`),
        done: () => calls.push('done'),
      };
    },
    update: (o, type) => {
      if (o.metadata.name === refuse) throw new Error(`store full at ${o.metadata.name}`);
      calls.push(`${type} ${o.metadata.name}@${o.metadata.resourceVersion}`);
    },
    delete: (o) => calls.push(`DELETED ${o.metadata.name}`),
  };
  return { store, calls };
}

function setup(t: { teardown: (fn: () => unknown) => void }) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  return { pool: mock.get(server), client: new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock) };
}

t.test('lists in pages with their kind, watches from the list resourceVersion, resumes after bookmarks, re-lists on 410', async (t) => {
  const { pool, client } = setup(t);
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('10', [item('a', '5')], 'p2'));
  pool.intercept({ path: `${PATH}?limit=500&continue=p2`, method: 'GET' }).reply(200, list('10', [item('b', '6')]));
  pool
    .intercept({ path: isWatch('10'), method: 'GET' })
    .reply(
      200,
      lines(
        { type: 'ADDED', object: object('c', '11') },
        { type: 'BOOKMARK', object: { kind: KIND, metadata: { resourceVersion: '15' } } },
      ),
    );
  pool
    .intercept({ path: isWatch('15'), method: 'GET' })
    .reply(200, lines({ type: 'DELETED', object: object('a', '16') }, { type: 'ERROR', object: { kind: 'Status', code: 410 } }));
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('20', [item('b', '6')]));
  pool.intercept({ path: isWatch('20'), method: 'GET' }).reply(200, lines({ type: 'MODIFIED', object: object('b', '21') }));
  const { store, calls } = recordingStore();
  const stop = new AbortController();
  const { logger, lines: logged } = capturingLogger();
  const stopAt21: InformerStore<KubeObject> = {
    ...store,
    update: (o, type) => {
      store.update(o, type);
      if (o.metadata.resourceVersion === '21') stop.abort();
    },
  };
  const informer = new Informer(client, { path: PATH, kind: KIND }, stopAt21, logger);
  t.equal(informer.notSyncedBecause, 'the first list has not completed', 'not in sync before its first list');
  await informer.run(stop.signal);
  t.same(
    calls,
    ['list', `add ${KIND} a@5`, `add ${KIND} b@6`, 'done', 'ADDED c@11', 'DELETED a', 'list', `add ${KIND} b@6`, 'done', 'MODIFIED b@21'],
    'both pages (items given their kind), the watch, the 410, the re-list, the watch from its resourceVersion',
  );
  t.ok(informer.synced, 'in sync');
  t.match(logged, [{ level: 'info', message: 'TokenBinding watch expired (410 Gone); re-listing' }], 'the 410 said once');
});

t.test('a collection it may not read is an empty store, in sync, listed again a minute later', async (t) => {
  const { pool, client } = setup(t);
  pool
    .intercept({ path: (p) => p.startsWith('/api/v1/namespaces/kubeboot/configmaps?'), method: 'GET' })
    .reply(403, { kind: 'Status', code: 403 });
  pool
    .intercept({ path: (p) => p.startsWith('/api/v1/namespaces/kubeboot/configmaps?') && !p.includes('watch'), method: 'GET' })
    .reply(200, { kind: 'ConfigMapList', metadata: { resourceVersion: '3' }, items: [item('revocations', '2')] });
  quietWatch(pool, '3');
  const clock = new FakeClock();
  const { store, calls } = recordingStore();
  const stop = new AbortController();
  const informer = new Informer(
    client,
    {
      path: '/api/v1/namespaces/kubeboot/configmaps',
      kind: 'ConfigMap',
      query: { fieldSelector: 'metadata.name=revocations' },
      absentIfDenied: true,
      clock,
    },
    store,
    capturingLogger().logger,
  );
  const running = informer.run(stop.signal);
  await until('the denied list', () => informer.synced && clock.pending === 1);
  t.same(calls, ['list', 'done'], 'nothing listed, and nothing held');
  clock.advance(ABSENT_RELIST_MS - 1);
  t.same(calls, ['list', 'done'], 'not listed again before the minute is up');
  clock.advance(1);
  await until('the list once allowed', () => calls.length === 5);
  t.same(calls.slice(2), ['list', 'add ConfigMap revocations@2', 'done'], 'listed again, and read');
  stop.abort();
  await running;
});

t.test('a failing list backs off 1 s, then 2 s, on its clock, and says why it is not in sync', async (t) => {
  const { pool, client } = setup(t);
  for (let i = 0; i < 2; i++)
    pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(500, { kind: 'Status', message: 'etcd is down', code: 500 });
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('10', []));
  quietWatch(pool, '10');
  const clock = new FakeClock();
  const { logger, lines: logged } = capturingLogger();
  const stop = new AbortController();
  const informer = new Informer(client, { path: PATH, kind: KIND, clock }, recordingStore().store, logger);
  const running = informer.run(stop.signal);
  await until('the first failure', () => clock.pending === 1);
  t.match(informer.notSyncedBecause, /etcd is down/, 'the failure is the reason');
  t.equal(clock.nextTimerIn(), 1000, 'first back-off 1 s');
  clock.advance(1000);
  await until('the second failure', () => logged.length === 2 && clock.pending === 1);
  t.equal(clock.nextTimerIn(), 2000, 'then 2 s');
  clock.advance(2000);
  await until('the list to succeed', () => informer.synced);
  t.match(logged, [
    { level: 'warn', message: 'TokenBinding list/watch failed; re-listing' },
    { message: 'TokenBinding list/watch failed; re-listing' },
  ]);
  stop.abort();
  await running;
});

t.test("a store that refuses a watched object leaves it out of sync, with the store's reason, until a list completes", async (t) => {
  const { pool, client } = setup(t);
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('10', []));
  pool.intercept({ path: isWatch('10'), method: 'GET' }).reply(200, lines({ type: 'ADDED', object: object('huge', '11') }));
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('20', []));
  quietWatch(pool, '20');
  const clock = new FakeClock();
  const stop = new AbortController();
  const informer = new Informer(client, { path: PATH, kind: KIND, clock }, recordingStore('huge').store, capturingLogger().logger);
  const running = informer.run(stop.signal);
  await until('the refusal', () => !informer.synced && clock.pending === 1);
  t.equal(informer.notSyncedBecause, 'store full at huge', '/readyz would say what the store said');
  clock.advance(1000);
  await until('the re-list', () => informer.synced);
  stop.abort();
  await running;
});

t.test('relist() stops the running watch and lists again', async (t) => {
  const { pool, client } = setup(t);
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('10', [item('a', '5')]));
  quietWatch(pool, '10');
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('20', [item('a', '5')]));
  quietWatch(pool, '20');
  const { store, calls } = recordingStore();
  const stop = new AbortController();
  const informer = new Informer(client, { path: PATH, kind: KIND }, store, capturingLogger().logger);
  const running = informer.run(stop.signal);
  await informer.whenSynced;
  informer.relist();
  await until('the second list', () => calls.filter((c) => c === 'done').length === 2);
  t.same(calls, ['list', `add ${KIND} a@5`, 'done', 'list', `add ${KIND} a@5`, 'done'], 'a second list, with no failure between');
  stop.abort();
  await running;
});

t.test('listAll reads every page, and a status it is told means absent is no items', async (t) => {
  const { pool, client } = setup(t);
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(200, list('10', [item('a', '5')], 'p2'));
  pool.intercept({ path: `${PATH}?limit=500&continue=p2`, method: 'GET' }).reply(200, list('10', [item('b', '6')]));
  pool.intercept({ path: `${PATH}?limit=500`, method: 'GET' }).reply(404, { kind: 'Status', code: 404 });
  const names = (await listAll<KubeObject>(client, PATH, { kind: KIND })).map((o) => o.metadata.name);
  t.same(names, ['a', 'b'], 'both pages');
  t.same(await listAll(client, PATH, { kind: KIND, absentIf: [404] }), [], 'a 404 told to mean absent is none');
});
