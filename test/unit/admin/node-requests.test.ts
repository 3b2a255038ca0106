// What `kubeboot node replace|revoke|unrevoke|list` asks of the cluster
// (admin/node-requests.ts, admin/node.ts) against undici's MockAgent:
// the records kubeboot approver reads are made whole (their time is the API
// server's creationTimestamp), a revocation denies the node's
// pending kubelet client CSRs and says until when its certificate lives, and
// the listing shows each node's identity, expiry and renewer, escaped.
import t from 'tap';
import { listNodes, replaceNode, revokeNode, unrevokeNode } from '../../../agent/admin/node-requests.js';
import { ExitCode } from '../../../agent/errors.js';
import { attestationOf, renderNodeTable, renewerOf } from '../../../agent/admin/node.js';
import { newRecord } from '../../../agent/records/kinds.js';
import { craftCsrPem } from '../../support/approver.js';
import { HOSTILE, RAW } from '../../support/hostile.js';
import { mockAdmin, notFound } from '../../support/mock-admin.js';
import { createCa, issueLeaf } from '../../support/pki.js';

const CONFIGMAPS = '/api/v1/namespaces/kubeboot/configmaps';
const MARKS = '/apis/kubeboot.io/v1alpha1/nodereplacements';
const REVOCATIONS = '/apis/kubeboot.io/v1alpha1/noderevocations';
const INVENTORY = '/apis/kubeboot.io/v1alpha1/inventories/inventory';
const AK = `000b${'ab'.repeat(32)}`;
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
const NOW = new Date('2030-01-01T00:00:00Z');
const ca = await createCa('cluster-ca');
const b64 = (s: string) => Buffer.from(s).toString('base64');

const configMap = (name: string, rv: string, data: Record<string, string>) => ({
  kind: 'ConfigMap',
  metadata: { name, namespace: 'kubeboot', resourceVersion: rv },
  data,
});

interface CsrSpec {
  name: string;
  username: string;
  cn: string;
  conditions?: { type: string; status: string; reason?: string }[];
  cert?: { notBefore: Date; notAfter: Date };
  signer?: string;
}
async function csr(s: CsrSpec) {
  const certPem = s.cert
    ? (await issueLeaf(ca, { commonName: s.cn, organizations: ['system:nodes'], usage: 'client', ...s.cert })).certPem
    : null;
  return {
    kind: 'CertificateSigningRequest',
    metadata: { name: s.name, uid: `uid-${s.name}`, resourceVersion: '1' },
    spec: {
      signerName: s.signer ?? SIGNER,
      username: s.username,
      usages: ['digital signature', 'client auth'],
      request: b64(await craftCsrPem({ cn: s.cn, o: ['system:nodes'] })),
    },
    status: { conditions: s.conditions ?? [], ...(certPem ? { certificate: b64(certPem) } : {}) },
  };
}
const approved = [{ type: 'Approved', status: 'True', reason: 'AutoApproved' }];

