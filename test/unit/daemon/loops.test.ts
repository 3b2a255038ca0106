// The daemon's loops driven with a fake clock and undici's MockAgent: no
// sleeps, no control plane. The real control plane proves the same daemon
// end to end in test/e2e/daemon.test.ts.
import { mkdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import t, { type Test } from 'tap';
import type { IdentityName } from '../../../agent/identity.js';
import { MockAgent } from 'undici';
import type { Config } from '../../../agent/config/types.js';
import { RenewalLoops, type LoopsEnd, type LoopsSink } from '../../../agent/daemon/loops.js';
import { createMetrics, type KubebootMetrics } from '../../../agent/daemon/metrics.js';
import { createNotifier } from '../../../agent/daemon/notify.js';
import { REST_AFTER_MS, type Carry } from '../../../agent/daemon/pass-protocol.js';
import { Reporter, type IdentityView } from '../../../agent/daemon/report.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { renderClientKubeconfig } from '../../../agent/kubeconfig/render.js';
import { createLogger } from '../../../agent/log.js';
import { parseCertificateChain } from '../../../agent/pki/certificate.js';
import { renewalDeadline } from '../../../agent/renewal/deadline.js';
import { storeCredential } from '../../../agent/store/cert-store.js';
import { writeFileAtomic } from '../../../agent/store/atomic.js';
import { FakeClock } from '../../../agent/time/clock.js';
import { listenNotifySocket } from '../../support/notify-socket.js';
import { configIn } from '../../support/node-config.js';
import { until } from '../../support/until.js';
import { createCa, issueLeaf, signRequest, type CertAndKey } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const logger = createLogger({ level: 'error', format: 'json' });

/** A LoopsSink that keeps what the daemon reports, as the resting daemon would receive it. */
interface RecordingSink extends LoopsSink {
  metrics: KubebootMetrics;
  reports: { views: IdentityView[]; carry: Carry; done: Partial<Record<IdentityName, number>> }[];
  /** Each progress report: when (fake monotonic) and how long until the next is due. */
  progressed: { at: number; msLeft: number }[];
}

function recordingSink(clock: FakeClock, config: Config, publish?: StartOptions['publish']): RecordingSink {
  const sink: RecordingSink = {
    metrics: createMetrics({ certificates: () => [], now: () => clock.now(), processMetrics: false }),
    reports: [],
    progressed: [],
    report: async (views, carry, done) => {
      sink.reports.push({ views, carry, done });
      await publish?.(views, config);
    },
    progress: (msLeft) => void sink.progressed.push({ at: clock.monotonic(), msLeft }),
  };
  return sink;
}

interface StartOptions {
  carry?: Carry;
  restAfterMs?: number | null;
  random?: () => number;
  env?: NodeJS.ProcessEnv;
  /** What the sink does with each report besides recording it (a Reporter, for READY=1). */
  publish?: (views: IdentityView[], config: Config) => Promise<void>;
}

interface Started {
  daemon: RenewalLoops;
  running: Promise<LoopsEnd>;
  sink: RecordingSink;
}

interface Node extends Started {
  config: Config;
  ca: CertAndKey;
  agent: MockAgent;
  clock: FakeClock;
  /** The kubelet certificate the node starts with. */
  kubeletPem: string;
  /** Another pass on the same node's files, clock and API (as the resting daemon starts one). */
  start: (o?: StartOptions) => Started;
  stop: () => Promise<void>;
}

/** A node whose kubelet already holds a valid certificate; kube-proxy as asked. */
async function node(t: Test, o: StartOptions & { kubeProxy: boolean }): Promise<Node> {
  // Teardowns run in the order they were added, and t.testdir() adds the
  // fixture's removal: the daemon must be stopped first, or it writes into
  // a directory being removed (ENOTEMPTY) and runs on with its files gone.
  const stopper = new AbortController();
  const running: Promise<LoopsEnd>[] = [];
  let agent: MockAgent | null = null;
  const stop = async () => {
    stopper.abort();
    await Promise.all(running);
    await agent?.close();
  };
  t.teardown(stop);
  const dir = t.testdir();
  const config = configIn(dir);
  config.kubeProxy.enabled = o.kubeProxy;
  const ca = await createCa('unit-ca');
  const leaf = await issueLeaf(ca, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' });
  const kubelet = identitiesFor(config)[0]!;
  await mkdir(kubelet.certDir, { recursive: true });
  const stored = await storeCredential(kubelet, leaf.certPem, leaf.keyPem, new Date());
  await writeFileAtomic(
    config.kubelet.kubeconfig,
    renderClientKubeconfig({
      server: SERVER,
      caPem: ca.certPem,
      certFile: stored.currentPath,
      keyFile: stored.currentPath,
      userName: 'default-auth',
      tlsServerName: null,
    }),
    { mode: 0o600 },
  );

  const mock = new MockAgent();
  agent = mock;
  mock.disableNetConnect();
  const clock = new FakeClock(new Date());
  const start = (s: StartOptions = {}): Started => {
    const sink = recordingSink(clock, config, s.publish);
    const daemon = new RenewalLoops({
      config,
      logger,
      signal: stopper.signal,
      sink,
      ...(s.carry ? { carry: s.carry } : {}),
      restAfterMs: s.restAfterMs ?? null,
      env: s.env ?? {},
      clock,
      random: s.random ?? (() => 0.5),
      dispatcher: mock,
    });
    const started = { daemon, running: daemon.run(), sink };
    running.push(started.running);
    return started;
  };
  return { config, ca, agent: mock, clock, kubeletPem: leaf.certPem, ...start(o), start, stop };
}

/** The CSR API approves and signs whatever is asked, once; `signed()` is the last certificate issued. */
function signEverything(n: Node): { signed: () => string } {
  const pool = n.agent.get(SERVER);
  let issued = '';
  pool.intercept({ path: CSRS, method: 'POST' }).reply(async (opts) => {
    const body = JSON.parse(String(opts.body)) as { metadata: { name: string }; spec: { request: string; signerName: string } };
    issued = await signRequest(n.ca, Buffer.from(body.spec.request, 'base64').toString(), { usage: 'client' });
    return { statusCode: 201, data: { ...body, metadata: { ...body.metadata, uid: 'u1', resourceVersion: '1' } } };
  });
  pool.intercept({ path: (p) => p.startsWith(`${CSRS}?`), method: 'GET' }).reply(() => ({
    statusCode: 200,
    data: {
      metadata: { resourceVersion: '2' },
      items: [
        {
          metadata: { name: 'any', uid: 'u1' },
          spec: { request: '', signerName: '' },
          status: { conditions: [{ type: 'Approved', status: 'True' }], certificate: Buffer.from(issued).toString('base64') },
        },
      ],
    },
  }));
  pool
    .intercept({ path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', method: 'POST' })
    .reply(200, { status: { userInfo: { username: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] } } });
  return { signed: () => issued };
}

/** The renewal deadline `random` draws for the kubelet certificate the node started with. */
function deadlineOf(n: Node, random: () => number): Date {
  return renewalDeadline(parseCertificateChain(n.kubeletPem)[0]!, { margin: n.config.renewal.margin }, random);
}

/**
 * A reply held back longer than the test runs, so the request is in flight
 * throughout; short enough that a teardown racing it ends in a minute, not
 * at tap's 20-minute timeout (seen once on a loaded machine).
 */
const NEVER_IN_THIS_TEST_MS = 60_000;

t.test('READY waits only for the kubelet: kube-proxy pending does not hold the node back', async (t) => {
  // Abstract: no directory is used, so the node's fixture is still removed only after the daemon stopped.
  const notify = await listenNotifySocket(tmpdir(), { abstract: true });
  t.teardown(() => notify.close());
  // READY=1 is the resting daemon's to send: a Reporter fed by what the loops report, as supervisor.ts does.
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: notify.path, PATH: process.env.PATH }, logger });
  let reporter: Reporter | null = null;
  const n = await node(t, {
    kubeProxy: true,
    publish: (views, config) => {
      reporter ??= new Reporter({ notifier, logger, stateDir: () => config.stateDir, now: () => new Date() });
      return reporter.publish(views);
    },
  });
  let csrPosted = false;
  // The kube-proxy CSR goes out and is never answered: no approver.
  n.agent
    .get(SERVER)
    .intercept({ path: CSRS, method: 'POST' })
    .reply(() => {
      csrPosted = true;
      return {
        statusCode: 201,
        data: {
          kind: 'CertificateSigningRequest',
          metadata: { name: 'node-csr-x', uid: 'u1' },
          spec: { request: '', signerName: 'kubernetes.io/kube-apiserver-client' },
        },
      };
    })
    .delay(NEVER_IN_THIS_TEST_MS);
  const ready = await notify.waitFor((m) => m.includes('READY=1'), 30_000);
  t.match(ready, /STATUS=kubelet ready; pending: kube-proxy: /, 'systemd hears READY=1 with kube-proxy named as pending');
  await until('the kube-proxy CSR request', () => csrPosted);
  t.ok(n.daemon.nodeReady(), 'the node is ready: the kubelet credential is valid');
  t.notOk(n.daemon.readiness().ready, '/readyz is not: kube-proxy has no credential');
  t.match(n.daemon.readiness().detail.join('\n'), /^kube-proxy: (?!valid)/m, 'and it says which identity is missing');
  const last = n.sink.reports.at(-1)!.views;
  t.ok(last.find((v) => v.name === 'kubelet')?.validUntil, 'the reported kubelet view is valid');
  t.equal(last.find((v) => v.name === 'kube-proxy')?.validUntil, null, 'the reported kube-proxy view is not');
});

