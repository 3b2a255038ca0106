// The unit's file-system reach against what kubeboot writes by default: every
// file it writes or deletes stays writable, and what it never writes under
// /etc/kubernetes (static pod manifests, the cluster PKI, the control-plane
// kubeconfigs) is taken back. And what the unit runs keeps keys out of crash
// files: no core dump, no inherited NODE_OPTIONS.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { defaultConfig } from '../../agent/config/defaults.js';
import { identitiesFor } from '../../agent/config/identities.js';
import { writtenDirs } from '../../agent/store/sweep.js';
import { ExitCode } from '../../agent/errors.js';
import { RAW_DEVICE, RESOURCE_MANAGED_DEVICE } from '../../agent/tpm/transport.js';

const unit = readFileSync(new URL('../../systemd/kubeboot.service', import.meta.url), 'utf8');

/** The paths of every `Key=` line, without systemd's `-` (ignore if missing) prefix. */
function paths(key: string): string[] {
  return [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].flatMap((m) => m[1]!.trim().split(/\s+/)).map((p) => p.replace(/^-/, ''));
}
const under = (file: string, dir: string) => file === dir || file.startsWith(dir + '/');
const value = (key: string) => new RegExp(`^${key}=(.*)$`, 'm').exec(unit)?.[1];

t.test('everything kubeboot writes or deletes by default is writable under the unit, and nothing read-only covers it', async (t) => {
  const config = defaultConfig('worker-1');
  config.kubeletServing.enabled = true;
  const targets = [
    ...writtenDirs(config),
    ...identitiesFor(config).flatMap((i) => (i.kubeconfigPath ? [i.kubeconfigPath] : [])),
    // deleted once the credentials are proven
    config.bootstrapKubeconfig,
  ];
  const writable = paths('ReadWritePaths');
  const takenBack = [...paths('ReadOnlyPaths'), ...paths('InaccessiblePaths')];
  for (const target of targets) {
    t.ok(
      writable.some((dir) => under(target, dir)),
      `${target} is under ReadWritePaths`,
    );
    t.notOk(
      takenBack.some((dir) => under(target, dir)),
      `${target} is not read-only or hidden`,
    );
  }
});

t.test('what kubeboot never writes under /etc/kubernetes is read-only or hidden', async (t) => {
  t.same(paths('ReadOnlyPaths').sort(), ['/etc/kubernetes/manifests', '/etc/kubernetes/pki']);
  t.same(paths('InaccessiblePaths').sort(), [
    '/etc/kubernetes/admin.conf',
    '/etc/kubernetes/controller-manager.conf',
    '/etc/kubernetes/scheduler.conf',
    '/etc/kubernetes/super-admin.conf',
  ]);
  for (const line of unit.split('\n').filter((l) => /^(ReadOnlyPaths|InaccessiblePaths)=/.test(l))) {
    t.ok(
      line
        .split('=')[1]!
        .trim()
        .split(/\s+/)
        .every((p) => p.startsWith('-/')),
      `${line.split('=')[0]}: every path may be absent (worker nodes have none of them)`,
    );
  }
  t.equal(
    path.dirname(defaultConfig('x').kubelet.kubeconfig),
    '/etc/kubernetes',
    'the directory stays writable for the kubeconfig renames',
  );
});

t.test(
  'bad input (exit 2) and a dead join token (exit 5) fail the unit instead of restarting it every 30 s; every other failure restarts',
  async (t) => {
    t.equal(value('Restart'), 'on-failure');
    t.equal(value('RestartPreventExitStatus'), `${ExitCode.badInput} ${ExitCode.tokenNotSigned}`);
    const approver = readFileSync(new URL('../../systemd/kubeboot-approver.service', import.meta.url), 'utf8');
    t.match(approver, new RegExp(`^RestartPreventExitStatus=${ExitCode.badInput}$`, 'm'), 'the approver unit alike');
  },
);

t.test('memory and tasks are capped', async (t) => {
  t.match(value('MemoryMax'), /^\d+M$/);
  t.match(value('TasksMax'), /^\d+$/);
});

t.test('no core dump can carry a key: the unit sets LimitCORE=0 for the daemon, its passes and its hooks', async (t) => {
  t.equal(value('LimitCORE'), '0');
});

t.test('the launcher drops an inherited NODE_OPTIONS, so no report, heap snapshot or inspector is switched on from outside', async (t) => {
  const launcher = readFileSync(new URL('../../packaging/files/kubeboot.sh', import.meta.url), 'utf8');
  t.match(launcher, /exec \/usr\/lib\/kubeboot\/node /);
  // The shipped script, with a stand-in for the shipped node that prints what it was given.
  const node = path.join(t.testdir(), 'node');
  writeFileSync(node, `#!/bin/sh\necho "NODE_OPTIONS=$(printenv NODE_OPTIONS || echo '<unset>')"\necho "$@"\n`);
  chmodSync(node, 0o755);
  const script = launcher.replaceAll('/usr/lib/kubeboot/node', node);
  const ran = spawnSync('sh', ['-c', script, 'kubeboot', 'run', '--once'], {
    env: { PATH: process.env.PATH, NODE_OPTIONS: '--report-on-signal --heapsnapshot-signal=SIGUSR2 --inspect' },
    encoding: 'utf8',
  });
  t.equal(ran.status, 0, ran.stderr);
  t.same(ran.stdout.split('\n'), [
    'NODE_OPTIONS=<unset>',
    '--disable-sigusr1 --max-semi-space-size=1 --lite-mode /usr/lib/kubeboot/kubeboot.cjs run --once',
    '',
  ]);
});

t.test('--tpm device reaches the TPM the transport opens, and no other device', async (t) => {
  t.equal(value('PrivateDevices'), 'yes', 'the private /dev stays');
  t.equal(value('DevicePolicy'), 'closed');
  t.same(paths('BindPaths'), [RESOURCE_MANAGED_DEVICE], 'only the resource-managed TPM device is bound in');
  t.match(unit, new RegExp(`^BindPaths=-${RESOURCE_MANAGED_DEVICE}$`, 'm'), 'optional: a machine without a TPM still starts');
  t.same(
    [...unit.matchAll(/^DeviceAllow=(.*)$/gm)].map((m) => m[1]),
    [`${RESOURCE_MANAGED_DEVICE} rw`],
    `read and write on it, nothing else (not ${RAW_DEVICE}, which a second user would have to share)`,
  );
});
