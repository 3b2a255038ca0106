// What the daemon says about its identities, from typed views: /readyz,
// READY=1 and STATUS=, the "ready" log lines and status.json.
import { readFile } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import t from 'tap';
import type { Notifier } from '../../../agent/daemon/notify.js';
import { nodeReadyOf, readinessOf, Reporter, statusText, type IdentityView } from '../../../agent/daemon/report.js';
import { stateFile } from '../../../agent/daemon/state.js';
import type { IdentityName } from '../../../agent/identity.js';
import { createLogger } from '../../../agent/log.js';

const UNTIL = new Date('2027-01-01T00:00:00Z');
const EXPIRED = new Date('2026-11-01T00:00:00Z');

function view(name: IdentityName, o: Partial<Omit<IdentityView, 'name'>> & { csr?: string; error?: string } = {}): IdentityView {
  return {
    name,
    validUntil: o.validUntil ?? null,
    expiredAt: o.expiredAt ?? null,
    state: { nextRenewal: null, lastSuccess: null, lastError: o.error ?? null, pendingCsr: o.csr ?? null, lastHooks: [] },
  };
}

const valid = (name: IdentityName) => view(name, { validUntil: UNTIL });

t.test('each identity is described by what it is waiting for, most specific first', async (t) => {
  const cases: [string, IdentityView, string][] = [
    ['valid', valid('kubelet'), `kubelet: valid until ${UNTIL.toISOString()}`],
    [
      'a CSR in flight, even after an error',
      view('kube-proxy', { csr: 'node-csr-1', error: 'timed out' }),
      'kube-proxy: waiting for CSR node-csr-1 to be approved (kubectl certificate approve node-csr-1)',
    ],
    ['the last error', view('kube-proxy', { error: 'denied', expiredAt: EXPIRED }), 'kube-proxy: denied'],
    ['expired, nothing else known', view('kube-proxy', { expiredAt: EXPIRED }), `kube-proxy: expired at ${EXPIRED.toISOString()}`],
    ['nothing on disk', view('kube-proxy'), 'kube-proxy: no valid certificate'],
  ];
  for (const [what, v, want] of cases) t.same(readinessOf([v]).detail, [want], what);
});

t.test('readiness, READY=1 and STATUS= from the same views', async (t) => {
  const cases: { what: string; views: IdentityView[]; ready: boolean; nodeReady: boolean; status: RegExp }[] = [
    {
      what: 'all valid',
      views: [valid('kubelet'), valid('kube-proxy')],
      ready: true,
      nodeReady: true,
      status: /^credentials valid: kubelet: valid until .*; kube-proxy: valid until /,
    },
    {
      what: 'kubelet valid, kube-proxy pending: the node is ready, /readyz is not, STATUS names only the pending one',
      views: [valid('kubelet'), valid('kubelet-serving'), view('kube-proxy', { csr: 'c1' })],
      ready: false,
      nodeReady: true,
      status: /^kubelet ready; pending: kube-proxy: waiting for CSR c1 to be approved \(kubectl certificate approve c1\)$/,
    },
    {
      what: 'kubelet missing: nothing is ready',
      views: [view('kubelet', { error: 'no bootstrap kubeconfig' }), valid('kube-proxy')],
      ready: false,
      nodeReady: false,
      status: /^not ready: kubelet: no bootstrap kubeconfig; kube-proxy: valid until /,
    },
  ];
  for (const c of cases) {
    t.equal(readinessOf(c.views).ready, c.ready, `${c.what}: /readyz`);
    t.equal(nodeReadyOf(c.views), c.nodeReady, `${c.what}: READY=1`);
    t.match(statusText(c.views), c.status, `${c.what}: STATUS=`);
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
  const reporter = new Reporter({ notifier, logger, stateDir: () => dir, now: () => new Date('2026-12-01T00:00:00Z') });

  await reporter.publish([view('kubelet', { csr: 'k1' }), view('kube-proxy')]);
  await reporter.publish([valid('kubelet'), view('kube-proxy', { csr: 'p1' })]);
  await reporter.publish([valid('kubelet'), view('kube-proxy', { csr: 'p1' })]);
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
  const state = JSON.parse(await readFile(stateFile(dir), 'utf8')) as { identities: Record<string, { pendingCsr: string | null }> };
  t.same(Object.keys(state.identities), ['kubelet', 'kube-proxy'], 'status.json lists every identity');
});
