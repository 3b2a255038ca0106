/**
 * Builds the Config from defaults < config file < KUBEBOOT_* environment <
 * flags. The only I/O is the injected `readFile`; everything else is a
 * function of the argv, environment and hostname passed in.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { ParseArgsOptionsConfig } from 'node:util';
import { InputError } from '../errors.js';
import type { ReadFile } from '../read-optional.js';
import { UnreadableInputError } from '../errors.js';
import type { IdentityName } from '../identity.js';
import { coerce } from './coerce.js';
import type { Origin, Setting } from './coerce.js';
import { defaultConfig, DEFAULT_CONFIG_FILE } from './defaults.js';
import { CLUSTER_COMMANDS, COMMAND_FLAGS, COMMANDS, OPTIONS } from './options.js';
import type { Command, ConfigKey, OptionSpec } from './options.js';
import type { Config } from './types.js';
import { dns1123SubdomainProblem, fieldLabel, parseBool, parseDuration, quote } from './values.js';
import { validateConfig } from './validate.js';
import { isMapping, kindOf } from './shape.js';

export interface LoadInput {
  argv: string[];
  env: Record<string, string | undefined>;
  /** Returns null when the file does not exist. */
  readFile: ReadFile;
  hostname: string;
  /** Base for relative paths from flags and the environment; defaults to process.cwd(). */
  cwd?: string;
}

export interface ExtraFlags {
  /** `status --output`. */
  output: 'text' | 'json';
  /** `renew`/`wait --identity`; null means every configured identity. */
  identity: IdentityName | null;
  /** `wait --timeout` in seconds; null waits as long as it takes. */
  timeout: number | null;
  given: Given;
}

/** Every command flag given, by flag name (`strings` split on commas; `--no-x` is false). */
export type Given = Record<string, string | string[] | boolean>;

export interface Loaded {
  command: Command | null;
  config: Config;
  /** Positionals after the command. */
  positionals: string[];
  help: boolean;
  version: boolean;
  extraFlags: ExtraFlags;
}

const CLI = 'command line';
const ENV = 'environment';

export async function loadConfig(input: LoadInput): Promise<Loaded> {
  const cwd = input.cwd ?? process.cwd();
  const cli = parseCommandLine(input.argv, cwd);
  const hostNodeName = input.hostname.trim().toLowerCase();
  if (cli.help || cli.version) {
    // --help must work even when the config file is broken, so nothing is read.
    return { ...cli.result, config: defaultConfig(hostNodeName) };
  }

  const envSettings = environmentSettings(input.env, cwd);
  const configSetting = [...cli.settings, ...envSettings].reverse().find((s) => s.spec.key === 'configFile');
  const configFile = configSetting !== undefined ? (coerce(configSetting) as string) : DEFAULT_CONFIG_FILE;
  let text: string | null;
  try {
    text = await input.readFile(configFile);
  } catch (err) {
    // A directory, FIFO or oversize file named by --config or KUBEBOOT_CONFIG: name where it was given.
    if (err instanceof UnreadableInputError && configSetting !== undefined) {
      throw new InputError(configSetting.origin.source, configSetting.origin.field, `${err.file} ${err.problem}`);
    }
    throw err;
  }
  if (text === null && configSetting !== undefined) {
    throw new InputError(configSetting.origin.source, configSetting.origin.field, `config file not found: ${configFile}`);
  }
  // The YAML library loads only when there is a file to parse: `--version` and `--help` never need it.
  const fileLayer = text === null ? [] : fileSettings(configFile, (await import('./yaml.js')).parseYaml(configFile, text));

  const config = defaultConfig(hostNodeName);
  const origins = new Map<ConfigKey, Origin>();
  for (const setting of [...fileLayer, ...envSettings, ...cli.settings]) {
    writeKey(config, setting.spec.key, coerce(setting));
    origins.set(setting.spec.key, setting.origin);
  }
  config.configFile = configFile;
  // The admin's machine and the approver need no node name of their own.
  const onNode = cli.result.command === null || !CLUSTER_COMMANDS.includes(cli.result.command);
  if (!origins.has('nodeName') && onNode) {
    const problem = dns1123SubdomainProblem(hostNodeName);
    if (problem !== null) throw new InputError('hostname', 'node name', `${problem}; set --node-name`);
  }
  validateConfig(config, (key) => origins.get(key) ?? null);
  return { ...cli.result, config };
}