t.test('a loop stuck in one pass fails the liveness check; sleeping loops never do', async (t) => {
  const n = await node(t, { kubeProxy: true });
  let csrPosted = false;
  n.agent
    .get(SERVER)
    .intercept({ path: CSRS, method: 'POST' })
    .reply(() => {
      csrPosted = true;
      return { statusCode: 201, data: {} };
    })
    .delay(NEVER_IN_THIS_TEST_MS);
  await until('the kube-proxy CSR request', () => csrPosted);
  t.ok(n.daemon.healthy(), 'healthy while the pass is young');
  // waitTimeout 60 s: a pass is bounded by 4 × 60 s + 5 min, plus 30 s of grace.
  await n.clock.tick(9 * 60_000 + 29_000);
  t.ok(n.daemon.healthy(), 'still healthy just inside the bound');
  await n.clock.tick(2_000);
  t.notOk(n.daemon.healthy(), 'the kube-proxy loop, stuck in its request, is reported');
  // What the resting daemon hears: the earliest bound, which has passed.
  const last = n.sink.progressed.at(-1)!;
  t.ok(last.at + last.msLeft < n.clock.monotonic(), 'the last progress report says the bound has passed');
});

t.test('a daemon asleep for a day stays healthy: each loop shows life every minute', async (t) => {
  const n = await node(t, { kubeProxy: false });
  await until('the kubelet loop to go to sleep', () => n.clock.pending > 0);
  for (let hour = 0; hour < 24; hour++) await n.clock.tick(3_600_000);
  t.ok(n.daemon.healthy(), 'healthy after 24 h of fake time');
  const last = n.sink.progressed.at(-1)!;
  t.ok(last.at + last.msLeft >= n.clock.monotonic(), 'and its progress reports say so');
});

