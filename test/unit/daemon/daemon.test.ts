// `kubeboot run`'s daemon (daemon/daemon.ts) driven with fake workers and a
// fake clock: which steps it sends to which worker and when, what it
// publishes from their answers (status.json, /readyz, /healthz, /metrics,
// READY=1), when it lets a worker end, how it recovers from one that dies
// and how it makes the CA check's look itself. The worker side runs for
// real in test/e2e/daemon.test.ts; the schedule's rules are tabled in
// schedule.test.ts.
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { writeFile } from 'node:fs/promises';
import t, { type Test } from 'tap';
import type { Config } from '../../../agent/config/types.js';
import type { LookResult } from '../../../agent/daemon/ca-look.js';
import { pidFilePath } from '../../../agent/daemon/control.js';
import { Daemon, LOOK_TIMEOUT_MS, REST_AFTER_MS, type WorkerHandle } from '../../../agent/daemon/daemon.js';
import { readDaemonState } from '../../../agent/daemon/state.js';
import {
  EMPTY_HAND_OVER,
  type Answer,
  type FromWorker,
  type HandOver,
  type Step,
  type Target,
  type ToWorker,
} from '../../../agent/daemon/worker-protocol.js';
import type { IdentityName } from '../../../agent/identity.js';
import type { Log } from '../../../agent/log-lines.js';
import { LIVENESS_GRACE_MS, stepBoundMs } from '../../../agent/renewal/plan.js';
import { emptyRecord, type IdentityRecord } from '../../../agent/renewal/record.js';
import { FakeClock } from '../../support/fake-time.js';
import type { CaLook } from '../../../agent/trust/keeper.js';
import { configIn } from '../../support/node-config.js';
import { listenNotifySocket } from '../../support/notify-socket.js';
import { until } from '../../support/until.js';
import { caLookAt as lookUntil } from '../../support/ca-look.js';

const SEC = 1_000;
const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
/** What a worker says it cost as it ends. */
const usage = { cpuSeconds: 0.25, maxRssMiB: 60 };

type Start = Extract<ToWorker, { kind: 'start' }>;

/** Through the IPC channel: JSON both ways. */
const wire = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

/** An identity's record as a worker answers it: valid until `notAfter`, or without a certificate. */
function record(name: IdentityName, notAfter: Date | null, more: Partial<IdentityRecord> = {}): IdentityRecord {
  return { ...emptyRecord(name), notAfter: notAfter?.toISOString() ?? null, ...more };
}

const handOver = (note: string): HandOver => ({ ...EMPTY_HAND_OVER, provenKubeletPem: note });

interface AnswerOptions {
  /** When the target's next step is due, from now; null: not until nudged. */
  nextIn: number | null;
  /** The identity's record after the step; by default valid for 30 days. */
  record?: IdentityRecord | null;
  wake?: Target[];
  force?: IdentityName[];
  look?: CaLook | null;
  handOver?: HandOver;
}

/** A worker process as the daemon sees one: an IPC channel and an exit. */
class FakeWorker extends EventEmitter {
  readonly sent: ToWorker[] = [];
  readonly signals: (NodeJS.Signals | number | undefined)[] = [];
  readonly answered = new Set<number>();
  connected = true;
  readonly pid: number;
  readonly #clock: FakeClock;

  constructor(pid: number, clock: FakeClock) {
    super();
    this.pid = pid;
    this.#clock = clock;
  }

  send(message: ToWorker, callback?: (err: Error | null) => void): boolean {
    this.sent.push(wire(message));
    callback?.(null);
    return true;
  }

  kill(signal?: NodeJS.Signals | number): boolean {
    this.signals.push(signal);
    return true;
  }

  get start(): Start {
    const first = this.sent[0];
    if (first?.kind !== 'start') throw new Error(`the first message was ${first?.kind}`);
    return first;
  }

  get steps(): Step[] {
    return this.sent.flatMap((m) => (m.kind === 'step' ? [m.step] : []));
  }

  /** What it was sent, in order: `kubelet`, `kube-proxy (forced)`, `ca`. */
  get told(): string[] {
    return this.steps.map((s) => (s.force ? `${s.target} (forced)` : s.target));
  }

  get unanswered(): Step[] {
    return this.steps.filter((s) => !this.answered.has(s.id));
  }

  /** Told to stop, as the last thing it heard. */
  get stopping(): boolean {
    return this.sent.at(-1)?.kind === 'stop';
  }

  say(message: FromWorker): void {
    this.emit('message', wire(message));
  }

  /** Answers its unanswered step for `target`. */
  answer(target: Target, o: AnswerOptions): Step {
    const step = this.unanswered.find((s) => s.target === target);
    if (!step) throw new Error(`no unanswered step for ${target}; sent: ${JSON.stringify(this.steps)}`);
    const now = this.#clock.now().getTime();
    const answer: Answer = {
      id: step.id,
      target,
      next: o.nextIn === null ? null : new Date(now + o.nextIn).toISOString(),
      record: o.record !== undefined ? o.record : target === 'ca' ? null : record(target, new Date(now + 30 * DAY)),
      wake: o.wake ?? [],
      force: o.force ?? [],
      look: o.look ?? null,
      handOver: o.handOver ?? EMPTY_HAND_OVER,
    };
    this.answered.add(step.id);
    this.say({ kind: 'answer', answer });
    return step;
  }

  /** Ends as a worker told to stop does: what it cost, then exit 0. */
  rest(): void {
    this.say({ kind: 'ended', usage });
    this.exit(0);
  }

  exit(code: number | null, signal: NodeJS.Signals | null = null): void {
    this.connected = false;
    this.emit('disconnect');
    this.emit('exit', code, signal);
    this.emit('close', code, signal);
  }
}

