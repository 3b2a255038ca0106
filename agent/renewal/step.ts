/**
 * One step for one identity, as a worker of `kubeboot run` runs it when the
 * daemon sends it: like the kubelet's LoadClientCert, look at the files,
 * decide (plan.ts), act — issue with the bootstrap kubeconfig, renew with
 * the kubelet's credential, or nothing — and record. It never sleeps: it
 * returns the identity's record and when to look again, and the daemon's
 * schedule (daemon/schedule.ts) decides when that is.
 */
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { forgetAnsweredKeys, issueKubelet, type Pass } from '../bootstrap/pass.js';
import type { Config } from '../config/types.js';
import {
  allOf,
  assessNode,
  isNodeCredential,
  type Assessment,
  type NodeAssessment,
  type NodeCredential,
  type Usable,
} from '../credential/assess.js';
import type { Issued, RunDeps } from '../credential/issue.js';
import { finishRenewal, renewIdentity } from '../credential/renew.js';
import { BootstrapCredentialError, InputError, NeedsBootstrapError } from '../errors.js';
import type { Identity, IdentityName } from '../identity.js';
import type { Logger } from '../log.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { readOptionalOrProblem } from '../read-optional.js';
import type { WriteObserver } from '../store/atomic.js';
import { storeOf, type Store } from '../store/store.js';
import type { Clock } from '../time/clock.js';
import { kubeletRenewer } from './owner.js';
import { deadlineFor, nextAction, retryPlan } from './plan.js';
import type { IdentityRecord } from './record.js';

/** What a step counts (the daemon's metrics serve them; a worker forwards each call). */
export interface StepMetrics {
  /** A certificate was issued and stored at `at`. */
  recordRenewal(identity: IdentityName, at: Date): void;
  /** `reason` is a short fixed word (denied, timeout, http-503, ...), never a message. */
  recordRenewalFailure(identity: IdentityName, reason: string): void;
  recordHookFailure(identity: IdentityName): void;
  observeCsrWait(identity: IdentityName, seconds: number): void;
  /** A CSR was created at `at`; its identity waits for approval and issue. */
  csrPending(identity: IdentityName, at: Date): void;
  /** The identity's wait ended: issued, or the attempt failed. */
  csrSettled(identity: IdentityName): void;
}

/** What the steps of one worker share: the kubelet credential in memory, and one writer at a time. */
export interface StepMemory {
  /**
   * The kubelet credential last seen valid on disk. If an operator deletes
   * the files, it still authenticates the re-issue (kubernetes#53288: certs
   * lost on disk must not strand the node while a valid one is in memory).
   */
  lastGoodKubelet: NodeCredential | null;
  /** The kubelet certificate a step of this daemon issued (and so proved); others are proven before the token goes. */
  provenKubeletPem: string | null;
}

export interface StepDeps {
  logger: Logger;
  clock: Clock;
  random: () => number;
  signal: AbortSignal;
  metrics: StepMetrics;
  memory: StepMemory;
  observer?: WriteObserver | undefined;
  dispatcher?: Dispatcher | undefined;
  /** Where the node's files are read and written (the worker's disk store tells its observer); unset, the files on disk. */
  store?: Store | undefined;
  /** Issuance and a CA rewrite write credentials one unit at a time (store/serializer.ts). */
  serialize: <T>(fn: () => Promise<T>) => Promise<T>;
  /** The record as it changes inside the step (a CSR submitted and waiting), for status and /readyz. */
  onRecord?: (record: IdentityRecord) => void;
}

export interface StepResult {
  record: IdentityRecord;
  /** When to look at this identity again. */
  next: Date;
  /** What the step left on disk for this identity (or just issued). */
  seen: Assessment | null;
  /** A certificate was issued in this step. */
  issued: boolean;
}

/** Look, decide, act, record. A failure is recorded with its retry time, never thrown (unless the step was stopped). */
export async function runIdentityStep(
  config: Config,
  identity: Identity,
  record: IdentityRecord,
  force: boolean,
  deps: StepDeps,
): Promise<StepResult> {
  const r: IdentityRecord = { ...record, lastHooks: [...record.lastHooks] };
  const step: Running = { config, identity, r, deps, store: storeOf(deps), seen: null };
  try {
    const { next, issued } = await lookDecideAct(step, force);
    return { record: r, next, seen: step.seen, issued };
  } catch (err) {
    if (deps.signal.aborted) throw err;
    return { record: r, next: failed(step, err), seen: step.seen, issued: false };
  }
}

