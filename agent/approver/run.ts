/**
 * `kubeboot approver`: the cluster-side CSR approver. Connects (kubeconfig or
 * in-cluster), serves /healthz, /readyz and /metrics, tells systemd READY
 * once the first CSR list is in, and runs until SIGTERM, which releases the
 * Lease so a standby takes over at once.
 */
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { CertificateController } from './controller.js';
import { connect } from './connect.js';
import { kcmAutoApproval, kcmAutoApprovalMonitor, kcmAutoApprovalProblem, type KcmAutoApproval } from './kcm-bindings.js';
import { createApproverMetrics } from './metrics.js';
import type { ApproverPolicy } from './rules/rule.js';
import type { Config } from '../config/types.js';
import { parseByteSize } from '../config/values.js';
import { INVENTORY_REF } from '../records/inventory.js';
import { inventoryStatus } from '../records/inventory-status.js';
import { INVENTORY_NAME } from '../records/kinds.js';
import { MIGRATE_COMMAND } from '../records/legacy.js';
import { Counter } from 'prom-client';
import { keepListening, StatusListener } from '../service/http.js';
import { createNotifier, startWatchdog } from '../service/notify.js';
import { ExitCode } from '../errors.js';
import type { Logger } from '../log.js';
import { readOptional } from '../read-optional.js';
import { systemClock } from '../time/clock.js';

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
  };
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
function legacyRecordsProblem(names: readonly string[]): string {
  return `unmigrated ConfigMap records ${names.map((n) => `kubeboot/${n}`).join(', ')}: never trusted (a revocation there still refuses its node, a token binding there refuses its token; nothing else is read); move them with: ${MIGRATE_COMMAND}`;
}