t.test('node replace makes a new mark (an old one deleted first), for a token or the next one bound to the name', async (t) => {
  const fresh = mockAdmin(t);
  fresh.on('DELETE', `${MARKS}/n1`, 404, notFound);
  fresh.on('POST', MARKS, 201, (b) => b);
  fresh.on('GET', '/api/v1/nodes/n1', 200, () => ({ kind: 'Node', metadata: { name: 'n1' } }));
  fresh.on('GET', `${REVOCATIONS}/n1`, 404, notFound);
  const lines = await replaceNode(fresh.client, 'n1', null);
  const made = fresh.calls[1]!.body;
  t.match(made, { apiVersion: 'kubeboot.io/v1alpha1', kind: 'NodeReplacement', metadata: { name: 'n1' }, spec: { tokenID: '' } });
  t.notOk('at' in made.spec, 'no time of ours: the API server stamps creationTimestamp');
  t.match(lines[1], 'kubeboot token create --node n1');

  const again = mockAdmin(t);
  again.on('DELETE', `${MARKS}/n1`, 200, () => ({ kind: 'Status', status: 'Success' }));
  again.on('POST', MARKS, 201, (b) => b);
  again.on('GET', '/api/v1/nodes/n1', 404, notFound);
  again.on('GET', `${REVOCATIONS}/n1`, 200, () => ({ kind: 'NodeRevocation', metadata: { name: 'n1' } }));
  const said = await replaceNode(again.client, 'n1', 'abcdef');
  t.same(
    again.calls.map((c) => `${c.method} ${c.path}`).slice(0, 2),
    [`DELETE ${MARKS}/n1`, `POST ${MARKS}`],
    'a mark given again starts over',
  );
  t.equal(again.calls[1]!.body.spec.tokenID, 'abcdef', 'bound to the token named');
  t.match(said, [
    /marked as being replaced.*token abcdef/,
    /token abcdef must be bound to n1/,
    /no Node n1 exists now/,
    /is revoked.*kubeboot node unrevoke n1/,
  ]);

  const missing = mockAdmin(t);
  missing.on('DELETE', `${MARKS}/n1`, 404, notFound);
  missing.on('POST', MARKS, 404, notFound);
  await t.rejects(replaceNode(missing.client, 'n1', null), {
    message:
      'the kubeboot.io records are not installed in this cluster (the replacement mark is one; nothing was written); install them with: kubectl apply -f /usr/share/kubeboot/manifests/ -f /usr/share/kubeboot/manifests/approver/',
  });
});

