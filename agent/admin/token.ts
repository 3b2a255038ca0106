/**
 * Bootstrap tokens as the API server reads them (matches cluster-bootstrap
 * token/api and kubeadm's bootstraptoken encoding): a Secret
 * `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`.
 * Everything here is pure; the requests are agent/admin/cluster-requests.ts's.
 */
import { randomInt } from 'node:crypto';
import { InputError } from '../errors.js';
import { dns1123SubdomainProblem, parseDuration, quote } from '../config/values.js';
import type { TokenBinding } from '../records/bindings.js';
import { reservedNameProblem } from '../pki/names.js';

export const TOKEN_SECRET_TYPE = 'bootstrap.kubernetes.io/token';
export const TOKEN_NAMESPACE = 'kube-system';
export const GROUP_PREFIX = 'system:bootstrappers:';
export const USAGES = ['authentication', 'signing'] as const;
export type TokenUsage = (typeof USAGES)[number];

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const TOKEN_ID = /^[a-z0-9]{6}$/;
// matches cluster-bootstrap's BootstrapGroupPattern.
const GROUP = /^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$/;

export interface NewToken {
  id: string;
  secret: string;
  /** `<id>.<secret>`: what a node authenticates with. */
  token: string;
}

export interface TokenSpec {
  /** Null: never expires. */
  ttlSeconds: number | null;
  usages: TokenUsage[];
  groups: string[];
  description: string | null;
}

/** What `token list` shows: everything but the secret. */
export interface TokenSummary {
  id: string;
  expires: string | null;
  usages: string[];
  groups: string[];
  description: string | null;
}

/**
 * crypto.randomInt draws by rejection sampling, so every character of the
 * 36-letter alphabet is equally likely (no modulo bias). `draw` is injectable for tests.
 */
export function generateToken(draw: (max: number) => number = randomInt): NewToken {
  const part = (n: number) => Array.from({ length: n }, () => ALPHABET[draw(ALPHABET.length)]).join('');
  const id = part(6);
  const secret = part(16);
  return { id, secret, token: `${id}.${secret}` };
}

/** RFC 3339 in UTC without fractions, as kubeadm writes `expiration`. */
export function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function tokenSecret(token: NewToken, spec: TokenSpec, now: Date): object {
  const stringData: Record<string, string> = { 'token-id': token.id, 'token-secret': token.secret };
  if (spec.ttlSeconds !== null) stringData.expiration = rfc3339(new Date(now.getTime() + spec.ttlSeconds * 1000));
  for (const usage of spec.usages) stringData[`usage-bootstrap-${usage}`] = 'true';
  if (spec.groups.length > 0) stringData['auth-extra-groups'] = spec.groups.join(',');
  if (spec.description !== null) stringData.description = spec.description;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: secretName(token.id), namespace: TOKEN_NAMESPACE },
    type: TOKEN_SECRET_TYPE,
    stringData,
  };
}

export function secretName(id: string): string {
  return `bootstrap-token-${id}`;
}

/** The token id of `token delete ID`; a whole token is accepted and only its id used. */
export function parseTokenId(raw: string): string {
  const id = raw.includes('.') ? raw.slice(0, raw.indexOf('.')) : raw;
  if (!TOKEN_ID.test(id)) throw new InputError('command line', 'token id', `expected 6 characters [a-z0-9], got ${quote(id)}`);
  return id;
}

/** A bootstrap token Secret as the API returns it (`data` is base64), minus its secret. */
export function summarize(secret: { metadata?: { name?: string }; data?: Record<string, string> }): TokenSummary | null {
  const field = (key: string): string | null => {
    const value = secret.data?.[key];
    return value === undefined ? null : Buffer.from(value, 'base64').toString('utf8');
  };
  const id = field('token-id');
  if (id === null) return null;
  return {
    id,
    expires: field('expiration'),
    usages: USAGES.filter((u) => field(`usage-bootstrap-${u}`) === 'true'),
    groups: (field('auth-extra-groups') ?? '')
      .split(',')
      .map((g) => g.trim())
      .filter((g) => g !== ''),
    description: field('description'),
  };
}

export interface TokenFlags {
  ttl?: string | string[] | boolean;
  expiry?: string | string[] | boolean;
  usages?: string | string[] | boolean;
  groups?: string | string[] | boolean;
  description?: string | string[] | boolean;
}

const CLI = 'command line';

