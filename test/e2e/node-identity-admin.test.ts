// The admin side of node identity against a real control plane: `kubeboot
// token create --node/--pool` writes a binding kubeboot approver's parser
// reads, `token delete` removes token and binding, `node revoke` denies the
// node's pending CSRs of every signer (kubelet client, kube-proxy, serving) and `node list` shows it revoked
// (with the expiry and renewer of the certificate a CSR still shows), `node
// replace` writes the mark the approver claims (bound to the next token made
// for the name), `records migrate` moves the ConfigMap records of an earlier
// release, and no stock or add-on role but the admin's can change a record
// (SubjectAccessReview).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { NodeRow } from '../../agent/admin/node.js';
import { parseBinding, replacementOf } from '../../agent/records/bindings.js';
import { recordsPath, type RecordResource } from '../../agent/records/kinds.js';
import { waitFor } from '../support/admin.js';
import { createNode, installApprover, nodeClient, submitCsr } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient } from '../support/http.js';
import { forbid, kubeboot } from '../support/kubeboot.js';

const KUBELET_CLIENT = { signer: 'kubernetes.io/kube-apiserver-client-kubelet', usages: ['digital signature', 'client auth'] };
const CONFIGMAPS = '/api/v1/namespaces/kubeboot/configmaps';
type Obj = {
  kind: string;
  metadata: { name: string; [k: string]: unknown };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
};

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
  const record = async (resource: RecordResource, name: string) =>
    // biome-ignore lint/suspicious/noExplicitAny: a test reads any field of a record
    await plane.admin.request<any>('GET', `${recordsPath(resource)}/${name}`);
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
    const bound = await record('tokenbindings', id);
    t.equal(bound.status, 200, 'the binding tokenbindings.kubeboot.io/<id> exists');
    t.match(parseBinding(id, bound.body), { kind: 'names', names: ['worker-9'], maxNodes: 1 });
    const secret = await plane.admin.request<Obj>('GET', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`);
    t.equal(secret.status, 200);
    t.equal(bound.body.spec.tokenSecretUID, secret.body.metadata.uid, "the binding names its token's Secret");

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
    t.equal(deleted.stdout, `bootstrap token ${id} and its binding tokenbindings.kubeboot.io/${id} deleted\n`);
    t.equal((await record('tokenbindings', id)).status, 404, 'the binding is gone');
    t.equal((await plane.admin.request('GET', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`)).status, 404);
  });

  t.test('token create --pool binds a prefix and a count; a reserved name or a bad pool is refused before anything is made', async (t) => {
    const { id } = await created(t, ['--pool', 'pool-a-', '--max-nodes', '3']);
    t.match(parseBinding(id, (await record('tokenbindings', id)).body), { kind: 'prefix', prefix: 'pool-a-', maxNodes: 3 });
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
    t.equal((await record('noderevocations', node)).status, 200, 'recorded as noderevocations.kubeboot.io/victim-1');

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
      /^victim-1 +yes +system:node:victim-1 +\S+Z +kubelet +since \S+: disk stolen +none$/,
    );

    const again = await kubeboot(t, ['node', 'unrevoke', node, ...admin]);
    t.equal(again.code, 0, again.stderr);
    t.equal((await record('noderevocations', node)).status, 404, 'unrevoke removes it');
    t.equal((await kubeboot(t, ['node', 'unrevoke', node, ...admin])).code, 2, 'a node not revoked is bad input');
  });

  t.test('node replace writes the mark the approver claims, only for a machine said to be gone', async (t) => {
    await createNode(plane, 'worker-1');
    const unsaid = await kubeboot(t, ['node', 'replace', 'worker-1', ...admin]);
    t.equal(unsaid.code, 2, 'without --old-machine-gone: bad input');
    t.match(unsaid.stderr, /--old-machine-gone: required: .*kubeboot token create --node worker-1-2\) and kubeboot node revoke worker-1/);
    t.equal((await record('nodereplacements', 'worker-1')).status, 404, 'and no mark is written');
    const before = Date.now();
    const result = await kubeboot(t, ['node', 'replace', 'worker-1', '--old-machine-gone', ...admin]);
    t.equal(result.code, 0, result.stderr);
    t.match(result.stdout, 'kubeboot token create --node worker-1');
    const mark = replacementOf((await record('nodereplacements', 'worker-1')).body);
    t.same([mark.claimedBy, mark.tokenId], [null, ''], 'unclaimed, for no token yet');
    t.ok(Date.parse(mark.at) >= Math.floor(before / 1000) * 1000, "marked now, by the API server's clock");
    const token = await kubeboot(t, ['token', 'create', ...admin, '--node', 'worker-1']);
    t.match(token.stderr, 'the replacement mark of node worker-1 is now for this token', 'the new token takes the mark');
    const id = token.stdout.trim().split('.')[0] ?? '';
    forbid(token.stdout.trim().split('.')[1] ?? '');
    t.equal(replacementOf((await record('nodereplacements', 'worker-1')).body).tokenId, id, 'bound to it');
  });

  t.test(
    'records migrate moves the ConfigMap records of an earlier release; --dry-run writes nothing; a second run finds nothing',
    async (t) => {
      const token = await plane.admin.createBootstrapToken();
      const secret = await plane.admin.request<Obj>('GET', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${token.id}`);
      const legacy: Record<string, { data: Record<string, string>; annotations?: Record<string, string> }> = {
        [`token-${token.id}`]: {
          data: { 'token-id': token.id, names: 'mig-1', 'max-nodes': '1' },
          annotations: { 'kubeboot.io/issued': JSON.stringify({ 'mig-1': 'uid-of-its-csr' }) },
        },
        revocations: { data: { 'mig-gone': JSON.stringify({ at: '2026-01-01T00:00:00Z', reason: 'stolen' }) } },
        replacements: {
          data: {
            'mig-open': JSON.stringify({ at: '2026-01-01T00:00:00Z', claimedBy: null }),
            'mig-done': JSON.stringify({ at: '2026-01-01T00:00:00Z', claimedBy: 'uid-x' }),
          },
        },
        inventory: { data: { 'mig-1': 'ips: 10.9.0.1' } },
      };
      for (const [name, { data, annotations }] of Object.entries(legacy))
        expectStatus(
          await plane.admin.request('POST', CONFIGMAPS, {
            apiVersion: 'v1',
            kind: 'ConfigMap',
            metadata: { name, namespace: 'kubeboot', ...(annotations ? { annotations } : {}) },
            data,
          }),
          `legacy ${name}`,
          201,
        );

      const dry = await kubeboot(t, ['records', 'migrate', '--dry-run', ...admin]);
      t.equal(dry.code, 0, dry.stderr);
      t.match(
        dry.stdout,
        `kubeboot/token-${token.id}: would create tokenbindings.kubeboot.io/${token.id}: binding of token ${token.id}: mig-1, 1/1 spent`,
      );
      t.match(dry.stdout, 'kubeboot/replacements: the mark of mig-done was claimed (CSR uid-x); not moved');
      t.equal((await record('tokenbindings', token.id)).status, 404, 'the dry run wrote nothing');
      t.equal((await plane.admin.request('GET', `${CONFIGMAPS}/revocations`)).status, 200, 'and deleted nothing');

      const run = await kubeboot(t, ['records', 'migrate', ...admin]);
      t.equal(run.code, 0, run.stderr);
      t.match(run.stdout, `kubeboot/token-${token.id}: deleted the ConfigMap`);
      const bound = (await record('tokenbindings', token.id)).body;
      t.match(parseBinding(token.id, bound), { kind: 'names', names: ['mig-1'], maxNodes: 1 }, 'the binding, usable');
      t.equal(bound.spec.tokenSecretUID, secret.body.metadata.uid, "naming its token's Secret");
      t.same(bound.status.issued, [{ node: 'mig-1', csrUID: 'uid-of-its-csr' }], 'its spent names kept');
      t.same((await record('nodeclaims', 'mig-1')).body.spec, { tokenID: token.id, csrUID: 'uid-of-its-csr' }, 'and claimed');
      t.match((await record('noderevocations', 'mig-gone')).body.spec.reason, 'stolen (revoked 2026-01-01T00:00:00Z');
      t.equal((await record('nodereplacements', 'mig-open')).status, 200, 'an open mark moves');
      t.equal((await record('nodereplacements', 'mig-done')).status, 404, 'a claimed one does not');
      t.same((await record('inventories', 'inventory')).body.spec.nodes, { 'mig-1': 'ips: 10.9.0.1' });
      for (const name of Object.keys(legacy))
        t.equal((await plane.admin.request('GET', `${CONFIGMAPS}/${name}`)).status, 404, `ConfigMap kubeboot/${name} deleted`);

      const again = await kubeboot(t, ['records', 'migrate', ...admin]);
      t.equal(again.stdout, 'nothing to migrate: no ConfigMap records in namespace kubeboot\n', 'idempotent');
    },
  );

  t.test(
    "no stock role but the admin's and kube-controller-manager's wildcard controllers, and no add-on role, may change a record (SubjectAccessReview)",
    async (t) => {
      const RBAC = '/apis/rbac.authorization.k8s.io/v1';
      // Roles as add-ons install them: trust-manager writes ConfigMaps in every namespace, istiod its
      // config and certificates, a GitOps controller anything in the core and apps groups.
      const addOns = [
        { name: 'test:trust-manager-like', rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['*'] }] },
        {
          name: 'test:istiod-like',
          rules: [
            { apiGroups: [''], resources: ['configmaps', 'secrets', 'events'], verbs: ['*'] },
            { apiGroups: ['networking.istio.io', 'security.istio.io', 'admissionregistration.k8s.io'], resources: ['*'], verbs: ['*'] },
            {
              apiGroups: ['certificates.k8s.io'],
              resources: ['certificatesigningrequests', 'certificatesigningrequests/approval'],
              verbs: ['*'],
            },
          ],
        },
        { name: 'test:gitops-like', rules: [{ apiGroups: ['', 'apps'], resources: ['*'], verbs: ['*'] }] },
      ];
      for (const role of addOns)
        expectStatus(
          await plane.admin.request('POST', `${RBAC}/clusterroles`, {
            apiVersion: 'rbac.authorization.k8s.io/v1',
            kind: 'ClusterRole',
            metadata: { name: role.name },
            rules: role.rules,
          }),
          role.name,
          201,
          409,
        );
      const all = (
        await plane.admin.request<{
          items: (Obj & { rules?: { apiGroups?: string[]; resources?: string[]; verbs: string[]; resourceNames?: string[] }[] })[];
        }>('GET', `${RBAC}/clusterroles`)
      ).body.items;
      const stock = [
        'admin',
        'edit',
        'view',
        'system:node',
        'system:kube-proxy',
        'system:node-bootstrapper',
        'system:kube-controller-manager',
        'system:kube-scheduler',
        'system:certificates.k8s.io:certificatesigningrequests:nodeclient',
        'kubeboot:approver',
        'kubeboot:approver-records',
        'kubeboot:tpm-beacon-reader',
      ];
      const roles = all.filter(
        (r) => r.metadata.name.startsWith('system:controller:') || stock.includes(r.metadata.name) || r.metadata.name.startsWith('test:'),
      );
      t.ok(
        roles.filter((r) => r.metadata.name.startsWith('system:controller:')).length >= 20,
        `${roles.length} roles swept, the stock controllers among them`,
      );
      const review = async (user: string, attrs: Record<string, string>) =>
        (
          await plane.admin.request<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SubjectAccessReview',
            spec: { user, groups: ['system:authenticated'], resourceAttributes: attrs },
          })
        ).body.status.allowed;
      const findings: Record<string, string[]> = {};
      for (const [i, role] of roles.entries()) {
        const user = `records-sweep-${i}`;
        expectStatus(
          await plane.admin.request('POST', `${RBAC}/clusterrolebindings`, {
            apiVersion: 'rbac.authorization.k8s.io/v1',
            kind: 'ClusterRoleBinding',
            metadata: { name: user },
            roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role.metadata.name },
            subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
          }),
          user,
          201,
        );
        // The binding is in force before a "no" counts: the role's first resource rule answers yes.
        const rule = (role.rules ?? []).find((r) => r.resources?.length && r.verbs.length);
        if (rule !== undefined) {
          const [resource = '', subresource = ''] = (rule.resources![0] === '*' ? 'pods' : rule.resources![0]!).split('/');
          const probe = {
            group: rule.apiGroups?.[0] === '*' ? '' : (rule.apiGroups?.[0] ?? ''),
            resource,
            subresource,
            verb: rule.verbs[0] === '*' ? 'get' : rule.verbs[0]!,
            ...(rule.resourceNames?.[0] ? { name: rule.resourceNames[0] } : {}),
          };
          await waitFor(`${role.metadata.name} bound`, async () => ((await review(user, probe)) ? true : undefined));
        }
        for (const resource of [
          'tokenbindings',
          'nodeclaims',
          'nodereplacements',
          'noderevocations',
          'inventories',
          'tpmenrolments',
          'tpmbeacons',
        ])
          for (const subresource of ['', 'status'])
            for (const verb of ['create', 'update', 'patch', 'delete', 'deletecollection'])
              if (await review(user, { group: 'kubeboot.io', resource, subresource, verb }))
                (findings[role.metadata.name] ??= []).push(`${verb} ${resource}${subresource ? `/${subresource}` : ''}`);
      }
      const summary = Object.fromEntries(
        Object.entries(findings).map(([role, what]) => [role, [...new Set(what.map((w) => w.split(' ')[0]))].sort()]),
      );
      t.comment(JSON.stringify(summary));
      t.same(
        summary,
        {
          // kube-controller-manager's wildcard controllers (docs/node-identity.md): who holds them holds the signing key.
          'system:controller:generic-garbage-collector': ['delete', 'patch', 'update'],
          'system:controller:namespace-controller': ['delete', 'deletecollection'],
          // The approver: what it spends, and nothing of what the admin writes.
          'kubeboot:approver-records': ['create', 'patch', 'update'],
        },
        'nobody else',
      );
      t.same(
        [...findings['kubeboot:approver-records']!].sort(),
        [
          'create nodeclaims',
          'create tpmbeacons',
          'create tpmenrolments',
          'patch nodereplacements/status',
          'patch tokenbindings/status',
          'update nodeclaims',
          'update nodereplacements/status',
          'update tokenbindings/status',
          'update tpmbeacons',
          'update tpmenrolments',
        ],
        'the approver writes claims, statuses, TPM enrolments and the beacon only: never a binding, a mark, a revocation or the inventory',
      );
    },
  );
}
