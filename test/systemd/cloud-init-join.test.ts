// Real cloud-init on a stock image: a Debian 12 root with Debian's own
// cloud-init package and nothing else a node would need (no gpg, no curl),
// booted by systemd under systemd-nspawn with the NoCloud datasource fed the
// user-data exactly as `kubeboot user-data` printed it. The signed repository
// of `npm run repo` is served on loopback and `kubeboot approver` runs
// against the control plane with the shipped manifests and the kubeconfig
// `kubeboot approver-kubeconfig` made. The node must join unattended, for the
// cloud-config and for `--format script`; a repository whose InRelease
// signature is broken must be refused, visibly. Last, a machine whose TPM
// (a swtpm on the host's loopback) the admin enrolled joins with
// `user-data --set tpm=…` under `approver --inventory`: the packaged unit
// puts the quote in the CSR and rule tpm-attested passes it (issue 37).
//
// The image is what a cloud image is, minus the network: LANG set in
// /etc/default/locale (stock images set it; debootstrap leaves it unset, and
// cloud-init's locale module then runs `update-locale LANG=en_US.UTF-8`,
// which fails for a locale minbase never generated: status error), no other
// apt source (nothing leaves
// loopback), `network: {config: disabled}` (the container shares the host's
// network) and NoCloud as the only datasource.
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { identify, withTpm } from '../../agent/tpm/identify.js';
import { approverManifests, registerNodeOnceCredentialed, startApprover } from '../support/approver.js';
import { controlPlaneOrSkip, type ControlPlane } from '../support/controlplane.js';
import { kubeClient } from '../support/http.js';
import { forbid, kubeboot, type Running } from '../support/kubeboot.js';
import { applyManifests } from '../support/manifests.js';
import { bootContainer, machineName, type Container } from '../support/nspawn.js';
import { manufactureTpm, startSwtpm } from '../support/swtpm.js';
import { buildPackages, buildTools, cachedDebianRoot, toolsOrSkip, version } from '../packaging/fixtures/packages.js';
import { buildSignedRepo, serveDirectory, type Served } from '../packaging/fixtures/repo.js';
import { waitForBootstrapFilesGone } from './fixtures/node.js';

const tools = ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools, 'apt-ftparchive', 'createrepo_c', 'rpmsign', 'rpm', 'gpg'];

interface CloudInitStatus {
  status: string;
  errors: string[];
}

/** The image's own settings, written into each copy before it boots (cheap; the cached root stays debootstrap's). */
function prepareImage(root: string, userData: string, name: string): void {
  writeFileSync(join(root, 'etc/default/locale'), 'LANG=C.UTF-8\n');
  writeFileSync(join(root, 'etc/apt/sources.list'), '');
  writeFileSync(join(root, 'etc/cloud/cloud.cfg.d/90-kubeboot-test.cfg'), 'datasource_list: [NoCloud]\nnetwork: {config: disabled}\n');
  const seed = join(root, 'var/lib/cloud/seed/nocloud');
  mkdirSync(seed, { recursive: true, mode: 0o700 });
  writeFileSync(join(seed, 'meta-data'), `instance-id: ${name}\nlocal-hostname: ${name}\n`);
  writeFileSync(join(seed, 'user-data'), userData, { mode: 0o600 });
}

async function cloudInitStatus(node: Container): Promise<CloudInitStatus> {
  // Exit 1 means status error; the JSON is printed either way.
  const r = await node.exec(['cloud-init', 'status', '--wait', '--format', 'json'], { timeoutMs: 300_000 });
  return JSON.parse(r.stdout) as CloudInitStatus;
}

/** Every file under cloud-init's directories (and logs) that holds `secret`, as grep finds it. */
async function copiesOf(node: Container, secret: string): Promise<string[]> {
  const r = await node.exec(['grep', '-rlaF', '--', secret, '/var/lib/cloud', '/run/cloud-init', '/var/log']);
  return r.stdout.split('\n').filter(Boolean).sort();
}

