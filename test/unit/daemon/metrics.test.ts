import t from 'tap';
import { register as globalRegistry } from 'prom-client';
import { createMetrics } from '../../../agent/daemon/metrics.js';
import type { CertificateState } from '../../../agent/daemon/metrics.js';

const now = new Date('2025-01-01T00:00:00Z');
const none = { certificates: () => [] };

function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

t.test('the TTL and expiry gauges are computed from the certificates at scrape time', async (t) => {
  let certs: CertificateState[] = [
    { identity: 'kubelet', notAfter: new Date(now.getTime() + 3600_000) },
    { identity: 'kube-proxy', notAfter: null },
  ];
  let clock = now;
  const m = createMetrics({ certificates: () => certs, now: () => clock, defaultMetrics: false });
  let text = await m.registry.metrics();
  t.equal(value(text, 'kubeboot_certificate_ttl_seconds{identity="kubelet"}'), 3600);
  t.equal(value(text, 'kubeboot_certificate_expiration_timestamp_seconds{identity="kubelet"}'), now.getTime() / 1000 + 3600);
  t.notMatch(text, /identity="kube-proxy"/, 'no series for an identity without a certificate');

  clock = new Date(now.getTime() + 7200_000);
  text = await m.registry.metrics();
  t.equal(value(text, 'kubeboot_certificate_ttl_seconds{identity="kubelet"}'), -3600, 'negative once expired');

  certs = [];
  t.notMatch(await m.registry.metrics(), /identity="kubelet"/, 'series go when the certificate does');
});

t.test('renewals, failures, hook failures and last success are counted per identity', async (t) => {
  const m = createMetrics({ ...none, defaultMetrics: false });
  m.recordRenewal('kubelet', now);
  m.recordRenewal('kubelet', now);
  m.recordRenewalFailure('kube-proxy', 'denied');
  m.recordHookFailure('kubelet');
  const text = await m.registry.metrics();
  t.equal(value(text, 'kubeboot_renewals_total{identity="kubelet"}'), 2);
  t.equal(value(text, 'kubeboot_renewal_failures_total{identity="kube-proxy",reason="denied"}'), 1);
  t.equal(value(text, 'kubeboot_hook_failures_total{identity="kubelet"}'), 1);
  t.equal(value(text, 'kubeboot_last_success_timestamp_seconds{identity="kubelet"}'), now.getTime() / 1000);
});

t.test('CSR wait times land in buckets reaching 15 minutes', async (t) => {
  const m = createMetrics({ ...none, defaultMetrics: false });
  m.observeCsrWait('kubelet', 42);
  const text = await m.registry.metrics();
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_bucket{le="30",identity="kubelet"}'), 0);
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_bucket{le="60",identity="kubelet"}'), 1);
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_bucket{le="900",identity="kubelet"}'), 1);
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_count{identity="kubelet"}'), 1);
});

t.test('a pending CSR is a series with its creation time, gone once the wait ends', async (t) => {
  const m = createMetrics({ ...none, defaultMetrics: false });
  const series = 'kubeboot_csr_pending_since_timestamp_seconds{identity="kube-proxy"}';
  t.equal(value(await m.registry.metrics(), series), undefined, 'nothing pending at first');
  m.csrPending('kube-proxy', now);
  t.equal(value(await m.registry.metrics(), series), now.getTime() / 1000, 'when the CSR was created');
  m.csrSettled('kube-proxy');
  t.equal(value(await m.registry.metrics(), series), undefined, 'no series once issued or failed');
  t.match(await m.registry.metrics(), /^# TYPE kubeboot_csr_pending_since_timestamp_seconds gauge$/m, 'the metric itself is always listed');
});

t.test('process metrics are included and the global registry is left alone', async (t) => {
  const m = createMetrics(none);
  t.match(await m.registry.metrics(), /^process_cpu_seconds_total /m);
  t.notMatch(await globalRegistry.metrics(), /kubeboot_/);
});

t.test('two instances do not collide', async (t) => {
  const a = createMetrics(none);
  const b = createMetrics(none);
  a.recordRenewal('kubelet', now);
  t.equal(value(await b.registry.metrics(), 'kubeboot_renewals_total{identity="kubelet"}'), undefined);
});
