// The built .deb on a node booted by a real systemd 252 (systemd-nspawn),
// against a real control plane on the host's loopback: readiness and
// ordering, the sandbox, the journal, the watchdog, reload/stop/restart and
// the package's lifecycle, as an operator's node would live them. The
// subtests run in order on one node; each states what it relies on.
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { assertNoSecrets, forbid } from '../support/kubeboot.js';
import { freePort } from '../support/processes.js';
import { buildPackages, buildTools, output, packages, toolsOrSkip } from '../packaging/fixtures/packages.js';
import { bootNode, installPackage, type Node } from './fixtures/node.js';

const kubeletConf = '/etc/kubernetes/kubelet.conf';
const kubeProxyConf = '/etc/kubernetes/kube-proxy.conf';
const clientSigner = 'kubernetes.io/kube-apiserver-client';
// The test's own drop-in: a short watchdog and restart delay, so a watchdog
// kill and a restart take seconds rather than the shipped 60 s + 30 s. Every
// other setting is the shipped unit's.
const fastDropIn = '[Service]\nWatchdogSec=10s\nRestartSec=2s\n';

if (toolsOrSkip(t, ['systemd-nspawn', 'nsenter', 'debootstrap', ...buildTools], true)) {
  buildPackages();
  const plane = await controlPlaneOrSkip(t, { name: 'systemd', signingDuration: '10m' });
  if (plane) await suite(plane);
}