interface Fixture {
  config: Config;
  clock: FakeClock;
  daemon: Daemon;
  workers: FakeWorker[];
  /** The worker started last. */
  worker: () => FakeWorker;
  running: Promise<number>;
  stopper: AbortController;
  /** Reloads return this configuration. */
  reloaded: { config: Config };
  /** The daemon's own looks at cluster-info: what each answers ('hang': until aborted), and the ones made. */
  looks: { answer: LookResult | 'hang'; made: CaLook[]; aborted: number };
  /** Every line the daemon logged, as `level: message`. */
  logs: string[];
}

async function daemon(t: Test, options: { ca?: boolean; env?: NodeJS.ProcessEnv; listen?: string } = {}): Promise<Fixture> {
  // Teardowns run in the order they were added, and t.testdir() adds the
  // fixture's removal: the daemon (pid file, status.json, watcher) must be
  // stopped first.
  const stopper = new AbortController();
  const workers: FakeWorker[] = [];
  let running: Promise<number> | null = null;
  t.teardown(async () => {
    stopper.abort();
    // A worker asked to stop ends.
    for (const w of workers) if (w.connected) w.exit(0);
    await running;
  });
  const dir = t.testdir();
  const config = configIn(dir);
  if (options.ca) config.caRotation = { ...config.caRotation, enabled: true };
  if (options.listen) config.listen = options.listen;
  const clock = new FakeClock(new Date('2025-06-01T00:00:00Z'));
  const reloaded = { config };
  const looks: Fixture['looks'] = { answer: { kind: 'read', digest: 'd1' }, made: [], aborted: 0 };
  const logs: string[] = [];
  const logger: Log = {
    error: (m) => logs.push(`error: ${m}`),
    warn: (m) => logs.push(`warn: ${m}`),
    info: (m) => logs.push(`info: ${m}`),
    debug: (m) => logs.push(`debug: ${m}`),
  };
  const daemon = new Daemon({
    config,
    logger,
    signal: stopper.signal,
    reload: async () => reloaded.config,
    startWorker: () => {
      const worker = new FakeWorker(1000 + workers.length, clock);
      workers.push(worker);
      return worker as unknown as WorkerHandle;
    },
    lookAt: (look, signal) => {
      looks.made.push(look);
      const answer = looks.answer;
      if (answer !== 'hang') return Promise.resolve(answer);
      return new Promise((resolve) =>
        signal.addEventListener('abort', () => {
          looks.aborted++;
          resolve({ kind: 'failed', why: 'aborted' });
        }),
      );
    },
    env: options.env ?? {},
    clock,
    random: () => 0.5,
  });
  running = daemon.run();
  await until('the first worker to start', () => workers.length === 1);
  return { config, clock, daemon, workers, worker: () => workers.at(-1)!, running, stopper, reloaded, looks, logs };
}

/** A few turns of the event loop: enough for anything already due to have happened. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** Until the daemon sleeps again (a timer armed once what is due has run). */
async function asleep(f: Fixture): Promise<void> {
  await settle();
  await until('the daemon to sleep', () => f.clock.pending > 0);
}

/** Until the daemon has logged `count` lines matching `re`. */
async function logged(f: Fixture, re: RegExp, count = 1): Promise<void> {
  await until(`${count} log line(s) matching ${re}`, () => f.logs.filter((l) => re.test(l)).length >= count);
}

/** Whether a promise has settled, without waiting for it. */
function settled(p: Promise<unknown>): () => boolean {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  return () => done;
}

const metric = (f: Fixture, series: string): number | null => {
  const escaped = series.replace(/[{}"]/g, (c) => `\\${c}`);
  const hit = new RegExp(`^${escaped} (\\S+)$`, 'm').exec(f.daemon.metrics.render());
  return hit ? Number(hit[1]) : null;
};

async function statusFile(
  f: Fixture,
  probe: (identities: Record<string, IdentityRecord>) => boolean,
): Promise<Record<string, IdentityRecord>> {
  let identities: Record<string, IdentityRecord> = {};
  await until('status.json', async () => {
    identities = (await readDaemonState(f.config.stateDir))?.identities ?? {};
    return probe(identities);
  });
  return identities;
}

/** The worker answers both identities, due again in `nextIn`. */
function answerIdentities(w: FakeWorker, nextIn: number, more: Omit<AnswerOptions, 'nextIn'> = {}): void {
  w.answer('kubelet', { nextIn, ...more });
  w.answer('kube-proxy', { nextIn, ...more });
}

/** Until the worker is told to stop; then it ends, and the daemon sleeps. */
async function rests(f: Fixture, w: FakeWorker): Promise<void> {
  await until('the worker to be told to stop', () => w.stopping);
  w.rest();
  await asleep(f);
}

t.test('the first worker joins and gets every identity as a step; nothing is ready before an answer', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  t.equal(w.start.joinFirst, true, 'the first worker may join (--server/--token)');
  t.same(w.start.records, [emptyRecord('kubelet'), emptyRecord('kube-proxy')], 'no record yet');
  t.same(w.start.handOver, EMPTY_HAND_OVER, 'nothing handed over yet');
  t.equal(w.start.config.stateDir, f.config.stateDir, 'it gets the configuration');
  t.same(
    w.steps,
    [
      { id: 1, target: 'kubelet', force: false },
      { id: 2, target: 'kube-proxy', force: false },
    ],
    'a step for every identity, numbered',
  );
  t.ok(existsSync(pidFilePath(f.config.stateDir)), 'the daemon recorded its pid');
  t.notOk(f.daemon.readiness().ready, 'not ready before any answer');
  t.ok(f.daemon.healthy(), 'healthy as its first steps start');
});

t.test('with CA rotation on, the first worker also gets the CA check', async (t) => {
  const f = await daemon(t, { ca: true });
  t.same(f.worker().told, ['kubelet', 'kube-proxy', 'ca']);
});

t.test('answers are published, and a step due within REST_AFTER_MS is sent to the live worker at its time', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  const notAfter = new Date(f.clock.now().getTime() + 5 * DAY);
  w.answer('kubelet', { nextIn: 90 * SEC, record: record('kubelet', notAfter) });
  t.notOk(f.daemon.readiness().ready, 'kube-proxy has nothing yet');
  t.match(f.daemon.readiness().detail.join('\n'), /^kubelet: valid until 2025-06-06T00:00:00.000Z$/m);
  t.match(f.daemon.readiness().detail.join('\n'), /^kube-proxy: no valid certificate$/m);
  const proxy = record('kube-proxy', notAfter, { nextRenewal: '2025-06-05T00:00:00.000Z' });
  w.answer('kube-proxy', { nextIn: DAY, record: proxy });
  t.ok(f.daemon.readiness().ready, 'ready once both answered valid certificates');
  const identities = await statusFile(f, (ids) => ids['kube-proxy']?.nextRenewal === proxy.nextRenewal);
  t.same(identities['kube-proxy'], proxy, 'status.json holds the record as answered');
  t.equal(identities.kubelet?.notAfter, notAfter.toISOString());

  await asleep(f);
  t.notOk(w.stopping, 'a step due in 90 s keeps the worker');
  await f.clock.tick(90 * SEC - 1);
  await settle();
  t.equal(w.steps.length, 2, 'nothing sent before its time');
  await f.clock.tick(1);
  await until('the kubelet’s next step', () => w.steps.length === 3);
  t.same(w.steps[2], { id: 3, target: 'kubelet', force: false }, 'sent at its time');
  t.equal(f.workers.length, 1, 'to the same worker');
});

