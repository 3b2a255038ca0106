/**
 * The renewal loops of `kubeboot run`, as one pass process runs them: one
 * loop per identity that sleeps until the renewal deadline (in chunks,
 * re-checking the wall clock), wakes early when nudged (a file changed,
 * SIGHUP, `kubeboot renew`), and never gives up while the current
 * certificate is valid. What to do and how long to wait are decided by the
 * pure functions in renewal/plan.ts; this file carries them out.
 *
 * Once every loop and the CA check sleep for longer than `restAfterMs`, the
 * loops end and `run()` returns when to wake and what the next pass needs
 * (`Carry`): the resting daemon (supervisor.ts) holds that, and READY=1,
 * /readyz, the watcher and the watchdog, without the libraries a pass loads.
 */
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { deleteBootstrapNow, forgetAnsweredKeys, issueKubelet, openPass } from '../bootstrap/pass.js';
import { storeOf } from '../store/store.js';
import type { Config } from '../config/types.js';
import { allOf, assessNode, isNodeCredential, type Assessment, type NodeCredential, type Usable } from '../credential/assess.js';
import type { Issued, RunDeps } from '../credential/issue.js';
import { hookEnvironment, runHook } from '../credential/hooks.js';
import { finishRenewal, renewIdentity } from '../credential/renew.js';
import { BootstrapCredentialError, InputError, NeedsBootstrapError } from '../errors.js';
import { IDENTITY_ROLES, identitiesFor, nodeIdentity } from '../config/identities.js';
import type { Identity, IdentityName } from '../identity.js';
import type { Logger } from '../log.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { kubeletRenewer } from '../renewal/owner.js';
import {
  deadlineFor,
  LIVENESS_GRACE_MS,
  livenessLimits,
  nextAction,
  passBoundMs,
  progressDue,
  retryPlan,
  SLEEP_CHUNK_MS,
} from '../renewal/plan.js';
import { readOptionalOrProblem } from '../read-optional.js';
import type { WriteObserver } from '../store/atomic.js';
import { systemClock, type Clock } from '../time/clock.js';
import { delay } from '../time/timer.js';
import { serializer, TrustKeeper, type CaLook } from '../trust/keeper.js';
import type { MetricEvents } from './metrics.js';
import { carriedCredential, EMPTY_CARRY, restoredCredential, type Carry, type Nudge } from './pass-protocol.js';
import { nodeReadyOf, readinessOf, type IdentityView, type Readiness } from './report.js';
import type { IdentityState } from './state.js';

/** Where the loops report to: the resting daemon, over IPC (pass-process.ts), or a test. */
export interface LoopsSink {
  metrics: MetricEvents;
  /**
   * The identities as they are now, after every step and CSR submission, with what the next pass needs
   * and, per identity, the last numbered nudge a finished step has answered.
   */
  report(views: IdentityView[], carry: Carry, done: Partial<Record<IdentityName, number>>): void | Promise<void>;
  /** The earliest moment some loop must show progress again, in ms from now (liveness). */
  progress(msLeft: number): void;
  /** Announces every credential write, so the resting daemon's watcher knows kubeboot's own. */
  observer?: WriteObserver;
}

/**
 * How `run()` ended: stopped (SIGTERM), or every loop asleep, handing over `carry`: a worker is due at
 * `until`, and the CA check's next look is `look`'s to make when the keeper left one (else it is in `until`).
 */
export type LoopsEnd = { kind: 'stopped' } | { kind: 'resting'; until: Date; look: CaLook | null; carry: Carry; lastSeq: number };

export interface LoopsOptions {
  config: Config;
  logger: Logger;
  signal: AbortSignal;
  sink: LoopsSink;
  /** What the previous pass handed over; empty on the daemon's first. */
  carry?: Carry;
  /** End once every loop sleeps at least this long (ms); null never ends on its own. */
  restAfterMs?: number | null;
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  random?: () => number;
  /** Every API connection goes through it (tests inject undici's MockAgent). */
  dispatcher?: Dispatcher;
}

