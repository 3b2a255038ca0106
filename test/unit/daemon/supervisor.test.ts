// The resting daemon (daemon/supervisor.ts) driven with fake pass processes
// and a fake clock: which pass starts when and with what, what it hears
// from a pass, and how it stops one. The pass side runs for real in
// test/e2e/daemon.test.ts.
import { EventEmitter } from 'node:events';
import { writeFile } from 'node:fs/promises';
import t, { type Test } from 'tap';
import { configIn } from '../../support/node-config.js';
import { until } from '../../support/until.js';
import type { Config } from '../../../agent/config/types.js';
import { pidFilePath } from '../../../agent/daemon/control.js';
import {
  EMPTY_CARRY,
  type Carry,
  type FromPass,
  type IdentityViewWire,
  type Nudge,
  type ToPass,
} from '../../../agent/daemon/pass-protocol.js';
import { readDaemonState } from '../../../agent/daemon/state.js';
import type { LookResult } from '../../../agent/daemon/ca-look.js';
import { LOOK_TIMEOUT_MS, Supervisor, type PassHandle } from '../../../agent/daemon/supervisor.js';
import type { CaLook } from '../../../agent/trust/keeper.js';
import type { IdentityName } from '../../../agent/identity.js';
import { createLogger } from '../../../agent/log.js';
import { LIVENESS_GRACE_MS, passBoundMs } from '../../../agent/renewal/plan.js';
import { FakeClock } from '../../../agent/time/clock.js';
import { existsSync } from 'node:fs';

const logger = createLogger({ level: 'error', format: 'json' });
const DAY = 24 * 3_600_000;
/** What a pass says it cost when it rests. */
const usage = { cpuSeconds: 0.25, maxRssMiB: 60 };

type Start = Extract<ToPass, { kind: 'start' }>;

/** A pass process as the supervisor sees one: an IPC channel and an exit. */
class FakePass extends EventEmitter {
  readonly sent: ToPass[] = [];
  readonly signals: (NodeJS.Signals | number | undefined)[] = [];
  connected = true;
  readonly pid: number;

  constructor(pid: number) {
    super();
    this.pid = pid;
  }

