// `npm run repo`: the built packages as a signed apt repository and a signed
// yum repository. Served on loopback, apt inside a minimal Debian root that
// trusts only the repository's key installs kubeboot from it and refuses a
// tampered Release; rpm verifies the signed RPMs against the same key.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { execFile } from 'node:child_process';
import {
  buildPackages,
  buildTools,
  cleanEnv,
  output,
  packages,
  repoRoot,
  run,
  scratchDebianRoot,
  toolsOrSkip,
  version,
} from './fixtures/packages.js';
import { buildSignedRepo, serveDirectory } from './fixtures/repo.js';

/**
 * The fixture's chroot, but asynchronous: apt inside the root fetches from
 * the server in this very process, which a blocking spawn would starve.
 */
function chroot(root: string, args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const env = Object.entries(cleanEnv).map(([k, v]) => `${k}=${v}`);
  return new Promise((resolve) => {
    execFile(
      'chroot',
      [root, '/usr/bin/env', '-i', ...env, ...args],
      { env: cleanEnv, maxBuffer: 64 << 20, timeout: 300_000 },
      (err, stdout, stderr) => {
        const status = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : null;
        resolve({ status, stdout, stderr });
      },
    );
  });
}

const bundle = join(repoRoot, 'dist/kubeboot.cjs');
const TOKEN = 'abcdef.0123456789abcdef';
const tools = [...buildTools, 'apt-ftparchive', 'createrepo_c', 'rpmsign', 'rpm', 'gpg', 'debootstrap', 'chroot', 'dnf'];

