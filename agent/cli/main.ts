/**
 * kubeboot's entry point: parse configuration, dispatch the command, turn
 * every failure into one line on stderr and its documented exit code.
 */
import os from 'node:os';
import path from 'node:path';
import type { Loaded } from '../config/load.js';
import type { Config } from '../config/types.js';
import { createLineLogger, type Log } from '../log-lines.js';
import { ExitCode, exitCodeOf, KubebootError } from '../errors.js';
import { VERSION } from '../version.js';
import { readOptional } from '../read-optional.js';
import { fatalText } from './fatal.js';
import { discardEarlyWorker, ignoreDaemonSignals, startFirstWorkerEarly, WORKER_COMMAND } from '../daemon/worker-start.js';
import { ensureNodeFlags } from '../node-flags.js';

async function main(argv: string[]): Promise<number> {
  // A worker of `kubeboot run` gets its configuration from the daemon, not from argv (daemon/worker.ts).
  if (argv[0] === WORKER_COMMAND && argv.length === 1) {
    ignoreDaemonSignals();
    return (await import('../daemon/worker.js')).runWorkerProcess();
  }
  // Before anything else loads: `kubeboot run`'s first worker starts beside the daemon (daemon/worker-start.ts).
  // A SIGTERM while the daemon loads its configuration is kept for it (stopOnSignals), not fatal: a daemon
  // killed by it would leave the early worker to find its channel gone.
  if (startFirstWorkerEarly(argv)) for (const signal of STOP_SIGNALS) process.on(signal, keepSignal);
  const { loadConfig } = await import('../config/load.js');
  const load = () => loadConfig({ argv, env: process.env, readFile: readOptional, hostname: os.hostname() });
  const loaded = await load();
  if (loaded.version) {
    process.stdout.write(`kubeboot ${VERSION} (node ${process.version})\n`);
    return ExitCode.ok;
  }
  if (loaded.help && loaded.command !== null) {
    process.stdout.write((await import('./help.js')).commandHelpText(loaded.command));
    return ExitCode.ok;
  }
  if (loaded.help || loaded.command === null) {
    process.stdout.write((await import('./help.js')).helpText());
    return loaded.help ? ExitCode.ok : ExitCode.badInput;
  }
  const { config } = loaded;
  if (loaded.command === 'run') return runDaemon(config, load);
  if (loaded.command === 'approver') return runApproverCommand(config, loaded.extraFlags.given['kubeconfig']);
  const { createLogger } = await import('../log.js');
  const logger = createLogger({ level: config.log.level, format: config.log.format });
  if (config.log.level === 'debug') (await import('../kube/trace.js')).traceRequests(logger);
  const stop = stopOnSignals(logger);
  try {
    // Commands load their modules on demand: `--version` and `status` stay quick.
    switch (loaded.command) {
      case 'bootstrap':
        return await (await import('./bootstrap.js')).runBootstrap(config, logger, stop.signal);
      case 'check':
        return await (await import('./check.js')).runCheck(config, logger, stop.signal);
      case 'status':
        return await (await import('./status.js')).runStatus(config, loaded.extraFlags.output);
      case 'renew':
        return await (await import('./renew.js')).runRenew(config, logger, loaded.extraFlags.identity, stop.signal);
      case 'wait':
        return await (await import('./wait.js')).runWait(config, logger, stop.signal, {
          only: loaded.extraFlags.identity,
          timeout: loaded.extraFlags.timeout,
        });
      case 'approver-kubeconfig':
        return await (await import('./approver-kubeconfig.js')).runApproverKubeconfig(
          config,
          loaded.extraFlags.given,
          process.env,
          logger,
          stop.signal,
        );
      case 'token':
        return await (await import('./token.js')).runToken(
          loaded.positionals,
          loaded.extraFlags.given,
          loaded.extraFlags.output,
          process.env,
        );
      case 'node':
        return await (await import('./node.js')).runNode(
          loaded.positionals,
          loaded.extraFlags.given,
          loaded.extraFlags.output,
          process.env,
        );
      case 'records':
        return await (await import('./records.js')).runRecords(loaded.positionals, loaded.extraFlags.given, process.env);
      case 'ca-rotation':
        return await (await import('./ca-rotation.js')).runCaRotation(
          loaded.positionals,
          loaded.extraFlags.given,
          loaded.extraFlags.output,
          process.env,
        );
      case 'tpm':
        return await (await import('./tpm.js')).runTpm(loaded.positionals, loaded.extraFlags.given, loaded.extraFlags.output);
      case 'join-command':
      case 'user-data':
        return await (await import('./user-data.js')).runUserData(loaded.command, config, loaded.extraFlags.given, process.env);
    }
  } finally {
    await new Promise<void>((resolve) => logger.on('finish', resolve).end());
  }
}

/**
 * `kubeboot run` rests between passes with no logging library loaded: its
 * lines come from log-lines.ts (the same lines winston writes elsewhere).
 */
async function runDaemon(config: Config, load: () => Promise<Loaded>): Promise<number> {
  const logger = createLineLogger({ level: config.log.level, format: config.log.format });
  ensureNodeFlags('run', process, process.env, logger);
  const stop = stopOnSignals(logger);
  return (await import('./run.js')).runDaemonCommand(config, logger, stop.signal, async () => (await load()).config);
}

/**
 * `kubeboot approver` writes a line per decision: log-lines.ts writes each
 * straight to stderr (the same lines winston writes elsewhere), without
 * winston's stream pipeline per line, which cost 9-15 % of its CPU in a CSR
 * storm. Nothing is buffered, so no line is lost at exit.
 */
async function runApproverCommand(config: Config, kubeconfig: unknown): Promise<number> {
  const logger = createLineLogger({ level: config.log.level, format: config.log.format });
  if (config.log.level === 'debug') (await import('../kube/trace.js')).traceRequests(logger);
  // `--kubeconfig` is the approver's own, as for kubectl; the file key is approver.kubeconfig.
  if (typeof kubeconfig === 'string') config.approver.kubeconfig = path.resolve(kubeconfig);
  ensureNodeFlags('approver', process, process.env, logger);
  const stop = stopOnSignals(logger);
  return (await import('./approver.js')).runApprover(config, logger, stop.signal);
}

/** SIGTERM and SIGINT abort the command's work; each command ends as it does on any abort. */
function stopOnSignals(logger: Log): AbortController {
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    logger.info(`received ${signal}; stopping`);
    stop.abort(new KubebootError(`interrupted by ${signal}`));
  };
  for (const signal of STOP_SIGNALS) {
    process.once(signal, onSignal);
    process.off(signal, keepSignal);
  }
  for (const signal of pendingSignals.splice(0)) onSignal(signal);
  return stop;
}

const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const;

/** Stop signals that came before the command's own handlers (`kubeboot run` loading its configuration). */
const pendingSignals: NodeJS.Signals[] = [];
function keepSignal(signal: NodeJS.Signals): void {
  pendingSignals.push(signal);
}

main(process.argv.slice(2))
  .then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(fatalText(err, Boolean(process.env.KUBEBOOT_DEBUG)));
      process.exitCode = exitCodeOf(err);
    },
  )
  // An early worker not taken holds the IPC channel that keeps this process alive.
  .finally(discardEarlyWorker);