  send(message: ToPass, callback?: (err: Error | null) => void): boolean {
    this.sent.push(message);
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

  say(message: FromPass): void {
    this.emit('message', message);
  }

  exit(code: number | null, signal: NodeJS.Signals | null = null): void {
    this.connected = false;
    this.emit('disconnect');
    this.emit('exit', code, signal);
  }
}

interface Fixture {
  config: Config;
  clock: FakeClock;
  supervisor: Supervisor;
  passes: FakePass[];
  /** The pass running now (the last started). */
  pass: () => FakePass;
  running: Promise<number>;
  stopper: AbortController;
  /** Reloads return this configuration. */
  reloaded: { config: Config };
  /** The daemon's own looks at cluster-info: what each answers ('hang': until aborted), and the ones made. */
  looks: { answer: LookResult | 'hang'; made: CaLook[]; aborted: number };
}

async function supervisor(t: Test): Promise<Fixture> {
  // Teardowns run in the order they were added, and t.testdir() adds the
  // fixture's removal: the supervisor (pid file, status.json, watcher) must
  // be stopped first.
  const stopper = new AbortController();
  const passes: FakePass[] = [];
  let running: Promise<number> | null = null;
  t.teardown(async () => {
    stopper.abort();
    // A pass asked to stop ends.
    for (const p of passes) if (p.connected) p.exit(0);
    await running;
  });
  const dir = t.testdir();
  const config = configIn(dir);
  const clock = new FakeClock(new Date('2025-06-01T00:00:00Z'));
  const reloaded = { config };
  const looks: Fixture['looks'] = { answer: { kind: 'read', digest: 'd1' }, made: [], aborted: 0 };
  const supervisor = new Supervisor({
    config,
    logger,
    signal: stopper.signal,
    reload: async () => reloaded.config,
    startPass: () => {
      const pass = new FakePass(1000 + passes.length);
      passes.push(pass);
      return pass as unknown as PassHandle;
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
    env: {},
    clock,
    random: () => 0.5,
  });
  running = supervisor.run();
  await until('the first pass to start', () => passes.length === 1);
  return { config, clock, supervisor, passes, pass: () => passes.at(-1)!, running, stopper, reloaded, looks };
}

/** A few turns of the event loop: enough for anything already due to have happened. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
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

/** One identity as a pass reports it: valid until `notAfter`, or without a certificate. */
function view(name: IdentityName, notAfter: Date | null): IdentityViewWire {
  return {
    name,
    validUntil: notAfter?.toISOString() ?? null,
    expiredAt: notAfter?.toISOString() ?? null,
    state: { nextRenewal: null, lastSuccess: null, lastError: null, pendingCsr: null, lastHooks: [] },
  };
}

function carryWith(note: string): Carry {
  return {
    ...EMPTY_CARRY,
    slots: {
      kubelet: {
        state: { nextRenewal: null, lastSuccess: note, lastError: null, pendingCsr: null, lastHooks: [] },
        deadline: { certKey: note, at: '2025-06-04T00:00:00.000Z' },
        attempt: 0,
      },
    },
  };
}

const nudgesOf = (p: FakePass): Nudge[] => p.sent.flatMap((m) => (m.kind === 'nudge' ? [m.nudge] : []));

t.test(
  'the first pass joins, later ones do not; a report makes the daemon ready; a rest wakes the next pass at its time with the carry',
  async (t) => {
    const f = await supervisor(t);
    const first = f.pass().start;
    t.equal(first.joinFirst, true, 'the first pass may join');
    t.same(first.nudges, [], 'nothing asked of it');
    t.same(first.carry, EMPTY_CARRY, 'nothing carried yet');
    t.equal(first.config.stateDir, f.config.stateDir, 'it gets the configuration');
    t.ok(existsSync(pidFilePath(f.config.stateDir)), 'the daemon recorded its pid');
    t.notOk(f.supervisor.readiness().ready, 'not ready before any report');

    const notAfter = new Date(f.clock.now().getTime() + 5 * DAY);
    const reported = carryWith('reported');
    f.pass().say({ kind: 'report', views: [view('kubelet', notAfter), view('kube-proxy', notAfter)], carry: reported, done: {} });
    t.ok(f.supervisor.readiness().ready, 'ready once the pass reports valid credentials');
    t.match(f.supervisor.readiness().detail.join('\n'), /^kubelet: valid until /m);
    await until('status.json', async () => (await readDaemonState(f.config.stateDir)) !== null);
    t.ok((await readDaemonState(f.config.stateDir))?.identities.kubelet, 'the status file names the identities');

    const rested = carryWith('rested');
    const wake = new Date(f.clock.now().getTime() + 3_600_000);
    f.pass().say({ kind: 'rest', until: wake.toISOString(), carry: rested, lastSeq: 0, usage, look: null });
    f.pass().exit(0);
    await until('the daemon to sleep', () => f.clock.pending > 0);
    await f.clock.tick(3_600_000 - 1);
    await settle();
    t.equal(f.passes.length, 1, 'no pass before the time the last one asked for');
    t.ok(f.supervisor.readiness().ready, 'still ready while resting');
    t.ok(f.supervisor.healthy(), 'and healthy: its own sleep shows progress');
    await f.clock.tick(1);
    await until('the second pass', () => f.passes.length === 2);
    const second = f.pass().start;
    t.equal(second.joinFirst, false, 'a later pass does not join');
    t.same(second.carry, rested, 'it gets what the last pass handed over');
    t.same(second.nudges, [], 'and nothing else');
    f.pass().say({ kind: 'report', views: [view('kubelet', null), view('kube-proxy', notAfter)], carry: rested, done: {} });
    t.notOk(f.supervisor.readiness().ready, 'a later report that the kubelet has no certificate is heard');
  },
);

t.test('the views are re-checked against the clock: a certificate expiring while the daemon rests makes it unready', async (t) => {
  const f = await supervisor(t);
  const notAfter = new Date(f.clock.now().getTime() + 2 * 3_600_000);
  f.pass().say({ kind: 'report', views: [view('kubelet', notAfter), view('kube-proxy', notAfter)], carry: EMPTY_CARRY, done: {} });
  f.pass().say({
    kind: 'rest',
    until: new Date(notAfter.getTime() + 3_600_000).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 0,
    usage,
    look: null,
  });
  f.pass().exit(0);
  await until('the daemon to sleep', () => f.clock.pending > 0);
  t.ok(f.supervisor.readiness().ready);
  await f.clock.tick(2 * 3_600_000);
  t.notOk(f.supervisor.readiness().ready, 'not ready once notAfter passed');
  t.match(f.supervisor.readiness().detail.join('\n'), /^kubelet: expired at /m);
});

t.test('a nudge reaches the running pass; one it did not apply before resting goes to the next pass', async (t) => {
  const f = await supervisor(t);
  f.supervisor.nudge(['kubelet'], true);
  const [nudge] = nudgesOf(f.pass());
  t.same(nudge, { names: ['kubelet'], force: true, seq: 1 }, 'sent to the running pass, numbered');
  // The pass had decided to rest before the nudge reached it.
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + DAY).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 0,
    usage,
    look: null,
  });
  f.pass().exit(0);
  await until('the next pass', () => f.passes.length === 2);
  t.same(f.pass().start.nudges, [nudge], 'the next pass starts at once, with the nudge, though the last asked for a day');

