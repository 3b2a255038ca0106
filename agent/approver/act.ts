/**
 * What a decision does, once the records it spends are claimed (sync.ts):
 * an approval written through /approval; a violation reported once (a log
 * line and an Event) and the CSR left pending, or denied under
 * --deny-violations unless the rule may pass later.
 */
import type { KubeClient } from '../kube/client.js';
import type { Logger } from '../log.js';
import { excerpt } from '../text.js';
import type { Clock } from '../time/clock.js';
import { quotedPcr } from '../tpm/csr-evidence.js';
import { decideCsr, warnOnCsr, type DecisionWrite } from './api.js';
import type { ApproverCsr } from './csr-facts.js';
import { AUTHORIZED_RULE, type Decision } from './decide.js';
import type { CsrMemory } from './memory.js';
import type { ApproverMetrics } from './metrics.js';
import { CHALLENGE_REASON } from '../tpm/challenge.js';

/** Rules whose outcome changes without the CSR changing (a Node appears, RBAC is granted, the older CSR is issued). */
const TRANSIENT_RULES = new Set(['node-exists', AUTHORIZED_RULE, 'one-unissued-per-node']);

export interface ActContext {
  client: KubeClient;
  /** Who approves, for the approval's message (the lease identity). */
  identity: string;
  denyViolations: boolean;
  /** Keeps a CSR as the API server answered a write, before the watch brings it. */
  remember(csr: ApproverCsr): void;
  memory: CsrMemory;
  metrics: ApproverMetrics;
  logger: Logger;
  clock: Clock;
  signal?: AbortSignal;
  /** Runs one API call within the requests in flight, timed by what it is. */
  timed<T>(call: string, request: () => Promise<T>): Promise<T>;
}

/** A CSR's own words for a log line: its name, requester and signer are anyone's text, so each is bounded and escaped. */
export function logFields(csr: ApproverCsr): { csr: string; requester: string; signer: string } {
  return { csr: excerpt(csr.metadata.name), requester: excerpt(csr.spec.username ?? ''), signer: excerpt(csr.spec.signerName) };
}

/** False when the decision was not written; says why once. */
function written(csr: ApproverCsr, write: DecisionWrite, ctx: ActContext): write is Extract<DecisionWrite, { kind: 'written' }> {
  if (write.kind === 'conflict') ctx.logger.info('CSR changed while deciding; it is looked at again', logFields(csr));
  if (write.kind === 'not-found') {
    ctx.memory.unroutable(csr);
    ctx.logger.warn(
      'the API server has no CSR of this name to decide (deleted, or a name it cannot route); left as it is until it changes',
      logFields(csr),
    );
  }
  if (write.kind !== 'written') return false;
  // The next decision for this requester must see this one even if the watch has not
  // delivered it yet, or a second CSR could be approved while this one is unissued.
  ctx.remember(write.csr);
  return true;
}

export async function approve(csr: ApproverCsr, decision: Extract<Decision, { kind: 'approve' }>, ctx: ActContext): Promise<void> {
  const message = `Approved by kubeboot approver ${ctx.identity}: ${decision.message}`;
  const write = await ctx.timed('approval', () => decideCsr(ctx.client, csr, 'Approved', message, ctx.signal));
  if (!written(csr, write, ctx)) return;
  ctx.metrics.decision(csr.spec.signerName, 'approved', decision.policy);
  const pcr7 = decision.pcrValues === undefined ? undefined : quotedPcr(decision.pcrValues, 7);
  if (pcr7 !== undefined) ctx.metrics.tpmAttested(pcr7.toString('hex'));
  const created = Date.parse(csr.metadata.creationTimestamp ?? '');
  if (!Number.isNaN(created)) ctx.metrics.approvalLatency((ctx.clock.now().getTime() - created) / 1000);
  ctx.logger.info('approved CSR', { ...logFields(csr), policy: decision.policy });
}

/**
 * Denies the CSR with a TPM credential challenge in its condition
 * (tpm/challenge.ts), whatever --deny-violations says: the Denied condition
 * is how the challenge reaches the node, which files a new CSR answering it.
 * Reported as the rule's refusals are: a log line, the metric, an Event.
 */
export async function challenge(csr: ApproverCsr, decision: Extract<Decision, { kind: 'challenge' }>, ctx: ActContext): Promise<void> {
  const write = await ctx.timed('challenge', () => decideCsr(ctx.client, csr, 'Denied', decision.message, ctx.signal, CHALLENGE_REASON));
  if (!written(csr, write, ctx)) return;
  ctx.metrics.decision(csr.spec.signerName, 'challenged', decision.rule);
  const fields = { ...logFields(csr), rule: decision.rule };
  ctx.logger.info('denied CSR with a TPM credential challenge', fields);
  try {
    const message = `kubeboot approver challenged this CSR: ${decision.policy} rule ${decision.rule}: ${decision.problem}`;
    await ctx.timed('event', () => warnOnCsr(ctx.client, csr, 'TpmChallenge', message, ctx.clock.now(), ctx.signal));
  } catch (err) {
    ctx.logger.warn('could not record the challenge as an Event', { ...fields, error: (err as Error).message });
  }
}

/**
 * Denies the CSR, or leaves it pending and reports the violation once.
 * Returns whether it is to be looked at again after its back-off: a
 * transient rule (no Node yet, not yet authorized, an older CSR still
 * unissued) may pass later, and is never a reason to deny.
 */
export async function violation(csr: ApproverCsr, decision: Extract<Decision, { kind: 'violation' }>, ctx: ActContext): Promise<boolean> {
  const fields = { ...logFields(csr), rule: decision.rule };
  const transient = TRANSIENT_RULES.has(decision.rule);
  if (ctx.denyViolations && !transient) {
    const write = await ctx.timed('denial', () => decideCsr(ctx.client, csr, 'Denied', decision.message, ctx.signal));
    if (!written(csr, write, ctx)) return false;
    ctx.metrics.decision(csr.spec.signerName, 'denied', decision.rule);
    // The reason names what the CSR says (its subject, its names): a field, never the message.
    ctx.logger.warn('denied CSR', { ...fields, reason: decision.message });
    return false;
  }
  if (!ctx.memory.leftPending(csr, decision.message)) return transient;
  ctx.metrics.decision(csr.spec.signerName, 'left-pending', decision.rule);
  ctx.logger.warn('left CSR pending', { ...fields, reason: decision.message });
  try {
    const message = `kubeboot approver left this CSR pending: ${decision.message}`;
    await ctx.timed('event', () => warnOnCsr(ctx.client, csr, 'PolicyViolation', message, ctx.clock.now(), ctx.signal));
  } catch (err) {
    // An Event is a courtesy (client-go's recorder drops them too): its failure must not send the CSR round again.
    ctx.logger.warn('could not record the violation as an Event', { ...fields, error: (err as Error).message });
  }
  return transient;
}
