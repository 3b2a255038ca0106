import t from 'tap';
import {
  OPTIONS,
  COMMAND_FLAGS,
  commandFlagUsage,
  readKey,
  renderOptionsHelp,
  renderOptionsReference,
} from '../../../agent/config/options.js';
import { defaultConfig, DEFAULT_LISTEN } from '../../../agent/config/defaults.js';

/** Dotted paths of every leaf in a Config value. */
function leaves(value: unknown, prefix = ''): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return [prefix.slice(0, -1)];
  return Object.entries(value).flatMap(([k, v]) => leaves(v, `${prefix}${k}.`));
}

t.test('every Config setting has exactly one option', async (t) => {
  const keys = OPTIONS.map((o) => o.key as string);
  t.same([...keys].sort(), leaves(defaultConfig('n')).sort());
  t.equal(new Set(keys).size, keys.length);
});

t.test('flags and environment variables are unique and derived from each other', async (t) => {
  const flags = OPTIONS.flatMap((o) => (o.flag === null ? [] : [o.flag]));
  t.equal(new Set([...flags, ...COMMAND_FLAGS.map((c) => c.flag)]).size, flags.length + COMMAND_FLAGS.length);
  for (const o of OPTIONS) {
    if (o.flag !== null) t.equal(o.env, `KUBEBOOT_${o.flag.toUpperCase().replaceAll('-', '_')}`, o.flag);
    else t.equal(o.type, 'hooks', `${o.key}: only hooks are config-file only`);
  }
});

t.test("the brief's flags all exist", async (t) => {
  const wanted = [
    'config',
    'bootstrap-kubeconfig',
    'state-dir',
    'node-name',
    'key-algorithm',
    'expiration-seconds',
    'ca-cert-hash',
    'unsafe-skip-ca-verification',
    'unsafe-allow-insecure-bootstrap',
    'kubelet-kubeconfig',
    'kubelet-cert-dir',
    'kube-proxy',
    'kube-proxy-kubeconfig',
    'kube-proxy-cert-dir',
    'kube-proxy-common-name',
    'kube-proxy-organization',
    'kube-proxy-signer',
    'kubelet-serving',
    'kubelet-serving-dns-name',
    'kubelet-serving-ip-address',
    'wait-timeout',
    'pending-notice-interval',
    'renew-margin',
    'reuse-key',
    'hook-timeout',
    'listen',
    'log-level',
    'log-format',
    'cloud-init-path',
  ];
  const flags = new Set(OPTIONS.map((o) => o.flag));
  for (const f of wanted) t.ok(flags.has(f), `--${f}`);
});

t.test('help text lists every flag, environment variable, file key and command flag', async (t) => {
  const help = renderOptionsHelp();
  for (const o of OPTIONS) {
    if (o.flag !== null) t.match(help, o.type === 'bool' ? `--[no-]${o.flag}\n` : `--${o.flag} `);
    if (o.env !== null) t.match(help, o.env);
    if (o.inFile) t.match(help, o.key);
  }
  for (const c of COMMAND_FLAGS) t.match(help, commandFlagUsage(c));
  t.match(
    help,
    '--wait-timeout DURATION\n      How long to wait for a CSR to be approved and signed: bootstrap then exits 4, run retries with the same CSR.\n      env KUBEBOOT_WAIT_TIMEOUT, file waitTimeout; default 15m\n',
  );
  t.match(help, 'default lower-cased hostname');
});

t.test('the README reference has one row per setting with its default', async (t) => {
  const ref = renderOptionsReference().trimEnd().split('\n');
  t.equal(ref.length, OPTIONS.length + 2);
  t.match(ref.join('\n'), `| \`listen\` | \`--listen HOST:PORT\\|off\` | \`KUBEBOOT_LISTEN\` | ${DEFAULT_LISTEN} |`);
});

t.test('readKey follows dotted paths', async (t) => {
  t.equal(readKey(defaultConfig('n'), 'kubeProxy.commonName'), 'system:kube-proxy');
});