  // A nudge the pass applied is not handed on.
  f.supervisor.nudge('all', false);
  const [applied] = nudgesOf(f.pass());
  t.same(applied, { names: 'all', force: false, seq: 2 });
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + DAY).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 2,
    usage,
    look: null,
  });
  f.pass().exit(0);
  await until('the daemon to sleep', () => f.clock.pending > 0);
  await settle();
  t.equal(f.passes.length, 2, 'no pass for a nudge already applied');

  // A nudge while resting wakes the daemon and starts a pass with it.
  f.supervisor.nudge(['kube-proxy'], false);
  await until('a pass for the nudge', () => f.passes.length === 3);
  t.same(f.pass().start.nudges, [{ names: ['kube-proxy'], force: false, seq: 3 }]);

  // After the rest message, a nudge waits for the next pass rather than reaching one that ends.
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + DAY).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 3,
    usage,
    look: null,
  });
  f.supervisor.nudge(['kubelet'], false);
  t.same(nudgesOf(f.pass()), [], 'not sent to a pass that rests');
  f.pass().exit(0);
  await until('a pass for it', () => f.passes.length === 4);
  t.same(f.pass().start.nudges, [{ names: ['kubelet'], force: false, seq: 4 }]);
});

t.test('SIGHUP: the reloaded configuration reaches the running pass with a forced renewal', async (t) => {
  const f = await supervisor(t);
  const next = structuredClone(f.config);
  next.renewal = { ...next.renewal, margin: 3600 };
  f.reloaded.config = next;
  await f.supervisor.reloadAndRenew();
  const message = f.pass().sent.at(-1);
  t.match(message, { kind: 'config', seq: 1 }, 'sent as a config message');
  t.equal(message?.kind === 'config' ? message.config.renewal.margin : null, 3600, 'with the new configuration');
  t.equal(f.supervisor.config.renewal.margin, 3600);
  // Not applied before the pass rested: the next pass renews everything, under the new configuration.
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + DAY).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 0,
    usage,
    look: null,
  });
  f.pass().exit(0);
  await until('the next pass', () => f.passes.length === 2);
  t.same(f.pass().start.nudges, [{ names: 'all', force: true, seq: 1 }]);
  t.equal(f.pass().start.config.renewal.margin, 3600);
});

