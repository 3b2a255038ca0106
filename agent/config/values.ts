/**
 * Pure parsers for single setting values. Each returns the parsed value or
 * a `problem` sentence; the caller adds the file and field to it, so the
 * same wording serves the config file, the environment and the flags.
 */
import net from 'node:net';
import { DEFAULT_LISTEN } from './defaults.js';
import { canonicalPin } from '../pki/pin-format.js';

export type Parsed<T> = { ok: true; value: T } | { ok: false; problem: string };

export const ok = <T>(value: T): Parsed<T> => ({ ok: true, value });
export const bad = (problem: string): Parsed<never> => ({ ok: false, problem });

/** Quote a user-supplied value for an error message, shortened so one line stays one line. */
export function quote(value: unknown): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  const short = text.length > 60 ? `${text.slice(0, 57)}...` : text;
  return typeof value === 'string' ? JSON.stringify(short) : short;
}

/** A field path from an input file as it may appear in a message: as is when short and printable, else quoted and cut. */
export function fieldLabel(key: string): string {
  return /^[\x21-\x7e]{1,80}$/.test(key) ? key : quote(key);
}

const DURATION = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;

/**
 * Integer seconds, or a Go-like duration made of whole hours, minutes and
 * seconds in that order (`90s`, `15m`, `1h`, `2h30m`). Fractions and `ms`
 * are refused: every duration kubeboot takes is at least seconds long.
 */
export function parseDuration(raw: unknown): Parsed<number> {
  if (typeof raw === 'number') {
    return Number.isSafeInteger(raw) && raw >= 0 ? ok(raw) : bad(`expected whole seconds, got ${raw}`);
  }
  if (typeof raw !== 'string') return bad(`expected seconds or a duration like 90s, 15m, 2h30m, got ${quote(raw)}`);
  const text = raw.trim();
  if (/^\d+$/.test(text)) return parseDuration(Number(text));
  const m = DURATION.exec(text);
  if (text === '' || m === null) return bad(`expected seconds or a duration like 90s, 15m, 2h30m, got ${quote(raw)}`);
  const seconds = Number(m[1] ?? 0) * 3600 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0);
  return Number.isSafeInteger(seconds) ? ok(seconds) : bad(`duration too large, got ${quote(raw)}`);
}

/** The inverse of parseDuration for help text: 900 → `15m`, 5400 → `1h30m`, 0 → `0s`. */
export function formatDuration(seconds: number): string {
  if (seconds === 0) return '0s';
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  return `${h > 0 ? `${h}h` : ''}${m > 0 ? `${m}m` : ''}${s > 0 ? `${s}s` : ''}`;
}

/** YAML gives real booleans; the environment and `--flag=value` give text. */
export function parseBool(raw: unknown): Parsed<boolean> {
  if (typeof raw === 'boolean') return ok(raw);
  if (typeof raw === 'string') {
    const text = raw.trim().toLowerCase();
    if (text === 'true' || text === '1') return ok(true);
    if (text === 'false' || text === '0') return ok(false);
  }
  return bad(`expected true or false, got ${quote(raw)}`);
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** matches apimachinery IsDNS1123Subdomain, which the API applies to node names. */
export function dns1123SubdomainProblem(name: string): string | null {
  if (name.length === 0) return 'must not be empty';
  if (name.length > 253) return `must be at most 253 characters, got ${name.length}`;
  if (!name.split('.').every((label) => DNS_LABEL.test(label))) {
    return `${quote(name)} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)`;
  }
  return null;
}

/** kubeadm's pin format; stored lower-case so comparisons are plain string equality. */
export function parsePin(raw: string): Parsed<string> {
  const pin = canonicalPin(raw);
  return pin !== null ? ok(pin) : bad(`expected sha256:<64 hex digits>, got ${quote(raw)}`);
}

/** `host:port`, `[v6]:port`, or `off` (null). A host is required so "all interfaces" is never an accident. */
export function parseListen(raw: string): Parsed<string | null> {
  const text = raw.trim();
  if (text === 'off') return ok(null);
  const m = /^(\[[^\]]+\]|[^:\s[\]]+):(\d{1,5})$/.exec(text);
  const port = Number(m?.[2]);
  if (m === null || !(port >= 1 && port <= 65535)) {
    return bad(`expected host:port (e.g. ${DEFAULT_LISTEN}) or off, got ${quote(raw)}`);
  }
  const host = m[1] ?? '';
  if (host.startsWith('[') && net.isIPv6(host.slice(1, -1)) === false) {
    return bad(`expected an IPv6 address inside [...], got ${quote(raw)}`);
  }
  return ok(text);
}

