/**
 * `kubeboot approver`: the cluster-side CSR approver. Connects (kubeconfig or
 * in-cluster), serves /healthz, /readyz and /metrics, tells systemd READY
 * once the first CSR list is in, and runs until SIGTERM, which releases the
 * Lease so a standby takes over at once.
 */
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { Approver } from '../approver/approver.js';
import { getRecord } from '../approver/api.js';
import { connect } from '../approver/connect.js';
import { kcmBindingsMonitor, kcmBindingsProblem, kcmNodeClientBindings } from '../approver/kcm-bindings.js';
import { createApproverMetrics } from '../approver/metrics.js';
import type { ApproverPolicy } from '../approver/policy.js';
import type { Config } from '../config/types.js';
import { parseByteSize } from '../config/values.js';
import { INVENTORY, INVENTORY_REF } from '../kube/inventory.js';
import { inventoryStatus } from '../kube/inventory-status.js';
import { startHttpServer, type StatusServer } from '../daemon/http.js';
import { createNotifier, startWatchdog } from '../daemon/notify.js';
import { ExitCode } from '../errors.js';
import type { Logger } from '../log.js';
import { readOptional } from '../read-optional.js';
import { systemClock } from '../time/clock.js';

export function approverPolicy(config: Config): ApproverPolicy {
  const a = config.approver;
  return {
    kubeProxy: { commonName: config.kubeProxy.commonName, organizations: config.kubeProxy.organizations },
    maxExpirationSeconds: a.maxExpiration,
    keyAlgorithms: a.keyAlgorithms,
    serving: { enabled: a.kubeletServing, dnsSuffixes: a.servingDnsSuffixes, ipCidrs: a.servingIpCidrs },
    kubeletClient: { enabled: a.kubeletClient, unboundTokens: a.unsafeApproveUnboundTokens, protectNodes: a.protectNodes },
    inventory: a.inventory,
  };
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
        ? "--unsafe-approve-unbound-tokens: a bootstrap token with no kubeboot/token-<id> binding gets a kubelet certificate for any node name not yet registered, as many as it asks for; whoever reads a node pool's user-data can mint node identities"
        : '--unsafe-approve-unbound-tokens has no effect without --approve-kubelet-client',
    );
  const { client, source } = await connect({ kubeconfig: a.kubeconfig, env: process.env, readFile: readOptional });
  const kcm = a.kubeletClient ? kcmBindingsMonitor(() => kcmNodeClientBindings(client, signal), systemClock) : null;
  try {
    const problem = kcm === null ? null : kcmBindingsProblem(await kcm.look());
    if (problem !== null) logger.warn(problem);
  } catch (err) {
    logger.warn(
      `could not list ClusterRoleBindings to find kube-controller-manager's own kubelet client approval (apply packaging/manifests/approver/approver-rbac.yaml): ${(err as Error).message}`,
    );
  }
  const inventory = a.inventory ? inventoryStatus(() => getRecord(client, INVENTORY, signal), systemClock) : null;
  if (inventory !== null) {
    if (!a.kubeletClient && !a.kubeletServing)
      logger.warn('--inventory has no effect without --approve-kubelet-client or --approve-kubelet-serving');
    const seen = await inventory.look();
    if (seen.ok) logger.info(`--inventory: ${INVENTORY_REF}: ${seen.text}`);
    else logger.warn(`--inventory: ${INVENTORY_REF}: ${seen.text}`);
  }
  // matches client-go's leader-election identity: hostname plus a unique suffix, so two processes on one host differ.
  const identity = `${os.hostname()}_${randomUUID()}`;
  const metrics = createApproverMetrics();
  const approver = new Approver(
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
  const notifier = createNotifier({ env: process.env, logger });
  let http: StatusServer | null = null;
  if (a.listen !== null) {
    const at = a.listen.lastIndexOf(':');
    http = await startHttpServer({
      host: a.listen.slice(0, at).replace(/^\[|\]$/g, ''),
      port: Number(a.listen.slice(at + 1)),
      healthy: () => !signal.aborted,
      readiness: () => ({
        ready: approver.informer.synced,
        detail: [
          `csr cache: ${approver.informer.synced ? `synced (${approver.informer.cache.size} CSRs)` : `not synced: ${approver.informer.notSyncedBecause ?? ''}; not taking part in leader election`}`,
          `leader: ${approver.leader.isLeader() ? 'yes' : 'no'}`,
          ...(kcm === null ? [] : [kcm.detail()]),
          ...(inventory === null ? [] : [inventory.detail()]),
        ],
      }),
      metrics: async () => ({ contentType: metrics.registry.contentType, body: await metrics.registry.metrics() }),
      logger,
    });
    logger.info(`serving /healthz, /readyz and /metrics on ${http.address.host}:${http.address.port}`);
  }
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
    if (!signal.aborted) await notifier.ready(`watching CSRs; lease ${a.leaseNamespace}/${a.leaseName}`);
  });
  try {
    await Promise.all([running, ready]);
  } finally {
    watchdog?.stop();
    await notifier.stopping('releasing the lease');
    await http?.close();
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
