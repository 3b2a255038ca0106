// What the approver keeps of a CSR (retain.ts): what a decision reads, never
// what a requester chose to send, so 250 CSRs of 1 MB each cost it kilobytes.
import t from 'tap';
import { MockAgent } from 'undici';
import { decideCsr } from '../../../agent/approver/api.js';
import { blocks, isSettled, isUnissued, type ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { decide } from '../../../agent/approver/decide.js';
import type { Lookups } from '../../../agent/approver/lookups.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { CERTIFICATE_NOT_KEPT, isOurs, MAX_REQUEST_BYTES, retain, retainedBytes } from '../../../agent/approver/retain.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { bigCsrPem, craftCsrPem } from '../../support/approver.js';

const policy: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 86_400,
  keyAlgorithms: ['ecdsa-p256'],
  serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
};
const CLIENT = 'kubernetes.io/kube-apiserver-client';
const NODE = { username: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };
const BOOTSTRAP = { username: 'system:bootstrap:abcdef', groups: ['system:bootstrappers', 'system:authenticated'] };
const b64 = (text: string) => Buffer.from(text).toString('base64');

function csr(over: { spec?: Partial<ApproverCsr['spec']>; metadata?: Record<string, unknown>; status?: ApproverCsr['status'] } = {}) {
  return {
    kind: 'CertificateSigningRequest',
    metadata: { name: 'c1', uid: 'u1', resourceVersion: '7', creationTimestamp: '2026-01-01T00:00:00Z', ...over.metadata },
    spec: { request: '', signerName: CLIENT, usages: ['digital signature', 'client auth'], ...NODE, ...over.spec },
    ...(over.status ? { status: over.status } : {}),
  } as ApproverCsr;
}

const lookups: Lookups = {
  node: async (name) => (name === 'n1' ? { name, addresses: [] } : null),
  allowed: async () => true,
  sameRequester: () => [],
  apiServer: async () => ({ names: [], ips: [] }),
  record: async () => null,
  legacy: async () => null,
};

t.test("another signer's CSR keeps its name, age, requester and signer, and nothing it brought", async (t) => {
  const flood = csr({
    metadata: {
      annotations: { padding: 'a'.repeat(200_000) },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: '<'.repeat(100_000), uid: 'x' }],
      managedFields: [{ manager: 'curl', operation: 'Update' }],
    },
    spec: { request: b64('#'.repeat(1_000_000)), signerName: 'example.com/foreign', ...BOOTSTRAP },
  });
  const kept = retain(flood, policy);
  t.same(kept, {
    kind: 'CertificateSigningRequest',
    metadata: { name: 'c1', uid: 'u1', resourceVersion: '7', creationTimestamp: '2026-01-01T00:00:00Z' },
    spec: { request: '', signerName: 'example.com/foreign', username: BOOTSTRAP.username },
    status: { conditions: [] },
    notOurs: true,
  });
  t.ok(retainedBytes(kept) < 2048, `counted as ${retainedBytes(kept)} bytes, against ${JSON.stringify(flood).length} sent`);
  const serving = csr({ spec: { request: b64('#'.repeat(1000)), signerName: 'kubernetes.io/kubelet-serving' } });
  t.equal(retain(serving, policy).spec.request, '', 'kubelet-serving is another signer while serving approval is off');
  t.equal(retain(serving, { ...policy, serving: { ...policy.serving, enabled: true } }).spec.request, serving.spec.request);
});

