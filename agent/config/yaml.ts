/**
 * YAML for operator-written files (config, kubeconfigs). Errors name the file
 * and line but never quote the source: a kubeconfig line may hold a token.
 */
import { LineCounter, parseDocument } from 'yaml';
import { InputError } from '../errors.js';

/** The document as plain data; null for an empty document. */
export function parseYaml(file: string, text: string): unknown {
  const lineCounter = new LineCounter();
  // YAML 1.2 core schema: `yes`/`on` stay strings, so a typo'd boolean is reported, not guessed.
  const doc = parseDocument(text, { prettyErrors: false, lineCounter, uniqueKeys: true, schema: 'core' });
  const first = doc.errors[0];
  if (first !== undefined) {
    const { line } = lineCounter.linePos(first.pos[0]);
    throw new InputError(file, `line ${line}`, `invalid YAML: ${first.message}`);
  }
  try {
    return doc.toJS({ maxAliasCount: 100 }) as unknown;
  } catch (err) {
    // Alias bombs and similar; the library's message does not echo content.
    throw new InputError(file, '(document)', `invalid YAML: ${(err as Error).message}`);
  }
}

export function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** "a list", "a string", ... for `expected X, got Y` messages. */
export function kindOf(value: unknown): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return `a ${typeof value}`;
}
