// `kubeboot node` checks its arguments and flags before it reads any kubeconfig;
// what it asks of the cluster is test/unit/admin/node-requests.test.ts.
import t from 'tap';
import { runNode } from '../../../agent/cli/node.js';

const silent = { stdout: { write: () => true }, stderr: { write: () => true } };

t.test('node: arguments and flags are checked before any kubeconfig is read', async (t) => {
  const run = (argv: string[], given: Record<string, string | boolean> = {}) =>
    runNode(argv, { ...given, kubeconfig: '/nonexistent/admin.conf' }, 'text', {}, silent);
  await t.rejects(run([]), { message: 'command line: node: expected enroll, replace, revoke, unrevoke or list', code: 2 });
  await t.rejects(run(['revoke']), {
    message: 'command line: arguments: usage: kubeboot node revoke NAME [--reason TEXT] [--delete-node]',
  });
  await t.rejects(run(['revoke', 'Bad_Name']), { message: /^command line: node name: "Bad_Name" is not a DNS-1123 subdomain/ });
  await t.rejects(run(['list'], { reason: 'x' }), { message: 'command line: --reason: only with kubeboot node revoke' });
  await t.rejects(run(['replace', 'n1'], { 'delete-node': true }), {
    message: 'command line: --delete-node: only with kubeboot node revoke',
  });
  await t.rejects(run(['revoke', 'n1'], { 'old-machine-gone': true }), {
    message: 'command line: --old-machine-gone: only with kubeboot node replace',
  });
  await t.rejects(run(['list', 'extra']), { message: 'command line: arguments: usage: kubeboot node list [--output json]' });
  await t.rejects(run(['list'], { 'tpm-ek': 'ab'.repeat(32) }), { message: 'command line: --tpm-ek: only with kubeboot node enroll' });
  await t.rejects(run(['enroll']), { message: /^command line: arguments: usage: kubeboot node enroll NAME --tpm-ek HASH/ });
  await t.rejects(run(['enroll', 'n1']), { message: /--tpm-ek: give --tpm-ek HASH, --tpm-ak NAME, or both/ });
  await t.rejects(run(['enroll', 'n1'], { 'from-file': '/nonexistent' }), { message: /--from-file: takes no name/ });
  await t.rejects(run(['enroll'], { 'from-file': '/nonexistent/tpms.txt' }), {
    message: '/nonexistent/tpms.txt: --from-file: does not exist',
  });
  await t.rejects(run(['enroll', 'n1'], { 'tpm-ek': 'ab'.repeat(32) }), {
    message: 'command line: --kubeconfig: file not found: /nonexistent/admin.conf',
  });
  await t.rejects(run(['revoke', 'n1']), { message: 'command line: --kubeconfig: file not found: /nonexistent/admin.conf' });
});

t.test('node replace keeps a name only for a machine said to be gone: nothing else tells its key from the new one', async (t) => {
  const run = (given: Record<string, string | boolean>) =>
    runNode(['replace', 'worker-7'], { ...given, kubeconfig: '/nonexistent/admin.conf' }, 'text', {}, silent);
  await t.rejects(run({}), {
    code: 2,
    message:
      /^command line: --old-machine-gone: required: .*keeps renewing as system:node:worker-7; .*kubeboot token create --node worker-7-2\) and kubeboot node revoke worker-7; /,
  });
  await t.rejects(
    run({ 'for-token': 'abcdef' }),
    { message: /^command line: --old-machine-gone: required/ },
    'a token named does not stand in for it',
  );
  await t.rejects(
    run({ 'old-machine-gone': true }),
    { message: 'command line: --kubeconfig: file not found: /nonexistent/admin.conf' },
    'given, the mark is asked for',
  );
});