t.test('a record sent while a step runs (a CSR waits) is published at once', async (t) => {
  const f = await daemon(t);
  f.worker().say({ kind: 'record', record: record('kubelet', null, { pendingCsr: 'csr-abc' }) });
  t.match(
    f.daemon.readiness().detail.join('\n'),
    /^kubelet: waiting for CSR csr-abc to be approved \(kubectl certificate approve csr-abc\)$/m,
    '/readyz names the command',
  );
  await statusFile(f, (ids) => ids.kubelet?.pendingCsr === 'csr-abc');
  t.pass('status.json names the CSR');
});

t.test(
  'once nothing is due for REST_AFTER_MS the worker is told to stop; the next due step starts a worker with the records and the hand-over',
  async (t) => {
    const f = await daemon(t);
    const w = f.worker();
    const notAfter = new Date(f.clock.now().getTime() + 5 * DAY);
    const records = [record('kubelet', notAfter, { lastSuccess: 'one' }), record('kube-proxy', notAfter, { lastSuccess: 'two' })];
    w.answer('kubelet', { nextIn: HOUR, record: records[0]!, handOver: handOver('first') });
    await settle();
    t.notOk(w.stopping, 'not while a step is in flight');
    w.answer('kube-proxy', { nextIn: HOUR, record: records[1]!, handOver: handOver('last') });
    await rests(f, w);
    t.match(metric(f, 'kubeboot_workers_total'), 1, 'the worker that ended is counted');
    t.match(metric(f, 'kubeboot_worker_cpu_seconds_total'), 0.25, 'with the CPU it said it spent');

    await f.clock.tick(HOUR - 1);
    await settle();
    t.equal(f.workers.length, 1, 'no worker before a step is due');
    t.ok(f.daemon.readiness().ready, 'still ready while resting');
    t.ok(f.daemon.healthy(), 'and healthy: its own sleep shows progress');
    await f.clock.tick(1);
    await until('the second worker', () => f.workers.length === 2);
    const next = f.worker();
    t.equal(next.start.joinFirst, false, 'a later worker does not join');
    t.same(next.start.records, records, 'it gets every record');
    t.same(next.start.handOver, handOver('last'), 'and what the last answer handed over');
    t.same(
      next.steps,
      [
        { id: 3, target: 'kubelet', force: false },
        { id: 4, target: 'kube-proxy', force: false },
      ],
      'and the steps now due',
    );
    next.answer('kubelet', { nextIn: DAY, record: record('kubelet', null) });
    t.notOk(f.daemon.readiness().ready, 'a later answer that the kubelet has no certificate is heard');
  },
);

t.test('records are judged against the clock: a certificate expiring while the daemon rests makes it unready', async (t) => {
  const f = await daemon(t);
  const notAfter = new Date(f.clock.now().getTime() + 2 * HOUR);
  f.worker().answer('kubelet', { nextIn: 3 * HOUR, record: record('kubelet', notAfter) });
  f.worker().answer('kube-proxy', { nextIn: 3 * HOUR, record: record('kube-proxy', notAfter) });
  await rests(f, f.worker());
  t.ok(f.daemon.readiness().ready);
  await f.clock.tick(2 * HOUR);
  t.notOk(f.daemon.readiness().ready, 'not ready once notAfter passed');
  t.match(f.daemon.readiness().detail.join('\n'), /^kubelet: expired at /m);
  t.equal(metric(f, 'kubeboot_certificate_ttl_seconds{identity="kubelet"}'), null, 'and no TTL for an expired certificate');
});

t.test('READY=1 once the kubelet’s credential is valid: the kubelet never waits for kube-proxy', async (t) => {
  const socket = await listenNotifySocket('', { abstract: true });
  const f = await daemon(t, { env: { NOTIFY_SOCKET: socket.path, PATH: process.env.PATH } });
  t.teardown(() => socket.close());
  const w = f.worker();
  w.answer('kube-proxy', { nextIn: DAY, record: record('kube-proxy', null, { pendingCsr: 'csr-proxy' }) });
  await socket.waitFor((m) => m.includes('STATUS=not ready'));
  t.notOk(
    socket.messages().some((m) => m.split('\n').includes('READY=1')),
    'not ready while the kubelet has nothing',
  );
  w.answer('kubelet', { nextIn: DAY, record: record('kubelet', new Date(f.clock.now().getTime() + DAY)) });
  const ready = await socket.waitFor((m) => m.split('\n').includes('READY=1'));
  t.match(ready, /STATUS=kubelet ready; pending: kube-proxy: waiting for CSR csr-proxy/, 'with kube-proxy still pending');
});

