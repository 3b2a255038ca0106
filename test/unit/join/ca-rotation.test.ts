// The admin's side of a CA rotation (agent/join/ca-rotation.ts) against
// undici's MockAgent: what each node's annotation says about its progress,
// and publishing a bundle without losing a concurrent change.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { parse } from 'yaml';
import { bundleFromFile, publishTrust, rotationProgress } from '../../../agent/join/ca-rotation.js';
import { InputError } from '../../../agent/errors.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { trustedBundle } from '../../../agent/trust/bundle.js';
import { clusterInfoKubeconfig } from '../../support/kubeconfig.js';
import { createCa } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const ca1 = await createCa('ca-1');
const ca2 = await createCa('ca-2');
const both = trustedBundle(ca1.certPem + ca2.certPem);
const pin1 = trustedBundle(ca1.certPem).pins[0]!;
const pin2 = trustedBundle(ca2.certPem).pins[0]!;

function client(t: Test, agent: MockAgent): KubeClient {
  const c = new KubeClient({ server: SERVER, caPem: ca1.certPem }, { kind: 'anonymous' }, agent);
  t.teardown(() => agent.close());
  return c;
}

t.test('progress: who trusts the bundle, who holds certificates under the signer, who lags and why', async (t) => {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const note = (o: object) => ({ 'kubeboot.io/ca-rotation': JSON.stringify(o) });
  const nodes = [
    { name: 'ready', annotations: note({ bundle: both.hash, active: true, issuers: { kubelet: pin2 }, refused: null }) },
    { name: 'old-cert', annotations: note({ bundle: both.hash, active: true, issuers: { kubelet: pin1 }, refused: null }) },
    { name: 'waiting-restart', annotations: note({ bundle: both.hash, active: false, issuers: { kubelet: pin2 }, refused: null }) },
    { name: 'behind', annotations: note({ bundle: 'other', active: true, issuers: { kubelet: pin1 }, refused: null }) },
    { name: 'refusing', annotations: note({ bundle: 'other', active: true, issuers: {}, refused: 'node-writable-source' }) },
    { name: 'no-kubeboot', annotations: {} },
  ];
  agent
    .get(SERVER)
    .intercept({ path: '/api/v1/nodes', method: 'GET' })
    .reply(200, { kind: 'NodeList', items: nodes.map((n) => ({ metadata: n })) });
  const p = await rotationProgress(client(t, agent), both, pin2);
  const lag = Object.fromEntries(p.nodes.map((n) => [n.name, n.lag]));
  t.equal(lag.ready, null);
  t.match(lag['old-cert'], /still holds kubelet certificate\(s\) from another CA/);
  t.match(lag['waiting-restart'], /waits for its slot to restart/);
  t.match(lag.behind, /has not picked up the published bundle/);
  t.match(lag.refusing, /refuses the published bundle: node-writable-source/);
  t.match(lag['no-kubeboot'], /no kubeboot.io\/ca-rotation annotation/);
  t.equal(p.trusting, 2, 'trust and use it: ready, old-cert');
  t.equal(p.underSigner, 2, 'under the signer: ready, waiting-restart');
  t.notOk(p.ready, 'not finished while any node lags');
});

t.test('publish: the bundle goes into cluster-info, a conflict is retried, other keys stay', async (t) => {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const pool = agent.get(SERVER);
  const cm = (rv: string) => ({
    kind: 'ConfigMap',
    metadata: { name: 'cluster-info', namespace: 'kube-public', resourceVersion: rv },
    data: { kubeconfig: clusterInfoKubeconfig(SERVER, ca1.certPem), 'jws-kubeconfig-abcdef': 'sig' },
  });
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' }).reply(200, cm('1'));
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'PUT' }).reply(409, { kind: 'Status' });
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' }).reply(200, cm('2'));
  let put: { metadata: { resourceVersion: string; annotations: Record<string, string> }; data: Record<string, string> } | null = null;
  pool.intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'PUT' }).reply((o) => {
    put = JSON.parse(String(o.body));
    return { statusCode: 200, data: '{}' };
  });
  await publishTrust(client(t, agent), both, pin2);
  const sent = put!;
  t.equal(sent.metadata.resourceVersion, '2', 'written over the version read after the conflict');
  t.equal(sent.metadata.annotations['kubeboot.io/signer-ca-hash'], pin2);
  t.equal(sent.data['jws-kubeconfig-abcdef'], 'sig', 'signatures stay (the bootstrapsigner renews them)');
  const doc = parse(sent.data.kubeconfig!) as { clusters: { cluster: Record<string, string> }[] };
  t.equal(trustedBundle(Buffer.from(doc.clusters[0]!.cluster['certificate-authority-data']!, 'base64').toString()).hash, both.hash);
  await t.rejects(
    publishTrust(client(t, new MockAgent()), trustedBundle(ca1.certPem), pin2),
    /not in the bundle/,
    'a signer CA outside the bundle',
  );
});

t.test('a bundle file is checked as a node will check it, naming the file', async (t) => {
  const err = (() => {
    try {
      bundleFromFile('/tmp/new.crt', ca1.keyPem, new Date());
    } catch (e) {
      return e;
    }
  })();
  t.type(err, InputError);
  t.match((err as Error).message, /^\/tmp\/new\.crt: CA bundle: /);
});
