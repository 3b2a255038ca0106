// kube-proxy's credential needs an approver that may take its time; the
// kubelet's does not. Under a real systemd, with the shipped drop-ins: the
// kubelet starts as soon as its own credential is proven (kubeboot's READY),
// and kube-proxy waits in its ExecStartPre= (`kubeboot wait --identity
// kube-proxy`) until its CSR is approved and its credential proven.
import t from 'tap';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { buildPackages, buildTools, toolsOrSkip } from '../packaging/fixtures/packages.js';
import { bootNode, installPackage, startStandInsUntilProxyCsr } from './fixtures/node.js';

if (toolsOrSkip(t, ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools], true)) {
  buildPackages();
  const plane = await controlPlaneOrSkip(t, { name: 'kube-proxy-order' });
  if (plane) {
    await t.test(
      'with its CSR pending, kube-proxy waits while the kubelet runs; after approval it starts with a working kubeconfig',
      async (t) => {
        const node = await bootNode(t, plane, 'listen: off\n');
        await installPackage(node);
        const pending = await startStandInsUntilProxyCsr(plane, node);
        await plane.admin.waitFor(
          'the kubelet running',
          async () => ((await node.unitProperty('kubelet.service', 'ActiveState')) === 'active' ? true : undefined),
          90_000,
        );
        t.equal(
          await node.unitProperty('kubeboot.service', 'ActiveState'),
          'active',
          'kubeboot is READY once the kubelet credential is proven',
        );
        t.same(await node.standInRecorded('kubelet', 1), [`system:node:${node.name}`], 'the kubelet started with a working kubelet.conf');
        t.equal(await node.unitProperty('kube-proxy.service', 'ActiveState'), 'activating', 'kube-proxy is still starting');
        t.equal(await node.unitProperty('kube-proxy.service', 'SubState'), 'start-pre', 'in its ExecStartPre=, waiting for kubeboot');
        t.same(await node.standInStarts('kube-proxy'), [], 'kube-proxy itself has not run');
        t.equal((await plane.admin.getCsr(pending.metadata.name))?.status?.conditions, undefined, 'its CSR is still pending');
        const wait = await node.exec(['kubeboot', 'wait', '--identity', 'kube-proxy', '--timeout', '2s']);
        t.equal(wait.code, 4, 'kubeboot wait --timeout gives up with exit 4 meanwhile');

        await plane.admin.approveCsr(pending.metadata.name);
        await plane.admin.waitFor(
          'kube-proxy running',
          async () => ((await node.unitProperty('kube-proxy.service', 'ActiveState')) === 'active' ? true : undefined),
          90_000,
        );
        t.same(
          await node.standInRecorded('kube-proxy', 1),
          ['system:kube-proxy'],
          'kube-proxy started once, with a working kube-proxy.conf',
        );
      },
    );
  }
}
