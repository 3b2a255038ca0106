// The daemon's schedule (daemon/schedule.ts) as tables: what is due, what a
// step's answer, a nudge or a lost worker changes, when to wake and when a
// worker may end. Each schedule is shown as one line per target (`view`), so
// a row reads as the state an operator would see. The daemon that holds the
// schedule is driven in daemon.test.ts.
import t from 'tap';
import type { IdentityName } from '../../../agent/identity.js';
import { REST_AFTER_MS } from '../../../agent/daemon/daemon.js';
import {
  answered,
  caDueNow,
  due,
  inFlight,
  initialSchedule,
  lookAgain,
  looksItself,
  lost,
  mayRest,
  needsWorker,
  nudge,
  send,
  wakeAt,
  withTargets,
  type Plan,
  type Schedule,
} from '../../../agent/daemon/schedule.js';
import { EMPTY_HAND_OVER, type Answer, type Step, type Target } from '../../../agent/daemon/worker-protocol.js';
import type { CaLook } from '../../../agent/trust/keeper.js';
import { caLookAt } from '../../support/ca-look.js';

const T0 = Date.parse('2026-06-01T12:00:00Z');
const SEC = 1_000;
const MIN = 60_000;
const DAY = 24 * 60 * MIN;
const TARGETS: Target[] = ['kubelet', 'kube-proxy', 'ca'];
const iso = (offsetMs: number) => new Date(T0 + offsetMs).toISOString();

/** A moment as an offset from T0: `+0`, `+10m`, `-5s`, `+1d`. */
function offset(at: number): string {
  const ms = at - T0;
  const sign = ms < 0 ? '-' : '+';
  const abs = Math.abs(ms);
  if (abs === 0) return '+0';
  if (abs % DAY === 0) return `${sign}${abs / DAY}d`;
  if (abs % MIN === 0) return `${sign}${abs / MIN}m`;
  return `${sign}${abs / SEC}s`;
}

/** One plan in words: `due +0 forced`, `in flight #2 (forced), due +0`, `idle`. */
function describe(plan: Plan): string {
  const parts: string[] = [];
  if (plan.inFlight) parts.push(`in flight #${plan.inFlight.id}${plan.inFlight.force ? ' (forced)' : ''}`);
  if (plan.due !== null) parts.push(`due ${offset(plan.due)}${plan.force ? ' forced' : ''}`);
  else if (plan.force) parts.push('forced');
  return parts.length === 0 ? 'idle' : parts.join(', ');
}

/** The schedule, one line per target, and whether the daemon holds a look. */
function view(s: Schedule): Record<string, string> {
  const lines: Record<string, string> = Object.fromEntries([...s.plans].map(([target, plan]) => [target, describe(plan)]));
  if (s.look) lines.look = offset(Date.parse(s.look.at));
  return lines;
}

/** What a CA check leaves the daemon when nothing is pending: look at `atMs`. */
function caLook(atMs: number): CaLook {
  return caLookAt(new Date(iso(atMs)), new Date(iso(30 * DAY)));
}

/** A step's answer: due again at `nextMs` (null: not until nudged), nothing else. */
function answer(step: Step, nextMs: number | null, more: Partial<Answer> = {}): Answer {
  return {
    id: step.id,
    target: step.target,
    next: nextMs === null ? null : iso(nextMs),
    record: null,
    wake: [],
    force: [],
    look: null,
    handOver: EMPTY_HAND_OVER,
    ...more,
  };
}

/** Sends `targets` and returns the schedule and the steps by target. */
function sent(s: Schedule, targets: Target[]): { s: Schedule; step: (target: Target) => Step } {
  const out = send(s, targets);
  return {
    s: out.schedule,
    step: (target) => {
      const step = out.steps.find((x) => x.target === target);
      if (!step) throw new Error(`no step for ${target}`);
      return step;
    },
  };
}

