// What the .deb ships, not what the checkout builds: its own Node and bundle
// bootstrap a node against a real control plane.
import { execFile } from 'node:child_process';
import { lstat, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { buildPackages, buildTools, cleanEnv, extractDeb, packages, toolsOrSkip } from './fixtures/packages.js';

const run = promisify(execFile);

if (toolsOrSkip(t, buildTools, false)) {
  buildPackages();
  const plane = await controlPlaneOrSkip(t, { name: 'packaged-bootstrap' });
  if (plane) {
    t.test('the packaged node and bundle bootstrap a kubelet kubeconfig', async (tt) => {
      const tree = extractDeb(tt, process.arch === 'arm64' ? packages.debArm64 : packages.debAmd64);
      const d = tt.testdir();
      const token = await plane.admin.createBootstrapToken();
      await plane.writeBootstrapKubeconfig(join(d, 'bootstrap.conf'), token.token);
      // Empty: only the flags below and the defaults apply.
      await writeFile(join(d, 'none.yaml'), '');

      const args = [
        join(tree, 'usr/lib/kubeboot/kubeboot.cjs'),
        'bootstrap',
        '--bootstrap-kubeconfig',
        join(d, 'bootstrap.conf'),
        '--state-dir',
        join(d, 'state'),
        '--node-name',
        'pkg-node',
        '--kubelet-kubeconfig',
        join(d, 'kubelet.conf'),
        '--kubelet-cert-dir',
        join(d, 'pki'),
        '--no-kube-proxy',
        '--config',
        join(d, 'none.yaml'),
        '--cloud-init-path',
        join(d, 'cloud'),
        '--wait-timeout',
        '3m',
      ];
      const result = await run(join(tree, 'usr/lib/kubeboot/node'), args, { env: cleanEnv, timeout: 240_000 }).then(
        (r) => ({ code: 0, ...r }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
      tt.equal(result.code, 0, 'exit 0', { output: result.stdout + result.stderr });
      tt.equal((await stat(join(d, 'kubelet.conf'))).mode & 0o777, 0o600, 'kubelet.conf written, 0600');
      tt.ok((await lstat(join(d, 'pki/kubelet-client-current.pem'))).isSymbolicLink(), 'kubelet-client-current.pem links the credential');
    });
  }
}