t.test(
  'node revoke records it, denies the pending CSRs of the node of every signer, and says until when its certificate lives',
  async (t) => {
    const { client, calls, on } = mockAdmin(t);
    on('POST', REVOCATIONS, 201, (b) => b);
    const items = [
      await csr({ name: 'csr-pending', username: 'system:node:n1', cn: 'system:node:n1' }),
      await csr({ name: 'node-csr-bootstrap', username: 'system:bootstrap:abcdef', cn: 'system:node:n1' }),
      await csr({ name: 'csr-neighbour', username: 'system:node:n2', cn: 'system:node:n2' }),
      await csr({ name: 'csr-proxy', username: 'system:node:n1', cn: 'system:kube-proxy', signer: 'kubernetes.io/kube-apiserver-client' }),
      await csr({ name: 'csr-serving', username: 'system:node:n1', cn: 'system:node:n1', signer: 'kubernetes.io/kubelet-serving' }),
      await csr({
        name: 'csr-neighbour-proxy',
        username: 'system:node:n2',
        cn: 'system:kube-proxy',
        signer: 'kubernetes.io/kube-apiserver-client',
      }),
      await csr({
        name: 'csr-issued',
        username: 'system:node:n1',
        cn: 'system:node:n1',
        conditions: approved,
        cert: { notBefore: new Date('2029-12-31T00:00:00Z'), notAfter: new Date('2030-01-02T00:00:00Z') },
      }),
      await csr({ name: 'csr-approved', username: 'system:node:n1', cn: 'system:node:n1', conditions: approved }),
      await csr({
        name: 'csr-denied',
        username: 'system:node:n1',
        cn: 'system:node:n1',
        conditions: [{ type: 'Denied', status: 'True' }],
      }),
    ];
    on('GET', CSRS, 200, () => ({ kind: 'CertificateSigningRequestList', metadata: {}, items }));
    on('PUT', `${CSRS}/csr-pending/approval`, 200, (b) => b);
    on('PUT', `${CSRS}/node-csr-bootstrap/approval`, 409, () => ({ kind: 'Status', reason: 'Conflict', code: 409 }));
    on('GET', `${CSRS}/node-csr-bootstrap`, 200, () => items[1]);
    on('PUT', `${CSRS}/node-csr-bootstrap/approval`, 200, (b) => b);
    on('PUT', `${CSRS}/csr-proxy/approval`, 200, (b) => b);
    on('PUT', `${CSRS}/csr-serving/approval`, 200, (b) => b);
    on('DELETE', '/api/v1/nodes/n1', 200, () => ({ kind: 'Status', status: 'Success' }));
    // The authorizer lets nodes renew through kube-controller-manager, by a role of any name.
    for (let i = 0; i < 4; i++)
      on('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', 201, (b) => ({
        status: { allowed: b.spec.groups.includes('system:nodes') && b.spec.resourceAttributes.subresource === 'selfnodeclient' },
      }));
    on('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles', 200, () => ({
      kind: 'ClusterRoleList',
      metadata: {},
      items: [
        {
          metadata: { name: 'approve-node-client-renewal-csr' },
          rules: [{ apiGroups: ['certificates.k8s.io'], resources: ['certificatesigningrequests/selfnodeclient'], verbs: ['create'] }],
        },
      ],
    }));
    on('GET', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', 200, () => ({
      kind: 'ClusterRoleBindingList',
      metadata: {},
      items: [
        {
          metadata: { name: 'auto-approve-renewals-for-nodes' },
          roleRef: { kind: 'ClusterRole', name: 'approve-node-client-renewal-csr' },
          subjects: [{ kind: 'Group', name: 'system:nodes' }],
        },
        {
          metadata: { name: 'kubeboot:node-bootstrapper' },
          roleRef: { kind: 'ClusterRole', name: 'system:node-bootstrapper' },
          subjects: [{ kind: 'Group', name: 'system:bootstrappers' }],
        },
      ],
    }));
    let stderr = '';
    const io = { stdout: { write: () => true }, stderr: { write: (s: string) => (stderr += s) } };
    const lines = await revokeNode(client, 'n1', { reason: 'stolen disk', deleteNode: true, now: NOW, io });

    const recorded = calls.find((c) => c.method === 'POST' && c.path === REVOCATIONS)!.body;
    t.match(recorded, { kind: 'NodeRevocation', metadata: { name: 'n1' }, spec: { reason: 'stolen disk' } });
    t.equal(calls[0]!.path, REVOCATIONS, 'recorded before any CSR is denied');
    t.equal(calls.find((c) => c.path === CSRS)!.query.get('fieldSelector'), null, 'the CSRs of every signer are read');

    const denials = calls.filter((c) => c.path.endsWith('/approval'));
    t.same(
      denials.map((c) => c.path.split('/')[5]),
      ['csr-pending', 'node-csr-bootstrap', 'node-csr-bootstrap', 'csr-proxy', 'csr-serving'],
      "the node's own pending CSRs (kubelet client, kube-proxy, serving) and a bootstrap token's for its name (retried after a conflict); nothing else",
    );
    t.match(denials[0]!.body.status.conditions.at(-1), {
      type: 'Denied',
      status: 'True',
      reason: 'KubebootRevoked',
      message: 'node n1 is revoked (kubeboot node revoke): stolen disk',
    });
    t.same(lines, [
      'node n1 revoked: kubeboot approver approves no certificate of system:node:n1 from now on, kubelet client, kube-proxy or serving (not-revoked)',
      'denied pending CSR csr-pending (reason KubebootRevoked)',
      'denied pending CSR node-csr-bootstrap (reason KubebootRevoked)',
      'denied pending CSR csr-proxy (reason KubebootRevoked)',
      'denied pending CSR csr-serving (reason KubebootRevoked)',
      'CSR csr-approved was already approved: the certificate it gets stays valid until its notAfter',
      'its newest certificate a CSR still shows (csr-issued) stays valid until 2030-01-02T00:00:00Z: a certificate cannot be recalled, it dies then',
      'Node n1 deleted',
    ]);
    t.match(
      stderr,
      /^kubeboot node: warning: kube-controller-manager still approves kubelet client CSRs .*system:nodes may create certificatesigningrequests\/selfnodeclient; remove the grant: kubectl delete clusterrolebinding auto-approve-renewals-for-nodes; until then a revoked node renews or re-joins through it \(docs\/node-identity\.md\)\n$/,
    );
  },
);

