/**
 * The sync function: what kube-controller-manager's certificate controller
 * calls its syncHandler, for the batch of CSR names a worker took off the
 * queue (queue.ts). Each CSR is read from the informer's cache; the batch is
 * decided on one view of the records (batch.ts, decide.ts); what the
 * approvals spend is claimed (api.ts writeClaim), and only then is each
 * decision acted on (act.ts: /approval, or the violation reported). No timer
 * here: what is to be looked at again later is returned to the controller,
 * whose queue waits.
 */
import { KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import type { RecordInformers } from '../records/informer.js';
import { approve, challenge, violation, type ActContext } from './act.js';
import { getRecord, writeClaim, type Claim } from './api.js';
import { decideBatch, RecordView, type Outcome } from './batch.js';
import { isSettled, type ApproverCsr } from './csr-facts.js';
import type { CsrInformer } from './informer.js';
import type { Lookups } from './lookups.js';
import type { ApproverPolicy } from './rules/rule.js';
import { decidedSigners } from './retain.js';
import { excerpt } from '../text.js';

/** Decisions of one batch in a row that met a record changed meanwhile (409, or read again changed), before its CSRs are retried later. */
const SPEND_ATTEMPTS = 3;

export interface SyncContext extends ActContext {
  policy: ApproverPolicy;
  client: KubeClient;
  /** The CSRs as the informer has them. */
  csrs: Pick<CsrInformer, 'cache' | 'synced'>;
  /** The records decisions read, and the claims written on them. */
  records: Pick<RecordInformers, 'remember' | 'refresh'>;
  /** The look-ups of a decision (each API call within the requests in flight). */
  io: Lookups;
  /** Whether this process holds the lease now. */
  leading(): boolean;
  /** What these CSRs spend is written (their decisions still to be acted on): their requesters' next CSRs may be decided meanwhile. */
  claimed?(names: readonly string[]): void;
}

/** A CSR to look at again after its back-off, with the error that kept it from a decision (null: a rule that may pass later). */
export interface Retry {
  name: string;
  error: Error | null;
}

/** The signers of a policy (a CSR of another in a batch is never retried): one set per policy object. */
const signersOf = new WeakMap<ApproverPolicy, ReadonlySet<string>>();

function signers(policy: ApproverPolicy): ReadonlySet<string> {
  let set = signersOf.get(policy);
  if (set === undefined) signersOf.set(policy, (set = decidedSigners(policy)));
  return set;
}

/**
 * Decides and acts on the CSRs named; returns those to look at again later.
 * A name not in the cache (gone, or the cache out of sync: the list that
 * syncs it looks at everything again), settled, or not routable at its
 * version is passed over; so is everything while another replica leads.
 */
export async function syncCertificateRequests(names: readonly string[], ctx: SyncContext): Promise<Retry[]> {
  const batch: ApproverCsr[] = [];
  for (const name of names) {
    const csr = ctx.csrs.cache.get(name);
    if (csr === undefined || !ctx.csrs.synced) continue;
    if (!ctx.leading()) {
      ctx.logger.debug('not the leader; CSR left to the leader', { csr: excerpt(name) });
      continue;
    }
    if (isSettled(csr)) ctx.memory.forget(csr);
    else if (!ctx.memory.isUnroutable(csr)) batch.push(csr);
  }
  if (batch.length === 0) return [];
  const began = ctx.clock.monotonic();
  try {
    const outcomes = await decideAndClaim(batch, ctx);
    if (outcomes === null) return [];
    ctx.claimed?.(batch.map((csr) => csr.metadata.name));
    return await act(outcomes, ctx);
  } catch (err) {
    const ours = signers(ctx.policy);
    return batch.filter((csr) => ours.has(csr.spec.signerName)).map((csr) => ({ name: csr.metadata.name, error: err as Error }));
  } finally {
    ctx.metrics.batch(batch.length, (ctx.clock.monotonic() - began) / 1000);
  }
}

/** The batch's outcomes once what they spend is claimed; null when the lease was lost meanwhile. */
async function decideAndClaim(batch: ApproverCsr[], ctx: SyncContext): Promise<Outcome[] | null> {
  for (let attempt = 1; ; attempt++) {
    const view = new RecordView(ctx.io.record);
    const outcomes = await decideBatch(batch, ctx.policy, ctx.io, view);
    // The look-ups took time; a leader that lost its lease meanwhile must not act.
    if (!ctx.leading()) return null;
    const changed = await claim(view, ctx);
    if (changed === null) return outcomes;
    if (attempt >= SPEND_ATTEMPTS)
      throw new KubebootError(`the records these CSRs spend or read changed ${attempt} times while they were decided (${changed})`);
    ctx.logger.info(`record ${changed} changed while deciding; deciding again`, { csrs: batch.length });
  }
}

/**
 * Writes what the batch's approvals spend (a token's names, a replacement
 * mark), one claim per record on the resourceVersion its decisions read,
 * before any approval: two approvers deciding CSRs of one token never both
 * spend its last name. Then reads again what the decisions read and do not
 * write (the revocations, the inventory), which must be unchanged. Returns
 * the record that changed meanwhile (409, or read again different), and
 * the batch is decided again on what it now says; null when none did. A
 * claim written and an approval that then fails is retried as the same
 * CSR, which its own claims still allow.
 */
async function claim(view: RecordView, ctx: SyncContext): Promise<string | null> {
  for (const phase of claimPhases(view.claims())) {
    const changed = await writeAll(phase, ctx);
    if (changed !== null) return changed;
  }
  return view.changedSinceRead();
}

/**
 * The claims in the order one decision makes them, each step written at
 * once: the bindings (a count spent before any of its names, so a lost race
 * for a name costs the pool one of its count, never a name twice), then the
 * names (each create atomic on its own), then the marks. A batch of a pool's
 * first issues is one binding write and its names side by side, not one
 * request after another.
 */
function claimPhases(claims: readonly Claim[]): Claim[][] {
  const order = (c: Claim) => (c.resource === 'tokenbindings' ? 0 : c.resource === 'nodeclaims' ? 1 : 2);
  const phases: Claim[][] = [[], [], []];
  for (const c of claims) phases[order(c)]!.push(c);
  return phases.filter((p) => p.length > 0);
}

/** Writes the claims side by side; the first that met a change (read again for the next decision), or null. */
async function writeAll(claims: readonly Claim[], ctx: SyncContext): Promise<string | null> {
  const results = await Promise.allSettled(
    claims.map(async (claim) => {
      const written = await ctx.timed('claim', () => writeClaim(ctx.client, claim, ctx.signal));
      if (written !== null) ctx.records.remember(claim.resource, written);
      return written;
    }),
  );
  const failed = results.find((r) => r.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  const index = results.findIndex((r) => r.status === 'fulfilled' && r.value === null);
  if (index < 0) return null;
  const changed = claims[index]!;
  // Changed, made or gone meanwhile: the informer may not have it yet; the next decision must.
  const now = await ctx.timed('record', () => getRecord(ctx.client, changed.resource, changed.name, ctx.signal));
  ctx.records.refresh(changed.resource, changed.name, now);
  return `${changed.resource}/${changed.name}`;
}

/** Approvals and violations of a batch whose records held, each CSR on its own: one failing is retried alone. */
async function act(outcomes: Outcome[], ctx: SyncContext): Promise<Retry[]> {
  const retries: Retry[] = [];
  await Promise.all(
    outcomes.map(async (outcome) => {
      const { csr } = outcome;
      if ('error' in outcome) return void retries.push({ name: csr.metadata.name, error: outcome.error });
      const { decision } = outcome;
      try {
        if (decision.kind === 'approve') await approve(csr, decision, ctx);
        if (decision.kind === 'challenge') await challenge(csr, decision, ctx);
        if (decision.kind === 'violation' && (await violation(csr, decision, ctx))) retries.push({ name: csr.metadata.name, error: null });
      } catch (err) {
        retries.push({ name: csr.metadata.name, error: err as Error });
      }
    }),
  );
  return retries;
}
