/**
 * Logging: JSON lines for journald, readable lines on a terminal. Secrets
 * never reach a transport: fields with secret-looking names are replaced,
 * and token or PEM private-key text inside any string is scrubbed.
 */
import winston from 'winston';
import { scrub } from './redact.js';

export { scrub };

const SECRET_FIELD = /^(token|password|authorization|key|client-key-data|token-secret|bearer)$/i;
/** Nested metadata (hook argv, error details) is scrubbed too, to a sane depth. */
function scrubValue(key: string, value: unknown, depth = 0): unknown {
  if (SECRET_FIELD.test(key) && value !== undefined && value !== null && value !== '') return '[redacted]';
  if (typeof value === 'string') return scrub(value);
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

export type LogFormat = 'json' | 'text' | 'auto';
export type Logger = winston.Logger;

export function createLogger(options: { level?: string; format?: LogFormat; stream?: NodeJS.WritableStream } = {}): Logger {
  const stream = options.stream ?? process.stderr;
  const tty = (stream as NodeJS.WriteStream).isTTY === true;
  const format = options.format === 'auto' || options.format === undefined ? (tty ? 'text' : 'json') : options.format;
  const text = winston.format.printf((info) => {
    const { level, message, timestamp, ...rest } = info;
    const extra = Object.keys(rest).length > 0 ? ' ' + JSON.stringify(rest) : '';
    return `${String(timestamp)} ${level} ${String(message)}${extra}`;
  });
  return winston.createLogger({
    level: options.level ?? 'info',
    format: winston.format.combine(
      redact(),
      winston.format.timestamp(),
      format === 'json' ? winston.format.json() : text,
    ),
    transports: [new winston.transports.Stream({ stream })],
  });
}

/** A logger that drops everything; for tests and pure callers. */
export function silentLogger(): Logger {
  return winston.createLogger({ silent: true, transports: [new winston.transports.Console({ silent: true })] });
}
