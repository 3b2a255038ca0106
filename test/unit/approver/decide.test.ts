// decide(): a real PKCS#10 request through recognition, the rules and the
// SubjectAccessReview, with the cluster look-ups faked.
import t from 'tap';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { decide } from '../../../agent/approver/decide.js';
import type { Lookups } from '../../../agent/approver/lookups.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { keyAlgorithmName, requestFacts } from '../../../agent/approver/request.js';
import { craftCsrPem, type CraftSpec } from '../../support/approver.js';

const policy: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 86_400,
  keyAlgorithms: ['ecdsa-p256', 'rsa-2048'],
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
};

async function csr(
  name: string,
  spec: CraftSpec,
  over: Partial<ApproverCsr['spec']> = {},
  created = '2026-01-01T00:00:00Z',
): Promise<ApproverCsr> {
  return {
    metadata: { name, uid: `uid-${name}`, creationTimestamp: created },
    spec: {
      request: Buffer.from(await craftCsrPem(spec)).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client',
      usages: ['digital signature', 'client auth'],
      username: 'system:node:n1',
      groups: ['system:nodes', 'system:authenticated'],
      expirationSeconds: 86_400,
      ...over,
    },
  };
}

function lookups(
  opts: { allowed?: boolean; all?: ApproverCsr[]; records?: Record<string, unknown> } = {},
): Lookups & { reviews: string[]; read: string[] } {
  const reviews: string[] = [];
  const read: string[] = [];
  return {
    reviews,
    read,
    node: async (name) => (name === 'n1' ? { name, addresses: [] } : null),
    allowed: async (_c, sub) => (reviews.push(sub), opts.allowed ?? true),
    sameRequester: () => opts.all ?? [],
    apiServer: async () => ({ names: ['api.example'], ips: ['10.96.0.1'] }),
    // biome-ignore lint/suspicious/noExplicitAny: a fake store answers any record
    record: async (resource, name) => (read.push(`${resource}/${name}`), (opts.records?.[`${resource}/${name}`] ?? null) as any),
    legacy: async (name) => (read.push(`configmaps/${name}`), null),
  };
}

t.test('request facts: SANs of every kind and the key size are read', async (t) => {
  const facts = await requestFacts(
    Buffer.from(
      await craftCsrPem({ cn: 'x', o: ['a', 'b'], dns: ['d'], ips: ['10.0.0.1'], emails: ['e@x'], uris: ['spiffe://x'], key: 'rsa-1024' }),
    ).toString('base64'),
  );
  t.same(facts.subject, { commonName: 'x', organizations: ['a', 'b'] });
  t.same([facts.dnsNames, facts.ipAddresses, facts.emailAddresses, facts.uris], [['d'], ['10.0.0.1'], ['e@x'], ['spiffe://x']]);
  t.equal(keyAlgorithmName(facts.key), 'rsa-1024');
  t.equal(facts.signatureValid, true);
  t.equal(keyAlgorithmName((await requestFacts(Buffer.from(await craftCsrPem({ cn: 'x' })).toString('base64'))).key), 'ecdsa-p256');
});

t.test('a valid kube-proxy CSR is approved after a SubjectAccessReview for kubeproxyclient', async (t) => {
  const l = lookups();
  const d = await decide(await csr('ok', { cn: 'system:kube-proxy' }), policy, l);
  t.equal(d.kind, 'approve');
  t.match(d.kind === 'approve' ? d.message : '', /^kube-proxy-client: every rule passed/);
  t.same(l.reviews, ['kubeproxyclient']);
});

t.test('a SubjectAccessReview that denies is the violation "authorized"', async (t) => {
  const d = await decide(await csr('sar', { cn: 'system:kube-proxy' }), policy, lookups({ allowed: false }));
  t.same(d.kind === 'violation' ? d.rule : d.kind, 'authorized');
});

t.test('a rule violation skips the SubjectAccessReview', async (t) => {
  const l = lookups();
  const d = await decide(await csr('cn', { cn: 'root' }), policy, l);
  t.same(d.kind === 'violation' ? [d.rule, d.message] : d.kind, [
    'subject',
    'kube-proxy-client rule subject: CN root is not system:kube-proxy',
  ]);
  t.same(l.reviews, []);
});

