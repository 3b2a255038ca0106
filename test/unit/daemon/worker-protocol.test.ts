import t from 'tap';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import type { NodeCredential } from '../../../agent/credential/assess.js';
import { createMetrics, type MetricEvents } from '../../../agent/daemon/metrics.js';
import {
  applyMetric,
  carriedCredential,
  EMPTY_HAND_OVER,
  forwardingMetrics,
  restoredCredential,
  type FromWorker,
  type MetricMessage,
  type ToWorker,
} from '../../../agent/daemon/worker-protocol.js';
import { emptyRecord } from '../../../agent/renewal/record.js';

/** Through the IPC channel: JSON both ways. */
const wire = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

t.test('the kubelet credential survives the trip to the next worker', async (t) => {
  const config = defaultConfig('n1');
  const identity = identitiesFor(config).find((i) => i.name === 'kubelet')!;
  const credential: NodeCredential = {
    identity,
    state: 'usable',
    certPem: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n',
    keyPem: '-----BEGIN PRIVATE KEY-----\nBBBB\n-----END PRIVATE KEY-----\n',
    notAfter: new Date('2030-01-02T03:04:05.678Z'),
    cluster: { server: 'https://api.test:6443', caPem: 'CA', tlsServerName: null },
  } as NodeCredential;
  const carried = wire(carriedCredential(credential));
  t.equal(carried?.notAfter, '2030-01-02T03:04:05.678Z', 'notAfter as an ISO string');
  const restored = restoredCredential(config, carried);
  t.ok(restored, 'restored');
  t.equal(restored!.notAfter.getTime(), credential.notAfter.getTime(), 'the date survives');
  t.ok(restored!.notAfter instanceof Date);
  t.equal(restored!.certPem, credential.certPem);
  t.equal(restored!.keyPem, credential.keyPem);
  t.same(restored!.cluster, credential.cluster);
  t.equal(restored!.state, 'usable');
  t.same(restored!.identity, identity, "the configuration's kubelet identity");

  t.equal(carriedCredential(null), null, 'nothing held: nothing carried');
  t.equal(restoredCredential(config, null), null, 'nothing carried: nothing restored');
});

t.test('the empty hand-over holds nothing and is plain JSON', async (t) => {
  t.same(EMPTY_HAND_OVER, { lastGoodKubelet: null, provenKubeletPem: null, trust: null });
  t.same(wire(EMPTY_HAND_OVER), EMPTY_HAND_OVER, 'unchanged by the wire');
});

t.test('a start and an answer are the same after the wire: records and hand-over are plain JSON', async (t) => {
  const record = {
    ...emptyRecord('kubelet'),
    notAfter: '2030-01-02T03:04:05.678Z',
    deadline: { certKey: 'k', at: '2029-12-01T00:00:00.000Z' },
  };
  const handOver = { ...EMPTY_HAND_OVER, provenKubeletPem: 'PEM' };
  const start: ToWorker = { kind: 'start', config: defaultConfig('n1'), records: [record], handOver, joinFirst: true };
  t.same(wire(start), start, 'start');
  const answer: FromWorker = {
    kind: 'answer',
    answer: { id: 7, target: 'kubelet', next: '2030-01-01T00:00:00.000Z', record, wake: ['ca'], force: [], look: null, handOver },
  };
  t.same(wire(answer), answer, 'answer');
});

t.test('metric events forwarded from a worker land on the resting daemon as if recorded there', async (t) => {
  const at = new Date('2025-06-01T12:00:00.250Z');
  const sent: FromWorker[] = [];
  const forwarded = forwardingMetrics((message) => sent.push(wire(message)));
  const record = (m: MetricEvents) => {
    m.recordRenewal('kubelet', at);
    m.recordRenewalFailure('kube-proxy', 'denied');
    m.recordHookFailure('kubelet');
    m.observeCsrWait('kubelet', 42);
    m.csrPending('kube-proxy', at);
    m.caBundleRefused('expired');
    m.caBundleAdopted();
    m.caRestart('kubelet', false);
  };
  record(forwarded);
  t.equal(sent.length, 8, 'one message per event');
  t.ok(
    sent.every((m) => m.kind === 'metric'),
    'all metric messages',
  );
  t.match(sent[0], { kind: 'metric', name: 'recordRenewal', args: ['kubelet', at.toISOString()] }, 'a date goes as an ISO string');

  const applied: { name: string; args: unknown[] }[] = [];
  const recorder = new Proxy({} as MetricEvents, {
    get:
      (_target, name) =>
      (...args: unknown[]) =>
        applied.push({ name: String(name), args }),
  });
  for (const m of sent) applyMetric(recorder, m as MetricMessage);
  t.ok(applied[0]!.args[1] instanceof Date, 'recordRenewal gets a Date back');
  t.equal((applied[0]!.args[1] as Date).getTime(), at.getTime(), 'the same moment');
  t.ok(applied[4]!.args[1] instanceof Date, 'csrPending gets a Date back');
  t.equal(applied[3]!.args[1], 42, 'a number stays a number');
  t.equal(applied[7]!.args[1], false, 'a boolean stays a boolean');

  // The end-to-end meaning: the daemon's /metrics reads the same either way.
  const direct = createMetrics({ certificates: () => [], processMetrics: false });
  const replayed = createMetrics({ certificates: () => [], processMetrics: false });
  record(direct);
  for (const m of sent) applyMetric(replayed, m as MetricMessage);
  t.equal(replayed.render(), direct.render(), 'replayed events render as recorded ones');

  sent.length = 0;
  forwarded.csrSettled('kube-proxy');
  forwarded.caBundleRefusalCleared();
  for (const m of sent) applyMetric(replayed, m as MetricMessage);
  t.notMatch(replayed.render(), /^kubeboot_csr_pending_since_timestamp_seconds\{/m, 'csrSettled clears the pending series');
  t.notMatch(replayed.render(), /^kubeboot_ca_bundle_refused\{/m, 'and the refusal is cleared');
});