t.test('kubelet files deleted behind its back: renewed with the credential still held in memory', async (t) => {
  const n = await node(t, { kubeProxy: false });
  await until('the kubelet loop to go to sleep', () => n.clock.pending > 0);
  const api = signEverything(n);

  await rm(n.config.kubelet.kubeconfig);
  n.daemon.nudge(['kubelet'], false);
  await until('kubelet.conf to be written again', async () =>
    (await readFile(n.config.kubelet.kubeconfig, 'utf8').catch(() => '')).includes('client-certificate'),
  );
  t.ok(api.signed(), 'a CSR was signed: the renewal was authenticated with the in-memory credential, not a bootstrap token');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and the SelfSubjectReview proof all happened');
  await until('the daemon to record the new credential', () => n.daemon.nodeReady());
  t.pass('ready again');
});

t.test('every loop asleep past restAfterMs: the pass ends, resting until the renewal deadline with what the next pass needs', async (t) => {
  const n = await node(t, { kubeProxy: false, restAfterMs: REST_AFTER_MS });
  const end = await n.running;
  const deadline = deadlineOf(n, () => 0.5);
  t.equal(end.kind, 'resting');
  if (end.kind !== 'resting') return;
  t.equal(end.until.toISOString(), deadline.toISOString(), 'until the kubelet renewal deadline');
  t.equal(end.lastSeq, 0, 'no nudge applied');
  const slot = end.carry.slots.kubelet!;
  t.equal(slot.deadline?.at, deadline.toISOString(), 'the drawn deadline is carried');
  t.equal(slot.state.nextRenewal, deadline.toISOString(), 'and so is the state');
  t.equal(slot.attempt, 0);
  t.ok(end.carry.lastGoodKubelet?.certPem.includes(n.kubeletPem.trim()), 'the kubelet credential seen valid is carried');
  t.ok(end.carry.lastGoodKubelet?.keyPem.includes('PRIVATE KEY'), 'with its key, for a re-issue after the files go');
  t.same(n.sink.reports.at(-1)?.carry, end.carry, 'the last report carried the same');
  t.ok(n.daemon.nodeReady(), 'the views stay valid after the pass ends');
  t.equal(n.daemon.apply({ names: 'all', force: true, seq: 1 }), false, 'a nudge after resting is refused: the next pass gets it');
  t.same(n.agent.pendingInterceptors(), [], 'nothing was asked of the API');
});

