// The join settings as the node's loader reads them: flags, KUBEBOOT_*
// variables and config-file keys, with errors that never show the token.
import t from 'tap';
import { loadConfig } from '../../../agent/config/load.js';
import { ExitCode } from '../../../agent/errors.js';

const TOKEN = 'abcdef.0123456789abcdef';
const PIN = `sha256:${'cd'.repeat(32)}`;
const load = (argv: string[], env: Record<string, string> = {}, file: string | null = null) =>
  loadConfig({ argv, env, hostname: 'worker-1', cwd: '/work', readFile: async (p) => (p === '/etc/kubeboot/config.yaml' ? file : null) });

t.test('server, token and token file come from flags, the environment or the config file', async (t) => {
  const flags = await load(['bootstrap', '--server', 'https://api:6443', '--token', TOKEN, '--ca-cert-hash', PIN]);
  t.match(flags.config, { server: 'https://api:6443', token: TOKEN, tokenFile: null, caCertHashes: [PIN] });
  const env = await load(['run'], { KUBEBOOT_SERVER: 'https://api:6443', KUBEBOOT_TOKEN: TOKEN, KUBEBOOT_CA_CERT_HASH: PIN });
  t.match(env.config, { server: 'https://api:6443', token: TOKEN, caCertHashes: [PIN] });
  const file = await load(['run'], {}, `server: https://api:6443\ntokenFile: /etc/kubernetes/bootstrap-token\ncaCertHashes: [${PIN}]\n`);
  t.match(file.config, { server: 'https://api:6443', token: null, tokenFile: '/etc/kubernetes/bootstrap-token' });
  const relative = await load(['run', '--token-file', 'token']);
  t.equal(relative.config.tokenFile, '/work/token', 'a relative --token-file is relative to the working directory');
});

t.test('a malformed token is refused without echoing it', async (t) => {
  const secretish = 'abcdef.0123456789ABCDEFxyz';
  for (const [argv, env, where] of [
    [['bootstrap', '--token', secretish], {}, 'command line: --token'],
    [['bootstrap'], { KUBEBOOT_TOKEN: secretish }, 'environment: KUBEBOOT_TOKEN'],
  ] as const) {
    const err = await load([...argv], { ...env }).then(
      () => null,
      (e: Error & { code: number }) => e,
    );
    t.equal(err?.message, `${where}: not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}; the value is not shown)`);
    t.equal(err?.code, ExitCode.badInput);
    t.notMatch(err?.message ?? '', '0123456789', 'no part of the secret');
  }
});

t.test('a server must be https://host[:port]', async (t) => {
  await t.rejects(load(['bootstrap', '--server', 'http://api:6443']), {
    message: 'command line: --server: must be an https:// URL, got scheme http',
  });
  await t.rejects(load(['bootstrap', '--server', 'https://api:6443/k8s']), {
    message: 'command line: --server: must be https://host[:port] without a path, query or fragment',
  });
  await t.rejects(load(['bootstrap', '--server', 'https://u:p@api']), { message: 'command line: --server: must not contain credentials' });
});

t.test('admin commands need no valid node name, node commands still do', async (t) => {
  const admin = await loadConfig({ argv: ['token', 'list'], env: {}, hostname: 'Admin_Laptop', readFile: async () => null });
  t.equal(admin.command, 'token');
  t.same(admin.positionals, ['list']);
  await t.rejects(loadConfig({ argv: ['bootstrap'], env: {}, hostname: 'Admin_Laptop', readFile: async () => null }), {
    code: ExitCode.badInput,
  });
});

t.test('command flags: --no-expiry, repeatable comma lists, and --set kept whole', async (t) => {
  const l = await load([
    'token',
    'create',
    '--no-expiry',
    '--groups',
    'system:bootstrappers:a,system:bootstrappers:b',
    '--groups',
    'system:bootstrappers:c',
    '--output',
    'json',
  ]);
  t.same(l.extraFlags.given, {
    expiry: false,
    groups: ['system:bootstrappers:a', 'system:bootstrappers:b', 'system:bootstrappers:c'],
    output: 'json',
  });
  const u = await load(['user-data', '--set', 'kubeProxy.organizations=[a,b]', '--set', 'waitTimeout=5m']);
  t.same(u.extraFlags.given.set, ['kubeProxy.organizations=[a,b]', 'waitTimeout=5m']);
  await t.rejects(load(['bootstrap', '--set', 'x=y']), { message: 'command line: --set: only valid with: kubeboot user-data' });
});
