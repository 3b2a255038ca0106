/**
 * `kubeboot renew [--identity NAME]`: a running daemon (found and verified
 * through its pid file, see daemon/control.ts) is asked through a request file and SIGUSR2; with no daemon, the
 * renewal is done here and now.
 */
import { readFile, unlink } from 'node:fs/promises';
import path from 'node:path';
import { bootstrapNode, recoverNode } from '../bootstrap/flow.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';
import { allOf, assessNode, isNodeCredential } from '../credential/assess.js';
import { renewIdentity } from '../credential/renew.js';
import type { Config } from '../config/types.js';
import { ExitCode, InputError } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import type { IdentityName } from '../identity.js';
import type { Logger } from '../log.js';
import { runIdentityHooks } from '../daemon/hooks.js';
import { oldCredentialsToKeep, pruneOld } from '../store/cert-store.js';
import { writeFileAtomic } from '../store/atomic.js';
import { runningDaemon } from '../daemon/control.js';
import { systemClock } from '../time/clock.js';

function requestFile(stateDir: string): string {
  return path.join(stateDir, 'renew-request');
}

/** The daemon's side: which identities were asked for (and forget the request). */
export async function takeRenewRequest(stateDir: string): Promise<IdentityName[] | 'all'> {
  try {
    const text = (await readFile(requestFile(stateDir), 'utf8')).trim();
    await unlink(requestFile(stateDir));
    return text === '' || text === 'all' ? 'all' : (text.split(/\s+/) as IdentityName[]);
  } catch {
    return 'all';
  }
}

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
    await writeFileAtomic(requestFile(config.stateDir), `${only ?? 'all'}\n`, { mode: 0o600 });
    process.kill(pid, 'SIGUSR2');
    logger.info(`asked the running daemon (pid ${pid}) to renew ${only ?? 'all identities'}`);
    return ExitCode.ok;
  }
  // No daemon: what an interrupted run left behind is ours to clear, as bootstrap and run do.
  await sweepTempFiles(writtenDirs(config), logger);
  await recoverNode(config, { logger, clock: systemClock });
  const node = await assessNode(config, systemClock.now());
  const deps = { logger, clock: systemClock, signal };
  if (!isNodeCredential(node.kubelet)) {
    logger.info(
      `no daemon running and the kubelet credential is not usable (${node.kubelet.state === 'unusable' ? node.kubelet.reason : 'no cluster'}); bootstrapping instead`,
    );
    await bootstrapNode(config, deps);
    return ExitCode.ok;
  }
  for (const own of allOf(node).filter((a) => only === null || a.identity.name === only)) {
    await renewIdentity(config, own, node.kubelet, deps);
    await pruneOld(own.identity, oldCredentialsToKeep(own.identity));
    await runIdentityHooks(own.identity, logger, { timeoutMs: config.renewal.hookTimeout * 1000 });
  }
  return ExitCode.ok;
}
