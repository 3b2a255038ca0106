// Every approval rule as a table: a valid CSR passes, and each single defect
// is reported under exactly the rule that names it.
import t from 'tap';
import { evaluate, renderRuleTables, recognize, signersReading } from '../../../agent/approver/policy.js';
import { KUBE_PROXY_RULES } from '../../../agent/approver/rules/kube-proxy-client.js';
import { KUBELET_CLIENT_RULES } from '../../../agent/approver/rules/kubelet-client.js';
import { KUBELET_SERVING_RULES, allowedDnsNames } from '../../../agent/approver/rules/kubelet-serving.js';
import {
  nodeNameOf,
  type ApproverPolicy,
  type Rule,
  type CsrFacts,
  type RuleInput,
  type World,
} from '../../../agent/approver/rules/rule.js';
import { dnsSuffixNameProblem } from '../../../agent/approver/rules/shared.js';
import type { RequestFacts } from '../../../agent/approver/request.js';
import type { TokenBinding } from '../../../agent/records/bindings.js';

const policy: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 86_400,
  keyAlgorithms: ['ecdsa-p256', 'ecdsa-p384', 'rsa-2048', 'rsa-3072', 'rsa-4096'],
  serving: { enabled: true, dnsSuffixes: ['nodes.example'], ipCidrs: ['10.0.0.0/24', 'fd00::/64'] },
};

const request = (over: Partial<RequestFacts> = {}): RequestFacts => ({
  subject: { commonName: 'system:kube-proxy', organizations: [] },
  dnsNames: [],
  ipAddresses: [],
  emailAddresses: [],
  uris: [],
  otherNames: [],
  key: { kind: 'ecdsa', curve: 'prime256v1' },
  signatureValid: true,
  ...over,
});

const world = (over: Partial<World> = {}): World => ({
  node: {
    name: 'n1',
    addresses: [
      { type: 'InternalIP', address: '10.0.0.5' },
      { type: 'InternalIP', address: 'fd00::5' },
      { type: 'Hostname', address: 'n1-host' },
      { type: 'ExternalIP', address: '203.0.113.9' },
    ],
  },
  blocking: [],
  apiServer: { names: ['api.example', 'kube-apiserver.internal'], ips: ['10.96.0.1', '10.0.0.2'] },
  // What decide.ts reads for every node requester: its revocation (none).
  records: { binding: null, replacement: null, revocation: null },
  ...over,
});

function proxyInput(csr: Partial<CsrFacts> = {}, req: Partial<RequestFacts> = {}, w: Partial<World> = {}): RuleInput {
  return {
    csr: {
      name: 'x',
      uid: 'uid-x',
      created: '2026-12-01T10:00:00Z',
      signerName: 'kubernetes.io/kube-apiserver-client',
      username: 'system:node:n1',
      groups: ['system:nodes', 'system:authenticated'],
      usages: ['digital signature', 'client auth'],
      expirationSeconds: 86_400,
      request: request(req),
      requestProblem: null,
      ...csr,
    },
    nodeName: (csr.username ?? 'system:node:n1').startsWith('system:node:') ? (csr.username ?? 'system:node:n1').slice(12) : null,
    world: world(w),
    policy,
  };
}

function servingInput(csr: Partial<CsrFacts> = {}, req: Partial<RequestFacts> = {}, w: Partial<World> = {}): RuleInput {
  const base = proxyInput(
    { signerName: 'kubernetes.io/kubelet-serving', usages: ['digital signature', 'server auth'], ...csr },
    { subject: { commonName: 'system:node:n1', organizations: ['system:nodes'] }, dnsNames: ['n1'], ...req },
    w,
  );
  return base;
}

const rsa = (bits: number) => ({ key: { kind: 'rsa' as const, bits } });

