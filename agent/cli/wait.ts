/**
 * `kubeboot wait [--identity NAME] [--timeout D]`: returns once the identity
 * (or every enabled one) holds a valid credential on disk. It reads files
 * only — no API request, no credential of its own — so a unit can run it as
 * `ExecStartPre=` and start exactly when its own certificate is there
 * (kube-proxy waits for its CSR's approval; the kubelet never waits for it).
 * Every certificate kubeboot writes was proven with a SelfSubjectReview first.
 */
import type { Config } from '../config/types.js';
import { formatDuration } from '../config/values.js';
import { allOf, assessNode, type Assessment } from '../credential/assess.js';
import { describePending, pendingCsr } from '../credential/pending-csr.js';
import { ExitCode, InputError, TimedOutError } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import type { IdentityName } from '../identity.js';
import type { Logger } from '../log.js';
import { systemClock, type Clock } from '../time/clock.js';
import { pause } from '../time/timer.js';

/** How often the files are read again; reading them costs well under a millisecond of CPU. */
const RECHECK_MS = 1_000;

export interface WaitOptions {
  only: IdentityName | null;
  /** Seconds; null waits as long as it takes. */
  timeout: number | null;
  clock?: Clock;
}

export async function runWait(config: Config, logger: Logger, signal: AbortSignal, options: WaitOptions): Promise<number> {
  const clock = options.clock ?? systemClock;
  const now = (): Date => clock.now();
  const enabled = identitiesFor(config);
  if (options.only !== null && !enabled.some((i) => i.name === options.only)) {
    throw new InputError(
      'command line',
      '--identity',
      `${options.only} is not enabled in this configuration (enabled: ${enabled.map((i) => i.name).join(', ')})`,
    );
  }
  const wanted = (all: Assessment[]) => all.filter((a) => options.only === null || a.identity.name === options.only);
  const started = now().getTime();
  const deadline = options.timeout === null ? null : started + options.timeout * 1000;
  let nextNotice = started;
  for (;;) {
    const missing = wanted(allOf(await assessNode(config, now()))).filter((a) => a.state !== 'usable');
    if (missing.length === 0) {
      logger.info(`${options.only ?? 'every identity'}: valid credential on disk`);
      return ExitCode.ok;
    }
    const at = now().getTime();
    if (at >= nextNotice || (deadline !== null && at >= deadline)) {
      const reasons = await Promise.all(missing.map(async (a) => `${a.identity.name}: ${await whyMissing(config, a, now())}`));
      if (deadline !== null && at >= deadline)
        throw new TimedOutError(
          `timed out after ${formatDuration(options.timeout!)} waiting for a valid credential: ${reasons.join('; ')}`,
        );
      logger.info(`waiting for ${reasons.join('; ')}`);
      nextNotice = at + config.pendingNoticeInterval * 1000;
    }
    await pause(deadline === null ? RECHECK_MS : Math.max(0, Math.min(RECHECK_MS, deadline - at)), clock, signal);
  }
}

async function whyMissing(config: Config, a: Assessment, now: Date): Promise<string> {
  const pending = await pendingCsr(config.stateDir, a.identity);
  const reason = a.state === 'unusable' ? a.reason : 'valid';
  return pending ? `${describePending(pending, now)} (${reason})` : reason;
}