/**
 * A node at rest at T0: every step answered, the identities due in a day
 * (kube-proxy in two), the CA check's look the daemon's, in 10 minutes.
 */
function resting(): Schedule {
  const first = sent(initialSchedule(TARGETS, T0 - MIN), TARGETS);
  let s = answered(first.s, answer(first.step('kubelet'), DAY), T0);
  s = answered(s, answer(first.step('kube-proxy'), 2 * DAY), T0);
  return answered(s, answer(first.step('ca'), 10 * MIN, { look: caLook(10 * MIN) }), T0);
}

t.test('a new schedule: every target due now, nothing forced, nothing in flight', async (t) => {
  const s = initialSchedule(TARGETS, T0);
  t.same(view(s), { kubelet: 'due +0', 'kube-proxy': 'due +0', ca: 'due +0' }, 'a first worker looks at everything');
  t.same(due(s, T0), TARGETS, 'all of it due');
  t.equal(wakeAt(s), T0, 'wake now');
  t.equal(s.lastId, 0, 'no step handed out yet');
  t.equal(s.look, null, 'no look of the daemon’s own: the first CA check is a worker’s');
  t.same(inFlight(s), []);
  t.ok(needsWorker(s, T0), 'so it needs a worker');
  t.notOk(looksItself(s, T0));
  t.same(
    view(initialSchedule(['kubelet', 'kube-proxy'], T0)),
    { kubelet: 'due +0', 'kube-proxy': 'due +0' },
    'no CA check when rotation is off',
  );
});

