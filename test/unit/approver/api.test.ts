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

t.test('getRecord: a kubeboot.io record, null when there is none; forbidden fails closed naming the manifest', async (t) => {
  const { pool, client } = setup(t);
  const path = '/apis/kubeboot.io/v1alpha1/tokenbindings';
  pool.intercept({ path: `${path}/abcdef`, method: 'GET' }).reply(200, { kind: 'TokenBinding', metadata: { name: 'abcdef' } });
  t.match(await getRecord(client, 'tokenbindings', 'abcdef'), { metadata: { name: 'abcdef' } });
  pool.intercept({ path: `${path}/gone`, method: 'GET' }).reply(404, { kind: 'Status', reason: 'NotFound' });
  t.equal(await getRecord(client, 'tokenbindings', 'gone'), null);
  pool.intercept({ path: `${path}/secret`, method: 'GET' }).reply(403, { kind: 'Status', reason: 'Forbidden' });
  await t.rejects(
    getRecord(client, 'tokenbindings', 'secret'),
    /may not read tokenbindings\.kubeboot\.io\/secret \(apply packaging\/manifests\/approver\/node-identity.yaml\)/,
  );
});

t.test('writeClaim: a status merge patch on the resourceVersion read, a claim created; changed, taken or gone is null', async (t) => {
  const { pool, client } = setup(t);
  const status = '/apis/kubeboot.io/v1alpha1/tokenbindings/abcdef/status';
  const sent: { body: unknown; type: unknown }[] = [];
  const claim = {
    op: 'status' as const,
    resource: 'tokenbindings' as const,
    name: 'abcdef',
    resourceVersion: '7',
    status: { issued: [{ node: 'w1', csrUID: 'u' }] },
  };
  const answers: [number, object][] = [
    [200, { kind: 'TokenBinding', metadata: { name: 'abcdef', resourceVersion: '8' } }],
    [409, {}],
    [404, {}],
  ];
  for (const [code, data] of answers) {
    pool
      .intercept({ path: status, method: 'PATCH' })
      .reply<object>(
        (o) => (
          sent.push({ body: JSON.parse(String(o.body)), type: (o.headers as Record<string, string>)['content-type'] }),
          { statusCode: code, data }
        ),
      );
  }
  t.same(
    [await writeClaim(client, claim), await writeClaim(client, claim), await writeClaim(client, claim)],
    [{ kind: 'TokenBinding', metadata: { name: 'abcdef', resourceVersion: '8' } }, null, null],
  );
  t.same(sent[0], {
    body: { metadata: { resourceVersion: '7' }, status: { issued: [{ node: 'w1', csrUID: 'u' }] } },
    type: 'application/merge-patch+json',
  });
  const object = { kind: 'NodeClaim' as const, metadata: { name: 'w1' }, spec: { tokenID: 'abcdef', csrUID: 'u' } };
  pool.intercept({ path: '/apis/kubeboot.io/v1alpha1/nodeclaims', method: 'POST' }).reply(409, { kind: 'Status', reason: 'AlreadyExists' });
  t.equal(await writeClaim(client, { op: 'create', resource: 'nodeclaims', name: 'w1', object }), null, 'a name spent meanwhile: 409');
});