t.test('settled CSRs and CSRs of other signers are ignored', async (t) => {
  const approved = await csr('done', { cn: 'system:kube-proxy' });
  approved.status = { conditions: [{ type: 'Approved', status: 'True' }] };
  t.same(await decide(approved, policy, lookups()), { kind: 'ignore', why: 'settled' });
  t.same(await decide(await csr('other', { cn: 'system:kube-proxy' }, { signerName: 'example.com/x' }), policy, lookups()), {
    kind: 'ignore',
    why: 'not-ours',
  });
});

t.test('only the oldest unissued kube-proxy CSR of a node is approved', async (t) => {
  const older = await csr('a-older', { cn: 'system:kube-proxy' }, {}, '2026-01-01T00:00:00Z');
  const newer = await csr('b-newer', { cn: 'system:kube-proxy' }, {}, '2026-01-01T00:00:00Z');
  const all = [older, newer];
  t.equal((await decide(older, policy, lookups({ all }))).kind, 'approve', 'the older one (same second: by name)');
  const d = await decide(newer, policy, lookups({ all }));
  t.same(d.kind === 'violation' ? d.rule : d.kind, 'one-unissued-per-node', 'the newer one waits');
  older.status = { certificate: 'Y2VydA==', conditions: [{ type: 'Approved' }] };
  t.equal((await decide(newer, policy, lookups({ all }))).kind, 'approve', 'once the older one is issued, the newer one may go');
});

t.test('an approved but unissued CSR blocks every other of the node, whatever its name or age (finding 4)', async (t) => {
  // Five CSRs of one second, names in descending order, arriving newest-name first: the one
  // approved first is the one seen first, and nothing else may be approved while it is unissued.
  const names = ['e', 'd', 'c', 'b', 'a'];
  const all = await Promise.all(names.map((n) => csr(n, { cn: 'system:kube-proxy' })));
  const [first, ...rest] = all;
  first!.status = { conditions: [{ type: 'Approved', status: 'True' }] };
  for (const later of rest) {
    const d = await decide(later, policy, lookups({ all }));
    t.same(
      d.kind === 'violation' ? d.rule : d.kind,
      'one-unissued-per-node',
      `${later.metadata.name} waits for the approved ${first!.metadata.name}`,
    );
  }
  first!.status = { certificate: 'Y2VydA==', conditions: [{ type: 'Approved', status: 'True' }] };
  t.equal(
    (await decide(all.at(-1)!, policy, lookups({ all }))).kind,
    'approve',
    'once it is issued, the oldest pending one (by name inside the second) goes next',
  );
  t.same((await decide(all[1]!, policy, lookups({ all }))).kind, 'violation', 'and only that one');
});

t.test('a requester whose node name is not a valid Node name is refused without any look-up (finding 1)', async (t) => {
  for (const name of ['.', '..', 'a/b', 'UPPER', 'x'.repeat(254), 'a..b', '-a', 'a\nb', '%2e']) {
    const looked: string[] = [];
    const l = { ...lookups(), node: async (n: string) => (looked.push(n), { name: n, addresses: [] }) };
    const d = await decide(await csr('bad', { cn: 'system:kube-proxy' }, { username: `system:node:${name}` }), policy, l);
    t.same(d.kind === 'violation' ? d.rule : d.kind, 'requester-is-node', `system:node:${JSON.stringify(name).slice(0, 20)} is no node`);
    t.same(looked, [], 'no Node is looked up for it');
    t.same(l.reviews, [], 'nor a SubjectAccessReview sent');
  }
});

t.test('a Node look-up that answers another Node is no Node (defence behind getNode)', async (t) => {
  const l = { ...lookups(), node: async () => ({ name: 'someone-else', addresses: [] }) };
  const d = await decide(await csr('x', { cn: 'system:kube-proxy' }), policy, l);
  t.same(d.kind === 'violation' ? d.rule : d.kind, 'node-exists');
});

// ---- kubelet client (--approve-kubelet-client) ----

