// `kubeboot token list` against undici's MockAgent: what each token may join,
// escaped, and the bindings whose token is gone.
import t from 'tap';
import { renderTokenTable } from '../../../agent/cli/token.js';
import { listTokens } from '../../../agent/admin/cluster-requests.js';
import { HOSTILE, RAW } from '../../support/hostile.js';
import { mockAdmin } from '../../support/mock-admin.js';

const SECRETS = '/api/v1/namespaces/kube-system/secrets';
const BINDINGS = '/apis/kubeboot.io/v1alpha1/tokenbindings';
const b64 = (s: string) => Buffer.from(s).toString('base64');

t.test('token list shows what each token may join, escaped; a binding without its token is named', async (t) => {
  const { admin, on } = mockAdmin(t);
  const token = (id: string, description = '') => ({
    metadata: { name: `bootstrap-token-${id}`, uid: `uid-of-${id}` },
    data: { 'token-id': b64(id), 'usage-bootstrap-authentication': b64('true'), description: b64(description) },
  });
  on('GET', SECRETS, 200, () => ({
    kind: 'SecretList',
    items: [token('aaaaaa', 'one node'), token('bbbbbb'), token('cccccc'), token('dddddd'), token('kubadm')],
  }));
  const binding = (id: string, spec: object, issued: Record<string, string> = {}) => ({
    kind: 'TokenBinding',
    metadata: { name: id },
    spec: { tokenID: id, tokenSecretUID: `uid-of-${id}`, ...spec },
    status: { issued: Object.entries(issued).map(([node, csrUID]) => ({ node, csrUID })) },
  });
  on('GET', BINDINGS, 200, () => ({
    kind: 'TokenBindingList',
    metadata: {},
    items: [
      binding('aaaaaa', { names: ['worker-7'], maxNodes: 1 }, { 'worker-7': 'uid-1' }),
      binding('bbbbbb', { prefix: 'pool-a-', maxNodes: 20 }, { 'pool-a-1': 'u1', 'pool-a-2': 'u2' }),
      binding('cccccc', { names: [`evil${HOSTILE}`], maxNodes: 1 }),
      binding('dddddd', { prefix: 'p-', maxNodes: 0 }),
      binding('zzzzzz', { names: ['gone'], maxNodes: 1 }),
    ],
  }));
  const listed = await listTokens(admin);
  const out = renderTokenTable(listed);
  t.equal(out.search(RAW), -1, 'no raw control character');
  const rows = out.slice(0, -1).split('\n');
  t.equal(rows.length, 1 + 5 + 1, 'a header, five tokens, the line for the orphaned binding: no forged line');
  t.match(rows[0], /^ID +EXPIRES +USAGES +GROUPS +JOINS +SPENT +DESCRIPTION$/);
  t.match(rows[1], /^aaaaaa +<never> +authentication +<none> +worker-7 +1\/1 +one node$/);
  t.match(rows[2], /^bbbbbb .* pool-a-\* +2\/20$/);
  t.match(rows[3], /evil\\u001b\[2J\\u001b\[H/, 'a hostile name is shown escaped');
  t.match(rows[4], /<unusable: spec.maxNodes 0 is not a whole number ≥ 1>/);
  t.match(rows[5], /^kubadm .* <unbound>$/, "a token kubeboot did not make (kubeadm's) has no binding");
  t.equal(rows[6], 'bindings whose token is gone (kubeboot token delete ID removes one): zzzzzz');
  const entry = listed.tokens.find((e) => e.id === 'aaaaaa');
  t.match(entry?.binding, { kind: 'names', names: ['worker-7'] });
  t.same(entry?.binding && 'issued' in entry.binding ? [...entry.binding.issued] : null, [['worker-7', 'uid-1']]);
  t.equal(listed.tokens.find((e) => e.id === 'kubadm')?.binding, null);
});
