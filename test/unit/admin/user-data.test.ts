// What `kubeboot user-data` renders: valid for cloud-init's own schema
// checker, and a config file the node's loader accepts as it is.
import { execFile } from 'node:child_process';
import { chmod, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { parse } from 'yaml';
import { parseSets, runUserData, tokenReminder } from '../../../agent/cli/user-data.js';
import { ExitCode } from '../../../agent/errors.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { loadConfig } from '../../../agent/config/load.js';
import { joinCommand, renderCloudConfig, renderScript, type NodeJoin } from '../../../agent/admin/user-data.js';

const run = promisify(execFile);
const PIN = `sha256:${'ab'.repeat(32)}`;
const TOKEN = 'abcdef.0123456789abcdef';
const KEY = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEaw4IMBYJKwYBBAHaRw8BAQdAIl466ODHl\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n';
const base: NodeJoin = {
  server: 'https://api.example:6443',
  token: TOKEN,
  pins: [PIN],
  settings: {},
  tokenFile: '/etc/kubernetes/bootstrap-token',
  repo: null,
};

async function schema(t: Test, text: string): Promise<{ ok: boolean; output: string }> {
  const file = join(t.testdir(), 'user-data.yaml');
  await writeFile(file, text);
  try {
    const r = await run('cloud-init', ['schema', '--config-file', file]);
    return { ok: true, output: r.stdout + r.stderr };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    return { ok: false, output: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

type WriteFile = { path: string; owner: string; permissions: string; content: string };

t.test('cloud-init schema accepts the user-data with an apt source, a yum repo, or neither', async (t) => {
  const variants: [string, NodeJoin][] = [
    ['no repository', base],
    ['apt with its key', { ...base, repo: { type: 'apt', url: 'https://repo.example/kubeboot', keyText: KEY, suite: 'stable' } }],
    ['yum with its key', { ...base, repo: { type: 'yum', url: 'https://repo.example/kubeboot/rpm', keyText: KEY, suite: 'stable' } }],
  ];
  for (const [name, join] of variants) {
    const result = await schema(t, renderCloudConfig(join));
    t.ok(result.ok, `${name}: ${result.output}`);
    t.match(result.output, /Valid cloud-config/);
  }
  const broken = await schema(t, renderCloudConfig(base).replace(/permissions: "0600"/, 'permissions: 0600'));
  t.notOk(broken.ok, 'the checker does fail a wrong document (permissions must be a string)');
});

t.test(
  'user-data writes the config and the token 0600, the apt key for signed-by, installs the package and enables kubeboot',
  async (t) => {
    const doc = parse(
      renderCloudConfig({
        ...base,
        settings: { kubeProxy: { enabled: false } },
        repo: { type: 'apt', url: 'https://repo.example/kubeboot', keyText: KEY, suite: 'stable' },
      }),
    ) as Record<string, unknown>;
    const files = doc.write_files as WriteFile[];
    t.same(
      files.map((f) => [f.path, f.permissions, f.owner]),
      [
        ['/etc/kubeboot/config.yaml', '0600', 'root:root'],
        ['/etc/kubernetes/bootstrap-token', '0600', 'root:root'],
        ['/etc/apt/keyrings/kubeboot.asc', '0644', 'root:root'],
      ],
    );
    t.equal(files[1]!.content, `${TOKEN}\n`);
    t.equal(files[2]!.content, KEY, 'the armored key as given: apt >= 2.4 reads it in signed-by, no gpg needed');
    t.notMatch(files[0]!.content, TOKEN, 'the token is only in its own file');
    t.same(doc.packages, ['kubeboot']);
    t.match(doc.runcmd, ['systemctl enable --now kubeboot']);
    // No `key:` (cloud-init would run gpg --dearmor, which stock images lack) and no $KEY_FILE template.
    t.same(
      doc.apt,
      { sources: { kubeboot: { source: 'deb [signed-by=/etc/apt/keyrings/kubeboot.asc] https://repo.example/kubeboot stable main' } } },
      'apt trusts only the given key for this source',
    );

    const loaded = await loadConfig({
      argv: ['bootstrap'],
      env: {},
      hostname: 'worker-9',
      readFile: async (p) => (p === '/etc/kubeboot/config.yaml' ? files[0]!.content : null),
    });
    t.equal(loaded.config.server, 'https://api.example:6443', 'the node loader reads the server');
    t.equal(loaded.config.tokenFile, '/etc/kubernetes/bootstrap-token');
    t.same(loaded.config.caCertHashes, [PIN]);
    t.equal(loaded.config.kubeProxy.enabled, false, '--set overrides arrive');
  },
);

t.test('a yum node gets a repo entry checking package and metadata signatures, and the key as a file for rpm to import', async (t) => {
  const repo = { type: 'yum', url: 'https://repo.example/rpm', keyText: KEY, suite: 'stable' } as const;
  const doc = parse(renderCloudConfig({ ...base, repo })) as Record<string, unknown>;
  t.same(doc.yum_repos, {
    kubeboot: {
      name: 'kubeboot',
      baseurl: 'https://repo.example/rpm',
      enabled: true,
      gpgcheck: true,
      repo_gpgcheck: true,
      gpgkey: 'file:///etc/pki/rpm-gpg/RPM-GPG-KEY-kubeboot',
    },
  });
  t.match((doc.write_files as WriteFile[]).at(-1), { path: '/etc/pki/rpm-gpg/RPM-GPG-KEY-kubeboot', permissions: '0644', content: KEY });
  t.notOk(doc.apt, 'no apt section on a yum node');
  t.match(
    renderScript({ ...base, repo }),
    '[kubeboot]\nname=kubeboot\nbaseurl=https://repo.example/rpm\nenabled=1\ngpgcheck=1\nrepo_gpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-kubeboot\n',
    'the script writes the same .repo entry',
  );
});

t.test('--format script is a valid shell script doing the same steps', async (t) => {
  const script = renderScript({ ...base, repo: { type: 'apt', url: 'https://repo.example/kubeboot', keyText: KEY, suite: 'stable' } });
  const file = join(t.testdir(), 'join.sh');
  await writeFile(file, script);
  await t.resolves(run('sh', ['-n', file]), 'sh -n accepts it');
  t.match(script, /^#!\/bin\/sh\n/);
  t.match(script, /umask 077/);
  t.match(
    script,
    /cat > \/etc\/kubernetes\/bootstrap-token <<'KUBEBOOT_EOF'\nabcdef\.0123456789abcdef\nKUBEBOOT_EOF\nchmod 0600 \/etc\/kubernetes\/bootstrap-token/,
  );
  t.match(script, /deb \[signed-by=\/etc\/apt\/keyrings\/kubeboot\.asc\] https:\/\/repo\.example\/kubeboot stable main/);
  // Under umask 077, the keyring directory apt's _apt user reads through must still be made 0755.
  const makeKeyrings = script
    .split('\n')
    .find((l) => l.includes('/etc/apt/keyrings') && !l.startsWith('cat') && !l.startsWith('chmod') && !l.startsWith('deb'))!;
  t.equal(makeKeyrings, '[ -d /etc/apt/keyrings ] || install -d -m 0755 /etc/apt/keyrings');
  const keyrings = join(t.testdir(), 'etc-apt', 'keyrings');
  await run('sh', ['-c', `umask 077; ${makeKeyrings.replaceAll('/etc/apt/keyrings', keyrings)}`]);
  t.equal((await stat(keyrings)).mode & 0o777, 0o755, 'made 0755 despite umask 077');
  t.match(script, /mkdir -p \/etc\/kubernetes\ncat > \/etc\/kubernetes\/bootstrap-token/, "the token's directory is made under umask 077");
  t.match(script, /apt-get install -y -o Dpkg::Options::=--force-confold kubeboot/);
  t.match(script, /systemctl enable --now kubeboot/);
});

t.test('join-command prints one shell-safe line', async (t) => {
  t.equal(joinCommand(base), `kubeboot bootstrap --server https://api.example:6443 --token ${TOKEN} --ca-cert-hash ${PIN}`);
});

t.test('--set takes any config-file key, checked as the node would check it', async (t) => {
  t.same(parseSets(['kubeProxy.enabled=false', 'waitTimeout=5m', 'kubeletServing.dnsNames=[a.example, b.example]', 'nodeName=worker-1']), {
    kubeProxy: { enabled: false },
    waitTimeout: '5m',
    kubeletServing: { dnsNames: ['a.example', 'b.example'] },
    nodeName: 'worker-1',
  });
  const bad: [string, string][] = [
    ['kubeProxy.enable=false', 'command line: --set kubeProxy.enable: expected KEY=VALUE with a config-file key (see kubeboot --help)'],
    ['waitTimeout=soon', 'command line: --set waitTimeout: expected seconds or a duration like 90s, 15m, 2h30m, got "soon"'],
    ['server=https://x', 'command line: --set server: set it with --server instead'],
    ['stateDir=relative', 'command line: --set stateDir: must be an absolute path'],
    ['novalue', 'command line: --set novalue: expected KEY=VALUE with a config-file key (see kubeboot --help)'],
  ];
  for (const [item, message] of bad) t.throws(() => parseSets([item]), { message });
});

t.test('token settings without --create-token are refused rather than ignored', async (t) => {
  const config = { ...defaultConfig('admin'), server: 'https://api.example:6443', token: TOKEN, caCertHashes: [PIN] };
  await t.rejects(runUserData('user-data', config, { ttl: '2h' }, {}), { message: 'command line: --ttl: only with --create-token' });
  await t.rejects(runUserData('join-command', config, { expiry: false }, {}), {
    message: 'command line: --no-expiry: only with --create-token',
  });
  await t.rejects(runUserData('join-command', config, { 'create-token': true }, {}), {
    message: 'command line: --create-token: cannot be combined with --token or --token-file',
  });
  await t.rejects(runUserData('join-command', config, { node: 'worker-7' }, {}), {
    message: 'command line: --node: only with --create-token',
  });
  await t.rejects(runUserData('user-data', config, { pool: 'pool-a-', 'max-nodes': '3' }, {}), {
    message: 'command line: --pool: only with --create-token',
  });
});

t.test('--create-token --node/--pool is checked before any kubeconfig is read', async (t) => {
  const config = { ...defaultConfig('admin'), server: 'https://api.example:6443', caCertHashes: [PIN] };
  const given = { 'create-token': true, kubeconfig: '/nonexistent/admin.conf' };
  await t.rejects(runUserData('user-data', config, { ...given, node: 'kubernetes' }, {}), {
    message: "command line: --node: kubernetes is the API server's Service name",
  });
  await t.rejects(runUserData('join-command', config, { ...given, pool: 'p-' }, {}), {
    message: 'command line: --max-nodes: required with --pool: how many nodes the token may join',
  });
});

t.test('a token read from --token-file is checked as --token is, naming the file, never the value', async (t) => {
  const file = join(t.testdir(), 'token');
  await writeFile(file, 'abcdef.TOO-SHORT\n', { mode: 0o600 });
  const config = { ...defaultConfig('admin'), server: 'https://api.example:6443', tokenFile: file, caCertHashes: [PIN] };
  const err = await runUserData('join-command', config, {}, {}).catch((e: Error) => e);
  t.match(err, { message: `${file}: token: not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}; the value is not shown)` });
  t.notMatch((err as Error).message, 'TOO-SHORT');
  await writeFile(file, `${TOKEN}\n`);
  await t.resolves(runUserData('join-command', config, {}, {}), 'a well-formed token in the file is used');
});

/** `kubeboot user-data ARGS` with a given server, token and pin, parsed as the CLI parses them, its output captured. */
async function userData(t: Test, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const argv = ['user-data', '--server', 'https://api.example:6443', '--token', TOKEN, '--ca-cert-hash', PIN, ...args];
  const loaded = await loadConfig({ argv, env: {}, hostname: 'admin', cwd: t.testdirName, readFile: async () => null });
  const out = { stdout: '', stderr: '' };
  const code = await runUserData(
    'user-data',
    loaded.config,
    loaded.extraFlags.given,
    {},
    {
      stdout: { write: (s: string) => (out.stdout += s) },
      stderr: { write: (s: string) => (out.stderr += s) },
    },
  );
  return { code, ...out };
}

t.test('a --repo-url without --repo-key is refused with exit 2 naming --repo-key, for yum as for apt', async (t) => {
  for (const type of ['yum', 'apt']) {
    const err = await userData(t, ['--repo-type', type, '--repo-url', 'https://repo.example/kubeboot']).catch((e: Error) => e);
    t.match(err, { code: ExitCode.badInput, message: /^command line: --repo-key: missing: .*--unsafe-unsigned-repo/ }, type);
    t.notMatch((err as Error).message, '\n', 'one line');
  }
  await t.rejects(userData(t, ['--unsafe-unsigned-repo']), {
    code: ExitCode.badInput,
    message: 'command line: --unsafe-unsigned-repo: needs --repo-url',
  });
  const key = join(t.testdir({ 'repo.asc': KEY }), 'repo.asc');
  await t.rejects(userData(t, ['--repo-url', 'https://repo.example/kubeboot', '--repo-key', key, '--unsafe-unsigned-repo']), {
    code: ExitCode.badInput,
    message: 'command line: --unsafe-unsigned-repo: cannot be combined with --repo-key',
  });
});

t.test('--unsafe-unsigned-repo writes a repository with every signature check off, and says so on stderr', async (t) => {
  const yum = await userData(t, ['--repo-type', 'yum', '--repo-url', 'https://repo.example/rpm', '--unsafe-unsigned-repo']);
  t.equal(yum.code, 0);
  const doc = parse(yum.stdout) as Record<string, unknown>;
  t.same(doc.yum_repos, {
    kubeboot: { name: 'kubeboot', baseurl: 'https://repo.example/rpm', enabled: true, gpgcheck: false, repo_gpgcheck: false },
  });
  t.notOk(
    (doc.write_files as WriteFile[]).some((f) => f.path.includes('rpm-gpg')),
    'no key file',
  );
  t.match(
    yum.stderr,
    /^kubeboot user-data: warning: --unsafe-unsigned-repo: nodes install kubeboot from https:\/\/repo\.example\/rpm checking no signature \(gpgcheck=0, repo_gpgcheck=0\); .*Give --repo-key instead\n/,
  );
  t.match(yum.stderr, 'kubeboot token delete abcdef', 'the token reminder still follows');

  const apt = await userData(t, ['--repo-url', 'https://repo.example/kubeboot', '--unsafe-unsigned-repo', '--format', 'script']);
  t.equal(apt.code, 0);
  // Without trusted=yes apt would refuse the unsigned Release; signed-by would name a key that is not there.
  t.match(apt.stdout, '\ndeb [trusted=yes] https://repo.example/kubeboot stable main\n');
  t.notMatch(apt.stdout, 'signed-by');
  t.match(
    apt.stderr,
    'warning: --unsafe-unsigned-repo: nodes install kubeboot from https://repo.example/kubeboot checking no signature (apt trusted=yes)',
  );
});

t.test('an http:// --repo-url is accepted with a warning: signed packages, but the metadata can be withheld or replayed', async (t) => {
  const key = join(t.testdir({ 'repo.asc': KEY }), 'repo.asc');
  const out = await userData(t, ['--repo-type', 'yum', '--repo-url', 'http://repo.example/rpm', '--repo-key', key]);
  t.equal(out.code, 0);
  t.match((parse(out.stdout) as Record<string, unknown>).yum_repos, {
    kubeboot: { baseurl: 'http://repo.example/rpm', gpgcheck: true, repo_gpgcheck: true },
  });
  t.match(
    out.stderr,
    /^kubeboot user-data: warning: --repo-url http:\/\/repo\.example\/rpm is plain HTTP: .*withhold or replay .*Prefer https:\/\/\n/,
  );
  t.notMatch(out.stderr, 'unsafe', 'the packages are still checked');
  const https = await userData(t, ['--repo-url', 'https://repo.example/kubeboot', '--repo-key', key]);
  t.notMatch(https.stderr, 'warning', 'no warning for https:// with its key');
  const unsigned = await userData(t, ['--repo-url', 'http://repo.example/kubeboot', '--unsafe-unsigned-repo']);
  t.match(unsigned.stderr, 'is plain HTTP: unsigned as well, so anyone on the path can replace the packages', 'no false comfort');
});

t.test('--output-file writes the user-data 0600, atomically, even under a permissive umask and over a world-readable file', async (t) => {
  const dir = t.testdir({ 'user-data.yaml': 'old\n' });
  const file = join(dir, 'user-data.yaml');
  await chmod(file, 0o644);
  const umask = process.umask(0);
  t.teardown(() => process.umask(umask));
  const out = await userData(t, ['--output-file', file]);
  t.equal(out.code, 0);
  t.equal(out.stdout, '', 'nothing on stdout');
  t.match(out.stderr, 'kubeboot token delete abcdef');
  t.equal((await stat(file)).mode & 0o777, 0o600, 'mode 0600: it holds the token');
  const written = parse(await readFile(file, 'utf8')) as { write_files: WriteFile[] };
  t.equal(written.write_files[1]!.content, `${TOKEN}\n`, 'the user-data, token included');
  t.same(await readdir(dir), ['user-data.yaml'], 'no temp file left beside it');
  await t.rejects(userData(t, ['--output-file', join(dir, 'missing', 'user-data.yaml')]), {
    code: ExitCode.badInput,
    message: `command line: --output-file: ${join(dir, 'missing')} is not an existing directory`,
  });
});

t.test("the stderr reminder gives the token's id, its end and how to delete it, never the secret", async (t) => {
  const created = tokenReminder(TOKEN, '2026-12-01T16:00:00Z');
  t.match(created, 'bootstrap token abcdef joins any node booted with this user-data until 2026-12-01T16:00:00Z');
  t.match(created, '/var/lib/cloud/instances/<id>/');
  t.match(created, /then: kubeboot token delete abcdef\n$/);
  t.notMatch(created, '0123456789abcdef', 'no secret');
  t.match(tokenReminder(TOKEN, undefined), 'until it expires', 'a given token: its expiry is not known here');
  t.match(tokenReminder(TOKEN, null), 'forever (--no-expiry)');
  const bound = tokenReminder(TOKEN, '2026-12-01T16:00:00Z', { names: ['worker-7'] });
  t.match(
    bound,
    'bootstrap token abcdef authenticates until 2026-12-01T16:00:00Z and is bound to node worker-7: kubeboot approver issues each name from it once',
  );
  t.match(bound, 'docs/node-identity.md', 'and says that kube-controller-manager, while its auto-approval is bound, does not check');
  t.match(tokenReminder(TOKEN, null, { prefix: 'pool-a-', maxNodes: 20 }), 'is bound to at most 20 nodes named pool-a-*');
});

t.test("cloud-init's stages are the ones the user-data and docs/install.md rely on (Debian's cloud.cfg)", async (t) => {
  // The cloud-init package of packaging/deps.txt, the same Debian 12 package the real-cloud-init test boots.
  const cfg = parse(await readFile('/etc/cloud/cloud.cfg', 'utf8')) as Record<string, unknown>;
  const stage = (key: string) => ((cfg[key] ?? []) as unknown[]).map((m) => String(Array.isArray(m) ? m[0] : m).replaceAll('-', '_'));
  t.ok(stage('cloud_init_modules').includes('write_files'), 'init stage: write_files (config, token, key)');
  t.ok(stage('cloud_config_modules').includes('apt_configure'), 'config stage: apt_configure adds the source');
  const final = stage('cloud_final_modules');
  t.ok(
    final.indexOf('package_update_upgrade_install') >= 0 && final.indexOf('package_update_upgrade_install') < final.indexOf('scripts_user'),
    'final stage: packages, then the runcmd script',
  );
  const doc = (await readFile(new URL('../../../docs/install.md', import.meta.url), 'utf8')).replace(/\s+/g, ' ');
  t.match(doc, 'in its init stage (`write_files`), adds the repository in its config stage (`apt_configure`', 'docs/install.md says so');
  t.match(doc, 'installs the package in its final stage (`package_update_upgrade_install`');
});
