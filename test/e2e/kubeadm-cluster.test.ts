// A cluster whose side kubeadm made, as it is: none of kubeboot's manifests,
// no cluster-info of the suite's and no kubeboot approver; the real kubeadm
// (v1.34.4, built by test/controlplane/build.sh) runs its bootstrap-token,
// upload-config and kube-proxy add-on phases against the plane. kubeboot's
// admin commands find that out: `kubeboot token create` makes a token in
// kubeadm's group (which alone kubeadm's RBAC serves), and the line
// `kubeboot join-command` prints joins a node whose kubelet credential
// kube-controller-manager approves through kubeadm's bindings, with no
// kube-proxy CSR (kubeadm runs kube-proxy as a DaemonSet).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { parse, stringify } from 'yaml';
import { caCertHash } from '../../agent/pki/pin.js';
import { type BootstrapToken, waitFor } from '../support/admin.js';
import { controlPlaneBinaries } from '../support/binaries.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient } from '../support/http.js';
import { forbid, kubeboot, nodeLayout } from '../support/kubeboot.js';
import { writeKubeconfig } from '../support/kubeconfig.js';

const run = promisify(execFile);
const KUBEADM_GROUP = 'system:bootstrappers:kubeadm:default-node-token';
const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
const TOKEN = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;
const JOIN_LINE = /^kubeboot bootstrap --server (\S+) --token ([a-z0-9]{6})\.([a-z0-9]{16}) --ca-cert-hash (sha256:[0-9a-f]{64})( .*)?$/;
const CRBS = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';