const clientPolicy: ApproverPolicy = { ...policy, kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] } };
const KUBELET = {
  signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'key encipherment', 'client auth'],
};
const bootstrapper = { username: 'system:bootstrap:abcdef', groups: ['system:bootstrappers', 'system:authenticated'] };

type AnyRecord = { kind: string; metadata: { name: string; resourceVersion?: string; creationTimestamp?: string }; [k: string]: unknown };

/** The records as `kubeboot token create --node w1` and `kubeboot node replace` make them (by `resource/name`), and which were read. */
function clientLookups(
  o: {
    records?: Record<string, AnyRecord>;
    legacy?: Record<string, { metadata: { name: string }; data?: Record<string, string> }>;
    nodes?: Record<string, Record<string, string>>;
  } = {},
): Lookups & { reviews: string[]; read: string[] } {
  const read: string[] = [];
  const base = lookups();
  return {
    ...base,
    read,
    node: async (name) => (o.nodes?.[name] ? { name, addresses: [], labels: o.nodes[name] } : null),
    // biome-ignore lint/suspicious/noExplicitAny: a fake store answers any record
    record: async (resource, name) => (read.push(`${resource}/${name}`), (o.records?.[`${resource}/${name}`] ?? null) as any),
    legacy: async (name) => (read.push(`configmaps/${name}`), o.legacy?.[name] ?? null),
  };
}

const w1Binding = (issued: { node: string; csrUID: string }[] = [], names = ['w1']): AnyRecord => ({
  kind: 'TokenBinding',
  metadata: { name: 'abcdef', resourceVersion: '7' },
  spec: { tokenID: 'abcdef', names, maxNodes: names.length, tokenSecretUID: 'secret-uid' },
  status: { issued },
});
const claim = (node: string, tokenID: string, csrUID: string): AnyRecord => ({
  kind: 'NodeClaim',
  metadata: { name: node, resourceVersion: '20' },
  spec: { tokenID, csrUID },
});
const markFor = (node: string, tokenID: string, claimedBy?: string): AnyRecord => ({
  kind: 'NodeReplacement',
  metadata: { name: node, resourceVersion: '12', creationTimestamp: '2025-12-31T00:00:00Z' },
  spec: { tokenID },
  status: claimedBy ? { claimedBy } : {},
});
const first = (name: string, cn = 'system:node:w1') => csr(name, { cn, o: ['system:nodes'] }, { ...KUBELET, ...bootstrapper });

t.test("a bootstrap token's kubelet client CSR for its bound name is approved, spending the name with the version read", async (t) => {
  const l = clientLookups({ records: { 'tokenbindings/abcdef': w1Binding() } });
  const d = await decide(await first('first'), clientPolicy, l);
  t.match(d, {
    kind: 'approve',
    policy: 'kubelet-client',
    message:
      /token-bound, no-takeover, not-control-plane, not-revoked\) and system:bootstrap:abcdef may create certificatesigningrequests\/kubebootnodeclient$/,
  });
  t.same(d.kind === 'approve' ? d.claims : null, [
    {
      op: 'status',
      resource: 'tokenbindings',
      name: 'abcdef',
      resourceVersion: '7',
      status: { issued: [{ node: 'w1', csrUID: 'uid-first' }] },
    },
    {
      op: 'create',
      resource: 'nodeclaims',
      name: 'w1',
      object: {
        apiVersion: 'kubeboot.io/v1alpha1',
        kind: 'NodeClaim',
        metadata: { name: 'w1', labels: { 'app.kubernetes.io/part-of': 'kubeboot' } },
        spec: { tokenID: 'abcdef', csrUID: 'uid-first' },
      },
    },
  ]);
  t.same(l.reviews, ['kubebootnodeclient'], 'the SubjectAccessReview is for the bootstrap subresource');
  t.same(l.read, ['noderevocations/w1', 'configmaps/revocations', 'tokenbindings/abcdef', 'nodeclaims/w1', 'nodereplacements/w1']);
});

