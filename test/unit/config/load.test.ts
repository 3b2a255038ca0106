import t from 'tap';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { InputError, ExitCode } from '../../../agent/errors.js';
import { readOptional } from '../../../agent/read-optional.js';
import { loadConfig } from '../../../agent/config/load.js';
import { COMMANDS } from '../../../agent/config/options.js';
import type { LoadInput } from '../../../agent/config/load.js';
import { defaultConfig, DEFAULT_LISTEN } from '../../../agent/config/defaults.js';

const CONFIG = '/etc/kubeboot/config.yaml';

function input(o: { argv?: string[]; env?: Record<string, string>; files?: Record<string, string>; hostname?: string } = {}): LoadInput {
  const files = o.files ?? {};
  return {
    argv: o.argv ?? ['bootstrap'],
    env: o.env ?? {},
    readFile: async (p) => files[p] ?? null,
    hostname: o.hostname ?? 'worker-1',
    cwd: '/home/op',
  };
}

t.test('with no file, environment or flags the defaults apply and the node name is the lower-cased hostname', async (t) => {
  const loaded = await loadConfig(input({ hostname: 'Worker-7.Example.COM' }));
  t.equal(loaded.command, 'bootstrap');
  t.same(loaded.config, defaultConfig('worker-7.example.com'));
});

t.test('layers the config file below the environment below the flags', async (t) => {
  const files = { [CONFIG]: 'waitTimeout: 100\npendingNoticeInterval: 10\nrenewal:\n  hookTimeout: 5\n' };
  const env = { KUBEBOOT_WAIT_TIMEOUT: '200', KUBEBOOT_PENDING_NOTICE_INTERVAL: '20' };
  const { config } = await loadConfig(input({ files, env, argv: ['run', '--wait-timeout', '5m'] }));
  t.equal(config.waitTimeout, 300, 'flag beats environment and file');
  t.equal(config.pendingNoticeInterval, 20, 'environment beats file');
  t.equal(config.renewal.hookTimeout, 5, 'file beats default');
});

t.test('resolves relative paths against the config file directory or the working directory', async (t) => {
  const file = '/srv/kb/kubeboot.yaml';
  const files = { [file]: 'stateDir: state\nkubelet:\n  certDir: ../pki\ncloudInitPaths: [ci/a, /abs/b]\n' };
  const { config } = await loadConfig(
    input({
      files,
      env: { KUBEBOOT_CONFIG: file },
      argv: ['bootstrap', '--bootstrap-kubeconfig', 'boot.conf', '--kube-proxy-cert-dir=./kp'],
    }),
  );
  t.equal(config.configFile, file);
  t.equal(config.stateDir, '/srv/kb/state');
  t.equal(config.kubelet.certDir, '/srv/pki');
  t.same(config.cloudInitPaths, ['/srv/kb/ci/a', '/abs/b']);
  t.equal(config.bootstrapKubeconfig, '/home/op/boot.conf');
  t.equal(config.kubeProxy.certDir, '/home/op/kp');
});

t.test('a relative --config is read from the working directory', async (t) => {
  const { config } = await loadConfig(input({ files: { '/home/op/kb.yaml': 'stateDir: s\n' }, argv: ['run', '--config', 'kb.yaml'] }));
  t.equal(config.stateDir, '/home/op/s');
});

t.test('parses every kind of value from the file', async (t) => {
  const yaml = [
    'nodeName: node-a.example',
    'keyAlgorithm: rsa-3072',
    'expirationSeconds: 24h',
    'caCertHashes: ["SHA256:' + 'AB'.repeat(32) + '"]',
    'unsafeSkipCaVerification: false',
    'kubeProxy:',
    '  enabled: false',
    '  organizations: [team-a]',
    '  hooks:',
    '    - [systemctl, restart, kube-proxy]',
    'kubeletServing:',
    '  enabled: true',
    '  ipAddresses: ["10.0.0.5", "fd00::5"]',
    'renewal: { margin: 2h30m, reuseKey: true }',
    'listen: off',
    'log: { level: debug, format: json }',
  ].join('\n');
  const { config } = await loadConfig(input({ files: { [CONFIG]: yaml } }));
  t.equal(config.nodeName, 'node-a.example');
  t.equal(config.keyAlgorithm, 'rsa-3072');
  t.equal(config.expirationSeconds, 86400);
  t.same(config.caCertHashes, ['sha256:' + 'ab'.repeat(32)], 'pins are normalised to lower case');
  t.equal(config.kubeProxy.enabled, false);
  t.same(config.kubeProxy.organizations, ['team-a']);
  t.same(config.kubeProxy.hooks, [['systemctl', 'restart', 'kube-proxy']]);
  t.equal(config.kubeletServing.enabled, true);
  t.same(config.kubeletServing.ipAddresses, ['10.0.0.5', 'fd00::5']);
  t.equal(config.renewal.margin, 9000);
  t.equal(config.renewal.reuseKey, true);
  t.equal(config.listen, null);
  t.same(config.log, { level: 'debug', format: 'json' });
});

