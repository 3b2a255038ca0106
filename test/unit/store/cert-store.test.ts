import t from 'tap';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readlinkSync } from 'node:fs';
import { chmod, lstat, readdir, readFile, readlink, rm, stat, symlink, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { IDENTITY_ROLES } from '../../../agent/config/identities.js';
import { KubebootError } from '../../../agent/errors.js';
import type { Identity } from '../../../agent/identity.js';
import { currentCertPath } from '../../../agent/identity.js';
import { kubeletIdentity } from '../../support/identity.js';
import { realFs } from '../../../agent/store/atomic.js';
import type { FsOps } from '../../../agent/store/atomic.js';
import { listCredentialFiles, loadCurrent, pruneOld, recoverStore, storeCredential, timestampOf } from '../../../agent/store/cert-store.js';

// The store never parses X.509, so a well-formed PEM block stands in for a certificate.
const certPem = (): string => `-----BEGIN CERTIFICATE-----\n${randomBytes(48).toString('base64')}\n-----END CERTIFICATE-----\n`;
const keyPem = (): string =>
  generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

function identityIn(certDir: string): Identity {
  return kubeletIdentity({ certDir, kubeconfigPath: null });
}

const t0 = new Date(Date.UTC(2025, 0, 2, 3, 4, 5));
const later = (seconds: number) => new Date(t0.getTime() + seconds * 1000);
const injected = () => Object.assign(new Error('injected crash'), { code: 'EIO' });
const modeOf = async (p: string) => (await stat(p)).mode & 0o777;

t.test('names files with the UTC timestamp client-go uses', async (t) => {
  t.equal(timestampOf(t0), '2025-01-02-03-04-05');
});

t.test('stores the chain then the key in a 0600 file and points -current.pem at it', async (t) => {
  const dir = path.join(t.testdir(), 'pki');
  const id = identityIn(dir);
  const chain = certPem() + certPem();
  const key = keyPem();
  const { file, currentPath } = await storeCredential(id, chain, key, t0);
  t.equal(file, path.join(dir, 'kubelet-client-2025-01-02-03-04-05.pem'));
  t.equal(currentPath, path.join(dir, 'kubelet-client-current.pem'));
  t.equal(await readFile(file, 'utf8'), chain + key, 'certificates first, then the key');
  t.equal(await modeOf(file), 0o600);
  t.equal(await readlink(currentPath), file, 'the link holds the absolute path');
  t.equal(await modeOf(dir), 0o700, 'a missing cert dir is created 0700');
  t.same(await loadCurrent(id), { certPem: chain, keyPem: key, file });
});

t.test('leaves an existing cert dir mode alone (kubeadm makes /var/lib/kubelet/pki 0755)', async (t) => {
  const dir = t.testdir();
  await chmod(dir, 0o755);
  await storeCredential(identityIn(dir), certPem(), keyPem(), t0);
  t.equal(await modeOf(dir), 0o755);
});

t.test('a renewal repoints the link and keeps the previous file', async (t) => {
  const id = identityIn(t.testdir());
  const first = await storeCredential(id, certPem(), keyPem(), t0);
  const cert2 = certPem();
  const second = await storeCredential(id, cert2, keyPem(), later(3600));
  t.not(second.file, first.file);
  t.ok((await lstat(first.file)).isFile(), 'previous credential still on disk');
  t.equal(await readlink(currentCertPath(id)), second.file);
  t.equal((await loadCurrent(id))?.certPem, cert2);
});

t.test('two stores in the same second do not overwrite each other', async (t) => {
  const id = identityIn(t.testdir());
  const first = await storeCredential(id, certPem(), keyPem(), t0);
  const second = await storeCredential(id, certPem(), keyPem(), t0);
  t.equal(path.basename(second.file), 'kubelet-client-2025-01-02-03-04-05-1.pem');
  t.ok((await lstat(first.file)).isFile());
  t.same(await listCredentialFiles(id), [second.file, first.file], 'the suffixed file counts as newer');
  t.equal(await readlink(currentCertPath(id)), second.file);
});

t.test('the observer hears about -current.pem before it changes', async (t) => {
  const id = identityIn(t.testdir());
  const first = await storeCredential(id, certPem(), keyPem(), t0);
  const linkAtNotice: string[] = [];
  const seen: string[] = [];
  await storeCredential(id, certPem(), keyPem(), later(1), {
    observer: {
      willWrite: (p) => {
        seen.push(p);
        if (p === currentCertPath(id)) linkAtNotice.push(readlinkSync(p));
      },
    },
  });
  t.ok(seen.includes(currentCertPath(id)));
  t.equal(seen.filter((p) => p.includes('.tmp-')).length, 0, 'temp names are not reported');
  t.same(linkAtNotice, [first.file]);
});

t.test('a regular file at -current.pem is replaced by the link and kept as .bak', async (t) => {
  const dir = t.testdir();
  const id = identityIn(dir);
  const handPlaced = certPem() + keyPem();
  await writeFile(currentCertPath(id), handPlaced, { mode: 0o600 });
  const { file } = await storeCredential(id, certPem(), keyPem(), t0);
  t.equal(await readlink(currentCertPath(id)), file);
  t.equal(await readFile(`${currentCertPath(id)}.bak`, 'utf8'), handPlaced);
  t.equal(await modeOf(`${currentCertPath(id)}.bak`), 0o600);
});

t.test('refuses input without a certificate or without exactly one key, without echoing the key', async (t) => {
  const id = identityIn(t.testdir());
  const key = keyPem();
  const body = key.split('\n')[1] ?? '';
  await t.rejects(storeCredential(id, key, key, t0), KubebootError);
  await t.rejects(storeCredential(id, certPem(), certPem(), t0), KubebootError);
  await t.rejects(storeCredential(id, certPem(), key + key, t0), KubebootError);
  const err = await storeCredential(id, 'garbage', key, t0).then(
    () => null,
    (e: unknown) => e as Error,
  );
  t.type(err, KubebootError);
  t.notMatch(err?.message ?? '', body);
  t.same(await readdir(id.certDir), [], 'nothing written');
});

t.test('a crash before the link is swapped leaves the old credential current', async (t) => {
  const id = identityIn(t.testdir());
  const old = await storeCredential(id, certPem(), keyPem(), t0);
  const oldCredential = await loadCurrent(id);
  const fs: FsOps = {
    ...realFs,
    rename: async (from, to) => {
      if (String(to) === currentCertPath(id)) throw injected();
      return realFs.rename(from, to);
    },
  };
  await t.rejects(storeCredential(id, certPem(), keyPem(), later(60), { fs }), KubebootError);
  t.equal(await readlink(currentCertPath(id)), old.file);
  t.same(await loadCurrent(id), oldCredential, 'old link still resolves to a complete credential');
  t.same(
    (await readdir(id.certDir)).filter((n) => n.includes('.tmp-')),
    [],
    'the temp link is cleaned up',
  );
  t.same(await recoverStore(id), [], 'nothing for recovery to repair');
});

t.test('a crash while writing the new file leaves the old credential and no new file', async (t) => {
  const id = identityIn(t.testdir());
  const old = await storeCredential(id, certPem(), keyPem(), t0);
  const fs: FsOps = {
    ...realFs,
    rename: async () => {
      throw injected();
    },
  };
  await t.rejects(storeCredential(id, certPem(), keyPem(), later(60), { fs }), KubebootError);
  t.same(await readdir(id.certDir), [path.basename(old.file), 'kubelet-client-current.pem'].sort());
  t.equal((await loadCurrent(id))?.file, old.file);
});

t.test("recovery removes temp files and temp links left by a crash, and only this identity's", async (t) => {
  const id = identityIn(t.testdir());
  const { file } = await storeCredential(id, certPem(), keyPem(), t0);
  const dir = id.certDir;
  const tmpFile = path.join(dir, '.kubelet-client-2025-01-02-03-05-05.pem.tmp-0123456789ab');
  const tmpLink = path.join(dir, 'kubelet-client-current.pem.tmp-ba9876543210');
  const otherIdentity = path.join(dir, '.kubelet-server-2025-01-02-03-05-05.pem.tmp-0123456789ab');
  await writeFile(tmpFile, certPem(), { mode: 0o600 });
  await symlink(path.join(dir, 'kubelet-client-2025-01-02-03-05-05.pem'), tmpLink);
  await writeFile(otherIdentity, 'x');
  await writeFile(path.join(dir, 'kubelet.crt'), 'x');
  const lines = await recoverStore(id);
  t.equal(lines.length, 2);
  t.match(lines.join('\n'), tmpFile);
  t.match(lines.join('\n'), tmpLink);
  t.same(
    (await readdir(dir)).sort(),
    ['.kubelet-server-2025-01-02-03-05-05.pem.tmp-0123456789ab', path.basename(file), 'kubelet-client-current.pem', 'kubelet.crt'].sort(),
  );
  t.equal((await loadCurrent(id))?.file, file);
});

t.test('recovery repoints a dangling -current.pem at the newest complete credential', async (t) => {
  const id = identityIn(t.testdir());
  const a = await storeCredential(id, certPem(), keyPem(), t0);
  // A newer file that lost its key (e.g. copied in half by hand): not complete.
  await writeFile(path.join(id.certDir, 'kubelet-client-2025-01-02-04-00-00.pem'), certPem(), { mode: 0o600 });
  const gone = await storeCredential(id, certPem(), keyPem(), later(7200));
  await unlink(gone.file);
  t.equal(await loadCurrent(id), null, 'a dangling link reads as no credential');
  const lines = await recoverStore(id);
  t.equal(lines.length, 1);
  t.match(lines[0], /missing or incomplete; it now points at/);
  t.equal(await readlink(currentCertPath(id)), a.file);
  t.equal((await loadCurrent(id))?.file, a.file);
});

t.test('recovery says so when no complete credential is left, and leaves the link', async (t) => {
  const id = identityIn(t.testdir());
  const only = await storeCredential(id, certPem(), keyPem(), t0);
  await unlink(only.file);
  const lines = await recoverStore(id);
  t.match(lines[0] ?? '', /no complete credential file is left/);
  t.equal(await readlink(currentCertPath(id)), only.file);
});

t.test("recovery of a missing cert dir or an operator's regular file does nothing", async (t) => {
  const root = t.testdir();
  t.same(await recoverStore(identityIn(path.join(root, 'absent'))), []);
  const id = identityIn(root);
  await writeFile(currentCertPath(id), certPem() + keyPem(), { mode: 0o600 });
  t.same(await recoverStore(id), []);
  t.ok((await lstat(currentCertPath(id))).isFile());
});

t.test('loadCurrent: null when absent; a garbled file is an error naming the file, not its content', async (t) => {
  const id = identityIn(t.testdir());
  t.equal(await loadCurrent(id), null);
  const key = keyPem();
  const cases: Record<string, string> = {
    'no certificate': key,
    'two keys': certPem() + key + key,
    truncated: certPem() + key.slice(0, 80),
    'not base64': '-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n' + key,
  };
  for (const [what, content] of Object.entries(cases)) {
    const file = path.join(id.certDir, 'kubelet-client-2025-01-02-03-04-05.pem');
    await writeFile(file, content, { mode: 0o600 });
    await rm(currentCertPath(id), { force: true });
    await symlink(file, currentCertPath(id));
    const err = await loadCurrent(id).then(
      () => null,
      (e: unknown) => e as Error,
    );
    t.type(err, KubebootError, what);
    t.match(err?.message ?? '', file, `${what}: names the file`);
    t.notMatch(err?.message ?? '', 'BEGIN', `${what}: no content in the message`);
  }
});

t.test('pruneOld keeps the newest files and always the current target', async (t) => {
  const id = identityIn(t.testdir());
  const stored = [];
  for (let i = 0; i < 5; i++) stored.push(await storeCredential(id, certPem(), keyPem(), later(i * 3600)));
  const removed = await pruneOld(id, 2);
  t.same(removed, [stored[2]?.file, stored[1]?.file, stored[0]?.file]);
  t.same(await listCredentialFiles(id), [stored[4]?.file, stored[3]?.file]);

  // An operator rolled back to an older file: pruning must not delete it.
  await unlink(currentCertPath(id));
  await symlink(stored[3]?.file ?? '', currentCertPath(id));
  t.same(await pruneOld(id, 0), [stored[4]?.file]);
  t.equal((await loadCurrent(id))?.file, stored[3]?.file);
  await t.rejects(pruneOld(id, -1), KubebootError);
});

t.test('after a renewal the serving identity keeps no old file, so the kubelet watching the replaced one reloads', async (t) => {
  const client = identityIn(path.join(t.testdir(), 'client'));
  const serving: Identity = {
    ...identityIn(path.join(t.testdir(), 'serving')),
    name: 'kubelet-serving',
    ...IDENTITY_ROLES['kubelet-serving'],
    filePrefix: 'kubelet-server',
  };
  for (const id of [client, serving]) {
    for (let i = 0; i < 3; i++) await storeCredential(id, certPem(), keyPem(), later(i * 3600));
    await pruneOld(id, id.keepOld);
  }
  t.equal((await listCredentialFiles(client)).length, 3, 'the client identity keeps its older files');
  t.same(await listCredentialFiles(serving), [(await loadCurrent(serving))?.file], 'the serving identity only the current one');
});