t.test('node unrevoke deletes the revocation; a node not revoked is bad input; one an old ConfigMap revokes needs migrating', async (t) => {
  const revoked = mockAdmin(t);
  revoked.on('GET', `${CONFIGMAPS}/revocations`, 404, notFound);
  revoked.on('DELETE', `${REVOCATIONS}/n1`, 200, () => ({ kind: 'Status', status: 'Success' }));
  await unrevokeNode(revoked.client, 'n1');
  t.equal(revoked.calls[1]!.method, 'DELETE');
  const not = mockAdmin(t);
  not.on('GET', `${CONFIGMAPS}/revocations`, 404, notFound);
  not.on('DELETE', `${REVOCATIONS}/n1`, 404, notFound);
  await t.rejects(unrevokeNode(not.client, 'n1'), { message: 'node n1 is not revoked', code: ExitCode.badInput });
  const legacy = mockAdmin(t);
  legacy.on('GET', `${CONFIGMAPS}/revocations`, 200, () => configMap('revocations', '2', { n1: '{"at":"x","reason":""}' }));
  legacy.on('DELETE', `${REVOCATIONS}/n1`, 404, notFound);
  await t.rejects(unrevokeNode(legacy.client, 'n1'), { message: /ConfigMap kubeboot\/revocations.*kubeboot records migrate/ });
});

