// What `kubeboot token create --node/--pool` and `token delete` ask of the
// cluster (join/cluster-requests.ts) against undici's MockAgent: the binding
// kubeboot approver reads is written before the token and removed after it,
// so no token is ever unbound; a missing namespace leaves nothing behind.
import t from 'tap';
import { createToken, deleteToken } from '../../../agent/join/cluster-requests.js';
import { bindingSpecFrom, tokenSpecFrom } from '../../../agent/join/token.js';
import { parseBinding } from '../../../agent/kube/join-bindings.js';
import { MOCK_SERVER as SERVER, mockAdmin, notFound, type Call } from '../../support/mock-admin.js';
const SECRETS = '/api/v1/namespaces/kube-system/secrets';
const CONFIGMAPS = '/api/v1/namespaces/kubeboot/configmaps';
const NOW = new Date('2030-01-01T00:00:00Z');
const spec = tokenSpecFrom({});
const b64 = (s: string) => Buffer.from(s).toString('base64');

/** The API server's answer to a Secret create: stringData as base64 data. */
const secretCreated = (body: Call['body']) => ({
  kind: 'Secret',
  metadata: body.metadata,
  data: Object.fromEntries(Object.entries(body.stringData as Record<string, string>).map(([k, v]) => [k, b64(v)])),
});

t.test('token create --node writes the binding first, then the token; the approver parses the binding', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  on('GET', '/api/v1/nodes/worker-7', 404, notFound);
  on('POST', CONFIGMAPS, 201, (b) => b);
  on('POST', SECRETS, 201, secretCreated);
  const created = await createToken(admin, spec, NOW, bindingSpecFrom({ node: 'worker-7' }));
  t.same(
    calls.map((c) => `${c.method} ${c.path}`),
    ['GET /api/v1/nodes/worker-7', `POST ${CONFIGMAPS}`, `POST ${SECRETS}`],
    'the binding exists before the token does',
  );
  const cm = calls[1]!.body;
  t.equal(cm.metadata?.name, `token-${created.token.id}`);
  t.match(parseBinding(created.token.id, cm), { kind: 'names', names: ['worker-7'], maxNodes: 1, issued: {} });
  t.notMatch(JSON.stringify(cm), created.token.secret, 'the binding never holds the secret');
  t.same(created.notes, [], 'no Node of that name: nothing to say');
});

t.test('token create --pool binds a prefix and a count', async (t) => {
  const { admin, calls, on } = mockAdmin(t);
  on('POST', CONFIGMAPS, 201, (b) => b);
  on('POST', SECRETS, 201, secretCreated);
  const created = await createToken(admin, spec, NOW, bindingSpecFrom({ pool: 'pool-a-', 'max-nodes': '20' }));
  t.match(parseBinding(created.token.id, calls[0]!.body), { kind: 'prefix', prefix: 'pool-a-', maxNodes: 20 });
  t.equal(calls[1]!.method, 'POST');
  t.equal(calls[1]!.path, SECRETS);
});

t.test('without the namespace kubeboot no token is made, and the error is one line naming the manifests', async (t) => {
  const { admin, calls, on, agent } = mockAdmin(t);
  on('GET', '/api/v1/nodes/worker-7', 404, notFound);
  on('POST', CONFIGMAPS, 404, notFound);
  const err = (await createToken(admin, spec, NOW, { names: ['worker-7'] }).catch((e: unknown) => e)) as Error;
  t.equal(
    err.message,
    'namespace kubeboot does not exist (the token would have no binding, so no token was made); create it with: kubectl apply -f /usr/share/kubeboot/manifests/ -f /usr/share/kubeboot/manifests/approver/',
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
  refused.on('POST', CONFIGMAPS, 201, (b) => b);
  refused.on('POST', SECRETS, 500, () => ({ kind: 'Status', reason: 'InternalError', message: 'etcd down' }));
  refused.on('DELETE', CONFIGMAPS, 200);
  await t.rejects(createToken(refused.admin, spec, NOW, { prefix: 'p-', maxNodes: 2 }), /500/);
  t.same(
    refused.calls.map((c) => c.method),
    ['POST', 'POST', 'DELETE'],
  );
  t.match(refused.calls[2]!.path, CONFIGMAPS, 'the binding is removed: the server said no Secret was made');

  const lost = mockAdmin(t);
  lost.on('POST', CONFIGMAPS, 201, (b) => b);
  lost.agent.get(SERVER).intercept({ method: 'POST', path: SECRETS }).replyWithError(new Error('socket hang up'));
  lost.on('DELETE', SECRETS, 404, notFound);
  lost.on('DELETE', CONFIGMAPS, 200);
  await t.rejects(createToken(lost.admin, spec, NOW, { names: ['n1'] }));
  t.same(
    lost.calls.map((c) => `${c.method} ${c.path.split('/')[5]}`),
    ['POST configmaps', 'DELETE secrets', 'DELETE configmaps'],
    'the Secret (which may exist) goes before its binding',
  );
});

t.test('token create --node for a live Node says how to mark it as being replaced', async (t) => {
  const { admin, on } = mockAdmin(t);
  on('GET', '/api/v1/nodes/worker-1', 200, () => ({ kind: 'Node', metadata: { name: 'worker-1' } }));
  on('GET', `${CONFIGMAPS}/replacements`, 404, notFound);
  on('POST', CONFIGMAPS, 201, (b) => b);
  on('POST', SECRETS, 201, secretCreated);
  const { notes } = await createToken(admin, spec, NOW, { names: ['worker-1'] });
  t.match(notes, [/Node worker-1 exists: .*no-takeover.*kubeboot node replace worker-1$/]);
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
  both.on('DELETE', `${CONFIGMAPS}/token-abcdef`, 200);
  t.equal(await deleteToken(both.admin, 'abcdef'), 'bootstrap token abcdef and its binding kubeboot/token-abcdef deleted');
  t.same(
    both.calls.map((c) => c.path.split('/')[5]),
    ['secrets', 'configmaps'],
    'the token goes first: it is never left unbound',
  );
  const orphan = mockAdmin(t);
  orphan.on('DELETE', `${SECRETS}/bootstrap-token-abcdef`, 404, notFound);
  orphan.on('DELETE', `${CONFIGMAPS}/token-abcdef`, 200);
  t.equal(await deleteToken(orphan.admin, 'abcdef'), 'binding kubeboot/token-abcdef deleted (bootstrap token abcdef was already gone)');
  const none = mockAdmin(t);
  none.on('DELETE', `${SECRETS}/bootstrap-token-abcdef`, 404, notFound);
  none.on('DELETE', `${CONFIGMAPS}/token-abcdef`, 404, notFound);
  await t.rejects(deleteToken(none.admin, 'abcdef'), { message: 'no bootstrap token abcdef in kube-system', code: 2 });
});
