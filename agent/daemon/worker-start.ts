/**
 * How a worker process of `kubeboot run` is started, and the daemon's first
 * worker started early.
 *
 * A daemon always starts a worker on its first turn (every identity is due at
 * start, schedule.ts). Forked only then, the worker's own start-up (Node,
 * then undici, @peculiar/x509, yaml: about 0.3 s on a small node) comes
 * after the daemon's (its configuration, its modules: about 0.15 s), and a
 * first boot's kubelet waits for both. Forked as `kubeboot run` begins, before
 * the daemon loads anything, the two start side by side and the daemon's
 * first turn takes this worker instead of forking one.
 *
 * The early worker reads and writes nothing before the daemon's `start`
 * message (worker.ts), so one that is never taken (bad configuration, another
 * daemon on the state directory, `run --help`) is simply killed.
 *
 * Kept small on purpose: cli/main.ts imports it before the rest of the CLI.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { flagName, NODE_FLAGS, reexecArgv } from '../node-flags.js';

/** The hidden command the daemon starts a worker with (never typed by a person). */
export const WORKER_COMMAND = '__worker';

/** What systemd gives the daemon alone: a worker never talks to systemd itself. */
const DAEMON_ONLY_ENV = ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID'];

/** Runtime flags for a daemon that only rests (node-flags.ts); a worker allocates in a burst, works and ends. */
const RESTING_ONLY_FLAGS = new Set(NODE_FLAGS.run.map(flagName));

/** A worker: this same script, with the runtime flags it was started with except the resting daemon's. */
export function startWorkerProcess(env: NodeJS.ProcessEnv = process.env): ChildProcess {
  const workerEnv = { ...env };
  for (const name of DAEMON_ONLY_ENV) delete workerEnv[name];
  return fork(process.argv[1]!, [WORKER_COMMAND], {
    execArgv: process.execArgv.filter((a) => !RESTING_ONLY_FLAGS.has(flagName(a))),
    env: workerEnv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    serialization: 'json',
  });
}

/**
 * Whether `kubeboot <argv>` is a daemon that will keep this process and so
 * take an early worker: the `run` command, not asking for help, and started
 * with its runtime flags (without them it executes itself again, node-flags.ts,
 * and the process started again forks its own).
 */
export function startsWorkerEarly(argv: readonly string[], execArgv: readonly string[], nodeOptions: string | undefined): boolean {
  if (argv[0] !== 'run' || argv.some((a) => a === '--help' || a === '-h' || a === '--version')) return false;
  return reexecArgv('run', { execPath: '', execArgv, argv: [] }, nodeOptions) === null;
}

/**
 * In a worker, before it loads anything: SIGHUP and SIGUSR2 are meant for the
 * daemon (`systemctl kill -s HUP`, a closed terminal reach the whole cgroup or
 * process group), and their default action would kill the worker.
 */
export function ignoreDaemonSignals(): void {
  process.on('SIGHUP', () => undefined);
  process.on('SIGUSR2', () => undefined);
}

let early: ChildProcess | null = null;

/** Until the daemon takes it nobody else listens: an 'error' (a spawn that failed) would be thrown in the daemon. */
const absorbError = (): void => undefined;

/** How this process was started, and how a worker is forked (tests pass stand-ins). */
export interface EarlyStart {
  execArgv: readonly string[];
  nodeOptions: string | undefined;
  fork: () => ChildProcess;
}

/** `kubeboot run` begins: its first worker is forked now (see above). Returns whether it was. */
export function startFirstWorkerEarly(
  argv: readonly string[],
  o: EarlyStart = { execArgv: process.execArgv, nodeOptions: process.env.NODE_OPTIONS, fork: () => startWorkerProcess() },
): boolean {
  if (early !== null || !startsWorkerEarly(argv, o.execArgv, o.nodeOptions)) return false;
  early = o.fork().on('error', absorbError);
  return true;
}

/** The daemon's first turn: the early worker once, if it is still there to take; else (and later) the daemon forks one. */
export function takeEarlyWorker(): ChildProcess | null {
  const child = early;
  early = null;
  if (child === null) return null;
  child.off('error', absorbError);
  // One that ended (or failed to start) meanwhile: its 'close' went unheard, and a daemon
  // waiting for it would wait on a process that is gone.
  if (child.exitCode !== null || child.signalCode !== null || !child.connected) {
    child.kill('SIGKILL');
    return null;
  }
  return child;
}

/** The command ends without a daemon having taken it: the early worker, which has read nothing, goes. */
export function discardEarlyWorker(): void {
  early?.kill('SIGKILL');
  early = null;
}