if (toolsOrSkip(t, tools, true)) {
  buildPackages();
  const dir = t.testdir();
  const { dir: repo, key, gpgEnv: env } = buildSignedRepo(dir);
  t.pass('repo.sh succeeds');
  const { base } = await serveDirectory(t, repo);

  t.test('the apt repository has signed Release files for the suite', async (t) => {
    const dists = join(repo, 'apt/dists/stable');
    t.same(readdirSync(dists).sort(), ['InRelease', 'Release', 'Release.gpg', 'main']);
    const release = readFileSync(join(dists, 'Release'), 'utf8');
    t.match(release, /^Suite: stable$/m);
    t.match(release, /^Architectures: amd64 arm64$/m);
    t.match(release, /main\/binary-amd64\/Packages$/m);
    const verify = run('gpg', ['--verify', join(dists, 'Release.gpg'), join(dists, 'Release')], { env });
    t.equal(verify.status, 0, 'Release.gpg is a valid detached signature');
    const index = readFileSync(join(dists, 'main/binary-amd64/Packages'), 'utf8');
    t.match(index, /^Package: kubeboot$/m);
    t.match(index, `\nVersion: ${version}\n`);
    t.match(index, `\nFilename: pool/main/kubeboot_${version}_amd64.deb\n`);
  });

  t.test('apt in a Debian root that trusts only the repository key installs kubeboot from it', async (t) => {
    const root = scratchDebianRoot(t);
    // Only this source: no other repository and no other trusted key takes part.
    writeFileSync(join(root, 'etc/apt/sources.list'), '');
    for (const d of ['etc/apt/sources.list.d', 'etc/apt/trusted.gpg.d']) {
      for (const f of existsSync(join(root, d)) ? readdirSync(join(root, d)) : []) run('rm', ['-f', join(root, d, f)]);
    }
    mkdirSync(join(root, 'etc/apt/keyrings'), { recursive: true });
    writeFileSync(join(root, 'etc/apt/keyrings/kubeboot.asc'), readFileSync(key), { mode: 0o644 });
    writeFileSync(
      join(root, 'etc/apt/sources.list.d/kubeboot.list'),
      `deb [signed-by=/etc/apt/keyrings/kubeboot.asc] ${base}/apt stable main\n`,
    );

    const update = await chroot(root, ['apt-get', 'update']);
    t.equal(update.status, 0, `apt-get update: ${update.stdout}${update.stderr}`);
    t.notMatch(update.stderr, /GPG error|not signed|NO_PUBKEY/);
    const install = await chroot(root, [
      'env',
      'DEBIAN_FRONTEND=noninteractive',
      'apt-get',
      'install',
      '-y',
      '--no-install-recommends',
      'kubeboot',
    ]);
    t.equal(install.status, 0, `apt-get install kubeboot: ${install.stdout.slice(-2000)}${install.stderr}`);
    t.match((await chroot(root, ['kubeboot', '--version'])).stdout, `kubeboot ${version} `);

    t.test('a tampered Release is refused', async (t) => {
      const inRelease = join(repo, 'apt/dists/stable/InRelease');
      const original = readFileSync(inRelease, 'utf8');
      t.teardown(() => writeFileSync(inRelease, original));
      // One changed byte inside the signed text: the clearsigned signature no longer matches.
      writeFileSync(inRelease, original.replace('Suite: stable', 'Suite: stablE'));
      run('rm', ['-rf', join(root, 'var/lib/apt/lists')]);
      mkdirSync(join(root, 'var/lib/apt/lists/partial'), { recursive: true });
      const tampered = await chroot(root, ['apt-get', 'update']);
      t.not(tampered.status, 0, 'apt-get update fails');
      t.match(tampered.stdout + tampered.stderr, /BADSIG|signatures were invalid|is not signed/);
    });
  });

  t.test(
    'user-data --format script, run as root in a Debian root, sets up the repository, installs kubeboot and keeps its config',
    async (t) => {
      const root = scratchDebianRoot(t);
      writeFileSync(join(root, 'etc/apt/sources.list'), '');
      const pin = `sha256:${'ef'.repeat(32)}`;
      const rendered = run(
        process.execPath,
        [
          bundle,
          'user-data',
          '--format',
          'script',
          '--server',
          'https://api.example:6443',
          '--token',
          TOKEN,
          '--ca-cert-hash',
          pin,
          '--repo-url',
          `${base}/apt`,
          '--repo-key',
          key,
          '--set',
          'kubeProxy.enabled=false',
        ],
        { env: { PATH: process.env.PATH ?? '' } },
      );
      t.equal(rendered.status, 0, rendered.stderr);
      writeFileSync(join(root, 'join.sh'), rendered.stdout, { mode: 0o700 });
      // A chroot has no running systemd: a stand-in records what the script asks of it.
      mkdirSync(join(root, 'usr/local/sbin'), { recursive: true });
      writeFileSync(join(root, 'usr/local/sbin/systemctl'), '#!/bin/sh\necho "$*" >> /systemctl.log\n', { mode: 0o755 });
      const ran = await chroot(root, ['sh', '/join.sh']);
      t.equal(ran.status, 0, `the script succeeds: ${ran.stdout.slice(-1500)}${ran.stderr}`);
      t.match((await chroot(root, ['kubeboot', '--version'])).stdout, `kubeboot ${version} `, 'installed from the repository');
      const config = readFileSync(join(root, 'etc/kubeboot/config.yaml'), 'utf8');
      t.match(config, /^server: https:\/\/api\.example:6443$/m, 'the package kept the config the script wrote (--force-confold)');
      t.match(config, /^kubeProxy:\n {2}enabled: false$/m);
      t.equal(statSync(join(root, 'etc/kubeboot/config.yaml')).mode & 0o777, 0o600);
      t.equal(statSync(join(root, 'etc/kubernetes/bootstrap-token')).mode & 0o777, 0o600);
      t.equal(readFileSync(join(root, 'etc/kubernetes/bootstrap-token'), 'utf8'), `${TOKEN}\n`);
      t.match(
        readFileSync(join(root, 'etc/apt/sources.list.d/kubeboot.list'), 'utf8'),
        `deb [signed-by=/etc/apt/keyrings/kubeboot.asc] ${base}/apt stable main`,
      );
      t.match(readFileSync(join(root, 'systemctl.log'), 'utf8'), /^enable --now kubeboot$/m, 'kubeboot is enabled and started');
    },
  );

  t.test('the RPMs are signed with the repository key and repomd.xml carries its signature', async (t) => {
    const rpms = readdirSync(join(repo, 'rpm'))
      .filter((f) => f.endsWith('.rpm'))
      .map((f) => join(repo, 'rpm', f));
    t.same(rpms.map((f) => f.split('/').pop()).sort(), [packages.rpmAarch64, packages.rpmX86_64].map((f) => f.split('/').pop()).sort());
    const db = join(dir, 'rpmdb');
    mkdirSync(db);
    const before = run('rpm', ['--dbpath', db, '-K', ...rpms]);
    t.match(before.stdout, /SIGNATURES NOT OK/, 'without the key rpm cannot vouch for them');
    output('rpm', ['--dbpath', db, '--import', key]);
    const after = run('rpm', ['--dbpath', db, '-K', ...rpms]);
    t.equal(after.status, 0, after.stdout + after.stderr);
    t.equal(
      after.stdout.split('\n').filter((l) => l.endsWith('digests signatures OK')).length,
      rpms.length,
      'every RPM: digests signatures OK',
    );
    const repomd = join(repo, 'rpm/repodata/repomd.xml');
    t.equal(run('gpg', ['--verify', `${repomd}.asc`, repomd], { env }).status, 0, 'repomd.xml.asc verifies');
    t.ok(readFileSync(repomd, 'utf8').includes('primary'), 'createrepo_c wrote the metadata');
  });

  t.test(
    "dnf, given the .repo entry user-data writes, imports the key itself, checks repomd.xml's and the package's signatures and installs kubeboot; a tampered repomd.xml is refused",
    async (t) => {
      // The yum variant's user-data, as far as this Debian machine can take it: dnf 4 into an
      // empty installroot, from file:// (no server), with a stand-in for the distribution
      // packages kubeboot requires (glibc, libstdc++, util-linux, /bin/sh).
      // A short path of its own: libcurl's file:// reads nothing from tap's long fixture names.
      const work = mkdtempSync(join(tmpdir(), 'kubeboot-dnf-'));
      t.teardown(() => rmSync(work, { recursive: true, force: true }));
      const base = join(work, 'base');
      const spec = join(base, 'base.spec');
      mkdirSync(base, { recursive: true });
      writeFileSync(
        spec,
        'Name: kubeboot-test-base\nVersion: 1\nRelease: 1\nSummary: stand-in\nLicense: MIT\nBuildArch: noarch\nProvides: /bin/sh\nProvides: util-linux = 2.38\nProvides: glibc = 2.36\nProvides: libstdc++ = 12\n%description\nstand-in\n%files\n',
      );
      output('rpmbuild', ['--define', `_topdir ${base}`, '-bb', spec]);
      cpSync(join(base, 'RPMS/noarch'), join(base, 'repo'), { recursive: true });
      output('createrepo_c', ['-q', join(base, 'repo')]);

      const dnfInstall = (rpmRepo: string) => {
        const root = join(work, `root-${rpmRepo.split('/').at(-2)}`);
        const rendered = run(
          process.execPath,
          [
            bundle,
            'user-data',
            '--format',
            'script',
            '--repo-type',
            'yum',
            '--server',
            'https://api.example:6443',
            '--token',
            TOKEN,
            '--ca-cert-hash',
            `sha256:${'ef'.repeat(32)}`,
            '--repo-url',
            `file://${rpmRepo}`,
            '--repo-key',
            key,
          ],
          { env: { PATH: process.env.PATH ?? '' } },
        );
        const entry = /cat > \/etc\/yum\.repos\.d\/kubeboot\.repo <<'KUBEBOOT_EOF'\n([\s\S]*?)\nKUBEBOOT_EOF/.exec(rendered.stdout)?.[1];
        const keyFile = /cat > (\/etc\/pki\/rpm-gpg\/RPM-GPG-KEY-kubeboot) <<'KUBEBOOT_EOF'\n([\s\S]*?)\nKUBEBOOT_EOF/.exec(
          rendered.stdout,
        );
        if (entry === undefined || keyFile === null)
          throw new Error(`user-data --repo-type yum wrote no .repo entry or key: ${rendered.stdout}${rendered.stderr}`);
        mkdirSync(join(root, 'etc/yum.repos.d'), { recursive: true });
        mkdirSync(join(root, 'etc/pki/rpm-gpg'), { recursive: true });
        writeFileSync(join(root, keyFile[1]!), `${keyFile[2]}\n`);
        // dnf reads gpgkey= from the host's file system, not the installroot's.
        writeFileSync(
          join(root, 'etc/yum.repos.d/kubeboot.repo'),
          `${entry.replace(`gpgkey=file://${keyFile[1]}`, `gpgkey=file://${join(root, keyFile[1]!)}`)}\n`,
        );
        writeFileSync(
          join(root, 'etc/yum.repos.d/base.repo'),
          `[base]\nname=base\nbaseurl=file://${join(base, 'repo')}\nenabled=1\ngpgcheck=0\n`,
        );
        const dnf = run(
          'dnf',
          [
            '-y',
            `--installroot=${root}`,
            `--setopt=reposdir=${join(root, 'etc/yum.repos.d')}`,
            `--setopt=cachedir=${join(root, 'var/cache/dnf')}`,
            '--setopt=skip_if_unavailable=False',
            '--releasever=9',
            '--setopt=tsflags=noscripts',
            'install',
            'kubeboot',
          ],
          { env: cleanEnv },
        );
        return { root, entry, dnf };
      };

      const good = dnfInstall(join(repo, 'rpm'));
      t.match(good.entry, /^gpgcheck=1$/m);
      t.match(good.entry, /^repo_gpgcheck=1$/m);
      t.equal(good.dnf.status, 0, `dnf install kubeboot: ${good.dnf.stdout.slice(-1500)}${good.dnf.stderr}`);
      t.match(run('rpm', ['--root', good.root, '-q', 'kubeboot']).stdout, `kubeboot-${version}-1.x86_64`, 'installed');
      t.match(
        run('rpm', ['--root', good.root, '-q', 'gpg-pubkey']).stdout,
        /^gpg-pubkey-/m,
        'dnf imported the repository key into the rpm database from gpgkey=',
      );

      const tamperedRepo = join(work, 'tampered');
      cpSync(repo, tamperedRepo, { recursive: true });
      const repomd = join(tamperedRepo, 'rpm/repodata/repomd.xml');
      writeFileSync(repomd, readFileSync(repomd, 'utf8').replace('<revision>', '<revision>1'));
      const bad = dnfInstall(join(tamperedRepo, 'rpm'));
      t.not(bad.dnf.status, 0, 'dnf install fails');
      t.match(bad.dnf.stdout + bad.dnf.stderr, /repomd\.xml GPG signature verification error/);
      t.not(run('rpm', ['--root', bad.root, '-q', 'kubeboot']).status, 0, 'nothing installed');
    },
  );

  t.test('repo.sh without a key is refused with one line and exit 2', async (t) => {
    const r = run('bash', ['packaging/repo.sh'], { env });
    t.equal(r.status, 2);
    t.equal(r.stderr, 'repo.sh: --gpg-key KEYID is required (the signing key, in the gpg keyring)\n');
  });
}