t.test('a settled CSR of its own signers keeps exactly what isSettled, isUnissued and blocks read', async (t) => {
  const request = b64(await craftCsrPem({ cn: 'system:kube-proxy' }));
  const approved = { type: 'Approved', status: 'True', reason: 'KubebootApprover', message: 'm'.repeat(1000) };
  const cases = [
    csr({ spec: { request }, status: { conditions: [approved] } }),
    csr({ spec: { request }, status: { conditions: [approved], certificate: b64('c'.repeat(5000)) } }),
    csr({ spec: { request }, status: { conditions: [{ type: 'Denied', status: 'True', message: 'no' }] } }),
    csr({ spec: { request }, status: { conditions: [{ type: 'Failed', status: 'True', message: 'signer' }] } }),
  ];
  const newer = csr({ metadata: { name: 'c2', uid: 'u2', creationTimestamp: '2026-01-02T00:00:00Z' }, spec: { request } });
  for (const whole of cases) {
    const kept = retain(whole, policy);
    const what = `${whole.status?.conditions?.[0]?.type}${whole.status?.certificate ? ', issued' : ''}`;
    t.equal(kept.spec.request, '', `${what}: no request`);
    t.same(
      [isSettled(kept), isUnissued(kept), blocks(kept, newer)],
      [isSettled(whole), isUnissued(whole), blocks(whole, newer)],
      `${what}: read the same`,
    );
    if (whole.status?.certificate) t.equal(kept.status?.certificate, CERTIFICATE_NOT_KEPT, `${what}: the certificate's bytes are not kept`);
  }
});

/** The flood of issue 35: 2,000 labels and a 250 KB annotation, about 0.9 MB of JSON. */
function floodMetadata(): Record<string, unknown> {
  const labels = Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`l${i}.example.com/k${'x'.repeat(50)}`, 'v'.repeat(63)]));
  return { labels, annotations: { pad: 'p'.repeat(250_000) }, finalizers: ['example.com/f'], managedFields: [{ manager: 'curl' }] };
}

t.test('a pending CSR of ours keeps what the rules read: no labels, annotations, finalizers or managedFields', async (t) => {
  const request = b64(await craftCsrPem({ cn: 'system:kube-proxy' }));
  const whole = csr({
    metadata: { generateName: 'csr-', ...floodMetadata() },
    spec: { request, uid: 'node-uid', extra: { k: ['v'] }, expirationSeconds: 3600 },
  });
  const kept = retain(whole, policy);
  t.same(kept, {
    kind: 'CertificateSigningRequest',
    metadata: { name: 'c1', generateName: 'csr-', uid: 'u1', resourceVersion: '7', creationTimestamp: '2026-01-01T00:00:00Z' },
    spec: { ...whole.spec },
    metadataDropped: true,
  });
  t.ok(retainedBytes(kept) < 4096, `counted as ${retainedBytes(kept)} bytes, against ${JSON.stringify(whole).length} sent`);
  t.same(await decide(kept, policy, lookups), await decide(whole, policy, lookups), 'decided exactly as when whole');
  const plain = retain(csr({ metadata: { managedFields: [{ manager: 'kubelet' }] }, spec: { request } }), policy);
  t.notOk('metadataDropped' in plain, 'a kubelet CSR (no labels or annotations) is written back without a read');
});

t.test('"ours" is what an enabled policy would decide, recognised before anything is kept', async (t) => {
  const request = b64(await craftCsrPem({ cn: 'user:alice' }));
  const user = { username: 'alice', groups: ['system:authenticated'] };
  const theirs = csr({ metadata: floodMetadata(), spec: { request, ...user } });
  t.notOk(isOurs(theirs, policy), "a user's own client CSR for kube-apiserver-client is not ours");
  t.same(retain(theirs, policy).spec.request, '', 'so kept as a stub');
  t.ok(retainedBytes(retain(theirs, policy)) < 2048);
  const asKubeProxy = csr({ spec: { request: b64(await craftCsrPem({ cn: 'system:kube-proxy' })), ...user } });
  t.ok(isOurs(asKubeProxy, policy), "one asking for kube-proxy's name is ours (and reported)");
  t.ok(isOurs(csr({ spec: { request: '', ...NODE } }), policy), "a node's is ours whatever it asks");
  const kubelet = csr({ spec: { request, signerName: 'kubernetes.io/kube-apiserver-client-kubelet', ...BOOTSTRAP } });
  t.notOk(isOurs(kubelet, policy), 'kubelet client CSRs are not ours without --approve-kubelet-client');
  t.ok(isOurs(kubelet, { ...policy, kubeletClient: { enabled: true, unboundTokens: false, protectNodes: [] } }), 'and are with it');
});