t.test('node list: identity, newest certificate a CSR shows, who renews, revoked, marked; the cluster text escaped', async (t) => {
  const { client, on } = mockAdmin(t);
  const evil = `evil\x1b[2J${HOSTILE}`;
  on('GET', '/api/v1/nodes', 200, () => ({
    kind: 'NodeList',
    metadata: {},
    items: ['n1', 'n2', 'n3', evil].map((name) => ({ metadata: { name } })),
  }));
  const older = { notBefore: new Date('2029-12-01T00:00:00Z'), notAfter: new Date('2029-12-02T00:00:00Z') };
  const newer = { notBefore: new Date('2029-12-31T00:00:00Z'), notAfter: new Date('2030-01-01T12:00:00Z') };
  const items = [
    await csr({ name: 'csr-abc', username: 'system:node:n1', cn: 'system:node:n1', conditions: approved, cert: older }),
    await csr({ name: 'node-csr-renewed', username: 'system:node:n1', cn: 'system:node:n1', conditions: approved, cert: newer }),
    await csr({ name: 'node-csr-first', username: 'system:bootstrap:abcdef', cn: 'system:node:n2', conditions: approved, cert: newer }),
    await csr({ name: 'csr-xyz', username: 'system:node:n3', cn: 'system:node:n3', conditions: approved, cert: newer }),
  ];
  on('GET', CSRS, 200, () => ({ kind: 'CertificateSigningRequestList', metadata: {}, items }));
  on('GET', REVOCATIONS, 200, () => ({
    kind: 'NodeRevocationList',
    metadata: {},
    items: [
      { metadata: { name: 'gone', creationTimestamp: '2029-12-30T00:00:00Z' }, spec: { reason: HOSTILE } },
      { metadata: { name: 'n3', creationTimestamp: '2029-12-30T01:00:00Z' } },
    ],
  }));
  on('GET', MARKS, 200, () => ({
    kind: 'NodeReplacementList',
    metadata: {},
    items: [{ metadata: { name: 'n2', creationTimestamp: '2029-12-31T10:00:00Z' }, spec: { tokenID: '' } }],
  }));
  on('GET', INVENTORY, 200, () => ({
    kind: 'Inventory',
    metadata: { name: 'inventory' },
    spec: { nodes: { n1: `ips: 10.0.0.1; tpm-ak: ${AK}`, n2: 'ips: 10.0.0.2', spare: `tpm-ek: ${'cd'.repeat(32)}` } },
  }));
  on('GET', '/apis/kubeboot.io/v1alpha1/tpmenrolments', 200, () => ({
    kind: 'TpmEnrolmentList',
    metadata: {},
    // For another EK than the inventory's: stale, so spare is still not enrolled.
    items: [{ metadata: { name: 'spare' }, spec: { ekHash: 'ab'.repeat(32), akName: AK } }],
  }));
  const rows = await listNodes(client);
  t.same(
    rows.map((r) => [r.name, r.registered, r.certificateExpires, r.renewedBy, r.revoked !== null, r.replacement?.at ?? null]),
    [
      [evil, true, null, 'unknown', false, null],
      ['gone', false, null, 'unknown', true, null],
      ['n1', true, '2030-01-01T12:00:00Z', 'kubeboot', false, null],
      ['n2', true, '2030-01-01T12:00:00Z', 'not yet', false, '2029-12-31T10:00:00Z'],
      ['n3', true, '2030-01-01T12:00:00Z', 'kubelet', true, null],
      ['spare', false, null, 'unknown', false, null],
    ],
    'a revoked name without a Node is listed, and a TPM-enrolled one; a revocation without a reason counts as revoked',
  );
  t.same(
    rows.map((r) => [r.name, r.attestation]),
    [
      [evil, 'none'],
      ['gone', 'none'],
      ['n1', `tpm-ak ${AK.slice(0, 16)}…`],
      ['n2', 'none'],
      ['n3', 'none'],
      ['spare', 'tpm-ek only (AK not enrolled yet: challenged at its first join)'],
    ],
    "each name's TPM enrolment from the inventory",
  );
  const fromEk = new Map([['spare', newRecord('tpmenrolments', 'spare', { spec: { ekHash: 'cd'.repeat(32), akName: AK } })]]);
  t.equal(
    attestationOf({ spare: `tpm-ek: ${'cd'.repeat(32)}` }, 'spare', fromEk),
    `tpm-ak ${AK.slice(0, 16)}… (enrolled from tpm-ek)`,
    'an AK enrolled from the EK (tpmenrolments.kubeboot.io) is shown as such',
  );
  const out = renderNodeTable(rows);
  t.equal(out.search(RAW), -1, 'no raw control character');
  const lines = out.slice(0, -1).split('\n');
  t.equal(lines.length, 7, 'a header and six rows: no forged line');
  t.match(lines[0], /^NAME +NODE +IDENTITY +CERTIFICATE EXPIRES +RENEWED BY +REVOKED +REPLACEMENT +TPM$/);
  t.match(lines[1], /^evil\\u001b\[2J\\u001b\[2J\\u001b\[H .* unknown +unknown +no +none$/);
  t.match(lines[2], /^gone +no +system:node:gone +unknown +unknown +since 2029-12-30T00:00:00Z: \\u001b\[2J/);
  t.match(lines[3], /^n1 +yes +system:node:n1 +2030-01-01T12:00:00Z +kubeboot +no +tpm-ak 000babababababab…$/);
  t.match(lines[4], /^n2 +yes .* not yet +no +marked 2029-12-31T10:00:00Z +none$/);
});

t.test('who renews: the kubelet files csr-, kubeboot node-csr-, a bootstrap token only the first issue', async (t) => {
  t.equal(renewerOf('csr-8k2lm', 'system:node:n1', 'n1'), 'kubelet');
  t.equal(renewerOf('node-csr-abc', 'system:node:n1', 'n1'), 'kubeboot');
  t.equal(renewerOf('node-csr-abc', 'system:bootstrap:abcdef', 'n1'), 'not yet');
  t.equal(renewerOf('node-csr-abc', 'kubernetes-admin', 'n1'), 'unknown', 'an admin-made CSR says nothing about renewal');
  t.equal(renewerOf('csr-1', 'system:node:n2', 'n1'), 'unknown');
});
