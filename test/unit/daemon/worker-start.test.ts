// The daemon's first worker, forked as `kubeboot run` begins
// (daemon/worker-start.ts): when it is, and that one no daemon takes ends
// without a word. The bundle (what the packages ship) is run as a process;
// its use by a running daemon is proven in test/e2e/daemon.test.ts.
import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { join } from 'node:path';
import t from 'tap';
import { NODE_FLAGS } from '../../../agent/node-flags.js';
import {
  discardEarlyWorker,
  startFirstWorkerEarly,
  startsWorkerEarly,
  takeEarlyWorker,
  WORKER_COMMAND,
} from '../../../agent/daemon/worker-start.js';
import type { ChildProcess } from 'node:child_process';
import { startMessage } from '../../../agent/daemon/worker.js';
import { EMPTY_HAND_OVER } from '../../../agent/daemon/worker-protocol.js';
import { bundle, launcherNodeFlags } from '../../support/kubeboot.js';

const RUN_FLAGS = [...NODE_FLAGS.run];

t.test('only `kubeboot run` with its runtime flags forks its first worker early', async (t) => {
  t.ok(startsWorkerEarly(['run', '--config', 'c.yaml'], RUN_FLAGS, undefined), 'run, started by the launcher');
  t.ok(startsWorkerEarly(['run'], [], RUN_FLAGS.join(' ')), 'the flags from NODE_OPTIONS count too');
  t.notOk(startsWorkerEarly(['run'], [], undefined), 'without them it executes itself again first: the new image forks its own');
  t.notOk(startsWorkerEarly(['run', '--help'], RUN_FLAGS, undefined), 'help starts no daemon');
  t.notOk(startsWorkerEarly(['bootstrap'], RUN_FLAGS, undefined), 'one-shot commands have no worker');
  t.notOk(startsWorkerEarly([WORKER_COMMAND], RUN_FLAGS, undefined), 'a worker forks nothing');
});

/** Runs the bundle until every process holding its output has closed it (a worker inherits stderr). */
function runToClose(args: string[], nodeFlags: string[]) {
  const child = spawn(process.execPath, [...nodeFlags, bundle, ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal, stderr })),
  );
  return closed;
}

t.test('a daemon that stops before its first turn takes the early worker away: one line, its own', async (t) => {
  const missing = join(t.testdir(), 'absent.yaml');
  // 'close' waits for the worker too, which shares stderr: left alone it would add
  // "the daemon went away before the worker started" once the daemon exits.
  const { code, stderr } = await runToClose(['run', '--config', missing], launcherNodeFlags('run'));
  t.not(code, 0, 'the daemon fails on its configuration');
  t.same(stderr.trim().split('\n'), [stderr.trim().split('\n')[0]], 'one line on stderr: the worker forked for it said nothing');
  t.match(stderr, /absent\.yaml/, 'the line names the file');
});

t.test('a worker stopped before the daemon starts it has nothing to do; a start message or the daemon leaving still count', async (t) => {
  const stopped = new AbortController();
  const channel = new EventEmitter();
  const waiting = startMessage(stopped.signal, channel);
  channel.emit('message', { kind: 'step', step: { id: 1, target: 'kubelet', force: false } });
  stopped.abort();
  t.equal(await waiting, null, 'SIGTERM before the start: no start, no error (the worker ends with 0)');

  const started = startMessage(new AbortController().signal, channel);
  const start = { kind: 'start', config: {}, records: [], handOver: EMPTY_HAND_OVER, joinFirst: true };
  channel.emit('message', start);
  t.same(await started, start, 'the start message is what it waits for');

  const left = startMessage(new AbortController().signal, channel);
  channel.emit('disconnect');
  await t.rejects(left, /the daemon went away before the worker started/, 'a daemon gone before the start is an error');
});

/** A forked worker as the daemon sees one: connected until it ends; what it was sent to kill it. */
function standIn(): ChildProcess & { killedWith: string[] } {
  const child = Object.assign(new EventEmitter(), {
    exitCode: null as number | null,
    signalCode: null as NodeJS.Signals | null,
    connected: true,
    killedWith: [] as string[],
    kill(signal: string) {
      child.killedWith.push(signal);
      return true;
    },
  });
  return child as unknown as ChildProcess & { killedWith: string[] };
}

const forking = (child: ChildProcess) => ({ execArgv: RUN_FLAGS, nodeOptions: undefined, fork: () => child });

t.test('the daemon takes a living early worker once; later workers it forks itself', async (t) => {
  const child = standIn();
  startFirstWorkerEarly(['run'], forking(child));
  t.equal(takeEarlyWorker(), child, 'taken');
  t.equal(takeEarlyWorker(), null, 'only once');
  t.same(child.killedWith, [], 'not killed');
});

t.test('an early worker that ended before the daemon took it is not taken: the daemon forks another', async (t) => {
  for (const end of [
    // As a ChildProcess ends: exit code and channel first, then 'close'.
    (c: EventEmitter) => {
      Object.assign(c, { exitCode: 1, connected: false });
      c.emit('close', 1, null);
    },
    // A spawn that failed (no channel): with no listener this 'error' would have been thrown in the daemon.
    (c: EventEmitter) => {
      Object.assign(c, { connected: false });
      c.emit('error', new Error('spawn EAGAIN'));
    },
  ]) {
    const child = standIn();
    startFirstWorkerEarly(['run'], forking(child));
    end(child);
    t.equal(takeEarlyWorker(), null, 'not taken');
    t.same(child.killedWith, ['SIGKILL'], 'made sure it is gone');
  }
  const unseen = standIn();
  startFirstWorkerEarly(['run'], forking(unseen));
  Object.assign(unseen, { connected: false });
  t.equal(takeEarlyWorker(), null, 'nor one whose channel is closed, its close event not yet seen');
});

t.test('one never taken is killed when the command ends', async (t) => {
  const child = standIn();
  startFirstWorkerEarly(['run'], forking(child));
  discardEarlyWorker();
  t.same(child.killedWith, ['SIGKILL']);
  t.equal(takeEarlyWorker(), null);
});
