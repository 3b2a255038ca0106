// What `kubeboot token create --node/--pool` and `token delete` ask of the
// cluster (admin/cluster-requests.ts) against undici's MockAgent: the binding
// kubeboot approver reads is written before the token, given the token's
// Secret uid once it exists, and removed after it, so no token is ever
// unbound; records not installed leave nothing behind.
import t from 'tap';
import { createToken, deleteToken } from '../../../agent/admin/cluster-requests.js';
import { bindingSpecFrom, tokenSpecFrom } from '../../../agent/admin/token.js';
import { parseBinding } from '../../../agent/records/bindings.js';
import { MOCK_SERVER as SERVER, mockAdmin, notFound, type Call } from '../../support/mock-admin.js';
const SECRETS = '/api/v1/namespaces/kube-system/secrets';
const BINDINGS = '/apis/kubeboot.io/v1alpha1/tokenbindings';
const NOW = new Date('2030-01-01T00:00:00Z');
const spec = tokenSpecFrom({});
const b64 = (s: string) => Buffer.from(s).toString('base64');

/** The binding as created and read back, then given its Secret's uid. */
function bindingAnswers(on: ReturnType<typeof mockAdmin>['on']) {
  let made: Call['body'] = null;
  on('POST', BINDINGS, 201, (b) => (made = { ...b, metadata: { ...b.metadata, resourceVersion: '3' } }));
  on('GET', BINDINGS, 200, () => made);
  on('PATCH', BINDINGS, 200, (b) => ({ ...made, spec: { ...made.spec, ...b.spec } }));
}

/** The API server's answer to a Secret create: stringData as base64 data. */
const secretCreated = (body: Call['body']) => ({
  kind: 'Secret',
  metadata: { ...body.metadata, uid: 'secret-uid' },
  data: Object.fromEntries(Object.entries(body.stringData as Record<string, string>).map(([k, v]) => [k, b64(v)])),
});

t.test('token create --node writes the binding first, then the token, then its Secret uid; the approver parses the binding', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  bindingAnswers(on);
  on('POST', SECRETS, 201, secretCreated);
  on('GET', '/apis/kubeboot.io/v1alpha1/nodereplacements/worker-7', 404, notFound);
  on('GET', '/api/v1/nodes/worker-7', 404, notFound);
  on('GET', '/apis/kubeboot.io/v1alpha1/nodeclaims/worker-7', 404, notFound);
  const created = await createToken(admin, spec, NOW, bindingSpecFrom({ node: 'worker-7' }));
  t.same(
    calls.map((c) => `${c.method} ${c.path}`).slice(0, 4),
    [`POST ${BINDINGS}`, `POST ${SECRETS}`, `GET ${BINDINGS}/${created.token.id}`, `PATCH ${BINDINGS}/${created.token.id}`],
    'the binding exists before the token does, and names its Secret after',
  );
  const made = calls[0]!.body;
  t.equal(made.metadata?.name, created.token.id);
  t.match(parseBinding(created.token.id, made), { problem: /tokenSecretUID is not set/ }, 'unusable until it names its Secret');
  t.same(calls[3]!.body, { metadata: { resourceVersion: '3' }, spec: { tokenSecretUID: 'secret-uid' } });
  const bound = parseBinding(created.token.id, { ...made, spec: { ...made.spec, tokenSecretUID: 'secret-uid' } });
  t.match(bound, { kind: 'names', names: ['worker-7'], maxNodes: 1 });
  t.notMatch(JSON.stringify(made), created.token.secret, 'the binding never holds the secret');
  t.same(created.notes, [], 'no Node of that name, never spent: nothing to say');
});

t.test('token create --pool binds a prefix and a count', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  bindingAnswers(on);
  on('POST', SECRETS, 201, secretCreated);
  const created = await createToken(admin, spec, NOW, bindingSpecFrom({ pool: 'pool-a-', 'max-nodes': '20' }));
  t.match(parseBinding(created.token.id, { ...calls[0]!.body, spec: { ...calls[0]!.body.spec, tokenSecretUID: 'u' } }), {
    kind: 'prefix',
    prefix: 'pool-a-',
    maxNodes: 20,
  });
  t.equal(calls[1]!.method, 'POST');
  t.equal(calls[1]!.path, SECRETS);
});

t.test("without kubeboot's records installed no token is made, and the error is one line naming the manifests", async (t) => {
  const { admin, calls, on, agent } = mockAdmin(t);
  on('POST', BINDINGS, 404, notFound);
  const err = (await createToken(admin, spec, NOW, { names: ['worker-7'] }).catch((e: unknown) => e)) as Error;
  t.equal(
    err.message,
    'the kubeboot.io records are not installed in this cluster (the token would have no binding, so no token was made); install them with: kubectl apply -f /usr/share/kubeboot/manifests/ -f /usr/share/kubeboot/manifests/approver/',
  );
  t.notMatch(err.message, /\n/);
  t.notOk(
    calls.some((c) => c.path === SECRETS),
    'no Secret was ever created',
  );
  agent.assertNoPendingInterceptors();
});

