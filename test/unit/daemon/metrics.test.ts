import t from 'tap';
import { createMetrics } from '../../../agent/daemon/metrics.js';
import type { CertificateState } from '../../../agent/daemon/metrics.js';
import { EXPOSITION_CONTENT_TYPE, Exposition } from '../../../agent/daemon/exposition.js';

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
  const m = createMetrics({ certificates: () => certs, now: () => clock, processMetrics: false });
  let text = m.render();
  t.equal(value(text, 'kubeboot_certificate_ttl_seconds{identity="kubelet"}'), 3600);
  t.equal(value(text, 'kubeboot_certificate_expiration_timestamp_seconds{identity="kubelet"}'), now.getTime() / 1000 + 3600);
  t.notMatch(text, /identity="kube-proxy"/, 'no series for an identity without a certificate');

  clock = new Date(now.getTime() + 7200_000);
  text = m.render();
  t.equal(value(text, 'kubeboot_certificate_ttl_seconds{identity="kubelet"}'), -3600, 'negative once expired');

  certs = [];
  t.notMatch(m.render(), /identity="kubelet"/, 'series go when the certificate does');
});

t.test('renewals, failures, hook failures and last success are counted per identity', async (t) => {
  const m = createMetrics({ ...none, processMetrics: false });
  m.recordRenewal('kubelet', now);
  m.recordRenewal('kubelet', now);
  m.recordRenewalFailure('kube-proxy', 'denied');
  m.recordHookFailure('kubelet');
  const text = m.render();
  t.equal(value(text, 'kubeboot_renewals_total{identity="kubelet"}'), 2);
  t.equal(value(text, 'kubeboot_renewal_failures_total{identity="kube-proxy",reason="denied"}'), 1);
  t.equal(value(text, 'kubeboot_hook_failures_total{identity="kubelet"}'), 1);
  t.equal(value(text, 'kubeboot_last_success_timestamp_seconds{identity="kubelet"}'), now.getTime() / 1000);
});

t.test('CSR wait times land in buckets reaching 15 minutes', async (t) => {
  const m = createMetrics({ ...none, processMetrics: false });
  m.observeCsrWait('kubelet', 42);
  const text = m.render();
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_bucket{le="30",identity="kubelet"}'), 0);
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_bucket{le="60",identity="kubelet"}'), 1);
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_bucket{le="900",identity="kubelet"}'), 1);
  t.equal(value(text, 'kubeboot_csr_wait_duration_seconds_count{identity="kubelet"}'), 1);
});