export function ipProblem(raw: string): string | null {
  return net.isIP(raw) === 0 ? `expected an IPv4 or IPv6 address, got ${quote(raw)}` : null;
}

/** Kubernetes signer names are `<domain>/<path>`; deeper rules are the API's job. */
export function signerNameProblem(raw: string): string | null {
  return /^[a-z0-9.-]+\/[^\s/][^\s]*$/i.test(raw) ? null : `expected a signer name like example.com/signer, got ${quote(raw)}`;
}

/** `10.0.0.0/8`, `fd00::/64`: an address and a prefix length that fits its family. */
export function cidrProblem(raw: string): string | null {
  const [address = '', prefix = '', ...rest] = raw.split('/');
  const family = net.isIP(address);
  const bits = Number(prefix);
  const ok = rest.length === 0 && family !== 0 && /^\d{1,3}$/.test(prefix) && bits <= (family === 4 ? 32 : 128);
  return ok ? null : `expected a CIDR like 10.0.0.0/8 or fd00::/64, got ${quote(raw)}`;
}

const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/**
 * One label requirement, `key` (the label is set) or `key=value`: matches
 * apimachinery's label key (an optional DNS-1123 prefix and `/`, then a name
 * of at most 63 characters) and value (empty, or such a name).
 */
export function labelRequirementProblem(raw: string): string | null {
  const [key = '', value, ...rest] = raw.split('=');
  const slash = key.lastIndexOf('/');
  const prefix = slash < 0 ? null : key.slice(0, slash);
  const ok =
    rest.length === 0 &&
    LABEL_NAME.test(key.slice(slash + 1)) &&
    (prefix === null || dns1123SubdomainProblem(prefix) === null) &&
    (value === undefined || value === '' || LABEL_NAME.test(value));
  return ok ? null : `expected a label key or key=value like node-role.kubernetes.io/control-plane, got ${quote(raw)}`;
}

/** An API server URL for joining: https, a host, no path or credentials (as a bootstrap kubeconfig's server). */
export function serverUrlProblem(raw: string): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `expected https://host[:port], got ${quote(raw)}`;
  }
  // The URL is not quoted from here on: it could carry user:password.
  if (url.protocol !== 'https:') return `must be an https:// URL, got scheme ${url.protocol.replace(':', '')}`;
  if (url.username !== '' || url.password !== '') return 'must not contain credentials';
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '') return 'must be https://host[:port] without a path, query or fragment';
  return null;
}

/** Never quotes the value: it is a secret. matches cluster-bootstrap's token format. */
export function bootstrapTokenProblem(raw: string): string | null {
  return /^[a-z0-9]{6}\.[a-z0-9]{16}$/.test(raw) ? null : 'not a bootstrap token (want [a-z0-9]{6}.[a-z0-9]{16}; the value is not shown)';
}

/** A size in bytes as Kubernetes quantities write it: `4194304`, `512Ki`, `4Mi`, `1Gi`. */
export function parseByteSize(raw: string): Parsed<number> {
  const m = /^(\d{1,10})(Ki|Mi|Gi)?$/.exec(raw.trim());
  if (m === null) return bad(`expected a size in bytes like 4Mi, 512Ki or 4194304, got ${quote(raw)}`);
  return ok(Number(m[1]) * { '': 1, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[m[2] ?? '']!);
}
