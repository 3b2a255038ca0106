/** `kubeboot bootstrap`: run the flow once; exit 0 when every enabled identity holds a proven credential. */
import { bootstrapNode, type IdentityOutcome, openPass } from '../bootstrap/pass.js';
import type { Config } from '../config/types.js';
import type { Issued } from '../credential/issue.js';
import { ExitCode } from '../errors.js';
import type { Logger } from '../log.js';
import { runningDaemon } from '../daemon/control.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';
import { systemClock } from '../time/clock.js';

export async function runBootstrap(config: Config, logger: Logger, signal: AbortSignal): Promise<number> {
  // A running daemon's temp file is a write in progress, not a leftover.
  if ((await runningDaemon(config.stateDir)) === null) await sweepTempFiles(writtenDirs(config), logger);
  // --server/--token join inside the pass, only if the kubelet has nothing else to ask with.
  const pass = await openPass(config, { logger, clock: systemClock, signal }, { join: true });
  const report = await bootstrapNode(pass);
  for (const outcome of report.outcomes) logger.info(resultLine(outcome), { identity: outcome.identity, event: 'bootstrap-result' });
  return ExitCode.ok;
}

/** The one line an operator reads per identity; times rounded to what a person can use (3 decimals of a second, whole ms). */
export function resultLine(
  outcome: Pick<IdentityOutcome, 'identity' | 'notAfter'> & {
    issued?: Pick<Issued, 'csrName' | 'waitedSeconds' | 'storeMillis'> | undefined;
  },
): string {
  const issued = outcome.issued;
  return issued
    ? `${outcome.identity}: issued via CSR ${issued.csrName} (approved after ${issued.waitedSeconds.toFixed(3)}s, on disk ${Math.round(issued.storeMillis)} ms later), valid until ${outcome.notAfter?.toISOString()}`
    : `${outcome.identity}: kept the existing credential, valid until ${outcome.notAfter?.toISOString()}`;
}