/** --ttl, --no-expiry, --usages, --groups, --description → a TokenSpec, or an InputError naming the flag. */
export function tokenSpecFrom(flags: TokenFlags): TokenSpec {
  const neverExpires = flags.expiry === false;
  let ttlSeconds: number | null = 3600;
  if (typeof flags.ttl === 'string') {
    const parsed = parseDuration(flags.ttl);
    if (!parsed.ok) throw new InputError(CLI, '--ttl', parsed.problem);
    ttlSeconds = parsed.value;
  }
  if (neverExpires) {
    if (typeof flags.ttl === 'string' && ttlSeconds !== 0) throw new InputError(CLI, '--ttl', 'cannot be combined with --no-expiry');
    ttlSeconds = null;
  } else if (ttlSeconds === 0) {
    throw new InputError(CLI, '--ttl', '0 would make a token that never expires; pass --no-expiry to mean that');
  }
  const list = (v: unknown): string[] | null => (Array.isArray(v) ? (v as string[]) : null);
  const usages = list(flags.usages) ?? [...USAGES];
  if (usages.length === 0) throw new InputError(CLI, '--usages', 'must name at least one of authentication, signing');
  for (const u of usages) {
    if (!(USAGES as readonly string[]).includes(u))
      throw new InputError(CLI, '--usages', `expected authentication or signing, got ${quote(u)}`);
  }
  const groups = list(flags.groups) ?? [];
  for (const g of groups) {
    if (!GROUP.test(g))
      throw new InputError(
        CLI,
        '--groups',
        `${quote(g)} must start with ${GROUP_PREFIX} followed by [a-z0-9:-] (the API server ignores other groups)`,
      );
  }
  const description = typeof flags.description === 'string' ? flags.description : null;
  return { ttlSeconds, usages: [...new Set(usages)] as TokenUsage[], groups: [...new Set(groups)], description };
}

/** What a new token may join (the binding of agent/records/bindings.ts): one node's name, or a pool's prefix and size. */
export type BindingSpec = { names: string[] } | { prefix: string; maxNodes: number };

export interface BindingFlags {
  node?: string | string[] | boolean;
  pool?: string | string[] | boolean;
  'max-nodes'?: string | string[] | boolean;
}

/**
 * Why `name` cannot be a kubelet identity, or null: not a Node name, or a
 * name kubeboot approver never issues (`reserved-names`). `apiServerNames`:
 * names the API server is known by (the admin kubeconfig's host).
 */
export function nodeNameProblem(name: string, apiServerNames: readonly string[] = []): string | null {
  return dns1123SubdomainProblem(name) ?? reservedNameProblem(name, { names: apiServerNames.map((n) => n.toLowerCase()) });
}

/** --node, --pool, --max-nodes → what the token may join; null for none of them (an unbound token, as before). */
export function bindingSpecFrom(flags: BindingFlags, apiServerNames: readonly string[] = []): BindingSpec | null {
  const node = typeof flags.node === 'string' ? flags.node : null;
  const pool = typeof flags.pool === 'string' ? flags.pool : null;
  const max = typeof flags['max-nodes'] === 'string' ? flags['max-nodes'] : null;
  if (node !== null && pool !== null) throw new InputError(CLI, '--pool', 'cannot be combined with --node');
  if (max !== null && pool === null) throw new InputError(CLI, '--max-nodes', 'only with --pool (a --node token joins one node)');
  if (node !== null) {
    const problem = nodeNameProblem(node, apiServerNames);
    if (problem !== null) throw new InputError(CLI, '--node', problem);
    return { names: [node] };
  }
  if (pool === null) return null;
  // The pool's names are `<prefix><anything>`: the shortest is one character longer.
  if (dns1123SubdomainProblem(`${pool}0`) !== null)
    throw new InputError(
      CLI,
      '--pool',
      `${quote(pool)} cannot begin a Node name (lowercase letters, digits, '-' and '.', starting with a letter or digit, at most 252 characters)`,
    );
  const reserved = reservedNameProblem(`${pool}0`, { names: [] });
  if (reserved !== null) throw new InputError(CLI, '--pool', `names ${pool}* are never issued: ${reserved}`);
  if (max === null) throw new InputError(CLI, '--max-nodes', 'required with --pool: how many nodes the token may join');
  const maxNodes = /^[1-9][0-9]{0,8}$/.test(max) ? Number(max) : Number.NaN;
  if (Number.isNaN(maxNodes)) throw new InputError(CLI, '--max-nodes', `expected a whole number from 1, got ${quote(max)}`);
  return { prefix: pool, maxNodes };
}

/** What `token list` says a token may join, and how much of that it has used. */
export interface BindingView {
  /** `node-1`, `pool-a-*`, `<unbound>`, or `<unusable: why>` (then the approver approves nothing from it). */
  joins: string;
  /** `<issued>/<max>`; empty without a usable binding. */
  spent: string;
}

export function bindingView(binding: TokenBinding | { problem: string } | null): BindingView {
  if (binding === null) return { joins: '<unbound>', spent: '' };
  if ('problem' in binding) return { joins: `<unusable: ${binding.problem}>`, spent: '' };
  const spent = `${binding.issued.size}/${binding.maxNodes}`;
  return { joins: binding.kind === 'names' ? binding.names.join(',') : `${binding.prefix}*`, spent };
}
