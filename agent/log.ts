/**
 * Logging: one-line messages with a syslog priority prefix when stderr is the
 * systemd journal, JSON lines for other non-terminals (log shippers),
 * readable lines on a terminal. Secrets never reach a transport: fields with
 * secret-looking names are replaced, and token or PEM private-key text inside
 * any string is scrubbed. The lines themselves are log-lines.ts's; this is
 * winston under them, for every command but `kubeboot run` (its daemon and
 * workers) and the approver (a line per decision in a CSR storm).
 */
import winston from 'winston';
import {
  formatFor,
  journalLine,
  oneLine as escapeLine,
  redactRecord,
  textLine,
  type Log,
  type LogFormat,
  type LogRecord,
} from './log-lines.js';

export { isJournalStream, journalLine, MAX_LOG_STRING, resolveLogFormat, scrub, type Log, type LogFormat } from './log-lines.js';

/** What the modules that log take: four methods, which winston's logger and log-lines.ts's both have. */
export type Logger = Log;

const redact = winston.format((info) => redactRecord(info));

const LINE = Symbol.for('message');
/** The finished line with every control character escaped (log-lines.ts `oneLine`). */
const oneLine = winston.format((info) => {
  const line = (info as Record<symbol, unknown>)[LINE];
  if (typeof line === 'string') (info as Record<symbol, unknown>)[LINE] = escapeLine(line);
  return info;
});

export function createLogger(
  options: { level?: string; format?: LogFormat; stream?: NodeJS.WritableStream; env?: NodeJS.ProcessEnv } = {},
): winston.Logger {
  const stream = options.stream ?? process.stderr;
  const format = formatFor(stream, options.format, options.env ?? process.env);
  const last =
    format === 'json'
      ? winston.format.json()
      : winston.format.printf((info) => (format === 'journal' ? journalLine : textLine)(info as LogRecord));
  const logger = winston.createLogger({
    level: options.level ?? 'info',
    format:
      format === 'journal'
        ? winston.format.combine(redact(), last)
        : winston.format.combine(redact(), winston.format.timestamp(), last, oneLine()),
    transports: [new winston.transports.Stream({ stream })],
  });
  // winston's own `info(message, meta)` takes a message holding %s, %d, %j …
  // for a printf format and then drops every field of meta (its splat path;
  // a CSR's requester chooses names that reach messages), and appends a
  // `message` field to the message. The record goes in whole instead, built
  // as log-lines.ts builds it: the fields, then level and message.
  for (const level of LEVELS) {
    logger[level] = ((message: string, meta?: Record<string, unknown>) =>
      logger.log({ ...meta, level, message })) as winston.LeveledLogMethod;
  }
  return logger;
}

const LEVELS = ['error', 'warn', 'info', 'debug'] as const;

/** A logger that drops everything; for tests and pure callers. */
export function silentLogger(): winston.Logger {
  return winston.createLogger({ silent: true, transports: [new winston.transports.Console({ silent: true })] });
}
