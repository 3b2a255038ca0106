/**
 * `kubeboot run`: the daemon, with SIGHUP = reload + renew and SIGUSR2 =
 * `kubeboot renew`. Not SIGUSR1: Node opens its inspector on SIGUSR1, which
 * must never happen in a root process holding keys (the packaged launcher
 * also passes --disable-sigusr1).
 */
import type { Config } from '../config/types.js';
import { ExitCode, KubebootError } from '../errors.js';
import type { Logger } from '../log.js';
import { Daemon } from '../daemon/daemon.js';
import { isLoopbackListen } from '../daemon/http.js';
import { runningDaemon } from '../daemon/control.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';
import { takeRenewRequest } from './renew.js';
import { openPass } from '../bootstrap/pass.js';
import { joinRequested } from '../join/prepare.js';
import { systemClock } from '../time/clock.js';

export async function runDaemonCommand(
  config: Config,
  logger: Logger,
  signal: AbortSignal,
  reload: () => Promise<Config>,
): Promise<number> {
  // Two daemons on one state directory would race for the same files (and the
  // sweep below would delete the other's writes in flight).
  const other = await runningDaemon(config.stateDir);
  if (other !== null)
    throw new KubebootError(
      `another kubeboot run (pid ${other}) already keeps the credentials of ${config.stateDir}; stop it first (systemctl stop kubeboot)`,
    );
  await sweepTempFiles(writtenDirs(config), logger);
  if (config.listen !== null && !isLoopbackListen(config.listen)) {
    logger.warn(
      `listen ${config.listen} is not a loopback address: /healthz, /readyz and /metrics are unauthenticated and reachable from other hosts`,
    );
  }
  // --server/--token: a pass that joins writes the bootstrap kubeconfig the daemon then finds.
  if (joinRequested(config)) await openPass(config, { logger, clock: systemClock, signal }, { join: true });
  const daemon = new Daemon({ config, logger, signal, reload });
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
    await daemon.run();
  } finally {
    process.off('SIGHUP', onHup);
    process.off('SIGUSR2', onRenewRequest);
  }
  return ExitCode.ok;
}
