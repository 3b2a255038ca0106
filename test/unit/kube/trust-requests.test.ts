// canChangeClusterInfo against a mocked API server that answers each
// SelfSubjectAccessReview from a set of grants: a node that could write
// kube-public/cluster-info by any route is seen as one that can.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { KubeClient } from '../../../agent/kube/client.js';
import { canChangeClusterInfo } from '../../../agent/kube/trust-requests.js';

const SERVER = 'https://api.test:6443';
const REVIEWS = '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews';

interface Attributes {
  namespace?: string;
  verb: string;
  resource: string;
  name?: string;
}

/** A client whose API server allows exactly the `grants` ("verb resource"), and the reviews it was asked. */
function setup(t: Test, grants: string[]) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const asked: Attributes[] = [];
  agent
    .get(SERVER)
    .intercept({ path: REVIEWS, method: 'POST' })
    .reply(201, (opts) => {
      const review = JSON.parse(String(opts.body));
      const attributes: Attributes = review.spec.resourceAttributes;
      asked.push(attributes);
      return { ...review, status: { allowed: grants.includes(`${attributes.verb} ${attributes.resource}`) } };
    })
    .persist();
  const client = new KubeClient({ server: SERVER, caPem: null }, { kind: 'anonymous' }, agent);
  return { client, asked };
}

t.test('a node allowed nothing cannot change cluster-info, and every route was asked about', async (t) => {
  const { client, asked } = setup(t, []);
  t.equal(await canChangeClusterInfo(client), false);
  t.same(asked.map((a) => `${a.verb} ${a.resource}`).sort(), [
    'create configmaps',
    'delete configmaps',
    'deletecollection configmaps',
    'impersonate groups',
    'impersonate serviceaccounts',
    'impersonate users',
    'patch configmaps',
    'update configmaps',
  ]);
  t.same(
    asked.filter((a) => a.resource === 'configmaps').map((a) => a.namespace),
    Array(5).fill('kube-public'),
    'configmaps are asked about in kube-public',
  );
  t.match(
    asked.find((a) => a.resource === 'serviceaccounts'),
    { namespace: 'kube-system' },
    'service accounts in kube-system, where the controllers run',
  );
});

t.test('deletecollection alone cannot replace cluster-info', async (t) => {
  const { client } = setup(t, ['deletecollection configmaps']);
  t.equal(await canChangeClusterInfo(client), false);
});

t.test('deletecollection with create replaces cluster-info', async (t) => {
  const { client } = setup(t, ['deletecollection configmaps', 'create configmaps']);
  t.equal(await canChangeClusterInfo(client), true);
});

t.test('impersonating users acts as anyone, so it can change cluster-info', async (t) => {
  const { client } = setup(t, ['impersonate users']);
  t.equal(await canChangeClusterInfo(client), true);
});

t.test('update on cluster-info itself can change it', async (t) => {
  const { client, asked } = setup(t, ['update configmaps']);
  t.equal(await canChangeClusterInfo(client), true);
  t.match(
    asked.find((a) => a.verb === 'update'),
    { namespace: 'kube-public', name: 'cluster-info' },
  );
});