async function suite(plane: NonNullable<Awaited<ReturnType<typeof controlPlaneOrSkip>>>): Promise<void> {
  const port = await freePort();
  const config = (margin?: string) =>
    [
      `listen: 127.0.0.1:${port}`,
      ...(margin ? ['renewal:', `  margin: ${margin}`] : []),
      '# A post-renewal hook as an operator writes it: restart the kubelet.',
      'kubelet:',
      '  hooks:',
      '    - [/usr/bin/systemctl, --no-block, try-restart, kubelet.service]',
      '',
    ].join('\n');
  const node: Node = await bootNode(t, plane, config());
  forbid(node.token.secret, node.token.token);
  t.comment(`container ${node.name} booted in ${node.bootMs} ms`);
  const csrsOf = async (signer?: string) =>
    (await plane.admin.listCsrs()).filter((c: KubeObject) => signer === undefined || c.spec?.signerName === signer);
  const active = (unit: string) => node.unitProperty(unit, 'ActiveState');
  const waitActive = (unit: string, what = `${unit} active`) =>
    plane.admin.waitFor(what, async () => ((await active(unit)) === 'active' ? true : undefined), 90_000);
  const kubeletCredentialTarget = async () =>
    (await node.run(['readlink', '-f', '/var/lib/kubelet/pki/kubelet-client-current.pem'])).trim();

  await t.test(
    'boot to credentials: kubeboot goes active only after READY, and the kubelet starts after it with a working kubelet.conf',
    async (t) => {
      // cloud-init caches user-data with the token; kubeboot must warn about it.
      await node.run(['mkdir', '-p', '/var/lib/cloud/instance']);
      node.writeFile(
        '/var/lib/cloud/instance/user-data.txt',
        `#cloud-config\nwrite_files:\n  - path: /etc/kubernetes/bootstrap-kubelet.conf\n    content: |\n      token: ${node.token.token}\n`,
        0o600,
      );
      const began = Date.now();
      t.match(await installPackage(node), /Setting up kubeboot/);
      await node.run(['systemctl', 'start', '--no-block', 'kubelet.service', 'kube-proxy.service']);
      // kube-proxy's CSR needs an approver; the test is that approver.
      const pending = await plane.admin.waitFor(
        'kube-proxy CSR',
        async () => (await csrsOf(clientSigner)).find((c) => !c.status?.conditions),
        90_000,
      );
      await plane.admin.approveCsr(pending.metadata.name);
      await waitActive('kubeboot.service');
      await waitActive('kubelet.service');
      await waitActive('kube-proxy.service');
      t.comment(`package install to kubeboot READY: ${Date.now() - began} ms`);
      const started = await node.numberProperty('kubeboot.service', 'ExecMainStartTimestampMonotonic');
      const readyAt = await node.numberProperty('kubeboot.service', 'ActiveEnterTimestampMonotonic');
      t.comment(`kubeboot process start to READY (kubelet credential issued and proven): ${Math.round((readyAt - started) / 1000)} ms`);

      const kubeletStart = await node.numberProperty('kubelet.service', 'ExecMainStartTimestampMonotonic');
      const proxyStart = await node.numberProperty('kube-proxy.service', 'ExecMainStartTimestampMonotonic');
      t.ok(readyAt > 0 && kubeletStart >= readyAt, `the kubelet started (${kubeletStart} µs) after kubeboot went active (${readyAt} µs)`);
      t.ok(proxyStart >= readyAt, 'kube-proxy started after kubeboot went active');
      // Type=notify: active means READY=1 arrived. It must not come before the credential exists.
      const activeSince = Number(await node.sh('date -d "$(systemctl show -p ActiveEnterTimestamp --value kubeboot.service)" +%s'));
      const written = Math.floor(statSync(join(node.root, kubeletConf)).mtimeMs / 1000);
      t.ok(activeSince >= written, `kubeboot went active (${activeSince}) no earlier than kubelet.conf was written (${written})`);
      t.equal(await node.unitProperty('kubeboot.service', 'Type'), 'notify');
      const daemonPid = await node.numberProperty('kubeboot.service', 'MainPID');
      const argv = (await node.run(['cat', `/proc/${daemonPid}/cmdline`])).split('\0');
      t.same(
        argv.slice(0, 5),
        ['/usr/lib/kubeboot/node', '--disable-sigusr1', '--max-semi-space-size=1', '--lite-mode', '/usr/lib/kubeboot/kubeboot.cjs'],
        "the daemon runs on the shipped node with the launcher's flags",
      );

      t.same(
        await node.standInRecorded('kubelet', 1),
        [`system:node:${node.name}`],
        'the kubelet found a working kubelet.conf at its first start',
      );
      t.same(
        await node.standInRecorded('kube-proxy', 1),
        ['system:kube-proxy'],
        'kube-proxy found a working kube-proxy.conf at its first start',
      );
      // Deleted once every identity is proven: kube-proxy's proof may finish just after its start.
      await plane.admin.waitFor('the bootstrap kubeconfig deleted', async () =>
        (await node.exec(['test', '-e', '/etc/kubernetes/bootstrap-kubelet.conf'])).code === 1 ? true : undefined,
      );
      t.pass('the bootstrap kubeconfig is gone');
      const mode = statSync(join(node.root, '/var/lib/kubeboot')).mode & 0o777;
      t.equal(mode, 0o700, 'tmpfiles.d made /var/lib/kubeboot 0700');
      t.equal((await node.run(['systemctl', 'is-enabled', 'kubeboot.service'])).trim(), 'enabled', 'the postinst enabled the unit');
    },
  );

  await t.test('the journal holds one readable line per message with its priority, so -p warning shows exactly the warnings', async (t) => {
    const entries = (await node.run(['journalctl', '--no-pager', '-o', 'json', '-u', 'kubeboot.service', '_TRANSPORT=stdout']))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { MESSAGE: string; PRIORITY: string });
    t.ok(entries.length >= 3, `kubeboot logged ${entries.length} lines to the journal`);
    t.same(
      entries.filter((e) => /^\{|^<\d>/.test(e.MESSAGE)).map((e) => e.MESSAGE),
      [],
      'readable lines: no JSON, no priority prefix left in the text',
    );
    t.ok(
      entries.some((e) => e.PRIORITY === '6'),
      'info lines at priority 6',
    );
    const warnings = (
      await node.run(['journalctl', '--no-pager', '-o', 'cat', '-u', 'kubeboot.service', '_TRANSPORT=stdout', '-p', 'warning'])
    )
      .split('\n')
      .filter(Boolean);
    t.match(
      warnings.join('\n'),
      /bootstrap token is still present in \/var\/lib\/cloud\/instance\/user-data\.txt/,
      'the cloud-init warning is a warning',
    );
    t.same(
      warnings,
      entries.filter((e) => Number(e.PRIORITY) <= 4).map((e) => e.MESSAGE),
      'journalctl -p warning shows exactly the lines kubeboot logged as warnings or errors',
    );
    t.ok(warnings.length < entries.length, 'and not the info lines');
    assertNoSecrets(t, await node.journal([]), 'the whole journal');
  });

  await t.test(
    'the sandbox suffices: /metrics, a timer renewal with its post-renewal hook, reload renews, live exposure as offline',
    async (t) => {
      const metrics = await fetch(`http://127.0.0.1:${port}/metrics`);
      t.equal(metrics.status, 200);
      t.match(await metrics.text(), /kubeboot_certificate_expiration_timestamp_seconds/, '/metrics served from inside the sandbox');

      const before = await kubeletCredentialTarget();
      const kubeletCsrs = async () => (await csrsOf('kubernetes.io/kube-apiserver-client-kubelet')).length;
      const csrsBefore = await kubeletCsrs();
      // A margin 10 s short of the 10-minute lifetime: the renewal timer fires
      // soon after each issue (held 30 s apart, 5 % of the lifetime, by the
      // daemon's guard). Config changes take effect on reload.
      node.writeFile('/etc/kubeboot/config.yaml', config('590s'));
      await node.run(['systemctl', 'reload', 'kubeboot.service']);
      await plane.admin.waitFor(
        'a renewal by reload, then one by the timer',
        async () => ((await kubeletCsrs()) >= csrsBefore + 2 ? true : undefined),
        120_000,
      );
      node.writeFile('/etc/kubeboot/config.yaml', config());
      await node.run(['systemctl', 'reload', 'kubeboot.service']);
      const after = await plane.admin.waitFor('the kubelet credential of the last renewal', async () => {
        const target = await kubeletCredentialTarget();
        return target !== before ? target : undefined;
      });
      t.not(after, before, 'a new dated kubelet credential file');
      const starts = await node.standInRecorded('kubelet', 2);
      t.same(
        new Set(starts),
        new Set([`system:node:${node.name}`]),
        `the hook restarted the kubelet (${starts.length} starts), each time with a working kubelet.conf`,
      );
      t.equal(await active('kubeboot.service'), 'active');

      const live = await node.run(['systemd-analyze', 'security', 'kubeboot.service']);
      const offline = await node.run(['systemd-analyze', 'security', '--offline=true', '/usr/lib/systemd/system/kubeboot.service']);
      const exposure = (text: string) => /Overall exposure level for kubeboot\.service: ([\d.]+ \S+)/.exec(text)?.[1];
      t.ok(exposure(live), 'live exposure reported');
      t.comment(`systemd-analyze security, live: ${exposure(live)}, offline: ${exposure(offline)}`);
      t.equal(exposure(live), exposure(offline), 'the running unit is exactly as exposed as the shipped file says');
    },
  );

  await t.test(
    'watchdog: a stopped daemon is killed and restarted after WatchdogSec, and comes back READY with its credentials',
    async (t) => {
      await node.run(['mkdir', '-p', '/etc/systemd/system/kubeboot.service.d']);
      node.writeFile('/etc/systemd/system/kubeboot.service.d/50-test.conf', fastDropIn);
      await node.run(['systemctl', 'daemon-reload']);
      await node.run(['systemctl', 'restart', 'kubeboot.service']);
      t.equal(await node.unitProperty('kubeboot.service', 'WatchdogUSec'), '10s');
      const credential = await kubeletCredentialTarget();
      const csrs = (await csrsOf()).length;
      const restarts = await node.numberProperty('kubeboot.service', 'NRestarts');
      const pid = await node.numberProperty('kubeboot.service', 'MainPID');
      const stoppedAt = Date.now();
      await node.run(['kill', '-STOP', String(pid)]);
      await plane.admin.waitFor(
        'a restart after the watchdog',
        async () => ((await node.numberProperty('kubeboot.service', 'NRestarts')) > restarts ? true : undefined),
        60_000,
      );
      await waitActive('kubeboot.service', 'kubeboot READY again');
      const took = Date.now() - stoppedAt;
      t.comment(`kill -STOP to READY again: ${took} ms`);
      const journal = await node.journal(['-u', 'kubeboot.service', '--since', '-2min']);
      t.match(journal, /Watchdog timeout/, 'systemd saw the watchdog timeout');
      t.comment(
        `systemd said:\n${journal
          .split('\n')
          .filter((l) => /Watchdog|signal|Main process exited|Failed with result|Scheduled restart/.test(l))
          .join('\n')}`,
      );
      t.equal(await node.numberProperty('kubeboot.service', 'NRestarts'), restarts + 1, 'exactly one restart: no false alarm while it ran');
      t.ok(took >= 10_000, 'not before WatchdogSec');
      t.not(await node.numberProperty('kubeboot.service', 'MainPID'), pid, 'a new main process');
      t.equal(await kubeletCredentialTarget(), credential, 'the credential survived');
      t.equal((await csrsOf()).length, csrs, 'no new CSR: the restarted daemon trusted what was on disk');
      t.equal(await node.whoami(kubeletConf), `system:node:${node.name}`);
    },
  );

  await t.test('Restart=on-failure brings the daemon back after kill -9; stop is quick and clean', async (t) => {
    const restarts = await node.numberProperty('kubeboot.service', 'NRestarts');
    const pid = await node.numberProperty('kubeboot.service', 'MainPID');
    await node.run(['kill', '-KILL', String(pid)]);
    await plane.admin.waitFor(
      'a restart after kill -9',
      async () => ((await node.numberProperty('kubeboot.service', 'NRestarts')) > restarts ? true : undefined),
      60_000,
    );
    await waitActive('kubeboot.service');
    t.not(await node.numberProperty('kubeboot.service', 'MainPID'), pid);

    const began = Date.now();
    await node.run(['systemctl', 'stop', 'kubeboot.service']);
    const took = Date.now() - began;
    t.comment(`systemctl stop took ${took} ms`);
    t.ok(took < 10_000, `stop took ${took} ms, well inside TimeoutStopSec=30s`);
    t.equal(await node.unitProperty('kubeboot.service', 'Result'), 'success', 'it exited on SIGTERM by itself');
    t.equal(await node.whoami(kubeletConf), `system:node:${node.name}`, 'credentials stay usable while kubeboot is stopped');
    await node.run(['systemctl', 'start', 'kubeboot.service'], { timeoutMs: 90_000 });
    t.equal(await active('kubeboot.service'), 'active', 'start waits for READY and succeeds');
  });

  await t.test('no syscall was refused: nothing killed by SIGSYS, no EPERM complaint', async (t) => {
    const journal = await node.journal(['-u', 'kubeboot.service']);
    t.notMatch(journal, /SIGSYS|status=31\/SYS|Bad system call/, 'no seccomp kill');
    t.notMatch(journal, /EPERM|Operation not permitted/, 'no refused operation');
  });

  await t.test('upgrading to a rebuilt package with a higher version restarts the daemon without a new CSR', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'kubeboot-upgrade-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    output('dpkg-deb', ['-R', packages.debAmd64, join(dir, 'tree')]);
    const control = join(dir, 'tree/DEBIAN/control');
    const version = /^Version: (.+)$/m.exec(readFileSync(control, 'utf8'))![1]!;
    writeFileSync(control, readFileSync(control, 'utf8').replace(/^Version: .+$/m, `Version: ${version}+upgrade1`));
    output('dpkg-deb', ['--root-owner-group', '-Zxz', '-z0', '-b', join(dir, 'tree'), join(dir, 'upgrade.deb')]);
    copyFileSync(join(dir, 'upgrade.deb'), join(node.root, 'var/tmp/upgrade.deb'));

    const pid = await node.numberProperty('kubeboot.service', 'MainPID');
    const csrs = (await csrsOf()).length;
    await installPackage(node, '/var/tmp/upgrade.deb');
    // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own format, not a template
    t.equal((await node.run(['dpkg-query', '-W', '-f=${Version}', 'kubeboot'])).trim(), `${version}+upgrade1`);
    await plane.admin.waitFor(
      'the upgraded daemon running',
      async () =>
        (await node.numberProperty('kubeboot.service', 'MainPID')) !== pid && (await active('kubeboot.service')) === 'active'
          ? true
          : undefined,
      90_000,
    );
    t.pass('the daemon was restarted and is READY');
    t.equal((await csrsOf()).length, csrs, 'no new CSR');
  });

  await t.test('apt-get remove stops the daemon and leaves the credentials; purge removes only kubeboot state', async (t) => {
    const credential = await kubeletCredentialTarget();
    await node.run(['env', 'DEBIAN_FRONTEND=noninteractive', 'apt-get', 'remove', '-y', '-q', 'kubeboot'], { timeoutMs: 120_000 });
    t.not(await active('kubeboot.service'), 'active', 'stopped');
    t.equal((await node.exec(['pgrep', '-f', 'kubeboot.cjs'])).code, 1, 'no kubeboot process left');
    t.equal(await kubeletCredentialTarget(), credential, 'the kubelet credential is left');
    t.equal(await node.whoami(kubeletConf), `system:node:${node.name}`);
    t.equal(await node.whoami(kubeProxyConf), 'system:kube-proxy');
    t.equal((await node.exec(['test', '-d', '/var/lib/kubeboot'])).code, 0, 'state stays until purge');

    await node.run(['dpkg', '--purge', 'kubeboot'], { timeoutMs: 120_000 });
    t.equal((await node.exec(['test', '-e', '/var/lib/kubeboot'])).code, 1, 'purge removed /var/lib/kubeboot');
    t.equal(await kubeletCredentialTarget(), credential, 'and nothing the kubelet owns');
    t.equal(await node.whoami(kubeletConf), `system:node:${node.name}`);
    t.equal(await node.whoami(kubeProxyConf), 'system:kube-proxy');
  });

  await t.test(
    'after systemctl disable --now kubeboot kubelet.conf works; masked, the kubelet and kube-proxy restart on their credentials alone',
    async (t) => {
      // A node that had it purged installs it again (its credentials exist: postinst starts it).
      await installPackage(node);
      await waitActive('kubeboot.service');
      await node.run(['systemctl', 'disable', '--now', 'kubeboot.service']);
      t.equal((await node.exec(['systemctl', 'is-enabled', 'kubeboot.service'])).stdout.trim(), 'disabled');
      t.not(await active('kubeboot.service'), 'active');
      t.equal(await node.whoami(kubeletConf), `system:node:${node.name}`, 'kubelet.conf works');
      // What the README says: disabled is not off, the drop-ins' Wants= start it with the kubelet.
      await node.run(['systemctl', 'restart', 'kubelet.service']);
      t.equal(await active('kubeboot.service'), 'active', "a disabled kubeboot is started again by the kubelet's Wants=");
      // Masked, it stays off, and the restarts prove the kubelet's and
      // kube-proxy's (ExecStartPre=kubeboot wait) independence.
      await node.run(['systemctl', 'mask', '--now', 'kubeboot.service']);
      for (const [unit, who] of [
        ['kubelet', `system:node:${node.name}`],
        ['kube-proxy', 'system:kube-proxy'],
      ] as const) {
        const starts = (await node.standInStarts(unit)).length;
        await node.run(['systemctl', 'restart', `${unit}.service`]);
        t.equal((await node.standInRecorded(unit, starts + 1)).at(-1), who, `${unit} restarts and runs on its credentials`);
      }
      t.equal(await active('kubeboot.service'), 'inactive', 'without kubeboot running');
    },
  );
}
