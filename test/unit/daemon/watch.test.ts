import t, { type Test } from 'tap';
import { writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { silentLogger } from '../../../agent/log.js';
import type { Identity } from '../../../agent/identity.js';
import { kubeletIdentity } from '../../support/identity.js';
import { classify, createSelfWrites, watchCredentials, type CredentialChange, type SelfWrites } from '../../../agent/daemon/watch.js';

function kubeletIdentityIn(root: string): Identity {
  return kubeletIdentity({ certDir: path.join(root, 'pki'), kubeconfigPath: path.join(root, 'etc', 'kubelet.conf') });
}

/** A watcher over a fresh tree, with a bounded wait for the next matching change. */
async function setup(t: Test, selfWrites: SelfWrites = createSelfWrites(), debounceMs = 50) {
  const root = await mkdtemp(path.join(tmpdir(), 'kubeboot-watch-'));
  await mkdir(path.join(root, 'pki'));
  await mkdir(path.join(root, 'etc'));
  const identity = kubeletIdentityIn(root);
  const bootstrap = path.join(root, 'etc', 'bootstrap-kubelet.conf');
  const certA = path.join(root, 'pki', 'kubelet-client-2025-01-01-00-00-00.pem');
  const current = path.join(root, 'pki', 'kubelet-client-current.pem');
  await writeFile(certA, 'cert a');
  await symlink(certA, current);
  await writeFile(identity.kubeconfigPath!, 'kubeconfig v1');

  const seen: CredentialChange[] = [];
  const waiters = new Set<() => void>();
  const watcher = await watchCredentials({
    identities: [identity],
    bootstrapKubeconfig: bootstrap,
    selfWrites,
    logger: silentLogger(),
    debounceMs,
    onChange: (c) => {
      seen.push(c);
      for (const w of waiters) w();
    },
  });
  t.teardown(async () => {
    await watcher.close();
    await rm(root, { recursive: true, force: true });
  });

  const next = (pred: (c: CredentialChange) => boolean, timeoutMs = 10_000): Promise<CredentialChange> =>
    new Promise((resolve, reject) => {
      const check = () => {
        const hit = seen.find(pred);
        if (!hit) return;
        waiters.delete(check);
        clearTimeout(timer);
        resolve(hit);
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`no matching change within ${timeoutMs} ms; saw ${JSON.stringify(seen)}`));
      }, timeoutMs);
      waiters.add(check);
      check();
    });

  /** Replaces a file the careful way: write a temp sibling, rename it over. */
  const replace = async (file: string, content: string) => {
    const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp-test`);
    await writeFile(tmp, content);
    await rename(tmp, file);
  };
  return { root, identity, bootstrap, current, certA, seen, next, replace };
}

t.test('a kubeconfig replaced by rename outside kubeboot is reported', async (t) => {
  const s = await setup(t);
  await s.replace(s.identity.kubeconfigPath!, 'kubeconfig v2');
  const c = await s.next((c) => c.file === 'kubeconfig');
  t.same(c, { identity: 'kubelet', file: 'kubeconfig', path: s.identity.kubeconfigPath, kind: 'changed' });
});

t.test('the current-certificate link repointed outside kubeboot is reported', async (t) => {
  const s = await setup(t);
  const certB = path.join(s.root, 'pki', 'kubelet-client-2025-06-01-00-00-00.pem');
  await writeFile(certB, 'cert b');
  const link = path.join(s.root, 'pki', '.kubelet-client-current.pem.tmp-test');
  await symlink(certB, link);
  await rename(link, s.current);
  const c = await s.next((c) => c.path === s.current);
  t.same(c, { identity: 'kubelet', file: 'certificate', path: s.current, kind: 'changed' });
});

t.test("kubeboot's own announced writes are not reported", async (t) => {
  const selfWrites = createSelfWrites();
  const s = await setup(t, selfWrites);
  selfWrites.willWrite(s.identity.kubeconfigPath!);
  await s.replace(s.identity.kubeconfigPath!, 'kubeconfig written by kubeboot');
  // A later external change is the marker: anything about our own write would arrive first.
  await writeFile(s.bootstrap, 'bootstrap');
  await s.next((c) => c.file === 'bootstrap-kubeconfig');
  t.same(
    s.seen.map((c) => c.file),
    ['bootstrap-kubeconfig'],
    JSON.stringify(s.seen),
  );
});

t.test('a deleted kubeconfig is reported as removed', async (t) => {
  const s = await setup(t);
  await unlink(s.identity.kubeconfigPath!);
  const c = await s.next((c) => c.file === 'kubeconfig');
  t.equal(c.kind, 'removed');
});

t.test('a bootstrap kubeconfig appearing is reported for all identities', async (t) => {
  const s = await setup(t);
  await s.replace(s.bootstrap, 'new bootstrap kubeconfig');
  const c = await s.next((c) => c.file === 'bootstrap-kubeconfig');
  t.same(c, { identity: null, file: 'bootstrap-kubeconfig', path: s.bootstrap, kind: 'changed' });
});

t.test('unrelated files and temp names in the watched directories are ignored', async (t) => {
  const s = await setup(t);
  await writeFile(path.join(s.root, 'etc', 'kube-proxy.conf'), 'not watched by this identity');
  await writeFile(path.join(s.root, 'pki', 'kubelet-client-current.pem.tmp-abc123'), 'temp');
  await writeFile(path.join(s.root, 'pki', 'kubelet.crt'), 'serving cert of another tool');
  await writeFile(s.bootstrap, 'marker');
  await s.next((c) => c.file === 'bootstrap-kubeconfig');
  t.same(
    s.seen.map((c) => c.file),
    ['bootstrap-kubeconfig'],
    JSON.stringify(s.seen),
  );
});

t.test('a burst of writes to one file is reported once', async (t) => {
  // One synchronous burst, and a debounce far longer than it takes, so a busy
  // machine cannot split it in two.
  const s = await setup(t, createSelfWrites(), 1000);
  for (let i = 0; i < 5; i++) writeFileSync(s.identity.kubeconfigPath!, `edit ${i}`);
  await writeFile(s.bootstrap, 'marker');
  await s.next((c) => c.file === 'bootstrap-kubeconfig');
  t.equal(s.seen.filter((c) => c.file === 'kubeconfig').length, 1);
});

t.test('classify names certificate files by the client-go store pattern only', async (t) => {
  const identity = kubeletIdentityIn('/r');
  const bootstrap = '/r/etc/bootstrap-kubelet.conf';
  t.same(classify('/r/pki/kubelet-client-current.pem', [identity], bootstrap), { identity: 'kubelet', file: 'certificate' });
  t.same(classify('/r/pki/kubelet-client-2025-01-01-00-00-00.pem', [identity], bootstrap), { identity: 'kubelet', file: 'certificate' });
  t.same(
    classify('/r/pki/kubelet-client-2025-01-01-00-00-00-1.pem', [identity], bootstrap),
    { identity: 'kubelet', file: 'certificate' },
    'the -N suffix the store adds for a second file in one second',
  );
  t.same(classify('/r/etc/kubelet.conf', [identity], bootstrap), { identity: 'kubelet', file: 'kubeconfig' });
  t.same(classify('/r/etc/../etc/bootstrap-kubelet.conf', [identity], bootstrap), { identity: null, file: 'bootstrap-kubeconfig' });
  t.equal(classify('/r/pki/kubelet-client-x.pem', [identity], bootstrap), null);
  t.equal(classify('/r/pki/kubelet-client.key.tmp', [identity], bootstrap), null);
  t.equal(classify('/other/kubelet-client-current.pem', [identity], bootstrap), null);
});

t.test('self-write announcements expire after their TTL', async (t) => {
  let now = 1000;
  const sw = createSelfWrites({ ttlMs: 5000, now: () => now });
  sw.willWrite('/a/../a/file');
  t.ok(sw.isOwn('/a/file'));
  t.notOk(sw.isOwn('/a/other'));
  now += 5001;
  t.notOk(sw.isOwn('/a/file'));
  t.ok(sw.isOwn('/a/file', 2000), 'an explicit time is honoured');
});

t.test('a file an operator replaces right after kubeboot wrote it is not mistaken for kubeboot’s own write', async (t) => {
  const dir = t.testdir({ 'a.pem': 'a', 'b.pem': 'b' });
  const link = path.join(dir, 'kubelet-client-current.pem');
  const selfWrites = createSelfWrites();
  selfWrites.willWrite(link);
  t.ok(selfWrites.isOwn(link), 'own while the write is in progress');
  await symlink(path.join(dir, 'a.pem'), link);
  selfWrites.didWrite(link);
  t.ok(selfWrites.isOwn(link), 'own once written');
  await symlink(path.join(dir, 'b.pem'), link + '.new');
  await rename(link + '.new', link);
  t.notOk(selfWrites.isOwn(link), 'replaced by someone else within the TTL');
  t.notOk(selfWrites.isOwn(link, undefined, 'removed'), 'a removal kubeboot did not announce is never its own');
});