t.test('a pass that ends without resting is started again after a back-off, with its nudges', async (t) => {
  const f = await supervisor(t);
  const notAfter = new Date(f.clock.now().getTime() + 5 * DAY);
  f.pass().say({ kind: 'report', views: [view('kubelet', notAfter), view('kube-proxy', notAfter)], carry: carryWith('one'), done: {} });
  f.supervisor.nudge(['kube-proxy'], true);
  f.pass().exit(1);
  await until('the daemon to wait', () => f.clock.pending > 0);
  t.notOk(settled(f.running)(), 'the daemon goes on: the pass had reported');
  await f.clock.tick(4_999);
  await settle();
  t.equal(f.passes.length, 1, 'not before 5 s');
  await f.clock.tick(1);
  await until('the second pass', () => f.passes.length === 2);
  t.same(f.pass().start.nudges, [{ names: ['kube-proxy'], force: true, seq: 1 }], 'the nudge it was sent is not lost');
  t.same(f.pass().start.carry, carryWith('one'), 'with the last carry reported');
  t.equal(f.pass().start.joinFirst, false);
  t.ok(f.supervisor.readiness().ready, 'the last report stands meanwhile');

  // Killed, again: the wait doubles.
  f.pass().exit(null, 'SIGKILL');
  await until('the daemon to wait', () => f.clock.pending > 0);
  await f.clock.tick(9_999);
  await settle();
  t.equal(f.passes.length, 2, 'not before 10 s');
  await f.clock.tick(1);
  await until('the third pass', () => f.passes.length === 3);
  t.same(f.pass().start.nudges, [{ names: ['kube-proxy'], force: true, seq: 1 }], 'still carrying the nudge');

  // A pass that rests resets the back-off.
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + DAY).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 1,
    usage,
    look: null,
  });
  f.pass().exit(0);
  f.supervisor.nudge('all', false);
  await until('a pass for the nudge, at once', () => f.passes.length === 4);
});

t.test('the first pass ending with an error before any report ends the daemon with its code', async (t) => {
  const f = await supervisor(t);
  f.pass().exit(3);
  t.equal(await f.running, 3, 'run() returns the exit code (a join that cannot work)');
  t.equal(f.passes.length, 1, 'and starts no other pass');
  t.notOk(existsSync(pidFilePath(f.config.stateDir)), 'the pid file is removed');
});

t.test('a later pass ending with an error before reporting does not end the daemon', async (t) => {
  const f = await supervisor(t);
  f.pass().say({ kind: 'rest', until: f.clock.now().toISOString(), carry: EMPTY_CARRY, lastSeq: 0, usage, look: null });
  f.pass().exit(0);
  await until('the second pass', () => f.passes.length === 2);
  f.pass().exit(3);
  await until('the daemon to wait', () => f.clock.pending > 0);
  t.notOk(settled(f.running)(), 'still running');
  await f.clock.tick(5_000);
  await until('the third pass', () => f.passes.length === 3);
});

t.test('healthy follows the progress a pass reports, on the monotonic clock', async (t) => {
  const f = await supervisor(t);
  const bound = passBoundMs(f.config) + LIVENESS_GRACE_MS;
  t.ok(f.supervisor.healthy(), 'healthy as a pass starts');
  await f.clock.tick(bound);
  t.ok(f.supervisor.healthy(), 'within the bound of a pass that said nothing');
  await f.clock.tick(1);
  t.notOk(f.supervisor.healthy(), 'a pass silent past its bound is stuck');

  f.pass().say({ kind: 'progress', msLeft: 60_000 });
  t.ok(f.supervisor.healthy(), 'progress restores it');
  await f.clock.tick(60_000);
  t.ok(f.supervisor.healthy(), 'up to the bound it gave');
  // The wall clock stepping does not matter: only the monotonic one counts.
  f.clock.jump(-DAY);
  t.ok(f.supervisor.healthy(), 'a wall-clock step changes nothing');
  await f.clock.tick(1);
  t.notOk(f.supervisor.healthy(), 'past it, unhealthy');
  f.stopper.abort();
  f.pass().exit(0);
  await f.running;
  t.notOk(f.supervisor.healthy(), 'never healthy once stopping');
});