t.test(`a request over ${MAX_REQUEST_BYTES} bytes is not kept: it fails request-signature naming its size`, async (t) => {
  const pem = await bigCsrPem('system:kube-proxy', MAX_REQUEST_BYTES);
  const whole = csr({ spec: { request: b64(pem), expirationSeconds: 86_400 } });
  const kept = retain(whole, policy);
  t.equal(kept.spec.request, '', 'its bytes are gone');
  t.same(kept.oversizedRequest, { bytes: pem.length, commonName: 'system:kube-proxy' }, 'its size and CN are kept');
  t.ok(retainedBytes(kept) < 4096, `counted as ${retainedBytes(kept)} bytes`);
  t.equal((await decide(whole, policy, lookups)).kind, 'approve', 'whole, every rule passed: a size no kubelet or kubeboot sends');
  const decision = await decide(kept, policy, lookups);
  t.match(decision, { kind: 'violation', rule: 'request-signature' });
  t.match(decision.kind === 'violation' ? decision.message : '', `spec.request is ${pem.length} bytes, more than the ${MAX_REQUEST_BYTES}`);

  // Recognised as before from its CN: a bootstrap token asking for kube-proxy's name is reported.
  const fromToken = csr({ spec: { request: b64(pem), ...BOOTSTRAP } });
  t.match(await decide(retain(fromToken, policy), policy, lookups), { kind: 'violation', rule: 'requester-is-node' });
  t.match(await decide(fromToken, policy, lookups), { kind: 'violation', rule: 'requester-is-node' }, 'as when it was kept whole');
  const unreadable = csr({ spec: { request: b64('#'.repeat(MAX_REQUEST_BYTES + 1)), ...BOOTSTRAP } });
  t.same(
    await decide(retain(unreadable, policy), policy, lookups),
    { kind: 'ignore', why: 'not-ours' },
    "a token's request that is no CSR at all is none of its business, as before",
  );
});

t.test('the /approval write sends the stored metadata back when labels were dropped, and spec.request empty when not kept', async (t) => {
  const mock = new MockAgent();
  mock.disableNetConnect();
  t.teardown(() => mock.close());
  const api = mock.get('https://api.test');
  const path = '/apis/certificates.k8s.io/v1/certificatesigningrequests/c1';
  const whole = csr({
    metadata: { labels: { team: 'a' }, annotations: { note: 'b' }, managedFields: [{ manager: 'curl' }] },
    spec: { request: b64('#'.repeat(MAX_REQUEST_BYTES + 1)) },
  });
  let sent: Record<string, unknown> = {};
  const byName = (p: string) => p.startsWith('/apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=metadata.name%3Dc1');
  const listOf = (...items: unknown[]) => ({ kind: 'CertificateSigningRequestList', metadata: {}, items });
  api.intercept({ path: byName, method: 'GET' }).reply(200, listOf(whole));
  api.intercept({ path: `${path}/approval`, method: 'PUT' }).reply(200, (o) => ((sent = JSON.parse(String(o.body))), sent));
  const client = new KubeClient({ server: 'https://api.test', caPem: null }, { kind: 'anonymous' }, mock);
  const kept = retain(whole, policy);
  t.notOk('labels' in kept.metadata, 'the cache has no labels');
  t.equal((await decideCsr(client, kept, 'Denied', 'too large')).kind, 'written');
  t.notOk('oversizedRequest' in sent || 'metadataDropped' in sent, 'nothing of retain.ts goes to the API server');
  t.notOk('managedFields' in (sent.metadata as object), 'nor managedFields (the subresource write keeps the stored ones)');
  t.match(sent, {
    metadata: { labels: { team: 'a' }, annotations: { note: 'b' }, resourceVersion: '7' },
    spec: { request: '' },
    status: { conditions: [{ type: 'Denied' }] },
  });

  api.intercept({ path: byName, method: 'GET' }).reply(200, listOf({ ...whole, metadata: { ...whole.metadata, resourceVersion: '8' } }));
  t.same(await decideCsr(client, kept, 'Denied', 'too large'), { kind: 'conflict' }, 'changed since: decided again, nothing written');
  api.intercept({ path: byName, method: 'GET' }).reply(200, listOf());
  t.same(await decideCsr(client, kept, 'Denied', 'too large'), { kind: 'not-found' });
});
