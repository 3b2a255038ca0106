/**
 * YAML for operator-written files (config, kubeconfigs). Errors name the file
 * and line but never quote the source: a kubeconfig line may hold a token.
 */
import { isScalar, Lexer, LineCounter, parseDocument, visit, type Document } from 'yaml';
import { InputError } from '../errors.js';

/** Deeper than any kubeconfig or config file (about 5 levels); deep enough nesting overflows the composer's stack. */
export const MAX_NESTING = 64;
/** Aliases expanded when converting; an alias bomb multiplies far beyond the file's size. */
export const MAX_ALIASES = 100;

/**
 * How deeply the text nests, from the lexer alone (composing is recursive and
 * a few hundred thousand levels take seconds before it gives up): flow
 * brackets are counted outside quotes and block scalars, and block nesting
 * is bounded by indentation, since every block level (`key:` or `- `) moves
 * content at least one column right. Stops once past `limit`.
 */
export function nestingDepth(text: string, limit = MAX_NESTING): number {
  let block = 0;
  for (const match of text.matchAll(/^[ \t?-]+/gm)) block = Math.max(block, Math.ceil(match[0].length / 2));
  if (block > limit) return block;
  let depth = 0;
  let max = block;
  for (const lexeme of new Lexer().lex(text)) {
    if (lexeme === '[' || lexeme === '{') {
      depth++;
      if (block + depth > max) max = block + depth;
      if (max > limit) return max;
    } else if (lexeme === ']' || lexeme === '}') {
      depth = Math.max(0, depth - 1);
    }
  }
  return max;
}

/**
 * The library's error as words without content: its messages may quote the
 * source (`Unresolved alias …: <name>`, and an alias name may be a token).
 */
function describe(code: string): string {
  return PHRASES[code] ?? code.toLowerCase().replace(/_/g, ' ');
}

const PHRASES: Record<string, string> = {
  BAD_INDENT: 'bad indentation, or an unclosed [ or {',
  DUPLICATE_KEY: 'duplicate key (keys must be unique)',
  MISSING_CHAR: 'missing closing character (a quote, ] or })',
  MULTIPLE_DOCS: 'more than one document',
  TAB_AS_INDENT: 'a tab used for indentation',
  BAD_DQ_ESCAPE: 'invalid escape sequence in a double-quoted string',
  UNEXPECTED_TOKEN: 'unexpected character',
  MULTILINE_IMPLICIT_KEY: 'a key spans several lines (missing a colon or quote?)',
  TAG_RESOLVE_FAILED: 'unknown tag',
  KEY_OVER_1024_CHARS: 'a key longer than 1024 characters',
};

/**
 * The first key repeated within one mapping, as the library's uniqueKeys
 * reports it (scalars with the same value), found with a Set per mapping.
 * The library's own check compares each key with every earlier one:
 * quadratic, 131,072 keys took 158 s, and cluster-info's kubeconfig (1 MiB,
 * from the server) is parsed here too.
 */
function duplicateKey(doc: Document): { code: string; pos: [number, number] } | undefined {
  let found: { code: string; pos: [number, number] } | undefined;
  visit(doc, {
    Map(_key, map) {
      const seen = new Set<unknown>();
      for (const pair of map.items) {
        if (!isScalar(pair.key)) continue;
        if (seen.has(pair.key.value)) {
          const at = pair.key.range?.[0] ?? 0;
          found = { code: 'DUPLICATE_KEY', pos: [at, at] };
          return visit.BREAK;
        }
        seen.add(pair.key.value);
      }
      return undefined;
    },
  });
  return found;
}

/** The document as plain data; null for an empty document. */
export function parseYaml(file: string, text: string): unknown {
  if (nestingDepth(text) > MAX_NESTING)
    throw new InputError(file, '(document)', `invalid YAML: nested more than ${MAX_NESTING} levels deep`);
  const lineCounter = new LineCounter();
  // YAML 1.2 core schema: `yes`/`on` stay strings, so a typo'd boolean is reported, not guessed.
  const doc = parseDocument(text, { prettyErrors: false, lineCounter, uniqueKeys: false, schema: 'core' });
  const first = doc.errors[0] ?? duplicateKey(doc);
  if (first !== undefined) {
    const { line, col } = lineCounter.linePos(first.pos[0]);
    throw new InputError(file, `line ${line}`, `invalid YAML: ${describe(first.code)} at column ${col}`);
  }
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIASES }) as unknown;
  } catch (err) {
    const message = (err as Error).message;
    const problem = /alias count/i.test(message)
      ? `aliases expand more than ${MAX_ALIASES} times`
      : /unresolved alias/i.test(message)
        ? 'an alias names an anchor that is not defined before it'
        : 'cannot be converted to data';
    throw new InputError(file, '(document)', `invalid YAML: ${problem}`);
  }
}
