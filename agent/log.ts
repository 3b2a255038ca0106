/**
 * Logging: one-line messages with a syslog priority prefix when stderr is the
 * systemd journal, JSON lines for other non-terminals (log shippers),
 * readable lines on a terminal. Secrets never reach a transport: fields with
 * secret-looking names are replaced, and token or PEM private-key text inside
 * any string is scrubbed.
 */
import { fstatSync } from 'node:fs';
import winston from 'winston';
import { scrub } from './redact.js';
import { bounded, escapeControl, MAX_LOG_STRING } from './text.js';

export { MAX_LOG_STRING, scrub };

const SECRET_FIELD = /^(token|password|authorization|key|client-key-data|token-secret|bearer)$/i;
/** Nested metadata (hook argv, error details) is scrubbed too, to a sane depth. */
function scrubValue(key: string, value: unknown, depth = 0): unknown {
  if (SECRET_FIELD.test(key) && value !== undefined && value !== null && value !== '') return '[redacted]';
  // Scrubbed whole first, so a cut never leaves half a secret unrecognised.
  if (typeof value === 'string') return bounded(scrub(value), MAX_LOG_STRING);
  if (depth >= 4 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item) => scrubValue('', item, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubValue(k, v, depth + 1)]));
}

const redact = winston.format((info) => {
  for (const key of Object.keys(info)) {
    (info as Record<string, unknown>)[key] = scrubValue(key, info[key]);
  }
  return info;
});

const LINE = Symbol.for('message');
/**
 * The finished line, whatever its format, with every control character
 * escaped (journalLine does it itself): one record stays one line with one priority (journald starts a new
 * entry at NUL or a newline, and reads a `<N>` after it as a priority), and
 * no ESC sequence reaches a terminal. In JSON lines this only touches DEL,
 * C1 and U+2028/9 (JSON.stringify already escaped the rest), as valid escapes.
 */
const oneLine = winston.format((info) => {
  const line = (info as Record<symbol, unknown>)[LINE];
  if (typeof line === 'string') (info as Record<symbol, unknown>)[LINE] = escapeControl(line);
  return info;
});

export type LogFormat = 'json' | 'text' | 'journal' | 'auto';
export type Logger = winston.Logger;

/**
 * True when `fd` is the journal stream systemd connected: it sets
 * JOURNAL_STREAM=<device>:<inode> of the socket it gives the service as
 * stdout/stderr (systemd.exec(5)). Comparing with fstat() tells the journal
 * apart from a redirection the service made itself, which inherits the
 * variable but not the socket.
 */
export function isJournalStream(
  env: NodeJS.ProcessEnv,
  fd = 2,
  stat: (fd: number) => { dev: bigint; ino: bigint } = (n) => fstatSync(n, { bigint: true }),
): boolean {
  const match = /^(\d+):(\d+)$/.exec(env.JOURNAL_STREAM ?? '');
  if (!match) return false;
  try {
    const s = stat(fd);
    return s.dev === BigInt(match[1]!) && s.ino === BigInt(match[2]!);
  } catch {
    return false;
  }
}

/** What `auto` means: journal when stderr is the journal, text on a terminal, JSON otherwise. */
export function resolveLogFormat(requested: LogFormat | undefined, where: { journal: boolean; tty: boolean }): Exclude<LogFormat, 'auto'> {
  if (requested !== undefined && requested !== 'auto') return requested;
  if (where.journal) return 'journal';
  return where.tty ? 'text' : 'json';
}

/** sd-daemon(3) priority prefixes; journald reads them (SyslogLevelPrefix=yes is the default). */
const PRIORITY: Record<string, number> = { error: 3, warn: 4, info: 6, debug: 7 };

/**
 * key=value: a string bare when it reads back as one word, JSON-quoted
 * otherwise; numbers, booleans, arrays and objects as compact JSON.
 */
function field(key: string, value: unknown): string {
  if (typeof value !== 'string') return `${key}=${JSON.stringify(value) ?? String(value)}`;
  return `${key}=${/^[^\s"=\\]+$/.test(value) ? value : JSON.stringify(value)}`;
}

/**
 * One journal line: `<N>message key=value ...`. No timestamp or level word
 * (journald records both); newlines escaped, since journald would start a new
 * entry, at the default priority, at each one; every other control character too.
 */
export function journalLine(info: { level: string; message: unknown; [key: string]: unknown }): string {
  const { level, message, timestamp: _timestamp, ...rest } = info;
  const fields = Object.entries(rest)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => field(k, v));
  return `<${PRIORITY[level] ?? 6}>${escapeControl([String(message), ...fields].join(' '))}`;
}

export function createLogger(
  options: { level?: string; format?: LogFormat; stream?: NodeJS.WritableStream; env?: NodeJS.ProcessEnv } = {},
): Logger {
  const stream = options.stream ?? process.stderr;
  const tty = (stream as NodeJS.WriteStream).isTTY === true;
  const journal = stream === process.stderr && isJournalStream(options.env ?? process.env, 2);
  const format = resolveLogFormat(options.format, { journal, tty });
  const text = winston.format.printf((info) => {
    const { level, message, timestamp, ...rest } = info;
    const extra = Object.keys(rest).length > 0 ? ' ' + JSON.stringify(rest) : '';
    return `${String(timestamp)} ${level} ${String(message)}${extra}`;
  });
  const last = format === 'json' ? winston.format.json() : format === 'journal' ? winston.format.printf((info) => journalLine(info)) : text;
  return winston.createLogger({
    level: options.level ?? 'info',
    format:
      format === 'journal'
        ? winston.format.combine(redact(), last)
        : winston.format.combine(redact(), winston.format.timestamp(), last, oneLine()),
    transports: [new winston.transports.Stream({ stream })],
  });
}

/** A logger that drops everything; for tests and pure callers. */
export function silentLogger(): Logger {
  return winston.createLogger({ silent: true, transports: [new winston.transports.Console({ silent: true })] });
}