t.test('the same CSR decided again after its claims were written spends nothing more', async (t) => {
  const l = clientLookups({
    records: {
      'tokenbindings/abcdef': w1Binding([{ node: 'w1', csrUID: 'uid-again' }]),
      'nodeclaims/w1': claim('w1', 'abcdef', 'uid-again'),
    },
  });
  const d = await decide(await first('again'), clientPolicy, l);
  t.same(d.kind === 'approve' ? d.claims : d, []);
});

t.test('a name another token spent is refused to this one, however its binding reads', async (t) => {
  const l = clientLookups({ records: { 'tokenbindings/abcdef': w1Binding(), 'nodeclaims/w1': claim('w1', 'zzzzzz', 'uid-theirs') } });
  const d = await decide(await first('second'), clientPolicy, l);
  t.match(d, { kind: 'violation', rule: 'token-bound', message: /w1 was already spent on token zzzzzz .*kubeboot node replace w1/ });
  t.same(l.reviews, [], 'refused before any review');
});

t.test('a node name is a Map key: `constructor` reads as spent by no one', async (t) => {
  const l = clientLookups({ records: { 'tokenbindings/abcdef': w1Binding([], ['constructor']) } });
  t.match(await decide(await first('ctor', 'system:node:constructor'), clientPolicy, l), { kind: 'approve' });
});

t.test('a replacement mark for this token frees a spent name and a live Node, and is claimed with the name', async (t) => {
  const l = clientLookups({
    nodes: { w1: {} },
    records: {
      'tokenbindings/abcdef': w1Binding(),
      'nodeclaims/w1': claim('w1', 'oldtok', 'uid-old'),
      'nodereplacements/w1': markFor('w1', 'abcdef'),
    },
  });
  const d = await decide(await first('replace'), clientPolicy, l);
  t.same(d.kind === 'approve' ? d.claims.map((c) => [c.op, c.resource, 'resourceVersion' in c ? c.resourceVersion : null]) : d, [
    ['status', 'tokenbindings', '7'],
    ['replace', 'nodeclaims', '20'],
    ['status', 'nodereplacements', '12'],
  ]);
  const other = clientLookups({
    nodes: { w1: {} },
    records: { 'tokenbindings/abcdef': w1Binding(), 'nodereplacements/w1': markFor('w1', 'zzzzzz') },
  });
  t.match(await decide(await first('notmine'), clientPolicy, other), {
    kind: 'violation',
    rule: 'no-takeover',
    message: /its replacement mark is for token zzzzzz/,
  });
  const claimed = clientLookups({
    records: {
      'tokenbindings/abcdef': w1Binding(),
      'nodeclaims/w1': claim('w1', 'oldtok', 'uid-old'),
      'nodereplacements/w1': markFor('w1', 'abcdef', 'uid-someone'),
    },
  });
  t.match(
    await decide(await first('late'), clientPolicy, claimed),
    { kind: 'violation', rule: 'token-bound' },
    'a claimed mark frees nothing more',
  );
});

t.test('a live Node without a mark is refused (no-takeover) before anything is spent or reviewed', async (t) => {
  const l = clientLookups({ nodes: { w1: {} }, records: { 'tokenbindings/abcdef': w1Binding() } });
  const d = await decide(await first('takeover'), clientPolicy, l);
  t.match(d, { kind: 'violation', rule: 'no-takeover', message: /^kubelet-client rule no-takeover: Node w1 exists/ });
  t.same(l.reviews, []);
});

t.test('a ConfigMap record of an earlier release is refused, naming the command that moves it', async (t) => {
  const legacy = clientLookups({
    legacy: { 'token-abcdef': { metadata: { name: 'token-abcdef' }, data: { names: 'w1', 'max-nodes': '1' } } },
  });
  t.match(await decide(await first('old'), clientPolicy, legacy), {
    kind: 'violation',
    rule: 'token-bound',
    message: /kubeboot\/token-abcdef is a ConfigMap record of an earlier release.*not trusted; move it with: kubeboot records migrate/,
  });
  const node = { username: 'system:node:w1', groups: ['system:nodes', 'system:authenticated'] };
  const revoked = clientLookups({ legacy: { revocations: { metadata: { name: 'revocations' }, data: { w1: '{}' } } } });
  t.match(
    await decide(await csr('renew-old', { cn: 'system:node:w1', o: ['system:nodes'] }, { ...KUBELET, ...node }), clientPolicy, revoked),
    {
      kind: 'violation',
      rule: 'not-revoked',
      message: /kubeboot\/revocations is a ConfigMap record.*kubeboot records migrate/,
    },
  );
});

