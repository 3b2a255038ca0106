import t from 'tap';
import { ExitCode } from '../../../agent/errors.js';
import {
  bindingSpecFrom,
  bindingView,
  generateToken,
  parseTokenId,
  summarize,
  tokenSecret,
  tokenSpecFrom,
} from '../../../agent/admin/token.js';

t.test('a token is [a-z0-9]{6}.[a-z0-9]{16} drawn uniformly from the 36-letter alphabet', async (t) => {
  const draws: number[] = [];
  const token = generateToken((max) => (draws.push(max), draws.length % max));
  t.match(token.token, /^[a-z0-9]{6}\.[a-z0-9]{16}$/);
  t.equal(token.token, `${token.id}.${token.secret}`);
  t.same(new Set(draws), new Set([36]), 'every character is one unbiased draw below 36');
  t.equal(draws.length, 22);
  t.equal(token.id, 'bcdefg', 'draw i picks letter i of a-z0-9');
  const seen = new Set(Array.from({ length: 200 }, () => generateToken().token));
  t.equal(seen.size, 200, 'real tokens do not repeat');
});

t.test('the Secret has the shape kube-apiserver reads', async (t) => {
  const now = new Date('2026-01-02T03:04:05.678Z');
  const secret = tokenSecret(
    { id: 'abcdef', secret: '0123456789abcdef', token: 'abcdef.0123456789abcdef' },
    {
      ttlSeconds: 3600,
      usages: ['authentication', 'signing'],
      groups: ['system:bootstrappers:a', 'system:bootstrappers:b'],
      description: 'pool',
    },
    now,
  );
  t.same(secret, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'bootstrap-token-abcdef', namespace: 'kube-system' },
    type: 'bootstrap.kubernetes.io/token',
    stringData: {
      'token-id': 'abcdef',
      'token-secret': '0123456789abcdef',
      expiration: '2026-01-02T04:04:05Z',
      'usage-bootstrap-authentication': 'true',
      'usage-bootstrap-signing': 'true',
      'auth-extra-groups': 'system:bootstrappers:a,system:bootstrappers:b',
      description: 'pool',
    },
  });
  const forever = tokenSecret(
    { id: 'abcdef', secret: '0123456789abcdef', token: '' },
    { ttlSeconds: null, usages: ['signing'], groups: [], description: null },
    now,
  ) as { stringData: Record<string, string> };
  t.same(Object.keys(forever.stringData).sort(), ['token-id', 'token-secret', 'usage-bootstrap-signing']);
});

t.test('a listed token never carries its secret', async (t) => {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const summary = summarize({
    data: {
      'token-id': b64('abcdef'),
      'token-secret': b64('0123456789abcdef'),
      'usage-bootstrap-signing': b64('true'),
      'auth-extra-groups': b64('system:bootstrappers:x'),
    },
  });
  t.same(summary, { id: 'abcdef', expires: null, usages: ['signing'], groups: ['system:bootstrappers:x'], description: null });
  t.notMatch(JSON.stringify(summary), /0123456789abcdef/);
  t.equal(summarize({ data: {} }), null, 'not a token without token-id');
});

t.test('flags become a token spec; bad ones name the flag', async (t) => {
  t.same(
    tokenSpecFrom({}),
    { ttlSeconds: 3600, usages: ['authentication', 'signing'], groups: [], description: null },
    'default: 1h, both usages',
  );
  t.equal(tokenSpecFrom({ ttl: '24h' }).ttlSeconds, 86400);
  t.equal(tokenSpecFrom({ expiry: false }).ttlSeconds, null, '--no-expiry');
  t.equal(tokenSpecFrom({ expiry: false, ttl: '0' }).ttlSeconds, null, '--ttl 0 --no-expiry');
  const bad: [Parameters<typeof tokenSpecFrom>[0], string][] = [
    [{ ttl: '0' }, 'command line: --ttl: 0 would make a token that never expires; pass --no-expiry to mean that'],
    [{ ttl: '1h', expiry: false }, 'command line: --ttl: cannot be combined with --no-expiry'],
    [{ ttl: 'soon' }, 'command line: --ttl: expected seconds or a duration like 90s, 15m, 2h30m, got "soon"'],
    [{ usages: ['auth'] }, 'command line: --usages: expected authentication or signing, got "auth"'],
    [{ usages: [] }, 'command line: --usages: must name at least one of authentication, signing'],
    [
      { groups: ['system:masters'] },
      'command line: --groups: "system:masters" must start with system:bootstrappers: followed by [a-z0-9:-] (the API server ignores other groups)',
    ],
    [
      { groups: ['system:bootstrappers:'] },
      'command line: --groups: "system:bootstrappers:" must start with system:bootstrappers: followed by [a-z0-9:-] (the API server ignores other groups)',
    ],
  ];
  for (const [flags, message] of bad) t.throws(() => tokenSpecFrom(flags), { name: 'InputError', message, code: ExitCode.badInput });
});