t.test(
  'a status port held by another process: the work and READY=1 go on, it is reported, and the listener binds once freed',
  async (t) => {
    // A local user holds 127.0.0.1:<port> while kubeboot is down.
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as net.AddressInfo).port;
    t.teardown(() => new Promise<void>((resolve) => (holder.listening ? holder.close(() => resolve()) : resolve())));
    const socket = await listenNotifySocket('', { abstract: true });
    t.teardown(() => socket.close());
    const f = await daemon(t, { listen: `127.0.0.1:${port}`, env: { NOTIFY_SOCKET: socket.path, PATH: process.env.PATH } });
    await logged(
      f,
      new RegExp(`^warn: cannot listen on 127\\.0\\.0\\.1:${port} .*EADDRINUSE.*working on without them, trying again in 1s`),
    );
    await socket.waitFor((m) => /STATUS=checking credentials; \/healthz, \/readyz and \/metrics unavailable: .*EADDRINUSE/.test(m));
    // The first worker got its steps all the same; its answers make the node ready.
    const w = f.worker();
    t.same(w.told, ['kubelet', 'kube-proxy'], 'the work is not held back');
    answerIdentities(w, DAY);
    const ready = await socket.waitFor((m) => m.split('\n').includes('READY=1'));
    t.match(
      ready,
      /STATUS=credentials valid: .*; \/healthz, \/readyz and \/metrics unavailable: .*EADDRINUSE/,
      'READY=1 does not wait for it',
    );
    await until('status.json to say why', async () => /EADDRINUSE/.test((await readDaemonState(f.config.stateDir))?.statusListener ?? ''));
    // Retried with back-off by the daemon's own loop: 1 s, 2 s, 4 s...
    await asleep(f);
    await f.clock.tick(1_100);
    await logged(f, /^debug: cannot listen on .*trying again in 2s/);
    t.equal(metric(f, 'kubeboot_status_listener_failures_total'), 2, 'each failed attempt counted');
    await new Promise<void>((resolve) => holder.close(() => resolve()));
    await asleep(f);
    await f.clock.tick(2_200);
    await logged(
      f,
      new RegExp(`^info: serving /healthz, /readyz and /metrics on 127\\.0\\.0\\.1:${port} \\(after 2 failed attempt\\(s\\)\\)`),
    );
    const res = await fetch(`http://127.0.0.1:${port}/readyz`);
    t.equal(res.status, 200, '/readyz answers once bound');
    t.match(await res.text(), /kubelet: valid until/);
    t.match(
      await (await fetch(`http://127.0.0.1:${port}/metrics`)).text(),
      /^kubeboot_status_listener_failures_total 2$/m,
      'the failures are in /metrics',
    );
    await socket.waitFor((m) => /STATUS=credentials valid: [^;]*; kube-proxy: valid until [^;]*$/m.test(m));
    await until('status.json without the problem', async () => (await readDaemonState(f.config.stateDir))?.statusListener === undefined);
  },
);

t.test('a nudge becomes a step; one made while that identity’s step runs runs again after its answer', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  f.daemon.nudge(['kubelet'], true);
  await settle();
  t.equal(w.steps.length, 2, 'one step in flight per identity: nothing sent yet');
  w.answer('kubelet', { nextIn: DAY });
  await until('the nudged step', () => w.steps.length === 3);
  t.same(w.steps[2], { id: 3, target: 'kubelet', force: true }, 'after the answer the nudge runs, forced');

  w.answer('kube-proxy', { nextIn: DAY });
  w.answer('kubelet', { nextIn: DAY });
  await rests(f, w);
  f.daemon.nudge(['kube-proxy'], false);
  await until('a worker for the nudge', () => f.workers.length === 2);
  t.same(
    f.worker().steps,
    [{ id: 4, target: 'kube-proxy', force: false }],
    'a nudge while resting starts a worker at once, with that step only',
  );

  // Told to stop but not gone yet: a nudge waits for the next worker.
  f.worker().answer('kube-proxy', { nextIn: DAY });
  await until('the worker to be told to stop', () => f.worker().stopping);
  f.daemon.nudge(['kubelet'], false);
  await settle();
  t.equal(f.worker().steps.length, 1, 'nothing is sent to a worker on its way out');
  f.worker().rest();
  await until('the next worker', () => f.workers.length === 3);
  t.same(f.worker().steps, [{ id: 5, target: 'kubelet', force: false }], 'which gets it');
});

t.test('SIGHUP: the reloaded configuration reaches the live worker, then every identity renews, forced', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  answerIdentities(w, MIN);
  const next = structuredClone(f.config);
  next.renewal = { ...next.renewal, margin: 3600 };
  f.reloaded.config = next;
  await f.daemon.reloadAndRenew();
  const sent = w.sent.findIndex((m) => m.kind === 'config');
  const config = w.sent[sent];
  t.equal(config?.kind === 'config' ? config.config.renewal.margin : null, 3600, 'the worker gets the new configuration');
  t.equal(f.daemon.config.renewal.margin, 3600, 'the daemon holds it');
  await until('the forced steps', () => w.steps.length === 4);
  t.same(w.steps.slice(2), [
    { id: 3, target: 'kubelet', force: true },
    { id: 4, target: 'kube-proxy', force: true },
  ]);
  t.ok(w.sent.findIndex((m) => m.kind === 'step' && m.step.id === 3) > sent, 'the configuration arrives before the steps it is for');

  // On its way out: the worker hears nothing more; the next one starts at once, under the new configuration.
  answerIdentities(w, DAY);
  await until('the worker to be told to stop', () => w.stopping);
  const later = structuredClone(next);
  later.renewal = { ...later.renewal, margin: 7200 };
  f.reloaded.config = later;
  await f.daemon.reloadAndRenew();
  t.equal(w.sent.filter((m) => m.kind === 'config').length, 1, 'a worker told to stop is sent no configuration');
  w.rest();
  await until('a worker for the reload', () => f.workers.length === 2);
  t.equal(f.worker().start.config.renewal.margin, 7200, 'its start carries the reloaded configuration');
  t.notOk(
    f.worker().sent.some((m) => m.kind === 'config'),
    'and no separate config message',
  );
  t.same(f.worker().told, ['kubelet (forced)', 'kube-proxy (forced)']);
});

