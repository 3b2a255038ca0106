import t from 'tap';
import { createApproverMetrics, PCR7_LABELS } from '../../../agent/approver/metrics.js';

t.test('decisions are counted by signer, decision and rule; the leader gauge follows the lease', async (t) => {
  const m = createApproverMetrics({ defaultMetrics: false });
  m.decision('kubernetes.io/kube-apiserver-client', 'denied', 'subject');
  m.leader(true);
  m.approvalLatency(0.7);
  const text = await m.registry.metrics();
  t.match(text, 'kubeboot_approver_decisions_total{signer="kubernetes.io/kube-apiserver-client",decision="denied",rule="subject"} 1');
  t.match(text, 'kubeboot_approver_leader 1');
  t.match(text, 'kubeboot_approver_approval_latency_seconds_bucket{le="1"} 1');
});

t.test('the CSR cache gauges read the cache at each scrape', async (t) => {
  const m = createApproverMetrics({ defaultMetrics: false });
  const cache = { bytes: 1234, full: false, overflow: { requesters: 0, csrs: 0 } };
  m.csrCache(() => cache);
  const before = await m.registry.metrics();
  t.match(before, 'kubeboot_approver_csr_cache_bytes 1234\n');
  t.match(before, 'kubeboot_approver_csr_cache_full 0\n');
  cache.full = true;
  cache.bytes = 0;
  const after = await m.registry.metrics();
  t.match(after, 'kubeboot_approver_csr_cache_bytes 0\n');
  t.match(after, 'kubeboot_approver_csr_cache_full 1\n', 'emptied past its bound: full, nothing held');
});

t.test('requesters past their share: counted by kind of requester (three label values), and gauged', async (t) => {
  const m = createApproverMetrics({ defaultMetrics: false });
  m.csrCache(() => ({ bytes: 0, full: false, overflow: { requesters: 2, csrs: 90 } }));
  m.overflow('bootstrap');
  m.overflow('bootstrap');
  const text = await m.registry.metrics();
  t.match(text, 'kubeboot_approver_requester_overflow_total{requester="bootstrap"} 2\n');
  t.match(text, 'kubeboot_approver_requester_overflow_total{requester="node"} 0\n', 'every kind is there from the start');
  t.match(text, 'kubeboot_approver_requesters_over_share 2\n');
  t.match(text, 'kubeboot_approver_csrs_left_out 90\n');
});

t.test('TPM-attested approvals by PCR 7: its first 16 hex digits, a bounded set of values, then other', async (t) => {
  const m = createApproverMetrics({ defaultMetrics: false });
  const pcr7 = (n: number) => n.toString(16).padStart(4, '0').padEnd(64, 'f');
  m.tpmAttested(pcr7(1));
  m.tpmAttested(pcr7(1));
  for (let n = 2; n <= PCR7_LABELS + 5; n++) m.tpmAttested(pcr7(n));
  m.tpmAttested(pcr7(1));
  const text = await m.registry.metrics();
  t.match(text, `kubeboot_approver_tpm_attested_total{pcr7="${pcr7(1).slice(0, 16)}"} 3\n`, 'a value seen first keeps its label');
  const labels = [...text.matchAll(/kubeboot_approver_tpm_attested_total\{pcr7="([^"]+)"\}/g)].map((m) => m[1]);
  t.equal(labels.length, PCR7_LABELS + 1, `${PCR7_LABELS} values, and other`);
  t.match(text, 'kubeboot_approver_tpm_attested_total{pcr7="other"} 5\n', 'later values are counted as other');
});
