// `kubeboot token create` (and --create-token) asks the API server's
// authorizer what a new token may do before it makes one, against undici's
// MockAgent: kubeadm's group where only it may create CSRs, nothing made
// where nothing may, a warning (and the token as asked) where the admin may
// not ask.
import t from 'tap';
import { createTokenForCluster } from '../../../agent/admin/cluster-requests.js';
import { KUBEADM_TOKEN_GROUP, UnservedClusterError } from '../../../agent/admin/cluster-side.js';
import { tokenSpecFrom } from '../../../agent/admin/token.js';
import { MOCK_SERVER, mockAdmin, type Call } from '../../support/mock-admin.js';

const SECRETS = '/api/v1/namespaces/kube-system/secrets';
const BINDINGS = '/apis/kubeboot.io/v1alpha1/tokenbindings';
const REVIEWS = '/apis/authorization.k8s.io/v1/subjectaccessreviews';
const NOW = new Date('2030-01-01T00:00:00Z');
const b64 = (s: string) => Buffer.from(s).toString('base64');
const secretCreated = (body: Call['body']) => ({
  kind: 'Secret',
  metadata: { ...body.metadata, uid: 'secret-uid' },
  data: Object.fromEntries(Object.entries(body.stringData as Record<string, string>).map(([k, v]) => [k, b64(v)])),
});

/** An authorizer that allows a review when `allow(groups, subresource)` says so. */
function authorizer(on: ReturnType<typeof mockAdmin>['on'], allow: (groups: string[], subresource?: string) => boolean, times = 3) {
  for (let i = 0; i < times; i++)
    on('POST', REVIEWS, 201, (b: { spec: { groups: string[]; resourceAttributes: { subresource?: string } } }) => ({
      kind: 'SubjectAccessReview',
      status: { allowed: allow(b.spec.groups, b.spec.resourceAttributes.subresource) },
    }));
}
const kubeadmRbac = (groups: string[], subresource?: string) => groups.includes(KUBEADM_TOKEN_GROUP) && subresource !== 'selfnodeclient';

t.test('on a kubeadm cluster the token is made in kubeadm’s group, after asking as the token itself', async (t) => {
  const { admin, calls, on, agent } = mockAdmin(t);
  authorizer(on, kubeadmRbac, 3);
  on('POST', SECRETS, 201, secretCreated);
  const created = await createTokenForCluster(admin, tokenSpecFrom({}), NOW);
  t.same(
    calls.map((c) => `${c.method} ${c.path}`),
    [`POST ${REVIEWS}`, `POST ${REVIEWS}`, `POST ${REVIEWS}`, `POST ${SECRETS}`],
    "may it create its CSR; in kubeadm's group; does kube-controller-manager auto-approve it; then the Secret",
  );
  const [asked, withKubeadm] = calls.map((c) => c.body.spec);
  t.match(asked, {
    user: `system:bootstrap:${created.token.id}`,
    groups: ['system:bootstrappers', 'system:authenticated'],
    resourceAttributes: { group: 'certificates.k8s.io', resource: 'certificatesigningrequests', verb: 'create' },
  });
  t.same(withKubeadm.groups, ['system:bootstrappers', KUBEADM_TOKEN_GROUP, 'system:authenticated']);
  t.equal(calls[3]!.body.stringData['auth-extra-groups'], KUBEADM_TOKEN_GROUP);
  t.same(created.summary.groups, [KUBEADM_TOKEN_GROUP]);
  t.match(created.notes, [/^kubeadm's RBAC and not kubeboot's is applied here/]);
  t.equal(created.notes.length, 1, "unbound, but kubeadm's auto-approval serves it: no warning about the approver");
  agent.assertNoPendingInterceptors();
});

t.test('where kubeboot’s RBAC serves every token, the token as asked; unbound, it is told the approver refuses it', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  // kubeboot's shipped RBAC: every token may create its CSR, none may have kube-controller-manager approve it.
  authorizer(on, (_groups, subresource) => subresource === undefined, 2);
  on('POST', SECRETS, 201, secretCreated);
  const created = await createTokenForCluster(admin, tokenSpecFrom({ groups: ['system:bootstrappers:pool-a'] }), NOW);
  t.same(
    calls.filter((c) => c.path === REVIEWS).map((c) => c.body.spec.resourceAttributes.subresource),
    [undefined, 'nodeclient'],
  );
  t.equal(calls[2]!.body.stringData['auth-extra-groups'], 'system:bootstrappers:pool-a');
  t.match(created.notes, [/^warning: this token is bound to no node name: kubeboot approver refuses/]);
});

t.test('where nothing lets a token create its CSR, nothing is created', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  authorizer(on, () => false, 2);
  const err = await createTokenForCluster(admin, tokenSpecFrom({}), NOW).catch((e: unknown) => e);
  t.type(err, UnservedClusterError);
  t.match((err as Error).message, `at ${MOCK_SERVER} `);
  t.notOk(
    calls.some((c) => c.path !== REVIEWS),
    'no Secret, no binding',
  );
});

t.test('an admin without create on subjectaccessreviews gets a warning and the token as asked', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  for (let i = 0; i < 2; i++)
    on('POST', REVIEWS, 403, () => ({
      kind: 'Status',
      reason: 'Forbidden',
      code: 403,
      message: 'subjectaccessreviews.authorization.k8s.io is forbidden: User "ops" cannot create resource "subjectaccessreviews"',
    }));
  on('POST', SECRETS, 201, secretCreated);
  const created = await createTokenForCluster(admin, tokenSpecFrom({}), NOW);
  t.equal(calls[2]!.body.stringData['auth-extra-groups'], undefined);
  t.match(created.notes, [/^warning: could not ask whether a bootstrap token may create its CSR here \(.*User "ops" cannot create/]);
  t.equal(created.notes.length, 1, 'not known who approves it: nothing claimed about the approver');
});

t.test('a bound token on a kubeadm cluster still auto-approving its group is said to be bound in name only', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  authorizer(on, kubeadmRbac, 3);
  let binding: { metadata: object; spec: object } | null = null;
  on('POST', BINDINGS, 201, (b) => (binding = { ...b, metadata: { ...b.metadata, resourceVersion: '1' } }));
  on('POST', SECRETS, 201, secretCreated);
  on('GET', BINDINGS, 200, () => binding);
  on('PATCH', BINDINGS, 200, (b) => ({ ...binding, ...b }));
  const created = await createTokenForCluster(admin, tokenSpecFrom({}), NOW, { prefix: 'pool-', maxNodes: 2 });
  const reviews = calls.filter((c) => c.path === REVIEWS).map((c) => c.body.spec.resourceAttributes.subresource);
  t.same(reviews, [undefined, undefined, 'nodeclient'], 'the third asks for kube-controller-manager’s auto-approval');
  t.match(created.notes, [
    /^kubeadm's RBAC/,
    /^warning: kube-controller-manager approves kubelet client CSRs from this token for any node name/,
  ]);
});