function writeKey(config: Config, key: ConfigKey, value: unknown): void {
  const parts = key.split('.');
  const last = parts.pop() as string;
  let node = config as unknown as Record<string, unknown>;
  for (const part of parts) node = node[part] as Record<string, unknown>;
  node[last] = value;
}

// ---- command line ----

interface CommandLine {
  result: Omit<Loaded, 'config'>;
  settings: Setting[];
  help: boolean;
  version: boolean;
}

const BY_FLAG = new Map(OPTIONS.filter((o) => o.flag !== null).map((o) => [o.flag as string, o]));
const LIST_TYPES = new Set(['strings', 'paths', 'pins']);

function parseArgsOptions(): ParseArgsOptionsConfig {
  const options: ParseArgsOptionsConfig = {
    help: { type: 'boolean', short: 'h' },
    version: { type: 'boolean' },
  };
  for (const [flag, spec] of BY_FLAG) {
    options[flag] = spec.type === 'bool' ? { type: 'boolean' } : { type: 'string', multiple: LIST_TYPES.has(spec.type) };
  }
  for (const c of COMMAND_FLAGS)
    options[c.flag] = c.type === 'bool' ? { type: 'boolean' } : { type: 'string', multiple: c.type === 'strings' || c.type === 'repeated' };
  return options;
}

/** `--flag=false` for a boolean becomes `--no-flag`, which parseArgs understands; anything else is checked first. */
function normalizeBooleans(argv: string[]): string[] {
  const out: string[] = [];
  for (const [i, arg] of argv.entries()) {
    if (arg === '--') return [...out, ...argv.slice(i)];
    const m = /^--([^=]+)=(.*)$/s.exec(arg);
    const spec = m !== null ? BY_FLAG.get(m[1] as string) : undefined;
    if (m === null || spec === undefined || spec.type !== 'bool') {
      out.push(arg);
      continue;
    }
    const parsed = parseBool(m[2]);
    if (!parsed.ok) throw new InputError(CLI, `--${spec.flag}`, parsed.problem);
    out.push(parsed.value ? `--${spec.flag}` : `--no-${spec.flag}`);
  }
  return out;
}

function isKnownFlag(name: string): boolean {
  if (name === 'help' || name === 'version' || BY_FLAG.has(name)) return true;
  if (COMMAND_FLAGS.some((c) => c.flag === name)) return true;
  const positive = name.slice(3);
  return (
    name.startsWith('no-') &&
    (BY_FLAG.get(positive)?.type === 'bool' || COMMAND_FLAGS.some((c) => c.flag === positive && c.type === 'bool'))
  );
}

function parseCommandLine(argv: string[], cwd: string): CommandLine {
  const args = normalizeBooleans(argv);
  // Checked before parseArgs so the error names the flag without parseArgs' advice text.
  for (const arg of args) {
    if (arg === '--') break;
    const name = /^--([^=]+)/.exec(arg)?.[1];
    if (name !== undefined && !isKnownFlag(name)) throw new InputError(CLI, `--${name}`, 'unknown option');
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args, options: parseArgsOptions(), strict: true, allowPositionals: true, allowNegative: true });
  } catch (err) {
    throw parseArgsError(err);
  }
  const values = parsed.values as Record<string, string | string[] | boolean | undefined>;
  const [first, ...positionals] = parsed.positionals;
  const help = values['help'] === true;
  const version = values['version'] === true;
  let command: Command | null = null;
  if (first !== undefined) {
    if (!(COMMANDS as readonly string[]).includes(first)) {
      throw new InputError(CLI, 'command', `unknown command ${quote(first)} (want ${COMMANDS.join(', ')})`);
    }
    command = first as Command;
  }

  const extraFlags: ExtraFlags = { output: 'text', identity: null, timeout: null, given: {} };
  for (const spec of COMMAND_FLAGS) {
    const value = values[spec.flag];
    if (value === undefined) continue;
    if (command === null || !spec.commands.includes(command)) {
      throw new InputError(CLI, `--${spec.flag}`, `only valid with: ${spec.commands.map((c) => `kubeboot ${c}`).join(', ')}`);
    }
    if (typeof value !== 'string') {
      extraFlags.given[spec.flag] =
        Array.isArray(value) && spec.type === 'strings'
          ? value
              .flatMap((v) => v.split(','))
              .map((v) => v.trim())
              .filter((v) => v !== '')
          : value;
      continue;
    }
    extraFlags.given[spec.flag] = value;
    if (spec.values !== undefined && !spec.values.includes(value)) {
      throw new InputError(CLI, `--${spec.flag}`, `expected one of ${spec.values.join(', ')}, got ${quote(value)}`);
    }
    if (spec.flag === 'output') extraFlags.output = value as ExtraFlags['output'];
    if (spec.flag === 'identity') extraFlags.identity = value as IdentityName;
    if (spec.flag === 'timeout') {
      const parsed = parseDuration(value);
      if (!parsed.ok) throw new InputError(CLI, '--timeout', parsed.problem);
      extraFlags.timeout = parsed.value;
    }
  }

  const settings: Setting[] = [];
  for (const [flag, spec] of BY_FLAG) {
    const raw = values[flag];
    if (raw === undefined) continue;
    settings.push({ spec, raw, origin: { source: CLI, field: `--${flag}`, baseDir: cwd } });
  }
  return { result: { command, positionals, help, version, extraFlags }, settings, help, version };
}