t.test('boolean flags take --x, --no-x and --x=false; repeatable flags replace the file list', async (t) => {
  const files = { [CONFIG]: 'caCertHashes: ["sha256:' + '1'.repeat(64) + '"]\n' };
  const pinA = 'sha256:' + 'a'.repeat(64);
  const pinB = 'sha256:' + 'b'.repeat(64);
  const { config } = await loadConfig(
    input({
      files,
      argv: ['bootstrap', '--no-kube-proxy', '--kubelet-serving=true', '--reuse-key', '--ca-cert-hash', pinA, '--ca-cert-hash', pinB],
    }),
  );
  t.equal(config.kubeProxy.enabled, false);
  t.equal(config.kubeletServing.enabled, true);
  t.equal(config.renewal.reuseKey, true);
  t.same(config.caCertHashes, [pinA, pinB]);
  const off = await loadConfig(input({ argv: ['bootstrap', '--kube-proxy=false'] }));
  t.equal(off.config.kubeProxy.enabled, false);
});

t.test('lists in the environment are comma-separated; an empty variable counts as unset', async (t) => {
  const { config } = await loadConfig(
    input({ env: { KUBEBOOT_KUBELET_SERVING_DNS_NAME: 'a.example, b.example', KUBEBOOT_STATE_DIR: '', KUBEBOOT_LISTEN: '[::1]:9000' } }),
  );
  t.same(config.kubeletServing.dnsNames, ['a.example', 'b.example']);
  t.equal(config.stateDir, '/var/lib/kubeboot');
  t.equal(config.listen, '[::1]:9000');
});

t.test('command-specific flags, help and version', async (t) => {
  const status = await loadConfig(input({ argv: ['status', '--output', 'json'] }));
  t.equal(status.extraFlags.output, 'json');
  const renew = await loadConfig(input({ argv: ['renew', '--identity=kube-proxy', 'extra'] }));
  t.equal(renew.extraFlags.identity, 'kube-proxy');
  t.same(renew.positionals, ['extra']);
  const help = await loadConfig(input({ argv: ['-h'], files: { [CONFIG]: 'not: [valid' } }));
  t.ok(help.help, '--help works even when the config file is broken');
  t.equal(help.command, null);
  t.ok((await loadConfig(input({ argv: ['--version'] }))).version);
});

t.test('an explicitly named missing config file is an error, the default one is not', async (t) => {
  await t.resolves(loadConfig(input()));
  await t.rejects(loadConfig(input({ argv: ['run', '--config', '/nope.yaml'] })), {
    message: 'command line: --config: config file not found: /nope.yaml',
  });
  await t.rejects(loadConfig(input({ env: { KUBEBOOT_CONFIG: '/nope.yaml' } })), {
    message: 'environment: KUBEBOOT_CONFIG: config file not found: /nope.yaml',
  });
});

interface Bad {
  name: string;
  argv?: string[];
  env?: Record<string, string>;
  file?: string;
  hostname?: string;
  message: string;
}

