// The harness's promise that no etcd, kube-apiserver or kubeboot outlives a
// test process, even one killed by SIGKILL (a CI timeout, an OOM kill).
import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { waitFor } from '../support/admin.js';

const processes = new URL('../support/processes.ts', import.meta.url).href;

/** Alive and not a zombie waiting to be reaped. */
async function running(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  return stat !== '' && stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
}

t.test('a child started by the harness dies with a test process killed by SIGKILL', async (t) => {
  // Stands in for a test file: starts a long-lived child the harness's way,
  // prints its pid, then waits to be killed.
  const testProcess = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
      import { spawnTiedToTest } from ${JSON.stringify(processes)};
      const child = spawnTiedToTest('sleep', ['600'], { stdio: 'ignore' });
      console.log(child.pid);
      setInterval(() => {}, 60_000);`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const [line] = (await once(createInterface({ input: testProcess.stdout }), 'line')) as [string];
  const pid = Number(line);
  t.ok(pid > 0 && (await running(pid)), `the child (pid ${pid}) is running`);

  testProcess.kill('SIGKILL');
  await new Promise((resolve) => testProcess.once('exit', resolve));
  // The kernel delivers the parent-death signal asynchronously.
  const gone = await waitFor('the child to die', async () => ((await running(pid)) ? undefined : true), 10_000).catch(() => false);
  if (!gone) process.kill(pid, 'SIGKILL');
  t.ok(gone, 'the child is gone once its test process is');
});