t.test('token delete takes an id or a whole token, and uses only the id', async (t) => {
  t.equal(parseTokenId('abcdef'), 'abcdef');
  t.equal(parseTokenId('abcdef.0123456789abcdef'), 'abcdef');
  t.throws(() => parseTokenId('ABCDEF'), { message: 'command line: token id: expected 6 characters [a-z0-9], got "ABCDEF"' });
});

t.test('--node and --pool bind a token; names the approver never issues are refused here too', async (t) => {
  t.equal(bindingSpecFrom({}), null, 'neither: an unbound token, as before');
  t.same(bindingSpecFrom({ node: 'worker-7' }), { names: ['worker-7'] });
  t.same(bindingSpecFrom({ pool: 'pool-a-', 'max-nodes': '20' }), { prefix: 'pool-a-', maxNodes: 20 });
  const bad: [Parameters<typeof bindingSpecFrom>[0], string][] = [
    [{ node: 'a', pool: 'b' }, 'command line: --pool: cannot be combined with --node'],
    [{ node: 'a', 'max-nodes': '2' }, 'command line: --max-nodes: only with --pool (a --node token joins one node)'],
    [{ pool: 'pool-a-' }, 'command line: --max-nodes: required with --pool: how many nodes the token may join'],
    [{ pool: 'pool-a-', 'max-nodes': '0' }, 'command line: --max-nodes: expected a whole number from 1, got "0"'],
    [{ pool: 'pool-a-', 'max-nodes': '1e3' }, 'command line: --max-nodes: expected a whole number from 1, got "1e3"'],
    [
      { node: 'Worker_1' },
      `command line: --node: "Worker_1" is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)`,
    ],
    [{ node: 'kubernetes' }, "command line: --node: kubernetes is the API server's Service name"],
    [{ node: 'kubernetes.default.svc' }, "command line: --node: kubernetes.default.svc is the API server's Service name"],
    [{ node: 'db.prod.svc.cluster.local' }, 'command line: --node: db.prod.svc.cluster.local is a cluster Service name (*.svc)'],
    [{ node: 'localhost' }, 'command line: --node: localhost names the local host'],
    [
      { pool: '-x', 'max-nodes': '2' },
      `command line: --pool: "-x" cannot begin a Node name (lowercase letters, digits, '-' and '.', starting with a letter or digit, at most 252 characters)`,
    ],
    [
      { pool: 'kubernetes.', 'max-nodes': '2' },
      "command line: --pool: names kubernetes.* are never issued: kubernetes.0 is the API server's Service name",
    ],
  ];
  for (const [flags, message] of bad) t.throws(() => bindingSpecFrom(flags), { name: 'InputError', message, code: ExitCode.badInput });
  t.throws(() => bindingSpecFrom({ node: 'api.example' }, ['API.example']), {
    message: "command line: --node: api.example is one of the API server's names",
  });
});

t.test('a binding is shown as what it joins and how much of it is spent', async (t) => {
  t.same(bindingView(null), { joins: '<unbound>', spent: '' });
  t.same(bindingView({ problem: 'both names and prefix are set' }), { joins: '<unusable: both names and prefix are set>', spent: '' });
  t.same(bindingView({ kind: 'names', tokenId: 'abcdef', names: ['n1'], maxNodes: 1, issued: new Map([['n1', 'u']]) }), {
    joins: 'n1',
    spent: '1/1',
  });
  t.same(bindingView({ kind: 'prefix', tokenId: 'abcdef', prefix: 'p-', maxNodes: 5, issued: new Map() }), { joins: 'p-*', spent: '0/5' });
});
