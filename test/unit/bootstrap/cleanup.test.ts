// Deleting the bootstrap token: a link is followed only into places kubeboot
// trusts, and the token file goes before the kubeconfig that names it.
import { chmod, lstat, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { removeBootstrapToken } from '../../../agent/bootstrap/cleanup.js';
import type { BootstrapKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { createLogger } from '../../../agent/log.js';
import { fileStore } from '../../../agent/store/store.js';
import { memoryStore } from '../../support/memory-store.js';
import { Writable } from 'node:stream';

function capture(): { logger: ReturnType<typeof createLogger>; lines: string[] } {
  const lines: string[] = [];
  const logger = createLogger({
    level: 'info',
    format: 'json',
    stream: new Writable({ write: (c, _e, done) => (lines.push(String(c)), done()) }),
  });
  return { logger, lines };
}
const bootstrapAt = (file: string, tokenFile: string | null = null) =>
  ({ file, tokenFile, auth: { kind: 'client-certificate', certPem: '', keyPem: '' } }) as unknown as BootstrapKubeconfig;
const exists = (p: string) =>
  lstat(p).then(
    () => true,
    () => false,
  );

t.test('a link into a directory others can write: only the link goes, and the log says why', async (t) => {
  const dir = t.testdir({ etc: {}, shared: {} });
  const shared = join(dir, 'shared');
  await chmod(shared, 0o777);
  await writeFile(join(shared, 'victim'), "not kubeboot's");
  await symlink(join(shared, 'victim'), join(dir, 'etc', 'bootstrap-kubelet.conf'));
  const { logger, lines } = capture();
  await removeBootstrapToken(bootstrapAt(join(dir, 'etc', 'bootstrap-kubelet.conf')), [], fileStore(), logger);
  t.notOk(await exists(join(dir, 'etc', 'bootstrap-kubelet.conf')), 'the link is removed');
  t.ok(await exists(join(shared, 'victim')), 'the file behind it is left alone');
  t.match(lines.join(''), /will not delete .*writable by group or others/);
});

t.test('a link planted in a directory others can write is never followed, whatever it names', async (t) => {
  // As root, any root-owned file passes the target checks: who could plant the link decides.
  const dir = t.testdir({ drop: {}, secrets: { 'important.conf': 'root only' } });
  await chmod(join(dir, 'drop'), 0o1777);
  await chmod(join(dir, 'secrets'), 0o700);
  const tokenFile = join(dir, 'drop', 'token');
  await symlink(join(dir, 'secrets', 'important.conf'), tokenFile);
  const { logger, lines } = capture();
  await removeBootstrapToken(bootstrapAt(join(dir, 'bootstrap-kubelet.conf'), tokenFile), [], fileStore(), logger);
  t.ok(await exists(join(dir, 'secrets', 'important.conf')), 'the file the link names is left alone');
  t.notOk(await exists(tokenFile), 'the link is removed');
  t.match(lines.join(''), /will not delete \(the directory of .*drop\/token is writable by group or others/);
});

t.test('a link into a directory kubeboot trusts takes its target along', async (t) => {
  const dir = t.testdir({ etc: {}, secrets: { 'bootstrap.conf': 'token' } });
  await chmod(join(dir, 'secrets'), 0o700);
  await symlink(join(dir, 'secrets', 'bootstrap.conf'), join(dir, 'etc', 'bootstrap-kubelet.conf'));
  const { logger } = capture();
  await removeBootstrapToken(bootstrapAt(join(dir, 'etc', 'bootstrap-kubelet.conf')), [], fileStore(), logger);
  t.notOk(await exists(join(dir, 'secrets', 'bootstrap.conf')), 'the token file is deleted');
  t.notOk(await exists(join(dir, 'etc', 'bootstrap-kubelet.conf')), 'and the link');
});

t.test('the token file goes before the kubeconfig: a failure leaves the kubeconfig naming it', async (t) => {
  const dir = t.testdir({ etc: { 'bootstrap-kubelet.conf': 'kubeconfig' } });
  const { logger } = capture();
  // A token "file" that is a non-empty directory cannot be unlinked: the kubeconfig must survive to name it next time.
  await mkdir(join(dir, 'tok2', 'token'), { recursive: true });
  await writeFile(join(dir, 'tok2', 'token', 'inside'), 'x');
  await t.rejects(
    removeBootstrapToken(bootstrapAt(join(dir, 'etc', 'bootstrap-kubelet.conf'), join(dir, 'tok2', 'token')), [], fileStore(), logger),
    /cannot delete .*token/,
  );
  t.ok(await exists(join(dir, 'etc', 'bootstrap-kubelet.conf')), 'the kubeconfig that names the token file is still there');
});

t.test('the token goes through the Store it is given: the token file, then the kubeconfig', async (t) => {
  const store = memoryStore({
    '/etc/kubernetes/bootstrap-kubelet.conf': 'kubeconfig',
    '/etc/kubernetes/bootstrap-token': 'abcdef.0123456789abcdef',
  });
  const { logger, lines } = capture();
  await removeBootstrapToken(bootstrapAt('/etc/kubernetes/bootstrap-kubelet.conf', '/etc/kubernetes/bootstrap-token'), [], store, logger);
  t.same(store.removes, ['/etc/kubernetes/bootstrap-token', '/etc/kubernetes/bootstrap-kubelet.conf']);
  t.same([...store.files.keys()], []);
  t.match(lines.join(''), /deleted the bootstrap kubeconfig \/etc\/kubernetes\/bootstrap-kubelet\.conf/);
});