interface Running {
  config: Config;
  identity: Identity;
  r: IdentityRecord;
  deps: StepDeps;
  store: Store;
  seen: Assessment | null;
}

async function lookDecideAct(s: Running, force: boolean): Promise<{ next: Date; issued: boolean }> {
  const { config, identity, r, deps } = s;
  const now = deps.clock.now();
  // The one assessment of the step: acting issues from it, and what is issued is recorded as it was stored.
  const node = await assessNode(config, now, deps.memory.lastGoodKubelet?.cluster.caPem, s.store);
  await forgetAnsweredKeys(config, node, s.store, deps.logger);
  const own = allOf(node).find((a) => a.identity.name === identity.name)!;
  const requester = requesterOf(deps, node.kubelet, now);
  see(s, own);
  const elsewhere = identity.rotatedByKubelet ? await kubeletRenewedElsewhere(config, r, deps.logger) : null;
  const action = nextAction({
    own,
    requester,
    kubeletProblem: node.kubelet.state === 'unusable' ? node.kubelet.reason : null,
    deadline: own.state === 'usable' && elsewhere === null ? deadlineOf(s, own) : null,
    force,
    renewedElsewhere: elsewhere,
    now,
  });
  switch (action.kind) {
    case 'step-aside':
      if (force) deps.logger.warn(`${identity.name}: not renewed on request: ${action.why}`, { identity: identity.name });
      r.nextRenewal = null;
      return { next: action.until, issued: false };
    case 'sleep':
      r.nextRenewal = action.until.toISOString();
      return { next: action.until, issued: false };
    case 'wait-for-kubelet':
      // The kubelet's step wakes this one when its credential lands.
      r.lastError = action.why;
      deps.logger.info(`${identity.name}: ${action.why}`, { identity: identity.name });
      return { next: action.until, issued: false };
    case 'bootstrap':
    case 'renew': {
      deps.logger.info(`${identity.name}: ${action.why}`);
      const started = deps.clock.monotonic();
      const issued =
        action.kind === 'bootstrap' ? await bootstrapKubelet(s, node) : await renewIdentity(config, own, action.requester, runDeps(s));
      await recordIssued(s, issued, started);
      // Look again at once: the next step finds the new certificate and schedules its renewal.
      return { next: deps.clock.now(), issued: true };
    }
  }
}

function see(s: Running, seen: Assessment | null): void {
  s.seen = seen;
  s.r.notAfter = seen?.state === 'usable' ? seen.notAfter.toISOString() : null;
}

/** The kubelet's credential from the bootstrap kubeconfig, asked for as a pass of `kubeboot bootstrap` asks, on what this step found. */
async function bootstrapKubelet(s: Running, node: NodeAssessment): Promise<Issued> {
  const pass: Pass = { config: s.config, deps: runDeps(s), store: s.store, node, found: null };
  try {
    return (await issueKubelet(pass)).issued;
  } catch (err) {
    if (err instanceof InputError || err instanceof BootstrapCredentialError) throw new NeedsBootstrapError(err.message);
    throw err;
  }
}

/** What authenticates CSRs: the kubelet credential on disk, or the last good one from memory when the files went missing. */
function requesterOf(deps: StepDeps, onDisk: Assessment, now: Date): NodeCredential | null {
  if (isNodeCredential(onDisk)) {
    deps.memory.lastGoodKubelet = onDisk;
    return onDisk;
  }
  const remembered = deps.memory.lastGoodKubelet;
  if (remembered && remembered.notAfter > now && remembered.identity.subject.commonName === onDisk.identity.subject.commonName) {
    deps.logger.warn(
      `kubelet: ${onDisk.state === 'unusable' ? onDisk.reason : 'not usable'}; authenticating with the credential kubeboot still holds in memory (valid until ${remembered.notAfter.toISOString()})`,
    );
    return remembered;
  }
  return null;
}

/** Why the kubelet renews its own client certificate (kubelet.renewal, its config file), or null; logged when that changes. */
async function kubeletRenewedElsewhere(config: Config, r: IdentityRecord, logger: Logger): Promise<string | null> {
  const file = config.kubelet.configFile;
  const renewer = kubeletRenewer(config.kubelet.renewal, file, await readOptionalOrProblem(file));
  const said = `${renewer.why}\n${renewer.warning ?? ''}`;
  if (r.renewerSaid !== said) {
    r.renewerSaid = said;
    logger.info(`kubelet: ${renewer.why}`, { identity: 'kubelet' });
    if (renewer.warning !== null) logger.warn(`kubelet: ${renewer.warning}`, { identity: 'kubelet' });
  }
  return renewer.by === 'kubelet' ? renewer.why : null;
}

