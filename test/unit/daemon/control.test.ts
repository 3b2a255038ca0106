import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { lstat, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pidFilePath, processStartTime, removePidFile, runningDaemon, writePidFile } from '../../../agent/daemon/control.js';

/** A child process that lives until the test ends. */
function child(t: Test, file: string, args: string[]): number {
  const proc = spawn(file, args, { stdio: 'ignore' });
  t.teardown(() => void proc.kill('SIGKILL'));
  return proc.pid!;
}

t.test('the pid file replaces a planted symlink instead of writing through it', async (t) => {
  const dir = t.testdir({ 'victim.conf': 'precious\n' });
  await symlink(path.join(dir, 'victim.conf'), pidFilePath(dir));
  await writePidFile(dir);
  t.equal(await readFile(path.join(dir, 'victim.conf'), 'utf8'), 'precious\n', 'the link target is untouched');
  t.ok((await lstat(pidFilePath(dir))).isFile(), 'the pid file is a regular file now');
  t.equal(await readFile(pidFilePath(dir), 'utf8'), `${process.pid} ${await processStartTime('self')}\n`);
  await removePidFile(dir);
  await t.rejects(lstat(pidFilePath(dir)), { code: 'ENOENT' });
});

t.test('renew does not take an unrelated "kubeboot run" process for the daemon', async (t) => {
  const dir = t.testdir();
  // argv has an element ending in "kubeboot" and one equal to "run": the old check trusted exactly that.
  const pid = child(t, '/bin/sh', ['-c', 'sleep 30', '/usr/bin/kubeboot', 'run']);
  await writeFile(pidFilePath(dir), `${pid}\n`);
  t.equal(await runningDaemon(dir), null, 'a bare pid (old format) is not trusted');
  await writeFile(pidFilePath(dir), `${pid} ${await processStartTime(pid)}\n`);
  t.equal(await runningDaemon(dir), null, 'another executable is not the daemon, even with a matching start time');
});

t.test('renew finds the daemon only when pid, start time, uid and executable all match', async (t) => {
  const dir = t.testdir();
  const pid = child(t, process.execPath, ['-e', 'setInterval(() => {}, 1000)']);
  let start: string | null = null;
  for (let i = 0; i < 100 && start === null; i++) start = await processStartTime(pid);
  await writeFile(pidFilePath(dir), `${pid} ${start}\n`);
  t.equal(await runningDaemon(dir), pid);
  await writeFile(pidFilePath(dir), `${pid} ${Number(start) + 1}\n`);
  t.equal(await runningDaemon(dir), null, 'a reused pid (other start time) is not the daemon');
  await writeFile(pidFilePath(dir), `${process.pid} ${await processStartTime('self')}\n`);
  t.equal(await runningDaemon(dir), null, 'never this process itself');
});
