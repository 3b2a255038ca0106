import t from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { chmod, readdir, stat, symlink, unlink, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { KubebootError } from '../../../agent/errors.js';
import { clearPendingKey, loadPendingKey, pendingKeyPath, savePendingKey } from '../../../agent/store/pending-key.js';

const keyPem = (): string =>
  generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const modeOf = async (p: string) => (await stat(p)).mode & 0o777;

t.test('a saved pending key survives a restart, readable only by root', async (t) => {
  const stateDir = path.join(t.testdir(), 'var', 'lib', 'kubeboot');
  const key = keyPem();
  await savePendingKey(stateDir, 'kubelet', key);
  const file = pendingKeyPath(stateDir, 'kubelet');
  t.equal(file, path.join(stateDir, 'kubelet.key.pending'));
  t.equal(await modeOf(file), 0o600);
  t.equal(await modeOf(stateDir), 0o700, 'state dir created 0700');
  t.equal(await loadPendingKey(stateDir, 'kubelet'), key);
  t.equal(await loadPendingKey(stateDir, 'kube-proxy'), null, 'identities do not share a pending key');
  t.same(await readdir(stateDir), ['kubelet.key.pending'], 'no temp files remain');
});

t.test('no pending key means no CSR in flight', async (t) => {
  t.equal(await loadPendingKey(path.join(t.testdir(), 'absent'), 'kubelet'), null);
});

t.test('clearing removes the key and is safe to repeat', async (t) => {
  const stateDir = t.testdir();
  await savePendingKey(stateDir, 'kube-proxy', keyPem());
  await clearPendingKey(stateDir, 'kube-proxy');
  t.equal(await loadPendingKey(stateDir, 'kube-proxy'), null);
  await t.resolves(clearPendingKey(stateDir, 'kube-proxy'));
});

t.test('saving again replaces the previous pending key', async (t) => {
  const stateDir = t.testdir();
  await savePendingKey(stateDir, 'kubelet', keyPem());
  const second = keyPem();
  await savePendingKey(stateDir, 'kubelet', second);
  t.equal(await loadPendingKey(stateDir, 'kubelet'), second);
});

t.test('a pending key that is not a PEM private key is an error that names the file, not the content', async (t) => {
  const stateDir = t.testdir();
  await mkdir(stateDir, { recursive: true });
  const key = keyPem();
  await writeFile(pendingKeyPath(stateDir, 'kubelet'), key.slice(0, 60), { mode: 0o600 });
  const err = await loadPendingKey(stateDir, 'kubelet').then(
    () => null,
    (e: unknown) => e as Error,
  );
  t.type(err, KubebootError);
  t.match(err?.message ?? '', pendingKeyPath(stateDir, 'kubelet'));
  t.notMatch(err?.message ?? '', 'BEGIN');
  await t.rejects(savePendingKey(stateDir, 'kubelet', 'not a key'), KubebootError, 'refuses to save garbage');
});

t.test('a pending key in a directory others can write, or not a regular file, is refused (exit 2)', async (t) => {
  const stateDir = path.join(t.testdir(), 'state');
  await savePendingKey(stateDir, 'kubelet', keyPem());
  await chmod(stateDir, 0o777);
  await t.rejects(loadPendingKey(stateDir, 'kubelet'), {
    code: 2,
    message: `${stateDir} is writable by group or others (mode 0777); refusing to keep credentials there (chmod go-w it)`,
  });
  await t.rejects(savePendingKey(stateDir, 'kubelet', keyPem()), { code: 2, message: /writable by group or others/ });
  await chmod(stateDir, 0o700);
  await chmod(pendingKeyPath(stateDir, 'kubelet'), 0o666);
  await t.rejects(loadPendingKey(stateDir, 'kubelet'), {
    code: 2,
    message: /kubelet\.key\.pending is writable by group or others \(mode 0666\)/,
  });
  const other = path.join(path.dirname(stateDir), 'planted.key');
  await writeFile(other, keyPem(), { mode: 0o600 });
  await unlink(pendingKeyPath(stateDir, 'kubelet'));
  await symlink(other, pendingKeyPath(stateDir, 'kubelet'));
  await t.rejects(loadPendingKey(stateDir, 'kubelet'), { code: 2, message: /kubelet\.key\.pending is not a regular file/ });
});