/** The renewal deadline, drawn once per certificate and renew margin (a SIGHUP that changes the margin draws again). */
function deadlineOf(s: Running, own: Usable): Date {
  const { r, deps } = s;
  const margin = s.config.renewal.margin;
  const certKey = `${createHash('sha256').update(own.certPem).digest('hex')}/${margin}`;
  if (r.deadline?.certKey !== certKey) {
    const leaf = parseCertificateChain(own.certPem)[0]!;
    const lastSuccess = r.lastSuccess ? new Date(r.lastSuccess) : null;
    const { at, held } = deadlineFor(leaf, margin, deps.random, lastSuccess);
    if (held)
      deps.logger.warn(
        `${own.identity.name}: renew margin ${margin}s leaves almost no lifetime; holding renewals ${Math.round((at.getTime() - lastSuccess!.getTime()) / 1000)}s apart`,
      );
    r.deadline = { certKey, at: at.toISOString() };
    deps.logger.info(
      `${own.identity.name}: certificate valid until ${leaf.notAfter.toISOString()}; renewal scheduled for ${at.toISOString()}`,
      {
        identity: own.identity.name,
      },
    );
  }
  return new Date(r.deadline.at);
}

/** After a certificate landed: prune, record, hooks. */
async function recordIssued(s: Running, issued: Issued, startedMonotonic: number): Promise<void> {
  const { identity, r, deps } = s;
  const now = deps.clock.now();
  see(s, issued.stored);
  r.attempt = 0;
  r.lastSuccess = now.toISOString();
  r.lastError = null;
  r.pendingCsr = null;
  r.deadline = null;
  deps.metrics.csrSettled(identity.name);
  if (identity.requester === 'bootstrap-token' && s.seen?.state === 'usable') deps.memory.provenKubeletPem = s.seen.certPem;
  deps.metrics.recordRenewal(identity.name, now);
  deps.logger.info(
    `${identity.name}: certificate renewed in ${((deps.clock.monotonic() - startedMonotonic) / 1000).toFixed(1)}s, valid until ${issued.notAfter.toISOString()}`,
  );
  const hooks = await finishRenewal(s.config, identity, runDeps(s));
  r.lastHooks = hooks.map((h) => ({ argv: h.argv, ok: h.ok, exitCode: h.exitCode, at: deps.clock.now().toISOString() }));
  for (const h of hooks) if (!h.ok) deps.metrics.recordHookFailure(identity.name);
}

function failed(s: Running, err: unknown): Date {
  const { config, identity, r, deps } = s;
  const message = (err as Error).message;
  const now = deps.clock.now();
  const current = s.seen?.state === 'usable' && s.seen.notAfter > now ? s.seen : null;
  const plan = retryPlan(err, r.attempt, { now, notAfter: current?.notAfter ?? null, random: deps.random });
  r.attempt = plan.attempt;
  r.lastError = message;
  r.pendingCsr = null;
  deps.metrics.csrSettled(identity.name);
  deps.metrics.recordRenewalFailure(identity.name, plan.reason);
  if (err instanceof NeedsBootstrapError) {
    deps.logger.error(
      `${message}. To recover, place a new bootstrap kubeconfig at ${config.bootstrapKubeconfig} (for example from a fresh \`kubeadm token create\`); kubeboot notices it and re-bootstraps on its own`,
      { identity: identity.name },
    );
  } else {
    deps.logger.error(
      `${identity.name}: renewal failed: ${message}; retrying in ${Math.round(plan.waitMs / 1000)}s${current ? ` (the current certificate stays valid until ${current.notAfter.toISOString()})` : ''}`,
      { identity: identity.name },
    );
  }
  return new Date(now.getTime() + plan.waitMs);
}

function runDeps(s: Running): RunDeps {
  const { deps, r } = s;
  return {
    logger: deps.logger,
    clock: deps.clock,
    signal: deps.signal,
    observer: deps.observer,
    onCsrSubmitted: (identity, name) => {
      r.pendingCsr = name;
      deps.metrics.csrPending(identity.name, deps.clock.now());
      deps.onRecord?.({ ...r });
    },
    onCsrWait: (identity, seconds) => deps.metrics.observeCsrWait(identity.name, seconds),
    dispatcher: deps.dispatcher,
    store: s.store,
    serialize: deps.serialize,
  };
}