t.test('kube-proxy client rules', async (t) => {
  t.same(evaluate(KUBE_PROXY_RULES, proxyInput()), { ok: true }, 'a valid kube-proxy CSR passes');
  t.same(
    evaluate(KUBE_PROXY_RULES, proxyInput({ usages: ['digital signature', 'key encipherment', 'client auth'] }, rsa(2048))),
    { ok: true },
    'RSA 2048 with key encipherment passes',
  );
  t.same(evaluate(KUBE_PROXY_RULES, proxyInput({ expirationSeconds: 86_400 })), { ok: true }, 'expiration at the cap passes');
  const cases: [string, RuleInput, string][] = [
    [
      'requester a bootstrap token',
      proxyInput({ username: 'system:bootstrap:abcdef', groups: ['system:bootstrappers'] }),
      'requester-is-node',
    ],
    ['requester named like a node but outside system:nodes', proxyInput({ groups: ['system:authenticated'] }), 'requester-is-node'],
    [
      'a service account',
      proxyInput({ username: 'system:serviceaccount:kube-system:x', groups: ['system:serviceaccounts'] }),
      'requester-is-node',
    ],
    ['unparsable request', { ...proxyInput(), csr: { ...proxyInput().csr, request: null } }, 'request-signature'],
    [
      'a request readable two ways',
      {
        ...proxyInput(),
        csr: { ...proxyInput().csr, request: null, requestProblem: 'spec.request has 2 CNs in its subject; exactly one is accepted' },
      },
      'request-signature',
    ],
    ['bad self-signature', proxyInput({}, { signatureValid: false }), 'request-signature'],
    ['no Node object', proxyInput({}, {}, { node: null }), 'node-exists'],
    ['wrong CN', proxyInput({}, { subject: { commonName: 'system:kube-proxyx', organizations: [] } }), 'subject'],
    ['an extra O', proxyInput({}, { subject: { commonName: 'system:kube-proxy', organizations: ['system:nodes'] } }), 'subject'],
    ['a DNS SAN', proxyInput({}, { dnsNames: ['n1'] }), 'no-sans'],
    ['an IP SAN', proxyInput({}, { ipAddresses: ['10.0.0.5'] }), 'no-sans'],
    ['an email SAN', proxyInput({}, { emailAddresses: ['a@b'] }), 'no-sans'],
    ['a URI SAN', proxyInput({}, { uris: ['spiffe://x'] }), 'no-sans'],
    ['server auth', proxyInput({ usages: ['digital signature', 'server auth'] }), 'usages'],
    ['client and server auth', proxyInput({ usages: ['digital signature', 'client auth', 'server auth'] }), 'usages'],
    ['key encipherment with ECDSA', proxyInput({ usages: ['digital signature', 'key encipherment', 'client auth'] }), 'usages'],
    ['no digital signature', proxyInput({ usages: ['client auth'] }), 'usages'],
    ['a repeated usage', proxyInput({ usages: ['digital signature', 'client auth', 'client auth'] }), 'usages'],
    ['RSA 1024', proxyInput({ usages: ['digital signature', 'key encipherment', 'client auth'] }, rsa(1024)), 'key-algorithm'],
    ['RSA 8192 (not listed)', proxyInput({}, rsa(8192)), 'key-algorithm'],
    ['Ed25519', proxyInput({}, { key: { kind: 'other', type: 'ed25519' } }), 'key-algorithm'],
    ['expiration above the cap', proxyInput({ expirationSeconds: 86_401 }), 'expiration'],
    ['an older unissued CSR of the node', proxyInput({}, {}, { blocking: ['older'] }), 'one-unissued-per-node'],
  ];
  for (const [what, input, rule] of cases) {
    const verdict = evaluate(KUBE_PROXY_RULES, input);
    t.equal(verdict.ok ? 'passed' : verdict.rule, rule, `${what}: fails ${rule}`);
  }
});

t.test('kube-proxy RSA below 2048 is refused even when listed', async (t) => {
  const verdict = evaluate(KUBE_PROXY_RULES, { ...proxyInput({}, rsa(1024)), policy: { ...policy, keyAlgorithms: ['rsa-1024'] } });
  t.same(verdict.ok ? null : verdict.rule, 'key-algorithm');
});

t.test('the configured kube-proxy subject is required exactly', async (t) => {
  const custom = { ...policy, kubeProxy: { commonName: 'kube-proxy', organizations: ['proxies'] } };
  t.same(
    evaluate(KUBE_PROXY_RULES, {
      ...proxyInput({}, { subject: { commonName: 'kube-proxy', organizations: ['proxies'] } }),
      policy: custom,
    }),
    { ok: true },
  );
  const verdict = evaluate(KUBE_PROXY_RULES, {
    ...proxyInput({}, { subject: { commonName: 'kube-proxy', organizations: [] } }),
    policy: custom,
  });
  t.equal(verdict.ok ? null : verdict.rule, 'subject', 'a missing configured O fails');
});