function parseArgsError(err: unknown): InputError {
  const message = (err as Error).message;
  const flag = /'(-{1,2}[^' ]+)/.exec(message)?.[1] ?? 'arguments';
  const code = (err as { code?: string }).code;
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return new InputError(CLI, flag, 'unknown option');
  if (/argument missing/.test(message)) return new InputError(CLI, flag, 'expects a value');
  if (/ambiguous/.test(message)) return new InputError(CLI, flag, `expects a value (write ${flag}=VALUE for a value starting with '-')`);
  if (/does not take an argument/.test(message)) return new InputError(CLI, flag, 'takes no value');
  return new InputError(CLI, flag, message.split('\n')[0] ?? message);
}

// ---- environment ----

function environmentSettings(env: Record<string, string | undefined>, cwd: string): Setting[] {
  const settings: Setting[] = [];
  for (const spec of OPTIONS) {
    if (spec.env === null) continue;
    const text = env[spec.env];
    // Empty counts as unset: unit files and EnvironmentFile= often carry `KEY=`.
    if (text === undefined || text.trim() === '') continue;
    const raw = LIST_TYPES.has(spec.type)
      ? text
          .split(',')
          .map((s) => s.trim())
          .filter((s) => s !== '')
      : text;
    settings.push({ spec, raw, origin: { source: ENV, field: spec.env, baseDir: cwd } });
  }
  return settings;
}

// ---- config file ----

const BY_KEY = new Map(OPTIONS.filter((o) => o.inFile).map((o) => [o.key as string, o]));
const GROUPS = new Set([...BY_KEY.keys()].filter((k) => k.includes('.')).map((k) => k.slice(0, k.lastIndexOf('.'))));

function fileSettings(file: string, data: unknown): Setting[] {
  if (data === null) return [];
  if (!isMapping(data)) throw new InputError(file, '(document)', `expected a mapping of settings, got ${kindOf(data)}`);
  const baseDir = path.dirname(file);
  const settings: Setting[] = [];
  const walk = (node: Record<string, unknown>, prefix: string): void => {
    for (const [name, raw] of Object.entries(node)) {
      const key = `${prefix}${name}`;
      const spec: OptionSpec | undefined = BY_KEY.get(key);
      if (spec !== undefined) {
        // A key present with no value (`listen:`) is a mistake, not a request for the default.
        if (raw === null && !(spec.nullable === true || spec.type === 'listen')) {
          throw new InputError(file, key, 'has no value (remove the key to use the default)');
        }
        settings.push({ spec, raw, origin: { source: file, field: key, baseDir } });
      } else if (GROUPS.has(key)) {
        if (!isMapping(raw)) throw new InputError(file, key, `expected a mapping, got ${kindOf(raw)}`);
        walk(raw, `${key}.`);
      } else {
        // The key is the operator's text: bounded and quoted if odd, so the message stays one short line.
        throw new InputError(file, fieldLabel(key), `unknown key${suggestion(key)}`);
      }
    }
  };
  walk(data, '');
  return settings;
}

function suggestion(key: string): string {
  const camel = key.replace(/[-_]([a-z])/g, (_, c: string) => c.toUpperCase());
  let best: string | null = null;
  let bestDistance = 4;
  for (const candidate of [...BY_KEY.keys(), ...GROUPS]) {
    const d = candidate === camel ? 0 : editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return best === null ? '' : ` (did you mean ${best}?)`;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      next.push(Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + cost));
    }
    row = next;
  }
  return row[b.length] ?? 0;
}
