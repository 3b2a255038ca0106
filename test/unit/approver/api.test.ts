// The approver's API calls against a mocked API server: what comes back must
// be what was asked for, and a decision that cannot be written says why.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { decideCsr, getNode, getRecord, writeClaim } from '../../../agent/approver/api.js';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { UnexpectedObjectError } from '../../../agent/errors.js';
import { KubeClient } from '../../../agent/kube/client.js';

const server = 'https://api.test';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

function setup(t: Test) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  return { pool: mock.get(server), client: new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock) };
}

const csr: ApproverCsr = {
  kind: 'CertificateSigningRequest',
  metadata: { name: 'c1', resourceVersion: '5' },
  spec: { request: '', signerName: 'kubernetes.io/kube-apiserver-client' },
};

t.test('getNode: the Node asked for, null when there is none, an error for anything else', async (t) => {
  const { pool, client } = setup(t);
  pool.intercept({ path: '/api/v1/nodes/n1', method: 'GET' }).reply(200, {
    kind: 'Node',
    metadata: { name: 'n1', labels: { 'node-role.kubernetes.io/control-plane': '' } },
    status: { addresses: [{ type: 'InternalIP', address: '10.0.0.1' }] },
  });
  t.same(await getNode(client, 'n1'), {
    name: 'n1',
    addresses: [{ type: 'InternalIP', address: '10.0.0.1' }],
    labels: { 'node-role.kubernetes.io/control-plane': '' },
  });
  pool.intercept({ path: '/api/v1/nodes/gone', method: 'GET' }).reply(404, { kind: 'Status', reason: 'NotFound' });
  t.equal(await getNode(client, 'gone'), null);
  pool.intercept({ path: '/api/v1/nodes/n2', method: 'GET' }).reply(200, { kind: 'NodeList', metadata: {}, items: [] });
  await t.rejects(getNode(client, 'n2'), UnexpectedObjectError, 'a NodeList is no Node');
  await t.rejects(getNode(client, '.'), UnexpectedObjectError, 'and "." never becomes a request');
});

t.test('decideCsr: written, a conflict, or a CSR the API server cannot find by its name', async (t) => {
  const { pool, client } = setup(t);
  pool.intercept({ path: `${CSRS}/c1/approval`, method: 'PUT' }).reply(200, (o) => JSON.parse(String(o.body)));
  const written = await decideCsr(client, csr, 'Approved', 'ok');
  t.equal(written.kind, 'written');
  t.same(written.kind === 'written' ? written.csr.status?.conditions?.map((c) => c.type) : [], ['Approved']);
  pool.intercept({ path: `${CSRS}/c1/approval`, method: 'PUT' }).reply(409, { kind: 'Status', reason: 'Conflict' });
  t.same(await decideCsr(client, csr, 'Approved', 'ok'), { kind: 'conflict' });
  pool.intercept({ path: `${CSRS}/c1/approval`, method: 'PUT' }).reply(404, { kind: 'Status', reason: 'NotFound' });
  t.same(await decideCsr(client, csr, 'Denied', 'no'), { kind: 'not-found' });
});

t.test("getRecord: kubeboot's ConfigMap, null when there is none; forbidden fails closed naming the manifest", async (t) => {
  const { pool, client } = setup(t);
  const path = '/api/v1/namespaces/kubeboot/configmaps';
  pool
    .intercept({ path: `${path}/token-abcdef`, method: 'GET' })
    .reply(200, { kind: 'ConfigMap', metadata: { name: 'token-abcdef' }, data: {} });
  t.match(await getRecord(client, 'token-abcdef'), { metadata: { name: 'token-abcdef' } });
  pool.intercept({ path: `${path}/revocations`, method: 'GET' }).reply(404, { kind: 'Status', reason: 'NotFound' });
  t.equal(await getRecord(client, 'revocations'), null);
  pool.intercept({ path: `${path}/replacements`, method: 'GET' }).reply(403, { kind: 'Status', reason: 'Forbidden' });
  await t.rejects(
    getRecord(client, 'replacements'),
    /may not read ConfigMap kubeboot\/replacements \(apply packaging\/manifests\/approver\/node-identity.yaml\)/,
  );
});

t.test('writeClaim: a merge patch on the resourceVersion read; changed or gone meanwhile is false', async (t) => {
  const { pool, client } = setup(t);
  const path = '/api/v1/namespaces/kubeboot/configmaps/token-abcdef';
  const sent: { body: unknown; type: unknown }[] = [];
  const claim = {
    name: 'token-abcdef',
    resourceVersion: '7',
    patch: { metadata: { annotations: { 'kubeboot.io/issued': '{"w1":"u"}' } } },
  };
  for (const status of [200, 409, 404]) {
    pool
      .intercept({ path, method: 'PATCH' })
      .reply<object>(
        (o) => (
          sent.push({ body: JSON.parse(String(o.body)), type: (o.headers as Record<string, string>)['content-type'] }),
          { statusCode: status, data: {} }
        ),
      );
  }
  t.same([await writeClaim(client, claim), await writeClaim(client, claim), await writeClaim(client, claim)], [true, false, false]);
  t.same(sent[0], {
    body: { metadata: { annotations: { 'kubeboot.io/issued': '{"w1":"u"}' }, resourceVersion: '7' } },
    type: 'application/merge-patch+json',
  });
});
