/**
 * `kubeboot approver`: its flags, as config/ parsed them, made into what the
 * approver runs with (approver/run.ts), which serves until SIGTERM.
 */
import type { ApproverPolicy } from '../approver/rules/rule.js';
import { runApprover as run } from '../approver/run.js';
import type { Config } from '../config/types.js';
import { parseByteSize } from '../config/values.js';
import type { Logger } from '../log.js';
import { pcr7Policies } from '../tpm/pcr-policy.js';

export function approverPolicy(config: Config): ApproverPolicy {
  const a = config.approver;
  return {
    kubeProxy: { commonName: config.kubeProxy.commonName, organizations: config.kubeProxy.organizations },
    maxExpirationSeconds: a.maxExpiration,
    maxProxyServingExpirationSeconds: a.maxProxyServingExpiration,
    keyAlgorithms: a.keyAlgorithms,
    serving: { enabled: a.kubeletServing, dnsSuffixes: a.servingDnsSuffixes, ipCidrs: a.servingIpCidrs },
    kubeletClient: { enabled: a.kubeletClient, unboundTokens: a.unsafeApproveUnboundTokens, protectNodes: a.protectNodes },
    inventory: a.inventory,
    tpmPcr7: pcr7Policies(a.tpmPcr7),
  };
}

/** A size the option's check already accepted (agent/config/options.ts). */
function checkedByteSize(text: string): number {
  const size = parseByteSize(text);
  if (!size.ok) throw new Error(`max-pending-per-requester: ${size.problem}`);
  return size.value;
}

export async function runApprover(config: Config, logger: Logger, signal: AbortSignal): Promise<number> {
  const flags = config.approver;
  return run(
    { flags, policy: approverPolicy(config), maxPendingPerRequester: checkedByteSize(flags.maxPendingPerRequester), env: process.env },
    logger,
    signal,
  );
}