t.test('SIGHUP with a changed set of identities is refused: the running configuration stays, the renewal happens', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  answerIdentities(w, MIN);
  const next = structuredClone(f.config);
  next.kubeletServing.enabled = !f.config.kubeletServing.enabled;
  f.reloaded.config = next;
  await f.daemon.reloadAndRenew();
  t.equal(f.daemon.config, f.config, 'the configuration is the one the daemon started with');
  t.match(
    f.logs.join('\n'),
    /configuration reload refused: the set of identities changed \(kubelet,kube-proxy -> kubelet,kube-proxy,kubelet-serving\)/,
  );
  t.notOk(
    w.sent.some((m) => m.kind === 'config'),
    'the worker keeps its configuration',
  );
  await until('the forced steps', () => w.steps.length === 4);
  t.same(w.told.slice(2), ['kubelet (forced)', 'kube-proxy (forced)'], 'every identity renews anyway');
});

t.test(
  'a worker that dies with unanswered steps: they go to the next worker after a back-off, forced ones still forced; a forced renewal it answered is not repeated',
  async (t) => {
    const f = await daemon(t);
    const w = f.worker();
    answerIdentities(w, MIN, { handOver: handOver('one') });
    f.daemon.nudge(['kubelet'], true);
    f.daemon.nudge(['kube-proxy'], true);
    await until('the forced steps', () => w.steps.length === 4);
    // The kubelet's forced renewal finished; kube-proxy's had not.
    w.answer('kubelet', { nextIn: DAY, handOver: handOver('two') });
    w.exit(null, 'SIGKILL');
    await logged(f, /a worker ended without finishing its steps \(signal SIGKILL\); starting another in 5s/);
    t.notOk(settled(f.running)(), 'the daemon goes on: a worker had answered');
    await f.clock.tick(5 * SEC - 1);
    await settle();
    t.equal(f.workers.length, 1, 'not before 5 s');
    await f.clock.tick(1);
    await until('the second worker', () => f.workers.length === 2);
    t.same(f.worker().steps, [{ id: 5, target: 'kube-proxy', force: true }], 'only the unanswered renewal, still forced');
    t.same(f.worker().start.handOver, handOver('two'), 'with the last hand-over answered');
    t.equal(f.worker().start.joinFirst, false);
    t.ok(f.daemon.readiness().ready, 'the last answers stand meanwhile');

    // Killed again: the wait doubles.
    f.worker().exit(null, 'SIGKILL');
    await logged(f, /starting another in 10s/);
    await f.clock.tick(10 * SEC - 1);
    await settle();
    t.equal(f.workers.length, 2, 'not before 10 s');
    await f.clock.tick(1);
    await until('the third worker', () => f.workers.length === 3);
    t.same(f.worker().steps, [{ id: 6, target: 'kube-proxy', force: true }], 'still the same renewal, still forced');
    t.equal(metric(f, 'kubeboot_worker_failures_total'), 2, 'each loss counted');

    // A worker that answers and rests resets the back-off.
    f.worker().answer('kube-proxy', { nextIn: DAY });
    await rests(f, f.worker());
    f.daemon.nudge('all', false);
    await until('a worker for the nudge, at once', () => f.workers.length === 4);
    t.same(f.worker().told, ['kubelet', 'kube-proxy'], 'and no forced renewal is repeated');
  },
);

t.test('the first worker ending with an error before any answer ends the daemon with its code', async (t) => {
  const f = await daemon(t);
  f.worker().exit(3);
  t.equal(await f.running, 3, 'run() returns the exit code (a join that cannot work)');
  t.equal(f.workers.length, 1, 'and starts no other worker');
  t.notOk(existsSync(pidFilePath(f.config.stateDir)), 'the pid file is removed');
});

t.test('a later worker ending with an error does not end the daemon', async (t) => {
  const f = await daemon(t);
  answerIdentities(f.worker(), 0);
  await until('the next steps', () => f.worker().steps.length === 4);
  f.worker().exit(3);
  await logged(f, /exit code 3\); starting another in 5s/);
  t.notOk(settled(f.running)(), 'still running');
  await f.clock.tick(5 * SEC);
  await until('the second worker', () => f.workers.length === 2);
  t.same(f.worker().told, ['kubelet', 'kube-proxy'], 'which gets the steps the first did not answer');
});

t.test('a first worker killed before it answered leaves the join to the next worker', async (t) => {
  const f = await daemon(t);
  f.worker().exit(null, 'SIGKILL');
  await logged(f, /starting another in 5s/);
  await f.clock.tick(5 * SEC);
  await until('the second worker', () => f.workers.length === 2);
  t.equal(f.worker().start.joinFirst, true, 'the next worker joins (--server/--token) as the first would have');
  t.same(f.worker().told, ['kubelet', 'kube-proxy']);
  f.worker().answer('kubelet', { nextIn: DAY, record: null });
  f.worker().exit(1);
  await logged(f, /starting another in 10s/);
  await f.clock.tick(10 * SEC);
  await until('the third worker', () => f.workers.length === 3);
  t.equal(f.worker().start.joinFirst, false, 'once a worker has answered, later ones do not join again');
});

