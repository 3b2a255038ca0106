// One step for one identity (renewal/step.ts) driven with a fake clock and
// undici's MockAgent, as a worker runs it when the daemon sends it: no
// sleeps, no control plane. What the daemon does with the answers (when to
// send the next step, liveness, READY=1) is tested with the daemon; the real
// control plane proves both end to end in test/e2e/daemon.test.ts.
import { PassThrough } from 'node:stream';
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { identitiesFor } from '../../../agent/config/identities.js';
import type { Config } from '../../../agent/config/types.js';
import { createMetrics, type KubebootMetrics } from '../../../agent/daemon/metrics.js';
import { nodeReadyOf, readinessOf, statusText } from '../../../agent/daemon/report.js';
import { carriedCredential, restoredCredential } from '../../../agent/daemon/worker-protocol.js';
import { ApiError } from '../../../agent/errors.js';
import type { IdentityName } from '../../../agent/identity.js';
import { renderClientKubeconfig } from '../../../agent/kubeconfig/render.js';
import { createLogger } from '../../../agent/log.js';
import { parseCertificateChain } from '../../../agent/pki/certificate.js';
import { renewalDeadline } from '../../../agent/renewal/deadline.js';
import { RECHECK_MS, retryPlan, STEP_ASIDE_RECHECK_MS } from '../../../agent/renewal/plan.js';
import { emptyRecord, validUntil, type IdentityRecord } from '../../../agent/renewal/record.js';
import { runIdentityStep, type StepMemory, type StepResult } from '../../../agent/renewal/step.js';
import { FakeClock } from '../../support/fake-time.js';
import { serializer } from '../../../agent/store/serializer.js';
import { type MemoryStore, memoryStore } from '../../support/memory-store.js';
import { configIn } from '../../support/node-config.js';
import { createCa, issueLeaf, signRequest, type CertAndKey } from '../../support/pki.js';
import { until } from '../../support/until.js';

const SERVER = 'https://api.test:6443';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

interface StepOptions {
  force?: boolean;
  random?: () => number;
  /** What the worker's steps share; the node's own unless a test starts another worker. */
  memory?: StepMemory;
  signal?: AbortSignal;
}

interface Node {
  config: Config;
  /** The node's files. */
  store: MemoryStore;
  ca: CertAndKey;
  agent: MockAgent;
  clock: FakeClock;
  metrics: KubebootMetrics;
  /** The memory of the worker these steps run in. */
  memory: StepMemory;
  /** The kubelet certificate the node starts with. */
  kubeletPem: string;
  /** Every record a step reported while it ran (onRecord), in order. */
  reported: IdentityRecord[];
  /** What the steps logged so far (info and up). */
  said: () => string;
  step: (name: IdentityName, record: IdentityRecord, o?: StepOptions) => Promise<StepResult>;
}

