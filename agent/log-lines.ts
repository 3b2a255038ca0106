/**
 * Log lines without a logging library: the formats (journal, JSON, text),
 * the secret scrubbing and the one-record-one-line rule, as pure functions,
 * and `createLineLogger`, which writes them straight to a stream. The
 * resting `kubeboot run` logs through it (winston alone would hold 6 MiB of
 * its 21 MiB budget), and so do `kubeboot approver` (a line per decision,
 * without winston's stream pipeline per line) and each worker of `kubeboot
 * run` (winston was ~25 ms of every worker's start-up); every other command logs through
 * winston (log.ts) with these same functions, so the lines are the same
 * (JSON is winston's own format, which `jsonLine` writes alike;
 * test/unit/log-lines-agree.test.ts compares the two).
 */
import { fstatSync } from 'node:fs';
import { scrub } from './redact.js';
import { bounded, escapeControl, MAX_LOG_STRING } from './text.js';
import { systemClock } from './time/clock.js';

export { MAX_LOG_STRING, scrub };

export type LogFormat = 'json' | 'text' | 'journal' | 'auto';
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

/** What the modules that log need of a logger; winston's Logger is one too. */
export interface Log {
  error(message: string, meta?: Record<string, unknown>): unknown;
  warn(message: string, meta?: Record<string, unknown>): unknown;
  info(message: string, meta?: Record<string, unknown>): unknown;
  debug(message: string, meta?: Record<string, unknown>): unknown;
}

/** A Log that adds `fields` to every record (winston's `child`, for any Log). */
export function withFields(log: Log, fields: Record<string, unknown>): Log {
  return {
    error: (message, meta) => log.error(message, { ...fields, ...meta }),
    warn: (message, meta) => log.warn(message, { ...fields, ...meta }),
    info: (message, meta) => log.info(message, { ...fields, ...meta }),
    debug: (message, meta) => log.debug(message, { ...fields, ...meta }),
  };
}

const SECRET_FIELD = /^(token|password|authorization|key|client-key-data|token-secret|bearer)$/i;
/** Nested metadata (hook argv, error details) is scrubbed too, to a sane depth. */
export function scrubValue(key: string, value: unknown, depth = 0): unknown {
  if (SECRET_FIELD.test(key) && value !== undefined && value !== null && value !== '') return '[redacted]';
  // Scrubbed whole first, so a cut never leaves half a secret unrecognised.
  if (typeof value === 'string') return bounded(scrub(value), MAX_LOG_STRING);
  if (depth >= 4 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item) => scrubValue('', item, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubValue(k, v, depth + 1)]));
}

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

/** The format a logger writing to `stream` uses. */
export function formatFor(
  stream: NodeJS.WritableStream,
  requested: LogFormat | undefined,
  env: NodeJS.ProcessEnv,
): Exclude<LogFormat, 'auto'> {
  const tty = (stream as NodeJS.WriteStream).isTTY === true;
  const journal = stream === process.stderr && isJournalStream(env, 2);
  return resolveLogFormat(requested, { journal, tty });
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

/** One record: level, message, metadata, and (outside the journal) its time. */
export type LogRecord = { level: string; message: unknown; [key: string]: unknown };

/**
 * One journal line: `<N>message key=value ...`. No timestamp or level word
 * (journald records both); newlines escaped, since journald would start a new
 * entry, at the default priority, at each one; every other control character too.
 */
export function journalLine(info: LogRecord): string {
  const { level, message, timestamp: _timestamp, ...rest } = info;
  const fields = Object.entries(rest)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => field(k, v));
  return `<${PRIORITY[level] ?? 6}>${escapeControl([String(message), ...fields].join(' '))}`;
}

/** A terminal line: `<time> <level> <message> {metadata}`. */
export function textLine(info: LogRecord): string {
  const { level, message, timestamp, ...rest } = info;
  const extra = Object.keys(rest).length > 0 ? ' ' + JSON.stringify(rest) : '';
  return `${String(timestamp)} ${level} ${String(message)}${extra}`;
}

/**
 * The finished line, whatever its format, with every control character
 * escaped (journalLine does it itself): one record stays one line with one priority (journald starts a new
 * entry at NUL or a newline, and reads a `<N>` after it as a priority), and
 * no ESC sequence reaches a terminal. In JSON lines this only touches DEL,
 * C1 and U+2028/9 (JSON.stringify already escaped the rest), as valid escapes.
 */
export const oneLine = escapeControl;

/** Every field of a record scrubbed (see scrubValue). */
export function redactRecord<T extends Record<string, unknown>>(info: T): T {
  for (const key of Object.keys(info)) (info as Record<string, unknown>)[key] = scrubValue(key, info[key]);
  return info;
}

/**
 * A JSON line as winston's json format writes it (logform on safe-stable-stringify):
 * every object's keys sorted, a bigint as its decimal string, a cycle as "[Circular]".
 */
function jsonLine(value: unknown, seen: object[] = []): string | undefined {
  if (typeof value === 'bigint') return JSON.stringify(value.toString());
  if (value !== null && typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function')
    return jsonLine((value as { toJSON(): unknown }).toJSON(), seen);
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (seen.includes(value)) return '"[Circular]"';
  const inner = [...seen, value];
  if (Array.isArray(value)) return `[${value.map((item) => jsonLine(item, inner) ?? 'null').join(',')}]`;
  const fields = Object.keys(value)
    .sort()
    .flatMap((key) => {
      const text = jsonLine((value as Record<string, unknown>)[key], inner);
      return text === undefined ? [] : [`${JSON.stringify(key)}:${text}`];
    });
  return `{${fields.join(',')}}`;
}

const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

/** A logger with no library under it: the same lines as log.ts's, written synchronously to `stream`. */
export function createLineLogger(
  options: { level?: string; format?: LogFormat; stream?: NodeJS.WritableStream; env?: NodeJS.ProcessEnv; now?: () => Date } = {},
): Log {
  const stream = options.stream ?? process.stderr;
  const format = formatFor(stream, options.format, options.env ?? process.env);
  const threshold = RANK[(options.level ?? 'info') as LogLevel] ?? RANK.info;
  const now = options.now ?? (() => systemClock.now());
  const write =
    (level: LogLevel) =>
    (message: string, meta: Record<string, unknown> = {}): void => {
      if (RANK[level] > threshold) return;
      const record = redactRecord({ ...meta, level, message } as LogRecord);
      if (format === 'journal') {
        stream.write(`${journalLine(record)}\n`);
        return;
      }
      record.timestamp = now().toISOString();
      stream.write(`${oneLine(format === 'json' ? (jsonLine(record) as string) : textLine(record))}\n`);
    };
  return { error: write('error'), warn: write('warn'), info: write('info'), debug: write('debug') };
}
