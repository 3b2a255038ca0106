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
import { createApproverMetrics } from './metrics.js';
import type { ApproverPolicy } from './rules/rule.js';
import type { Config } from '../config/types.js';
import { INVENTORY_REF } from '../records/inventory.js';
import { inventoryStatus } from '../records/inventory-status.js';
import { INVENTORY_NAME } from '../records/kinds.js';
import { Counter } from 'prom-client';
import { keepListening, StatusListener } from '../service/http.js';
import { createNotifier, startWatchdog } from '../service/notify.js';
import { ExitCode } from '../errors.js';
import type { Logger } from '../log.js';
import { readOptional } from '../read-optional.js';
import { systemClock } from '../time/clock.js';
import { checkKcm, legacyRecordsProblem, warnFlags } from './startup.js';

/** What `kubeboot approver` runs with: its flags as parsed (cli/approver.ts) and the process environment. */
export interface ApproverRunOptions {
  flags: Config['approver'];
  policy: ApproverPolicy;
  /** --max-pending-per-requester, in bytes. */
  maxPendingPerRequester: number;
  env: NodeJS.ProcessEnv;
}

export async function runApprover(opts: ApproverRunOptions, logger: Logger, signal: AbortSignal): Promise<number> {
  const a = opts.flags;
  warnFlags(a, logger);
  const { client, source } = await connect({ kubeconfig: a.kubeconfig, env: opts.env, readFile: readOptional });
  const kcm = await checkKcm(client, a.kubeletClient, logger, signal);
  // matches client-go's leader-election identity: hostname plus a unique suffix, so two processes on one host differ.
  const identity = `${os.hostname()}_${randomUUID()}`;
  const metrics = createApproverMetrics();
  const approver = new CertificateController(
    client,
    {
      policy: opts.policy,
      denyViolations: a.denyViolations,
      resyncMs: a.resyncPeriod * 1000,
      maxPendingPerRequester: opts.maxPendingPerRequester,
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
  const notifier = createNotifier({ env: opts.env, logger });
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
    kubeProxySubject: opts.policy.kubeProxy,
    kubeletServing: a.kubeletServing,
    kubeletClient: a.kubeletClient,
    inventory: a.inventory,
    denyViolations: a.denyViolations,
  });
  const watchdog = startWatchdog(notifier, { env: opts.env, healthy: () => !signal.aborted });
  const running = approver.run(signal);
  // READY=1 once the first CSR list and the records are in, as /readyz has it: from then on no CSR is missed
  // and none is decided without the bindings, revocations and inventory it is judged by.
  const ready = Promise.race([Promise.all([approver.informer.whenSynced, approver.records.whenSynced()]), running]).then(async () => {
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
