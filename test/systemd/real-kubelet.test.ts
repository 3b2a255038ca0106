// The real kubelet as a systemd service in the booted Debian root, started
// after the built package's kubeboot.service by the shipped drop-in, on the
// credentials kubeboot wrote: the Node registers as system:node:<hostname>
// and turns Ready. The container runtime is the in-memory fake (a unit of
// its own), as in the real-node tests. Once for each package, one after the
// other on the same control plane: the .deb installed with apt-get (as
// packaging/cloud-init/user-data.yaml does), and the .rpm installed with
// Debian's rpm, so its %post scriptlet (daemon-reload, enable, start
// --no-block) runs under the container's real systemd, and rpm -e's
// %preun/%postun after it. Both boot the same cached root (the bootable base
// plus Debian's rpm package).
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
import t, { type Test } from 'tap';
import { stringify } from 'yaml';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { forbid } from '../support/kubeboot.js';
import { snapshotHost } from '../support/netns.js';
import { realNodeOrSkip, type AuditEvent } from '../support/node-join.js';
import { freePort } from '../support/processes.js';
import { CONTAINED_KUBELET, KUBELET_SYSCTLS, nodeBinaries } from '../support/realnode.js';
import { bootContainer, type Container } from '../support/nspawn.js';
import { buildPackages, buildTools, cachedDebianRoot, packages, toolsOrSkip } from '../packaging/fixtures/packages.js';
import { deb, installPackage, waitForBootstrapFilesGone } from './fixtures/node.js';

/** The host's first non-loopback IPv4 address: the container shares the host's network, and the kubelet's node IP must be a local, non-loopback one. */
function hostIp(): string {
  for (const addrs of Object.values(networkInterfaces()))
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  throw new Error('no non-loopback IPv4 address on this machine');
}

/** How one package gets onto the node, and what its install says when it went well. */
interface Variant {
  name: string;
  /** The built package on the host. */
  file: string;
  /** Where it is copied inside (nspawn mounts a fresh /tmp). */
  path: string;
  install(node: Container): Promise<string>;
  installed: RegExp;
  /** Removes the package while the kubelet runs, and checks what its scripts did. */
  erase?: (t: Test, node: Container) => Promise<void>;
}

const rpm = '/var/tmp/kubeboot.rpm';

const variants: Variant[] = [
  {
    name: 'the .deb installed with apt-get',
    file: packages.debAmd64,
    path: deb,
    install: (node) => installPackage(node),
    installed: /Setting up kubeboot/,
  },
  {
    name: 'the .rpm installed with rpm -i',
    file: packages.rpmX86_64,
    path: rpm,
    // --nodeps: the rpm Requires glibc, libstdc++, util-linux and /bin/sh,
    // which Debian's rpm database (empty: dpkg owns this root) cannot know;
    // dpkg has them installed. --force-debian only quiets Debian's rpm
    // warning against installing rpms (as in the packaging test).
    install: async (node) => {
      const r = await node.exec(['rpm', '-i', '--force-debian', '--nodeps', rpm], { timeoutMs: 120_000 });
      if (r.code !== 0) throw new Error(`rpm -i exited ${r.code}\n${r.stdout}${r.stderr}`);
      return `${r.stdout}${r.stderr}${await node.run(['rpm', '-q', 'kubeboot'])}`;
    },
    installed: /^kubeboot-\d[^\s]*\.x86_64$/m,
    // %preun stops and disables kubeboot, %postun removes its state and
    // reloads systemd; the kubelet (Wants=, not Requires=) keeps running on
    // the credentials kubeboot left. The .deb's removal under systemd is
    // kubeboot-service.test.ts's.
    erase: async (t, node) => {
      await node.run(['rpm', '-e', '--force-debian', 'kubeboot'], { timeoutMs: 120_000 });
      t.equal((await node.exec(['rpm', '-q', 'kubeboot'])).code, 1, 'rpm -e removed the package');
      t.equal(
        await node.unitProperty('kubeboot.service', 'LoadState'),
        'not-found',
        'systemd no longer knows kubeboot.service (%postun reloaded it)',
      );
      t.equal(await node.unitProperty('kubeboot.service', 'ActiveState'), 'inactive', 'and it is stopped');
      t.equal((await node.run(['find', '/etc/systemd/system', '-name', 'kubeboot.service'])).trim(), '', '%preun disabled it');
      t.notMatch(await node.unitProperty('kubelet.service', 'DropInPaths'), /10-kubeboot\.conf/, 'the kubelet’s unit lost the drop-in');
      t.equal(await node.unitProperty('kubelet.service', 'ActiveState'), 'active', 'the kubelet keeps running');
      t.equal((await node.exec(['test', '-e', '/var/lib/kubeboot'])).code, 1, '%postun removed kubeboot’s own state');
      t.equal((await node.exec(['test', '-s', '/etc/kubernetes/kubelet.conf'])).code, 0, 'the kubelet’s credentials stay');
    },
  },
];

