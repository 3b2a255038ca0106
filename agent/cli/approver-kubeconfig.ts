/**
 * `kubeboot approver-kubeconfig`: the cluster admin makes the kubeconfig
 * `kubeboot approver` runs with (docs/approver.md), in one command:
 * a certificate for `kubeboot:approver` requested, approved and proven with
 * the admin kubeconfig, written 0600 to --approver-kubeconfig.
 */
import path from 'node:path';
import type { Given } from '../config/load.js';
import type { Config } from '../config/types.js';
import { parseDuration } from '../config/values.js';
import { ExitCode, InputError } from '../errors.js';
import { withAdmin } from '../admin/connect.js';
import { APPROVER_USER, issueApproverKubeconfig } from '../admin/approver-kubeconfig.js';
import type { Logger } from '../log.js';
import { ensureDir, writeFileAtomic } from '../store/atomic.js';

/** One year, as kubeadm's client certificates; the signer's --cluster-signing-duration may cap it. */
const DEFAULT_TTL_SECONDS = 365 * 24 * 3600;

export async function runApproverKubeconfig(
  config: Config,
  given: Given,
  env: Record<string, string | undefined>,
  logger: Logger,
  signal: AbortSignal,
): Promise<number> {
  let ttl = DEFAULT_TTL_SECONDS;
  if (given.ttl !== undefined) {
    const parsed = parseDuration(given.ttl);
    if (!parsed.ok) throw new InputError('command line', '--ttl', parsed.problem);
    if (parsed.value < 600) throw new InputError('command line', '--ttl', 'at least 10m (the API rejects shorter)');
    ttl = parsed.value;
  }
  const out = config.approver.kubeconfig;
  const issued = await withAdmin(given, env, `issue a ${APPROVER_USER} client certificate (create and approve a CSR)`, (admin) =>
    issueApproverKubeconfig(admin, { keyAlgorithm: config.keyAlgorithm, expirationSeconds: ttl, logger, signal }),
  );
  await ensureDir(path.dirname(out), 0o700);
  await writeFileAtomic(out, issued.text, { mode: 0o600 });
  process.stdout.write(
    `wrote ${out}: user ${APPROVER_USER}, valid until ${issued.notAfter.toISOString()} (CSR ${issued.csrName}); make a new one before then\n`,
  );
  return ExitCode.ok;
}