t.test('kubelet serving rules', async (t) => {
  t.same(
    evaluate(KUBELET_SERVING_RULES, servingInput({}, { dnsNames: ['n1', 'N1.nodes.example'], ipAddresses: ['10.0.0.5', 'fd00::5'] })),
    { ok: true },
    'node name, suffixed node name and node IPs pass',
  );
  const cases: [string, RuleInput, string][] = [
    ['requester not a node', servingInput({ username: 'alice', groups: [] }), 'requester-is-node'],
    ['no Node object', servingInput({}, {}, { node: null }), 'node-exists'],
    ["another node's CN", servingInput({}, { subject: { commonName: 'system:node:n2', organizations: ['system:nodes'] } }), 'subject'],
    ['O missing', servingInput({}, { subject: { commonName: 'system:node:n1', organizations: [] } }), 'subject'],
    ['no SAN', servingInput({}, { dnsNames: [] }), 'has-san'],
    ["another node's name", servingInput({}, { dnsNames: ['n2'] }), 'dns-sans'],
    ['a name under a foreign domain', servingInput({}, { dnsNames: ['n1.evil.example'] }), 'dns-sans'],
    // status.addresses is written by the node itself: a hostname there proves nothing.
    ['a hostname the Node reports about itself', servingInput({}, { dnsNames: ['n1', 'n1-host'] }), 'dns-sans'],
    [
      "the API server's service name, listed by the node as its InternalDNS",
      servingInput(
        {},
        { dnsNames: ['kubernetes.default.svc'] },
        { node: { name: 'n1', addresses: [{ type: 'InternalDNS', address: 'kubernetes.default.svc' }] } },
      ),
      'reserved-names',
    ],
    // Issue 27's attack: a token holder names her node after the API server and lists its address as her own.
    ...(
      [
        'kubernetes.default.svc',
        'kubernetes',
        'kube-dns.kube-system.svc.cluster.local',
        'localhost',
        'api.example',
        'API.example.',
      ] as const
    ).map((name): [string, RuleInput, string] => [
      `a node named ${name}`,
      servingInput(
        { username: `system:node:${name}` },
        { subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] }, dnsNames: [name], ipAddresses: ['127.0.0.1'] },
        {
          node: { name, addresses: [{ type: 'InternalIP', address: '127.0.0.1' }] },
        },
      ),
      'reserved-names',
    ]),
    [
      'a loopback IP the Node lists as its own, inside --serving-ip-cidr',
      servingInput({}, { ipAddresses: ['127.0.0.1'] }, { node: { name: 'n1', addresses: [{ type: 'InternalIP', address: '127.0.0.1' }] } }),
      'not-api-server-ips',
    ],
    [
      "the API server's address, which the Node lists as its own",
      servingInput({}, { ipAddresses: ['10.0.0.2'] }, { node: { name: 'n1', addresses: [{ type: 'InternalIP', address: '10.0.0.2' }] } }),
      'not-api-server-ips',
    ],
    ["the kubernetes Service's cluster IP", servingInput({}, { ipAddresses: ['10.96.0.1'] }), 'not-api-server-ips'],
    ['the link-local metadata address', servingInput({}, { ipAddresses: ['169.254.169.254'] }), 'not-api-server-ips'],
    ['a wildcard under the node suffix', servingInput({}, { dnsNames: ['*.nodes.example'] }), 'dns-sans'],
    ["an IP not among the Node's addresses", servingInput({}, { ipAddresses: ['10.0.0.6'] }), 'ip-sans'],
    ['a Node IP outside the configured CIDRs', servingInput({}, { ipAddresses: ['203.0.113.9'] }), 'ip-sans'],
    ['an email SAN', servingInput({}, { emailAddresses: ['root@n1'] }), 'no-email-uri-sans'],
    ['a URI SAN', servingInput({}, { uris: ['https://n1'] }), 'no-email-uri-sans'],
    ['client auth', servingInput({ usages: ['digital signature', 'client auth'] }), 'usages'],
    ['RSA 1024', servingInput({ usages: ['digital signature', 'key encipherment', 'server auth'] }, rsa(1024)), 'key-algorithm'],
    ['expiration above the cap', servingInput({ expirationSeconds: 90_000 }), 'expiration'],
  ];
  for (const [what, input, rule] of cases) {
    const verdict = evaluate(KUBELET_SERVING_RULES, input);
    t.equal(verdict.ok ? 'passed' : verdict.rule, rule, `${what}: fails ${rule}`);
  }
  t.same(
    evaluate(KUBELET_SERVING_RULES, servingInput({ usages: ['digital signature', 'key encipherment', 'server auth'] })),
    { ok: true },
    'key encipherment with an ECDSA key passes for serving, as ValidateKubeletServingCSR upstream accepts',
  );
  t.same(
    evaluate(KUBELET_SERVING_RULES, {
      ...servingInput({}, { ipAddresses: ['203.0.113.9'] }),
      policy: { ...policy, serving: { ...policy.serving, ipCidrs: [] } },
    }),
    { ok: true },
    'without CIDRs every Node IP is allowed',
  );
});

