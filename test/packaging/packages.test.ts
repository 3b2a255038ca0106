// The .deb and .rpm packages: what they contain, that the linters accept
// them, that they install, run and uninstall in a minimal Debian root, and
// that the shipped unit and cloud-init examples validate.
import { copyFileSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { basename, join } from 'node:path';
import t, { type Test } from 'tap';
import { parse as parseYaml } from 'yaml';
import {
  buildPackages,
  buildTools,
  chroot,
  elfMachine,
  extractDeb,
  nodeVersion,
  output,
  packages,
  repoRoot,
  run,
  scratchDebianRoot,
  toolsOrSkip,
  version,
} from './fixtures/packages.js';

const ELF_X86_64 = 62;
const ELF_AARCH64 = 183;
const versionLine = `kubeboot ${version} (node v${nodeVersion})\n`;
const tools = [...buildTools, 'lintian', 'rpmlint', 'rpm', 'debootstrap', 'chroot', 'systemd-analyze', 'cloud-init'];

/** Files every package carries, wherever the distribution differs. */
const commonFiles = [
  'usr/bin/kubeboot',
  'usr/lib/kubeboot/node',
  'usr/lib/kubeboot/kubeboot.cjs',
  'usr/lib/systemd/system/kubeboot.service',
  'usr/lib/systemd/system/kubeboot-approver.service',
  'usr/lib/systemd/system/kubelet.service.d/10-kubeboot.conf',
  'usr/lib/systemd/system/kube-proxy.service.d/10-kubeboot.conf',
  'usr/lib/tmpfiles.d/kubeboot.conf',
  'etc/kubeboot/config.yaml',
  'usr/share/kubeboot/cloud-init/user-data.yaml',
  'usr/share/kubeboot/cloud-init/user-data-pinned.yaml',
  'usr/share/doc/kubeboot/kubeboot.txt',
  'usr/share/doc/kubeboot/THIRD-PARTY-NOTICES.gz',
  'usr/share/man/man1/kubeboot.1.gz',
  ...readdirSync(join(repoRoot, 'packaging/manifests'))
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => `usr/share/kubeboot/manifests/${f}`),
  ...readdirSync(join(repoRoot, 'packaging/manifests/approver'))
    .filter((f) => f.endsWith('.yaml') || f === 'Kustomization')
    .map((f) => `usr/share/kubeboot/manifests/approver/${f}`),
  ...readdirSync(join(repoRoot, 'packaging/manifests/approver/deployment')).map(
    (f) => `usr/share/kubeboot/manifests/approver/deployment/${f}`,
  ),
  'usr/share/kubeboot/manifests/approver-kubelet-serving/kustomization.yaml',
  ...readdirSync(join(repoRoot, 'packaging/manifests/approver-metrics-auth')).map(
    (f) => `usr/share/kubeboot/manifests/approver-metrics-auth/${f}`,
  ),
  ...readdirSync(join(repoRoot, 'packaging/monitoring'))
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => `usr/share/kubeboot/monitoring/${f}`),
];

/** The credentials kubeboot writes for others; removing kubeboot must keep them. */
const planted = {
  'etc/kubernetes/kubelet.conf': 'kubelet kubeconfig\n',
  'var/lib/kubelet/pki/kubelet-client-current.pem': 'kubelet credential\n',
  'var/lib/kube-proxy/pki/kube-proxy-client-current.pem': 'kube-proxy credential\n',
};

function plant(root: string): void {
  for (const [file, content] of Object.entries(planted)) {
    mkdirSync(join(root, file, '..'), { recursive: true });
    writeFileSync(join(root, file), content, { mode: 0o600 });
  }
}

function assertPlantedKept(tt: Test, root: string): void {
  for (const [file, content] of Object.entries(planted)) {
    tt.equal(readFileSync(join(root, file), 'utf8'), content, `${file} is untouched`);
  }
}

const enabledLink = 'etc/systemd/system/multi-user.target.wants/kubeboot.service';
const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

/** `rpm -qp --dump` digest of one file in a package. */
function rpmDigest(rpm: string, path: string): string | undefined {
  const line = output('rpm', ['-qp', '--dump', rpm])
    .split('\n')
    .find((l) => l.startsWith(`${path} `));
  return line?.split(' ')[3];
}