t.test('a loop that must look again sooner keeps the pass; restAfterMs null never rests', async (t) => {
  const n = await node(t, { kubeProxy: false, restAfterMs: null });
  await until('the kubelet loop to go to sleep', () => n.clock.pending > 0);
  let ended = false;
  void n.running.then(() => (ended = true));
  await n.clock.tick(3_600_000);
  t.notOk(ended, 'still running an hour on');
  const late = await node(t, { kubeProxy: false, restAfterMs: 30 * 24 * 3_600_000 });
  let lateEnded = false;
  void late.running.then(() => (lateEnded = true));
  await until('the kubelet loop to go to sleep', () => late.clock.pending > 0);
  await late.clock.tick(60_000);
  t.notOk(lateEnded, 'a deadline closer than restAfterMs keeps the pass running');
});

t.test('a nudge applied before resting is honoured, and only applied nudges count in lastSeq', async (t) => {
  const n = await node(t, { kubeProxy: false, restAfterMs: REST_AFTER_MS });
  const api = signEverything(n);
  t.ok(n.daemon.apply({ names: ['kubelet'], force: true, seq: 7 }), 'applied while the pass runs');
  const end = await n.running;
  t.equal(end.kind, 'resting');
  if (end.kind !== 'resting') return;
  t.ok(api.signed(), 'the forced renewal happened before the pass rested');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and proof');
  t.equal(end.lastSeq, 7, 'lastSeq is the nudge applied');
  t.equal(n.sink.reports.at(-1)?.done.kubelet, 7, 'and the kubelet reported it answered: a crash now would not renew again');
  t.match(n.sink.metrics.render(), /^kubeboot_renewals_total\{identity="kubelet"\} 1$/m, 'the renewal reached the sink');
  const renewed = end.carry.slots.kubelet!;
  t.ok(renewed.state.lastSuccess, 'the carry records the success');
  t.not(end.until.toISOString(), deadlineOf(n, () => 0.5).toISOString(), "resting until the new certificate's deadline");
  t.equal(renewed.deadline?.at, end.until.toISOString());
  t.equal(n.daemon.apply({ names: 'all', force: true, seq: 8 }), false, 'seq 8 arrives after the rest: not applied');
  t.equal(n.daemon.reconfigure(n.config, 9), false, 'nor is a new configuration');
});

t.test("a new pass with the previous pass's carry reuses the drawn deadline: no new jitter", async (t) => {
  const n = await node(t, { kubeProxy: false, restAfterMs: REST_AFTER_MS });
  const first = await n.running;
  t.equal(first.kind, 'resting');
  if (first.kind !== 'resting') return;
  let draws = 0;
  const other = () => (draws++, 0.9);
  t.not(deadlineOf(n, () => 0.9).toISOString(), first.until.toISOString(), 'a new draw would move the deadline');
  // The carry crosses a process boundary as JSON.
  const carry = JSON.parse(JSON.stringify(first.carry)) as Carry;
  const second = n.start({ carry, restAfterMs: REST_AFTER_MS, random: other });
  const end = await second.running;
  t.equal(end.kind, 'resting');
  if (end.kind !== 'resting') return;
  t.equal(end.until.toISOString(), first.until.toISOString(), 'the second pass rests until the same deadline');
  t.equal(draws, 0, 'without drawing');
  t.same(end.carry.slots.kubelet?.deadline, first.carry.slots.kubelet?.deadline, 'and hands it on');
});

t.test('kubelet files deleted between passes: the next pass renews with the carried credential', async (t) => {
  const n = await node(t, { kubeProxy: false, restAfterMs: REST_AFTER_MS });
  const first = await n.running;
  if (first.kind !== 'resting') return t.fail(`ended ${first.kind}`);
  const api = signEverything(n);
  await rm(n.config.kubelet.kubeconfig);
  const second = n.start({ carry: JSON.parse(JSON.stringify(first.carry)) as Carry, restAfterMs: REST_AFTER_MS });
  const end = await second.running;
  t.equal(end.kind, 'resting');
  t.ok(api.signed(), 'a CSR was signed: authenticated with the carried credential, not a bootstrap token');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and the SelfSubjectReview proof all happened');
  t.match(await readFile(n.config.kubelet.kubeconfig, 'utf8'), /client-certificate/, 'kubelet.conf is written again');
  t.ok(second.daemon.nodeReady(), 'ready again');
});