// kubeadm's kube-proxy DaemonSet runs privileged, which kube-apiserver admits only with --allow-privileged (kubeadm sets it).
const plane = await controlPlaneOrSkip(t, {
  name: 'kubeadm',
  manifests: false,
  kubeletApprover: false,
  apiserverFlags: ['--allow-privileged=true'],
});
if (plane) {
  const { kubeadm } = await controlPlaneBinaries();
  const work = mkdtempSync(join(tmpdir(), 'kubeboot-kubeadm-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const admin = ['--kubeconfig', plane.adminKubeconfig];
  const port = Number(new URL(plane.server).port);

  // kubeadm's own first token, as `kubeadm init` makes one; kept out of every line kubeboot prints.
  const kubeadmToken = 'abcdef.kubeadmtoken0123';
  forbid(kubeadmToken.slice(7));
  const config = join(work, 'kubeadm.yaml');
  await writeFile(
    config,
    [
      {
        apiVersion: 'kubeadm.k8s.io/v1beta4',
        kind: 'InitConfiguration',
        bootstrapTokens: [{ token: kubeadmToken, ttl: '1h0m0s', description: "kubeadm's own" }],
        // kubeadm refuses a loopback advertise address; nothing is served on this one (TEST-NET-1).
        localAPIEndpoint: { advertiseAddress: '192.0.2.10', bindPort: port },
        nodeRegistration: { name: 'kubeadm-control-plane', criSocket: 'unix:///run/containerd/containerd.sock' },
      },
      {
        apiVersion: 'kubeadm.k8s.io/v1beta4',
        kind: 'ClusterConfiguration',
        kubernetesVersion: plane.version,
        controlPlaneEndpoint: `127.0.0.1:${port}`,
        // An empty directory: kubeadm looks for an external CA there, never at the host's /etc/kubernetes/pki.
        certificatesDir: join(work, 'pki'),
        networking: { podSubnet: '10.244.0.0/16', serviceSubnet: '10.96.0.0/16' },
      },
    ]
      .map((doc) => stringify(doc))
      .join('---\n'),
  );
  const phase = async (...args: string[]) => {
    const out = await run(kubeadm, ['init', 'phase', ...args, '--config', config, '--kubeconfig', plane.adminKubeconfig], {
      env: { PATH: process.env.PATH, HOME: work },
      timeout: 120_000,
    });
    return out.stdout + out.stderr;
  };
  const began = Date.now();
  await phase('bootstrap-token', '--skip-token-print');
  await phase('upload-config', 'kubeadm');
  await phase('addon', 'kube-proxy');
  t.comment(`kubeadm's phases took ${Date.now() - began} ms`);

  const get = async (path: string) => (await plane.admin.request<Record<string, unknown>>('GET', path)).status;
  /** The answer of a SelfSubjectAccessReview made with `token`. */
  const tokenMay = async (token: string, attributes: Record<string, string>) => {
    const client = kubeClient({ server: plane.server, caPem: plane.caPem, token });
    try {
      const res = await client.request<{ status?: { allowed?: boolean } }>(
        'POST',
        '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
        { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: attributes } },
      );
      return res.status === 201 ? res.body.status?.allowed === true : undefined;
    } finally {
      await client.close();
    }
  };
  const mayCreateCsr = { group: 'certificates.k8s.io', resource: 'certificatesigningrequests', verb: 'create' };
  const waitAuthenticates = (token: string) =>
    waitFor('the new token to authenticate', async () => ((await tokenMay(token, mayCreateCsr)) === undefined ? undefined : true), 30_000);
  const secretGroups = async (id: string) => {
    const secret = await plane.admin.request<{ data: Record<string, string> }>(
      'GET',
      `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`,
    );
    expectStatus(secret, `get bootstrap token ${id}`, 200);
    return Buffer.from(secret.body.data['auth-extra-groups'] ?? '', 'base64').toString();
  };
  const created = async (t: Test, args: string[], kubeconfig = plane.adminKubeconfig) => {
    const result = await kubeboot(t, ['token', 'create', '--kubeconfig', kubeconfig, '--ttl', '10m', ...args]);
    t.equal(result.code, 0, `exit 0; stderr: ${result.stderr}`);
    const m = TOKEN.exec(result.stdout.trim());
    t.ok(m, 'prints only the token');
    forbid(m![2]!);
    return { token: result.stdout.trim(), id: m![1]!, stderr: result.stderr };
  };

  t.test('kubeadm made the cluster side: its RBAC, its cluster-info, its kube-proxy DaemonSet, and nothing of kubeboot', async (t) => {
    for (const name of ['kubeadm:kubelet-bootstrap', 'kubeadm:node-autoapprove-bootstrap', 'kubeadm:get-nodes'])
      t.equal(await get(`${CRBS}/${name}`), 200, `ClusterRoleBinding ${name}`);
    t.equal(await get(`${CRBS}/kubeboot:node-bootstrapper`), 404, "no kubeboot's binding");
    t.equal(await get('/api/v1/namespaces/kube-public/configmaps/cluster-info'), 200);
    t.equal(await get('/api/v1/namespaces/kube-system/configmaps/kubeadm-config'), 200);
    t.equal(await get('/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy'), 200);
    t.equal(await get('/api/v1/namespaces/kube-system/serviceaccounts/kube-proxy'), 200);
    t.equal(await get('/api/v1/namespaces/kubeboot'), 404, 'no namespace kubeboot');
    const plain: BootstrapToken = await plane.admin.createBootstrapToken();
    forbid(plain.secret);
    await waitAuthenticates(plain.token);
    t.equal(
      await tokenMay(plain.token, mayCreateCsr),
      false,
      "a token without kubeadm's group may not create its CSR (what kubeboot made before)",
    );
  });

  t.test('token create makes a token in kubeadm’s group that kubeadm’s RBAC serves as it serves its own', async (t) => {
    const { token, id, stderr } = await created(t, []);
    t.equal(await secretGroups(id), KUBEADM_GROUP, 'auth-extra-groups');
    t.match(
      stderr,
      new RegExp(`^kubeboot token: kubeadm's RBAC and not kubeboot's is applied here: the token carries group ${KUBEADM_GROUP}`),
    );
    t.equal(stderr.split('\n').length, 2, 'one line said');
    await waitAuthenticates(token);
    t.equal(await tokenMay(token, mayCreateCsr), true, 'may create its CSR (kubeadm:kubelet-bootstrap)');
    t.equal(
      await tokenMay(token, { ...mayCreateCsr, subresource: 'nodeclient' }),
      true,
      'kube-controller-manager auto-approves its kubelet client CSR (kubeadm:node-autoapprove-bootstrap)',
    );
    // What kubeadm join reads before it bootstraps: the Node of its name (kubeadm:get-nodes) and the kubeadm-config ConfigMap.
    t.equal(await tokenMay(token, { resource: 'nodes', verb: 'get', name: 'worker-1' }), true, 'may get Nodes (kubeadm:get-nodes)');
    t.equal(
      await tokenMay(token, { resource: 'configmaps', verb: 'get', namespace: 'kube-system', name: 'kubeadm-config' }),
      true,
      'may read kube-system/kubeadm-config (kubeadm:nodes-kubeadm-config)',
    );
    const listed = await run(kubeadm, ['token', 'list', '--kubeconfig', plane.adminKubeconfig], {
      env: { PATH: process.env.PATH, HOME: work },
    });
    const row = listed.stdout.split('\n').find((l) => l.startsWith(`${id}.`));
    t.match(row, KUBEADM_GROUP, 'kubeadm token list shows it in its own group');
    await waitFor(
      'the bootstrapsigner to sign cluster-info for the token (kubeadm join’s discovery)',
      async () =>
        (await plane.admin.request<{ data: Record<string, string> }>('GET', '/api/v1/namespaces/kube-public/configmaps/cluster-info')).body
          .data[`jws-kubeconfig-${id}`]
          ? true
          : undefined,
      60_000,
    );
    t.equal(await secretGroups((await created(t, ['--groups', KUBEADM_GROUP])).id), KUBEADM_GROUP, 'asked for: carried once');
  });

  t.test(
    'the line join-command prints joins a node: kube-controller-manager issues its kubelet credential, no kube-proxy CSR is made',
    async (t) => {
      const printed = await kubeboot(t, ['join-command', ...admin, '--create-token', '--ttl', '10m']);
      t.equal(printed.code, 0, printed.stderr);
      const line = printed.stdout.trim();
      const m = JOIN_LINE.exec(line);
      t.ok(m, `one join line, got ${JSON.stringify(line.replace(/\.[a-z0-9]{16}/, '.<secret>'))}`);
      if (!m) return;
      forbid(m[3]!);
      const id = m[2]!;
      t.equal(m[1], plane.server);
      t.equal(m[4], caCertHash(plane.caPem));
      t.equal(m[5], ' --no-kube-proxy', "it turns the node's kube-proxy identity off");
      t.match(printed.stderr, `kubeboot join-command: kubeadm's RBAC and not kubeboot's is applied here`);
      t.match(printed.stderr, 'kubeboot join-command: kube-proxy runs as DaemonSet kube-system/kube-proxy with its own ServiceAccount');
      t.equal(await secretGroups(id), KUBEADM_GROUP);

      // The package's default: kube-proxy's identity on. The line turns it off.
      const node = await nodeLayout(t.testdir(), 'kubeadm-worker-1', { kubeProxy: { enabled: true }, waitTimeout: '2m' });
      await waitFor('the new token to be stored', async () =>
        (await get(`/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`)) === 200 ? true : undefined,
      );
      const started = Date.now();
      const result = await kubeboot(t, [...line.split(' ').slice(1), '--config', node.config]);
      const ms = Date.now() - started;
      t.equal(result.code, 0, `exit 0; stderr:\n${result.stderr}`);
      if (result.code !== 0) return;
      t.ok(ms < 60_000, `joined in ${ms} ms, not after a wait for a kube-proxy approval`);

      const who = JSON.parse(
        (await run(plane.kubectlPath!, ['--kubeconfig', node.kubeletKubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout,
      ).status.userInfo as { username: string; groups: string[] };
      t.equal(who.username, 'system:node:kubeadm-worker-1');
      t.ok(who.groups.includes('system:nodes'));

      const mine = (await plane.admin.listCsrs()).filter((c) => c.spec?.username === `system:bootstrap:${id}`);
      t.equal(mine.length, 1, 'one CSR from the token: the kubelet’s');
      t.equal(mine[0]?.spec?.signerName, KUBELET_CLIENT_SIGNER);
      t.match(
        mine[0]?.status?.conditions,
        [{ type: 'Approved', reason: 'AutoApproved' }],
        "approved by kube-controller-manager's csrapproving through kubeadm's binding",
      );
      t.ok(mine[0]?.status?.certificate, 'and signed');
      // Nothing else on this plane asks kubernetes.io/kube-apiserver-client for a certificate.
      const proxyCsrs = (await plane.admin.listCsrs()).filter((c) => c.spec?.signerName === 'kubernetes.io/kube-apiserver-client');
      t.same(proxyCsrs, [], 'no kube-proxy CSR');
      t.notMatch(result.stderr, /kube-proxy.*(pending|waiting)/i, 'nothing waited for kube-proxy');
      await t.rejects(stat(node.kubeProxyKubeconfig), { code: 'ENOENT' }, 'no kube-proxy kubeconfig on the node');
    },
  );

  t.test('user-data for this cluster writes a config with kube-proxy’s identity off and a token in kubeadm’s group', async (t) => {
    const out = await kubeboot(t, ['user-data', ...admin, '--create-token', '--ttl', '10m']);
    t.equal(out.code, 0, out.stderr);
    const doc = parse(out.stdout) as { write_files: { path: string; content: string }[] };
    const nodeConfig = parse(doc.write_files.find((f) => f.path === '/etc/kubeboot/config.yaml')!.content) as {
      kubeProxy?: { enabled?: boolean };
    };
    t.same(nodeConfig.kubeProxy, { enabled: false });
    const id = /([a-z0-9]{6})\.([a-z0-9]{16})/.exec(out.stdout)!;
    forbid(id[2]!);
    t.equal(await secretGroups(id[1]!), KUBEADM_GROUP);
    const kept = await kubeboot(t, ['user-data', ...admin, '--create-token', '--ttl', '10m', '--set', 'kubeProxy.enabled=true']);
    forbid(/[a-z0-9]{6}\.([a-z0-9]{16})/.exec(kept.stdout)?.[1] ?? '');
    t.equal(kept.code, 0, kept.stderr);
    t.match(
      kept.stderr,
      'warning: kube-proxy runs as DaemonSet kube-system/kube-proxy here, yet kubeProxy.enabled=true',
      "the admin's --set wins, said",
    );
  });

  t.test('an admin who may create tokens but not ask the authorizer or read DaemonSets is warned, not stopped', async (t) => {
    const cred = await plane.mintClientCert({ commonName: 'token-maker' });
    forbid(cred.keyPem.split('\n').slice(1, -2).join(''));
    const kubeconfig = join(t.testdir(), 'token-maker.conf');
    await writeKubeconfig(kubeconfig, plane.server, { pem: plane.caPem }, cred);
    const rbac = '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system';
    expectStatus(
      await plane.admin.request('POST', `${rbac}/roles`, {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata: { name: 'test:token-maker', namespace: 'kube-system' },
        rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['create'] }],
      }),
      'create Role test:token-maker',
      201,
    );
    expectStatus(
      await plane.admin.request('POST', `${rbac}/rolebindings`, {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: 'test:token-maker', namespace: 'kube-system' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'test:token-maker' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'token-maker' }],
      }),
      'bind it',
      201,
    );
    const printed = await waitFor('the Role to apply', async () => {
      const r = await kubeboot(t, ['join-command', '--kubeconfig', kubeconfig, '--create-token', '--ttl', '10m']);
      return r.code === 0 ? r : undefined;
    });
    forbid(/[a-z0-9]{6}\.([a-z0-9]{16})/.exec(printed.stdout)?.[1] ?? '');
    const lines = printed.stderr.trimEnd().split('\n');
    t.equal(lines.length, 2, `two warnings:\n${printed.stderr}`);
    t.match(
      lines[0],
      /^kubeboot join-command: warning: could not ask whether a bootstrap token may create its CSR here \(.*"token-maker" cannot create resource "subjectaccessreviews".*--groups system:bootstrappers:kubeadm:default-node-token$/,
    );
    t.match(
      lines[1],
      /^kubeboot join-command: warning: could not tell whether kube-proxy runs as DaemonSet kube-system\/kube-proxy \(.*"token-maker" cannot get resource "daemonsets".*--no-kube-proxy/,
    );
    t.match(printed.stdout, /^kubeboot bootstrap --server \S+ --token \S+ --ca-cert-hash \S+\n$/, 'the line as before');
  });

  // Last: it takes kubeadm's CSR grant away from the whole plane.
  t.test('where neither kubeboot’s RBAC nor kubeadm’s lets a token create its CSR, no token is made: one line, exit 1', async (t) => {
    expectStatus(await plane.admin.request('DELETE', `${CRBS}/kubeadm:kubelet-bootstrap`), 'delete kubeadm:kubelet-bootstrap', 200);
    const count = async () =>
      (
        await plane.admin.request<{ items: unknown[] }>(
          'GET',
          '/api/v1/namespaces/kube-system/secrets?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken',
        )
      ).body.items.length;
    const before = await count();
    for (const command of [
      ['token', 'create'],
      ['join-command', '--create-token'],
    ]) {
      const result = await kubeboot(t, [...command, ...admin]);
      t.equal(result.code, 1, `${command[0]}: exit 1`);
      t.equal(
        result.stderr,
        `kubeboot: no bootstrap token may create its CSR at ${plane.server} (neither kubeboot's RBAC nor kubeadm's for ${KUBEADM_GROUP}), so no token was made; apply kubeboot's and run its approver (docs/node-identity.md): kubectl apply -f /usr/share/kubeboot/manifests/\n`,
      );
      t.equal(result.stdout, '');
    }
    t.equal(await count(), before, 'no token Secret was made');
  });
}