t.test('metric messages from a pass land in the daemon’s /metrics, next to the TTL of the reported certificates', async (t) => {
  const f = await supervisor(t);
  const at = f.clock.now();
  f.pass().say({ kind: 'metric', name: 'recordRenewal', args: ['kubelet', at.toISOString()] });
  f.pass().say({ kind: 'metric', name: 'recordRenewalFailure', args: ['kube-proxy', 'denied'] });
  f.pass().say({ kind: 'metric', name: 'caBundleRefused', args: ['expired'] });
  const notAfter = new Date(at.getTime() + 3_600_000);
  f.pass().say({ kind: 'report', views: [view('kubelet', notAfter), view('kube-proxy', null)], carry: EMPTY_CARRY, done: {} });
  const text = f.supervisor.metrics.render();
  t.match(text, /^kubeboot_renewals_total\{identity="kubelet"\} 1$/m);
  t.match(
    text,
    new RegExp(`^kubeboot_last_success_timestamp_seconds\\{identity="kubelet"\\} ${at.getTime() / 1000}$`, 'm'),
    'the date arrives as a date',
  );
  t.match(text, /^kubeboot_renewal_failures_total\{identity="kube-proxy",reason="denied"\} 1$/m);
  t.match(text, /^kubeboot_ca_bundle_refused\{reason="expired"\} 1$/m);
  t.match(text, /^kubeboot_certificate_ttl_seconds\{identity="kubelet"\} 3600$/m, 'the TTL of the reported certificate');
  t.notMatch(text, /^kubeboot_certificate_ttl_seconds\{identity="kube-proxy"\}/m, 'none for an identity without one');
  t.match(text, /^process_cpu_seconds_total /m, "and the daemon's own process series");

  // Counters outlive the pass that counted.
  f.pass().say({ kind: 'rest', until: at.toISOString(), carry: EMPTY_CARRY, lastSeq: 0, usage, look: null });
  f.pass().exit(0);
  await until('the second pass', () => f.passes.length === 2);
  f.pass().say({ kind: 'metric', name: 'recordRenewal', args: ['kubelet', at.toISOString()] });
  t.match(f.supervisor.metrics.render(), /^kubeboot_renewals_total\{identity="kubelet"\} 2$/m, 'counted across passes');
  t.match(f.supervisor.metrics.render(), /^kubeboot_passes_total 1$/m, 'the pass that rested is counted');
  t.match(f.supervisor.metrics.render(), /^kubeboot_pass_cpu_seconds_total 0.25$/m, 'with the CPU it said it spent');
});

t.test('a file changed outside kubeboot nudges the running pass; a write the pass announced does not', async (t) => {
  const f = await supervisor(t);
  // The watcher is armed before the first pass starts.
  const own = f.config.kubeProxy.kubeconfig;
  f.pass().say({ kind: 'write', op: 'willWrite', path: own });
  await writeFile(own, 'written by the pass\n');
  f.pass().say({ kind: 'write', op: 'didWrite', path: own });
  await writeFile(f.config.kubelet.kubeconfig, 'written by an operator\n');
  await until('the nudge for the operator’s change', () => nudgesOf(f.pass()).length > 0);
  await settle();
  t.same(
    nudgesOf(f.pass()).map((n) => n.names),
    [['kubelet']],
    "only the operator's change nudged the pass",
  );
  t.equal(nudgesOf(f.pass())[0]?.force, false, 'a look, not a forced renewal');
});

t.test('stopping: the running pass is asked to stop, and run() returns once it exits', async (t) => {
  const f = await supervisor(t);
  const pass = f.pass();
  const done = settled(f.running);
  f.stopper.abort();
  t.same(pass.sent.at(-1), { kind: 'stop' }, 'the pass is asked to stop');
  await f.clock.tick(29_999);
  await settle();
  t.notOk(done(), 'run() waits for the pass');
  t.same(pass.signals, [], 'which has its grace period');
  await f.clock.tick(1);
  t.same(pass.signals, ['SIGKILL'], 'a pass still there after 30 s is killed');
  t.notOk(done(), 'and still waited for');
  pass.exit(null, 'SIGKILL');
  t.equal(await f.running, 0, 'run() returns 0');
  t.equal(f.passes.length, 1, 'no pass is started after a stop');
  t.notOk(existsSync(pidFilePath(f.config.stateDir)), 'the pid file is removed');
});

t.test('stopping a pass that exits at once', async (t) => {
  const f = await supervisor(t);
  f.stopper.abort();
  t.same(f.pass().sent.at(-1), { kind: 'stop' });
  f.pass().exit(0);
  t.equal(await f.running, 0);
  t.equal(f.clock.pending, 0, 'the kill timer is cleared');
});

