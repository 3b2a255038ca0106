// `kubeboot ca-rotation` refuses bad input in one line before it talks to any cluster.
import t from 'tap';
import { runCaRotation } from '../../../agent/cli/ca-rotation.js';
import { InputError } from '../../../agent/errors.js';

t.test('an unknown action or a bad pin is one line naming the field, before any kubeconfig is read', async (t) => {
  const cases: { argv: string[]; given: Record<string, string>; match: RegExp }[] = [
    { argv: [], given: {}, match: /^command line: arguments: usage: kubeboot ca-rotation publish/ },
    { argv: ['rotate'], given: {}, match: /^command line: arguments: usage:/ },
    { argv: ['publish', 'b.pem'], given: { 'signer-ca-hash': 'sha256:xyz' }, match: /^command line: --signer-ca-hash: expected sha256:/ },
  ];
  for (const c of cases) {
    const err = await runCaRotation(c.argv, { ...c.given, kubeconfig: '/nonexistent/admin.conf' }, 'text', {}).catch((e: unknown) => e);
    t.type(err, InputError, c.argv.join(' ') || '(no action)');
    t.match((err as Error).message, c.match);
    t.notMatch((err as Error).message, /\n/);
  }
});
