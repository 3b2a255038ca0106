// `make demo`: a real control plane on loopback, `kubeboot approver` on the
// cluster side with the shipped manifests, a fresh "node" directory holding
// only a bootstrap kubeconfig, and kubeboot turning it into working kubelet and
// kube-proxy kubeconfigs with no human step: the approver approves the
// kubelet's CSR (the token is bound to the node's name) and kube-proxy's.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane } from '../test/support/controlplane.js';
import { installApprover, registerNodeOnceCredentialed, startApprover } from '../test/support/approver.js';
import { nodeLayout, startKubeboot } from '../test/support/kubeboot.js';

const say = (text: string): void => void process.stdout.write(`\n\x1b[1m== ${text}\x1b[0m\n`);

say('starting etcd, kube-apiserver and kube-controller-manager on loopback');
const plane = await startControlPlane({ name: 'demo' });
const dir = mkdtempSync(join(tmpdir(), 'kubeboot-demo-node-'));
try {
  process.stdout.write(`control plane ${plane.version} at ${plane.server} (ready in ${(plane.startupMs / 1000).toFixed(1)}s)\n`);
  const kubectl = (args: string[], kubeconfig = plane.adminKubeconfig): string =>
    execFileSync(plane.kubectlPath!, ['--kubeconfig', kubeconfig, ...args], { encoding: 'utf8' });

  say('admin: kubectl apply -f packaging/manifests/approver/ and start kubeboot approver');
  const approver = startApprover(await installApprover(plane, dir), ['--approve-kubelet-client'], { KUBEBOOT_LOG_FORMAT: 'text' });
  await approver.waitForOutput(/leader|lease/i, 60_000);

  say('admin: create a bootstrap token bound to the name demo-node and a bootstrap kubeconfig for the node');
  const token = await plane.admin.createBootstrapToken({ bind: { names: ['demo-node'] } });
  // The kubelet registers its Node once it has its credential; with no kubelet here, the demo does.
  const registered = registerNodeOnceCredentialed(plane, 'demo-node', `system:bootstrap:${token.id}`);
  const node = await nodeLayout(dir, 'demo-node', { kubeProxy: { enabled: true } });
  await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, token.token, { ca: 'data' });
  process.stdout.write(`token id ${token.id}; node files in ${dir}\n`);

  say('node: kubeboot bootstrap');
  const running = startKubeboot(['bootstrap', '--config', node.config], { KUBEBOOT_LOG_FORMAT: 'text' });
  running.child.stderr!.pipe(process.stderr);
  const result = await running.done;
  await registered;
  approver.child.kill('SIGTERM');
  await approver.done;
  if (result.code !== 0) throw new Error(`kubeboot bootstrap exited ${result.code}`);

  say('CSRs in the cluster');
  process.stdout.write(kubectl(['get', 'csr']));
  say(`node: ${node.kubeletKubeconfig}`);
  process.stdout.write(readFileSync(node.kubeletKubeconfig, 'utf8').replace(/(certificate-authority-data: ).*/, '$1<CA, base64>'));
  say(`node: kubectl --kubeconfig ${node.kubeletKubeconfig} auth whoami`);
  process.stdout.write(kubectl(['auth', 'whoami'], node.kubeletKubeconfig));
  say(`node: kubectl --kubeconfig ${node.kubeProxyKubeconfig} auth whoami`);
  process.stdout.write(kubectl(['auth', 'whoami'], node.kubeProxyKubeconfig));
  say('node: kubeboot status');
  process.stdout.write(execFileSync(process.execPath, ['dist/kubeboot.cjs', 'status', '--config', node.config], { encoding: 'utf8' }));
  say(
    `the bootstrap kubeconfig is gone: ${(() => {
      try {
        readFileSync(node.bootstrapKubeconfig);
        return 'NO, still there';
      } catch {
        return 'yes';
      }
    })()}`,
  );
} finally {
  await plane.stop();
  rmSync(dir, { recursive: true, force: true });
}
