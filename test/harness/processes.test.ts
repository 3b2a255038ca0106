// The harness's promise that no etcd, kube-apiserver or kubeboot outlives a
// test process, even one killed by SIGKILL (a CI timeout, an OOM kill).
import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';

const processes = pathToFileURL(new URL('../support/processes.ts', import.meta.url).pathname).href;

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
    ['--input-type=module', '-e', `
      import { spawnTiedToTest } from ${JSON.stringify(processes)};
      const child = spawnTiedToTest('sleep', ['600'], { stdio: 'ignore' });
      console.log(child.pid);
      setInterval(() => {}, 60_000);`],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const [line] = (await once(createInterface({ input: testProcess.stdout }), 'line')) as [string];
  const pid = Number(line);
  t.ok(pid > 0 && (await running(pid)), `the child (pid ${pid}) is running`);

  testProcess.kill('SIGKILL');
  await new Promise((resolve) => testProcess.once('exit', resolve));
  // Bounded poll for the kernel's delivery of the parent-death signal.
  const deadline = Date.now() + 10_000;
  while ((await running(pid)) && Date.now() < deadline) await delay(50);
  const survived = await running(pid);
  if (survived) process.kill(pid, 'SIGKILL');
  t.notOk(survived, 'the child is gone once its test process is');
});
