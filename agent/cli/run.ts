/**
 * `kubeboot run`: the daemon, with SIGHUP = reload + renew and SIGUSR2 =
 * `kubeboot renew`. Not SIGUSR1: Node opens its inspector on SIGUSR1, which
 * must never happen in a root process holding keys (the packaged launcher
 * also passes --disable-sigusr1).
 *
 * This process is the daemon (daemon/daemon.ts), the agent's only sleeper; the
 * steps it schedules run in a worker, a child process of the same executable
 * (daemon/worker.ts).
 */
import type { Config } from '../config/types.js';
import { ExitCode, KubebootError } from '../errors.js';
import type { Log } from '../log-lines.js';
import { isLoopbackListen } from '../service/http.js';
import { runningDaemon, takeRenewRequest, WORKER_PID_FILE } from '../daemon/control.js';
import { Daemon } from '../daemon/daemon.js';
import { startWorkerProcess, takeEarlyWorker } from '../daemon/worker-start.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';

export async function runDaemonCommand(config: Config, logger: Log, signal: AbortSignal, reload: () => Promise<Config>): Promise<number> {
  // Two daemons on one state directory would race for the same files (and the
  // sweep below would delete the other's writes in flight); so would a worker
  // a killed daemon left behind, until it notices and stops.
  for (const file of [undefined, WORKER_PID_FILE]) {
    const other = await runningDaemon(config.stateDir, file);
    if (other !== null)
      throw new KubebootError(
        `another kubeboot run (pid ${other}) already keeps the credentials of ${config.stateDir}; stop it first (systemctl stop kubeboot)`,
      );
  }
  await sweepTempFiles(writtenDirs(config), logger);
  if (config.listen !== null && !isLoopbackListen(config.listen)) {
    logger.warn(
      `listen ${config.listen} is not a loopback address: /healthz, /readyz and /metrics are unauthenticated and reachable from other hosts`,
    );
  }
  const daemon = new Daemon({ config, logger, signal, reload, startWorker: () => takeEarlyWorker() ?? startWorkerProcess() });
  const onHup = (): void => void daemon.reloadAndRenew();
  const onRenewRequest = (): void => {
    void takeRenewRequest(daemon.config.stateDir).then((names) => {
      logger.info(`renewal requested for ${names === 'all' ? 'all identities' : names.join(', ')}`);
      daemon.nudge(names, true);
    });
  };
  process.on('SIGHUP', onHup);
  process.on('SIGUSR2', onRenewRequest);
  try {
    return (await daemon.run()) || ExitCode.ok;
  } finally {
    process.off('SIGHUP', onHup);
    process.off('SIGUSR2', onRenewRequest);
  }
}