t.test('stopping while resting ends without a pass', async (t) => {
  const f = await supervisor(t);
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + DAY).toISOString(),
    carry: EMPTY_CARRY,
    lastSeq: 0,
    usage,
    look: null,
  });
  f.pass().exit(0);
  await until('the daemon to sleep', () => f.clock.pending > 0);
  f.stopper.abort();
  t.equal(await f.running, 0);
  t.equal(f.passes.length, 1);
});

t.test('a pass that said it rests but does not exit is killed after 30 s, and the next one still starts', async (t) => {
  const f = await supervisor(t);
  const pass = f.pass();
  const wake = new Date(f.clock.now().getTime() + 10 * 60_000);
  pass.say({ kind: 'rest', until: wake.toISOString(), carry: EMPTY_CARRY, lastSeq: 0, usage, look: null });
  await f.clock.tick(29_999);
  await settle();
  t.same(pass.signals, [], 'it has 30 s to exit');
  await f.clock.tick(1);
  t.same(pass.signals, ['SIGKILL'], 'then it is killed');
  pass.exit(null, 'SIGKILL');
  await settle();
  t.equal(f.passes.length, 1, 'no pass before the time the rested one asked for');
  await f.clock.tick(10 * 60_000);
  await until('the next pass', () => f.passes.length === 2);
  t.pass('the next pass starts at its time');
});

t.test('a pass killed after it answered a forced renewal: that renewal is not repeated; one it had not answered is', async (t) => {
  const f = await supervisor(t);
  const notAfter = new Date(f.clock.now().getTime() + DAY);
  f.supervisor.nudge(['kubelet'], true);
  f.supervisor.nudge(['kube-proxy'], true);
  const [kubelet, proxy] = nudgesOf(f.pass());
  // The kubelet's step after nudge 1 finished; kube-proxy's has not.
  f.pass().say({
    kind: 'report',
    views: [view('kubelet', notAfter), view('kube-proxy', notAfter)],
    carry: EMPTY_CARRY,
    done: { kubelet: kubelet!.seq, 'kube-proxy': 0 },
  });
  f.pass().exit(null, 'SIGKILL');
  await until('the daemon to wait', () => f.clock.pending > 0);
  await f.clock.tick(5_000);
  await until('the second pass', () => f.passes.length === 2);
  t.same(f.pass().start.nudges, [proxy], 'only the unanswered kube-proxy renewal goes to the next pass');
});

t.test('a first pass killed before it reported leaves the join to the next pass', async (t) => {
  const f = await supervisor(t);
  t.equal(f.pass().start.joinFirst, true);
  f.pass().exit(null, 'SIGKILL');
  await until('the daemon to wait', () => f.clock.pending > 0);
  await f.clock.tick(5_000);
  await until('the second pass', () => f.passes.length === 2);
  t.equal(f.pass().start.joinFirst, true, 'the next pass joins (--server/--token) as the first would have');
  f.pass().say({ kind: 'report', views: [view('kubelet', null), view('kube-proxy', null)], carry: EMPTY_CARRY, done: {} });
  f.pass().exit(1);
  await until('the daemon to wait', () => f.clock.pending > 0);
  await f.clock.tick(10_000);
  await until('the third pass', () => f.passes.length === 3);
  t.equal(f.pass().start.joinFirst, false, 'once a pass has reported, later ones do not join again');
});

t.test(
  'passes failing again and again: the daemon says so in /metrics, then turns unhealthy so the watchdog restarts the unit',
  async (t) => {
    const f = await supervisor(t);
    f.pass().say({ kind: 'report', views: [view('kubelet', null), view('kube-proxy', null)], carry: EMPTY_CARRY, done: {} });
    let wait = 5_000;
    for (let failed = 1; failed <= 7; failed++) {
      t.ok(f.supervisor.healthy(), `healthy with ${failed - 1} failed pass(es) in a row`);
      f.pass().exit(1);
      await until('the daemon to wait', () => f.clock.pending > 0 && f.passes.at(-1)!.connected === false);
      if (failed === 7) break;
      await f.clock.tick(wait);
      await until(`pass ${failed + 1}`, () => f.passes.length === failed + 1);
      wait = Math.min(300_000, wait * 2);
    }
    t.notOk(f.supervisor.healthy(), 'unhealthy after 7 failed passes in a row');
    t.match(f.supervisor.metrics.render(), /^kubeboot_pass_failures_total 7$/m, 'each failure counted');
  },
);

