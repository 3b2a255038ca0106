/**
 * `kubeboot user-data` and `kubeboot join-command`: everything a node needs
 * to join, right by construction — the server, token and CA pins as
 * admin/join-values.ts decides them, the package source with its key,
 * the node's settings from --set — rendered (admin/user-data.ts).
 */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { Config } from '../config/types.js';
import { coerce } from '../config/coerce.js';
import { OPTIONS, type OptionSpec } from '../config/options.js';
import { ExitCode, InputError } from '../errors.js';
import type { Given } from '../config/load.js';
import { nodeKubeProxy } from '../admin/cluster-side.js';
import type { BindingSpec } from '../admin/token.js';
import { joinValues } from '../admin/join-values.js';
import {
  DEFAULT_TOKEN_FILE,
  joinCommand,
  renderCloudConfig,
  renderScript,
  repoWarnings,
  type NodeJoin,
  type PackageRepo,
} from '../admin/user-data.js';
import { writeFileAtomic } from '../store/atomic.js';
import { terminalLines, type Streams } from '../text.js';

const CLI = 'command line';
// Set by the dedicated flags: --set would contradict them.
const RESERVED = new Set(['server', 'token', 'caCertHashes', 'configFile']);

export async function runUserData(
  command: 'user-data' | 'join-command',
  config: Config,
  given: Given,
  env: Record<string, string | undefined>,
  io: Streams = process,
): Promise<number> {
  const settings = command === 'user-data' ? parseSets(Array.isArray(given.set) ? given.set : []) : {};
  const repo = command === 'user-data' ? await packageRepo(given) : null;
  // Checked before a token is created that a failed write would leave behind.
  const outputFile = command === 'user-data' ? await outputFileOf(given) : null;
  const explicit = (settings.kubeProxy as Record<string, unknown> | undefined)?.enabled;
  const { server, token, pins, expires, binding, kubeProxyRun, notes } = await joinValues(command, config, given, env);
  const kubeProxy = nodeKubeProxy(kubeProxyRun, typeof explicit === 'boolean' ? explicit : undefined);
  io.stderr.write(terminalLines([...notes, ...kubeProxy.notes].map((n) => `kubeboot ${command}: ${n}`)));
  if (command === 'join-command') {
    io.stdout.write(joinCommand({ server, token, pins, kubeProxy: kubeProxy.enabled }) + '\n');
    return ExitCode.ok;
  }
  if (kubeProxy.enabled === false) settings.kubeProxy = { ...(settings.kubeProxy as Record<string, unknown> | undefined), enabled: false };
  const tokenFile = typeof settings.tokenFile === 'string' ? settings.tokenFile : DEFAULT_TOKEN_FILE;
  delete settings.tokenFile;
  const join: NodeJoin = { server, token, pins, settings, tokenFile, repo };
  const text = given.format === 'script' ? renderScript(join) : renderCloudConfig(join);
  // It holds the token: created 0600 (never wider, not even before a chmod), whole or not at all.
  if (outputFile !== null) await writeFileAtomic(outputFile, text, { mode: 0o600 });
  else io.stdout.write(text);
  for (const warning of repoWarnings(repo)) io.stderr.write(`kubeboot user-data: warning: ${warning}\n`);
  io.stderr.write(tokenReminder(token, expires, binding));
  return ExitCode.ok;
}

/** --output-file as an absolute path, in a directory that exists. */
async function outputFileOf(given: Given): Promise<string | null> {
  const raw = given['output-file'];
  if (typeof raw !== 'string') return null;
  if (raw === '') throw new InputError(CLI, '--output-file', 'expected a file path');
  const file = path.resolve(raw);
  const dir = path.dirname(file);
  const isDir = await stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!isDir) throw new InputError(CLI, '--output-file', `${dir} is not an existing directory`);
  return file;
}

/**
 * The token's life, on stderr so the user-data on stdout stays clean: an
 * unbound token joins every node booted with this user-data until it
 * expires, a bound one the names it is bound to; either way the nodes keep
 * copies (cloud-init's cache; a cloud's metadata service serves it for the
 * instance's life), so it should end when the pool has booted.
 */
