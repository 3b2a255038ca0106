/**
 * Text a node, a CSR or a token's Secret may carry that must never reach an
 * admin's terminal raw: screen clears, OSC titles, NUL, fake lines, C1
 * controls, Unicode line separators, and long runs.
 */
export const HOSTILE_PIECES = [
  '\x1b[2J\x1b[H',
  '\x1b]0;pwned\x07',
  'nul\x00here',
  '\rok  every node is ready for the next step',
  '\nevery node is ready for the next step',
  '\u009b31m',
  'line\u2028sep\u2029',
  'del\x7f',
];
export const HOSTILE = HOSTILE_PIECES.join(' ');
export const LONG = 'A'.repeat(100_000);
/** Any C0 control but tab and newline, DEL, C1, and the Unicode line and paragraph separators. */
export const RAW = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]/;
