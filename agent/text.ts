/**
 * Text that came from outside (a CSR's name or subject, a hook's output, an
 * API server's message) made safe to show: bounded in length, and with every
 * control character escaped, so a log line stays one line with one priority
 * (journald splits at NUL and newline and reads a `<N>` after them as a new
 * priority) and a terminal is not steered by ESC sequences. Linear time.
 */

// C0 controls, DEL, C1 controls, and the two Unicode line separators JSON
// parsers and some terminals break lines at.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;
const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * Longest string a log field (or an error line) keeps. A CSR's name may be
 * 40,000 characters and a hook may print megabytes; a log line is for a person
 * and the journal's line limit (48 KiB by default) would split it anyway.
 */
export const MAX_LOG_STRING = 4096;

export function escapeControl(text: string): string {
  return text.replace(CONTROL, (c) => NAMED[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * At most `max` characters of `text`, marked when cut so nobody mistakes a
 * prefix for the whole; never splits a surrogate pair.
 */
export function bounded(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--;
  return `${text.slice(0, end)}…(${text.length - end} more characters)`;
}

/** An untrusted name for a message: bounded, then escaped. 253 is the longest DNS subdomain, the longest sane object name. */
export function excerpt(text: string, max = 253): string {
  return escapeControl(bounded(text, max));
}

/**
 * What a command prints: each line escaped, so the only line breaks are the
 * ones between lines. Commands show the cluster's words (a Node's name and
 * the annotation the node writes, a token Secret's description, an API
 * server's message); a node must not steer the admin's terminal or forge a line.
 */
export function terminalLines(lines: readonly string[]): string {
  return lines.map((line) => `${escapeControl(line)}\n`).join('');
}

/**
 * `value` as indented JSON, safe on a terminal. JSON.stringify escapes C0
 * controls but leaves DEL, C1 and U+2028/9 raw; its lines break only between
 * tokens, so escaping each line writes those as \uXXXX: still valid JSON, and
 * the same value.
 */
export function terminalJson(value: unknown): string {
  return terminalLines(JSON.stringify(value, null, 2).split('\n'));
}

/**
 * Rows of cells as aligned columns (two spaces apart), one line each: every
 * cell is bounded and escaped (excerpt) before the columns are measured, so
 * the cluster's text can neither forge a line nor skew the others. Pass the
 * lines to terminalLines.
 */
export function columns(rows: readonly (readonly string[])[]): string[] {
  const shown = rows.map((r) => r.map((cell) => excerpt(cell)));
  const widths = (shown[0] ?? []).map((_, i) => Math.max(...shown.map((r) => (r[i] ?? '').length)));
  return shown.map((r) =>
    r
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd(),
  );
}

/** Where a command writes; `process` by default, a test passes its own. */
export interface Streams {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}
