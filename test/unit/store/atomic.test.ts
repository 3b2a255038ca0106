import t from 'tap';
import { chmod, mkdir, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { KubebootError } from '../../../agent/errors.js';
import {
  ensureDir,
  isTempName,
  realFs,
  removeFileDurably,
  tempPathFor,
  trustProblem,
  writeFileAtomic,
} from '../../../agent/store/atomic.js';
import type { FsOps } from '../../../agent/store/atomic.js';

const modeOf = async (p: string) => (await stat(p)).mode & 0o777;
const injected = () => Object.assign(new Error('injected failure'), { code: 'EIO' });

t.test('writes the content with exactly the requested mode, whatever the umask', async (t) => {
  const dir = t.testdir();
  const old = process.umask(0o000);
  t.teardown(() => void process.umask(old));
  await writeFileAtomic(path.join(dir, 'key.pem'), 'secret', { mode: 0o600 });
  process.umask(0o077);
  await writeFileAtomic(path.join(dir, 'kubeconfig'), new TextEncoder().encode('public'), { mode: 0o644 });
  t.equal(await readFile(path.join(dir, 'key.pem'), 'utf8'), 'secret');
  t.equal(await modeOf(path.join(dir, 'key.pem')), 0o600);
  t.equal(await readFile(path.join(dir, 'kubeconfig'), 'utf8'), 'public');
  t.equal(await modeOf(path.join(dir, 'kubeconfig')), 0o644);
  t.same(await readdir(dir), ['key.pem', 'kubeconfig'].sort(), 'no temp files remain');
});

t.test('replaces an existing file and tells the observer which path it is about to replace', async (t) => {
  const dir = t.testdir({ 'kubelet.conf': 'old' });
  const file = path.join(dir, 'kubelet.conf');
  const seen: string[] = [];
  await writeFileAtomic(file, 'new', {
    mode: 0o600,
    observer: { willWrite: (p) => seen.push(p) },
  });
  t.equal(await readFile(file, 'utf8'), 'new');
  t.same(seen, [file]);
  t.same(await readdir(dir), ['kubelet.conf']);
});

const failingAt: Record<string, FsOps> = {
  fsync: {
    ...realFs,
    open: (async (...args: Parameters<FsOps['open']>) => {
      const handle = await realFs.open(...args);
      handle.sync = async () => {
        throw injected();
      };
      return handle;
    }) as FsOps['open'],
  },
  rename: {
    ...realFs,
    rename: async () => {
      throw injected();
    },
  },
};

for (const [step, fs] of Object.entries(failingAt)) {
  t.test(`a failure at ${step} leaves the target untouched and no temp file behind`, async (t) => {
    const dir = t.testdir({ 'kubelet.conf': 'old' });
    const file = path.join(dir, 'kubelet.conf');
    await t.rejects(writeFileAtomic(file, 'new', { mode: 0o600, fs }), { message: 'injected failure' });
    t.equal(await readFile(file, 'utf8'), 'old');
    t.same(await readdir(dir), ['kubelet.conf']);
  });
}

t.test('never writes into a file that already holds the temp name (opened exclusively)', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'x');
  const fs: FsOps = {
    ...realFs,
    open: (async (p: string, flags: string, mode: number) => {
      await writeFile(p, 'someone else');
      return realFs.open(p, flags, mode);
    }) as FsOps['open'],
  };
  await t.rejects(writeFileAtomic(file, 'new', { mode: 0o600, fs }), { message: new RegExp(`^cannot write ${file}: EEXIST`) });
});

t.test('a failed write names the file kubeboot meant, not its temp name, and what went wrong', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'kubelet.conf');
  const full: FsOps = {
    ...realFs,
    open: (async () =>
      Promise.reject(Object.assign(new Error('ENOSPC: no space left on device, open'), { code: 'ENOSPC' }))) as FsOps['open'],
  };
  await t.rejects(writeFileAtomic(file, 'x', { mode: 0o600, fs: full }), {
    message: `cannot write ${file}: ENOSPC: no space left on the device; free some and kubeboot retries`,
  });
  const readOnly: FsOps = {
    ...realFs,
    rename: (async () => Promise.reject(Object.assign(new Error('EROFS'), { code: 'EROFS' }))) as FsOps['rename'],
  };
  await t.rejects(writeFileAtomic(file, 'x', { mode: 0o600, fs: readOnly }), {
    message: new RegExp(`^cannot write ${file}: EROFS: the file system is read-only`),
  });
  t.same(
    (await readdir(dir)).filter((n) => n.includes('.tmp-')),
    [],
    'the temp file is removed',
  );
});