export function tokenReminder(token: string, expires: string | null | undefined, binding: BindingSpec | null = null): string {
  const id = token.slice(0, token.indexOf('.'));
  const until = expires === undefined ? 'until it expires' : expires === null ? 'forever (--no-expiry)' : `until ${expires}`;
  const joins =
    binding === null
      ? `joins any node booted with this user-data ${until}`
      : `authenticates ${until} and is bound to ${'names' in binding ? `node ${binding.names.join(', ')}` : `at most ${binding.maxNodes} nodes named ${binding.prefix}*`}: kubeboot approver issues each name from it once (kube-controller-manager, while its auto-approval is bound, does not check: docs/node-identity.md)`;
  return (
    `kubeboot user-data: bootstrap token ${id} ${joins}; ` +
    'cloud-init keeps copies of it on every node (/var/lib/cloud/instances/<id>/) and a cloud may serve it from its metadata service. ' +
    `Boot the pool within the token's TTL, then: kubeboot token delete ${id}\n`
  );
}

const BY_KEY = new Map(OPTIONS.filter((o) => o.inFile).map((o) => [o.key as string, o]));

/**
 * `--set key=value` → nested config-file settings, each checked as the node
 * would check it (the value is YAML: `true`, `15m`, `[a, b]`).
 */
export function parseSets(sets: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const item of sets) {
    const eq = item.indexOf('=');
    const key = eq > 0 ? item.slice(0, eq).trim() : '';
    const spec: OptionSpec | undefined = BY_KEY.get(key);
    if (spec === undefined)
      throw new InputError(CLI, `--set ${key || item}`, 'expected KEY=VALUE with a config-file key (see kubeboot --help)');
    if (RESERVED.has(key)) throw new InputError(CLI, `--set ${key}`, `set it with --${spec.flag} instead`);
    let raw: unknown;
    try {
      raw = parseYaml(item.slice(eq + 1));
    } catch {
      throw new InputError(CLI, `--set ${key}`, 'value is not valid YAML');
    }
    coerce({ spec, raw, origin: { source: CLI, field: `--set ${key}`, baseDir: '/etc/kubeboot' } });
    if (spec.type === 'path' && typeof raw === 'string' && !path.isAbsolute(raw))
      throw new InputError(CLI, `--set ${key}`, 'must be an absolute path');
    const parts = key.split('.');
    let node = out;
    for (const part of parts.slice(0, -1)) node = (node[part] ??= {}) as Record<string, unknown>;
    node[parts.at(-1) as string] = raw;
  }
  return out;
}

async function packageRepo(given: Given): Promise<PackageRepo | null> {
  const url = typeof given['repo-url'] === 'string' ? given['repo-url'] : null;
  const keyFile = typeof given['repo-key'] === 'string' ? given['repo-key'] : null;
  const unsigned = given['unsafe-unsigned-repo'] === true;
  if (url === null) {
    if (keyFile !== null) throw new InputError(CLI, '--repo-key', 'needs --repo-url');
    if (unsigned) throw new InputError(CLI, '--unsafe-unsigned-repo', 'needs --repo-url');
    return null;
  }
  if (!/^(https?|file):\/\/\S+$/.test(url)) throw new InputError(CLI, '--repo-url', 'expected an http(s):// or file:// URL');
  if (unsigned && keyFile !== null) throw new InputError(CLI, '--unsafe-unsigned-repo', 'cannot be combined with --repo-key');
  // Without it apt refuses the source and yum would install whatever it is served.
  if (!unsigned && keyFile === null) {
    throw new InputError(
      CLI,
      '--repo-key',
      "missing: give the repository's public signing key (npm run repo writes dist/repo/kubeboot-repo.asc), or --unsafe-unsigned-repo to install unverified packages",
    );
  }
  let keyText: string | null = null;
  if (keyFile !== null) {
    try {
      keyText = await readFile(keyFile, 'utf8');
    } catch (err) {
      throw new InputError(CLI, '--repo-key', `cannot read ${keyFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (!keyText.includes('-----BEGIN PGP PUBLIC KEY BLOCK-----'))
      throw new InputError(keyFile, '(file)', 'not an ASCII-armored PGP public key (gpg --armor --export)');
  }
  const type = given['repo-type'] === 'yum' ? 'yum' : 'apt';
  const suite = typeof given['repo-suite'] === 'string' ? given['repo-suite'] : 'stable';
  if (!/^[A-Za-z0-9._-]+$/.test(suite)) throw new InputError(CLI, '--repo-suite', 'expected a suite name like stable');
  return { type, url, keyText, suite };
}