t.test('allowed DNS names: the node name, and it under every suffix', async (t) => {
  t.same([...allowedDnsNames('N1', ['.a.example', 'b.example'])].sort(), ['n1', 'n1.a.example', 'n1.b.example']);
});

t.test('recognition: only our signers, and only node requesters or our kube-proxy subject', async (t) => {
  const r = (signerName: string, username: string, groups: string[], cn: string, p = policy) =>
    recognize({ signerName, username, groups, request: request({ subject: { commonName: cn, organizations: [] } }) }, p);
  t.equal(
    r('kubernetes.io/kube-apiserver-client', 'system:node:n1', ['system:nodes'], 'anything'),
    'kube-proxy-client',
    'a node asking that signer',
  );
  t.equal(
    r('kubernetes.io/kube-apiserver-client', 'system:bootstrap:abcdef', ['system:bootstrappers'], 'system:kube-proxy'),
    'kube-proxy-client',
    'anyone asking for the kube-proxy subject',
  );
  t.equal(r('kubernetes.io/kube-apiserver-client', 'alice', [], 'alice'), null, "a user's own client CSR is not ours");
  t.equal(
    r('kubernetes.io/kube-apiserver-client-kubelet', 'system:node:n1', ['system:nodes'], 'system:node:n1'),
    null,
    "kube-controller-manager's signer is not ours",
  );
  t.equal(r('example.com/custom', 'system:node:n1', ['system:nodes'], 'system:kube-proxy'), null, 'a custom signer is not ours');
  t.equal(
    r('kubernetes.io/kubelet-serving', 'system:node:n1', ['system:nodes'], 'system:node:n1'),
    'kubelet-serving',
    'serving when opted in',
  );
  t.equal(
    r('kubernetes.io/kubelet-serving', 'system:node:n1', ['system:nodes'], 'system:node:n1', {
      ...policy,
      serving: { ...policy.serving, enabled: false },
    }),
    null,
    'serving left alone unless opted in',
  );
});

// ---- kubelet client (--approve-kubelet-client) ----

const clientPolicy: ApproverPolicy = {
  ...policy,
  kubeletClient: { enabled: true, unboundTokens: false, protectNodes: ['example.com/tier=db'] },
};
/** `issued` as a plain object for short cases: a Map, as parseBinding makes it. */
const bound = (over: { [k: string]: unknown; issued?: Record<string, string> } = {}): TokenBinding =>
  ({
    kind: 'names',
    tokenId: 'abcdef',
    names: ['w1'],
    maxNodes: 1,
    ...over,
    issued: new Map(Object.entries(over.issued ?? {})),
  }) as TokenBinding;

/** A bootstrap token's first kubelet client CSR for `w1`, no such Node yet, its binding allowing exactly that name. */
function clientInput(
  csr: Partial<CsrFacts> = {},
  req: Partial<RequestFacts> = {},
  w: Partial<World> = {},
  records: Partial<NonNullable<World['records']>> = {},
): RuleInput {
  const request_ = request({ subject: { commonName: 'system:node:w1', organizations: ['system:nodes'] }, ...req });
  return {
    csr: {
      name: 'node-csr-x',
      uid: 'uid-x',
      created: '2026-12-01T10:00:00Z',
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      username: 'system:bootstrap:abcdef',
      groups: ['system:bootstrappers', 'system:authenticated'],
      usages: ['digital signature', 'client auth'],
      expirationSeconds: undefined,
      request: request_,
      requestProblem: null,
      ...csr,
    },
    nodeName: nodeNameOf(request_.subject.commonName),
    world: world({ node: null, records: { binding: bound(), replacement: null, revocation: null, ...records }, ...w }),
    policy: clientPolicy,
  };
}

/** A node renewing its own kubelet client certificate. */
const renewal = (records: Partial<NonNullable<World['records']>> = {}, req: Partial<RequestFacts> = {}) =>
  clientInput({ username: 'system:node:w1', groups: ['system:nodes', 'system:authenticated'] }, req, {}, records);

const liveNode = (labels: Record<string, string> = {}) => ({ node: { name: 'w1', addresses: [], labels } });
const mark = (over: { at?: string; claimedBy?: string | null; tokenId?: string } = {}) => ({
  at: '2026-12-01T09:59:59.500Z',
  tokenId: 'abcdef',
  claimedBy: null,
  ...over,
});

