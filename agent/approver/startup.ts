/**
 * What the approver says once at start about how it was set up: flags that
 * weaken or do nothing, and whether kube-controller-manager still approves
 * kubelet client CSRs itself (or, with kubelet client approval off, whether
 * anything does).
 */
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import { MIGRATE_COMMAND } from '../records/legacy.js';
import { systemClock } from '../time/clock.js';
import { kcmAutoApproval, kcmAutoApprovalMonitor, kcmAutoApprovalProblem, type KcmAutoApproval } from './kcm-bindings.js';

/** The flags the start-up lines read. */
export interface StartupFlags {
  kubeletServing: boolean;
  servingIpCidrs: readonly string[];
  kubeletClient: boolean;
  unsafeApproveUnboundTokens: boolean;
  inventory: boolean;
  tpmPcr7: readonly string[];
}

/**
 * What to say at start when kubelet client approval is off: with the shipped
 * RBAC nothing else approves a node's first certificate or its renewals, so
 * every node would stop at `notAfter`. Null while kube-controller-manager
 * still approves them through a binding (the operator's choice).
 */
export function kubeletClientOffProblem(kcm: Pick<KcmAutoApproval, 'grants'>): string | null {
  if (kcm.grants.length > 0) return null;
  return "KUBELET CLIENT APPROVAL IS OFF (--no-approve-kubelet-client) and the authorizer lets kube-controller-manager approve none: no node gets its first kubelet client certificate or renews it, and every node drops off the cluster at its certificate's notAfter; drop --no-approve-kubelet-client (approver.kubeletClient: false in the config file)";
}

/** ConfigMap records of an earlier release still in `kubeboot`: what the approver does with them, and the command that moves them. */
export function legacyRecordsProblem(names: readonly string[]): string {
  return `unmigrated ConfigMap records ${names.map((n) => `kubeboot/${n}`).join(', ')}: never trusted (a revocation there still refuses its node, a token binding there refuses its token; nothing else is read); move them with: ${MIGRATE_COMMAND}`;
}

/** Flags that weaken a check or do nothing as given, one line each. */
export function warnFlags(flags: StartupFlags, logger: Logger): void {
  if (flags.kubeletServing && flags.servingIpCidrs.length === 0) {
    // status.addresses is written by the kubelet itself: without CIDRs, a compromised node can claim another's IP.
    logger.warn(
      "serving approval is on without --serving-ip-cidr: IP SANs are checked only against the Node's own status.addresses, which its kubelet writes; set the node network CIDRs",
    );
  }
  if (flags.unsafeApproveUnboundTokens)
    logger.warn(
      flags.kubeletClient
        ? "--unsafe-approve-unbound-tokens: a bootstrap token with no tokenbindings.kubeboot.io/<id> binding gets a kubelet certificate for any node name not yet registered, as many as it asks for; whoever reads a node pool's user-data can mint node identities"
        : '--unsafe-approve-unbound-tokens has no effect with --no-approve-kubelet-client',
    );
  if (flags.inventory && !flags.kubeletClient && !flags.kubeletServing)
    logger.warn('--inventory has no effect with --no-approve-kubelet-client and without --approve-kubelet-serving');
  // Only names the inventory binds to a TPM are quoted; without it no PCR is ever read.
  if (flags.tpmPcr7.length > 0 && !(flags.inventory && flags.kubeletClient))
    logger.warn('--tpm-pcr7 has no effect without --inventory and kubelet client approval: only TPM-enrolled names quote their PCRs');
}

/**
 * Asks the authorizer once whether kube-controller-manager still approves
 * kubelet client CSRs, and says what that means; returns the monitor
 * /readyz reads again (null with kubelet client approval off).
 */
export async function checkKcm(
  client: KubeClient,
  kubeletClient: boolean,
  logger: Logger,
  signal: AbortSignal,
): Promise<ReturnType<typeof kcmAutoApprovalMonitor> | null> {
  const kcm = kubeletClient ? kcmAutoApprovalMonitor(() => kcmAutoApproval(client, signal), systemClock) : null;
  try {
    if (kcm === null) {
      const off = kubeletClientOffProblem(await kcmAutoApproval(client, signal));
      if (off !== null) logger.error(off);
    } else {
      const problem = kcmAutoApprovalProblem(await kcm.look());
      if (problem !== null) logger.warn(problem);
    }
  } catch (err) {
    logger.warn(
      `could not ask the authorizer whether kube-controller-manager still approves kubelet client CSRs itself (apply packaging/manifests/approver/approver-rbac.yaml): ${(err as Error).message}`,
    );
  }
  return kcm;
}
