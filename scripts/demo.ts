// `make demo`: a real control plane on loopback, a fresh "node" directory
// holding only a bootstrap kubeconfig, and kubeboot turning it into working
// kubelet and kube-proxy kubeconfigs. The demo plays the cluster admin too:
// it approves the kube-proxy CSR with kubectl, as an operator would.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane } from '../test/support/controlplane.js';
import { nodeLayout, startKubeboot } from '../test/support/kubeboot.js';

const say = (text: string): void => void process.stdout.write(`\n\x1b[1m== ${text}\x1b[0m\n`);

say('starting etcd, kube-apiserver and kube-controller-manager on loopback');
const plane = await startControlPlane({ name: 'demo' });
const dir = mkdtempSync(join(tmpdir(), 'kubeboot-demo-node-'));
try {
  process.stdout.write(`control plane ${plane.version} at ${plane.server} (ready in ${(plane.startupMs / 1000).toFixed(1)}s)\n`);
  const kubectl = (args: string[], kubeconfig = plane.adminKubeconfig): string => execFileSync(plane.kubectlPath!, ['--kubeconfig', kubeconfig, ...args], { encoding: 'utf8' });

  say('admin: create a bootstrap token and a bootstrap kubeconfig for the node');
  const token = await plane.admin.createBootstrapToken();
  const node = await nodeLayout(dir, 'demo-node', { kubeProxy: { enabled: true } });
  await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, token.token, { ca: 'data' });
  process.stdout.write(`token id ${token.id}; node files in ${dir}\n`);

  say('node: kubeboot bootstrap');
  const running = startKubeboot(['bootstrap', '--config', node.config], { KUBEBOOT_LOG_FORMAT: 'text' });
  running.child.stderr!.pipe(process.stderr);
  const csr = await plane.admin.waitFor('the kube-proxy CSR', async () => (await plane.admin.listCsrs()).find((c) => c.spec.signerName === 'kubernetes.io/kube-apiserver-client' && !c.status?.conditions));
  say(`admin: kubectl certificate approve ${csr.metadata.name}`);
  process.stdout.write(kubectl(['certificate', 'approve', csr.metadata.name]));
  const result = await running.done;
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
  say(`the bootstrap kubeconfig is gone: ${(() => { try { readFileSync(node.bootstrapKubeconfig); return 'NO, still there'; } catch { return 'yes'; } })()}`);
} finally {
  await plane.stop();
  rmSync(dir, { recursive: true, force: true });
}
