// The Store a pass, a join and a renewal write through: the files on disk
// (fileStore) and the memory Store the unit tests use agree on what a prune
// keeps, and a write that makes its directories makes them with the mode asked.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Identity } from '../../../agent/identity.js';
import { fileStore, type Store } from '../../../agent/store/store.js';
import { kubeletIdentity } from '../../support/identity.js';
import { memoryStore } from '../../support/memory-store.js';

const certPem = (): string => `-----BEGIN CERTIFICATE-----\n${randomBytes(48).toString('base64')}\n-----END CERTIFICATE-----\n`;
const keyPem = (): string =>
  generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const t0 = Date.UTC(2025, 0, 2, 3, 4, 5);

/** Four renewals an hour apart, then a prune keeping `keep`: the names removed and the current one's. */
async function renewedAndPruned(store: Store, identity: Identity, keep: number) {
  for (let i = 0; i < 4; i++) await store.update(identity, certPem(), keyPem(), new Date(t0 + i * 3600_000));
  const removed = await store.prune(identity, keep);
  return { removed: removed.map((f) => path.basename(f)), current: path.basename((await store.current(identity))!.file) };
}

t.test('the memory store prunes as the files do: the newest kept, the current never removed', async (t) => {
  for (const keep of [0, 2]) {
    const onDisk = await renewedAndPruned(fileStore(), kubeletIdentity({ certDir: t.testdir(), kubeconfigPath: null }), keep);
    const inMemory = await renewedAndPruned(memoryStore(), kubeletIdentity({ certDir: '/pki', kubeconfigPath: null }), keep);
    t.same(inMemory.removed, onDisk.removed, `keep ${keep}`);
    t.equal(inMemory.current, onDisk.current);
    t.equal(onDisk.removed.length, 4 - Math.max(keep, 1), 'the current file and `keep` files stay');
  }
});

t.test('a write with dirMode makes the missing directories with that mode; the file is 0600, no temp file left', async (t) => {
  const root = t.testdir();
  const file = path.join(root, 'etc/kubernetes/bootstrap-kubelet.conf');
  await fileStore().write(file, 'apiVersion: v1\n', { dirMode: 0o755 });
  t.equal((await stat(path.join(root, 'etc'))).mode & 0o777, 0o755);
  t.equal((await stat(path.dirname(file))).mode & 0o777, 0o755);
  t.equal((await stat(file)).mode & 0o777, 0o600);
  t.same(await readdir(path.dirname(file)), ['bootstrap-kubelet.conf']);
});

t.test('a file every reader may see is written with the mode asked, a kubeconfig 0600 whatever the umask', async (t) => {
  const dir = t.testdir();
  const umask = process.umask(0o077);
  t.teardown(() => process.umask(umask));
  await fileStore().write(path.join(dir, 'client-ca.crt'), 'bundle\n', { mode: 0o644 });
  await fileStore().write(path.join(dir, 'kubelet.conf'), 'apiVersion: v1\n');
  t.equal((await stat(path.join(dir, 'client-ca.crt'))).mode & 0o777, 0o644);
  t.equal((await stat(path.join(dir, 'kubelet.conf'))).mode & 0o777, 0o600);
});

t.test('a write without dirMode needs its directory, and says which file it could not write', async (t) => {
  const file = path.join(t.testdir(), 'missing/kubelet.conf');
  await t.rejects(fileStore().write(file, 'x'), { message: `cannot write ${file}: ENOENT: its directory does not exist` });
});
