/**
 * `kubeboot renew [--identity NAME]`: a running daemon (found and verified
 * through its pid file, see daemon/control.ts) is asked through a request file and SIGUSR2; with no daemon, the
 * renewal is done here and now.
 */
import { openPass, renewNode } from '../bootstrap/pass.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';
import type { Config } from '../config/types.js';
import { ExitCode, InputError } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import type { Logger } from '../log.js';
import { writeFileAtomic } from '../store/atomic.js';
import { renewRequestFile, runningDaemon } from '../daemon/control.js';
import { systemClock } from '../time/clock.js';

export async function runRenew(config: Config, logger: Logger, only: string | null, signal: AbortSignal): Promise<number> {
  const identities = identitiesFor(config);
  if (only !== null && !identities.some((i) => i.name === only)) {
    throw new InputError(
      'command line',
      '--identity',
      `${only} is not enabled in this configuration (enabled: ${identities.map((i) => i.name).join(', ')})`,
    );
  }
  const pid = await runningDaemon(config.stateDir);
  if (pid !== null) {
    await writeFileAtomic(renewRequestFile(config.stateDir), `${only ?? 'all'}\n`, { mode: 0o600 });
    process.kill(pid, 'SIGUSR2');
    logger.info(`asked the running daemon (pid ${pid}) to renew ${only ?? 'all identities'}`);
    return ExitCode.ok;
  }
  // No daemon: what an interrupted run left behind is ours to clear, as bootstrap and run do.
  await sweepTempFiles(writtenDirs(config), logger);
  // Bootstrapping instead joins with --server/--token as `kubeboot bootstrap` does.
  const pass = await openPass(config, { logger, clock: systemClock, signal }, { join: true });
  await renewNode(pass, only);
  return ExitCode.ok;
}
