// The admin side of node identity against a real control plane: `kubeboot
// token create --node/--pool` writes a binding kubeboot approver's parser
// reads, `token delete` removes token and binding, `node revoke` denies the
// node's pending CSRs of every signer (kubelet client, kube-proxy, serving) and `node list` shows it revoked
// (with the expiry and renewer of the certificate a CSR still shows), `node
// replace` writes the mark the approver claims.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { NodeRow } from '../../agent/join/node.js';
import { parseBinding, parseReplacements, parseRevocations } from '../../agent/kube/join-bindings.js';
import { waitFor } from '../support/admin.js';
import { createNode, installApprover, nodeClient, submitCsr } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient } from '../support/http.js';
import { forbid, kubeboot } from '../support/kubeboot.js';

const KUBELET_CLIENT = { signer: 'kubernetes.io/kube-apiserver-client-kubelet', usages: ['digital signature', 'client auth'] };
const CONFIGMAPS = '/api/v1/namespaces/kubeboot/configmaps';

const plane = await controlPlaneOrSkip(t, { name: 'node-identity-admin' });
if (plane) {
  const admin = ['--kubeconfig', plane.adminKubeconfig];
  await installApprover(plane, mkdtempSync(join(tmpdir(), 'kubeboot-node-identity-')));
  // The approver's manifests create the namespace `kubeboot` once they carry it; until then the test does.
  const ns = await plane.admin.request('GET', '/api/v1/namespaces/kubeboot');
  if (ns.status === 404) {
    t.comment('packaging/manifests/approver/ has no Namespace kubeboot yet: created here');
    expectStatus(
      await plane.admin.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kubeboot' } }),
      'create namespace kubeboot',
      201,
    );
  }
  const configMap = async (name: string) =>
    await plane.admin.request<{ metadata: { annotations?: Record<string, string> }; data?: Record<string, string> }>(
      'GET',
      `${CONFIGMAPS}/${name}`,
    );
  const created = async (t: Test, args: string[]) => {
    const result = await kubeboot(t, ['token', 'create', ...admin, ...args]);
    t.equal(result.code, 0, `exit 0; stderr: ${result.stderr}`);
    const m = /^([a-z0-9]{6})\.([a-z0-9]{16})$/.exec(result.stdout.trim());
    t.ok(m, 'prints only the token');
    forbid(m![2]!);
    return { id: m![1]!, result };
  };

  t.test('token create --node writes a binding the approver parses; token list shows it; token delete removes both', async (t) => {
    const { id } = await created(t, ['--node', 'worker-9', '--ttl', '10m']);
    const cm = await configMap(`token-${id}`);
    t.equal(cm.status, 200, 'the binding kubeboot/token-<id> exists');
    t.match(parseBinding(id, cm.body), { kind: 'names', names: ['worker-9'], maxNodes: 1, issued: {} });
    t.equal((await plane.admin.request('GET', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`)).status, 200);

    const list = await kubeboot(t, ['token', 'list', ...admin]);
    t.match(
      list.stdout.split('\n').find((l) => l.startsWith(id)),
      /\s+worker-9\s+0\/1\s*$/,
    );
    const json = JSON.parse((await kubeboot(t, ['token', 'list', ...admin, '--output', 'json'])).stdout) as { id: string }[];
    t.match(
      json.find((e) => e.id === id),
      { binding: { kind: 'names', names: ['worker-9'], maxNodes: 1 } },
    );

    const deleted = await kubeboot(t, ['token', 'delete', id, ...admin]);
    t.equal(deleted.code, 0, deleted.stderr);
    t.equal(deleted.stdout, `bootstrap token ${id} and its binding kubeboot/token-${id} deleted\n`);
    t.equal((await configMap(`token-${id}`)).status, 404, 'the binding is gone');
    t.equal((await plane.admin.request('GET', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`)).status, 404);
  });

  t.test('token create --pool binds a prefix and a count; a reserved name or a bad pool is refused before anything is made', async (t) => {
    const { id } = await created(t, ['--pool', 'pool-a-', '--max-nodes', '3']);
    t.match(parseBinding(id, (await configMap(`token-${id}`)).body), { kind: 'prefix', prefix: 'pool-a-', maxNodes: 3 });
    t.equal((await kubeboot(t, ['token', 'delete', id, ...admin])).code, 0);
    const reserved = await kubeboot(t, ['token', 'create', ...admin, '--node', 'kubernetes.default.svc']);
    t.equal(reserved.code, 2);
    t.equal(reserved.stderr, "kubeboot: command line: --node: kubernetes.default.svc is the API server's Service name\n");
    const pool = await kubeboot(t, ['token', 'create', ...admin, '--pool', 'pool-b-']);
    t.equal(pool.code, 2);
    t.equal(pool.stderr, 'kubeboot: command line: --max-nodes: required with --pool: how many nodes the token may join\n');
  });

  t.test('node revoke denies a pending kubelet client CSR of the node; node list shows it revoked', async (t) => {
    const node = 'victim-1';
    await createNode(plane, node);
    // A certificate the node holds now: its renewal, approved here by the admin (no approver runs in this file), issued by the signer.
    const kubelet = await nodeClient(plane, node);
    const renewal = await submitCsr(kubelet, { cn: `system:node:${node}`, o: ['system:nodes'], ...KUBELET_CLIENT, name: 'csr-victim' });
    await kubelet.close();
    await plane.admin.approveCsr(renewal);
    await waitFor('the renewal to be issued', async () => {
      const csr = await plane.admin.getCsr(renewal);
      return csr?.status?.certificate ? true : undefined;
    });
    // A pending one: requested as system:node:victim-1 without group system:nodes, so nothing auto-approves it.
    expectStatus(
      await plane.admin.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: 'test:victim-may-create-csrs' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:node-bootstrapper' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: `system:node:${node}` }],
      }),
      'bind system:node-bootstrapper',
      201,
    );
    const loose = kubeClient({
      server: plane.server,
      caPem: plane.caPem,
      ...(await plane.mintClientCert({ commonName: `system:node:${node}` })),
    });
    const pending = await waitFor('RBAC to let the requester create CSRs', async () =>
      submitCsr(loose, { cn: `system:node:${node}`, o: ['system:nodes'], ...KUBELET_CLIENT, name: 'csr-pending' }).catch(() => undefined),
    );
    await loose.close();
    t.equal((await plane.admin.getCsr(pending))?.status?.conditions, undefined, 'pending: nothing approved it');
    // Its kube-proxy and serving CSRs, pending too (no approver runs here): a revocation covers every signer (issue 35).
    const asNode = await nodeClient(plane, node);
    const proxy = await submitCsr(asNode, { cn: 'system:kube-proxy', name: 'proxy-pending' });
    const serving = await submitCsr(asNode, {
      cn: `system:node:${node}`,
      o: ['system:nodes'],
      dns: [node],
      signer: 'kubernetes.io/kubelet-serving',
      usages: ['digital signature', 'server auth'],
      name: 'serving-pending',
    });
    await asNode.close();

    const revoked = await kubeboot(t, ['node', 'revoke', node, '--reason', 'disk stolen', ...admin]);
    t.equal(revoked.code, 0, revoked.stderr);
    t.match(revoked.stdout, `denied pending CSR ${pending} (reason KubebootRevoked)`);
    for (const other of [proxy, serving]) {
      t.match(revoked.stdout, `denied pending CSR ${other} (reason KubebootRevoked)`);
      const conditions = (await plane.admin.getCsr(other))?.status?.conditions ?? [];
      t.match(
        conditions.find((c: { type: string }) => c.type === 'Denied'),
        { reason: 'KubebootRevoked' },
        `${other}: denied`,
      );
    }
    t.match(revoked.stdout, new RegExp(`its newest certificate a CSR still shows \\(${renewal}\\) stays valid until \\d{4}-`));
    t.notMatch(
      revoked.stderr,
      /kube-controller-manager still approves/,
      'no warning: the shipped RBAC binds no auto-approval the revocation would not hold against',
    );
    const denied = (await plane.admin.getCsr(pending))?.status?.conditions?.find((c: { type: string }) => c.type === 'Denied');
    t.match(denied, { status: 'True', reason: 'KubebootRevoked', message: 'node victim-1 is revoked (kubeboot node revoke): disk stolen' });
    t.ok(parseRevocations((await configMap('revocations')).body.data).has(node), 'recorded in kubeboot/revocations');

    const list = await kubeboot(t, ['node', 'list', ...admin, '--output', 'json']);
    t.equal(list.code, 0, list.stderr);
    const row = (JSON.parse(list.stdout) as NodeRow[]).find((r) => r.name === node);
    t.match(row, {
      identity: `system:node:${node}`,
      registered: true,
      csr: renewal,
      renewedBy: 'kubelet',
      revoked: { reason: 'disk stolen' },
      replacement: null,
    });
    t.match(row?.certificateExpires, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
    const text = await kubeboot(t, ['node', 'list', ...admin]);
    t.match(
      text.stdout.split('\n').find((l) => l.startsWith(node)),
      /^victim-1 +yes +system:node:victim-1 +\S+Z +kubelet +since \S+: disk stolen$/,
    );

    const again = await kubeboot(t, ['node', 'unrevoke', node, ...admin]);
    t.equal(again.code, 0, again.stderr);
    t.notOk(parseRevocations((await configMap('revocations')).body.data).has(node), 'unrevoke removes the entry');
    t.equal((await kubeboot(t, ['node', 'unrevoke', node, ...admin])).code, 2, 'a node not revoked is bad input');
  });

  t.test('node replace writes the mark the approver claims', async (t) => {
    await createNode(plane, 'worker-1');
    const before = Date.now();
    const result = await kubeboot(t, ['node', 'replace', 'worker-1', ...admin]);
    t.equal(result.code, 0, result.stderr);
    t.match(result.stdout, 'kubeboot token create --node worker-1');
    const mark = parseReplacements((await configMap('replacements')).body.data).get('worker-1');
    t.equal(mark?.claimedBy, null);
    t.ok(Date.parse(mark?.at ?? '') >= Math.floor(before / 1000) * 1000, 'marked now');
    const token = await kubeboot(t, ['token', 'create', ...admin, '--node', 'worker-1']);
    t.equal(token.stderr, '', 'a marked Node draws no takeover note');
    forbid(token.stdout.trim().split('.')[1] ?? '');
  });
}