export async function runApprover(config: Config, logger: Logger, signal: AbortSignal): Promise<number> {
  const a = config.approver;
  if (a.kubeletServing && a.servingIpCidrs.length === 0) {
    // status.addresses is written by the kubelet itself: without CIDRs, a compromised node can claim another's IP.
    logger.warn(
      "serving approval is on without --serving-ip-cidr: IP SANs are checked only against the Node's own status.addresses, which its kubelet writes; set the node network CIDRs",
    );
  }
  if (a.unsafeApproveUnboundTokens)
    logger.warn(
      a.kubeletClient
        ? "--unsafe-approve-unbound-tokens: a bootstrap token with no tokenbindings.kubeboot.io/<id> binding gets a kubelet certificate for any node name not yet registered, as many as it asks for; whoever reads a node pool's user-data can mint node identities"
        : '--unsafe-approve-unbound-tokens has no effect without --approve-kubelet-client',
    );
  const { client, source } = await connect({ kubeconfig: a.kubeconfig, env: process.env, readFile: readOptional });
  const kcm = a.kubeletClient ? kcmAutoApprovalMonitor(() => kcmAutoApproval(client, signal), systemClock) : null;
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
  if (a.inventory && !a.kubeletClient && !a.kubeletServing)
    logger.warn('--inventory has no effect without --approve-kubelet-client or --approve-kubelet-serving');
  // matches client-go's leader-election identity: hostname plus a unique suffix, so two processes on one host differ.
  const identity = `${os.hostname()}_${randomUUID()}`;
  const metrics = createApproverMetrics();
  const approver = new CertificateController(
    client,
    {
      policy: approverPolicy(config),
      denyViolations: a.denyViolations,
      resyncMs: a.resyncPeriod * 1000,
      maxPendingPerRequester: checkedByteSize(a.maxPendingPerRequester),
      lease: {
        namespace: a.leaseNamespace,
        name: a.leaseName,
        identity,
        leaseDurationMs: a.leaseDuration * 1000,
        renewDeadlineMs: a.renewDeadline * 1000,
        retryPeriodMs: a.retryPeriod * 1000,
      },
    },
    logger,
    metrics,
  );
  const inventory = a.inventory
    ? inventoryStatus(async () => approver.records.get('inventories', INVENTORY_NAME)?.spec?.nodes ?? null, systemClock)
    : null;
  // Once the records are in: what the inventory holds, and any record of an earlier release still trusted by nothing.
  void approver.records.whenSynced().then(async () => {
    if (signal.aborted) return;
    if (inventory !== null) {
      const seen = await inventory.look();
      if (seen.ok) logger.info(`--inventory: ${INVENTORY_REF}: ${seen.text}`);
      else logger.warn(`--inventory: ${INVENTORY_REF}: ${seen.text}`);
    }
    const legacy = approver.records.legacyPresent();
    if (legacy.length > 0) logger.warn(legacyRecordsProblem(legacy));
  });
  const notifier = createNotifier({ env: process.env, logger });
  const readyStatus = `watching CSRs; lease ${a.leaseNamespace}/${a.leaseName}`;
  let readySent = false;
  // Not a start condition: a port held by someone else is retried by its own loop while the approver works.
  const listenerFailures = new Counter({
    name: 'kubeboot_approver_status_listener_failures_total',
    help: 'Failed attempts to bind the /healthz, /readyz and /metrics listener (retried with back-off; approving goes on meanwhile).',
    registers: [metrics.registry],
  });
  const listener =
    a.listen === null
      ? null
      : new StatusListener(a.listen, {
          healthy: () => !signal.aborted,
          readiness: () => ({
            ready: approver.informer.synced && approver.records.synced,
            detail: [
              `csr cache: ${approver.informer.synced ? `synced (${approver.informer.cache.size} CSRs)` : `not synced: ${approver.informer.notSyncedBecause ?? ''}; not taking part in leader election`}`,
              `records: ${approver.records.synced ? 'synced' : `not synced: ${approver.records.notSyncedBecause ?? ''} (apply packaging/manifests/approver/node-identity.yaml); not taking part in leader election`}`,
              ...(approver.records.legacyPresent().length > 0 ? [legacyRecordsProblem(approver.records.legacyPresent())] : []),
              `leader: ${approver.leader.isLeader() ? 'yes' : 'no'}`,
              ...(kcm === null ? [] : [kcm.detail()]),
              ...(inventory === null ? [] : [inventory.detail()]),
            ],
          }),
          metrics: async () => ({ contentType: metrics.registry.contentType, body: await metrics.registry.metrics() }),
          logger,
          clock: systemClock,
          onFailure: () => listenerFailures.inc(),
          onChange: (problem) =>
            void notifier.status(
              problem === null
                ? readySent
                  ? readyStatus
                  : 'starting'
                : `${readySent ? readyStatus : 'starting'}; /healthz, /readyz and /metrics unavailable: ${problem}`,
            ),
        });
  const stopListening = new AbortController();
  const listening =
    listener === null ? Promise.resolve() : keepListening(listener, systemClock, AbortSignal.any([signal, stopListening.signal]));
  logger.info('kubeboot approver starting', {
    api: source,
    identity,
    lease: `${a.leaseNamespace}/${a.leaseName}`,
    kubeProxySubject: { commonName: config.kubeProxy.commonName, organizations: config.kubeProxy.organizations },
    kubeletServing: a.kubeletServing,
    kubeletClient: a.kubeletClient,
    inventory: a.inventory,
    denyViolations: a.denyViolations,
  });
  const watchdog = startWatchdog(notifier, { env: process.env, healthy: () => !signal.aborted });
  const running = approver.run(signal);
  // READY=1 once the first CSR list is in: from then on no CSR is missed.
  const ready = Promise.race([approver.informer.whenSynced, running]).then(async () => {
    if (signal.aborted) return;
    readySent = true;
    await notifier.ready(
      listener !== null && listener.server === null ? `${readyStatus}; /healthz, /readyz and /metrics not bound yet` : readyStatus,
    );
  });
  try {
    await Promise.all([running, ready]);
  } finally {
    watchdog?.stop();
    await notifier.stopping('releasing the lease');
    stopListening.abort();
    await listener?.close();
    await listening;
    await client.close();
  }
  return ExitCode.ok;
}

/** A size the option's check already accepted (agent/config/options.ts). */
function checkedByteSize(text: string): number {
  const size = parseByteSize(text);
  if (!size.ok) throw new Error(`max-pending-per-requester: ${size.problem}`);
  return size.value;
}
