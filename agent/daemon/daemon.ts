/**
 * `kubeboot run`: one loop per identity that sleeps until the renewal
 * deadline (in chunks, re-checking the wall clock), wakes early on external
 * file changes, SIGHUP or `kubeboot renew`, and never gives up while the
 * current certificate is valid. What to do and how long to wait are decided
 * by the pure functions in renewal/plan.ts; this file carries them out.
 *
 * READY=1 is sent once the kubelet's credential is valid: the kubelet never
 * waits for kube-proxy's or the serving certificate's approval (kube-proxy's
 * unit waits for its own with `kubeboot wait`). /readyz reports every identity.
 */
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import path from 'node:path';
import { deleteBootstrapNow, issueKubelet, openPass, recoverNode } from '../bootstrap/pass.js';
import type { Config } from '../config/types.js';
import { assessNode, isNodeCredential, type Assessment, type NodeCredential, type Usable } from '../credential/assess.js';
import type { Issued, RunDeps } from '../credential/issue.js';
import { hookEnvironment, runHook, runIdentityHooks } from '../credential/hooks.js';
import { renewIdentity } from '../credential/renew.js';
import { BootstrapCredentialError, InputError, NeedsBootstrapError } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import type { Identity, IdentityName } from '../identity.js';
import type { Logger } from '../log.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { kubeletRenewer } from '../renewal/owner.js';
import { deadlineFor, nextAction, progressDue, retryPlan } from '../renewal/plan.js';
import { readOptionalOrProblem } from '../read-optional.js';
import { ensureDir } from '../store/atomic.js';
import { oldCredentialsToKeep, pruneOld } from '../store/cert-store.js';
import { systemClock, type Clock } from '../time/clock.js';
import { sleepUntil } from '../time/timer.js';
import { removePidFile, writePidFile } from './control.js';
import { serializer, TrustKeeper } from '../trust/keeper.js';
import { startHttpServer, type StatusServer } from './http.js';
import { createMetrics, type KubebootMetrics } from './metrics.js';
import { createNotifier, startWatchdog, type Notifier } from './notify.js';
import { nodeReadyOf, readinessOf, Reporter, type IdentityView, type Readiness } from './report.js';
import type { IdentityState } from './state.js';
import { createSelfWrites, watchCredentials, type CredentialWatcher } from './watch.js';

/** A sleeping loop shows progress at least this often, so liveness can tell asleep from stuck. */
const SLEEP_CHUNK_MS = 60_000;
/** Slack on every liveness bound: an event loop under load is late, not stuck. */
const LIVENESS_GRACE_MS = 30_000;
/** Beyond the CSR waits and hooks, what requests and disk writes of one pass may take. */
const PASS_OVERHEAD_MS = 5 * 60_000;

export interface DaemonOptions {
  config: Config;
  logger: Logger;
  signal: AbortSignal;
  reload: () => Promise<Config>;
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
}

export class Daemon {
  #config: Config;
  readonly #logger: Logger;
  readonly #signal: AbortSignal;
  readonly #reload: () => Promise<Config>;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #env: NodeJS.ProcessEnv;
  readonly #dispatcher: Dispatcher | undefined;
  readonly #slots = new Map<IdentityName, Slot>();
  readonly #selfWrites = createSelfWrites();
  /**
   * The kubelet credential last seen valid on disk. If an operator deletes
   * the files, it still authenticates the re-issue (kubernetes#53288: certs
   * lost on disk must not strand the node while a valid one is in memory).
   */
  #lastGoodKubelet: NodeCredential | null = null;
  /** The kubelet certificate this process issued (and so proved); others are proven before the token goes. */
  #provenKubeletPem: string | null = null;
  #cleaningUp = false;
  readonly metrics: KubebootMetrics;
  #notifier: Notifier;
  readonly #reporter: Reporter;
  #publishing: Promise<void> = Promise.resolve();
  /** Issuance and the CA rotation write credentials one unit at a time. */
  readonly #writes = serializer();
  readonly #trust: TrustKeeper;

