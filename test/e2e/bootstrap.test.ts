// The bootstrap flow against a real kube-apiserver + kube-controller-manager:
// what an operator sees on a fresh node.
import { execFile } from 'node:child_process';
import { lstat, mkdir, readFile, readlink, stat, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { parseCertificateChain } from '../../agent/pki/certificate.js';
import { caCertHash } from '../../agent/pki/pin.js';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { assertNoSecrets, bundle, forbid, handToken, kubeboot, nodeLayout, startKubeboot } from '../support/kubeboot.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { writeKubeconfig } from '../support/kubeconfig.js';

const run = promisify(execFile);

const plane = await controlPlaneOrSkip(t, { name: 'bootstrap' });
if (plane) {
  const kubectl = plane.kubectlPath!;
  const whoami = async (kubeconfig: string) =>
    JSON.parse((await run(kubectl, ['--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout).status.userInfo as {
      username: string;
      groups: string[];
    };
  const csrsFor = async (cn: string) => (await plane.admin.listCsrs()).filter((c) => csrCommonName(c) === cn);

  // Group allowed to create CSRs but not auto-approved: CSRs from it stay pending until an admin decides.
  await plane.admin.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'kubeboot-test-manual-bootstrappers' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:node-bootstrapper' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'kubeboot:manual-bootstrappers' }],
  });
  const manualBootstrapKubeconfig = async (file: string, who: string) => {
    const cred = await plane.mintClientCert({ commonName: who, organizations: ['kubeboot:manual-bootstrappers'] });
    forbid(cred.keyPem.split('\n').slice(1, -2).join(''));
    await writeKubeconfig(file, plane.server, { pem: plane.caPem }, cred);
  };

  t.test('a node with only a bootstrap kubeconfig ends with a kubelet kubeconfig that kubectl accepts as system:node:<name>', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-1');
    const token = await handToken(plane, node, 'data');
    await writeFile(join(node.cloudDir, 'user-data.txt'), `#cloud-config\n# token: ${token.token}\n`);

    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(result.code, 0, `exit 0; output:\n${result.stderr}`);

    const user = await whoami(node.kubeletKubeconfig);
    t.equal(user.username, 'system:node:worker-1');
    t.ok(user.groups.includes('system:nodes'), 'in group system:nodes');
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'bootstrap kubeconfig deleted');
    t.match(result.stderr, /bootstrap token is still present in .*user-data\.txt/, 'warns about the token left in cloud-init user-data');

    const current = join(node.kubeletCertDir, 'kubelet-client-current.pem');
    t.ok((await lstat(current)).isSymbolicLink(), 'kubelet-client-current.pem is a symlink');
    const target = await readlink(current);
    t.match(target, /kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$/);
    t.equal((await stat(target)).mode & 0o777, 0o600, 'credential file is 0600');
    t.equal((await stat(node.kubeletKubeconfig)).mode & 0o777, 0o600, 'kubeconfig is 0600');

    const csrs = await csrsFor('system:node:worker-1');
    t.equal(csrs.length, 1, 'one CSR');
    t.match(csrs[0]!.metadata.name, /^node-csr-/);
    t.equal(csrs[0]!.spec.username, `system:bootstrap:${token.id}`, 'requested with the bootstrap token');

    t.test('a second run with a valid kubeconfig makes no API call at all', async (t) => {
      const again = await kubeboot(t, ['bootstrap', '--config', node.config, '--log-level', 'debug']);
      t.equal(again.code, 0);
      t.notMatch(again.stderr, /api request/, 'no request was traced');
      t.match(again.stderr, /keeping it/);
    });

    t.test('status reports the subject, issuer and expiry', async (t) => {
      const status = await kubeboot(t, ['status', '--config', node.config, '--output', 'json']);
      t.equal(status.code, 0);
      const kubelet = JSON.parse(status.stdout).identities[0];
      t.equal(kubelet.identity, 'kubelet');
      t.match(kubelet.subject, /CN=system:node:worker-1,O=system:nodes/);
      t.equal(kubelet.expired, false);
      t.equal(kubelet.certificateFile, target);
    });

    t.test('renew with no daemon running renews directly, authenticated by the current certificate', async (t) => {
      const renewed = await kubeboot(t, ['renew', '--config', node.config]);
      t.equal(renewed.code, 0, renewed.stderr);
      t.not(await readlink(current), target, 'the link points at a new file');
      const byNode = (await plane.admin.listCsrs()).filter((c) => c.spec?.username === 'system:node:worker-1');
      t.equal(byNode.length, 1, 'one CSR requested by the node itself');
      t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:worker-1');
    });
  });

  t.test('kube-proxy waits for an admin while the kubelet gets its kubeconfig', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-2', { kubeProxy: { enabled: true } });
    await handToken(plane, node, 'file');

    const running = startKubeboot(['bootstrap', '--config', node.config, '--pending-notice-interval', '1s']);
    // Requested by the node itself, so the kubelet credential must already exist.
    const pending = await plane.admin.waitFor('the kube-proxy CSR requested by system:node:worker-2', async () =>
      (await csrsFor('system:kube-proxy')).find((c) => c.spec.username === 'system:node:worker-2'),
    );
    await running.waitForOutput(/kubectl certificate approve node-csr-/);
    const kubeletUser = await plane.admin.waitFor('the kubelet kubeconfig', async () =>
      whoami(node.kubeletKubeconfig).catch(() => undefined),
    );
    t.equal(kubeletUser.username, 'system:node:worker-2', 'kubelet kubeconfig works while kube-proxy is still pending');
    t.ok((await stat(node.bootstrapKubeconfig)).isFile(), 'bootstrap kubeconfig kept while kube-proxy is pending');

    await plane.admin.approveCsr(pending.metadata.name);
    const result = await running.done;
    t.equal(result.code, 0, `exit 0; output:\n${result.stderr}`);
    const proxyUser = await whoami(node.kubeProxyKubeconfig);
    t.equal(proxyUser.username, 'system:kube-proxy');
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'bootstrap kubeconfig deleted once both are proven');
  });

  t.test('a denied CSR exits 3 with the reason, writes nothing and keeps the bootstrap kubeconfig', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-3');
    await manualBootstrapKubeconfig(node.bootstrapKubeconfig, 'manual-3');
    const running = startKubeboot(['bootstrap', '--config', node.config]);
    const csr = await plane.admin.waitFor('the kubelet CSR', async () => (await csrsFor('system:node:worker-3'))[0]);
    await plane.admin.denyCsr(csr.metadata.name, 'NotOnTheInventory');
    const result = await running.done;
    t.equal(result.code, 3);
    t.match(result.stderr, /denied: NotOnTheInventory/);
    await t.rejects(stat(node.kubeletKubeconfig), { code: 'ENOENT' }, 'no kubeconfig written');
    t.ok((await stat(node.bootstrapKubeconfig)).isFile(), 'bootstrap kubeconfig kept');
    await t.rejects(
      stat(join(node.stateDir, 'kubelet.key.pending')),
      { code: 'ENOENT' },
      'the denied key is dropped, so a retry asks anew instead of re-adopting the denied CSR',
    );
  });

  t.test('killed while waiting and restarted, kubeboot reuses the same CSR', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-4');
    await manualBootstrapKubeconfig(node.bootstrapKubeconfig, 'manual-4');
    const first = startKubeboot(['bootstrap', '--config', node.config]);
    const csr = await plane.admin.waitFor('the kubelet CSR', async () => (await csrsFor('system:node:worker-4'))[0]);
    first.child.kill('SIGKILL');
    await first.done;

    const second = startKubeboot(['bootstrap', '--config', node.config]);
    await second.waitForOutput(new RegExp(`CSR ${csr.metadata.name} submitted`));
    await plane.admin.approveCsr(csr.metadata.name);
    const result = await second.done;
    t.equal(result.code, 0, `exit 0; output:\n${result.stderr}`);
    t.equal((await csrsFor('system:node:worker-4')).length, 1, 'one CSR in the API, not two');
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:worker-4');
  });

  t.test('CA discovery with the right pin bootstraps a node whose bootstrap kubeconfig has no CA', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-5');
    await handToken(plane, node, 'none');
    const result = await kubeboot(t, ['bootstrap', '--config', node.config, '--ca-cert-hash', caCertHash(plane.caPem)]);
    t.equal(result.code, 0, `exit 0; output:\n${result.stderr}`);
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:worker-5');
    const written = await readFile(node.kubeletKubeconfig, 'utf8');
    t.match(written, /certificate-authority-data/, 'the discovered CA is in the new kubeconfig');
  });

  t.test('a wrong pin is refused and no CSR is made', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-6');
    await handToken(plane, node, 'none');
    const result = await kubeboot(t, ['bootstrap', '--config', node.config, '--ca-cert-hash', `sha256:${'ab'.repeat(32)}`]);
    t.equal(result.code, 1);
    t.match(result.stderr, /matches none of the --ca-cert-hash pins/);
    t.equal((await csrsFor('system:node:worker-6')).length, 0, 'no CSR');
    t.ok((await stat(node.bootstrapKubeconfig)).isFile(), 'bootstrap kubeconfig kept');
  });

  t.test('no CA and no pin is refused before anything is fetched', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-7');
    await handToken(plane, node, 'none');
    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(result.code, 2);
    t.match(result.stderr, /no --ca-cert-hash was given/);
  });

  t.test('an expired bootstrap token is dead: a clear error, exit 5, and the bootstrap kubeconfig is kept', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-8');
    const token = await plane.admin.createBootstrapToken({ expiration: new Date(Date.now() - 60_000) });
    forbid(token.secret);
    await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, token.token, { ca: 'data' });
    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(result.code, 5, result.stderr);
    t.match(result.stderr, new RegExp(`refuses bootstrap token ${token.id} \\(401 Unauthorized\\): the token is dead`));
    t.ok((await stat(node.bootstrapKubeconfig)).isFile(), 'bootstrap kubeconfig kept');
  });

  t.test('an unknown bootstrap token is refused the same way', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-9');
    await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, 'abcdef.0123456789abcdef', { ca: 'data' });
    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(result.code, 5, result.stderr);
    t.match(result.stderr, /refuses bootstrap token abcdef \(401 Unauthorized\): the token is dead/);
  });

  t.test('an enabled kubelet serving certificate is requested with its SANs and stored once an admin approves it', async (t) => {
    const dir = t.testdir();
    const node = await nodeLayout(dir, 'worker-11', {
      kubeletServing: { enabled: true, certDir: join(dir, 'serving-pki'), dnsNames: ['worker-11.example'], ipAddresses: ['10.0.0.11'] },
    });
    await handToken(plane, node, 'data');
    const running = startKubeboot(['bootstrap', '--config', node.config]);
    const csr = await plane.admin.waitFor('the serving CSR', async () =>
      (await plane.admin.listCsrs()).find(
        (c) => c.spec?.signerName === 'kubernetes.io/kubelet-serving' && csrCommonName(c) === 'system:node:worker-11',
      ),
    );
    t.same([...csr.spec.usages].sort(), ['digital signature', 'server auth']);
    await plane.admin.approveCsr(csr.metadata.name);
    const result = await running.done;
    t.equal(result.code, 0, result.stderr);
    const served = await readFile(join(dir, 'serving-pki', 'kubelet-server-current.pem'), 'utf8');
    const leaf = parseCertificateChain(served)[0]!;
    t.same(leaf.dnsNames, ['worker-11.example']);
    t.same(leaf.ipAddresses, ['10.0.0.11']);
    t.match(served, /PRIVATE KEY/, 'certificate and key in one file, as the kubelet expects');
  });

  t.test('a changed node name is identity drift: the credential is re-issued for the new name', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-12');
    await handToken(plane, node, 'data');
    t.equal((await kubeboot(t, ['bootstrap', '--config', node.config])).code, 0);

    await handToken(plane, node, 'data');
    const renamed = await kubeboot(t, ['bootstrap', '--config', node.config, '--node-name', 'worker-12b']);
    t.equal(renamed.code, 0, renamed.stderr);
    t.match(renamed.stderr, /needs a certificate \(.*system:node:worker-12/, 'says why the old credential no longer fits');
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:worker-12b');
  });

  t.test(
    'credentials already valid and a bootstrap kubeconfig still there: proven with one SelfSubjectReview, then the token goes',
    async (t) => {
      const node = await nodeLayout(t.testdir(), 'worker-20');
      await handToken(plane, node, 'data');
      t.equal((await kubeboot(t, ['bootstrap', '--config', node.config])).code, 0);
      // A kubeboot killed after kubelet.conf was written, or a node the kubelet bootstrapped itself.
      await handToken(plane, node, 'data');
      const again = await kubeboot(t, ['bootstrap', '--config', node.config, '--log-level', 'debug']);
      t.equal(again.code, 0, again.stderr);
      t.match(again.stderr, /selfsubjectreviews/, 'the kept credential was shown to the API server first');
      t.notMatch(again.stderr, /certificatesigningrequests/, 'and no CSR was made');
      await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'the bootstrap kubeconfig is deleted');
    },
  );

  t.test('a symlinked bootstrap kubeconfig: the file it points at is deleted too, and the log says both', async (t) => {
    const dir = t.testdir();
    const node = await nodeLayout(dir, 'worker-21');
    const real = join(dir, 'secrets', 'bootstrap.conf');
    await mkdir(dirname(real), { recursive: true });
    await handToken(plane, node, 'data', real);
    await symlink(real, node.bootstrapKubeconfig);
    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(result.code, 0, result.stderr);
    await t.rejects(lstat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'the link is gone');
    await t.rejects(stat(real), { code: 'ENOENT' }, 'the file holding the token is gone');
    t.match(result.stderr, new RegExp(`deleted the bootstrap kubeconfig ${real} and the link to it`));
  });

  t.test('bootstrap started while the API server resets connections retries until it answers', async (t) => {
    const proxy = await startFaultProxy(plane.server, { resetFirst: 3 });
    t.teardown(() => proxy.close());
    const node = await nodeLayout(t.testdir(), 'worker-22');
    const token = await plane.admin.createBootstrapToken();
    forbid(token.secret);
    await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, token.token, { ca: 'data', server: proxy.url });
    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(result.code, 0, result.stderr);
    t.match(result.stderr, /creating CSR node-csr-\S+: .*retrying in/, 'the resets were retried with backoff');
    t.ok(proxy.connections() > 3, `${proxy.connections()} connections, the first 3 reset`);
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:worker-22');
  });

  t.test(
    'a read-only kubeconfig directory fails before anything is switched, names the kubeconfig, and a renewal there still works',
    async (t) => {
      const dir = t.testdir();
      const etc = join(dir, 'etc');
      await mkdir(etc);
      const node = await nodeLayout(dir, 'worker-23', { kubelet: { kubeconfig: join(etc, 'kubelet.conf') } });
      await handToken(plane, node, 'data');
      const readOnly = (args: string[]) =>
        new Promise<{ code: number | null; stderr: string }>((resolve) => {
          const script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"';
          execFile(
            'unshare',
            ['-m', 'sh', '-c', script, 'sh', etc, process.execPath, bundle, ...args],
            { env: { PATH: process.env.PATH, KUBEBOOT_LOG_FORMAT: 'json' } },
            (err, _out, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
          );
        });
      const first = await readOnly(['bootstrap', '--config', node.config]);
      assertNoSecrets(t, first.stderr, 'kubeboot bootstrap');
      t.equal(first.code, 1, 'exit 1');
      t.match(first.stderr, new RegExp(`cannot write ${join(etc, 'kubelet.conf')}: EROFS`), 'names the kubeconfig, not a temp file');
      await t.rejects(
        lstat(join(node.kubeletCertDir, 'kubelet-client-current.pem')),
        { code: 'ENOENT' },
        'the -current.pem link was not switched',
      );
      t.ok((await stat(node.bootstrapKubeconfig)).isFile(), 'the bootstrap kubeconfig is kept');

      const fixed = await kubeboot(t, ['bootstrap', '--config', node.config]);
      t.equal(fixed.code, 0, 'with the directory writable again, the same CSR is adopted');
      t.equal((await csrsFor('system:node:worker-23')).length, 1, 'one CSR in all');
      const before = await readlink(join(node.kubeletCertDir, 'kubelet-client-current.pem'));
      const renewed = await readOnly(['renew', '--config', node.config]);
      t.equal(renewed.code, 0, `a renewal needs no kubeconfig write: ${renewed.stderr}`);
      t.not(await readlink(join(node.kubeletCertDir, 'kubelet-client-current.pem')), before, 'the link moved to the new certificate');
      t.equal((await whoami(join(etc, 'kubelet.conf'))).username, 'system:node:worker-23');
    },
  );

  t.test('check validates everything without changing anything', async (t) => {
    const node = await nodeLayout(t.testdir(), 'worker-10');
    const token = await handToken(plane, node, 'data');
    const result = await kubeboot(t, ['check', '--config', node.config]);
    t.equal(result.code, 0, result.stdout + result.stderr);
    t.match(result.stdout, new RegExp(`authenticated as system:bootstrap:${token.id}`));
    t.equal((await csrsFor('system:node:worker-10')).length, 0, 'no CSR made');
    t.ok((await stat(node.bootstrapKubeconfig)).isFile(), 'bootstrap kubeconfig untouched');
  });
}

function csrCommonName(csr: KubeObject): string {
  const pem = Buffer.from(String(csr.spec?.request ?? ''), 'base64').toString();
  // A plain DER scan for the CN attribute: independent of the agent's own parser.
  const der = Buffer.from(pem.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
  const cnOid = Buffer.from([0x06, 0x03, 0x55, 0x04, 0x03]);
  const at = der.indexOf(cnOid);
  if (at < 0) return '';
  const len = der[at + 6]!;
  return der.subarray(at + 7, at + 7 + len).toString('utf8');
}