const bad: Bad[] = [
  {
    name: 'YAML syntax error names the line',
    file: 'stateDir: /a\nkubelet: [unclosed\nlisten: off\n',
    message: `${CONFIG}: line 3: invalid YAML: bad indentation, or an unclosed [ or { at column 1`,
  },
  {
    name: 'duplicate key',
    file: 'stateDir: /a\nstateDir: /b\n',
    message: `${CONFIG}: line 2: invalid YAML: duplicate key (keys must be unique) at column 1`,
  },
  { name: 'top level is not a mapping', file: '- a\n- b\n', message: `${CONFIG}: (document): expected a mapping of settings, got a list` },
  {
    name: 'unknown key with a suggestion',
    file: 'kubeProxy:\n  enable: true\n',
    message: `${CONFIG}: kubeProxy.enable: unknown key (did you mean kubeProxy.enabled?)`,
  },
  {
    name: 'kebab-case key in the file',
    file: 'bootstrap-kubeconfig: /x\n',
    message: `${CONFIG}: bootstrap-kubeconfig: unknown key (did you mean bootstrapKubeconfig?)`,
  },
  { name: 'unknown key without a near match', file: 'frobnicate: 1\n', message: `${CONFIG}: frobnicate: unknown key` },
  { name: '--config is not a file key', file: 'configFile: /x\n', message: `${CONFIG}: configFile: unknown key` },
  {
    name: 'boolean given as text',
    file: 'kubeProxy:\n  enabled: yes please\n',
    message: `${CONFIG}: kubeProxy.enabled: expected true or false, got "yes please"`,
  },
  { name: 'group is not a mapping', file: 'kubeProxy: true\n', message: `${CONFIG}: kubeProxy: expected a mapping, got a boolean` },
  { name: 'string given a list', file: 'stateDir: [a, b]\n', message: `${CONFIG}: stateDir: expected a string, got ["a","b"]` },
  {
    name: 'list given a string',
    file: 'cloudInitPaths: /var/lib/cloud\n',
    message: `${CONFIG}: cloudInitPaths: expected a list, got a string`,
  },
  { name: 'key without a value', file: 'stateDir:\n', message: `${CONFIG}: stateDir: has no value (remove the key to use the default)` },
  {
    name: 'bad duration in the file',
    file: 'waitTimeout: 5 minutes\n',
    message: `${CONFIG}: waitTimeout: expected seconds or a duration like 90s, 15m, 2h30m, got "5 minutes"`,
  },
  { name: 'fractional duration', file: 'renewal:\n  margin: 1.5\n', message: `${CONFIG}: renewal.margin: expected whole seconds, got 1.5` },
  { name: 'zero wait timeout', argv: ['run', '--wait-timeout', '0s'], message: 'command line: --wait-timeout: must be at least 1, got 0s' },
  {
    name: 'expirationSeconds below the API minimum',
    env: { KUBEBOOT_EXPIRATION_SECONDS: '300' },
    message: 'environment: KUBEBOOT_EXPIRATION_SECONDS: must be at least 600 (the API rejects shorter), got 300',
  },
  {
    name: 'expirationSeconds below the minimum in the file',
    file: 'expirationSeconds: 5m\n',
    message: `${CONFIG}: expirationSeconds: must be at least 600 (the API rejects shorter), got 5m`,
  },
  {
    name: 'node name with upper case',
    argv: ['bootstrap', '--node-name', 'Worker_1'],
    message:
      "command line: --node-name: \"Worker_1\" is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)",
  },
  {
    name: 'node name too long',
    env: { KUBEBOOT_NODE_NAME: 'a'.repeat(254) },
    message: 'environment: KUBEBOOT_NODE_NAME: must be at most 253 characters, got 254',
  },
  {
    name: 'hostname unusable as a node name',
    hostname: 'my_host',
    message: `hostname: node name: "my_host" is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit); set --node-name`,
  },
  {
    name: 'bad pin on the command line',
    argv: ['bootstrap', '--ca-cert-hash', 'sha256:abc'],
    message: 'command line: --ca-cert-hash: expected sha256:<64 hex digits>, got "sha256:abc"',
  },
  {
    name: 'bad pin in the file names the item',
    file: `caCertHashes:\n  - sha256:${'a'.repeat(64)}\n  - md5:00\n`,
    message: `${CONFIG}: caCertHashes[1]: expected sha256:<64 hex digits>, got "md5:00"`,
  },
  {
    name: 'listen without a port',
    argv: ['run', '--listen', 'localhost'],
    message: `command line: --listen: expected host:port (e.g. ${DEFAULT_LISTEN}) or off, got "localhost"`,
  },
  {
    name: 'listen port out of range',
    env: { KUBEBOOT_LISTEN: '127.0.0.1:70000' },
    message: `environment: KUBEBOOT_LISTEN: expected host:port (e.g. ${DEFAULT_LISTEN}) or off, got "127.0.0.1:70000"`,
  },
  {
    name: 'unknown flag',
    argv: ['bootstrap', '--bootstrap-kubeconfg', '/x'],
    message: 'command line: --bootstrap-kubeconfg: unknown option',
  },
  { name: 'unknown short flag', argv: ['bootstrap', '-x'], message: 'command line: -x: unknown option' },
  { name: 'flag missing its value', argv: ['bootstrap', '--state-dir'], message: 'command line: --state-dir: expects a value' },
  {
    name: 'boolean flag with a bad value',
    argv: ['bootstrap', '--kube-proxy=maybe'],
    message: 'command line: --kube-proxy: expected true or false, got "maybe"',
  },
  {
    name: 'unknown key algorithm',
    argv: ['bootstrap', '--key-algorithm', 'ed25519'],
    message: 'command line: --key-algorithm: expected one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096, got "ed25519"',
  },
  {
    name: 'unknown log level in the environment',
    env: { KUBEBOOT_LOG_LEVEL: 'verbose' },
    message: 'environment: KUBEBOOT_LOG_LEVEL: expected one of error, warn, info, debug, got "verbose"',
  },
  {
    name: 'unknown command',
    argv: ['bootstarp'],
    message: `command line: command: unknown command "bootstarp" (want ${COMMANDS.join(', ')})`,
  },
  {
    name: 'approver renew deadline not below the lease duration',
    argv: ['approver', '--lease-duration', '10s', '--renew-deadline', '10s'],
    message: 'command line: --renew-deadline: must be less than approver.leaseDuration (10 >= 10)',
  },
  {
    name: 'approver serving CIDR that is not one',
    argv: ['approver', '--serving-ip-cidr', '10.0.0.0/33'],
    message: 'command line: --serving-ip-cidr: expected a CIDR like 10.0.0.0/8 or fd00::/64, got "10.0.0.0/33"',
  },
  {
    name: 'approver key algorithm not known',
    argv: ['approver', '--allowed-key-algorithm', 'rsa-1024'],
    message: 'command line: --allowed-key-algorithm: expected one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096, got rsa-1024',
  },
  {
    name: 'command flag with the wrong command',
    argv: ['run', '--output', 'json'],
    message: 'command line: --output: only valid with: kubeboot status, kubeboot token, kubeboot ca-rotation, kubeboot node, kubeboot tpm',
  },
  {
    name: 'command flag with a bad value',
    argv: ['renew', '--identity', 'kubelet-client'],
    message: 'command line: --identity: expected one of kubelet, kube-proxy, kubelet-serving, got "kubelet-client"',
  },
  {
    name: 'hook given as a shell string',
    file: 'kubelet:\n  hooks: ["systemctl restart kubelet"]\n',
    message: `${CONFIG}: kubelet.hooks[0]: expected an argv list like [systemctl, restart, kubelet] (run without a shell), got "systemctl restart kubelet"`,
  },
  {
    name: 'serving IP that is not an address',
    file: 'kubeletServing:\n  ipAddresses: [10.0.0.300]\n',
    message: `${CONFIG}: kubeletServing.ipAddresses[0]: expected an IPv4 or IPv6 address, got "10.0.0.300"`,
  },
  {
    name: 'signer name without a domain',
    argv: ['bootstrap', '--kube-proxy-signer', 'kube-proxy'],
    message: 'command line: --kube-proxy-signer: expected a signer name like example.com/signer, got "kube-proxy"',
  },
  {
    name: 'kubelet kubeconfig over the bootstrap kubeconfig',
    argv: ['bootstrap', '--kubelet-kubeconfig', '/etc/kubernetes/bootstrap-kubelet.conf'],
    message: 'command line: --kubelet-kubeconfig: must differ from bootstrapKubeconfig (both are /etc/kubernetes/bootstrap-kubelet.conf)',
  },
  {
    name: 'kube-proxy kubeconfig over the kubelet one',
    file: 'kubeProxy:\n  kubeconfig: /etc/kubernetes/kubelet.conf\n',
    message: `${CONFIG}: kubeProxy.kubeconfig: must differ from kubelet.kubeconfig (both are /etc/kubernetes/kubelet.conf)`,
  },
];