if (toolsOrSkip(t, tools, true)) {
  buildPackages();

  t.test('builds a .deb and an .rpm per architecture, versioned from package.json', async (tt) => {
    for (const [deb, arch] of [
      [packages.debAmd64, 'amd64'],
      [packages.debArm64, 'arm64'],
    ] as const) {
      tt.equal(
        output('dpkg-deb', ['-f', deb, 'Package', 'Version', 'Architecture']),
        `Package: kubeboot\nVersion: ${version}\nArchitecture: ${arch}\n`,
        basename(deb),
      );
    }
    for (const [rpm, arch] of [
      [packages.rpmX86_64, 'x86_64'],
      [packages.rpmAarch64, 'aarch64'],
    ] as const) {
      tt.equal(
        output('rpm', ['-qp', '--qf', '%{NAME} %{VERSION} %{RELEASE} %{ARCH}', rpm]),
        `kubeboot ${version} 1 ${arch}`,
        basename(rpm),
      );
    }
  });

  t.test('each package ships the pinned Node of its own architecture, stripped', async (tt) => {
    for (const [deb, rpm, machine] of [
      [packages.debAmd64, packages.rpmX86_64, ELF_X86_64],
      [packages.debArm64, packages.rpmAarch64, ELF_AARCH64],
    ] as const) {
      const node = join(extractDeb(tt, deb), 'usr/lib/kubeboot/node');
      tt.equal(elfMachine(node), machine, `${basename(deb)}: ELF machine`);
      tt.notMatch(output('readelf', ['-S', '-W', node]), /\.symtab|\.debug_info/, `${basename(deb)}: stripped`);
      tt.equal(rpmDigest(rpm, '/usr/lib/kubeboot/node'), sha256(node), `${basename(rpm)} carries the same binary`);
    }
  });

  t.test('the .deb lays out the wrapper, bundle, units, config and docs', async (tt) => {
    const tree = extractDeb(tt, packages.debAmd64);
    for (const file of [
      ...commonFiles,
      'etc/default/kubeboot',
      'usr/share/doc/kubeboot/copyright',
      'usr/share/doc/kubeboot/changelog.gz',
    ]) {
      tt.ok(existsSync(join(tree, file)), file);
    }
    const wrapper = join(tree, 'usr/bin/kubeboot');
    tt.equal(statSync(wrapper).mode & 0o777, 0o755, 'wrapper is executable');
    const script = readFileSync(wrapper, 'utf8');
    tt.match(
      script,
      /^#!\/bin\/sh\n[\s\S]*\nexec \/usr\/lib\/kubeboot\/node --disable-sigusr1 \$heap \/usr\/lib\/kubeboot\/kubeboot\.cjs "\$@"\n$/,
      'wrapper execs the shipped node, with SIGUSR1 unable to open an inspector',
    );
    tt.match(
      script,
      /\n {2}run\) heap="--max-semi-space-size=1 --lite-mode" ;;\n/,
      'the resting daemon gets a small young generation and lite mode',
    );
    tt.match(script, /\n {2}approver\) heap=--max-semi-space-size=1 ;;\n/, 'the approver gets a small young generation');
    tt.match(
      script,
      /if \[ -z "\$\{NODE_COMPILE_CACHE\+x\}" \] && \[ "\$\(id -u\)" = 0 \]; then\n\s+NODE_COMPILE_CACHE=\/var\/cache\/kubeboot\n/,
      'the compile cache is root-only, in /var/cache/kubeboot',
    );
    const build = readFileSync(join(tree, 'usr/lib/kubeboot/kubeboot.cjs'), 'utf8').match(/'lib', "([0-9a-f]{12})", 'main\.mjs'/)?.[1];
    tt.ok(
      build && statSync(join(tree, 'usr/lib/kubeboot/lib', build, 'main.mjs')).isFile(),
      'the loader names a chunk directory the package ships',
    );
    tt.equal(
      output('dpkg-deb', ['-I', packages.debAmd64, 'conffiles']),
      '/etc/default/kubeboot\n/etc/kubeboot/config.yaml\n',
      'config files are conffiles',
    );
    tt.match(
      readFileSync(join(tree, 'usr/share/doc/kubeboot/kubeboot.txt'), 'utf8'),
      /Usage: kubeboot/,
      'help text generated from the bundle',
    );
    tt.match(
      readFileSync(join(tree, 'usr/share/doc/kubeboot/copyright'), 'utf8'),
      /^Format: https:\/\/www\.debian\.org\/doc\/packaging-manuals\/copyright-format\/1\.0\//,
      'machine-readable copyright',
    );
    tt.match(output('dpkg-deb', ['-f', packages.debAmd64, 'Depends']), /libc6 \(>= 2\.28\)/, 'declares the glibc baseline of Node 24');

    const config = readFileSync(join(tree, 'etc/kubeboot/config.yaml'), 'utf8');
    tt.equal(parseYaml(config), null, 'default config sets nothing: every key is commented out');
    // The environment file may hold KUBEBOOT_TOKEN, as the --token help suggests.
    tt.equal(statSync(join(tree, 'etc/default/kubeboot')).mode & 0o777, 0o600, 'etc/default/kubeboot is 0600');
    for (const key of ['#bootstrapKubeconfig:', '#nodeName:', '#keyAlgorithm:', '#kubeProxy:', '#  enabled:'])
      tt.match(config, key, `documents ${key}`);
  });

  t.test('the .rpm marks its config files noreplace and carries the licence', async (tt) => {
    const listing = output('rpm', ['-qp', '--qf', '[%{FILEFLAGS:fflags} %{FILENAMES}\n]', packages.rpmX86_64]);
    const files = new Map(
      listing
        .trim()
        .split('\n')
        .map((l) => [l.slice(l.indexOf(' ') + 1), l.slice(0, l.indexOf(' '))]),
    );
    for (const file of [...commonFiles, 'etc/sysconfig/kubeboot', 'usr/share/licenses/kubeboot/LICENSE'])
      tt.ok(files.has(`/${file}`), file);
    tt.equal(files.get('/etc/kubeboot/config.yaml'), 'cn', 'config.yaml is %config(noreplace)');
    tt.equal(files.get('/etc/sysconfig/kubeboot'), 'cn', 'sysconfig is %config(noreplace)');
    const modes = new Map(
      output('rpm', ['-qp', '--qf', '[%{FILEMODES:octal} %{FILENAMES}\n]', packages.rpmX86_64])
        .trim()
        .split('\n')
        .map((l) => [l.slice(l.indexOf(' ') + 1), l.slice(0, l.indexOf(' '))]),
    );
    tt.equal(modes.get('/etc/sysconfig/kubeboot')?.slice(-4), '0600', '/etc/sysconfig/kubeboot is 0600');
    tt.equal(files.get('/usr/share/licenses/kubeboot/LICENSE'), 'l', 'LICENSE is %license');
    tt.notOk(files.has('/etc/default/kubeboot'), 'no Debian-style environment file');
  });

  t.test('lintian reports no errors for the .debs', async (tt) => {
    // Overrides ship in the package (packaging/deb/lintian-overrides), each with its reason.
    const r = run('lintian', ['--allow-root', '--fail-on', 'error', packages.debAmd64, packages.debArm64]);
    tt.notMatch(r.stdout, /^E: /m, 'no E: lines', { output: r.stdout });
    tt.equal(r.status, 0, 'lintian exit status', { output: r.stderr });
  });

  t.test('rpmlint reports no errors for the .rpms', async (tt) => {
    const r = run('rpmlint', [
      '-r',
      'packaging/rpm/rpmlintrc',
      '-c',
      'packaging/rpm/rpmlint.toml',
      packages.rpmX86_64,
      packages.rpmAarch64,
    ]);
    tt.match(r.stdout, / 0 errors, /, '0 errors', { output: r.stdout });
    tt.equal(r.status, 0, 'rpmlint exit status', { output: r.stderr });
  });

  t.test('the unit is hardened but keeps what V8, sd_notify and the API client need', async (tt) => {
    const unit = readFileSync(join(repoRoot, 'systemd/kubeboot.service'), 'utf8');
    hasLines(tt, unit, [
      'Type=notify',
      'NotifyAccess=all',
      'ExecStart=/usr/bin/kubeboot run $KUBEBOOT_ARGS',
      'Before=kubelet.service kube-proxy.service',
      'ProtectSystem=strict',
      'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6',
      'CapabilityBoundingSet=',
      'UMask=0077',
    ]);
    tt.notMatch(unit, /^MemoryDenyWriteExecute=/m, 'no MemoryDenyWriteExecute: V8 JIT needs W+X pages');
    tt.notMatch(unit, /^(PrivateNetwork|PrivateUsers|IPAddressDeny)=/m, 'network and uid 0 stay real');
  });

  t.test('the approver unit runs unprivileged with its kubeconfig as a credential', async (tt) => {
    const unit = readFileSync(join(repoRoot, 'systemd/kubeboot-approver.service'), 'utf8');
    hasLines(tt, unit, [
      'Type=notify',
      'NotifyAccess=all',
      'DynamicUser=yes',
      'LoadCredential=approver.conf:/etc/kubeboot/approver.conf',
      'ExecStart=/usr/bin/kubeboot approver --kubeconfig %d/approver.conf $KUBEBOOT_APPROVER_ARGS',
      'ProtectSystem=strict',
      'CapabilityBoundingSet=',
      'LimitCORE=0',
    ]);
    tt.notMatch(unit, /^MemoryDenyWriteExecute=/m, 'no MemoryDenyWriteExecute: V8 JIT needs W+X pages');
  });

  t.test('cloud-init accepts both user-data examples', async (tt) => {
    for (const name of ['user-data.yaml', 'user-data-pinned.yaml']) {
      const file = join(repoRoot, 'packaging/cloud-init', name);
      const r = run('cloud-init', ['schema', '--config-file', file]);
      tt.equal(r.status, 0, `${name}: cloud-init schema`, { output: r.stdout + r.stderr });
      const doc = parseYaml(readFileSync(file, 'utf8'));
      const bootstrap = doc.write_files.find((f: { path: string }) => f.path === '/etc/kubernetes/bootstrap-kubelet.conf');
      tt.equal(bootstrap.permissions, '0600', `${name}: bootstrap kubeconfig is 0600 (a string)`);
      tt.ok(doc.runcmd.includes('systemctl enable --now kubeboot'), `${name}: starts kubeboot`);
      const kubeconfig = parseYaml(bootstrap.content);
      if (name === 'user-data-pinned.yaml') {
        tt.notOk(kubeconfig.clusters[0].cluster['certificate-authority-data'], 'pinned: no CA in the kubeconfig');
        const env = doc.write_files.find((f: { path: string }) => f.path === '/etc/default/kubeboot');
        tt.match(env.content, /^KUBEBOOT_CA_CERT_HASH=sha256:/m, 'pinned: the CA pin');
      } else {
        tt.ok(kubeconfig.clusters[0].cluster['certificate-authority-data'], 'carries the CA');
      }
    }
  });

  t.test('the .deb installs into a minimal Debian root, runs there, and removal keeps the node credentials', async (tt) => {
    const root = scratchDebianRoot(tt);
    plant(root);
    copyFileSync(packages.debAmd64, join(root, 'tmp/kubeboot.deb'));

    const install = chroot(root, ['dpkg', '-i', '/tmp/kubeboot.deb']);
    tt.equal(install.status, 0, 'dpkg -i', { output: install.stdout + install.stderr });
    tt.equal(install.stderr, '', 'maintainer scripts are quiet');
    const ver = chroot(root, ['kubeboot', '--version']);
    tt.equal(ver.stdout, versionLine, 'installed kubeboot --version');
    const help = chroot(root, ['kubeboot', 'check', '--help']);
    tt.equal(help.status, 0, 'kubeboot check --help', { output: help.stderr });
    tt.match(help.stdout, /check/, 'help mentions check');
    tt.ok(lstatSync(join(root, enabledLink)).isSymbolicLink(), 'unit enabled on install');
    tt.equal(statSync(join(root, 'var/lib/kubeboot')).mode & 0o777, 0o700, 'state dir 0700');

    // With the real systemd of the root, its /bin/kill and the installed binary.
    for (const unit of ['kubelet.service', 'kube-proxy.service']) {
      writeFileSync(join(root, 'etc/systemd/system', unit), '[Service]\nExecStart=/bin/true\n');
    }
    // --man=no: minbase has no man-db to resolve Documentation=man:kubeboot(1).
    const verify = run('systemd-analyze', [
      'verify',
      '--man=no',
      `--root=${root}`,
      'kubeboot.service',
      'kubeboot-approver.service',
      'kubelet.service',
      'kube-proxy.service',
    ]);
    tt.equal(`${verify.stdout}${verify.stderr}`, '', 'systemd-analyze verify prints nothing');
    tt.equal(verify.status, 0, 'systemd-analyze verify');
    for (const unit of ['kubeboot.service', 'kubeboot-approver.service']) {
      const security = output('systemd-analyze', ['security', '--offline=true', `--root=${root}`, unit]);
      const exposure = new RegExp(`Overall exposure level for ${unit.replaceAll('.', '\\.')}: ([\\d.]+) (\\S+)`).exec(security);
      tt.ok(exposure, `${unit}: exposure reported`);
      tt.comment(`${unit}: systemd-analyze security exposure: ${exposure?.[1]} ${exposure?.[2]}`);
      tt.ok(Number(exposure?.[1]) <= 2.0, `${unit}: exposure ${exposure?.[1]} <= 2.0`);
      tt.equal(exposure?.[2], 'OK', `${unit}: OK`);
    }
    tt.notOk(
      existsSync(join(root, 'etc/systemd/system/multi-user.target.wants/kubeboot-approver.service')),
      'the approver unit is not enabled on install',
    );

    const again = chroot(root, ['dpkg', '-i', '/tmp/kubeboot.deb']);
    tt.equal(again.status, 0, 'reinstall (upgrade path)', { output: again.stderr });
    tt.ok(lstatSync(join(root, enabledLink)).isSymbolicLink(), 'still enabled after upgrade');

    const remove = chroot(root, ['dpkg', '-r', 'kubeboot']);
    tt.equal(remove.status, 0, 'dpkg -r', { output: remove.stderr });
    tt.notOk(existsSync(join(root, enabledLink)), 'disabled on remove');
    tt.notOk(existsSync(join(root, 'usr/lib/kubeboot')), 'program removed');
    tt.ok(existsSync(join(root, 'etc/kubeboot/config.yaml')), 'conffile kept until purge');

    const reinstall = chroot(root, ['dpkg', '-i', '/tmp/kubeboot.deb']);
    tt.equal(reinstall.status, 0, 'install after remove');
    tt.ok(lstatSync(join(root, enabledLink)).isSymbolicLink(), 'enabled again after remove + install');

    const purge = chroot(root, ['dpkg', '-P', 'kubeboot']);
    tt.equal(purge.status, 0, 'dpkg -P', { output: purge.stderr });
    tt.notOk(existsSync(join(root, 'var/lib/kubeboot')), 'purge removes kubeboot state');
    tt.notOk(existsSync(join(root, 'etc/kubeboot')), 'purge removes the config');
    tt.notOk(existsSync(join(root, 'etc/default/kubeboot')), 'purge removes the environment file');
    assertPlantedKept(tt, root);
  });

  t.test('the .rpm installs into a root, runs there, and erasing keeps the node credentials', async (tt) => {
    const root = scratchDebianRoot(tt);
    plant(root);
    // --force-debian: Debian's rpm otherwise warns against installing rpms;
    // --nodeps: the Debian root has no rpm database of glibc and friends.
    const rpm = (args: string[]) => run('rpm', ['--root', root, '--force-debian', '--nodeps', ...args]);

    const install = rpm(['-i', packages.rpmX86_64]);
    tt.equal(install.status, 0, 'rpm -i', { output: install.stdout + install.stderr });
    tt.equal(install.stderr, '', 'scriptlets are quiet');
    tt.equal(chroot(root, ['kubeboot', '--version']).stdout, versionLine, 'installed kubeboot --version');
    const help = chroot(root, ['kubeboot', 'check', '--help']);
    tt.equal(help.status, 0, 'kubeboot check --help', { output: help.stderr });
    tt.ok(lstatSync(join(root, enabledLink)).isSymbolicLink(), 'unit enabled on install');
    tt.ok(existsSync(join(root, 'etc/sysconfig/kubeboot')), 'environment file');
    tt.equal(statSync(join(root, 'var/lib/kubeboot')).mode & 0o777, 0o700, 'state dir 0700');

    const upgrade = rpm(['-U', '--replacepkgs', packages.rpmX86_64]);
    tt.equal(upgrade.status, 0, 'rpm -U (upgrade path)', { output: upgrade.stderr });
    tt.ok(lstatSync(join(root, enabledLink)).isSymbolicLink(), 'still enabled after upgrade');

    const erase = rpm(['-e', 'kubeboot']);
    tt.equal(erase.status, 0, 'rpm -e', { output: erase.stderr });
    tt.notOk(existsSync(join(root, enabledLink)), 'disabled on erase');
    tt.notOk(existsSync(join(root, 'usr/lib/kubeboot')), 'program removed');
    tt.notOk(existsSync(join(root, 'var/lib/kubeboot')), 'erase removes kubeboot state (rpm has no purge)');
    assertPlantedKept(tt, root);
  });
}

/** Each line appears in `unit` exactly as written, as a whole line. */
function hasLines(tt: Test, unit: string, lines: string[]): void {
  for (const line of lines) tt.match(unit, new RegExp(`^${line.replace(/[$.%]/g, '\\$&')}$`, 'm'), line);
}
