/** The approver's Prometheus metrics, on a private registry. */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

export interface ApproverMetrics {
  readonly registry: Registry;
  /** decision: approved, denied or left-pending; rule: the policy that passed or the rule that failed. */
  decision(signer: string, decision: 'approved' | 'denied' | 'left-pending', rule: string): void;
  /** Seconds from the CSR's creationTimestamp to its approval. */
  approvalLatency(seconds: number): void;
  leader(leading: boolean): void;
  /** Where the CSR cache gauges are read from at each scrape. */
  csrCache(read: () => { bytes: number; full: boolean }): void;
}

export function createApproverMetrics(options: { defaultMetrics?: boolean } = {}): ApproverMetrics {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  const decisions = new Counter({
    name: 'kubeboot_approver_decisions_total',
    help: 'CSR decisions by signer, decision and rule (the passed policy, or the failed rule)',
    labelNames: ['signer', 'decision', 'rule'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'kubeboot_approver_approval_latency_seconds',
    help: 'Seconds from a CSR creationTimestamp (whole seconds) to its approval',
    buckets: [0.5, 1, 2, 5, 10, 30, 60, 300],
    registers: [registry],
  });
  const leader = new Gauge({ name: 'kubeboot_approver_leader', help: '1 while this approver holds the lease', registers: [registry] });
  leader.set(0);
  let cache = () => ({ bytes: 0, full: false });
  new Gauge({
    name: 'kubeboot_approver_csr_cache_bytes',
    help: 'Bytes the CSR cache counts for what it keeps (JSON plus a per-CSR overhead; bounded, see docs/approver.md)',
    registers: [registry],
    collect() {
      this.set(cache().bytes);
    },
  });
  new Gauge({
    name: 'kubeboot_approver_csr_cache_full',
    help: '1 while the CSR cache is over its bound: emptied, not ready and not leading until a re-list fits',
    registers: [registry],
    collect() {
      this.set(cache().full ? 1 : 0);
    },
  });
  return {
    registry,
    decision: (signer, decision, rule) => decisions.inc({ signer, decision, rule }),
    approvalLatency: (seconds) => latency.observe(Math.max(0, seconds)),
    leader: (leading) => leader.set(leading ? 1 : 0),
    csrCache: (read) => (cache = read),
  };
}