if (toolsOrSkip(t, tools, true)) {
  buildPackages();
  // python3-cffi-backend: cloud-init needs it through a virtual package (python3-cffi-backend-api-*), which debootstrap does not resolve.
  const image = cachedDebianRoot(['cloud-init', 'python3-cffi-backend']);
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-cloud-init-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const repo = buildSignedRepo(dir);
  const good = await serveDirectory(t, repo.dir);
  // The same repository with one byte changed inside the clearsigned InRelease.
  const tamperedDir = join(dir, 'tampered');
  cpSync(repo.dir, tamperedDir, { recursive: true });
  const inRelease = join(tamperedDir, 'apt/dists/stable/InRelease');
  writeFileSync(inRelease, readFileSync(inRelease, 'utf8').replace('Suite: stable', 'Suite: stablE'));
  const tampered = await serveDirectory(t, tamperedDir);

  const plane = await controlPlaneOrSkip(t, { name: 'cloud-init-join' });
  if (plane) {
    // Everything in subtests: an assertion on the root between awaits would let it end early.
    const root = t;
    let approver: Running | undefined;
    root.teardown(async () => {
      approver?.child.kill('SIGTERM');
      await approver?.done;
    });
    await t.test(
      'the cluster side as the README\'s "Cluster side" tells it: manifests, approver-kubeconfig, the approver leading',
      async (t) => {
        // On the root: the approver serves every later subtest.
        approver = startApprover(await installApproverFromDocs(t, plane, dir), ['--approve-kubelet-client']);
        await approver.waitForOutput(/became the leader/, 60_000);
        t.pass('the approver leads with the kubeconfig kubeboot made');
      },
    );

    // What the token may join: one machine's name, or a pool's prefix (bootContainer's names).
    const userData = async (t: Test, served: Served, format: 'cloud-config' | 'script', joins: string[], set: string[] = []) => {
      const out = await kubeboot(t, [
        'user-data',
        '--kubeconfig',
        plane.adminKubeconfig,
        '--create-token',
        ...joins,
        '--ttl',
        '15m',
        '--repo-url',
        `${served.base}/apt`,
        '--repo-key',
        repo.key,
        '--format',
        format,
        '--set',
        'listen=off',
        ...set.flatMap((s) => ['--set', s]),
      ]);
      t.equal(out.code, 0, out.stderr);
      const token = /\b([a-z0-9]{6})\.([a-z0-9]{16})\b/.exec(out.stdout);
      t.ok(token, 'the user-data holds a token');
      forbid(token![2]!);
      return { text: out.stdout, stderr: out.stderr, tokenId: token![1]!, secret: token![2]! };
    };

    /** Who `kubeconfig` on the node authenticates as, once it works (its certificate may still be on its way). */
    const whoamiOnceItWorks = (node: Container, kubeconfig: string) =>
      plane.admin.waitFor(
        `${kubeconfig} to work`,
        async () => {
          const who = await whoami(node, kubeconfig);
          return who.startsWith('kubectl exited') ? undefined : who;
        },
        120_000,
      );

    /**
     * Boots the stock image with this user-data. There is no kubelet here to
     * register the Node, which kube-proxy's CSR needs: the test registers it
     * as the kubelet would, once the node's kubelet credential is issued — not
     * before, or the approver's no-takeover rule rightly refuses the name.
     */
    const boot = async (t: Test, text: string, opts: { allowDegraded?: boolean; name?: string; tokenId?: string } = {}) => {
      const registered =
        opts.tokenId === undefined || opts.name === undefined
          ? Promise.resolve()
          : registerNodeOnceCredentialed(plane, opts.name, `system:bootstrap:${opts.tokenId}`);
      // A rejection is the test's failure, reported where it is awaited.
      registered.catch(() => {});
      const node = await bootContainer(t, {
        base: image,
        bootTimeoutMs: 300_000,
        allowDegraded: opts.allowDegraded ?? false,
        ...(opts.name ? { name: opts.name } : {}),
        async prepare(root) {
          const name = readFileSync(join(root, 'etc/hostname'), 'utf8').trim();
          prepareImage(root, text, name);
          // For the test's checks only, after cloud-init is done: kubectl to try the kubeconfigs.
          copyFileSync(plane.kubectlPath!, join(root, 'usr/local/bin/kubectl'));
          chmodSync(join(root, 'usr/local/bin/kubectl'), 0o755);
        },
      });
      return { node, registered };
    };

    // One user-data per machine with a node-bound token, and a pool's with a prefix-bound one.
    for (const [format, bound] of [
      ['cloud-config', 'node'],
      ['script', 'pool'],
    ] as const) {
      await t.test(
        `${format}, ${bound}-bound token: a stock Debian 12 image with cloud-init joins unattended from the signed repository`,
        async (t) => {
          const name = machineName();
          const ud = await userData(t, good, format, bound === 'node' ? ['--node', name] : ['--pool', 'kb-node-', '--max-nodes', '2']);
          t.match(
            ud.stderr,
            `kubeboot token delete ${ud.tokenId}`,
            'user-data reminds the admin to delete the token once the pool has booted',
          );
          const before = good.served.length;
          const { node, registered } = await boot(t, ud.text, { name, tokenId: ud.tokenId });

          const status = await cloudInitStatus(node);
          t.same({ status: status.status, errors: status.errors }, { status: 'done', errors: [] }, 'cloud-init status: done, no error');
          t.equal(node.state, 'running', 'no unit failed during boot');

          // From the repository, with its signature checked, on an image without gpg.
          t.not((await node.exec(['sh', '-c', 'command -v gpg'])).code, 0, 'the image has no gpg');
          // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own format, not a template
          t.equal((await node.run(['dpkg-query', '-W', '-f', '${Version}', 'kubeboot'])).trim(), version, 'kubeboot is installed');
          t.match(await node.run(['apt-cache', 'policy', 'kubeboot']), `${good.base}/apt stable/main`, 'from the served repository');
          const listName = `${good.base.slice('http://'.length)}/apt/dists/stable/InRelease`.replaceAll('/', '_');
          t.equal((await node.exec(['test', '-s', `/var/lib/apt/lists/${listName}`])).code, 0, 'apt kept the InRelease it verified');
          const fetched = good.served.slice(before);
          t.ok(fetched.includes('/apt/dists/stable/InRelease'), 'apt fetched the signed InRelease');
          t.ok(
            fetched.some((p) => p.startsWith('/apt/pool/main/kubeboot_') && p.endsWith('_amd64.deb')),
            'and the package',
          );
          t.equal((await node.run(['cat', '/etc/apt/sources.list'])).trim(), '', 'no other source was added (nothing left loopback)');

          t.equal(await node.unitProperty('kubeboot.service', 'ActiveState'), 'active', 'kubeboot started');
          const kubeletConf = statSync(join(node.root, 'etc/kubernetes/kubelet.conf'));
          t.comment(
            `${format}: container start to kubelet.conf: ${((kubeletConf.mtimeMs - node.startedAt) / 1000).toFixed(1)} s; boot finished after ${(node.bootMs / 1000).toFixed(1)} s`,
          );
          t.equal(await whoami(node, '/etc/kubernetes/kubelet.conf'), `system:node:${node.name}`, 'kubelet.conf works as the node');
          await registered;
          const csr = (await plane.admin.listCsrs()).find((c) => c.spec?.username === `system:bootstrap:${ud.tokenId}`);
          t.equal(
            csr?.status?.conditions?.find((c: { type: string }) => c.type === 'Approved')?.reason,
            'KubebootApprover',
            "the kubelet credential was approved by kubeboot approver, under the token's binding",
          );
          const proxy = await whoamiOnceItWorks(node, '/etc/kubernetes/kube-proxy.conf');
          t.equal(proxy, 'system:kube-proxy', 'kube-proxy.conf works');
          await waitForBootstrapFilesGone(plane, node);
          t.pass('the bootstrap token files are gone');

          // cloud-init's own copies of the user-data: kubeboot names each one it finds.
          const copies = await copiesOf(node, ud.secret);
          t.comment(`${format}: copies of the token cloud-init keeps: ${copies.join(', ')}`);
          const journal = await node.journal(['-u', 'kubeboot.service']);
          const warned = [...journal.matchAll(/the bootstrap token is still present in (\S+)/g)].map((m) => m[1]!).sort();
          const instanceCopies = copies.filter((c) => c.startsWith('/var/lib/cloud/instances/'));
          t.ok(instanceCopies.length > 0, 'cloud-init keeps the user-data under /var/lib/cloud/instances/');
          t.same(warned, copies, "kubeboot's warning names every copy there is, and only those");
        },
      );
    }

    await t.test('a repository whose InRelease signature is broken is refused: no kubeboot, and cloud-init status says so', async (t) => {
      const ud = await userData(t, tampered, 'cloud-config', ['--pool', 'kb-node-', '--max-nodes', '1']);
      const { node } = await boot(t, ud.text, { allowDegraded: true });
      const status = await cloudInitStatus(node);
      t.equal(status.status, 'error', 'cloud-init status: error');
      t.match(status.errors.join('\n'), /package-update-upgrade-install|apt-get/, 'the failing step is named');
      t.comment(`cloud-init status errors: ${status.errors.join(' | ').slice(0, 400)}`);
      t.not((await node.exec(['dpkg-query', '-W', 'kubeboot'])).code, 0, 'kubeboot is not installed');
      t.not((await node.exec(['systemctl', 'cat', 'kubeboot.service'])).code, 0, 'no kubeboot unit');
      const output = await node.run(['cat', '/var/log/cloud-init-output.log']);
      t.match(output, /BADSIG|signatures were invalid|is not signed/, "apt's reason is in cloud-init-output.log");
    });

    // Last, as it restarts the approver with --inventory (every later name would have to be listed).
    await t.test(
      '--set tpm: a machine whose TPM is enrolled joins from cloud-init with a quote in its CSR (rule tpm-attested)',
      async (t) => {
        const swtpm = await startSwtpm(await manufactureTpm());
        t.teardown(async () => {
          await swtpm.stop();
          rmSync(swtpm.dir, { recursive: true, force: true });
        });
        const name = machineName();
        const id = await withTpm({ swtpmTcp: swtpm.address }, (tpm) => identify(tpm, new Date()));
        const enrolled = await kubeboot(t, ['node', 'enroll', name, '--tpm-ek', id.ekHash, '--tpm-ak', id.akName], {
          KUBECONFIG: plane.adminKubeconfig,
        });
        t.equal(enrolled.code, 0, `node enroll: ${enrolled.stderr}`);
        approver?.child.kill('SIGTERM');
        await approver?.done;
        approver = startApprover(join(dir, 'approver.yaml'), ['--inventory']);
        await approver.waitForOutput(/became the leader/, 60_000);
        await approver.waitForOutput(/record seen: inventories\.kubeboot\.io\/inventory/, 60_000);

        // The node reaches the host's swtpm over loopback (nspawn shares the network); a real machine sets tpm=device.
        const ud = await userData(t, good, 'cloud-config', ['--node', name], [`tpm=swtpm:${swtpm.address}`]);
        const { node, registered } = await boot(t, ud.text, { name, tokenId: ud.tokenId });
        const status = await cloudInitStatus(node);
        t.same({ status: status.status, errors: status.errors }, { status: 'done', errors: [] }, 'cloud-init status: done, no error');
        t.match(await node.run(['cat', '/etc/kubeboot/config.yaml']), `tpm: swtpm:${swtpm.address}`, 'the user-data set tpm');
        const works = await whoamiOnceItWorks(node, '/etc/kubernetes/kubelet.conf');
        t.equal(works, `system:node:${name}`, 'kubelet.conf works as the node');
        await registered;
        const csr = (await plane.admin.listCsrs()).find((c) => c.spec?.username === `system:bootstrap:${ud.tokenId}`);
        t.match(
          Buffer.from(csr?.spec?.request ?? '', 'base64').toString(),
          /-----END CERTIFICATE REQUEST-----\n-----BEGIN KUBEBOOT TPM EVIDENCE-----\n/,
          "the packaged unit's CSR carries the TPM's quote",
        );
        const approved = csr?.status?.conditions?.find((c: { type: string }) => c.type === 'Approved');
        t.equal(approved?.reason, 'KubebootApprover', 'approved by kubeboot approver');
        t.match(approved?.message, /tpm-attested/, 'with tpm-attested among the rules it passed');
      },
    );
  }
}