t.test('workers failing again and again: counted in /metrics, then unhealthy so the watchdog restarts the unit', async (t) => {
  const f = await daemon(t);
  // kube-proxy's step stays unanswered: each worker gets it and dies.
  f.worker().answer('kubelet', { nextIn: DAY });
  let wait = 5_000;
  for (let failed = 1; failed <= 7; failed++) {
    t.ok(f.daemon.healthy(), `healthy with ${failed - 1} failed worker(s) in a row`);
    f.worker().exit(1);
    await logged(f, /starting another in/, failed);
    if (failed === 7) break;
    await f.clock.tick(wait);
    await until(`worker ${failed + 1}`, () => f.workers.length === failed + 1);
    wait = Math.min(300_000, wait * 2);
  }
  t.notOk(f.daemon.healthy(), 'unhealthy after 7 failed workers in a row');
  t.equal(metric(f, 'kubeboot_worker_failures_total'), 7, 'each failure counted');
});

t.test('healthy: a step in flight past its bound is stuck; a wall-clock step changes nothing; an idle day is healthy', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  const bound = stepBoundMs(f.config) + LIVENESS_GRACE_MS;
  t.ok(f.daemon.healthy(), 'healthy as the steps start');
  await f.clock.tick(bound - MIN);
  f.clock.jump(-DAY);
  t.ok(f.daemon.healthy(), 'a wall-clock step changes nothing');
  await f.clock.tick(MIN);
  t.ok(f.daemon.healthy(), 'within the bound of the steps in flight');
  await f.clock.tick(1);
  t.notOk(f.daemon.healthy(), 'a step unanswered past its bound is stuck');
  w.answer('kube-proxy', { nextIn: 3 * DAY });
  t.notOk(f.daemon.healthy(), 'the kubelet’s step still is');
  w.answer('kubelet', { nextIn: 3 * DAY });
  await until('healthy once answered', () => f.daemon.healthy());
  await rests(f, w);

  for (let minute = 0; minute < 24 * 60; minute++) {
    await f.clock.tick(MIN);
    if (!f.daemon.healthy()) t.fail(`unhealthy at minute ${minute}: the daemon’s own sleep shows progress`);
  }
  t.ok(f.daemon.healthy(), 'healthy across an idle day');
  t.equal(f.workers.length, 1, 'with no worker');
  f.stopper.abort();
  await f.running;
  t.notOk(f.daemon.healthy(), 'never healthy once stopping');
});

t.test('metric messages from a worker land in /metrics, next to the TTL of the answered certificates', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  const at = f.clock.now();
  w.say({ kind: 'metric', name: 'recordRenewal', args: ['kubelet', at.toISOString()] });
  w.say({ kind: 'metric', name: 'recordRenewalFailure', args: ['kube-proxy', 'denied'] });
  w.say({ kind: 'metric', name: 'caBundleRefused', args: ['expired'] });
  w.answer('kubelet', { nextIn: DAY, record: record('kubelet', new Date(at.getTime() + HOUR)) });
  w.answer('kube-proxy', { nextIn: DAY, record: record('kube-proxy', null) });
  const text = f.daemon.metrics.render();
  t.match(text, /^kubeboot_renewals_total\{identity="kubelet"\} 1$/m);
  t.match(
    text,
    new RegExp(`^kubeboot_last_success_timestamp_seconds\\{identity="kubelet"\\} ${at.getTime() / 1000}$`, 'm'),
    'the date arrives as a date',
  );
  t.match(text, /^kubeboot_renewal_failures_total\{identity="kube-proxy",reason="denied"\} 1$/m);
  t.match(text, /^kubeboot_ca_bundle_refused\{reason="expired"\} 1$/m);
  t.match(text, /^kubeboot_certificate_ttl_seconds\{identity="kubelet"\} 3600$/m, 'the TTL of the answered certificate');
  t.notMatch(text, /^kubeboot_certificate_ttl_seconds\{identity="kube-proxy"\}/m, 'none for an identity without one');
  t.match(text, /^process_cpu_seconds_total /m, "and the daemon's own process series");

  // Counters outlive the worker that counted.
  await rests(f, w);
  f.daemon.nudge('all', false);
  await until('the second worker', () => f.workers.length === 2);
  f.worker().say({ kind: 'metric', name: 'recordRenewal', args: ['kubelet', at.toISOString()] });
  t.match(f.daemon.metrics.render(), /^kubeboot_renewals_total\{identity="kubelet"\} 2$/m, 'counted across workers');
});

t.test('a file changed outside kubeboot nudges a look; a write the worker announced does not', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  // Nothing in flight, the worker kept: the next steps are due in a minute.
  answerIdentities(w, MIN);
  const own = f.config.kubeProxy.kubeconfig;
  w.say({ kind: 'write', op: 'willWrite', path: own });
  await writeFile(own, 'written by the worker\n');
  w.say({ kind: 'write', op: 'didWrite', path: own });
  await writeFile(f.config.kubelet.kubeconfig, 'written by an operator\n');
  await until('a step for the operator’s change', () => w.steps.length > 2);
  await settle();
  t.same(w.steps.slice(2), [{ id: 3, target: 'kubelet', force: false }], "only the operator's change, and a look, not a forced renewal");
});

t.test('stopping: the worker is asked to stop, and run() returns once it exits; one still there after 30 s is killed', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  const done = settled(f.running);
  f.stopper.abort();
  await until('the worker to be told to stop', () => w.stopping);
  await f.clock.tick(30 * SEC - 1);
  await settle();
  t.notOk(done(), 'run() waits for the worker');
  t.same(w.signals, [], 'which has its grace period');
  await f.clock.tick(1);
  t.same(w.signals, ['SIGKILL'], 'a worker still there after 30 s is killed');
  t.notOk(done(), 'and still waited for');
  w.exit(null, 'SIGKILL');
  t.equal(await f.running, 0, 'run() returns 0');
  t.equal(f.workers.length, 1, 'no worker is started after a stop');
  t.notOk(existsSync(pidFilePath(f.config.stateDir)), 'the pid file is removed');
});

t.test('stopping a worker that exits at once', async (t) => {
  const f = await daemon(t);
  f.stopper.abort();
  await until('the worker to be told to stop', () => f.worker().stopping);
  f.worker().exit(0);
  t.equal(await f.running, 0);
  t.equal(f.clock.pending, 0, 'the kill timer is cleared');
});

