// The shipped kubeboot-approver.service under a real systemd: DynamicUser=,
// LoadCredential= and its sandbox are only proven by a service manager that
// applies them. Enabled on the node itself (any host that reaches the API
// server may run it), it approves that node's pending kube-proxy CSR, and
// kube-proxy, waiting in its ExecStartPre=, starts.
import { join } from 'node:path';
import t from 'tap';
import { installApprover, createNode, approvals, approveKubeletCsrOf } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { writeKubeconfig } from '../support/kubeconfig.js';
import { buildPackages, buildTools, toolsOrSkip } from '../packaging/fixtures/packages.js';
import { bootNode, installPackage, startStandInsUntilProxyCsr } from './fixtures/node.js';

if (toolsOrSkip(t, ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools], true)) {
  buildPackages();
  const plane = await controlPlaneOrSkip(t, { name: 'approver-unit' });
  if (plane) {
    await t.test(
      'the approver unit, given its kubeconfig, approves the pending kube-proxy CSR as a dynamic user, and kube-proxy starts',
      async (t) => {
        await installApprover(plane, t.testdir());
        const node = await bootNode(t, plane, 'listen: off\n');
        await createNode(plane, node.name);
        // No approver runs until the unit starts: the admin approves the kubelet's first CSR, as a person would.
        const kubeletApproved = approveKubeletCsrOf(plane, `system:bootstrap:${node.token.id}`);
        kubeletApproved.catch(() => {});
        await installPackage(node);
        const pending = await startStandInsUntilProxyCsr(plane, node);
        await kubeletApproved;
        t.equal(await node.unitProperty('kube-proxy.service', 'SubState'), 'start-pre', 'kube-proxy waits for its credential');

        // Root-only on disk, as the unit's comment asks; systemd hands the dynamic user a copy.
        const conf = join(node.root, 'etc/kubeboot/approver.conf');
        await writeKubeconfig(conf, plane.server, { pem: plane.caPem }, await plane.mintClientCert({ commonName: 'kubeboot:approver' }));
        await node.run(['chmod', '0600', '/etc/kubeboot/approver.conf']);
        await node.run(['systemctl', 'start', 'kubeboot-approver.service'], { timeoutMs: 120_000 });
        t.equal(await node.unitProperty('kubeboot-approver.service', 'ActiveState'), 'active', 'READY under its sandbox');
        const user = await node.sh('ps -o user= -p "$(systemctl show -p MainPID --value kubeboot-approver.service)"');
        t.not(user.trim(), 'root', `runs as a dynamic user (${user.trim()})`);

        const approved = await plane.admin.waitFor(
          'the approver to approve the kube-proxy CSR',
          async () => {
            const csr = await plane.admin.getCsr(pending.metadata.name);
            return approvals(csr).length > 0 ? csr : undefined;
          },
          90_000,
        );
        t.ok(approved, `CSR ${pending.metadata.name} approved by the approver unit`);
        await plane.admin.waitFor(
          'kube-proxy running',
          async () => ((await node.unitProperty('kube-proxy.service', 'ActiveState')) === 'active' ? true : undefined),
          90_000,
        );
        t.same(await node.standInRecorded('kube-proxy', 1), ['system:kube-proxy'], 'kube-proxy started with a working kube-proxy.conf');
        const journal = await node.journal(['-u', 'kubeboot-approver.service']);
        t.notMatch(journal, /SIGSYS|status=31\/SYS|EPERM|Operation not permitted|EACCES/, 'nothing refused by the sandbox');
      },
    );
  }
}