for (const c of bad) {
  t.test(`rejects: ${c.name}`, async (t) => {
    const files: Record<string, string> = c.file !== undefined ? { [CONFIG]: c.file } : {};
    const err = await loadConfig(
      input({ argv: c.argv ?? ['bootstrap'], env: c.env ?? {}, files, hostname: c.hostname ?? 'worker-1' }),
    ).then(
      () => null,
      (e: unknown) => e,
    );
    t.type(err, InputError);
    t.equal((err as InputError).message, c.message);
    t.equal((err as InputError).code, ExitCode.badInput);
  });
}

t.test('wait takes --identity and a --timeout duration', async (t) => {
  const waited = await loadConfig(input({ argv: ['wait', '--identity', 'kube-proxy', '--timeout', '15m'] }));
  t.equal(waited.command, 'wait');
  t.equal(waited.extraFlags.identity, 'kube-proxy');
  t.equal(waited.extraFlags.timeout, 900);
  t.equal((await loadConfig(input({ argv: ['wait'] }))).extraFlags.timeout, null, 'no --timeout waits as long as it takes');
  const bad = await loadConfig(input({ argv: ['wait', '--timeout', 'soon'] })).catch((err: unknown) => err);
  t.type(bad, InputError);
  t.match((bad as Error).message, /^command line: --timeout: expected seconds or a duration/);
  const misplaced = await loadConfig(input({ argv: ['status', '--timeout', '1m'] })).catch((err: unknown) => err);
  t.match((misplaced as Error).message, /--timeout: only valid with: kubeboot wait/);
});

