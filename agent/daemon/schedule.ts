/**
 * When each step of `kubeboot run` is due, as pure functions of values: the
 * daemon (daemon.ts) holds one Schedule, the agent's only sleeper waits until
 * `wakeAt`, sends what `due` names to a worker, and feeds every answer,
 * nudge and lost worker back through these functions. Nothing here sleeps,
 * reads a clock or does I/O; times are milliseconds since the epoch.
 *
 * A target (one identity, or the CA check) has at most one step in flight.
 * What is unanswered is exactly what was sent and not answered: a worker
 * that dies hands its steps back (`lost`), forced ones still forced, and an
 * answered forced renewal is never sent again.
 */
import { identitiesFor } from '../config/identities.js';
import type { Config } from '../config/types.js';
import type { IdentityName } from '../identity.js';
import type { CaLook } from '../trust/keeper.js';
import type { Answer, Step, Target } from './worker-protocol.js';

export interface Plan {
  /** When the next step is due; null: not until something nudges it. */
  due: number | null;
  /** The next step renews even a certificate that is not due. */
  force: boolean;
  /** The step sent and not answered yet. */
  inFlight: Step | null;
}

export interface Schedule {
  plans: ReadonlyMap<Target, Plan>;
  /** The last step id handed out. */
  lastId: number;
  /** The CA check's next look, the daemon's own to make (ca-look.ts); null while a worker holds the check. */
  look: CaLook | null;
}

/** What the schedule runs for a configuration: every identity, and the CA check when CA rotation is on. */
export function targetsFor(config: Config): Target[] {
  const names: Target[] = identitiesFor(config).map((i) => i.name);
  return config.caRotation.enabled ? [...names, 'ca'] : names;
}

/** A new daemon: every target is due at once (a first worker looks at everything). */
export function initialSchedule(targets: Target[], now: number): Schedule {
  return { plans: new Map(targets.map((t) => [t, { due: now, force: false, inFlight: null }])), lastId: 0, look: null };
}

/**
 * SIGHUP turned CA rotation on or off: a new target is due now; a dropped one
 * is forgotten, with the daemon's look when it is the CA check (the answer of
 * a step still in flight for it then changes nothing).
 */
export function withTargets(s: Schedule, targets: readonly Target[], now: number): Schedule {
  const plans = new Map(targets.map((t): [Target, Plan] => [t, s.plans.get(t) ?? { due: now, force: false, inFlight: null }]));
  return { ...s, plans, look: plans.has('ca') ? s.look : null };
}

function withPlans(s: Schedule, change: (plans: Map<Target, Plan>) => void): Schedule {
  const plans = new Map(s.plans);
  change(plans);
  return { ...s, plans };
}

function dueBy(plan: Plan, at: number): Plan {
  return { ...plan, due: plan.due === null ? at : Math.min(plan.due, at) };
}

/**
 * A file changed, SIGHUP, `kubeboot renew`: the identities named are due now.
 * One in flight runs again once it answers (its step may have looked before the change).
 */
export function nudge(s: Schedule, names: readonly IdentityName[] | 'all', force: boolean, now: number): Schedule {
  return withPlans(s, (plans) => {
    for (const [target, plan] of plans) {
      if (target === 'ca' || (names !== 'all' && !names.includes(target))) continue;
      plans.set(target, { ...dueBy(plan, now), force: plan.force || force });
    }
  });
}

/** The CA check is due now (a look found cluster-info changed, or cannot stand in for the keeper any more). */
export function caDueNow(s: Schedule, now: number): Schedule {
  const plan = s.plans.get('ca');
  if (!plan) return s;
  return withPlans({ ...s, look: null }, (plans) => plans.set('ca', dueBy(plan, now)));
}

/** The CA check waits for the daemon's next look. */
export function lookAgain(s: Schedule, look: CaLook): Schedule {
  const plan = s.plans.get('ca');
  if (!plan) return s;
  return withPlans({ ...s, look }, (plans) => plans.set('ca', { ...plan, due: Date.parse(look.at) }));
}

