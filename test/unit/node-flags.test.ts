import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { ensureNodeFlags, type Exec, missingNodeFlags, NODE_FLAGS, reexecArgv } from '../../agent/node-flags.js';
import type { Log } from '../../agent/log-lines.js';
import { bundle, launcherNodeFlags, startWatched } from '../support/kubeboot.js';

const NODE = '/usr/lib/kubeboot/node';
const SCRIPT = '/usr/lib/kubeboot/kubeboot.cjs';

t.test('the packaged launcher passes exactly the flags the program would add itself', async (t) => {
  for (const command of ['run', 'approver'] as const) t.same(launcherNodeFlags(command), NODE_FLAGS[command], command);
});

t.test('a flag counts as given by name, whatever its value or spelling, on the command line or in NODE_OPTIONS', async (t) => {
  t.same(missingNodeFlags(NODE_FLAGS.run, []), ['--max-semi-space-size=1', '--lite-mode']);
  t.same(
    missingNodeFlags(NODE_FLAGS.run, ['--disable-sigusr1', '--max-semi-space-size=4']),
    ['--lite-mode'],
    "the operator's own size stands",
  );
  t.same(missingNodeFlags(NODE_FLAGS.run, ['--max_semi_space_size=1', '--lite_mode']), [], 'V8 reads _ as -');
  t.same(missingNodeFlags(NODE_FLAGS.run, [], '--lite-mode  --max-semi-space-size=2'), []);
});

t.test(
  'started as `node kubeboot.cjs run`, it execs itself with the missing flags after those given, then the same script and arguments',
  async (t) => {
    const started = {
      execPath: NODE,
      execArgv: ['--disable-sigusr1'],
      argv: [NODE, SCRIPT, 'run', '--config', '/etc/kubeboot/config.yaml'],
    };
    t.same(reexecArgv('run', started), {
      missing: ['--max-semi-space-size=1', '--lite-mode'],
      argv: [NODE, '--disable-sigusr1', '--max-semi-space-size=1', '--lite-mode', SCRIPT, 'run', '--config', '/etc/kubeboot/config.yaml'],
    });
    t.same(reexecArgv('approver', { ...started, argv: [NODE, SCRIPT, 'approver'] })?.argv, [
      NODE,
      '--disable-sigusr1',
      '--max-semi-space-size=1',
      SCRIPT,
      'approver',
    ]);
  },
);

t.test('the process started again finds nothing missing, so there is never a second exec', async (t) => {
  const first = reexecArgv('run', { execPath: NODE, execArgv: [], argv: [NODE, SCRIPT, 'run'] })!;
  // What Node makes of that argv: the runtime flags before the script are its execArgv.
  const again = { execPath: NODE, execArgv: first.argv.slice(1, first.argv.indexOf(SCRIPT)), argv: [NODE, SCRIPT, 'run'] };
  t.equal(reexecArgv('run', again), null);
  t.equal(
    reexecArgv('run', { execPath: NODE, execArgv: [...NODE_FLAGS.run], argv: [NODE, SCRIPT, 'run'] }),
    null,
    'nor through the launcher',
  );
});

interface Execed {
  file: string;
  args: readonly string[];
  env: NodeJS.ProcessEnv;
}

/** A process started as `node kubeboot.cjs run` whose execve records what it was asked, and a logger that records the lines. */
function fakeProcess(over: Partial<Exec> = {}) {
  const execs: Execed[] = [];
  const lines: string[] = [];
  const record = (message: string) => void lines.push(message);
  const logger: Log = { error: record, warn: record, info: record, debug: record };
  const execve = ((file, args = [], env = {}) => void execs.push({ file, args, env })) as Exec['execve'];
  const proc: Exec = { execPath: NODE, execArgv: [], argv: [NODE, SCRIPT, 'run'], execve, ...over };
  return { proc, execs, lines, logger };
}

t.test('the exec keeps the environment (NOTIFY_SOCKET, WATCHDOG_PID: the pid does not change)', async (t) => {
  const { proc, execs, logger } = fakeProcess();
  const env = { NOTIFY_SOCKET: '/run/systemd/notify', WATCHDOG_PID: '42', WATCHDOG_USEC: '120000000' };
  ensureNodeFlags('run', proc, env, logger);
  t.same(execs, [{ file: NODE, args: [NODE, '--max-semi-space-size=1', '--lite-mode', SCRIPT, 'run'], env }]);
});

t.test('it runs on without the flags, saying why, where it cannot exec', async (t) => {
  const none = fakeProcess({ execve: undefined });
  ensureNodeFlags('run', none.proc, {}, none.logger);
  t.match(none.lines, [/no process\.execve on this platform; running without --max-semi-space-size=1 --lite-mode/]);

  const ipc = fakeProcess({ channel: {} });
  ensureNodeFlags('approver', ipc.proc, {}, ipc.logger);
  t.same(ipc.execs, [], 'an IPC channel would not survive the exec');
  t.match(ipc.lines, [/IPC channel/]);

  const failing = fakeProcess({
    execve: (() => {
      throw Object.assign(new Error('ENOENT: no such file or directory, execve'), { code: 'ENOENT' });
    }) as Exec['execve'],
  });
  ensureNodeFlags('run', failing.proc, {}, failing.logger);
  t.match(failing.lines.at(-1), /execve failed \(ENOENT.*\); running without/);
});

t.test('nothing happens when the flags are there', async (t) => {
  const { proc, execs, lines, logger } = fakeProcess({ execArgv: ['--disable-sigusr1', ...NODE_FLAGS.run] });
  ensureNodeFlags('run', proc, {}, logger);
  t.same([execs, lines], [[], []]);
});

/** A process's argv as the kernel shows it. */
function cmdline(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
}

t.test('`node kubeboot.cjs run`, no flags given: the same pid ends up with them, and its pass without them', async (t) => {
  const dir = t.testdir();
  const config = join(dir, 'config.yaml');
  // Nothing to bootstrap with: the daemon stays up, its pass reporting the missing bootstrap kubeconfig.
  writeFileSync(
    config,
    [
      'nodeName: n1',
      `bootstrapKubeconfig: ${dir}/bootstrap-kubelet.conf`,
      `stateDir: ${dir}/state`,
      `kubelet: {kubeconfig: ${dir}/kubelet.conf, certDir: ${dir}/pki}`,
      'kubeProxy: {enabled: false}',
      '',
    ].join('\n'),
  );
  const daemon = startWatched(process.execPath, [bundle, 'run', '--config', config, '--listen', 'off', '--log-level', 'debug'], {
    PATH: process.env.PATH,
    KUBEBOOT_LOG_FORMAT: 'json',
  });
  t.teardown(() => void daemon.child.kill('SIGKILL'));
  const pid = daemon.child.pid!;
  await daemon.waitForOutput(/executing itself again with them \(same pid\)/, 30_000);
  let children: number[] = [];
  for (let i = 0; i < 300 && children.length === 0; i++) {
    await sleep(100);
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  }
  t.same(cmdline(pid), [process.execPath, ...NODE_FLAGS.run, bundle, 'run', '--config', config, '--listen', 'off', '--log-level', 'debug']);
  t.equal(children.length, 1, 'a pass started');
  t.same(cmdline(children[0]!).slice(0, 2), [process.execPath, bundle], 'the pass runs without the resting flags');
  t.equal(daemon.output().match(/executing itself again/g)?.length, 1, 'exactly one exec');
  daemon.child.kill('SIGTERM');
  t.equal((await daemon.done).code, 0, 'and SIGTERM still stops it cleanly');
});