t.test('a config file that is a directory or a FIFO is one line naming where it was given, exit 2', async (t) => {
  const dir = t.testdir({ 'conf.d': {} });
  execFileSync('mkfifo', [path.join(dir, 'fifo.yaml')]);
  const real = (argv: string[]) => loadConfig({ argv, env: {}, readFile: readOptional, hostname: 'worker-1' });
  await t.rejects(real(['run', '--config', path.join(dir, 'conf.d')]), {
    code: 2,
    message: `command line: --config: ${path.join(dir, 'conf.d')} is a directory; expected a regular file`,
  });
  await t.rejects(real(['run', '--config', path.join(dir, 'fifo.yaml')]), {
    code: 2,
    message: `command line: --config: ${path.join(dir, 'fifo.yaml')} is a named pipe (FIFO); expected a regular file`,
  });
});

t.test('the approver, like the admin commands, needs no node name: a hostname that is not one is fine', async (t) => {
  const loaded = await loadConfig(input({ argv: ['approver', '--kubeconfig', 'a.conf'], hostname: 'Not_A_DNS_Name' }));
  t.equal(loaded.command, 'approver');
  t.equal(loaded.extraFlags.given['kubeconfig'], 'a.conf', '--kubeconfig reaches the approver');
  await t.rejects(
    loadConfig(input({ argv: ['run'], hostname: 'Not_A_DNS_Name' })),
    { message: /^hostname: node name: .*set --node-name$/ },
    'a node still does',
  );
});

t.test(
  'kubelet client approval is on by default; --no-approve-kubelet-client turns it off, --approve-kubelet-client changes nothing',
  async (t) => {
    t.equal((await loadConfig(input({ argv: ['approver'] }))).config.approver.kubeletClient, true, 'default');
    t.equal((await loadConfig(input({ argv: ['approver', '--approve-kubelet-client'] }))).config.approver.kubeletClient, true, 'old flag');
    t.equal((await loadConfig(input({ argv: ['approver', '--no-approve-kubelet-client'] }))).config.approver.kubeletClient, false, '--no-');
    const fromFile = await loadConfig(input({ argv: ['approver'], files: { [CONFIG]: 'approver: { kubeletClient: false }\n' } }));
    t.equal(fromFile.config.approver.kubeletClient, false, 'approver.kubeletClient: false in the file');
    const env = await loadConfig(input({ argv: ['approver'], env: { KUBEBOOT_APPROVE_KUBELET_CLIENT: 'false' } }));
    t.equal(env.config.approver.kubeletClient, false, 'KUBEBOOT_APPROVE_KUBELET_CLIENT=false');
  },
);
