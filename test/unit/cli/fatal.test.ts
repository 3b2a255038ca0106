// A failed command's last words are one line, whatever the error carries.
import t from 'tap';
import { fatalText } from '../../../agent/cli/fatal.js';
import { ApiError } from '../../../agent/errors.js';

t.test("a server's message with a newline, a journal priority and ESC stays on one escaped line", async (t) => {
  const err = new ApiError({
    method: 'GET',
    path: '/api/v1/namespaces/kube-public/configmaps/cluster-info',
    status: 403,
    reason: 'Forbidden',
    message: 'nope\n<0>kubeboot: FORGED emergency entry\u001b[31m',
  });
  const text = fatalText(err, false);
  t.equal(text.split('\n').length, 2, 'one line and its newline');
  t.notMatch(text.slice(0, -1), /[\u0000-\u001f\u007f-\u009f]/, 'no raw control character');
  t.match(text, 'nope\\n<0>kubeboot: FORGED emergency entry\\u001b[31m', 'shown escaped');
});

t.test('bounded, and secrets scrubbed before the cut', async (t) => {
  const text = fatalText(new Error(`Bearer abc.def ${'x'.repeat(10_000)}`), false);
  t.ok(text.length < 4200, `${text.length} characters`);
  t.notMatch(text, 'abc.def');
});

t.test('the stack of an unexpected error only when debugging, escaped too', async (t) => {
  const err = new TypeError('boom');
  t.equal(fatalText(err, false), 'kubeboot: boom\n');
  const debug = fatalText(err, true).split('\n');
  t.equal(debug.length, 3, 'message line, one stack line, end');
  t.match(debug[1], /^TypeError: boom\\n {4}at /);
});