t.test('kubelet client rules: first issue from a bootstrap token, renewal by the node itself', async (t) => {
  const passes: [string, RuleInput][] = [
    ['a node-bound token asking for its name', clientInput()],
    ['key encipherment with ECDSA, as the kubelet asks', clientInput({ usages: ['digital signature', 'key encipherment', 'client auth'] })],
    ['a pool token under its prefix', clientInput({}, {}, {}, { binding: bound({ kind: 'prefix', prefix: 'w', maxNodes: 2 } as never) })],
    ['the same CSR decided again after it spent the name', clientInput({}, {}, {}, { binding: bound({ issued: { w1: 'uid-x' } }) })],
    [
      'an unbound token under --unsafe-approve-unbound-tokens',
      {
        ...clientInput({}, {}, {}, { binding: null }),
        policy: { ...clientPolicy, kubeletClient: { ...clientPolicy.kubeletClient!, unboundTokens: true } },
      },
    ],
    ['an existing Node marked as being replaced before the CSR', clientInput({}, {}, liveNode(), { replacement: mark() })],
    ['the mark already claimed by this CSR', clientInput({}, {}, liveNode(), { replacement: mark({ claimedBy: 'uid-x' }) })],
    ['a renewal of its own name', renewal()],
    [
      'a control-plane node renewing its own (no binding, a live Node: first-issue rules do not run)',
      {
        ...renewal({ binding: null }),
        world: world({
          ...liveNode({ 'node-role.kubernetes.io/control-plane': '' }),
          records: { binding: null, replacement: null, revocation: null },
        }),
      },
    ],
  ];
  for (const [what, input] of passes) t.same(evaluate(KUBELET_CLIENT_RULES, input), { ok: true }, `${what} passes`);

  const cases: [string, RuleInput, string][] = [
    [
      'a service account',
      clientInput({ username: 'system:serviceaccount:kube-system:x', groups: ['system:serviceaccounts'] }),
      'requester',
    ],
    ['a bootstrap user outside system:bootstrappers', clientInput({ groups: ['system:authenticated'] }), 'requester'],
    ['a bootstrap user with a malformed token id', clientInput({ username: 'system:bootstrap:ABCDEF' }), 'requester'],
    ['a node outside system:nodes', clientInput({ username: 'system:node:w1', groups: ['system:authenticated'] }), 'requester'],
    ['bad self-signature', clientInput({}, { signatureValid: false }), 'request-signature'],
    ['CN not a node', clientInput({}, { subject: { commonName: 'system:kube-proxy', organizations: ['system:nodes'] } }), 'subject'],
    ['CN an invalid node name', clientInput({}, { subject: { commonName: 'system:node:.', organizations: ['system:nodes'] } }), 'subject'],
    ['O missing', clientInput({}, { subject: { commonName: 'system:node:w1', organizations: [] } }), 'subject'],
    [
      'O with system:masters',
      clientInput({}, { subject: { commonName: 'system:node:w1', organizations: ['system:nodes', 'system:masters'] } }),
      'subject',
    ],
    [
      "a renewal asking for another node's name",
      renewal({}, { subject: { commonName: 'system:node:w2', organizations: ['system:nodes'] } }),
      'subject',
    ],
    ['a DNS SAN', clientInput({}, { dnsNames: ['w1'] }), 'no-sans'],
    ['server auth', clientInput({ usages: ['digital signature', 'server auth'] }), 'usages'],
    ['RSA 1024', clientInput({ usages: ['digital signature', 'key encipherment', 'client auth'] }, rsa(1024)), 'key-algorithm'],
    ['expiration above the cap', clientInput({ expirationSeconds: 86_401 }), 'expiration'],
    ...['kubernetes.default.svc', 'localhost', 'kubernetes', 'api.example'].map((name): [string, RuleInput, string] => [
      `the name ${name}`,
      clientInput(
        {},
        { subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] } },
        {},
        {
          binding: bound({ names: [name] }),
        },
      ),
      'reserved-names',
    ]),
    ['an unbound token', clientInput({}, {}, {}, { binding: null }), 'token-bound'],
    [
      'a binding that cannot be trusted',
      clientInput({}, {}, {}, { binding: { problem: 'max-nodes "x" is not a whole number ≥ 1' } }),
      'token-bound',
    ],
    ['a name the token is not bound to', clientInput({}, {}, {}, { binding: bound({ names: ['w2'] }) }), 'token-bound'],
    [
      'a second name from a spent node-bound token',
      clientInput({}, {}, {}, { binding: bound({ names: ['w0', 'w1'], issued: { w0: 'uid-0' } }) }),
      'token-bound',
    ],
    [
      'its own name again, for another CSR (another key)',
      clientInput({}, {}, {}, { binding: bound({ issued: { w1: 'uid-other' } }) }),
      'token-bound',
    ],
    [
      'a pool token past max-nodes',
      clientInput(
        {},
        {},
        {},
        {
          binding: bound({ kind: 'prefix', prefix: 'w', maxNodes: 2, issued: { wa: 'u1', wb: 'u2' } } as never),
        },
      ),
      'token-bound',
    ],
    [
      'a pool token outside its prefix',
      clientInput({}, {}, {}, { binding: bound({ kind: 'prefix', prefix: 'pool-', maxNodes: 2 } as never) }),
      'token-bound',
    ],
    ['a live Node of that name', clientInput({}, {}, liveNode()), 'no-takeover'],
    ['a mark for another token', clientInput({}, {}, liveNode(), { replacement: mark({ tokenId: 'zzzzzz' }) }), 'no-takeover'],
    ['a mark bound to no token yet', clientInput({}, {}, liveNode(), { replacement: mark({ tokenId: '' }) }), 'no-takeover'],
    [
      'a name another token spent (its claim)',
      clientInput({}, {}, {}, { binding: bound({ nameTaken: { tokenId: 'zzzzzz', csrUid: 'uid-other' } }) }),
      'token-bound',
    ],
    ['a mark claimed by another CSR', clientInput({}, {}, liveNode(), { replacement: mark({ claimedBy: 'uid-first' }) }), 'no-takeover'],
    [
      'a CSR made before the mark',
      clientInput({ created: '2026-12-01T09:59:58Z' }, {}, liveNode(), { replacement: mark() }),
      'no-takeover',
    ],
    ['a mark whose time does not parse', clientInput({}, {}, liveNode(), { replacement: mark({ at: 'yesterday' }) }), 'no-takeover'],
    [
      'a control-plane Node, marked',
      clientInput({}, {}, liveNode({ 'node-role.kubernetes.io/control-plane': '' }), { replacement: mark() }),
      'not-control-plane',
    ],
    [
      'a master Node, marked',
      clientInput({}, {}, liveNode({ 'node-role.kubernetes.io/master': '' }), { replacement: mark() }),
      'not-control-plane',
    ],
    [
      'a Node matching --protect-nodes, marked',
      clientInput({}, {}, liveNode({ 'example.com/tier': 'db' }), { replacement: mark() }),
      'not-control-plane',
    ],
    ['a revoked node renewing', renewal({ revocation: { at: '2026-12-01T00:00:00Z', reason: 'stolen' } }), 'not-revoked'],
    [
      "a new token for a revoked node's name",
      clientInput({}, {}, {}, { revocation: { at: '2026-12-01T00:00:00Z', reason: 'stolen' } }),
      'not-revoked',
    ],
  ];
  for (const [what, input, rule] of cases) {
    const verdict = evaluate(KUBELET_CLIENT_RULES, input);
    t.equal(verdict.ok ? 'passed' : verdict.rule, rule, `${what}: fails ${rule}`);
  }
  t.same(
    evaluate(KUBELET_CLIENT_RULES, clientInput({}, {}, liveNode({ 'example.com/tier': 'web' }), { replacement: mark() })),
    { ok: true },
    '--protect-nodes key=value matches only that value',
  );
});

