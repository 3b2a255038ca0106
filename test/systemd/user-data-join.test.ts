// The admin's side meets the node's: `kubeboot user-data` run against the real
// control plane, its write_files laid down as cloud-init would (config.yaml and
// the token file, nothing else), then the real .deb installed under a real
// systemd. The package starts kubeboot because the token file is there;
// kubeboot finds the CA by pinned discovery, writes its own bootstrap
// kubeconfig, joins, and deletes both the token file and that kubeconfig.
import t from 'tap';
import { parse } from 'yaml';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { forbid, kubeboot } from '../support/kubeboot.js';
import { buildPackages, buildTools, toolsOrSkip } from '../packaging/fixtures/packages.js';
import { bootNode, installPackage, waitForBootstrapFilesGone } from './fixtures/node.js';

if (toolsOrSkip(t, ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools], true)) {
  buildPackages();
  const plane = await controlPlaneOrSkip(t, { name: 'user-data-join' });
  if (plane) {
    await t.test('a node booted with kubeboot user-data starts kubeboot from the package, joins, and keeps no token', async (t) => {
      const out = await kubeboot(t, [
        'user-data',
        '--kubeconfig',
        plane.adminKubeconfig,
        '--create-token',
        '--ttl',
        '15m',
        '--set',
        'listen=off',
        '--set',
        'kubeProxy.enabled=false',
      ]);
      t.equal(out.code, 0, out.stderr);
      const doc = parse(out.stdout) as { write_files: { path: string; permissions: string; content: string }[] };
      const token = doc.write_files.find((f) => f.path === '/etc/kubernetes/bootstrap-token');
      t.ok(token, 'user-data writes the token file');
      forbid(token!.content.trim().split('.')[1]!);

      const node = await bootNode(t, plane, 'listen: off\n', { bootstrapKubeconfig: false });
      for (const f of doc.write_files) node.writeFile(f.path, f.content, Number.parseInt(f.permissions, 8));
      await installPackage(node);
      await plane.admin.waitFor(
        'kubeboot.service active (READY)',
        async () => ((await node.unitProperty('kubeboot.service', 'ActiveState')) === 'active' ? true : undefined),
        120_000,
      );
      t.equal(await node.whoami('/etc/kubernetes/kubelet.conf'), `system:node:${node.name}`, 'kubelet.conf works');
      await waitForBootstrapFilesGone(plane, node);
      t.pass('no token left on the node');
    });
  }
}
