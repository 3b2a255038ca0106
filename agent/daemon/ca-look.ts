/**
 * The resting daemon's own look at kube-public/cluster-info, as decisions:
 * pure functions of the look the CA keeper handed over when its worker
 * rested (trust/keeper.ts `CaLook`), the clock and what the GET found
 * (ca-look-get.ts makes it). An unchanged digest waits for the next look;
 * anything else — a change, an error, a look past what it may stand in
 * for, the node's Node appearing when it had none — starts a worker, which
 * does the full check as before.
 */
import type { CaLook } from '../trust/keeper.js';

/** What one GET of cluster-info found. */
export type LookResult = { kind: 'read'; digest: string; nodeAppeared?: true } | { kind: 'failed'; why: string };

export type LookNext = { kind: 'look'; look: CaLook } | { kind: 'worker'; why: string };

/** At a look's time: make it, or start a worker because a look no longer stands in for the keeper. */
export function atLookTime(look: CaLook, now: Date): { kind: 'look' } | { kind: 'worker'; why: string } {
  if (now.getTime() >= Date.parse(look.until))
    return { kind: 'worker', why: `a CA or the trust statement the keeper holds expires at ${look.until}` };
  return { kind: 'look' };
}

/**
 * After the GET: the same digest schedules the next look by the keeper's rule
 * (caRotation.interval × 0.8–1.2, trust/keeper.ts `run`); anything else starts a worker.
 */
export function afterLook(look: CaLook, result: LookResult, input: { now: Date; intervalMs: number; random: () => number }): LookNext {
  if (result.kind === 'failed') return { kind: 'worker', why: `cannot read cluster-info (${result.why})` };
  if (result.digest !== look.digest) return { kind: 'worker', why: 'cluster-info changed' };
  if (result.nodeAppeared) return { kind: 'worker', why: 'the Node appeared (its CA rotation annotation is owed)' };
  const at = new Date(input.now.getTime() + input.intervalMs * (0.8 + 0.4 * input.random()));
  return { kind: 'look', look: { ...look, at: at.toISOString() } };
}