t.test('a renewal reads only the revocation and is reviewed for kubebootselfnodeclient', async (t) => {
  const node = { username: 'system:node:w1', groups: ['system:nodes', 'system:authenticated'] };
  const l = clientLookups({ records: { 'tokenbindings/abcdef': w1Binding() } });
  const d = await decide(await csr('renew', { cn: 'system:node:w1', o: ['system:nodes'] }, { ...KUBELET, ...node }), clientPolicy, l);
  t.match(d, { kind: 'approve', claims: [] });
  t.same([l.read, l.reviews], [['noderevocations/w1', 'configmaps/revocations'], ['kubebootselfnodeclient']]);
  const revoked = clientLookups({
    records: {
      'noderevocations/w1': {
        kind: 'NodeRevocation',
        metadata: { name: 'w1', creationTimestamp: '2026-12-01T00:00:00Z' },
        spec: { reason: 'stolen' },
      },
    },
  });
  const r = await decide(
    await csr('renew2', { cn: 'system:node:w1', o: ['system:nodes'] }, { ...KUBELET, ...node }),
    clientPolicy,
    revoked,
  );
  t.match(r, { kind: 'violation', rule: 'not-revoked', message: /node w1 was revoked at 2026-12-01T00:00:00Z: stolen/ });
});

t.test('kubelet client CSRs are not ours without --approve-kubelet-client', async (t) => {
  const l = clientLookups({ records: { 'tokenbindings/abcdef': w1Binding() } });
  t.same(await decide(await csr('off', { cn: 'system:node:w1', o: ['system:nodes'] }, { ...KUBELET, ...bootstrapper }), policy, l), {
    kind: 'ignore',
    why: 'not-ours',
  });
  t.same(l.read, []);
});

t.test('a legacy record the approver could not read fails the decision (closed), it is never taken as absent', async (t) => {
  const l = {
    ...clientLookups(),
    legacy: async () => Promise.reject(new Error('the approver may not read ConfigMap kubeboot/token-abcdef')),
  };
  await t.rejects(
    decide(await csr('forbidden', { cn: 'system:node:w1', o: ['system:nodes'] }, { ...KUBELET, ...bootstrapper }), clientPolicy, l),
    /may not read/,
  );
});

t.test("a revoked node's kube-proxy and serving CSRs are refused: the revocation is read for every node requester", async (t) => {
  const revocations = {
    'noderevocations/n1': {
      kind: 'NodeRevocation',
      metadata: { name: 'n1', creationTimestamp: '2026-01-01T00:00:00Z' },
      spec: { reason: 'stolen' },
    },
  };
  const l = lookups({ records: revocations });
  const proxy = await decide(await csr('proxy', { cn: 'system:kube-proxy' }), policy, l);
  t.same(proxy.kind === 'violation' ? proxy.rule : proxy.kind, 'not-revoked', 'kube-proxy');
  const servingPolicy = { ...policy, serving: { enabled: true, dnsSuffixes: [], ipCidrs: [] } };
  const serving = await decide(
    await csr(
      'serving',
      { cn: 'system:node:n1', o: ['system:nodes'], dns: ['n1'] },
      {
        signerName: 'kubernetes.io/kubelet-serving',
        usages: ['digital signature', 'server auth'],
      },
    ),
    servingPolicy,
    l,
  );
  t.same(serving.kind === 'violation' ? serving.rule : serving.kind, 'not-revoked', 'serving');
  t.same(l.read, ['noderevocations/n1', 'noderevocations/n1'], 'only the revocations are read');
  t.same(l.reviews, [], 'nothing is reviewed');
  const other = await decide(await csr('proxy-n2', { cn: 'system:kube-proxy' }, { username: 'system:node:n2' }), policy, {
    ...lookups({ records: revocations }),
    node: async (name) => ({ name, addresses: [] }),
  });
  t.equal(other.kind, 'approve', 'another node is not affected');
});
