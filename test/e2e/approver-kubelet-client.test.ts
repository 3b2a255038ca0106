// `kubeboot approver --approve-kubelet-client` against a real control plane
// upgraded from a kubeboot release that still bound kube-controller-manager's
// auto-approval: the approver names those bindings, they are deleted as it
// tells the operator to, and from then on a bootstrap
// token gets exactly the names its binding allows, once; never a live
// Node's name unless it is marked as being replaced (then the first CSR
// after the mark wins), never a control-plane Node's, an API server or
// Service name; a name spent by one token is refused to every other; a node
// renews its own identity until it is revoked. The records are kubeboot.io
// objects the approver follows through informers: each test waits for the
// approver to have seen the record it wrote (its log line) before it acts.
import { setTimeout as delay } from 'node:timers/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { newRecord, recordsPath } from '../../agent/records/kinds.js';
import type { KubeObject } from '../support/admin.js';
import {
  approvals,
  createNode,
  csrEvents,
  installApprover,
  KCM_BINDINGS,
  mayCreateCsr,
  nodeClient,
  startApprover,
  submitCsr,
  CSRS,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from '../support/http.js';
import type { Running } from '../support/kubeboot.js';
import { freePort } from '../support/processes.js';

const KUBELET_CLIENT = {
  signer: 'kubernetes.io/kube-apiserver-client-kubelet',
  // As the kubelet's bootstrap asks, with its ECDSA key.
  usages: ['digital signature', 'key encipherment', 'client auth'],
  o: ['system:nodes'],
};

const plane = await controlPlaneOrSkip(t, { name: 'approver-kubelet-client' });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-kubelet-client-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  // What an earlier release's tls-bootstrap-rbac.yaml made (this one's has neither).
  for (const [name, role, group] of [
    [KCM_BINDINGS[0], 'nodeclient', 'system:bootstrappers'],
    [KCM_BINDINGS[1], 'selfnodeclient', 'system:nodes'],
  ] as const)
    expectStatus(
      await plane.admin.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name },
        roleRef: {
          apiGroup: 'rbac.authorization.k8s.io',
          kind: 'ClusterRole',
          name: `system:certificates.k8s.io:certificatesigningrequests:${role}`,
        },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: group }],
      }),
      `the earlier release's ${name}`,
      201,
    );
  const config = await installApprover(plane, dir);
  const listen = await freePort();
  const approver: Running = startApprover(config, [
    '--approve-kubelet-client',
    '--resync-period',
    '10m',
    '--approver-listen',
    `127.0.0.1:${listen}`,
  ]);
  await approver.waitForOutput(/became the leader/, 60_000);
  t.teardown(async () => {
    approver.child.kill('SIGTERM');
    await approver.done;
  });
  const clients: KubeClient[] = [];
  t.teardown(() => Promise.all(clients.map((c) => c.close())));

  /** The approver's informers have `resource/name` at the version written (it logs each record it sees). */
  const seen = (resource: string, name: string) =>
    approver.waitForOutput(new RegExp(`record seen: ${resource}\\.kubeboot\\.io/${name.replace(/[.]/g, '\\.')} `), 30_000);
  /** A new bootstrap token, and its binding as `kubeboot token create --node/--pool` writes it (none for `unbound`). */
  const tokenFor = async (spec: { names: string[] } | { prefix: string; maxNodes: number } | 'unbound') => {
    const token = await plane.admin.createBootstrapToken(spec === 'unbound' ? {} : { bind: spec });
    if (spec !== 'unbound') await seen('tokenbindings', token.id);
    const client = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
    clients.push(client);
    return { ...token, client };
  };
  /** A node's first kubelet client CSR, filed with a bootstrap token. */
  const ask = (by: KubeClient, node: string) =>
    submitCsr(by, { ...KUBELET_CLIENT, cn: `system:node:${node}`, name: `kc-${node.slice(0, 20)}` });
  const issued = (name: string) =>
    plane.admin.waitFor(`CSR ${name} issued`, async () => {
      const csr = await plane.admin.getCsr(name);
      return csr?.status?.certificate ? csr : undefined;
    });
  /** The approver's Event naming `rule`; the CSR is then still neither approved nor denied. */
  const refused = async (name: string, rule: string, what: RegExp = /./) => {
    const event = await plane.admin.waitFor(`Event on ${name} naming ${rule}`, async () =>
      (await csrEvents(plane, name)).find((e) => e.message.includes(`kubelet-client rule ${rule}:`) && what.test(e.message)),
    );
    const csr = await plane.admin.getCsr(name);
    return { message: event.message, conditions: (csr?.status?.conditions ?? []) as KubeObject[] };
  };
  /** Marks a node as being replaced for a token, as `kubeboot node replace NAME --for-token ID` does; waits until the approver has it. */
  const mark = async (node: string, tokenId: string) => {
    const body = newRecord('nodereplacements', node, { spec: { tokenID: tokenId } });
    expectStatus(await plane.admin.request('POST', recordsPath('nodereplacements'), body), `mark ${node}`, 201);
    await seen('nodereplacements', node);
  };
  /** Revokes a node, as `kubeboot node revoke` records it; waits until the approver has it. */
  const revoke = async (node: string, reason: string) => {
    const body = newRecord('noderevocations', node, { spec: { reason } });
    expectStatus(await plane.admin.request('POST', recordsPath('noderevocations'), body), `revoke ${node}`, 201);
    await seen('noderevocations', node);
  };
  const readyz = async () => {
    const res = await request(`http://127.0.0.1:${listen}/readyz`);
    return { status: res.statusCode, body: await res.body.text() };
  };
  const counts = { approved: 0, refused: 0 };

  t.test("on start it names kube-controller-manager's node client bindings, and the command that deletes them", async (t) => {
    const command = `kubectl delete clusterrolebinding ${KCM_BINDINGS.join(' ')}`;
    t.match(
      approver.output(),
      `the authorizer says system:bootstrappers may create certificatesigningrequests/nodeclient, system:nodes may create certificatesigningrequests/selfnodeclient; remove the grant: ${command}`,
      'a warning at start, from the authorizer, naming the bindings found',
    );
    const ready = await readyz();
    t.equal(ready.status, 200, 'still ready: it approves, it is just not the only one');
    t.match(ready.body, `kubelet client approval: on; kube-controller-manager still approves kubelet client CSRs`, '/readyz says so');
    t.match(ready.body, command, 'with the command');
  });

  t.test("kube-controller-manager's bindings deleted, as the approver says", async (t) => {
    for (const name of KCM_BINDINGS)
      expectStatus(await plane.admin.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`), name, 200);
    const review = (user: string, groups: readonly string[], subresource: string) => mayCreateCsr(plane, user, groups, subresource);
    const bootstrapper = ['system:bootstrap:abcdef', ['system:bootstrappers', 'system:authenticated']] as const;
    const node = ['system:node:w', ['system:nodes', 'system:authenticated']] as const;
    await plane.admin.waitFor('nodeclient no longer granted', async () =>
      !(await review(...bootstrapper, 'nodeclient')) && !(await review(...node, 'selfnodeclient')) ? true : undefined,
    );
    t.equal(await review(...bootstrapper, 'kubebootnodeclient'), true, 'kubeboot grants its own subresource to bootstrappers');
    t.equal(await review(...node, 'kubebootselfnodeclient'), true, 'and its renewal subresource to nodes');
  });

  t.test('a node-bound token gets exactly its name, once', async (t) => {
    const token = await tokenFor({ names: ['bound-1'] });
    const first = await ask(token.client, 'bound-1');
    const csr = await issued(first);
    counts.approved++;
    t.match(approvals(csr)[0], { reason: 'KubebootApprover', message: /kubelet-client: every rule passed/ }, 'approved by kubeboot');
    const binding = (await plane.admin.request<KubeObject>('GET', `${recordsPath('tokenbindings')}/${token.id}`)).body;
    t.same(binding.status.issued, [{ node: 'bound-1', csrUID: csr.metadata.uid }], 'the name is spent on that CSR');
    const claim = (await plane.admin.request<KubeObject>('GET', `${recordsPath('nodeclaims')}/bound-1`)).body;
    t.same(claim.spec, { tokenID: token.id, csrUID: csr.metadata.uid }, 'and claimed across every token');

    const other = await refused(await ask(token.client, 'bound-2'), 'token-bound');
    const again = await refused(await ask(token.client, 'bound-1'), 'token-bound');
    counts.refused += 2;
    t.match(other.message, `token ${token.id} is spent: it joined 1 of its 1 node(s)`, 'another name: refused');
    t.match(again.message, `token ${token.id} was already spent on bound-1`, 'its own name with another key: refused');
    t.same([other.conditions, again.conditions], [[], []], 'both left pending, nothing approved them');
  });

  t.test('a pool token (prefix, max-nodes 2) gets two names, then no more', async (t) => {
    const token = await tokenFor({ prefix: 'pool-', maxNodes: 2 });
    for (const node of ['pool-a', 'pool-b']) t.ok((await issued(await ask(token.client, node))).status.certificate, `${node} issued`);
    counts.approved += 2;
    const third = await refused(await ask(token.client, 'pool-c'), 'token-bound');
    counts.refused++;
    t.match(third.message, 'it joined 2 of its 2 node(s)', 'the third is refused');
    t.same(third.conditions, []);
    const outside = await refused(await tokenFor({ prefix: 'pool-', maxNodes: 2 }).then((o) => ask(o.client, 'web-1')), 'token-bound');
    counts.refused++;
    t.match(outside.message, 'joins only names pool-*', 'a name outside the prefix is refused');
  });

  t.test("a live Node's name: refused until it is marked as being replaced; then the first CSR after the mark wins", async (t) => {
    await createNode(plane, 'taken');
    const early = await tokenFor({ names: ['taken'] });
    const before = await ask(early.client, 'taken');
    t.match((await refused(before, 'no-takeover')).message, 'Node taken exists', 'no mark: refused');
    counts.refused++;
    // creationTimestamp has whole seconds: the mark comes in a later second than the CSR made before it.
    await delay(1_100);
    await mark('taken', early.id);
    // Touch the early CSR, so the approver looks at it again now that the mark exists.
    const csrPath = `${CSRS}/${before}`;
    const got = (await plane.admin.request<KubeObject>('GET', csrPath)).body;
    got.metadata.labels = { touched: 'yes' };
    expectStatus(await plane.admin.request('PUT', csrPath, got), 'label the early CSR', 200);
    t.match(
      (await refused(before, 'no-takeover', /before it was marked/)).message,
      'made before it was marked',
      'a CSR pending from before the mark never wins it',
    );

    const winner = await issued(await ask(early.client, 'taken'));
    counts.approved++;
    const marked = (await plane.admin.request<KubeObject>('GET', `${recordsPath('nodereplacements')}/taken`)).body;
    t.equal(marked.status.claimedBy, winner.metadata.uid, 'the first CSR after the mark is issued and claims it');
    const second = await refused(await ask(early.client, 'taken'), 'token-bound');
    counts.refused++;
    t.match(second.message, `token ${early.id} was already spent on taken`, 'a second one of the same token is refused');
    const other = await refused(await ask((await tokenFor({ names: ['taken'] })).client, 'taken'), 'token-bound');
    counts.refused++;
    t.match(other.message, `taken was already spent on token ${early.id}`, 'the name is spent for every other token too');
  });

  t.test('a control-plane Node is never issued to a bootstrap token, even with a mark', async (t) => {
    const node = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'cp-1', labels: { 'node-role.kubernetes.io/control-plane': '' } } };
    expectStatus(await plane.admin.request('POST', '/api/v1/nodes', node), 'create cp-1', 201);
    const token = await tokenFor({ names: ['cp-1'] });
    await mark('cp-1', token.id);
    const cp = await refused(await ask(token.client, 'cp-1'), 'not-control-plane');
    counts.refused++;
    t.match(cp.message, 'node-role.kubernetes.io/control-plane');
    t.same(cp.conditions, []);
  });

  t.test("the API server's and the local host's names are never a node's", async (t) => {
    const token = await tokenFor({ names: ['kubernetes.default.svc', 'localhost'] });
    for (const name of ['kubernetes.default.svc', 'localhost']) {
      const r = await refused(await ask(token.client, name), 'reserved-names');
      counts.refused++;
      t.same(r.conditions, [], `${name}: refused, though its binding names it`);
    }
  });

  t.test('a node renews its own identity, until it is revoked', async (t) => {
    const renewer = await nodeClient(plane, 'renewer');
    clients.push(renewer);
    const renewal = await issued(await submitCsr(renewer, { ...KUBELET_CLIENT, cn: 'system:node:renewer', name: 'renew' }));
    counts.approved++;
    t.match(approvals(renewal)[0]?.message, /may create certificatesigningrequests\/kubebootselfnodeclient/, 'approved as a renewal');
    await revoke('renewer', 'machine stolen');
    const after = await refused(await submitCsr(renewer, { ...KUBELET_CLIENT, cn: 'system:node:renewer', name: 'renew' }), 'not-revoked');
    counts.refused++;
    t.match(after.message, 'node renewer was revoked');
    t.same(after.conditions, []);
  });

  t.test('a token kubeboot did not bind is refused', async (t) => {
    const r = await refused(await ask((await tokenFor('unbound')).client, 'stray-1'), 'token-bound');
    counts.refused++;
    t.match(r.message, 'has no binding tokenbindings.kubeboot.io/');
    t.same(r.conditions, []);
  });

  t.test('counts', async (t) => {
    t.comment(`issued ${counts.approved}, refused ${counts.refused}`);
    t.same(counts, { approved: 5, refused: 12 });
    t.notMatch(approver.output(), 'could not decide on CSR', 'every record was readable: no decision failed');
  });
}