t.test('stopping while resting ends without a worker', async (t) => {
  const f = await daemon(t);
  answerIdentities(f.worker(), DAY);
  await rests(f, f.worker());
  f.stopper.abort();
  t.equal(await f.running, 0);
  t.equal(f.workers.length, 1);
});

t.test('a worker told to stop that does not exit is killed after 30 s, and the next one still starts at its time', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  answerIdentities(w, 10 * MIN);
  await until('the worker to be told to stop', () => w.stopping);
  await f.clock.tick(30 * SEC - 1);
  await settle();
  t.same(w.signals, [], 'it has 30 s to exit');
  await f.clock.tick(1);
  t.same(w.signals, ['SIGKILL'], 'then it is killed');
  w.exit(null, 'SIGKILL');
  await settle();
  t.equal(f.workers.length, 1, 'no worker before a step is due');
  t.equal(metric(f, 'kubeboot_worker_failures_total') ?? 0, 0, 'a worker killed on its way out, its steps answered, is no failure');
  await f.clock.tick(10 * MIN - 30 * SEC);
  await until('the next worker', () => f.workers.length === 2);
  t.pass('the next worker starts at its time');
});

const caLookAt = (at: Date, horizon = new Date(at.getTime() + 30 * DAY)): CaLook => lookUntil(at, horizon);

/**
 * The current worker answers every step it holds — identities due again in
 * `renewInDays`, the CA check with the look in 10 minutes the daemon makes
 * itself — and rests.
 */
async function restWithLook(f: Fixture, renewInDays = 3, horizon?: Date): Promise<void> {
  const w = f.worker();
  await until('the worker’s steps', () => w.unanswered.length > 0);
  for (const step of w.unanswered) {
    if (step.target !== 'ca') w.answer(step.target, { nextIn: renewInDays * DAY, handOver: handOver('rested') });
    else
      w.answer('ca', {
        nextIn: 10 * MIN,
        look: caLookAt(new Date(f.clock.now().getTime() + 10 * MIN), horizon),
        handOver: handOver('rested'),
      });
  }
  await rests(f, w);
}

const looksCounted = (f: Fixture, result: string) => metric(f, `kubeboot_ca_looks_total{result="${result}"}`) ?? 0;

t.test('an unchanged cluster-info starts no worker for a whole idle day; a changed one starts one at once', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f);
  await f.clock.tick(10 * MIN - 1);
  t.equal(f.looks.made.length, 0, 'no look before the time the CA step said');
  await f.clock.tick(1);
  await until('the first look', () => f.looks.made.length === 1);
  t.equal(f.workers.length, 1, 'an unchanged digest starts no worker');
  t.equal(f.looks.made[0]!.url, caLookAt(new Date()).url, 'the look is the one the CA step answered');

  for (let minute = 0; minute < 24 * 60; minute++) {
    await f.clock.tick(MIN);
    if (!f.daemon.healthy()) t.fail(`unhealthy at minute ${minute}: the daemon's looks and sleep show progress`);
  }
  t.equal(f.workers.length, 1, 'no worker in a day of unchanged looks');
  // random() = 0.5: every look 10 minutes after the last.
  t.equal(f.looks.made.length, 1 + 144, 'one look every 10 minutes (caRotation.interval, jittered as the keeper does)');
  t.equal(looksCounted(f, 'unchanged'), 145, 'each counted in /metrics');

  f.looks.answer = { kind: 'read', digest: 'd2' };
  await f.clock.tick(10 * MIN);
  await until('a worker for the change', () => f.workers.length === 2);
  t.equal(looksCounted(f, 'changed'), 1, 'the change is counted');
  t.same(f.worker().start.handOver, handOver('rested'), 'the worker gets the hand-over');
  t.same(f.worker().steps, [{ id: 4, target: 'ca', force: false }], 'and the CA check alone: the full check');
  const looked = f.looks.made.length;
  await f.clock.tick(30 * MIN);
  t.equal(f.looks.made.length, looked, 'no look of the daemon’s own while a worker holds the CA check');
});

t.test('a renewal still starts its worker at its time while the daemon makes the CA looks', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f, 1);
  await f.clock.tick(DAY - 1);
  t.equal(f.workers.length, 1, 'no worker before the renewal is due');
  await f.clock.tick(1);
  await until('the renewal’s worker', () => f.workers.length === 2);
  t.ok(f.looks.made.length >= 143, 'the looks went on meanwhile');
  t.same(f.worker().told, ['kubelet', 'kube-proxy', 'ca'], 'both renewals, and the CA check its look would have made now');
});

t.test('a look that cannot read cluster-info, or one past the keeper’s horizon, starts a worker instead', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f);
  f.looks.answer = { kind: 'failed', why: 'HTTP 403' };
  await f.clock.tick(10 * MIN);
  await until('a worker for the failed look', () => f.workers.length === 2);
  t.equal(looksCounted(f, 'failed'), 1);
  t.same(f.worker().told, ['ca'], 'for the CA check');

  // The keeper's CA expires 15 minutes from now: the look at +10 min still stands in, the one at +20 does not.
  await restWithLook(f, 3, new Date(f.clock.now().getTime() + 15 * MIN));
  f.looks.answer = { kind: 'read', digest: 'd1' };
  const looked = f.looks.made.length;
  await f.clock.tick(10 * MIN);
  await until('the look', () => f.looks.made.length === looked + 1);
  t.equal(f.workers.length, 2, 'unchanged, before the horizon: no worker');
  await f.clock.tick(10 * MIN);
  await until('a worker at the next look', () => f.workers.length === 3);
  t.equal(f.looks.made.length, looked + 1, 'past the horizon the worker looks, not the daemon');
});