/** Whether a step is due that only a worker can run: anything but the CA check's look the daemon makes itself. */
export function needsWorker(s: Schedule, now: number): boolean {
  return due(s, now).some((target) => target !== 'ca' || s.look === null);
}

/** Whether the daemon makes the CA check's look itself now (when no worker is there to check). */
export function looksItself(s: Schedule, now: number): boolean {
  return s.look !== null && due(s, now).includes('ca');
}

/** The targets whose step is due at `now` and not in flight. */
export function due(s: Schedule, now: number): Target[] {
  return [...s.plans].filter(([, p]) => p.inFlight === null && p.due !== null && p.due <= now).map(([t]) => t);
}

/** Hands out numbered steps for `targets`, now in flight. */
export function send(s: Schedule, targets: readonly Target[]): { schedule: Schedule; steps: Step[] } {
  let lastId = s.lastId;
  const steps: Step[] = [];
  const schedule = withPlans(s, (plans) => {
    for (const target of targets) {
      const plan = plans.get(target);
      if (!plan || plan.inFlight !== null) continue;
      const step: Step = { id: ++lastId, target, force: plan.force };
      steps.push(step);
      plans.set(target, { due: null, force: false, inFlight: step });
    }
  });
  return { schedule: { ...schedule, lastId, look: targets.includes('ca') ? null : s.look }, steps };
}

/**
 * A step's answer: its target is due again at `next` (or sooner, when nudged
 * while it ran); the targets it wakes are due now; the identities it forces
 * renew now. An answer to a step not in flight (a worker that outlived its
 * loss) changes nothing.
 */
export function answered(s: Schedule, answer: Answer, now: number): Schedule {
  const plan = s.plans.get(answer.target);
  if (!plan || plan.inFlight?.id !== answer.id) return s;
  const next = answer.next === null ? null : Date.parse(answer.next);
  let out = withPlans(s, (plans) => {
    plans.set(answer.target, { ...plan, inFlight: null, due: next === null ? plan.due : dueBy(plan, next).due });
  });
  if (answer.target === 'ca') out = { ...out, look: answer.look };
  out = withPlans(out, (plans) => {
    for (const target of answer.wake) {
      const p = plans.get(target);
      if (p) plans.set(target, dueBy(p, now));
    }
  });
  return answer.force.length > 0 ? nudge(out, answer.force, true, now) : out;
}

/** A worker ended without answering: its steps are due again at once, forced ones still forced. */
export function lost(s: Schedule, now: number): Schedule {
  return withPlans(s, (plans) => {
    for (const [target, plan] of plans) {
      if (plan.inFlight === null) continue;
      plans.set(target, { due: now, force: plan.force || plan.inFlight.force, inFlight: null });
    }
  });
}

export function inFlight(s: Schedule): Step[] {
  return [...s.plans.values()].flatMap((p) => (p.inFlight ? [p.inFlight] : []));
}

/** When the next step is due; null when nothing is scheduled. */
export function wakeAt(s: Schedule): number | null {
  const times = [...s.plans.values()].flatMap((p) => (p.inFlight === null && p.due !== null ? [p.due] : []));
  return times.length === 0 ? null : Math.min(...times);
}

/**
 * Whether the worker may end: nothing in flight and nothing due for
 * `restAfterMs`. The CA check's look the daemon makes itself is no reason to
 * keep a worker; a renewal is.
 */
export function mayRest(s: Schedule, now: number, restAfterMs: number): boolean {
  let earliest = Infinity;
  for (const [target, plan] of s.plans) {
    if (plan.inFlight !== null) return false;
    if (target === 'ca' && s.look !== null) continue;
    if (plan.due !== null) earliest = Math.min(earliest, plan.due);
  }
  return earliest - now >= restAfterMs;
}