t.test('the first failure names the spent token and what it joined', async (t) => {
  const verdict = evaluate(KUBELET_CLIENT_RULES, clientInput({}, {}, {}, { binding: bound({ issued: { w1: 'uid-other' } }) }));
  t.match(verdict, { ok: false, rule: 'token-bound', problem: 'token abcdef was already spent on w1' });
  const unbound = evaluate(KUBELET_CLIENT_RULES, clientInput({}, {}, {}, { binding: null }));
  t.match(unbound, { problem: /no binding tokenbindings\.kubeboot\.io\/abcdef .*--unsafe-approve-unbound-tokens/ });
});

t.test('recognition of kubelet client CSRs only with --approve-kubelet-client', async (t) => {
  const r = (username: string, groups: string[], p: ApproverPolicy) =>
    recognize(
      {
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        username,
        groups,
        request: request({ subject: { commonName: 'system:node:w1', organizations: ['system:nodes'] } }),
      },
      p,
    );
  t.equal(r('system:bootstrap:abcdef', ['system:bootstrappers'], policy), null, 'left to kube-controller-manager by default');
  t.equal(r('system:bootstrap:abcdef', ['system:bootstrappers'], clientPolicy), 'kubelet-client', 'a bootstrap token');
  t.equal(r('system:node:w1', ['system:nodes'], clientPolicy), 'kubelet-client', 'a renewal');
  t.equal(r('alice', [], clientPolicy), 'kubelet-client', 'anyone asking for a node name (then refused under requester)');
});

