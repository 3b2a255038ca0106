// The CSR informer against a mocked API: list, watch from the list's
// resourceVersion, re-list on 410 Gone (dropping what disappeared), resume.
import t from 'tap';
import { MockAgent } from 'undici';
import { CSR_PATH, CsrInformer } from '../../../agent/approver/informer.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { silentLogger } from '../../../agent/log.js';

const server = 'https://api.test';
const csr = (name: string, rv: string) => ({ metadata: { name, resourceVersion: rv }, spec: { request: '', signerName: 'x' } });
const lines = (...events: unknown[]) => events.map((e) => JSON.stringify(e) + '\n').join('');

t.test('lists, watches from the list resourceVersion, re-lists on 410 and resumes', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const pool = mock.get(server);
  const seen: string[] = [];
  const deleted: string[] = [];
  const isList = (rv?: string) => (path: string) => path === CSR_PATH && rv === undefined;
  const isWatch = (rv: string) => (path: string) => path.startsWith(`${CSR_PATH}?`) && path.includes('watch=true') && path.includes(`resourceVersion=${rv}&`);
  pool.intercept({ path: isList(), method: 'GET' }).reply(200, { metadata: { resourceVersion: '10' }, items: [csr('a', '5'), csr('b', '6')] });
  pool.intercept({ path: isWatch('10'), method: 'GET' }).reply(200, lines({ type: 'ADDED', object: csr('c', '11') }, { type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } }));
  pool.intercept({ path: isList(), method: 'GET' }).reply(200, { metadata: { resourceVersion: '20' }, items: [csr('a', '5'), csr('c', '11')] });
  pool.intercept({ path: isWatch('20'), method: 'GET' }).reply(200, lines({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '25' } } }));
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
  t.same(seen, ['a@5', 'b@6', 'c@11', 'a@5', 'c@11', 'a@26'], 'first list, the watch, the re-list after 410, the resumed watch after a bookmark');
  t.same([...informer.cache.keys()].sort(), ['a', 'c'], 'b, gone while the watch was expired, is dropped');
  t.same(deleted, ['b'], 'and reported as deleted');
});
