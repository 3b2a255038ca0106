/**
 * Turns one raw setting (a YAML value, an environment string, or a flag
 * value) into its typed value, or an InputError naming where it came from.
 */
import path from 'node:path';
import { InputError } from '../errors.js';
import type { OptionSpec } from './options.js';
import { bad, ok, parseBool, parseDuration, parseListen, parsePin, quote } from './values.js';
import type { Parsed } from './values.js';
import { kindOf } from './shape.js';

/** Where a value came from: the file (or `environment` / `command line`), the field, and the base for relative paths. */
export interface Origin {
  source: string;
  field: string;
  baseDir: string;
}

export interface Setting {
  spec: OptionSpec;
  raw: unknown;
  origin: Origin;
}

export function coerce(setting: Setting): unknown {
  const { spec, raw, origin } = setting;
  const fail = (field: string, problem: string): never => {
    throw new InputError(origin.source, field, problem);
  };
  if (isListType(spec)) {
    if (!Array.isArray(raw)) return fail(origin.field, `expected a list, got ${kindOf(raw)}`);
    return raw.map((item: unknown, i) => {
      // YAML items get their own index; a flag or variable names itself.
      const field = origin.source === 'command line' || origin.source === 'environment' ? origin.field : `${origin.field}[${i}]`;
      const parsed = coerceItem(spec, item, origin.baseDir);
      return parsed.ok ? parsed.value : fail(field, parsed.problem);
    });
  }
  const parsed = coerceItem(spec, raw, origin.baseDir);
  return parsed.ok ? parsed.value : fail(origin.field, parsed.problem);
}

function isListType(spec: OptionSpec): boolean {
  return spec.type === 'strings' || spec.type === 'paths' || spec.type === 'pins' || spec.type === 'hooks';
}

function coerceItem(spec: OptionSpec, raw: unknown, baseDir: string): Parsed<unknown> {
  switch (spec.type) {
    case 'bool':
      return parseBool(raw);
    case 'duration':
      return coerceDuration(spec, raw);
    case 'listen':
      return raw === null ? ok(null) : typeof raw === 'string' ? parseListen(raw) : bad(`expected host:port or off, got ${quote(raw)}`);
    case 'pins':
      return typeof raw === 'string' ? parsePin(raw) : bad(`expected sha256:<64 hex digits>, got ${quote(raw)}`);
    case 'hooks':
      return coerceHook(raw);
    case 'enum': {
      const values = spec.values ?? [];
      return typeof raw === 'string' && values.includes(raw) ? ok(raw) : bad(`expected one of ${values.join(', ')}, got ${quote(raw)}`);
    }
    case 'path':
    case 'paths':
      return nonEmptyString(raw, (text) => ok(path.resolve(baseDir, text)));
    case 'string':
    case 'strings':
      return nonEmptyString(raw, (text) => {
        const problem = spec.check?.(text) ?? null;
        return problem === null ? ok(text) : bad(problem);
      });
  }
}

function nonEmptyString(raw: unknown, then: (text: string) => Parsed<unknown>): Parsed<unknown> {
  if (typeof raw !== 'string') return bad(`expected a string, got ${quote(raw)}`);
  const text = raw.trim();
  return text === '' ? bad('must not be empty') : then(text);
}

function coerceDuration(spec: OptionSpec, raw: unknown): Parsed<number | null> {
  if (raw === null && spec.nullable === true) return ok(null);
  const parsed = parseDuration(raw);
  if (!parsed.ok || spec.min === undefined || parsed.value >= spec.min.seconds) return parsed;
  const why = spec.min.why !== undefined ? ` (${spec.min.why})` : '';
  const shown = typeof raw === 'string' ? raw.trim() : String(raw);
  return bad(`must be at least ${spec.min.seconds}${why}, got ${shown}`);
}

function coerceHook(raw: unknown): Parsed<string[]> {
  const isArgv = Array.isArray(raw) && raw.length > 0 && raw.every((a) => typeof a === 'string' && a !== '');
  return isArgv
    ? ok(raw as string[])
    : bad(`expected an argv list like [systemctl, restart, kubelet] (run without a shell), got ${quote(raw)}`);
}