t.test('the rule table marks the rules of one kind of requester and names both subresources', async (t) => {
  const table = renderRuleTables();
  t.match(table, '| `token-bound` | first issue only: ');
  t.notMatch(table, '| `not-revoked` | renewal only: ', 'a revocation holds for a new token too');
  t.match(
    table,
    '`certificatesigningrequests/kubebootnodeclient` (first issue) or `certificatesigningrequests/kubebootselfnodeclient` (renewal)',
  );
});

const WORLD_READS = ['node', 'blocking', 'apiServer', 'records', 'inventory', 'tpmEnrolment'] as const;

t.test(
  'a rule reads the Node, the CSRs standing before it, the API server, the records and the inventory only when it declares them (nothing else is looked up)',
  async (t) => {
    const inputs: [string, readonly Rule[], RuleInput][] = [
      ['kube-proxy', KUBE_PROXY_RULES, proxyInput()],
      ['kube-proxy, blocked', KUBE_PROXY_RULES, proxyInput({}, {}, { blocking: ['older'] })],
      ['serving', KUBELET_SERVING_RULES, servingInput({}, { ipAddresses: ['10.0.0.5'] })],
      ['kubelet client, first issue, no Node', KUBELET_CLIENT_RULES, clientInput()],
      ['kubelet client, first issue, a live Node marked', KUBELET_CLIENT_RULES, clientInput({}, {}, liveNode(), { replacement: mark() })],
      ['kubelet client, renewal', KUBELET_CLIENT_RULES, renewal()],
      [
        'kubelet client, renewal with a live Node',
        KUBELET_CLIENT_RULES,
        { ...renewal(), world: world({ ...liveNode(), records: renewal().world.records }) },
      ],
    ];
    for (const [what, rules, input] of inputs) {
      for (const rule of rules) {
        const read = new Set<string>();
        const watched = new Proxy(input.world, {
          get: (target, key, receiver) => (read.add(String(key)), Reflect.get(target, key, receiver)),
        });
        try {
          rule.check({ ...input, world: watched });
        } catch {
          // A rule that runs after another has failed may assume what that one checked (dns-sans: a Node).
        }
        for (const field of WORLD_READS)
          if (read.has(field)) t.ok(rule.reads?.includes(field), `${what}: ${rule.name} reads world.${field} and declares it`);
        const source = rule.check.toString();
        for (const field of WORLD_READS)
          if (new RegExp(`world\\??\\.${field}\\b|world: \\{[^}]*\\b${field}\\b`).test(source))
            t.ok(rule.reads?.includes(field), `${rule.name}: its source reads world.${field} and declares it`);
      }
    }
    const declared = (rules: readonly Rule[]) => rules.filter((r) => r.reads?.includes('node')).map((r) => r.name);
    t.same(
      declared(KUBELET_CLIENT_RULES),
      ['no-takeover', 'not-control-plane'],
      'of the kubelet client rules only first-issue ones read the Node',
    );
    t.ok(
      KUBELET_CLIENT_RULES.filter((r) => r.reads?.includes('node')).every((r) => r.only === 'bootstrap'),
      'so a renewal does no Node GET',
    );
    t.same(signersReading('blocking'), new Set(['kubernetes.io/kube-apiserver-client']), 'only kube-proxy CSRs wait on an older one');
  },
);

const revokedRecords = { binding: null, replacement: null, revocation: { at: '2026-12-01T09:00:00Z', reason: 'stolen disk' } };

t.test('a revoked node gets no kube-proxy or serving certificate either, and one whose revocation was not read gets none', async (t) => {
  for (const [what, input, rules] of [
    ['kube-proxy', proxyInput({}, {}, { records: revokedRecords }), KUBE_PROXY_RULES],
    ['serving', servingInput({}, {}, { records: revokedRecords }), KUBELET_SERVING_RULES],
    // --delete-node: the revoked node re-creates its Node; without it, still the revocation is what is said.
    ['kube-proxy, Node deleted', proxyInput({}, {}, { records: revokedRecords, node: null }), KUBE_PROXY_RULES],
  ] as const) {
    t.same(
      evaluate(rules, input),
      {
        ok: false,
        rule: 'not-revoked',
        problem: 'node n1 was revoked at 2026-12-01T09:00:00Z: stolen disk (noderevocations.kubeboot.io/n1)',
      },
      what,
    );
  }
  const unread = evaluate(KUBE_PROXY_RULES, proxyInput({}, {}, { records: null }));
  t.same(unread, { ok: false, rule: 'not-revoked', problem: 'the revocation noderevocations.kubeboot.io/n1 was not read' }, 'fails closed');
});