t.test('ensureDir creates missing parents with the mode and reports them, leaving existing ones alone', async (t) => {
  const root = t.testdir({ existing: {} });
  await chmod(path.join(root, 'existing'), 0o755);
  const old = process.umask(0o077);
  t.teardown(() => void process.umask(old));
  const target = path.join(root, 'existing', 'a', 'b');
  const created = await ensureDir(target, 0o750);
  t.same(created, [path.join(root, 'existing', 'a'), target]);
  t.equal(await modeOf(path.join(root, 'existing', 'a')), 0o750);
  t.equal(await modeOf(target), 0o750);
  t.equal(await modeOf(path.join(root, 'existing')), 0o755, 'existing directory keeps its mode');
  t.same(await ensureDir(target, 0o700), [], 'nothing created the second time');
  t.equal(await modeOf(target), 0o750, 'an existing directory is not re-chmodded');
});

t.test('ensureDir fails clearly when a file is in the way', async (t) => {
  const root = t.testdir({ pki: 'not a directory' });
  await t.rejects(ensureDir(path.join(root, 'pki', 'sub'), 0o700), KubebootError);
});

t.test('removeFileDurably removes the file and tolerates one already gone', async (t) => {
  const dir = t.testdir({ 'token.conf': 'x' });
  const file = path.join(dir, 'token.conf');
  const seen: string[] = [];
  await removeFileDurably(file, { observer: { willWrite: (p) => seen.push(p) } });
  t.same(await readdir(dir), []);
  t.same(seen, [file]);
  await t.resolves(removeFileDurably(file));
  await mkdir(path.join(dir, 'sub'));
  await t.rejects(removeFileDurably(path.join(dir, 'sub')), 'other errors still surface');
});

t.test('temp names are recognisable so the watcher can ignore them', async (t) => {
  const tmp = tempPathFor('/var/lib/kubelet/pki/kubelet-client-current.pem', '');
  t.match(path.basename(tmp), /^kubelet-client-current\.pem\.tmp-[0-9a-f]{12}$/);
  t.ok(isTempName(tmp));
  t.ok(isTempName(tempPathFor('/etc/kubernetes/kubelet.conf')));
  t.notOk(isTempName('/etc/kubernetes/kubelet.conf'));
  t.not(tempPathFor('/a/b'), tempPathFor('/a/b'), 'unique per call');
});

t.test('ensureDir refuses an existing directory that group or others can write, or another uid owns (exit 2)', async (t) => {
  const dir = path.join(t.testdir(), 'state');
  await mkdir(dir);
  await chmod(dir, 0o777);
  await t.rejects(ensureDir(dir, 0o700), {
    code: 2,
    message: `${dir} is writable by group or others (mode 0777); refusing to keep credentials there (chmod go-w it)`,
  });
  await chmod(dir, 0o755);
  t.same(await ensureDir(dir, 0o700), [], 'a 0755 directory (kubeadm’s /var/lib/kubelet/pki) is fine');
  t.equal(
    trustProblem(dir, { uid: 4242, mode: 0o40700 }, 0),
    `${dir} is owned by uid 4242, not by uid 0 that kubeboot runs as; refusing to keep credentials there (chown 0 it)`,
  );
});

t.test('ensureDir never chmods through a link swapped in after mkdir, and refuses a directory others made meanwhile', async (t) => {
  const root = t.testdir({ victim: 'root only' });
  const victim = path.join(root, 'victim');
  await chmod(victim, 0o600);
  // A writable parent lets someone replace the new directory with a link before the chmod.
  const swapped: FsOps = {
    ...realFs,
    mkdir: (async (d: string, opts?: Parameters<FsOps['mkdir']>[1]) => {
      await realFs.mkdir(d, opts);
      await rm(d, { recursive: true });
      await symlink(victim, d);
      return undefined;
    }) as FsOps['mkdir'],
  };
  await t.rejects(ensureDir(path.join(root, 'state'), 0o755, swapped), { code: /^(ELOOP|ENOTDIR)$/ });
  t.equal(await modeOf(victim), 0o600, 'the file behind the link keeps its mode');
  // Or creates the directory first, its way.
  const raced: FsOps = {
    ...realFs,
    mkdir: (async (d: string) => {
      await realFs.mkdir(d);
      await chmod(d, 0o777);
      throw Object.assign(new Error('EEXIST'), { code: 'EEXIST' });
    }) as FsOps['mkdir'],
  };
  const dir = path.join(root, 'pki');
  await t.rejects(ensureDir(dir, 0o700, raced), {
    code: 2,
    message: `${dir} is writable by group or others (mode 0777); refusing to keep credentials there (chmod go-w it)`,
  });
});
