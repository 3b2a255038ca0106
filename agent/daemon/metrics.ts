/**
 * `kubeboot run`'s Prometheus series. They live in the resting daemon
 * (daemon/daemon.ts), which outlasts every worker, so counters count the
 * daemon's whole life; a worker reports each event to it (daemon/worker-protocol.ts).
 * Certificate lifetimes are read at scrape time from a callback, so the TTL is
 * exact when scraped rather than as of the last renewal.
 */
import type { IdentityName } from '../identity.js';
import type { CaRotationMetrics } from '../trust/keeper.js';
import type { StepMetrics } from '../renewal/step.js';
import { systemClock } from '../time/clock.js';
import { addProcessMetrics, EXPOSITION_CONTENT_TYPE, Exposition } from './exposition.js';

export interface CertificateState {
  identity: IdentityName;
  /** Null while the identity holds no certificate. */
  notAfter: Date | null;
}

export interface MetricsOptions {
  certificates: () => CertificateState[];
  now?: () => Date;
  /** process_* series; on by default. */
  processMetrics?: boolean;
}

/** What a worker records: every method takes plain values, so a worker in another process sends them as they are. */
export interface MetricEvents extends CaRotationMetrics, StepMetrics {}

export interface KubebootMetrics extends MetricEvents {
  /** A worker ended at rest, having spent `cpuSeconds`. */
  workerEnded(cpuSeconds: number): void;
  /** A worker ended without answering its steps (a crash, a kill). */
  workerFailed(): void;
  /** The daemon looked at cluster-info itself: `unchanged` started no worker, the others one. */
  caLook(result: 'unchanged' | 'changed' | 'failed'): void;
  /** An attempt to bind the status listener failed (it is retried). */
  statusListenerFailed(): void;
  readonly contentType: string;
  render(): string;
}

/** Approval can take up to client-go's 15-minute certificateWaitTimeout. */
export const CSR_WAIT_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 900];

export function createMetrics(options: MetricsOptions): KubebootMetrics {
  const now = options.now ?? (() => systemClock.now());
  const book = new Exposition();
  const perCertificate = (value: (notAfter: Date) => number) => () =>
    options
      .certificates()
      .filter((c) => c.notAfter !== null)
      .map((c) => ({ labels: { identity: c.identity }, value: value(c.notAfter!) }));

  // analogous to kubelet_certificate_manager_client_ttl_seconds.
  book.computed(
    'kubeboot_certificate_ttl_seconds',
    'Seconds until the current certificate expires; negative once expired.',
    'gauge',
    perCertificate((notAfter) => (notAfter.getTime() - now().getTime()) / 1000),
  );
  book.computed(
    'kubeboot_certificate_expiration_timestamp_seconds',
    'NotAfter of the current certificate, in seconds since the epoch.',
    'gauge',
    perCertificate((notAfter) => notAfter.getTime() / 1000),
  );
  const renewals = book.counter('kubeboot_renewals_total', 'Certificates issued and stored.');
  const failures = book.counter('kubeboot_renewal_failures_total', 'Renewal attempts that did not end with a stored certificate.');
  const hookFailures = book.counter('kubeboot_hook_failures_total', 'Post-renewal hooks that failed or timed out.');
  const lastSuccess = book.gauge(
    'kubeboot_last_success_timestamp_seconds',
    'When a certificate was last stored, in seconds since the epoch.',
  );
  // What an alert on "pending for N minutes" needs: the wait histogram only
  // learns of a wait when it ends (15 minutes at most, then a failure).
  const pendingSince = book.gauge(
    'kubeboot_csr_pending_since_timestamp_seconds',
    'Creation time of the CSR this identity waits on, in seconds since the epoch; no series while none is pending.',
  );
  const csrWait = book.histogram(
    'kubeboot_csr_wait_duration_seconds',
    'Time from CSR creation to an issued certificate.',
    CSR_WAIT_BUCKETS,
  );
  const refusals = book.counter(
    'kubeboot_ca_bundle_refusals_total',
    'Published CA bundles refused, by reason (unverified-source, node-writable-source, drops-presented-ca, expired, ...).',
  );
  const adoptions = book.counter('kubeboot_ca_bundle_changes_total', 'Published CA bundles adopted into the node files.');
  const refused = book.gauge(
    'kubeboot_ca_bundle_refused',
    '1 while the CA bundle published in kube-public/cluster-info is refused, by reason; absent otherwise.',
  );
  const restarts = book.counter('kubeboot_ca_restarts_total', 'Restarts of a consumer after a CA bundle change, by result.');
  const workers = book.counter(
    'kubeboot_workers_total',
    'Worker processes that ran to rest (each starts for a step: a deadline, a file change, a signal, or a CA check the daemon could not settle with its own look).',
  );
  const workerFailures = book.counter(
    'kubeboot_worker_failures_total',
    'Worker processes that ended without answering their steps (crashed or killed); their steps are retried after a back-off.',
  );
  const workerCpu = book.counter(
    'kubeboot_worker_cpu_seconds_total',
    'CPU time the worker processes spent; process_cpu_seconds_total is the daemon alone.',
  );
  // The names from when a worker was a "pass": kept one release (0.x, removed in the next) so dashboards and alerts can move.
  const deprecated = (name: string, now: string) =>
    book.counter(name, `Deprecated: use ${now} (the same value); removed in the next release.`);
  const passes = deprecated('kubeboot_passes_total', 'kubeboot_workers_total');
  const passFailures = deprecated('kubeboot_pass_failures_total', 'kubeboot_worker_failures_total');
  const passCpu = deprecated('kubeboot_pass_cpu_seconds_total', 'kubeboot_worker_cpu_seconds_total');
  const caLooks = book.counter(
    'kubeboot_ca_looks_total',
    "The daemon's own GETs of kube-public/cluster-info, by result; only unchanged starts no worker.",
  );
  // Seen once the listener binds (it serves /metrics): how many attempts failed before, e.g. a port held by another process.
  const listenerFailures = book.counter(
    'kubeboot_status_listener_failures_total',
    'Failed attempts to bind the /healthz, /readyz and /metrics listener (retried with back-off; the work goes on meanwhile).',
  );
  if (options.processMetrics !== false) addProcessMetrics(book, now());

  return {
    contentType: EXPOSITION_CONTENT_TYPE,
    render: () => book.render(),
    recordRenewal(identity, at) {
      renewals.inc({ identity });
      lastSuccess.set({ identity }, at.getTime() / 1000);
    },
    recordRenewalFailure: (identity, reason) => failures.inc({ identity, reason }),
    recordHookFailure: (identity) => hookFailures.inc({ identity }),
    observeCsrWait: (identity, seconds) => csrWait.observe({ identity }, seconds),
    csrPending: (identity, at) => pendingSince.set({ identity }, at.getTime() / 1000),
    csrSettled: (identity) => pendingSince.remove({ identity }),
    caBundleRefused(reason) {
      refusals.inc({ reason });
      refused.reset();
      refused.set({ reason }, 1);
    },
    caBundleRefusalCleared: () => refused.reset(),
    caBundleAdopted: () => adoptions.inc(),
    caRestart: (consumer, ok) => restarts.inc({ consumer, result: ok ? 'ok' : 'failed' }),
    workerFailed() {
      workerFailures.inc();
      passFailures.inc();
    },
    caLook: (result) => caLooks.inc({ result }),
    statusListenerFailed: () => listenerFailures.inc(),
    workerEnded(cpuSeconds) {
      workers.inc();
      workerCpu.inc({}, cpuSeconds);
      passes.inc();
      passCpu.inc({}, cpuSeconds);
    },
  };
}