/** A node whose kubelet already holds a valid certificate; kube-proxy as asked. */
async function node(t: Test, o: { kubeProxy: boolean }): Promise<Node> {
  // Teardowns run in the order they were added, and t.testdir() adds the
  // fixture's removal: steps still running are stopped first, or they write
  // into a directory being removed.
  const stopper = new AbortController();
  const running = new Set<Promise<StepResult>>();
  let agent: MockAgent | null = null;
  t.teardown(async () => {
    stopper.abort();
    await Promise.allSettled([...running]);
    await agent?.close();
  });
  const config = configIn('/node');
  config.kubeProxy.enabled = o.kubeProxy;
  const ca = await createCa('unit-ca');
  const leaf = await issueLeaf(ca, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' });
  const kubelet = identitiesFor(config)[0]!;
  // The node's files in memory: the steps are given the Store, as the worker gives them its disk one.
  const store = memoryStore();
  const stored = await store.update(kubelet, leaf.certPem, leaf.keyPem, new Date());
  await store.write(
    config.kubelet.kubeconfig,
    renderClientKubeconfig({
      server: SERVER,
      caPem: ca.certPem,
      certFile: stored.currentPath,
      keyFile: stored.currentPath,
      userName: 'default-auth',
      tlsServerName: null,
    }),
  );

  const mock = new MockAgent();
  agent = mock;
  mock.disableNetConnect();
  const clock = new FakeClock(new Date());
  const metrics = createMetrics({ certificates: () => [], now: () => clock.now(), processMetrics: false });
  const memory: StepMemory = { lastGoodKubelet: null, provenKubeletPem: null };
  const reported: IdentityRecord[] = [];
  const stream = new PassThrough();
  let said = '';
  stream.on('data', (d: Buffer) => (said += d.toString()));
  const logger = createLogger({ level: 'info', format: 'text', stream });
  const serialize = serializer();
  const step = (name: IdentityName, record: IdentityRecord, s: StepOptions = {}): Promise<StepResult> => {
    const identity = identitiesFor(config).find((i) => i.name === name)!;
    const done = runIdentityStep(config, identity, record, s.force ?? false, {
      logger,
      clock,
      random: s.random ?? (() => 0.5),
      signal: s.signal ? AbortSignal.any([s.signal, stopper.signal]) : stopper.signal,
      metrics,
      memory: s.memory ?? memory,
      dispatcher: mock,
      store,
      serialize,
      onRecord: (r) => void reported.push(r),
    });
    running.add(done);
    void done.finally(() => running.delete(done)).catch(() => undefined);
    return done;
  };
  return { config, ca, store, agent: mock, clock, metrics, memory, kubeletPem: leaf.certPem, reported, said: () => said, step };
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

/**
 * The CSR is created and never approved: no approver. Watching is refused,
 * so the wait polls on the fake clock (every 5 s) instead of holding a
 * request open in real time; `posted()` says whether the CSR went out.
 */
function neverApproved(n: Node): { posted: () => boolean } {
  const pool = n.agent.get(SERVER);
  let posted = false;
  pool.intercept({ path: CSRS, method: 'POST' }).reply((opts) => {
    posted = true;
    const body = JSON.parse(String(opts.body)) as { metadata: { name: string } };
    return { statusCode: 201, data: { ...body, metadata: { ...body.metadata, uid: 'u1', resourceVersion: '1' } } };
  });
  pool
    .intercept({ path: (p) => p.startsWith(`${CSRS}?`), method: 'GET' })
    .reply<object>((opts) =>
      String(opts.path).includes('watch=true')
        ? { statusCode: 403, data: { kind: 'Status', status: 'Failure', reason: 'Forbidden', message: 'no watching', code: 403 } }
        : {
            statusCode: 200,
            data: {
              metadata: { resourceVersion: '2' },
              items: [{ metadata: { name: 'any', uid: 'u1' }, spec: { request: '', signerName: '' } }],
            },
          },
    )
    .persist();
  return { posted: () => posted };
}

const leafOf = (pem: string) => parseCertificateChain(pem)[0]!;
/** The credential file (certificate and key in one) holds this certificate. */
const holds = (file: string | null | undefined, certPem: string) => file?.includes(certPem.trim()) === true;
/** The renewal deadline `random` draws for the kubelet certificate the node started with. */
const deadlineOf = (n: Node, random: () => number) => renewalDeadline(leafOf(n.kubeletPem), { margin: n.config.renewal.margin }, random);
/** The samples of one metric family, as /metrics serves them. */
const samples = (n: Node, name: string) =>
  n.metrics
    .render()
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .join('\n');
/** A record as it crosses the IPC channel and comes back with the next step. */
const overTheWire = (r: IdentityRecord) => JSON.parse(JSON.stringify(r)) as IdentityRecord;

t.test('a valid certificate not yet due: look again at its renewal deadline, drawn once per certificate and renew margin', async (t) => {
  const n = await node(t, { kubeProxy: false });
  let draws = 0;
  const counted = (r: number) => () => (draws++, r);

  const first = await n.step('kubelet', emptyRecord('kubelet'), { random: counted(0.5) });
  const deadline = deadlineOf(n, () => 0.5);
  t.equal(first.next.toISOString(), deadline.toISOString(), 'next is the renewal deadline');
  t.equal(first.record.nextRenewal, deadline.toISOString(), 'and the record says so, for status.json');
  t.equal(first.record.notAfter, leafOf(n.kubeletPem).notAfter.toISOString(), 'the record holds when the certificate expires');
  t.equal(first.issued, false);
  t.equal(first.record.lastError, null, 'nothing was asked of the API (it has no answers)');
  t.equal(draws, 1, 'the jitter is drawn once');

  t.not(deadlineOf(n, () => 0.9).toISOString(), deadline.toISOString(), 'a new draw would move the deadline');
  const again = await n.step('kubelet', overTheWire(first.record), { random: counted(0.9) });
  t.equal(again.next.toISOString(), deadline.toISOString(), 'the same certificate, the same deadline, in any worker');
  t.equal(draws, 1, 'without drawing again');
  t.equal(n.said().split('renewal scheduled for').length - 1, 1, 'and the schedule is logged once');

  // SIGHUP with a new renew margin: the deadline is drawn again, under it.
  n.config.renewal.margin = 2 * 86400;
  const margined = await n.step('kubelet', overTheWire(again.record), { random: counted(0.5) });
  t.equal(draws, 2, 'a different renew margin draws again');
  const want = renewalDeadline(leafOf(n.kubeletPem), { margin: 2 * 86400 }, () => 0.5);
  t.equal(margined.next.toISOString(), want.toISOString(), 'and the deadline follows the margin');
  t.ok(want < deadline, 'which moved it earlier');
  t.equal(margined.record.nextRenewal, want.toISOString());
});

t.test('a forced step renews a certificate not yet due, records success and hooks, and asks for the next step now', async (t) => {
  const n = await node(t, { kubeProxy: false });
  n.config.kubelet.hooks = [
    [process.execPath, '-e', ''],
    [process.execPath, '-e', 'process.exit(3)'],
  ];
  const api = signEverything(n);
  const before = { ...emptyRecord('kubelet'), attempt: 2, lastError: 'an earlier failure' };
  const looked = await n.step('kubelet', before);
  t.equal(looked.record.attempt, 2, 'a step that only looks leaves the back-off as it was');

  const forced = await n.step('kubelet', looked.record, { force: true });
  const now = n.clock.now().toISOString();
  t.equal(forced.issued, true, 'renewed, though not due');
  t.equal(forced.next.toISOString(), now, 'look again at once: that step schedules the new certificate');
  t.ok(api.signed(), 'the CSR was signed');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and the SelfSubjectReview proof all happened');
  t.match(forced.record, {
    name: 'kubelet',
    notAfter: leafOf(api.signed()).notAfter.toISOString(),
    lastSuccess: now,
    lastError: null,
    pendingCsr: null,
    attempt: 0,
    deadline: null,
  });
  t.match(
    forced.record.lastHooks,
    [
      { argv: [process.execPath, '-e', ''], ok: true, exitCode: 0, at: now },
      { argv: [process.execPath, '-e', 'process.exit(3)'], ok: false, exitCode: 3, at: now },
    ],
    'each hook, with its outcome',
  );
  t.ok(forced.seen?.state === 'usable' && holds(forced.seen.certPem, api.signed()), 'the step saw the new certificate on disk');
  t.ok(holds(n.memory.provenKubeletPem, api.signed()), 'the kubelet certificate it issued counts as proven (the token may go)');
  t.match(n.reported.at(-1), { name: 'kubelet', pendingCsr: /^node-csr-/ }, 'the CSR was reported while it was in flight');
  t.match(samples(n, 'kubeboot_renewals_total'), /^kubeboot_renewals_total\{identity="kubelet"\} 1$/m, 'the renewal is counted');
  t.match(samples(n, 'kubeboot_hook_failures_total'), /^kubeboot_hook_failures_total\{identity="kubelet"\} 1$/m, 'and the failed hook');
  t.equal(looked.record.lastHooks.length, 0, 'the record handed in is not changed');

  const next = await n.step('kubelet', forced.record);
  const deadline = renewalDeadline(leafOf(api.signed()), { margin: 0 }, () => 0.5);
  t.equal(next.issued, false, 'the next step does not renew again');
  t.equal(next.next.toISOString(), deadline.toISOString(), "it sleeps until the new certificate's deadline");
  t.equal(next.record.nextRenewal, deadline.toISOString());
});

t.test('kubelet files deleted behind its back: renewed with the credential still held in memory', async (t) => {
  const n = await node(t, { kubeProxy: false });
  const first = await n.step('kubelet', emptyRecord('kubelet'));
  t.ok(holds(n.memory.lastGoodKubelet?.certPem, n.kubeletPem), 'a step remembers the kubelet credential it saw valid');
  const api = signEverything(n);

  n.store.files.delete(n.config.kubelet.kubeconfig);
  const renewed = await n.step('kubelet', first.record);
  t.equal(renewed.issued, true, 'renewed at once, not at the deadline');
  t.ok(api.signed(), 'a CSR was signed: authenticated with the in-memory credential, not a bootstrap token');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and the SelfSubjectReview proof all happened');
  t.match(n.store.files.get(n.config.kubelet.kubeconfig), /client-certificate/, 'kubelet.conf is written again');
  t.ok(validUntil(renewed.record, n.clock.now()), 'the record says the kubelet is valid again');
});

t.test('kubelet files deleted while no worker ran: the next worker renews with the credential handed over', async (t) => {
  const n = await node(t, { kubeProxy: false });
  const first = await n.step('kubelet', emptyRecord('kubelet'));
  // The hand-over crosses the IPC channel twice (worker → daemon → next worker) as JSON.
  const handedOver = JSON.parse(JSON.stringify(carriedCredential(n.memory.lastGoodKubelet))) as ReturnType<typeof carriedCredential>;
  t.ok(handedOver?.keyPem.includes('PRIVATE KEY'), 'with its key, for a re-issue after the files go');
  const next: StepMemory = { lastGoodKubelet: restoredCredential(n.config, handedOver), provenKubeletPem: null };
  const api = signEverything(n);

  n.store.files.delete(n.config.kubelet.kubeconfig);
  const renewed = await n.step('kubelet', overTheWire(first.record), { memory: next });
  t.equal(renewed.issued, true);
  t.ok(api.signed(), 'a CSR was signed: authenticated with the handed-over credential, not a bootstrap token');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and the SelfSubjectReview proof all happened');
  t.match(n.store.files.get(n.config.kubelet.kubeconfig), /client-certificate/, 'kubelet.conf is written again');
});

t.test('a failed step records the error and when to retry, counts it, and does not throw', async (t) => {
  const n = await node(t, { kubeProxy: false });
  const pool = n.agent.get(SERVER);
  const forbidden = { kind: 'Status', status: 'Failure', reason: 'Forbidden', message: 'no CSRs for you', code: 403 };
  pool.intercept({ path: CSRS, method: 'POST' }).reply(403, forbidden).times(2);
  const notAfter = leafOf(n.kubeletPem).notAfter;
  const err = new ApiError({ method: 'POST', path: CSRS, status: 403, reason: 'Forbidden', message: 'no CSRs for you' });

  const failed = await n.step('kubelet', emptyRecord('kubelet'), { force: true });
  const now = n.clock.now();
  const plan = retryPlan(err, 0, { now, notAfter, random: () => 0.5 });
  t.equal(failed.issued, false);
  t.match(failed.record.lastError, /403 Forbidden/, 'the record says why');
  t.equal(failed.record.attempt, 1, 'one failure');
  t.equal(failed.next.getTime(), now.getTime() + plan.waitMs, 'look again when the retry plan says');
  t.equal(failed.record.pendingCsr, null);
  t.equal(failed.record.lastSuccess, null);
  t.equal(failed.record.notAfter, notAfter.toISOString(), 'the current certificate is still in the record');
  t.ok(validUntil(failed.record, now), 'and still valid: /readyz stays ready');
  t.match(
    samples(n, 'kubeboot_renewal_failures_total'),
    /^kubeboot_renewal_failures_total\{identity="kubelet",reason="http-403"\} 1$/m,
    'counted with its reason',
  );

  const again = await n.step('kubelet', overTheWire(failed.record), { force: true });
  const second = retryPlan(err, 1, { now, notAfter, random: () => 0.5 });
  t.equal(again.record.attempt, 2, 'the back-off grows with each failure');
  t.equal(again.next.getTime(), now.getTime() + second.waitMs);
  t.ok(second.waitMs > plan.waitMs, 'and the wait with it');
});

t.test('a step stopped mid-wait rejects instead of recording a failure: the next worker runs it again', async (t) => {
  const n = await node(t, { kubeProxy: false });
  const api = neverApproved(n);
  const stop = new AbortController();
  const running = n.step('kubelet', emptyRecord('kubelet'), { force: true, signal: stop.signal });
  await until('the CSR to be created', () => api.posted() && n.reported.length > 0);
  stop.abort(new Error('the worker was stopped'));
  await t.rejects(running, 'the step ends with the stop, not with a recorded failure');
  t.notMatch(samples(n, 'kubeboot_renewal_failures_total'), /\} 1/, 'and no failure is counted');
});

t.test('kube-proxy without a kubelet credential waits for it, and looks again in a minute', async (t) => {
  const n = await node(t, { kubeProxy: true });
  n.store.files.delete(n.config.kubelet.kubeconfig);
  const waiting = await n.step('kube-proxy', emptyRecord('kube-proxy'));
  const now = n.clock.now();
  t.equal(waiting.issued, false);
  t.equal(waiting.next.getTime(), now.getTime() + RECHECK_MS, 'looks again after RECHECK_MS (or when the kubelet step wakes it)');
  t.match(waiting.record.lastError, /^waiting for the kubelet credential \(/, 'the record says what it waits for');
  t.equal(waiting.record.attempt, 0, 'waiting is not a failure');
  t.match(statusText([waiting.record], now), /^not ready: kube-proxy: waiting for the kubelet credential/, 'and so does STATUS=');
});

t.test('the CSR a step waits on is in the record while it waits; the kubelet is ready meanwhile; a timeout clears it', async (t) => {
  const n = await node(t, { kubeProxy: true });
  const kubelet = await n.step('kubelet', emptyRecord('kubelet'));
  const api = neverApproved(n);
  const running = n.step('kube-proxy', emptyRecord('kube-proxy'));
  await until('the kube-proxy CSR to be reported', () => api.posted() && n.reported.length > 0);

  const pending = n.reported.at(-1)!;
  t.match(pending, { name: 'kube-proxy', pendingCsr: /^node-csr-/ }, 'reported with its CSR while the step runs');
  const now = n.clock.now();
  const records = [kubelet.record, pending];
  t.ok(nodeReadyOf(records, now), 'READY=1: the kubelet credential is valid');
  t.notOk(readinessOf(records, now).ready, '/readyz is not: kube-proxy has no credential');
  t.match(
    statusText(records, now),
    new RegExp(`^kubelet ready; pending: kube-proxy: waiting for CSR ${pending.pendingCsr} to be approved \\(kubectl certificate approve`),
    'STATUS= names the pending identity and the command that approves it',
  );
  t.match(samples(n, 'kubeboot_csr_pending_since_timestamp_seconds'), /identity="kube-proxy"/, 'the wait is on /metrics');

  // waitTimeout is 60 s in the test configuration.
  await n.clock.tick(61_000);
  const timedOut = await running;
  t.equal(timedOut.issued, false);
  t.match(timedOut.record.lastError, /timed out after 60s waiting for CSR .* kubectl certificate approve/, 'the record says what to do');
  t.equal(timedOut.record.pendingCsr, null, 'the wait is over');
  t.equal(timedOut.record.attempt, 1);
  t.notMatch(samples(n, 'kubeboot_csr_pending_since_timestamp_seconds'), /identity="kube-proxy"/, 'and off /metrics');
});

t.test('with the kubelet renewing its own certificate, a step steps aside, even when asked to renew', async (t) => {
  const n = await node(t, { kubeProxy: false });
  n.config.kubelet.renewal = 'kubelet';
  const before = { ...emptyRecord('kubelet'), nextRenewal: new Date().toISOString() };
  const aside = await n.step('kubelet', before, { force: true });
  const now = n.clock.now();
  t.equal(aside.issued, false, 'not renewed');
  t.equal(aside.next.getTime(), now.getTime() + STEP_ASIDE_RECHECK_MS, 'looks at the files and the setting again in a while');
  t.equal(aside.record.nextRenewal, null, 'no renewal of its own is scheduled');
  t.match(aside.record.renewerSaid, /^kubelet\.renewal is kubelet: /, 'who renews is remembered, so it is logged once');
  const again = await n.step('kubelet', overTheWire(aside.record));
  t.equal(again.record.renewerSaid, aside.record.renewerSaid);
  t.equal(n.said().split('kubelet: kubelet.renewal is kubelet: the kubelet renews').length - 1, 1, 'logged once, not at every step');
  t.match(n.said(), 'kubelet: not renewed on request: kubelet.renewal is kubelet', 'a renewal asked for is refused in the log');
  t.equal(again.record.deadline, null, 'no deadline is drawn for a certificate kubeboot does not renew');
});

t.test('a kubelet with nothing that authenticates and no bootstrap kubeconfig: says how to recover, looks again in a minute', async (t) => {
  const n = await node(t, { kubeProxy: false });
  n.store.files.delete(n.config.kubelet.kubeconfig);
  const stuck = await n.step('kubelet', emptyRecord('kubelet'));
  t.equal(stuck.issued, false);
  t.equal(stuck.next.getTime(), n.clock.now().getTime() + RECHECK_MS, 'looks again after RECHECK_MS (or when a file appears)');
  t.match(stuck.record.lastError, `${n.config.bootstrapKubeconfig}: not found`, 'the record says why');
  t.match(n.said(), `To recover, place a new bootstrap kubeconfig at ${n.config.bootstrapKubeconfig}`, 'and the log what to do');
  t.equal(stuck.record.attempt, 0, 'no back-off: a bootstrap kubeconfig dropped in is used at the next look');
  t.match(
    samples(n, 'kubeboot_renewal_failures_total'),
    /^kubeboot_renewal_failures_total\{identity="kubelet",reason="needs-bootstrap"\} 1$/m,
    'counted as needs-bootstrap',
  );
});

t.test('a step assesses the node once: a renewal records what it stored instead of reading the files back', async (t) => {
  const n = await node(t, { kubeProxy: true });
  signEverything(n);
  const read = n.store.read;
  const reads: string[] = [];
  n.store.read = async (file) => (reads.push(file), read(file));
  const forced = await n.step('kubelet', emptyRecord('kubelet'), { force: true });
  t.equal(forced.issued, true);
  const proxy = n.config.kubeProxy.kubeconfig;
  t.equal(reads.filter((f) => f === proxy).length, 1, "kube-proxy's kubeconfig: read once, by the one assessment");
  t.ok(forced.seen?.state === 'usable' && forced.seen.cluster?.server === SERVER, 'the step saw the stored credential with its cluster');
});
