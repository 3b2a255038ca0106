// What the daemon says about its identities, from their records
// (renewal/record.ts): /readyz, READY=1 and STATUS=, the "ready" log lines
// and status.json. Whether a certificate is valid is asked at `NOW`.
import { readFile } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import t from 'tap';
import type { Notifier } from '../../../agent/service/notify.js';
import { nodeReadyOf, readinessOf, Reporter, statusText } from '../../../agent/daemon/report.js';
import { stateFile } from '../../../agent/daemon/state.js';
import type { IdentityName } from '../../../agent/identity.js';
import { createLogger } from '../../../agent/log.js';
import { emptyRecord, type IdentityRecord } from '../../../agent/renewal/record.js';

const NOW = new Date('2026-12-01T00:00:00Z');
const UNTIL = new Date('2027-01-01T00:00:00Z');
const EXPIRED = new Date('2026-11-01T00:00:00Z');

function record(name: IdentityName, o: { notAfter?: Date; csr?: string; error?: string } = {}): IdentityRecord {
  return { ...emptyRecord(name), notAfter: o.notAfter?.toISOString() ?? null, lastError: o.error ?? null, pendingCsr: o.csr ?? null };
}

const valid = (name: IdentityName) => record(name, { notAfter: UNTIL });

t.test('each identity is described by what it is waiting for, most specific first', async (t) => {
  const cases: [string, IdentityRecord, string][] = [
    ['valid', valid('kubelet'), `kubelet: valid until ${UNTIL.toISOString()}`],
    [
      'a CSR in flight, even after an error',
      record('kube-proxy', { csr: 'node-csr-1', error: 'timed out' }),
      'kube-proxy: waiting for CSR node-csr-1 to be approved (kubectl certificate approve node-csr-1)',
    ],
    ['the last error', record('kube-proxy', { error: 'denied', notAfter: EXPIRED }), 'kube-proxy: denied'],
    ['expired, nothing else known', record('kube-proxy', { notAfter: EXPIRED }), `kube-proxy: expired at ${EXPIRED.toISOString()}`],
    ['nothing on disk', record('kube-proxy'), 'kube-proxy: no valid certificate'],
  ];
  for (const [what, r, want] of cases) t.same(readinessOf([r], NOW).detail, [want], what);
});

t.test('validity is asked of the clock, not of the last step: a certificate that expires since is no longer ready', async (t) => {
  const records = [valid('kubelet')];
  t.ok(nodeReadyOf(records, NOW), 'ready before notAfter');
  t.notOk(nodeReadyOf(records, UNTIL), 'not at notAfter');
  t.same(readinessOf(records, UNTIL).detail, [`kubelet: expired at ${UNTIL.toISOString()}`], 'and /readyz says it expired');
});

t.test('readiness, READY=1 and STATUS= from the same records', async (t) => {
  const cases: { what: string; records: IdentityRecord[]; ready: boolean; nodeReady: boolean; status: RegExp }[] = [
    {
      what: 'all valid',
      records: [valid('kubelet'), valid('kube-proxy')],
      ready: true,
      nodeReady: true,
      status: /^credentials valid: kubelet: valid until .*; kube-proxy: valid until /,
    },
    {
      what: 'kubelet valid, kube-proxy pending: the node is ready, /readyz is not, STATUS names only the pending one',
      records: [valid('kubelet'), valid('kubelet-serving'), record('kube-proxy', { csr: 'c1' })],
      ready: false,
      nodeReady: true,
      status: /^kubelet ready; pending: kube-proxy: waiting for CSR c1 to be approved \(kubectl certificate approve c1\)$/,
    },
    {
      what: 'kubelet missing: nothing is ready',
      records: [record('kubelet', { error: 'no bootstrap kubeconfig' }), valid('kube-proxy')],
      ready: false,
      nodeReady: false,
      status: /^not ready: kubelet: no bootstrap kubeconfig; kube-proxy: valid until /,
    },
  ];
  for (const c of cases) {
    t.equal(readinessOf(c.records, NOW).ready, c.ready, `${c.what}: /readyz`);
    t.equal(nodeReadyOf(c.records, NOW), c.nodeReady, `${c.what}: READY=1`);
    t.match(statusText(c.records, NOW), c.status, `${c.what}: STATUS=`);
  }
});

t.test('the reporter sends READY=1 once, then only STATUS=, and keeps status.json current', async (t) => {
  const sent: string[] = [];
  const notifier: Notifier = {
    enabled: true,
    ready: async (s) => (sent.push(`READY ${s}`), true),
    status: async (s) => (sent.push(`STATUS ${s}`), true),
    watchdog: async () => true,
    stopping: async () => true,
  };
  const stream = new PassThrough();
  let said = '';
  stream.on('data', (d: Buffer) => (said += d.toString()));
  const logger = createLogger({ level: 'info', format: 'text', stream });
  const dir = t.testdir();
  const reporter = new Reporter({ notifier, logger, stateDir: () => dir, now: () => NOW });

  await reporter.publish([record('kubelet', { csr: 'k1' }), record('kube-proxy')]);
  await reporter.publish([valid('kubelet'), record('kube-proxy', { csr: 'p1' })]);
  await reporter.publish([valid('kubelet'), record('kube-proxy', { csr: 'p1' })]);
  await reporter.publish([valid('kubelet'), valid('kube-proxy')]);
  await reporter.publish([valid('kubelet'), valid('kube-proxy')]);

  t.same(
    sent.map((s) => s.split(':')[0]),
    [
      'STATUS not ready',
      'READY kubelet ready; pending',
      'STATUS kubelet ready; pending',
      'STATUS credentials valid',
      'STATUS credentials valid',
    ],
    'READY=1 exactly once, when the kubelet turned valid',
  );
  t.match(said, /kubelet credential valid; ready \(the kubelet may start\); pending: kube-proxy: waiting for CSR p1/);
  t.equal(said.split('all credentials valid').length - 1, 1, 'the move to all-valid is logged once');
  const state = JSON.parse(await readFile(stateFile(dir), 'utf8')) as { updated: string; identities: Record<string, IdentityRecord> };
  t.same(Object.keys(state.identities), ['kubelet', 'kube-proxy'], 'status.json lists every identity');
  t.same(state.identities.kubelet, valid('kubelet'), 'each as its record: the file holds what the daemon holds');
  t.equal(state.updated, NOW.toISOString());
});