t.test('a nudge or a forced renewal during a look starts its worker at once; the look is aborted', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f);
  f.looks.answer = 'hang';
  await f.clock.tick(10 * MIN);
  await until('the look to start', () => f.looks.made.length === 1);
  t.ok(f.daemon.healthy(), 'a look in flight is progress');
  f.daemon.nudge(['kubelet'], true);
  await until('the worker for the nudge', () => f.workers.length === 2);
  t.equal(f.looks.aborted, 1, 'the look was aborted');
  t.same(
    f.worker().steps,
    [
      { id: 4, target: 'kubelet', force: true },
      { id: 5, target: 'ca', force: false },
    ],
    'the worker gets the forced renewal, and the CA check the aborted look did not make',
  );
  t.equal(looksCounted(f, 'failed'), 0, 'an aborted look is not counted as a failure');
});

t.test('a look that hangs times out, and a worker looks instead; the watchdog bound covers the look', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f);
  f.looks.answer = 'hang';
  await f.clock.tick(10 * MIN);
  await until('the look to start', () => f.looks.made.length === 1);
  await f.clock.tick(LOOK_TIMEOUT_MS - 1);
  t.equal(f.workers.length, 1, 'not before the timeout');
  t.ok(f.daemon.healthy(), 'healthy while the look may still answer');
  await f.clock.tick(1);
  await until('a worker after the timeout', () => f.workers.length === 2);
  t.equal(f.looks.aborted, 1);
  t.same(f.worker().told, ['ca']);
});

t.test('SIGTERM during a look aborts it and stops the daemon without a worker', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f);
  f.looks.answer = 'hang';
  await f.clock.tick(10 * MIN);
  await until('the look to start', () => f.looks.made.length === 1);
  f.stopper.abort();
  t.equal(await f.running, 0, 'run() returns 0');
  t.equal(f.looks.aborted, 1, 'the look was aborted');
  t.equal(f.workers.length, 1, 'and no worker started');
});

t.test('a CA step answered without a look keeps the CA check a worker’s', async (t) => {
  const f = await daemon(t, { ca: true });
  const w = f.worker();
  answerIdentities(w, 3 * DAY);
  w.answer('ca', { nextIn: 10 * MIN, look: null });
  await rests(f, w);
  await f.clock.tick(10 * MIN);
  await until('the worker for the CA check', () => f.workers.length === 2);
  t.same(f.worker().told, ['ca']);
  t.equal(f.looks.made.length, 0, 'the daemon made no look');
});

t.test('a CA rotation’s re-issue slot renews the identities it names now; a new certificate asks for a CA check', async (t) => {
  const f = await daemon(t, { ca: true });
  const w = f.worker();
  answerIdentities(w, 3 * DAY);
  w.answer('ca', { nextIn: 10 * MIN, force: ['kubelet'], look: caLookAt(new Date(f.clock.now().getTime() + 10 * MIN)) });
  await until('the re-issue', () => w.steps.length === 4);
  t.same(w.steps[3], { id: 4, target: 'kubelet', force: true }, 'to the same worker, forced');
  w.answer('kubelet', { nextIn: 3 * DAY, wake: ['ca'] });
  await until('the CA check', () => w.steps.length === 5);
  t.same(w.steps[4], { id: 5, target: 'ca', force: false }, 'at once, not at the next look');
});

t.test('SIGHUP turning CA rotation off ends the CA check and the daemon’s looks; turning it on starts the check', async (t) => {
  const f = await daemon(t, { ca: true });
  await restWithLook(f);
  const off = structuredClone(f.config);
  off.caRotation = { ...off.caRotation, enabled: false };
  f.reloaded.config = off;
  await f.daemon.reloadAndRenew();
  await until('a worker for the reload', () => f.workers.length === 2);
  t.same(f.worker().told, ['kubelet (forced)', 'kube-proxy (forced)'], 'the identities renew; no CA check');
  await restWithLook(f);
  await f.clock.tick(HOUR);
  t.equal(f.looks.made.length, 0, 'the daemon makes no look for a CA check that is off');
  t.equal(f.workers.length, 2, 'and starts no worker for one');

  f.reloaded.config = structuredClone(f.config);
  f.reloaded.config.caRotation = { ...f.config.caRotation, enabled: true };
  await f.daemon.reloadAndRenew();
  await until('a worker for the reload', () => f.workers.length === 3);
  t.same(f.worker().told, ['kubelet (forced)', 'kube-proxy (forced)', 'ca'], 'turned on again: the CA check runs at once');
});

t.test('an idle day with CA rotation on starts at most 4 workers', async (t) => {
  const f = await daemon(t, { ca: true });
  // Every worker answers what it is sent as an idle node's would: nothing to renew for days, cluster-info unchanged.
  const answerAll = (): void => {
    const w = f.worker();
    if (!w.connected) return;
    for (const step of w.unanswered) {
      if (step.target !== 'ca') w.answer(step.target, { nextIn: 3 * DAY });
      else w.answer('ca', { nextIn: 10 * MIN, look: caLookAt(new Date(f.clock.now().getTime() + 10 * MIN)) });
    }
    if (w.stopping) w.rest();
  };
  for (let minute = 0; minute < 24 * 60; minute++) {
    answerAll();
    await settle();
    answerAll();
    await f.clock.tick(MIN);
  }
  t.ok(f.workers.length <= 4, `${f.workers.length} worker start(s) in the day (issue 29: at most 4)`);
  t.ok(f.looks.made.length >= 140, `the daemon looked at cluster-info itself (${f.looks.made.length} times)`);
  t.ok(f.daemon.healthy());
});

t.test('REST_AFTER_MS: a step due sooner keeps the worker, one due exactly then does not', async (t) => {
  const f = await daemon(t);
  const w = f.worker();
  answerIdentities(w, REST_AFTER_MS - 1);
  await asleep(f);
  t.notOk(w.stopping, 'kept for a step due just inside');
  await f.clock.tick(REST_AFTER_MS - 1);
  await until('the steps at their time', () => w.steps.length === 4);
  answerIdentities(w, REST_AFTER_MS);
  await until('the worker to be told to stop', () => w.stopping);
  t.pass('told to stop when nothing is due for REST_AFTER_MS');
});
