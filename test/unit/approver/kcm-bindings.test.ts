// Whether kube-controller-manager still approves kubelet client CSRs: asked
// of the authorizer (SubjectAccessReview) for the groups of every requester,
// whatever role grants it; the bindings behind a grant named as a hint; said
// on /readyz, which looks again (at most once a minute) so removing it shows.
import t from 'tap';
import { MockAgent } from 'undici';
import {
  grantingBindings,
  kcmAutoApproval,
  kcmAutoApprovalMonitor,
  kcmAutoApprovalProblem,
  type KcmAutoApproval,
} from '../../../agent/approver/kcm-bindings.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { FakeClock } from '../../support/fake-time.js';
import { until } from '../../support/until.js';

const server = 'https://api.test';
const SARS = '/apis/authorization.k8s.io/v1/subjectaccessreviews';
const CRS = '/apis/rbac.authorization.k8s.io/v1/clusterroles';
const CRBS = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';
const binding = (name: string, role: string, group: string) => ({
  metadata: { name },
  roleRef: { kind: 'ClusterRole', name: role },
  subjects: [{ kind: 'Group', name: group }],
});
const role = (name: string, resources: string[], verbs = ['create'], apiGroups = ['certificates.k8s.io']) => ({
  metadata: { name },
  rules: [{ apiGroups, resources, verbs }],
});

interface Sar {
  spec: { groups: string[]; resourceAttributes: { subresource: string; verb: string; group: string } };
}

