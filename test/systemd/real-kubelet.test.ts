// The real kubelet as a systemd service in the booted Debian root, started
// after the built .deb's kubeboot.service by the shipped drop-in, on the
// credentials kubeboot wrote: the Node registers as system:node:<hostname>
// and turns Ready. The container runtime is the in-memory fake (a unit of
// its own), as in the real-node tests.
//
// nspawn mounts /proc/sys read-only and gives no /dev/kmsg; the kubelet
// writes six sysctls (container_manager_linux.go setupKernelTunables; a
// failed write stops it) and opens /dev/kmsg for its OOM watcher (a missing
// one stops it). Both are contained by the kubelet unit's own mount
// namespace, in systemd's words: BindPaths= puts a plain file over each of
// those /proc/sys entries (the kubelet writes there, the host's values stay
// as they were), BindReadOnlyPaths= puts /dev/null at /dev/kmsg (the OOM
// watcher reads nothing: no OOM events are reported on this node).
import { copyFileSync, mkdirSync, readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { stringify } from 'yaml';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { forbid } from '../support/kubeboot.js';
import { snapshotHost } from '../support/netns.js';
import { realNodeOrSkip, type AuditEvent } from '../support/node-join.js';
import { freePort } from '../support/processes.js';
import { CONTAINED_KUBELET, KUBELET_SYSCTLS, nodeBinaries } from '../support/realnode.js';
import { bootContainer } from '../support/nspawn.js';
import { buildPackages, buildTools, packages, toolsOrSkip } from '../packaging/fixtures/packages.js';
import { deb, installPackage } from './fixtures/node.js';

/** The host's first non-loopback IPv4 address: the container shares the host's network, and the kubelet's node IP must be a local, non-loopback one. */
function hostIp(): string {
  for (const addrs of Object.values(networkInterfaces()))
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  throw new Error('no non-loopback IPv4 address on this machine');
}

if (toolsOrSkip(t, ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools], true) && (await realNodeOrSkip(t))) {
  buildPackages();
  const plane = await controlPlaneOrSkip(t, { name: 'systemd-kubelet', audit: true });
  if (plane) {
    t.test('the real kubelet under systemd starts after kubeboot and turns its Node Ready on kubeboot’s credentials', async (t) => {
      const bin = await nodeBinaries();
      const hostBefore = await snapshotHost();
      const token = await plane.admin.createBootstrapToken();
      forbid(token.secret, token.token);
      const [kubeletPort, healthzPort, statusPort] = [await freePort(), await freePort(), await freePort()];
      const nodeIp = hostIp();
      const node = await bootContainer(t, {
        async prepare(root) {
          const put = (path: string, text: string | Buffer, mode = 0o644) => {
            mkdirSync(join(root, path, '..'), { recursive: true });
            writeFileSync(join(root, path), text);
            chmodSync(join(root, path), mode);
          };
          mkdirSync(join(root, 'etc/kubernetes'), { recursive: true });
          await plane.writeBootstrapKubeconfig(join(root, 'etc/kubernetes/bootstrap-kubelet.conf'), token.token, { ca: 'data' });
          chmodSync(join(root, 'etc/kubernetes/bootstrap-kubelet.conf'), 0o600);
          put('etc/kubeboot/config.yaml', `listen: 127.0.0.1:${statusPort}\nkubeProxy:\n  enabled: false\n`, 0o600);
          for (const b of ['kubelet', 'fakecri'] as const) put(`usr/local/bin/${b}`, readFileSync(bin[b]), 0o755);
          put('etc/kubernetes/pki/ca.crt', plane.caPem);
          put(
            'var/lib/kubelet/config.yaml',
            stringify({
              apiVersion: 'kubelet.config.k8s.io/v1beta1',
              kind: 'KubeletConfiguration',
              containerRuntimeEndpoint: 'unix:///run/fakecri/cri.sock',
              imageServiceEndpoint: 'unix:///run/fakecri/cri.sock',
              address: '127.0.0.1',
              port: kubeletPort,
              readOnlyPort: 0,
              healthzBindAddress: '127.0.0.1',
              healthzPort,
              authentication: {
                anonymous: { enabled: false },
                webhook: { enabled: true },
                x509: { clientCAFile: '/etc/kubernetes/pki/ca.crt' },
              },
              authorization: { mode: 'Webhook' },
              // What kubeboot expects (docs/install.md): it renews, the kubelet re-reads.
              rotateCertificates: false,
              ...CONTAINED_KUBELET,
            }),
          );
          put(
            'etc/systemd/system/fakecri.service',
            '[Unit]\nDescription=in-memory CRI runtime (k8s.io/cri-client fake)\n[Service]\nRuntimeDirectory=fakecri\nExecStart=/usr/local/bin/fakecri --socket /run/fakecri/cri.sock --image-fs /var/lib/kubelet\n',
          );
          // As a node's kubelet.service looks; %H is the hostname, kubeboot's default node name.
          put(
            'etc/systemd/system/kubelet.service',
            [
              '[Unit]',
              'Description=kubelet',
              'Wants=fakecri.service',
              'After=fakecri.service',
              '[Service]',
              `ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig=/etc/kubernetes/kubelet.conf --hostname-override=%H --node-ip=${nodeIp} --v=2`,
              'Restart=no',
              '[Install]',
              'WantedBy=multi-user.target',
              '',
            ].join('\n'),
          );
          // The containment, as a drop-in of the kubelet's own: private files for its sysctls, nothing at /dev/kmsg.
          for (const s of KUBELET_SYSCTLS) put(`var/lib/kubelet-sysctl/${s.replaceAll('/', '.')}`, readFileSync(`/proc/sys/${s}`));
          put(
            'etc/systemd/system/kubelet.service.d/20-nspawn.conf',
            [
              '[Service]',
              ...KUBELET_SYSCTLS.map((s) => `BindPaths=/var/lib/kubelet-sysctl/${s.replaceAll('/', '.')}:/proc/sys/${s}`),
              'BindReadOnlyPaths=/dev/null:/dev/kmsg',
              '',
            ].join('\n'),
          );
          copyFileSync(packages.debAmd64, join(root, deb.slice(1)));
        },
      });
      t.match(await installPackage(node), /Setting up kubeboot/, 'the .deb installs');
      await node.run(['systemctl', 'daemon-reload']);
      await node.run(['systemctl', 'start', '--no-block', 'kubelet.service']);
      const ready = await plane.admin.waitFor(
        'the Node to turn Ready',
        async () => {
          const state = await node.unitProperty('kubelet.service', 'ActiveState');
          if (state === 'failed') throw new Error(`kubelet.service failed: ${await node.journal(['-u', 'kubelet.service', '-n', '30'])}`);
          const n = await plane.admin.getNode(node.name);
          const cond = (n?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
          return cond?.status === 'True' ? (n as KubeObject) : undefined;
        },
        180_000,
      );
      t.equal(ready.metadata.name, node.name, 'the Node is the container’s hostname, kubeboot’s node name');
      const readyAt = Number(await node.unitProperty('kubeboot.service', 'ActiveEnterTimestampMonotonic'));
      const kubeletStart = Number(await node.unitProperty('kubelet.service', 'ExecMainStartTimestampMonotonic'));
      t.ok(readyAt > 0 && kubeletStart >= readyAt, 'the kubelet started after kubeboot went active (READY=1)');
      const created = readFileSync(plane.auditLog!, 'utf8')
        .split('\n')
        .filter((l) => l.includes('"nodes"') && l.includes('"create"'))
        .map((l) => JSON.parse(l) as AuditEvent)
        .find(
          (e) =>
            e.objectRef?.resource === 'nodes' && e.verb === 'create' && e.responseStatus?.code === 201 && e.objectRef?.name === node.name,
        );
      t.equal(created?.user?.username, `system:node:${node.name}`, 'created by system:node:<n>, with the certificate kubeboot obtained');
      t.match(created?.userAgent ?? '', /^kubelet\//, 'by the kubelet');
      const privateFiles = (
        await node.sh(`for s in ${KUBELET_SYSCTLS.join(' ')}; do echo "$s=$(cat /var/lib/kubelet-sysctl/$(echo $s | tr / .))"; done`)
      )
        .trim()
        .split('\n');
      // matches kubelet: container_manager_linux.go setupKernelTunables' desired values.
      t.match(
        privateFiles,
        ['vm/overcommit_memory=1', 'vm/panic_on_oom=0', 'kernel/panic=10', 'kernel/panic_on_oops=1'],
        `the kubelet set its sysctls, in its private files: ${privateFiles.join(', ')}`,
      );
      const after = await snapshotHost();
      t.same(after.sysctls, hostBefore.sysctls, 'the host sysctls are unchanged');
      await node.run(['systemctl', 'stop', 'kubelet.service']);
    });
  }
}