if (toolsOrSkip(t, ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools], true) && (await realNodeOrSkip(t))) {
  buildPackages();
  // One root for both variants: the bootable base with Debian's rpm on top.
  const base = cachedDebianRoot(['rpm']);
  const plane = await controlPlaneOrSkip(t, { name: 'systemd-kubelet', audit: true });
  if (plane) {
    for (const variant of variants)
      t.test(
        `${variant.name}: the real kubelet under systemd starts after kubeboot and turns its Node Ready on kubeboot’s credentials`,
        async (t) => {
          const bin = await nodeBinaries();
          const hostBefore = await snapshotHost();
          const token = await plane.admin.createBootstrapToken();
          forbid(token.secret, token.token);
          const [kubeletPort, healthzPort, statusPort] = [await freePort(), await freePort(), await freePort()];
          const nodeIp = hostIp();
          const config = `listen: 127.0.0.1:${statusPort}\nkubeProxy:\n  enabled: false\n`;
          const node = await bootContainer(t, {
            base,
            async prepare(root) {
              const put = (path: string, text: string | Buffer, mode = 0o644) => {
                mkdirSync(join(root, path, '..'), { recursive: true });
                writeFileSync(join(root, path), text);
                chmodSync(join(root, path), mode);
              };
              mkdirSync(join(root, 'etc/kubernetes'), { recursive: true });
              await plane.writeBootstrapKubeconfig(join(root, 'etc/kubernetes/bootstrap-kubelet.conf'), token.token, { ca: 'data' });
              chmodSync(join(root, 'etc/kubernetes/bootstrap-kubelet.conf'), 0o600);
              put('etc/kubeboot/config.yaml', config, 0o600);
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
              copyFileSync(variant.file, join(root, variant.path.slice(1)));
            },
          });
          t.match(await variant.install(node), variant.installed, 'the package installs');
          // What the package's install script did under systemd, before anything else starts a unit:
          // the unit is enabled, and started (or its start job queued: --no-block) since credentials are there.
          t.equal(
            (await node.exec(['systemctl', 'is-enabled', 'kubeboot.service'])).stdout.trim(),
            'enabled',
            'its script enabled kubeboot.service',
          );
          const afterInstall = (await node.run(['systemctl', 'show', '-p', 'ActiveState', '-p', 'Job', 'kubeboot.service'])).trim();
          t.match(
            afterInstall,
            /^(ActiveState=(activating|active)|Job=\d+)$/m,
            `its script started kubeboot.service, without waiting for approval (${afterInstall.replace(/\n/g, ', ')})`,
          );
          t.equal(readFileSync(join(node.root, 'etc/kubeboot/config.yaml'), 'utf8'), config, 'the operator’s config.yaml is kept');
          t.match(
            await node.unitProperty('kubelet.service', 'DropInPaths'),
            /\/usr\/lib\/systemd\/system\/kubelet\.service\.d\/10-kubeboot\.conf/,
            'the package’s drop-in applies to the kubelet’s unit (the script reloaded systemd)',
          );
          await node.run(['systemctl', 'start', '--no-block', 'kubelet.service']);
          const ready = await plane.admin.waitFor(
            'the Node to turn Ready',
            async () => {
              const state = await node.unitProperty('kubelet.service', 'ActiveState');
              if (state === 'failed')
                throw new Error(`kubelet.service failed: ${await node.journal(['-u', 'kubelet.service', '-n', '30'])}`);
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
                e.objectRef?.resource === 'nodes' &&
                e.verb === 'create' &&
                e.responseStatus?.code === 201 &&
                e.objectRef?.name === node.name,
            );
          t.equal(
            created?.user?.username,
            `system:node:${node.name}`,
            'created by system:node:<n>, with the certificate kubeboot obtained',
          );
          t.match(created?.userAgent ?? '', /^kubelet\//, 'by the kubelet');
          await waitForBootstrapFilesGone(plane, node);
          t.pass('the bootstrap kubeconfig (and its token) is gone from the node');
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
          await variant.erase?.(t, node);
          await node.run(['systemctl', 'stop', 'kubelet.service']);
        },
      );
  }
}
