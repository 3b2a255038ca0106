/**
 * Prometheus metrics on a private registry (never prom-client's global one,
 * so tests and embedders get a clean slate). Certificate lifetimes are read
 * at scrape time from a callback, so the TTL is exact when scraped rather
 * than as of the last renewal.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { IdentityName } from '../identity.js';
import { systemClock } from '../time/clock.js';

export interface CertificateState {
  identity: IdentityName;
  /** Null while the identity holds no certificate. */
  notAfter: Date | null;
}

export interface MetricsOptions {
  certificates: () => CertificateState[];
  now?: () => Date;
  /** process_* and nodejs_* metrics; on by default. */
  defaultMetrics?: boolean;
}

export interface KubebootMetrics {
  readonly registry: Registry;
  /** A certificate was issued and stored at `at`. */
  recordRenewal(identity: IdentityName, at: Date): void;
  /** `reason` is a short fixed word (denied, timeout, http-503, ...), never a message. */
  recordRenewalFailure(identity: IdentityName, reason: string): void;
  recordHookFailure(identity: IdentityName): void;
  observeCsrWait(identity: IdentityName, seconds: number): void;
  /** A CSR was created at `at`; its identity waits for approval and issue. */
  csrPending(identity: IdentityName, at: Date): void;
  /** The identity's wait ended: issued, or the attempt failed. */
  csrSettled(identity: IdentityName): void;
}

/** Approval can take up to client-go's 15-minute certificateWaitTimeout. */
export const CSR_WAIT_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 900];

export function createMetrics(options: MetricsOptions): KubebootMetrics {
  const registry = new Registry();
  const now = options.now ?? (() => systemClock.now());
  const registers = [registry];
  const labelNames = ['identity'] as const;

  // analogous to kubelet_certificate_manager_client_ttl_seconds.
  new Gauge({
    name: 'kubeboot_certificate_ttl_seconds',
    help: 'Seconds until the current certificate expires; negative once expired.',
    labelNames,
    registers,
    collect() {
      this.reset();
      const t = now().getTime();
      for (const c of options.certificates()) {
        if (c.notAfter) this.set({ identity: c.identity }, (c.notAfter.getTime() - t) / 1000);
      }
    },
  });
  new Gauge({
    name: 'kubeboot_certificate_expiration_timestamp_seconds',
    help: 'NotAfter of the current certificate, in seconds since the epoch.',
    labelNames,
    registers,
    collect() {
      this.reset();
      for (const c of options.certificates()) {
        if (c.notAfter) this.set({ identity: c.identity }, c.notAfter.getTime() / 1000);
      }
    },
  });
  const renewals = new Counter({
    name: 'kubeboot_renewals_total',
    help: 'Certificates issued and stored.',
    labelNames,
    registers,
  });
  const failures = new Counter({
    name: 'kubeboot_renewal_failures_total',
    help: 'Renewal attempts that did not end with a stored certificate.',
    labelNames: ['identity', 'reason'] as const,
    registers,
  });
  const hookFailures = new Counter({
    name: 'kubeboot_hook_failures_total',
    help: 'Post-renewal hooks that failed or timed out.',
    labelNames,
    registers,
  });
  const lastSuccess = new Gauge({
    name: 'kubeboot_last_success_timestamp_seconds',
    help: 'When a certificate was last stored, in seconds since the epoch.',
    labelNames,
    registers,
  });
  // What an alert on "pending for N minutes" needs: the wait histogram only
  // learns of a wait when it ends (15 minutes at most, then a failure).
  const pendingSince = new Gauge({
    name: 'kubeboot_csr_pending_since_timestamp_seconds',
    help: 'Creation time of the CSR this identity waits on, in seconds since the epoch; no series while none is pending.',
    labelNames,
    registers,
  });
  const csrWait = new Histogram({
    name: 'kubeboot_csr_wait_duration_seconds',
    help: 'Time from CSR creation to an issued certificate.',
    labelNames,
    buckets: CSR_WAIT_BUCKETS,
    registers,
  });
  // prom-client samples event-loop delay with a repeating timer of this many
  // ms (default 10): an idle daemon would wake 100 times a second for it.
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 1000 });

  return {
    registry,
    recordRenewal(identity, at) {
      renewals.inc({ identity });
      lastSuccess.set({ identity }, at.getTime() / 1000);
    },
    recordRenewalFailure: (identity, reason) => failures.inc({ identity, reason }),
    recordHookFailure: (identity) => hookFailures.inc({ identity }),
    observeCsrWait: (identity, seconds) => csrWait.observe({ identity }, seconds),
    csrPending: (identity, at) => pendingSince.set({ identity }, at.getTime() / 1000),
    csrSettled: (identity) => pendingSince.remove({ identity }),
  };
}