t.test('kube-proxy and serving CSRs must ask for a short lifetime: a revoked node keeps what it holds until then', async (t) => {
  const short = { ...policy, maxProxyServingExpirationSeconds: 3600 };
  for (const [what, input, rules] of [
    ['kube-proxy', proxyInput({ expirationSeconds: undefined }), KUBE_PROXY_RULES],
    ['serving', servingInput({ expirationSeconds: undefined }), KUBELET_SERVING_RULES],
  ] as const) {
    const over = evaluate(rules, { ...input, csr: { ...input.csr, expirationSeconds: 7200 }, policy: short });
    t.same(
      over,
      {
        ok: false,
        rule: 'short-lived',
        problem:
          'expirationSeconds 7200 is above 3600 (--max-proxy-serving-expiration): a revoked node would keep the certificate that long',
      },
      `${what}: above --max-proxy-serving-expiration`,
    );
    t.same(evaluate(rules, { ...input, csr: { ...input.csr, expirationSeconds: 3600 }, policy: short }), { ok: true }, `${what}: at it`);
  }
  const proxy = evaluate(KUBE_PROXY_RULES, proxyInput({ expirationSeconds: undefined }));
  t.equal(proxy.ok ? null : proxy.rule, 'short-lived', 'kube-proxy: unset is refused (only kubeboot files these, and it sets one)');
  t.match(proxy.ok ? '' : proxy.problem, /spec\.expirationSeconds is not set: .* ask for at most 86400/);
  t.same(
    evaluate(KUBELET_SERVING_RULES, servingInput({ expirationSeconds: undefined })),
    { ok: true },
    "serving: unset is allowed, the kubelet's own serverTLSBootstrap CSR cannot set it (documented)",
  );
  t.same(evaluate(KUBELET_CLIENT_RULES, clientInput()), { ok: true }, "the kubelet client's unset expiration is left to --max-expiration");
});

t.test("a node name under the serving DNS suffix is refused, for client and serving: it is another node's FQDN", async (t) => {
  // g4-pool-7.nodes.example is honest node g4-pool-7's serving name under --serving-dns-suffix nodes.example.
  const stolen = 'g4-pool-7.nodes.example';
  const client = evaluate(
    KUBELET_CLIENT_RULES,
    clientInput(
      {},
      { subject: { commonName: `system:node:${stolen}`, organizations: ['system:nodes'] } },
      {},
      {
        binding: bound({ kind: 'prefix', prefix: 'g4-pool-', names: undefined, maxNodes: 10 } as never),
      },
    ),
  );
  t.same(
    client,
    {
      ok: false,
      rule: 'not-under-dns-suffix',
      problem: `node name ${stolen} ends in the serving DNS suffix nodes.example (--serving-dns-suffix): it is another node's FQDN under it`,
    },
    'a pool token does not get the name',
  );
  const serving = servingInput(
    { username: `system:node:${stolen}` },
    { subject: { commonName: `system:node:${stolen}`, organizations: ['system:nodes'] }, dnsNames: [stolen] },
    { node: { name: stolen, addresses: [] } },
  );
  const verdict = evaluate(KUBELET_SERVING_RULES, { ...serving, nodeName: stolen });
  t.equal(verdict.ok ? null : verdict.rule, 'not-under-dns-suffix', 'a node already of that name gets no serving certificate for it');
  t.equal(dnsSuffixNameProblem('nodes.example', ['nodes.example']) !== null, true, 'the suffix itself');
  t.equal(dnsSuffixNameProblem('G4-POOL-7.Nodes.Example', ['.nodes.example']) !== null, true, 'whatever the case, a leading dot');
  t.equal(dnsSuffixNameProblem('g4-pool-7', ['nodes.example']), null, 'the honest node');
  t.equal(dnsSuffixNameProblem('g4-pool-7.nodes.example', []), null, 'no suffix configured: nothing to clash with');
  // Nested suffixes: m.b under a.example is m.b.a.example, node m's name under b.a.example.
  t.match(dnsSuffixNameProblem('m.b', ['a.example', 'b.a.example']), /is another node's name under b\.a\.example/);
  t.equal(dnsSuffixNameProblem('m.c', ['a.example', 'b.a.example']), null);
});