interface Slot {
  state: IdentityState;
  /** What the last pass found on disk (or just issued). */
  seen: Assessment | null;
  /** Cached deadline for one certificate, so the jitter is drawn once per certificate. */
  deadline: { certKey: string; at: Date } | null;
  wake: (() => void) | null;
  /** A nudge that arrived while the loop was busy; the next sleep returns at once. */
  pendingWake: boolean;
  force: boolean;
  attempt: number;
  /** Monotonic time by which the loop must show progress again (liveness). */
  progressDue: number;
  /** Who renews, as last logged (the kubelet identity only). */
  renewerSaid?: string;
  /** While the loop sleeps: until when. */
  sleepingUntil: Date | null;
  /** The last numbered nudge that reached this loop, and the last one a finished step began after. */
  appliedSeq: number;
  doneSeq: number;
}

export class RenewalLoops {
  #config: Config;
  readonly #logger: Logger;
  readonly #signal: AbortSignal;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #env: NodeJS.ProcessEnv;
  readonly #dispatcher: Dispatcher | undefined;
  readonly #sink: LoopsSink;
  readonly #restAfterMs: number | null;
  readonly #slots = new Map<IdentityName, Slot>();
  /**
   * The kubelet credential last seen valid on disk. If an operator deletes
   * the files, it still authenticates the re-issue (kubernetes#53288: certs
   * lost on disk must not strand the node while a valid one is in memory).
   */
  #lastGoodKubelet: NodeCredential | null;
  /** The kubelet certificate this daemon issued (and so proved); others are proven before the token goes. */
  #provenKubeletPem: string | null;
  #cleaningUp = false;
  #publishing: Promise<void> = Promise.resolve();
  /** Issuance and the CA rotation write credentials one unit at a time. */
  readonly #writes = serializer();
  readonly #trust: TrustKeeper;
  /** Aborted when every loop sleeps long enough to end the pass. */
  readonly #rest = new AbortController();
  #restUntil: Date | null = null;
  #restLook: CaLook | null = null;
  /** The last nudge applied to a loop; a later one reaches the next pass. */
  #lastSeq = 0;
  #trustSleepingUntil: Date | null = null;