t.test('SIGHUP with a changed set of identities is refused: the running configuration stays', async (t) => {
  const f = await supervisor(t);
  const next = structuredClone(f.config);
  next.kubeletServing.enabled = !f.config.kubeletServing.enabled;
  f.reloaded.config = next;
  await f.supervisor.reloadAndRenew();
  t.equal(f.supervisor.config, f.config, 'the configuration is the one the daemon started with');
  const last = f.pass().sent.at(-1);
  t.equal(last?.kind, 'config', 'the renewal still happens');
  t.equal(
    last?.kind === 'config' ? last.config.kubeletServing.enabled : null,
    f.config.kubeletServing.enabled,
    'under the old configuration',
  );
});

const MIN = 60_000;

/** What a pass's CA keeper leaves the daemon when nothing is pending: look at `at`, digest d1. */
function caLook(at: Date, until = new Date(at.getTime() + 30 * DAY)): CaLook {
  return {
    url: 'https://127.0.0.1:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0',
    caPem: 'CA',
    tlsServerName: null,
    certFile: '/pki/kubelet-client-current.pem',
    keyFile: '/pki/kubelet-client-current.pem',
    digest: 'd1',
    at: at.toISOString(),
    until: until.toISOString(),
  };
}

/** The first pass rests: a renewal in `renewInDays`, the CA check's look in 10 minutes. */
async function restWithLook(f: Fixture, renewInDays = 3, horizon?: Date): Promise<void> {
  const now = f.clock.now().getTime();
  f.pass().say({
    kind: 'rest',
    until: new Date(now + renewInDays * DAY).toISOString(),
    look: caLook(new Date(now + 10 * MIN), horizon),
    carry: carryWith('rested'),
    lastSeq: 0,
    usage,
  });
  f.pass().exit(0);
  await until('the daemon to sleep', () => f.clock.pending > 0);
}

const looksCounted = (f: Fixture, result: string) =>
  Number(new RegExp(`^kubeboot_ca_looks_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(f.supervisor.metrics.render())?.[1] ?? 0);

t.test('an unchanged cluster-info starts no pass for a whole idle day; a changed one starts one at once', async (t) => {
  const f = await supervisor(t);
  await restWithLook(f);
  await f.clock.tick(10 * MIN - 1);
  t.equal(f.looks.made.length, 0, 'no look before the time the keeper scheduled');
  await f.clock.tick(1);
  await until('the first look', () => f.looks.made.length === 1);
  t.equal(f.passes.length, 1, 'an unchanged digest starts no pass');
  t.equal(f.looks.made[0]!.url, caLook(new Date()).url, 'the look is the one the keeper handed over');

  for (let minute = 0; minute < 24 * 60; minute++) {
    await f.clock.tick(MIN);
    if (!f.supervisor.healthy()) t.fail(`unhealthy at minute ${minute}: the daemon's looks and sleep show progress`);
  }
  t.equal(f.passes.length, 1, 'no pass in a day of unchanged looks');
  // random() = 0.5: every look 10 minutes after the last.
  t.equal(f.looks.made.length, 1 + 144, 'one look every 10 minutes (caRotation.interval, jittered as the keeper does)');
  t.equal(looksCounted(f, 'unchanged'), 145, 'each counted in /metrics');

  f.looks.answer = { kind: 'read', digest: 'd2' };
  await f.clock.tick(10 * MIN);
  await until('a pass for the change', () => f.passes.length === 2);
  t.equal(looksCounted(f, 'changed'), 1, 'the change is counted');
  t.same(f.pass().start.carry, carryWith('rested'), 'the pass gets the carry, and does the full check');
  t.same(f.pass().start.nudges, [], 'with nothing else asked of it');
  const looked = f.looks.made.length;
  await f.clock.tick(30 * MIN);
  t.equal(f.looks.made.length, looked, 'no look of its own while a pass holds the CA check');
});