t.test('a pending CSR is a series with its creation time, gone once the wait ends', async (t) => {
  const m = createMetrics({ ...none, processMetrics: false });
  const series = 'kubeboot_csr_pending_since_timestamp_seconds{identity="kube-proxy"}';
  t.equal(value(m.render(), series), undefined, 'nothing pending at first');
  m.csrPending('kube-proxy', now);
  t.equal(value(m.render(), series), now.getTime() / 1000, 'when the CSR was created');
  m.csrSettled('kube-proxy');
  t.equal(value(m.render(), series), undefined, 'no series once issued or failed');
  t.match(m.render(), /^# TYPE kubeboot_csr_pending_since_timestamp_seconds gauge$/m, 'the metric itself is always listed');
});

t.test('process metrics are included by default, left out on request, and no global state is kept', async (t) => {
  const m = createMetrics(none);
  t.equal(m.contentType, EXPOSITION_CONTENT_TYPE);
  t.match(m.contentType, /^text\/plain; version=0\.0\.4/);
  const text = m.render();
  t.match(text, /^process_cpu_seconds_total /m);
  t.match(text, /^process_resident_memory_bytes /m);
  t.match(text, /^process_start_time_seconds /m);
  t.notMatch(createMetrics({ ...none, processMetrics: false }).render(), /^process_/m, 'processMetrics: false leaves them out');
  // The daemon no longer touches prom-client: a fresh instance starts from nothing whatever others recorded.
  m.recordRenewal('kubelet', now);
  t.equal(value(createMetrics(none).render(), 'kubeboot_renewals_total{identity="kubelet"}'), undefined, 'a new instance starts empty');
});

t.test('two instances do not collide', async (t) => {
  const a = createMetrics(none);
  const b = createMetrics(none);
  a.recordRenewal('kubelet', now);
  t.equal(value(b.render(), 'kubeboot_renewals_total{identity="kubelet"}'), undefined);
  t.equal(value(a.render(), 'kubeboot_renewals_total{identity="kubelet"}'), 1);
});

t.test('the CA rotation series: refused gauge set and reset, counters by reason, consumer and result', async (t) => {
  const m = createMetrics({ ...none, processMetrics: false });
  let text = m.render();
  for (const name of [
    'kubeboot_ca_bundle_refused',
    'kubeboot_ca_bundle_refusals_total',
    'kubeboot_ca_bundle_changes_total',
    'kubeboot_ca_restarts_total',
  ])
    t.match(text, new RegExp(`^# TYPE ${name} (gauge|counter)$`, 'm'), `${name} is listed before any event`);
  t.notMatch(text, /^kubeboot_ca_/m, 'no samples before any event');

  m.caBundleRefused('expired');
  text = m.render();
  t.equal(value(text, 'kubeboot_ca_bundle_refused{reason="expired"}'), 1, 'the gauge names the reason');
  t.equal(value(text, 'kubeboot_ca_bundle_refusals_total{reason="expired"}'), 1);

  m.caBundleRefused('too-big');
  text = m.render();
  t.equal(value(text, 'kubeboot_ca_bundle_refused{reason="expired"}'), undefined, 'one refusal reason at a time');
  t.equal(value(text, 'kubeboot_ca_bundle_refused{reason="too-big"}'), 1);
  t.equal(value(text, 'kubeboot_ca_bundle_refusals_total{reason="expired"}'), 1, 'the counter keeps every reason');
  t.equal(value(text, 'kubeboot_ca_bundle_refusals_total{reason="too-big"}'), 1);

  m.caBundleRefusalCleared();
  text = m.render();
  t.notMatch(text, /^kubeboot_ca_bundle_refused\{/m, 'cleared: no gauge series');
  t.match(text, /^# TYPE kubeboot_ca_bundle_refused gauge$/m, 'the gauge itself stays listed');
  t.equal(value(text, 'kubeboot_ca_bundle_refusals_total{reason="too-big"}'), 1, 'the counter is not reset');

  m.caBundleAdopted();
  m.caBundleAdopted();
  m.caRestart('kubelet', true);
  m.caRestart('kube-proxy', false);
  m.caRestart('kube-proxy', false);
  text = m.render();
  t.equal(value(text, 'kubeboot_ca_bundle_changes_total'), 2, 'an unlabelled counter');
  t.equal(value(text, 'kubeboot_ca_restarts_total{consumer="kubelet",result="ok"}'), 1);
  t.equal(value(text, 'kubeboot_ca_restarts_total{consumer="kube-proxy",result="failed"}'), 2);
});

t.test('workers that ran to rest are counted with the CPU they spent, and those that failed', async (t) => {
  const m = createMetrics({ ...none, processMetrics: false });
  t.match(m.render(), /^# TYPE kubeboot_workers_total counter$/m);
  t.equal(value(m.render(), 'kubeboot_workers_total'), undefined, 'none yet');
  m.workerEnded(0.5);
  m.workerEnded(0.25);
  m.workerFailed();
  t.equal(value(m.render(), 'kubeboot_workers_total'), 2);
  t.equal(value(m.render(), 'kubeboot_worker_cpu_seconds_total'), 0.75);
  t.equal(value(m.render(), 'kubeboot_worker_failures_total'), 1);
});

t.test('the names that said "pass" stay one release as deprecated aliases with the same values', async (t) => {
  const m = createMetrics({ ...none, processMetrics: false });
  m.workerEnded(0.5);
  m.workerFailed();
  const text = m.render();
  for (const [old, now] of [
    ['kubeboot_passes_total', 'kubeboot_workers_total'],
    ['kubeboot_pass_cpu_seconds_total', 'kubeboot_worker_cpu_seconds_total'],
    ['kubeboot_pass_failures_total', 'kubeboot_worker_failures_total'],
  ]) {
    t.equal(value(text, old!), value(text, now!), `${old} = ${now}`);
    t.match(text, new RegExp(`^# HELP ${old} Deprecated: use ${now}`, 'm'));
  }
});

t.test('the exposition format: HELP and TYPE lines, label escapes, histogram buckets, sum and count', async (t) => {
  const book = new Exposition();
  const c = book.counter('x_total', 'Counts \\ things\nover lines.');
  c.inc({ path: 'C:\\dir', quote: 'say "hi"', nl: 'a\nb' });
  c.inc({ path: 'C:\\dir', quote: 'say "hi"', nl: 'a\nb' }, 2);
  const g = book.gauge('y', 'A gauge.');
  g.set({}, 1.5);
  const h = book.histogram('z_seconds', 'A histogram.', [1, 10]);
  h.observe({ id: 'a' }, 0.5);
  h.observe({ id: 'a' }, 5);
  h.observe({ id: 'a' }, 50);
  book.computed('w', 'Computed.', 'gauge', () => [{ labels: { k: 'v' }, value: Number.POSITIVE_INFINITY }]);
  const lines = book.render().split('\n');
  t.equal(lines.at(-1), '', 'the text ends with a newline');
  t.same(lines.slice(0, -1), [
    '# HELP x_total Counts \\\\ things\\nover lines.',
    '# TYPE x_total counter',
    'x_total{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb"} 3',
    '# HELP y A gauge.',
    '# TYPE y gauge',
    'y 1.5',
    '# HELP z_seconds A histogram.',
    '# TYPE z_seconds histogram',
    'z_seconds_bucket{le="1",id="a"} 1',
    'z_seconds_bucket{le="10",id="a"} 2',
    'z_seconds_bucket{le="+Inf",id="a"} 3',
    'z_seconds_sum{id="a"} 55.5',
    'z_seconds_count{id="a"} 3',
    '# HELP w Computed.',
    '# TYPE w gauge',
    'w{k="v"} +Inf',
  ]);
  g.remove({});
  t.notMatch(book.render(), /^y /m, 'a removed series is gone');
  t.match(book.render(), /^# TYPE y gauge$/m, 'its family is still listed');
});