  constructor(options: LoopsOptions) {
    this.#config = options.config;
    this.#logger = options.logger;
    this.#signal = options.signal;
    this.#sink = options.sink;
    this.#restAfterMs = options.restAfterMs ?? null;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#env = options.env ?? process.env;
    this.#dispatcher = options.dispatcher;
    const carry = options.carry ?? EMPTY_CARRY;
    this.#lastGoodKubelet = restoredCredential(this.#config, carry.lastGoodKubelet);
    this.#provenKubeletPem = carry.provenKubeletPem;
    for (const identity of identitiesFor(this.#config)) {
      const carried = carry.slots[identity.name];
      this.#slots.set(identity.name, {
        state: carried?.state ?? { nextRenewal: null, lastSuccess: null, lastError: null, pendingCsr: null, lastHooks: [] },
        seen: null,
        deadline: carried?.deadline ? { certKey: carried.deadline.certKey, at: new Date(carried.deadline.at) } : null,
        wake: null,
        pendingWake: false,
        force: false,
        attempt: carried?.attempt ?? 0,
        progressDue: this.#clock.monotonic() + passBoundMs(this.#config) + LIVENESS_GRACE_MS,
        ...(carried?.renewerSaid !== undefined ? { renewerSaid: carried.renewerSaid } : {}),
        sleepingUntil: null,
        appliedSeq: 0,
        doneSeq: 0,
      });
    }
    const passSignal = AbortSignal.any([this.#signal, this.#rest.signal]);
    this.#trust = new TrustKeeper(
      {
        config: () => this.#config,
        logger: this.#logger,
        clock: this.#clock,
        random: this.#random,
        signal: passSignal,
        dispatcher: this.#dispatcher,
        nodeCredential: () => (this.#lastGoodKubelet && this.#lastGoodKubelet.notAfter > this.#clock.now() ? this.#lastGoodKubelet : null),
        serialize: this.#writes,
        reissue: (identity) => this.nudge([identity], true),
        runCommands: (argvs) => this.#runCommands(argvs),
        observer: this.#sink.observer,
        metrics: this.#sink.metrics,
        onSleep: (until) => {
          this.#trustSleepingUntil = until;
          if (until !== null) this.#maybeRest();
        },
      },
      carry.trust ?? undefined,
    );
  }

  get config(): Config {
    return this.#config;
  }

  /** /readyz: every identity holds a certificate that is valid right now (not merely at the last pass). */
  readiness(): Readiness {
    return readinessOf(this.#views());
  }

  /** READY=1: the kubelet's credential is valid; the other identities may still be pending. */
  nodeReady(): boolean {
    return nodeReadyOf(this.#views());
  }

  /** /healthz and the watchdog: every loop showed progress within its bound. */
  healthy(): boolean {
    if (this.#signal.aborted) return false;
    const now = this.#clock.monotonic();
    return [...this.#slots.values()].every((s) => now <= s.progressDue);
  }

  /** Wake identities now; `force` renews even a certificate that is not due. */
  nudge(names: IdentityName[] | 'all', force: boolean): void {
    for (const [name, slot] of this.#slots) {
      if (names !== 'all' && !names.includes(name)) continue;
      if (force) slot.force = true;
      if (slot.wake) slot.wake();
      else slot.pendingWake = true;
    }
  }

  /** Wake identities now; `force` renews even a certificate that is not due. A numbered nudge is remembered as applied. */
  apply(nudge: Nudge): boolean {
    if (this.#rest.signal.aborted) return false;
    for (const [name, slot] of this.#slots)
      if (nudge.names === 'all' || nudge.names.includes(name)) slot.appliedSeq = Math.max(slot.appliedSeq, nudge.seq);
    this.nudge(nudge.names, nudge.force);
    this.#lastSeq = Math.max(this.#lastSeq, nudge.seq);
    return true;
  }

  /** SIGHUP: the configuration the resting daemon re-read (and judged); every loop renews now under it. */
  reconfigure(next: Config, seq: number): boolean {
    this.#config = next;
    return this.apply({ names: 'all', force: true, seq });
  }

  /** Until stopped, or until every loop sleeps long enough that the pass ends. */
  async run(): Promise<LoopsEnd> {
    try {
      await Promise.all([...[...this.#slots.keys()].map((name) => this.#loop(name)), this.#trust.run()]);
    } finally {
      await this.#publishing;
    }
    if (this.#signal.aborted || this.#restUntil === null) return { kind: 'stopped' };
    return { kind: 'resting', until: this.#restUntil, look: this.#restLook, carry: this.carry(), lastSeq: this.#lastSeq };
  }

  /** What the next pass needs from this one. */
  carry(): Carry {
    const slots: Carry['slots'] = {};
    for (const [name, slot] of this.#slots)
      slots[name] = {
        state: slot.state,
        deadline: slot.deadline ? { certKey: slot.deadline.certKey, at: slot.deadline.at.toISOString() } : null,
        attempt: slot.attempt,
        ...(slot.renewerSaid !== undefined ? { renewerSaid: slot.renewerSaid } : {}),
      };
    return {
      slots,
      lastGoodKubelet: carriedCredential(this.#lastGoodKubelet),
      provenKubeletPem: this.#provenKubeletPem,
      trust: this.#trust.memory,
    };
  }

  /** Ends the pass when every loop and the CA check sleep at least `restAfterMs` from now. */
  #maybeRest(): void {
    if (this.#restAfterMs === null || this.#rest.signal.aborted || this.#signal.aborted) return;
    const steps = [...this.#slots.values()].map((s) => s.sleepingUntil);
    const trust = this.#config.caRotation.enabled ? this.#trustSleepingUntil : undefined;
    if (steps.some((u) => u === null) || trust === null) return;
    const earliest = (dates: (Date | null | undefined)[]) => Math.min(...dates.map((u) => u?.getTime() ?? Infinity));
    if (earliest([...steps, trust]) - this.#clock.now().getTime() < this.#restAfterMs) return;
    // The CA check the keeper lets the daemon look at itself is no reason for a worker; a renewal is.
    const look = trust ? this.#trust.restingLook() : null;
    const due = earliest(look ? steps : [...steps, trust]);
    this.#restUntil = new Date(Number.isFinite(due) ? due : Date.parse(look!.until));
    this.#restLook = look;
    this.#rest.abort();
  }

  #stopping(): boolean {
    return this.#signal.aborted || this.#rest.signal.aborted;
  }

  async #loop(name: IdentityName): Promise<void> {
    const slot = this.#slots.get(name)!;
    while (!this.#stopping()) {
      const config = this.#config;
      const identity = identitiesFor(config).find((i) => i.name === name);
      if (!identity) {
        // Gone from the configuration (SIGHUP): it no longer holds the pass up.
        this.#slots.delete(name);
        return;
      }
      // One configuration per pass, taken with the renew-now flag before
      // anything awaits: a SIGHUP that lands mid-step renews on the next
      // pass, under the configuration it loaded.
      const force = slot.force;
      slot.force = false;
      const answering = slot.appliedSeq;
      this.#setProgressDue(slot, progressDue({ kind: 'working' }, this.#clock.monotonic(), livenessLimits(this.#config)));
      let wakeAt: Date;
      try {
        wakeAt = await this.#step(config, identity, slot, force);
      } catch (err) {
        if (this.#stopping()) return;
        wakeAt = this.#failed(identity, slot, err);
      }
      slot.doneSeq = Math.max(slot.doneSeq, answering);
      if (identity.requester === 'bootstrap-token' && slot.seen?.state === 'usable') await this.#seedClientCa(slot.seen.cluster?.caPem);
      await this.#publish();
      await this.#removeBootstrapWhenDone(config);
      await this.#sleep(slot, wakeAt);
    }
  }

  /** The kubelet's client-CA file exists before READY=1 (trust/keeper.ts); a failure is logged, never holds the node back. */
  async #seedClientCa(caPem: string | undefined): Promise<void> {
    if (caPem === undefined) return;
    await this.#trust.seedClientCa(caPem).catch((err: Error) => this.#logger.error(`CA rotation: ${err.message}`));
  }

  /** One pass for one identity, like the kubelet's LoadClientCert: look, decide, act, record. Returns when to look again. */
  async #step(config: Config, identity: Identity, slot: Slot, force: boolean): Promise<Date> {
    const now = this.#clock.now();
    const node = await assessNode(config, now, this.#lastGoodKubelet?.cluster.caPem);
    await forgetAnsweredKeys(config, node, storeOf(this.#runDeps()), this.#logger);
    const own = allOf(node).find((a) => a.identity.name === identity.name)!;
    const requester = this.#requester(node.kubelet, now);
    slot.seen = own;
    const elsewhere = identity.rotatedByKubelet ? await this.#kubeletRenewedElsewhere(config, slot) : null;
    const action = nextAction({
      own,
      requester,
      kubeletProblem: node.kubelet.state === 'unusable' ? node.kubelet.reason : null,
      deadline: own.state === 'usable' && elsewhere === null ? this.#deadline(slot, own, config.renewal.margin) : null,
      force,
      renewedElsewhere: elsewhere,
      now,
    });
    switch (action.kind) {
      case 'step-aside':
        if (force) this.#logger.warn(`${identity.name}: not renewed on request: ${action.why}`, { identity: identity.name });
        slot.state.nextRenewal = null;
        return action.until;
      case 'sleep':
        slot.state.nextRenewal = action.until.toISOString();
        return action.until;
      case 'wait-for-kubelet':
        // The kubelet loop nudges this one when its credential lands.
        slot.state.lastError = action.why;
        this.#logger.info(`${identity.name}: ${action.why}`, { identity: identity.name });
        return action.until;
      case 'bootstrap':
      case 'renew': {
        this.#logger.info(`${identity.name}: ${action.why}`);
        const started = this.#clock.monotonic();
        const issued =
          action.kind === 'bootstrap'
            ? await this.#bootstrapKubelet(config)
            : await renewIdentity(config, own, action.requester, this.#runDeps());
        if (issued) await this.#issued(identity, slot, issued, started);
        return this.#clock.now();
      }
    }
  }

  /** The kubelet's credential from a bootstrap kubeconfig; null when recovering a half-done swap made it usable again. */
  async #bootstrapKubelet(config: Config): Promise<Issued | null> {
    const pass = await openPass(config, this.#runDeps());
    if (pass.node.kubelet.state === 'usable') return null;
    try {
      return (await issueKubelet(pass)).issued;
    } catch (err) {
      if (err instanceof InputError || err instanceof BootstrapCredentialError) throw new NeedsBootstrapError(err.message);
      throw err;
    }
  }

  /** What authenticates CSRs: the kubelet credential on disk, or the last good one from memory when the files went missing. */
  #requester(onDisk: Assessment, now: Date): NodeCredential | null {
    if (isNodeCredential(onDisk)) {
      this.#lastGoodKubelet = onDisk;
      return onDisk;
    }
    const remembered = this.#lastGoodKubelet;
    if (remembered && remembered.notAfter > now && remembered.identity.subject.commonName === onDisk.identity.subject.commonName) {
      this.#logger.warn(
        `kubelet: ${onDisk.state === 'unusable' ? onDisk.reason : 'not usable'}; authenticating with the credential kubeboot still holds in memory (valid until ${remembered.notAfter.toISOString()})`,
      );
      return remembered;
    }
    return null;
  }

  /** Why the kubelet renews its own client certificate (kubelet.renewal, its config file), or null; logged when that changes. */
  async #kubeletRenewedElsewhere(config: Config, slot: Slot): Promise<string | null> {
    const file = config.kubelet.configFile;
    const renewer = kubeletRenewer(config.kubelet.renewal, file, await readOptionalOrProblem(file));
    const said = `${renewer.why}\n${renewer.warning ?? ''}`;
    if (slot.renewerSaid !== said) {
      slot.renewerSaid = said;
      this.#logger.info(`kubelet: ${renewer.why}`, { identity: 'kubelet' });
      if (renewer.warning !== null) this.#logger.warn(`kubelet: ${renewer.warning}`, { identity: 'kubelet' });
    }
    return renewer.by === 'kubelet' ? renewer.why : null;
  }

  #deadline(slot: Slot, own: Usable, margin: number): Date {
    const certKey = createHash('sha256').update(own.certPem).digest('hex');
    if (slot.deadline?.certKey !== certKey) {
      const leaf = parseCertificateChain(own.certPem)[0]!;
      const lastSuccess = slot.state.lastSuccess ? new Date(slot.state.lastSuccess) : null;
      const { at, held } = deadlineFor(leaf, margin, this.#random, lastSuccess);
      if (held)
        this.#logger.warn(
          `${own.identity.name}: renew margin ${margin}s leaves almost no lifetime; holding renewals ${Math.round((at.getTime() - lastSuccess!.getTime()) / 1000)}s apart`,
        );
      slot.deadline = { certKey, at };
      this.#logger.info(
        `${own.identity.name}: certificate valid until ${leaf.notAfter.toISOString()}; renewal scheduled for ${at.toISOString()}`,
        { identity: own.identity.name },
      );
    }
    return slot.deadline.at;
  }

  /** After a certificate landed: prune, record, hooks, and wake the identities that waited for the kubelet. */
  async #issued(identity: Identity, slot: Slot, issued: Issued, startedMonotonic: number): Promise<void> {
    const now = this.#clock.now();
    slot.attempt = 0;
    slot.seen = await this.#reassess(identity);
    slot.state.lastSuccess = now.toISOString();
    slot.state.lastError = null;
    slot.state.pendingCsr = null;
    this.#sink.metrics.csrSettled(identity.name);
    slot.deadline = null;
    if (identity.requester === 'bootstrap-token' && slot.seen?.state === 'usable') this.#provenKubeletPem = slot.seen.certPem;
    this.#sink.metrics.recordRenewal(identity.name, now);
    this.#logger.info(
      `${identity.name}: certificate renewed in ${((this.#clock.monotonic() - startedMonotonic) / 1000).toFixed(1)}s, valid until ${issued.notAfter.toISOString()}`,
    );
    const hooks = await finishRenewal(this.#config, identity, this.#runDeps());
    slot.state.lastHooks = hooks.map((r) => ({ argv: r.argv, ok: r.ok, exitCode: r.exitCode, at: this.#clock.now().toISOString() }));
    for (const r of hooks) if (!r.ok) this.#sink.metrics.recordHookFailure(identity.name);
    this.#trust.poke();
    if (identity.requester === 'bootstrap-token') {
      // Others may have been waiting for the kubelet's credential.
      const waiting = [...this.#slots].filter(
        ([n, slot]) => IDENTITY_ROLES[n].requester === 'node-credential' && this.#validNow(slot) === null,
      );
      this.nudge(
        waiting.map(([n]) => n),
        false,
      );
    }
  }

  async #reassess(identity: Identity): Promise<Assessment | null> {
    const node = await assessNode(this.#config, this.#clock.now(), this.#lastGoodKubelet?.cluster.caPem);
    return [node.kubelet, ...node.others].find((a) => a.identity.name === identity.name) ?? null;
  }

  #failed(identity: Identity, slot: Slot, err: unknown): Date {
    const message = (err as Error).message;
    const now = this.#clock.now();
    const current = this.#validNow(slot);
    const plan = retryPlan(err, slot.attempt, { now, notAfter: current?.notAfter ?? null, random: this.#random });
    slot.attempt = plan.attempt;
    slot.state.lastError = message;
    slot.state.pendingCsr = null;
    this.#sink.metrics.csrSettled(identity.name);
    this.#sink.metrics.recordRenewalFailure(identity.name, plan.reason);
    if (err instanceof NeedsBootstrapError) {
      this.#logger.error(
        `${message}. To recover, place a new bootstrap kubeconfig at ${this.#config.bootstrapKubeconfig} (for example from a fresh \`kubeadm token create\`); kubeboot notices it and re-bootstraps on its own`,
        { identity: identity.name },
      );
    } else {
      this.#logger.error(
        `${identity.name}: renewal failed: ${message}; retrying in ${Math.round(plan.waitMs / 1000)}s${current ? ` (the current certificate stays valid until ${current.notAfter.toISOString()})` : ''}`,
        { identity: identity.name },
      );
    }
    return new Date(now.getTime() + plan.waitMs);
  }

  /** Restart commands of a CA rotation, one after another; false when one failed. */
  async #runCommands(argvs: string[][]): Promise<boolean> {
    let ok = true;
    for (const argv of argvs) {
      const r = await runHook(argv, {
        timeoutMs: this.#config.renewal.hookTimeout * 1000,
        signal: this.#signal,
        env: hookEnvironment(this.#env),
      });
      if (!r.ok)
        this.#logger.warn('CA rotation: restart command failed', {
          argv,
          exitCode: r.exitCode,
          stderr: r.stderr,
          ...(r.error ? { error: r.error } : {}),
        });
      ok &&= r.ok;
    }
    return ok;
  }

  /**
   * Once every identity is valid, the bootstrap kubeconfig goes — also one
   * found at start or dropped in later next to valid credentials. A kubelet
   * certificate this process did not issue is proven first (one
   * SelfSubjectReview). A failure is logged and tried again after the next pass.
   */
  async #removeBootstrapWhenDone(config: Config): Promise<void> {
    const kubelet = this.#slots.get(nodeIdentity(config).name)?.seen;
    if (this.#cleaningUp || !this.readiness().ready || !kubelet || !isNodeCredential(kubelet)) return;
    this.#cleaningUp = true;
    try {
      await deleteBootstrapNow(config, this.#runDeps(), kubelet.certPem === this.#provenKubeletPem ? null : kubelet);
    } catch (err) {
      if (!this.#signal.aborted) this.#logger.error((err as Error).message);
    } finally {
      this.#cleaningUp = false;
    }
  }

  /** Sleeps until `until` in chunks, each one a sign of life for the liveness check. */
  async #sleep(slot: Slot, until: Date): Promise<void> {
    if (this.#stopping()) return;
    const woken = new AbortController();
    slot.wake = () => woken.abort();
    if (slot.pendingWake) {
      slot.pendingWake = false;
      woken.abort();
    }
    const signal = AbortSignal.any([woken.signal, this.#signal, this.#rest.signal]);
    if (!signal.aborted) {
      slot.sleepingUntil = until;
      this.#maybeRest();
    }
    try {
      for (;;) {
        const left = until.getTime() - this.#clock.now().getTime();
        if (left <= 0) break;
        this.#setProgressDue(
          slot,
          progressDue({ kind: 'sleeping', msUntilWake: left }, this.#clock.monotonic(), livenessLimits(this.#config)),
        );
        // Monotonic chunks, the wall clock re-read after each: a clock stepped back lengthens the
        // sleep by more chunks, never one chunk past its liveness bound.
        await delay(Math.min(left, SLEEP_CHUNK_MS), this.#clock, { signal });
      }
    } catch {
      // Woken early, stopping or resting: the loop re-checks.
    } finally {
      slot.wake = null;
      slot.sleepingUntil = null;
    }
  }

  /** Liveness: the resting daemon hears of the earliest bound of all loops whenever one moves. */
  #setProgressDue(slot: Slot, due: number): void {
    slot.progressDue = due;
    this.#sink.progress(Math.min(...[...this.#slots.values()].map((s) => s.progressDue)) - this.#clock.monotonic());
  }

  /** The slot's credential when it is valid at this moment, by the clock, not by the last pass. */
  #validNow(slot: Slot): Usable | null {
    return slot.seen?.state === 'usable' && slot.seen.notAfter > this.#clock.now() ? slot.seen : null;
  }

  #views(): IdentityView[] {
    return [...this.#slots].map(([name, slot]) => ({
      name,
      validUntil: this.#validNow(slot)?.notAfter ?? null,
      expiredAt: slot.seen?.state === 'usable' ? slot.seen.notAfter : null,
      state: slot.state,
    }));
  }

  #runDeps(): RunDeps {
    return {
      logger: this.#logger,
      clock: this.#clock,
      signal: this.#signal,
      observer: this.#sink.observer,
      onCsrSubmitted: (identity, name) => {
        const slot = this.#slots.get(identity.name);
        if (slot) slot.state.pendingCsr = name;
        this.#sink.metrics.csrPending(identity.name, this.#clock.now());
        void this.#publish();
      },
      onCsrWait: (identity, seconds) => this.#sink.metrics.observeCsrWait(identity.name, seconds),
      dispatcher: this.#dispatcher,
      serialize: this.#writes,
    };
  }

  /**
   * One report at a time, in order; `run()` waits for the last before it
   * returns, so nothing writes the status file after the daemon stopped
   * (a CSR's submission reports without waiting).
   */
  #publish(): Promise<void> {
    this.#publishing = this.#publishing
      .then(() =>
        this.#sink.report(this.#views(), this.carry(), Object.fromEntries([...this.#slots].map(([n, slot]) => [n, slot.doneSeq]))),
      )
      .catch((err: Error) => {
        this.#logger.warn(`cannot report the credentials' state: ${err.message}`);
      });
    return this.#publishing;
  }
}