t.test('the resting node these tables start from', async (t) => {
  t.same(view(resting()), { kubelet: 'due +1d', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' });
});

t.test('nudge: the identities named are due now, forced when asked; never later than they were', async (t) => {
  const kubeletInFlight = (): Schedule => sent(resting(), ['kubelet']).s;
  const rows: {
    name: string;
    from: () => Schedule;
    names: IdentityName[] | 'all';
    force: boolean;
    at?: number;
    want: Record<string, string>;
  }[] = [
    {
      name: 'named: only that identity',
      from: resting,
      names: ['kubelet'],
      force: false,
      want: { kubelet: 'due +0', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' },
    },
    {
      name: "'all': every identity, never the CA check",
      from: resting,
      names: 'all',
      force: false,
      want: { kubelet: 'due +0', 'kube-proxy': 'due +0', ca: 'due +10m', look: '+10m' },
    },
    {
      name: 'forced: the next step renews even a certificate that is not due',
      from: resting,
      names: ['kube-proxy'],
      force: true,
      want: { kubelet: 'due +1d', 'kube-proxy': 'due +0 forced', ca: 'due +10m', look: '+10m' },
    },
    {
      name: 'a forced nudge is not undone by a plain one',
      from: () => nudge(resting(), ['kubelet'], true, T0),
      names: ['kubelet'],
      force: false,
      want: { kubelet: 'due +0 forced', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' },
    },
    {
      name: 'a nudge never moves a step later',
      from: () => nudge(resting(), ['kubelet'], false, T0),
      names: ['kubelet'],
      force: false,
      at: T0 + MIN,
      want: { kubelet: 'due +0', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' },
    },
    {
      name: 'while in flight: due again at once, for after its answer (its step may have looked before the change)',
      from: kubeletInFlight,
      names: ['kubelet'],
      force: true,
      want: { kubelet: 'in flight #4, due +0 forced', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' },
    },
    {
      name: 'an identity this daemon does not run is ignored',
      from: resting,
      names: ['kubelet-serving'],
      force: true,
      want: { kubelet: 'due +1d', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' },
    },
  ];
  for (const row of rows) t.same(view(nudge(row.from(), row.names, row.force, row.at ?? T0)), row.want, row.name);

  const s = nudge(kubeletInFlight(), ['kubelet'], false, T0);
  t.same(due(s, T0), [], 'a nudged step in flight is not sent twice');
  t.equal(wakeAt(s), T0 + 10 * MIN, 'nor woken for');
});

t.test('send: numbers the steps, puts them in flight, carries force once', async (t) => {
  const start = nudge(initialSchedule(TARGETS, T0), ['kube-proxy'], true, T0);
  const { schedule: s, steps } = send(start, TARGETS);
  t.same(
    steps,
    [
      { id: 1, target: 'kubelet', force: false },
      { id: 2, target: 'kube-proxy', force: true },
      { id: 3, target: 'ca', force: false },
    ],
    'one numbered step per target, the forced one forced',
  );
  t.equal(s.lastId, 3);
  t.same(view(s), { kubelet: 'in flight #1', 'kube-proxy': 'in flight #2 (forced)', ca: 'in flight #3' }, 'in flight, no longer due');
  t.same(inFlight(s), steps, 'what is unanswered is what was sent');
  t.same(due(s, T0), [], 'nothing due while it runs');
  t.equal(wakeAt(s), null, 'nothing to wake for');

  const again = send(s, ['kube-proxy']);
  t.same(again.steps, [], 'a target in flight gets no second step');
  t.equal(again.schedule.lastId, 3, 'and uses no id');

  const next = sent(answered(s, answer(steps[1]!, 0), T0), ['kube-proxy']);
  t.equal(next.step('kube-proxy').id, 4, 'ids keep counting');
  t.equal(next.step('kube-proxy').force, false, 'an answered force is not carried to the next step');

  t.same(send(s, ['kubelet-serving']).steps, [], 'a target without a plan gets no step');
  t.same(view(send(resting(), ['kubelet']).schedule).look, '+10m', 'sending an identity leaves the daemon its look');
  t.equal(send(resting(), ['ca']).schedule.look, null, 'sending the CA check takes the look back: a worker looks');
});

t.test('answered: when the target is due next, and what else the answer wakes or forces', async (t) => {
  const first = (): ReturnType<typeof sent> => sent(initialSchedule(TARGETS, T0), TARGETS);
  const rows: { name: string; run: () => Schedule; want: Record<string, string> }[] = [
    {
      name: 'next: due at that time',
      run: () => {
        const f = first();
        return answered(f.s, answer(f.step('kubelet'), DAY), T0);
      },
      want: { kubelet: 'due +1d', 'kube-proxy': 'in flight #2', ca: 'in flight #3' },
    },
    {
      name: 'next null: not until something nudges it',
      run: () => {
        const f = first();
        return answered(f.s, answer(f.step('kubelet'), null), T0);
      },
      want: { kubelet: 'idle', 'kube-proxy': 'in flight #2', ca: 'in flight #3' },
    },
    {
      name: 'nudged while it ran: due at the nudge, sooner than next',
      run: () => {
        const f = first();
        return answered(nudge(f.s, ['kubelet'], false, T0 + MIN), answer(f.step('kubelet'), DAY), T0 + 2 * MIN);
      },
      want: { kubelet: 'due +1m', 'kube-proxy': 'in flight #2', ca: 'in flight #3' },
    },
    {
      name: 'force-nudged while it ran: the next step is forced',
      run: () => {
        const f = first();
        return answered(nudge(f.s, ['kubelet'], true, T0 + MIN), answer(f.step('kubelet'), DAY), T0 + 2 * MIN);
      },
      want: { kubelet: 'due +1m forced', 'kube-proxy': 'in flight #2', ca: 'in flight #3' },
    },
    {
      name: 'nudged while it ran, next sooner still: next',
      run: () => {
        const f = first();
        return answered(nudge(f.s, ['kubelet'], false, T0 + MIN), answer(f.step('kubelet'), 30 * SEC), T0 + 2 * MIN);
      },
      want: { kubelet: 'due +30s', 'kube-proxy': 'in flight #2', ca: 'in flight #3' },
    },
    {
      name: 'wake: the targets it names are due now (the kubelet’s credential landed; a new certificate asks for a CA look)',
      run: () => {
        const f = first();
        let s = answered(f.s, answer(f.step('kube-proxy'), null), T0);
        s = answered(s, answer(f.step('ca'), DAY), T0);
        return answered(s, answer(f.step('kubelet'), DAY, { wake: ['kube-proxy', 'ca'] }), T0 + MIN);
      },
      want: { kubelet: 'due +1d', 'kube-proxy': 'due +1m', ca: 'due +1m' },
    },
    {
      name: 'wake of a target still in flight: it runs again after its own answer',
      run: () => {
        const f = first();
        return answered(f.s, answer(f.step('kubelet'), DAY, { wake: ['kube-proxy'] }), T0);
      },
      want: { kubelet: 'due +1d', 'kube-proxy': 'in flight #2, due +0', ca: 'in flight #3' },
    },
    {
      name: 'force: a CA rotation’s re-issue slot renews the identities it names now',
      run: () => {
        const f = first();
        let s = answered(f.s, answer(f.step('kubelet'), DAY), T0);
        s = answered(s, answer(f.step('kube-proxy'), DAY), T0);
        return answered(s, answer(f.step('ca'), 10 * MIN, { force: ['kubelet', 'kube-proxy'] }), T0 + MIN);
      },
      want: { kubelet: 'due +1m forced', 'kube-proxy': 'due +1m forced', ca: 'due +10m' },
    },
    {
      name: 'the CA step’s look: the daemon makes the next look itself',
      run: () => {
        const f = first();
        return answered(f.s, answer(f.step('ca'), 10 * MIN, { look: caLook(10 * MIN) }), T0);
      },
      want: { kubelet: 'in flight #1', 'kube-proxy': 'in flight #2', ca: 'due +10m', look: '+10m' },
    },
    {
      name: 'an identity’s answer leaves the daemon’s look as it was',
      run: () => {
        const s = sent(resting(), ['kubelet']);
        return answered(s.s, answer(s.step('kubelet'), 3 * DAY, { look: caLook(MIN) }), T0);
      },
      want: { kubelet: 'due +3d', 'kube-proxy': 'due +2d', ca: 'due +10m', look: '+10m' },
    },
  ];
  for (const row of rows) t.same(view(row.run()), row.want, row.name);

  const f = first();
  const s = answered(f.s, answer(f.step('kubelet'), DAY), T0);
  t.equal(
    answered(s, answer(f.step('kubelet'), 0, { wake: ['kube-proxy'], force: ['kube-proxy'] }), T0),
    s,
    'a second answer to the same id changes nothing',
  );
  t.equal(answered(s, { ...answer(f.step('kube-proxy'), 0), id: 99 }, T0), s, 'an id never sent changes nothing');
  const afterLoss = lost(s, T0);
  t.equal(
    answered(afterLoss, answer(f.step('kube-proxy'), DAY, { force: ['kubelet'] }), T0),
    afterLoss,
    'nor does a lost worker’s late answer',
  );
});

t.test('lost: what a worker did not answer is due at once, forced ones still forced; what it answered is not resent', async (t) => {
  const f = sent(nudge(nudge(resting(), ['kubelet'], true, T0), ['kube-proxy'], true, T0), ['kubelet', 'kube-proxy']);
  t.same(view(f.s), { kubelet: 'in flight #4 (forced)', 'kube-proxy': 'in flight #5 (forced)', ca: 'due +10m', look: '+10m' });
  // The kubelet's forced renewal finished; kube-proxy's did not.
  const s = answered(f.s, answer(f.step('kubelet'), 30 * DAY), T0 + MIN);
  t.same(
    view(lost(s, T0 + 2 * MIN)),
    { kubelet: 'due +30d', 'kube-proxy': 'due +2m forced', ca: 'due +10m', look: '+10m' },
    'the answered renewal is not repeated, the unanswered one goes to the next worker, still forced',
  );
  t.same(inFlight(lost(s, T0 + 2 * MIN)), [], 'nothing in flight after');

  const plain = sent(resting(), ['kubelet', 'ca']);
  t.same(
    view(lost(plain.s, T0 + MIN)),
    { kubelet: 'due +1m', 'kube-proxy': 'due +2d', ca: 'due +1m' },
    'an unforced step comes back unforced; the CA check comes back to a worker (no look of the daemon’s)',
  );
  t.same(
    view(lost(nudge(plain.s, ['kubelet'], true, T0), T0 + MIN)),
    { kubelet: 'due +1m forced', 'kube-proxy': 'due +2d', ca: 'due +1m' },
    'a force nudged in while it ran survives the loss',
  );
  t.same(view(lost(resting(), T0 + MIN)), view(resting()), 'a worker with nothing in flight loses nothing');
});

t.test('wakeAt: the earliest due step not in flight', async (t) => {
  const rows: { name: string; s: () => Schedule; want: string | null }[] = [
    { name: 'resting: the CA look', s: resting, want: '+10m' },
    { name: 'a nudge: now', s: () => nudge(resting(), ['kube-proxy'], false, T0 + MIN), want: '+1m' },
    { name: 'a step in flight is not woken for', s: () => sent(resting(), ['ca']).s, want: '+1d' },
    {
      name: 'nothing scheduled: null',
      s: () => {
        const f = sent(initialSchedule(['kubelet'], T0), ['kubelet']);
        return answered(f.s, answer(f.step('kubelet'), null), T0);
      },
      want: null,
    },
  ];
  for (const row of rows) {
    const at = wakeAt(row.s());
    t.equal(at === null ? null : offset(at), row.want, row.name);
  }
});

t.test('mayRest: a worker ends only when nothing is in flight and no step it would run is due for REST_AFTER_MS', async (t) => {
  /** Only kubelet and the CA check, both answered at T0: kubelet due at `kubeletMs`, the CA check at `caMs`, a daemon's look or not. */
  const at = (kubeletMs: number | null, caMs: number, look: boolean): Schedule => {
    const f = sent(initialSchedule(['kubelet', 'ca'], T0), ['kubelet', 'ca']);
    const s = answered(f.s, answer(f.step('kubelet'), kubeletMs), T0);
    return answered(s, answer(f.step('ca'), caMs, { look: look ? caLook(caMs) : null }), T0);
  };
  const rows: { name: string; s: () => Schedule; want: boolean }[] = [
    { name: 'a renewal due within REST_AFTER_MS keeps the worker', s: () => at(REST_AFTER_MS - 1, DAY, true), want: false },
    { name: 'one due exactly REST_AFTER_MS away does not', s: () => at(REST_AFTER_MS, DAY, true), want: true },
    { name: 'one due in a day does not', s: () => at(DAY, DAY, true), want: true },
    { name: 'the daemon’s own CA look due at once does not: the daemon makes it', s: () => at(DAY, 0, true), want: true },
    { name: 'a CA check due soon without a look does: only a worker can run it', s: () => at(DAY, MIN, false), want: false },
    { name: 'a CA check without a look 10 minutes away does not', s: () => at(DAY, 10 * MIN, false), want: true },
    { name: 'nothing scheduled at all does not', s: () => at(null, DAY, true), want: true },
    { name: 'a step in flight keeps it, though nothing is due', s: () => sent(at(null, DAY, true), ['kubelet']).s, want: false },
    { name: 'the CA step in flight keeps it too', s: () => sent(at(DAY, DAY, true), ['ca']).s, want: false },
  ];
  for (const row of rows) t.equal(mayRest(row.s(), T0, REST_AFTER_MS), row.want, row.name);
});

t.test('needsWorker and looksItself: what the daemon does with a due step when no worker runs', async (t) => {
  const rows: { name: string; s: () => Schedule; at: number; needs: boolean; looks: boolean }[] = [
    { name: 'resting, nothing due yet', s: resting, at: T0, needs: false, looks: false },
    { name: 'the CA look due: the daemon looks, no worker', s: resting, at: T0 + 10 * MIN, needs: false, looks: true },
    { name: 'a renewal due: a worker', s: resting, at: T0 + DAY, needs: true, looks: true },
    { name: 'a nudge: a worker', s: () => nudge(resting(), ['kubelet'], false, T0), at: T0, needs: true, looks: false },
    {
      name: 'caDueNow (cluster-info changed): a worker, no look',
      s: () => caDueNow(resting(), T0 + MIN),
      at: T0 + MIN,
      needs: true,
      looks: false,
    },
    {
      name: 'lookAgain (unchanged): the next look at its time',
      s: () => lookAgain(caDueNow(resting(), T0), caLook(20 * MIN)),
      at: T0 + 20 * MIN,
      needs: false,
      looks: true,
    },
    {
      name: 'lookAgain, before its time: nothing',
      s: () => lookAgain(resting(), caLook(20 * MIN)),
      at: T0 + 10 * MIN,
      needs: false,
      looks: false,
    },
    { name: 'the CA check in flight: neither', s: () => sent(resting(), ['ca']).s, at: T0 + 10 * MIN, needs: false, looks: false },
  ];
  for (const row of rows) {
    t.equal(needsWorker(row.s(), row.at), row.needs, `${row.name}: needsWorker`);
    t.equal(looksItself(row.s(), row.at), row.looks, `${row.name}: looksItself`);
  }
  const f = sent(resting(), ['ca']);
  const noLook = answered(f.s, answer(f.step('ca'), 10 * MIN), T0);
  t.ok(needsWorker(noLook, T0 + 10 * MIN), 'a CA step answered without a look: its next check needs a worker');
  t.notOk(looksItself(noLook, T0 + 10 * MIN));
});

t.test('caDueNow and lookAgain: the daemon’s look hands the CA check to a worker, or schedules the next look', async (t) => {
  t.same(
    view(caDueNow(resting(), T0 + 5 * MIN)),
    { kubelet: 'due +1d', 'kube-proxy': 'due +2d', ca: 'due +5m' },
    'caDueNow: the look is given up, the check due now',
  );
  t.same(
    view(lookAgain(resting(), caLook(18 * MIN))),
    { kubelet: 'due +1d', 'kube-proxy': 'due +2d', ca: 'due +18m', look: '+18m' },
    'lookAgain: due at the next look’s time',
  );
  const off = initialSchedule(['kubelet', 'kube-proxy'], T0);
  t.equal(caDueNow(off, T0), off, 'with CA rotation off there is no CA check to make due');
  t.equal(lookAgain(off, caLook(MIN)), off, 'nor a look to schedule');
});

t.test('withTargets: SIGHUP turning CA rotation off forgets the CA check and the look; turning it on makes it due now', async (t) => {
  const off = withTargets(resting(), ['kubelet', 'kube-proxy'], T0 + MIN);
  t.same(view(off), { kubelet: 'due +1d', 'kube-proxy': 'due +2d' }, 'off: the identities as they were, no CA check, no look');
  t.notOk(looksItself(off, T0 + 10 * MIN), 'so the daemon makes no look');
  t.same(
    view(withTargets(off, TARGETS, T0 + MIN)),
    { kubelet: 'due +1d', 'kube-proxy': 'due +2d', ca: 'due +1m' },
    'on: the CA check is due now, a worker’s (no look yet)',
  );
  t.same(view(withTargets(resting(), TARGETS, T0 + MIN)), view(resting()), 'unchanged targets: unchanged schedule');
  const f = sent(resting(), ['ca']);
  const dropped = withTargets(f.s, ['kubelet', 'kube-proxy'], T0);
  t.equal(
    answered(dropped, answer(f.step('ca'), 10 * MIN, { look: caLook(10 * MIN) }), T0),
    dropped,
    'a dropped step’s late answer changes nothing',
  );
  t.same(inFlight(dropped), [], 'and it is not handed to the next worker');
});