t.test('a renewal still starts its pass at its time while the daemon makes the CA looks', async (t) => {
  const f = await supervisor(t);
  await restWithLook(f, 1);
  await f.clock.tick(DAY - 1);
  t.equal(f.passes.length, 1, 'no pass before the renewal is due');
  await f.clock.tick(1);
  await until('the renewal pass', () => f.passes.length === 2);
  t.ok(f.looks.made.length >= 143, 'the looks went on meanwhile');
});

t.test('a look that cannot read cluster-info, or one past the keeper’s horizon, starts a pass instead', async (t) => {
  const f = await supervisor(t);
  await restWithLook(f);
  f.looks.answer = { kind: 'failed', why: 'HTTP 403' };
  await f.clock.tick(10 * MIN);
  await until('a pass for the failed look', () => f.passes.length === 2);
  t.equal(looksCounted(f, 'failed'), 1);

  // The keeper's CA expires 15 minutes from now: the look at +10 min still stands in, the one at +20 does not.
  await restWithLook(f, 3, new Date(f.clock.now().getTime() + 15 * MIN));
  f.looks.answer = { kind: 'read', digest: 'd1' };
  const looked = f.looks.made.length;
  await f.clock.tick(10 * MIN);
  await until('the look', () => f.looks.made.length === looked + 1);
  t.equal(f.passes.length, 2, 'unchanged, before the horizon: no pass');
  await f.clock.tick(10 * MIN);
  await until('a pass at the next look', () => f.passes.length === 3);
  t.equal(f.looks.made.length, looked + 1, 'past the horizon the pass looks, not the daemon');
});

t.test('a nudge or a forced renewal during a look starts its pass at once; the look is aborted', async (t) => {
  const f = await supervisor(t);
  await restWithLook(f);
  f.looks.answer = 'hang';
  await f.clock.tick(10 * MIN);
  await until('the look to start', () => f.looks.made.length === 1);
  t.ok(f.supervisor.healthy(), 'a look in flight is progress');
  f.supervisor.nudge(['kubelet'], true);
  await until('the pass for the nudge', () => f.passes.length === 2);
  t.equal(f.looks.aborted, 1, 'the look was aborted');
  t.same(f.pass().start.nudges, [{ names: ['kubelet'], force: true, seq: 1 }], 'the pass gets the forced renewal');
  t.equal(looksCounted(f, 'failed'), 0, 'an aborted look is not counted as a failure');
});

t.test('a look that hangs times out, and a pass looks instead; the watchdog bound covers the look', async (t) => {
  const f = await supervisor(t);
  await restWithLook(f);
  f.looks.answer = 'hang';
  await f.clock.tick(10 * MIN);
  await until('the look to start', () => f.looks.made.length === 1);
  await f.clock.tick(LOOK_TIMEOUT_MS - 1);
  t.equal(f.passes.length, 1, 'not before the timeout');
  t.ok(f.supervisor.healthy(), 'healthy while the look may still answer');
  await f.clock.tick(1);
  await until('a pass after the timeout', () => f.passes.length === 2);
  t.equal(f.looks.aborted, 1);
});

t.test('SIGTERM during a look aborts it and stops the daemon without a pass', async (t) => {
  const f = await supervisor(t);
  await restWithLook(f);
  f.looks.answer = 'hang';
  await f.clock.tick(10 * MIN);
  await until('the look to start', () => f.looks.made.length === 1);
  f.stopper.abort();
  t.equal(await f.running, 0, 'run() returns 0');
  t.equal(f.looks.aborted, 1, 'the look was aborted');
  t.equal(f.passes.length, 1, 'and no pass started');
});

t.test('a rest without a look keeps the CA check in the pass, as before', async (t) => {
  const f = await supervisor(t);
  f.pass().say({
    kind: 'rest',
    until: new Date(f.clock.now().getTime() + 10 * MIN).toISOString(),
    look: null,
    carry: EMPTY_CARRY,
    lastSeq: 0,
    usage,
  });
  f.pass().exit(0);
  await until('the daemon to sleep', () => f.clock.pending > 0);
  await f.clock.tick(10 * MIN);
  await until('the pass for the CA check', () => f.passes.length === 2);
  t.equal(f.looks.made.length, 0, 'the daemon made no look');
});