t.test('a token whose Secret cannot be made leaves no binding; a lost answer deletes the Secret too', async (t) => {
  const refused = mockAdmin(t);
  refused.on('POST', BINDINGS, 201, (b) => b);
  refused.on('POST', SECRETS, 500, () => ({ kind: 'Status', reason: 'InternalError', message: 'etcd down' }));
  refused.on('DELETE', BINDINGS, 200);
  await t.rejects(createToken(refused.admin, spec, NOW, { prefix: 'p-', maxNodes: 2 }), /500/);
  t.same(
    refused.calls.map((c) => c.method),
    ['POST', 'POST', 'DELETE'],
  );
  t.match(refused.calls[2]!.path, BINDINGS, 'the binding is removed: the server said no Secret was made');

  const lost = mockAdmin(t);
  lost.on('POST', BINDINGS, 201, (b) => b);
  lost.agent.get(SERVER).intercept({ method: 'POST', path: SECRETS }).replyWithError(new Error('socket hang up'));
  lost.on('DELETE', SECRETS, 404, notFound);
  lost.on('DELETE', BINDINGS, 200);
  await t.rejects(createToken(lost.admin, spec, NOW, { names: ['n1'] }));
  t.same(
    lost.calls.map((c) => `${c.method} ${c.path.includes('tokenbindings') ? 'tokenbindings' : c.path.split('/')[5]}`),
    ['POST tokenbindings', 'DELETE secrets', 'DELETE tokenbindings'],
    'the Secret (which may exist) goes before its binding',
  );
});

t.test('token create --node for a live Node says how to mark it; an unbound mark is given to the new token', async (t) => {
  const live = mockAdmin(t);
  bindingAnswers(live.on);
  live.on('POST', SECRETS, 201, secretCreated);
  live.on('GET', '/apis/kubeboot.io/v1alpha1/nodereplacements/worker-1', 404, notFound);
  live.on('GET', '/api/v1/nodes/worker-1', 200, () => ({ kind: 'Node', metadata: { name: 'worker-1' } }));
  const made = await createToken(live.admin, spec, NOW, { names: ['worker-1'] });
  t.match(made.notes, [new RegExp(`Node worker-1 exists: .*no-takeover.*kubeboot node replace worker-1 --for-token ${made.token.id}$`)]);

  const marked = mockAdmin(t);
  bindingAnswers(marked.on);
  marked.on('POST', SECRETS, 201, secretCreated);
  marked.on('GET', '/apis/kubeboot.io/v1alpha1/nodereplacements/worker-1', 200, () => ({
    kind: 'NodeReplacement',
    metadata: { name: 'worker-1', resourceVersion: '9' },
    spec: { tokenID: '' },
  }));
  marked.on('PATCH', '/apis/kubeboot.io/v1alpha1/nodereplacements/worker-1', 200, (b) => b);
  const taken = await createToken(marked.admin, spec, NOW, { names: ['worker-1'] });
  t.same(marked.calls.at(-1)!.body, { metadata: { resourceVersion: '9' }, spec: { tokenID: taken.token.id } }, 'bound on the version read');
  t.match(taken.notes, [/the replacement mark of node worker-1 is now for this token/]);
});

t.test("the admin kubeconfig's host is one of the API server's names: never a node's", async (t) => {
  const { admin } = mockAdmin(t);
  await t.rejects(createToken(admin, spec, NOW, { names: ['api.example'] }), {
    name: 'InputError',
    message: `command line: --node: api.example is one of the API server's names`,
  });
});

t.test('token delete removes the token, then its binding; either alone; neither is bad input', async (t) => {
  const both = mockAdmin(t);
  both.on('DELETE', `${SECRETS}/bootstrap-token-abcdef`, 200);
  both.on('DELETE', `${BINDINGS}/abcdef`, 200);
  t.equal(await deleteToken(both.admin, 'abcdef'), 'bootstrap token abcdef and its binding tokenbindings.kubeboot.io/abcdef deleted');
  t.same(
    both.calls.map((c) => (c.path.includes('tokenbindings') ? 'tokenbindings' : c.path.split('/')[5])),
    ['secrets', 'tokenbindings'],
    'the token goes first: it is never left unbound',
  );
  const orphan = mockAdmin(t);
  orphan.on('DELETE', `${SECRETS}/bootstrap-token-abcdef`, 404, notFound);
  orphan.on('DELETE', `${BINDINGS}/abcdef`, 200);
  t.equal(
    await deleteToken(orphan.admin, 'abcdef'),
    'binding tokenbindings.kubeboot.io/abcdef deleted (bootstrap token abcdef was already gone)',
  );
  const none = mockAdmin(t);
  none.on('DELETE', `${SECRETS}/bootstrap-token-abcdef`, 404, notFound);
  none.on('DELETE', `${BINDINGS}/abcdef`, 404, notFound);
  await t.rejects(deleteToken(none.admin, 'abcdef'), { message: 'no bootstrap token abcdef in kube-system', code: 2 });
});
