/**
 * `kubeboot run`: the daemon, with SIGHUP = reload + renew and SIGUSR2 =
 * `kubeboot renew`. Not SIGUSR1: Node opens its inspector on SIGUSR1, which
 * must never happen in a root process holding keys (the packaged launcher
 * also passes --disable-sigusr1).
 */
import type { Config } from '../config/types.js';
import { ExitCode } from '../errors.js';
import type { Logger } from '../log.js';
import { Daemon } from '../daemon/daemon.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';
import { takeRenewRequest } from './renew.js';

export async function runDaemonCommand(config: Config, logger: Logger, signal: AbortSignal, reload: () => Promise<Config>): Promise<number> {
  await sweepTempFiles(writtenDirs(config), logger);
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