  constructor(options: DaemonOptions) {
    this.#config = options.config;
    this.#logger = options.logger;
    this.#signal = options.signal;
    this.#reload = options.reload;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#env = options.env ?? process.env;
    this.#dispatcher = options.dispatcher;
    this.#notifier = createNotifier({ env: this.#env, logger: this.#logger });
    this.#reporter = new Reporter({
      notifier: this.#notifier,
      logger: this.#logger,
      stateDir: () => this.#config.stateDir,
      now: () => this.#clock.now(),
    });
    for (const identity of identitiesFor(this.#config)) {
      this.#slots.set(identity.name, {
        state: { nextRenewal: null, lastSuccess: null, lastError: null, pendingCsr: null, lastHooks: [] },
        seen: null,
        deadline: null,
        wake: null,
        pendingWake: false,
        force: false,
        attempt: 0,
        progressDue: this.#clock.monotonic() + this.#maxPassMs() + LIVENESS_GRACE_MS,
      });
    }
    this.metrics = createMetrics({
      certificates: () => [...this.#slots].map(([identity, slot]) => ({ identity, notAfter: this.#validNow(slot)?.notAfter ?? null })),
      now: () => this.#clock.now(),
    });
    this.#trust = new TrustKeeper({
      config: () => this.#config,
      logger: this.#logger,
      clock: this.#clock,
      random: this.#random,
      signal: this.#signal,
      dispatcher: this.#dispatcher,
      nodeCredential: () => (this.#lastGoodKubelet && this.#lastGoodKubelet.notAfter > this.#clock.now() ? this.#lastGoodKubelet : null),
      serialize: this.#writes,
      reissue: (identity) => this.nudge([identity], true),
      runCommands: (argvs) => this.#runCommands(argvs),
      observer: this.#selfWrites,
      registry: this.metrics.registry,
    });
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

  /** SIGHUP: re-read configuration, then renew everything now. */
  async reloadAndRenew(): Promise<void> {
    try {
      const next = await this.#reload();
      const before = identitiesFor(this.#config)
        .map((i) => i.name)
        .join(',');
      const after = identitiesFor(next)
        .map((i) => i.name)
        .join(',');
      if (before !== after)
        this.#logger.warn(`the set of identities changed (${before} -> ${after}); restart kubeboot to add or remove identities`);
      this.#config = next;
      this.#logger.info('configuration reloaded; renewing now');
    } catch (err) {
      this.#logger.error(`configuration reload failed, keeping the previous one: ${(err as Error).message}`);
    }
    this.nudge('all', true);
  }

  async run(): Promise<void> {
    const config = this.#config;
    await ensureDir(config.stateDir, 0o700);
    // The watcher needs the directories to exist; create missing ones as the store would.
    for (const identity of identitiesFor(config)) {
      await ensureDir(identity.certDir, 0o700);
      if (identity.kubeconfigPath) await ensureDir(path.dirname(identity.kubeconfigPath), 0o755);
    }
    await ensureDir(path.dirname(config.bootstrapKubeconfig), 0o755);
    await recoverNode(config, this.#runDeps());
    await writePidFile(config.stateDir);
    let http: StatusServer | null = null;
    let watcher: CredentialWatcher | null = null;
    const watchdog = startWatchdog(this.#notifier, { env: this.#env, healthy: () => this.healthy() });
    try {
      if (config.listen) {
        const { host, port } = splitListen(config.listen);
        http = await startHttpServer({
          host,
          port,
          healthy: () => this.healthy(),
          readiness: () => this.readiness(),
          registry: this.metrics.registry,
          logger: this.#logger,
        });
        this.#logger.info(`serving /healthz, /readyz and /metrics on ${http.address.host}:${http.address.port}`);
      }
      watcher = await watchCredentials({
        identities: identitiesFor(config),
        bootstrapKubeconfig: config.bootstrapKubeconfig,
        selfWrites: this.#selfWrites,
        logger: this.#logger,
        onChange: (event) => {
          this.#logger.info(`${event.path} ${event.kind} outside kubeboot; re-checking ${event.identity ?? 'all identities'}`);
          this.nudge(event.identity ? [event.identity] : 'all', false);
        },
      });
      await this.#notifier.status('checking credentials');
      await Promise.all([...[...this.#slots.keys()].map((name) => this.#loop(name)), this.#trust.run()]);
    } finally {
      watchdog?.stop();
      await watcher?.close();
      await http?.close();
      await this.#publishing;
      await this.#notifier.stopping('stopping');
      await removePidFile(config.stateDir);
    }
  }

  async #loop(name: IdentityName): Promise<void> {
    const slot = this.#slots.get(name)!;
    while (!this.#signal.aborted) {
      const config = this.#config;
      const identity = identitiesFor(config).find((i) => i.name === name);
      if (!identity) return;
      // One configuration per pass, taken with the renew-now flag before
      // anything awaits: a SIGHUP that lands mid-step renews on the next
      // pass, under the configuration it loaded.
      const force = slot.force;
      slot.force = false;
      slot.progressDue = progressDue({ kind: 'working' }, this.#clock.monotonic(), this.#livenessLimits());
      let wakeAt: Date;
      try {
        wakeAt = await this.#step(config, identity, slot, force);
      } catch (err) {
        if (this.#signal.aborted) return;
        wakeAt = this.#failed(identity, slot, err);
      }
      if (name === 'kubelet' && slot.seen?.state === 'usable') await this.#seedClientCa(slot.seen.cluster?.caPem);
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
    const own = identity.name === 'kubelet' ? node.kubelet : node.others.find((a) => a.identity.name === identity.name)!;
    const requester = this.#requester(node.kubelet, now);
    slot.seen = own;
    const elsewhere = identity.name === 'kubelet' ? await this.#kubeletRenewedElsewhere(config, slot) : null;
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
    await pruneOld(identity, oldCredentialsToKeep(identity), { observer: this.#selfWrites });
    const now = this.#clock.now();
    slot.attempt = 0;
    slot.seen = await this.#reassess(identity);
    slot.state.lastSuccess = now.toISOString();
    slot.state.lastError = null;
    slot.state.pendingCsr = null;
    this.metrics.csrSettled(identity.name);
    slot.deadline = null;
    if (identity.name === 'kubelet' && slot.seen?.state === 'usable') this.#provenKubeletPem = slot.seen.certPem;
    this.metrics.recordRenewal(identity.name, now);
    this.#logger.info(
      `${identity.name}: certificate renewed in ${((this.#clock.monotonic() - startedMonotonic) / 1000).toFixed(1)}s, valid until ${issued.notAfter.toISOString()}`,
    );
    await this.#runHooks(identity, slot);
    this.#trust.poke();
    if (identity.name === 'kubelet') {
      // Others may have been waiting for the kubelet's credential.
      this.nudge(
        [...this.#slots.keys()].filter((n) => n !== 'kubelet' && this.#validNow(this.#slots.get(n)!) === null),
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
    this.metrics.csrSettled(identity.name);
    this.metrics.recordRenewalFailure(identity.name, plan.reason);
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

  async #runHooks(identity: Identity, slot: Slot): Promise<void> {
    if (identity.hooks.length === 0) return;
    const results = await runIdentityHooks(identity, this.#logger, {
      timeoutMs: this.#config.renewal.hookTimeout * 1000,
      signal: this.#signal,
    });
    slot.state.lastHooks = results.map((r) => ({ argv: r.argv, ok: r.ok, exitCode: r.exitCode, at: this.#clock.now().toISOString() }));
    for (const r of results) if (!r.ok) this.metrics.recordHookFailure(identity.name);
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
    const kubelet = this.#slots.get('kubelet')?.seen;
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
    if (this.#signal.aborted) return;
    const woken = new AbortController();
    slot.wake = () => woken.abort();
    if (slot.pendingWake) {
      slot.pendingWake = false;
      woken.abort();
    }
    const signal = AbortSignal.any([woken.signal, this.#signal]);
    try {
      for (;;) {
        const left = until.getTime() - this.#clock.now().getTime();
        if (left <= 0) break;
        slot.progressDue = progressDue({ kind: 'sleeping', msUntilWake: left }, this.#clock.monotonic(), this.#livenessLimits());
        await sleepUntil(new Date(this.#clock.now().getTime() + Math.min(left, SLEEP_CHUNK_MS)), this.#clock, { signal });
      }
    } catch {
      // Woken early or stopping: the loop re-checks.
    } finally {
      slot.wake = null;
    }
  }

  #livenessLimits(): { chunkMs: number; maxPassMs: number; graceMs: number } {
    return { chunkMs: SLEEP_CHUNK_MS, maxPassMs: this.#maxPassMs(), graceMs: LIVENESS_GRACE_MS };
  }

  /**
   * The longest one pass may take: CA discovery, retrying the CSR create, the
   * CSR wait and retrying the proof (each bounded by waitTimeout), the hooks,
   * and requests.
   */
  #maxPassMs(): number {
    const c = this.#config;
    const hooks = Math.max(0, ...identitiesFor(c).map((i) => i.hooks.length));
    return (4 * c.waitTimeout + hooks * c.renewal.hookTimeout) * 1000 + PASS_OVERHEAD_MS;
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
      observer: this.#selfWrites,
      onCsrSubmitted: (identity, name) => {
        const slot = this.#slots.get(identity.name);
        if (slot) slot.state.pendingCsr = name;
        this.metrics.csrPending(identity.name, this.#clock.now());
        void this.#publish();
      },
      onCsrWait: (identity, seconds) => this.metrics.observeCsrWait(identity.name, seconds),
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
      .then(() => this.#reporter.publish(this.#views()))
      .catch((err: Error) => {
        this.#logger.warn(`cannot report the credentials' state: ${err.message}`);
      });
    return this.#publishing;
  }
}

function splitListen(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  return { host: listen.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(listen.slice(at + 1)) };
}