/** An authorizer allowing `allow(groups, subresource)`; every review it was asked is kept. */
function authorizer(allow: (groups: string[], subresource: string) => boolean, lists: { roles?: object[]; bindings?: object[] } = {}) {
  const mock = new MockAgent();
  mock.disableNetConnect();
  const pool = mock.get(server);
  const asked: Sar['spec'][] = [];
  pool
    .intercept({ path: SARS, method: 'POST' })
    .reply(200, (opts) => {
      const sar = JSON.parse(String(opts.body)) as Sar;
      asked.push(sar.spec);
      return { status: { allowed: allow(sar.spec.groups, sar.spec.resourceAttributes.subresource) } };
    })
    .persist();
  pool
    .intercept({ path: `${CRS}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'ClusterRoleList', items: lists.roles ?? [], metadata: {} });
  pool
    .intercept({ path: `${CRBS}?limit=500`, method: 'GET' })
    .reply(200, { kind: 'ClusterRoleBindingList', items: lists.bindings ?? [], metadata: {} });
  return { mock, asked, client: new KubeClient({ server, caPem: null }, { kind: 'anonymous' }, mock) };
}

t.test("a custom role granting selfnodeclient to system:nodes is seen, and its binding named: role names don't matter", async (t) => {
  const { mock, asked, client } = authorizer((groups, sub) => groups.includes('system:nodes') && sub === 'selfnodeclient', {
    roles: [
      role('approve-node-client-renewal-csr', ['certificatesigningrequests/selfnodeclient']),
      role('system:node-bootstrapper', ['certificatesigningrequests'], ['create', 'get']),
    ],
    bindings: [
      binding('auto-approve-renewals-for-nodes', 'approve-node-client-renewal-csr', 'system:nodes'),
      binding('kubeboot:node-bootstrapper', 'system:node-bootstrapper', 'system:bootstrappers'),
    ],
  });
  const found = await kcmAutoApproval(client);
  t.same(
    asked
      .map((a) => `${a.groups.join('+')} ${a.resourceAttributes.verb} ${a.resourceAttributes.group}/${a.resourceAttributes.subresource}`)
      .sort(),
    [
      'system:bootstrappers+system:authenticated create certificates.k8s.io/nodeclient',
      'system:bootstrappers+system:bootstrappers:kubeadm:default-node-token+system:authenticated create certificates.k8s.io/nodeclient',
      'system:nodes+system:authenticated create certificates.k8s.io/nodeclient',
      'system:nodes+system:authenticated create certificates.k8s.io/selfnodeclient',
    ],
    "every requester's groups, on the subresources kube-controller-manager asks about",
  );
  t.same(found, {
    grants: [{ groups: ['system:nodes', 'system:authenticated'], subresource: 'selfnodeclient' }],
    bindings: ['auto-approve-renewals-for-nodes'],
  });
  t.equal(
    kcmAutoApprovalProblem(found),
    'kube-controller-manager still approves kubelet client CSRs on a name-prefix check, whatever this approver refuses or revokes: the authorizer says system:nodes may create certificatesigningrequests/selfnodeclient; remove the grant: kubectl delete clusterrolebinding auto-approve-renewals-for-nodes',
  );
  await mock.close();
});

t.test('nothing allowed: nothing to say, and no role or binding is listed', async (t) => {
  const { mock, client } = authorizer(() => false);
  const found = await kcmAutoApproval(client);
  t.same(found, { grants: [], bindings: [] });
  t.equal(kcmAutoApprovalProblem(found), null);
  t.equal(mock.pendingInterceptors().filter((i) => i.path !== SARS).length, 2, 'neither list was read');
  await mock.close();
});

t.test("kubeadm's token group alone is enough; a grant through no group binding is still said", async (t) => {
  const { mock, client } = authorizer(
    (groups, sub) => groups.includes('system:bootstrappers:kubeadm:default-node-token') && sub === 'nodeclient',
  );
  const found = await kcmAutoApproval(client);
  t.same(found.grants, [
    {
      groups: ['system:bootstrappers', 'system:bootstrappers:kubeadm:default-node-token', 'system:authenticated'],
      subresource: 'nodeclient',
    },
  ]);
  t.match(
    kcmAutoApprovalProblem(found),
    /says system:bootstrappers:kubeadm:default-node-token may create certificatesigningrequests\/nodeclient; no ClusterRoleBinding of a group was found/,
  );
  await mock.close();
});

t.test("the stock bindings: a token's grant said once, not again for kubeadm's group inside it", async (t) => {
  const { mock, client } = authorizer(
    (groups, sub) =>
      (groups.includes('system:bootstrappers') && sub === 'nodeclient') || (groups.includes('system:nodes') && sub === 'selfnodeclient'),
  );
  const found = await kcmAutoApproval(client);
  t.same(
    found.grants.map((g) => `${g.groups.join('+')} ${g.subresource}`),
    ['system:bootstrappers+system:authenticated nodeclient', 'system:nodes+system:authenticated selfnodeclient'],
  );
  await mock.close();
});

t.test('the bindings named: stock and custom roles, wildcards, only for a group the authorizer allowed', async (t) => {
  const grants = [{ groups: ['system:nodes', 'system:authenticated'], subresource: 'selfnodeclient' }];
  const roles = [
    role('system:certificates.k8s.io:certificatesigningrequests:selfnodeclient', ['certificatesigningrequests/selfnodeclient']),
    role('everything', ['*'], ['*'], ['*']),
    role('sub-wildcard', ['certificatesigningrequests/*']),
    role('read-only', ['certificatesigningrequests/selfnodeclient'], ['get']),
    role('other-group', ['certificatesigningrequests/selfnodeclient'], ['create'], ['apps']),
  ];
  const bindings = [
    binding('stock', 'system:certificates.k8s.io:certificatesigningrequests:selfnodeclient', 'system:nodes'),
    binding('wild', 'everything', 'system:authenticated'),
    binding('sub', 'sub-wildcard', 'system:nodes'),
    binding('ro', 'read-only', 'system:nodes'),
    binding('apps', 'other-group', 'system:nodes'),
    binding('elsewhere', 'everything', 'system:bootstrappers'),
    {
      metadata: { name: 'user' },
      roleRef: { kind: 'ClusterRole', name: 'everything' },
      subjects: [{ kind: 'User', name: 'system:node:x' }],
    },
  ];
  t.same(grantingBindings(roles, bindings, grants), ['stock', 'sub', 'wild']);
});

t.test("/readyz's line follows the authorizer, asked again at most once a minute", async (t) => {
  const clock = new FakeClock();
  const granted: KcmAutoApproval = { grants: [{ groups: ['system:nodes'], subresource: 'selfnodeclient' }], bindings: ['renewals'] };
  let answer = granted;
  let reads = 0;
  const monitor = kcmAutoApprovalMonitor(async () => (reads++, answer), clock);
  t.equal(monitor.detail(), 'kubelet client approval: on; not looked at yet');
  await until('the first look', () => reads === 1);
  await new Promise((resolve) => setImmediate(resolve));
  t.match(
    monitor.detail(),
    /^kubelet client approval: on; kube-controller-manager still approves .* kubectl delete clusterrolebinding renewals$/,
  );
  answer = { grants: [], bindings: [] };
  clock.advance(30_000);
  monitor.detail();
  t.equal(reads, 1, 'not asked again within the minute');
  clock.advance(30_000);
  monitor.detail();
  await until('the look a minute later', () => reads === 2);
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(monitor.detail(), 'kubelet client approval: on; the authorizer lets no requester have kube-controller-manager approve them');
});
