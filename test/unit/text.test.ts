// Untrusted text made safe to show: bounded, control characters escaped.
import t from 'tap';
import { bounded, escapeControl, excerpt } from '../../agent/text.js';

t.test('every control character is escaped, printable text is left alone', async (t) => {
  t.equal(escapeControl('a\nb\r\tc'), 'a\\nb\\r\\tc');
  t.equal(escapeControl('nul\u0000esc\u001b[31m del\u007f c1\u0085 ls\u2028'), 'nul\\u0000esc\\u001b[31m del\\u007f c1\\u0085 ls\\u2028');
  t.equal(escapeControl('système:nöde — 名前'), 'système:nöde — 名前');
});

t.test('bounded cuts long text, says how much, and never splits a surrogate pair', async (t) => {
  t.equal(bounded('short', 10), 'short');
  t.equal(bounded('x'.repeat(12), 10), `${'x'.repeat(10)}…(2 more characters)`);
  t.equal(bounded(`${'a'.repeat(9)}😀`, 10), `${'a'.repeat(9)}…(2 more characters)`, 'the emoji is dropped whole');
  t.equal(excerpt(`${'\n'.repeat(300)}`).startsWith('\\n'.repeat(253)), true, 'excerpt bounds, then escapes');
});