async function whoami(node: Container, kubeconfig: string): Promise<string> {
  const r = await node.exec(['kubectl', '--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'jsonpath={.status.userInfo.username}']);
  return r.code === 0 ? r.stdout.trim() : `kubectl exited ${r.code}: ${r.stderr.trim()}`;
}

/**
 * The README's "Cluster side", step by step: the approver's manifests
 * applied, its kubeconfig made with `kubeboot approver-kubeconfig`, a config
 * file naming it. Returns that config file.
 */
async function installApproverFromDocs(t: Test, plane: ControlPlane, dir: string): Promise<string> {
  await plane.stopKubeletApprover();
  const admin = kubeClient({
    server: plane.server,
    caPem: plane.caPem,
    ...(await plane.mintClientCert({ commonName: 'kubeboot-test-admin', organizations: ['system:masters'] })),
  });
  await applyManifests(admin, approverManifests);
  await admin.close();
  const file = join(dir, 'approver.conf');
  const made = await kubeboot(t, ['approver-kubeconfig', '--kubeconfig', plane.adminKubeconfig, '--approver-kubeconfig', file]);
  t.equal(made.code, 0, `approver-kubeconfig: ${made.stderr}`);
  t.match(made.stdout, `wrote ${file}: user kubeboot:approver`);
  t.equal(statSync(file).mode & 0o777, 0o600, 'the approver kubeconfig is 0600');
  const config = join(dir, 'approver.yaml');
  writeFileSync(config, `approver:\n  kubeconfig: ${file}\n`);
  return config;
}
