/** The approver's Prometheus metrics, on a private registry. */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

export interface ApproverMetrics {
  readonly registry: Registry;
  /** decision: approved, denied, left-pending or challenged (a TPM credential challenge); rule: the policy that passed or the rule that failed (or challenged). */
  decision(signer: string, decision: 'approved' | 'denied' | 'left-pending' | 'challenged', rule: string): void;
  /** Seconds from the CSR's creationTimestamp to its approval. */
  approvalLatency(seconds: number): void;
  leader(leading: boolean): void;
  /** Seconds a CSR waited in the queue, from the change that queued it to a worker taking it. */
  queueWait(seconds: number): void;
  /** Seconds one API call of a decision took (its wait for a request slot included), by call: node, record, subjectaccessreview, claim, approval, denial, challenge, event. */
  request(call: string, seconds: number): void;
  /** A batch decided and acted on: how many CSRs it took and how long it took. */
  batch(size: number, seconds: number): void;
  /** Where the CSR cache gauges are read from at each scrape. */
  csrCache(read: () => CsrCacheState): void;
  /** A pending CSR left out (undecided) because its requester is past its share, by kind of requester. */
  overflow(requester: OverflowRequester): void;
  /** An approval on a verified TPM quote, by its PCR 7 (secure-boot state), hex. */
  tpmAttested(pcr7: string): void;
}

/** Distinct PCR 7 values given a label of their own; later ones are counted as `other` (the label set stays bounded whatever nodes quote). */
export const PCR7_LABELS = 32;

/** Kinds of requester, so the label's values are these three whatever names requesters have. */
export type OverflowRequester = 'node' | 'bootstrap' | 'other';

export interface CsrCacheState {
  bytes: number;
  full: boolean;
  /** Requesters past their share, and their CSRs left out (cache.ts). */
  overflow: { requesters: number; csrs: number };
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
  const queue = new Histogram({
    name: 'kubeboot_approver_queue_wait_seconds',
    help: 'Seconds a CSR waited in the queue, from the change that queued it to a worker taking it',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30],
    registers: [registry],
  });
  const requests = new Histogram({
    name: 'kubeboot_approver_request_seconds',
    help: 'Seconds one API call of a decision took, its wait for one of the requests in flight included, by call (node, record, subjectaccessreview, claim, approval, denial, challenge, event)',
    labelNames: ['call'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
    registers: [registry],
  });
  const batchSize = new Histogram({
    name: 'kubeboot_approver_batch_size',
    help: 'CSRs one batch took off the queue',
    buckets: [1, 2, 4, 8, 16, 32, 64],
    registers: [registry],
  });
  const batchSeconds = new Histogram({
    name: 'kubeboot_approver_batch_seconds',
    help: 'Seconds a batch took to decide and act on',
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5],
    registers: [registry],
  });
  const leader = new Gauge({ name: 'kubeboot_approver_leader', help: '1 while this approver holds the lease', registers: [registry] });
  leader.set(0);
  const overflowed = new Counter({
    name: 'kubeboot_approver_requester_overflow_total',
    help: 'Pending CSRs left out of the cache, undecided, because their requester was past its share (--max-pending-per-requester), by kind of requester (node, bootstrap, other)',
    labelNames: ['requester'] as const,
    registers: [registry],
  });
  for (const requester of ['node', 'bootstrap', 'other'] as const) overflowed.inc({ requester }, 0);
  let cache = (): CsrCacheState => ({ bytes: 0, full: false, overflow: { requesters: 0, csrs: 0 } });
  new Gauge({
    name: 'kubeboot_approver_requesters_over_share',
    help: 'Requesters whose pending CSRs are past their share of the CSR cache: their youngest are left undecided',
    registers: [registry],
    collect() {
      this.set(cache().overflow.requesters);
    },
  });
  new Gauge({
    name: 'kubeboot_approver_csrs_left_out',
    help: 'Pending CSRs left out of the CSR cache (undecided) because their requester is past its share',
    registers: [registry],
    collect() {
      this.set(cache().overflow.csrs);
    },
  });
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
  const attested = new Counter({
    name: 'kubeboot_approver_tpm_attested_total',
    help: `Kubelet client CSRs approved on a verified TPM quote, by the quoted SHA-256 PCR 7 (secure-boot state; its first 16 hex digits, the first ${PCR7_LABELS} values seen, then other)`,
    labelNames: ['pcr7'] as const,
    registers: [registry],
  });
  const pcr7Seen = new Set<string>();
  return {
    registry,
    tpmAttested: (pcr7) => {
      const value = pcr7.slice(0, 16);
      if (!pcr7Seen.has(value) && pcr7Seen.size < PCR7_LABELS) pcr7Seen.add(value);
      attested.inc({ pcr7: pcr7Seen.has(value) ? value : 'other' });
    },
    decision: (signer, decision, rule) => decisions.inc({ signer, decision, rule }),
    approvalLatency: (seconds) => latency.observe(Math.max(0, seconds)),
    leader: (leading) => leader.set(leading ? 1 : 0),
    queueWait: (seconds) => queue.observe(seconds),
    request: (call, seconds) => requests.observe({ call }, seconds),
    batch: (size, seconds) => {
      batchSize.observe(size);
      batchSeconds.observe(seconds);
    },
    csrCache: (read) => (cache = read),
    overflow: (requester) => overflowed.inc({ requester }),
  };
}
