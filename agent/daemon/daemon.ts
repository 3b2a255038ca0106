/**
 * `kubeboot run`: one loop per identity that sleeps until the renewal
 * deadline (in chunks, re-checking the wall clock), wakes early on external
 * file changes, SIGHUP or `kubeboot renew`, and never gives up while the
 * current certificate is valid. Readiness is "every identity holds a valid
 * certificate"; READY=1 is sent the first time that holds.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import { bootstrapNode, finishBootstrap } from '../bootstrap/flow.js';
import { existingCredential, type ExistingCredential } from '../bootstrap/existing.js';
import type { Config } from '../config/types.js';
import { CsrRejectedError, ExitCode, KubebootError } from '../errors.js';
import { identitiesFor } from '../identities.js';
import type { Identity, IdentityName } from '../identity.js';
import type { Logger } from '../log.js';
import { ApiError } from '../kube/client.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { nextDelay, retryAfterMs, type BackoffOptions } from '../renewal/backoff.js';
import { systemClock, type Clock } from '../renewal/clock.js';
import { isDue, renewalDeadline } from '../renewal/deadline.js';
import { sleepUntil } from '../renewal/timer.js';
import { ensureDir } from '../store/atomic.js';
import { pruneOld } from '../store/cert-store.js';
import { removePidFile, writePidFile } from './control.js';
import { runIdentityHooks } from './hooks.js';
import { createMetrics, type KubebootMetrics } from './metrics.js';
import { createNotifier, startWatchdog, type Notifier } from './notify.js';
import { NeedsBootstrapError, renewIdentity, WaitingForKubeletError } from './renew.js';
import { writeDaemonState, type IdentityState } from './state.js';
import { startHttpServer, type StatusServer } from './http.js';
import { watchCredentials, createSelfWrites, type CredentialWatcher } from './watch.js';

/** Renewal retries: 2 s doubling to 5 min; a denied CSR waits the full cap. */
export const RENEW_BACKOFF: BackoffOptions = { initial: 2_000, factor: 2, cap: 300_000, jitter: 0.1 };
/** How long an expired node waits between looks for a new bootstrap kubeconfig, besides file events. */
const REBOOTSTRAP_RECHECK_MS = 60_000;
/** Older timestamped credential files kept after a renewal; the kubelet never prunes them, so they pile up. */
export const KEEP_OLD_CREDENTIALS = 5;

export interface DaemonOptions {
  config: Config;
  logger: Logger;
  signal: AbortSignal;
  reload: () => Promise<Config>;
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  random?: () => number;
}

interface Slot {
  state: IdentityState;
  usable: boolean;
  notAfter: Date | null;
  /** Cached deadline for one certificate, so the jitter is drawn once per certificate. */
  deadline: { certKey: string; at: Date } | null;
  wake: (() => void) | null;
  /** A nudge that arrived while the loop was busy; the next sleep returns at once. */
  pendingWake: boolean;
  force: boolean;
  attempt: number;
}

export class Daemon {
  #config: Config;
  readonly #logger: Logger;
  readonly #signal: AbortSignal;
  readonly #reload: () => Promise<Config>;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #env: NodeJS.ProcessEnv;
  readonly #slots = new Map<IdentityName, Slot>();
  readonly #selfWrites = createSelfWrites();
  /**
   * The kubelet credential last seen valid on disk. If an operator deletes
   * the files, it still authenticates the re-issue (kubernetes#53288: certs
   * lost on disk must not strand the node while a valid one is in memory).
   */
  #lastGoodKubelet: ExistingCredential | null = null;
  readonly metrics: KubebootMetrics;
  #notifier: Notifier;
  #readySent = false;

  constructor(options: DaemonOptions) {
    this.#config = options.config;
    this.#logger = options.logger;
    this.#signal = options.signal;
    this.#reload = options.reload;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#env = options.env ?? process.env;
    this.#notifier = createNotifier({ env: this.#env, logger: this.#logger });
    for (const identity of identitiesFor(this.#config)) {
      this.#slots.set(identity.name, { state: { nextRenewal: null, lastSuccess: null, lastError: null, lastHooks: [] }, usable: false, notAfter: null, deadline: null, wake: null, pendingWake: false, force: false, attempt: 0 });
    }
    this.metrics = createMetrics({ certificates: () => [...this.#slots].map(([identity, slot]) => ({ identity, notAfter: slot.notAfter })), now: () => this.#clock.now() });
  }

  get config(): Config {
    return this.#config;
  }

  /** Every identity holds a currently valid certificate. */
  readiness(): { ready: boolean; detail: string[] } {
    const detail = [...this.#slots].map(([name, slot]) => `${name}: ${slot.usable ? `valid until ${slot.notAfter?.toISOString()}` : (slot.state.lastError ?? 'no valid certificate')}`);
    return { ready: [...this.#slots.values()].every((s) => s.usable), detail };
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
      const before = identitiesFor(this.#config).map((i) => i.name).join(',');
      const after = identitiesFor(next).map((i) => i.name).join(',');
      if (before !== after) this.#logger.warn(`the set of identities changed (${before} -> ${after}); restart kubeboot to add or remove identities`);
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
    await writePidFile(config.stateDir);
    let http: StatusServer | null = null;
    let watcher: CredentialWatcher | null = null;
    const watchdog = startWatchdog(this.#notifier, { env: this.#env, healthy: () => !this.#signal.aborted });
    try {
      if (config.listen) {
        const { host, port } = splitListen(config.listen);
        http = await startHttpServer({ host, port, healthy: () => !this.#signal.aborted, readiness: () => this.readiness(), registry: this.metrics.registry, logger: this.#logger });
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
      await Promise.all([...this.#slots.keys()].map((name) => this.#loop(name)));
    } finally {
      watchdog?.stop();
      await watcher?.close();
      await http?.close();
      await this.#notifier.stopping('stopping');
      await removePidFile(config.stateDir);
    }
  }

  async #loop(name: IdentityName): Promise<void> {
    const slot = this.#slots.get(name)!;
    while (!this.#signal.aborted) {
      const config = this.#config;
      const identities = identitiesFor(config);
      const identity = identities.find((i) => i.name === name);
      if (!identity) return;
      // One configuration per pass, taken with the renew-now flag before
      // anything awaits: a SIGHUP that lands mid-step renews on the next
      // pass, under the configuration it loaded.
      const force = slot.force;
      slot.force = false;
      let wakeAt: Date;
      try {
        wakeAt = await this.#step(config, identity, identities[0]!, slot, force);
      } catch (err) {
        if (this.#signal.aborted) return;
        wakeAt = this.#failed(identity, slot, err);
      }
      await this.#publish();
      await this.#sleep(slot, wakeAt);
    }
  }

  /** Look at the files, renew if due, and say when to look again. */
  async #step(config: Config, identity: Identity, kubeletIdentity: Identity, slot: Slot, force: boolean): Promise<Date> {
    const now = this.#clock.now();
    const kubelet = await existingCredential(kubeletIdentity, now, null);
    const requester = this.#requester(kubelet, now);
    const own = identity.name === 'kubelet' ? kubelet : await existingCredential(identity, now, kubelet.cluster?.caPem ?? requester?.cluster?.caPem ?? null);
    slot.usable = own.usable;
    slot.notAfter = own.notAfter;
    if (own.usable && !force) {
      const at = this.#deadline(slot, own, config.renewal.margin);
      slot.state.nextRenewal = at.toISOString();
      if (!isDue(at, now)) return at;
      this.#logger.info(`${identity.name}: renewal due (deadline ${at.toISOString()}, expires ${own.notAfter?.toISOString()})`);
    } else {
      this.#logger.info(`${identity.name}: ${force ? 'renewal requested' : `needs a certificate (${own.reason})`}`);
    }

    const started = this.#clock.now();
    const deps = {
      logger: this.#logger,
      now: () => this.#clock.now(),
      signal: this.#signal,
      observer: this.#selfWrites,
      onCsrWait: (seconds: number) => this.metrics.observeCsrWait(identity.name, seconds),
    };
    let notAfter: Date | null;
    if (!requester) {
      if (identity.name !== 'kubelet') throw new WaitingForKubeletError(`${identity.name}: waiting for the kubelet credential (${kubelet.reason})`);
      notAfter = await this.#rebootstrap(config, { ...deps, onCsrWait: (id: Identity, seconds: number) => this.metrics.observeCsrWait(id.name, seconds) });
    } else {
      notAfter = (await renewIdentity(config, identity, own, requester, deps)).notAfter;
    }
    await pruneOld(identity, KEEP_OLD_CREDENTIALS, { observer: this.#selfWrites });
    this.#succeeded(identity, slot, started, notAfter);
    await this.#runHooks(identity, slot);
    if (identity.name === 'kubelet') {
      // Others may have been waiting for the kubelet's credential.
      this.nudge([...this.#slots.keys()].filter((n) => n !== 'kubelet' && !this.#slots.get(n)!.usable), false);
    }
    if ([...this.#slots.values()].every((s) => s.usable)) {
      await finishBootstrap(config, { logger: this.#logger, observer: this.#selfWrites });
    }
    return this.#clock.now();
  }

  /** The kubelet's credential from a bootstrap kubeconfig; the other loops then renew theirs with it. */
  async #rebootstrap(config: Config, deps: Parameters<typeof bootstrapNode>[1]): Promise<Date | null> {
    try {
      const report = await bootstrapNode(config, deps, { onlyKubelet: true });
      return report.outcomes.find((o) => o.identity === 'kubelet')?.notAfter ?? null;
    } catch (err) {
      if (err instanceof KubebootError && err.code === ExitCode.badInput) throw new NeedsBootstrapError(err.message);
      throw err;
    }
  }

  /** What authenticates CSRs: the kubelet credential on disk, or the last good one from memory when the files went missing. */
  #requester(onDisk: ExistingCredential, now: Date): ExistingCredential | null {
    if (onDisk.usable) {
      this.#lastGoodKubelet = onDisk;
      return onDisk;
    }
    const remembered = this.#lastGoodKubelet;
    if (remembered?.notAfter && remembered.notAfter > now && remembered.identity.subject.commonName === onDisk.identity.subject.commonName) {
      this.#logger.warn(`kubelet: ${onDisk.reason}; authenticating with the credential kubeboot still holds in memory (valid until ${remembered.notAfter.toISOString()})`);
      return remembered;
    }
    return null;
  }

  #deadline(slot: Slot, own: ExistingCredential, margin: number): Date {
    const certKey = createHash('sha256').update(own.certPem ?? '').digest('hex');
    if (slot.deadline?.certKey !== certKey) {
      const leaf = parseCertificateChain(own.certPem!)[0]!;
      let at = renewalDeadline(leaf, { margin }, this.#random);
      // A margin close to the whole lifetime would make every fresh
      // certificate due at once: never renew again within 5 % of the
      // remaining lifetime of the last success.
      const last = slot.state.lastSuccess ? new Date(slot.state.lastSuccess).getTime() : null;
      if (last !== null && at.getTime() < last + 0.05 * (leaf.notAfter.getTime() - last)) {
        at = new Date(last + 0.05 * (leaf.notAfter.getTime() - last));
        this.#logger.warn(`${own.identity.name}: renew margin ${margin}s leaves almost no lifetime; holding renewals ${Math.round((at.getTime() - last) / 1000)}s apart`);
      }
      slot.deadline = { certKey, at };
      this.#logger.info(`${own.identity.name}: certificate valid until ${leaf.notAfter.toISOString()}; renewal scheduled for ${slot.deadline.at.toISOString()}`, { identity: own.identity.name });
    }
    return slot.deadline.at;
  }

  #succeeded(identity: Identity, slot: Slot, started: Date, notAfter: Date | null): void {
    slot.attempt = 0;
    slot.usable = true;
    slot.notAfter = notAfter;
    slot.state.lastSuccess = this.#clock.now().toISOString();
    slot.state.lastError = null;
    slot.deadline = null;
    this.metrics.recordRenewal(identity.name, this.#clock.now());
    this.#logger.info(`${identity.name}: certificate renewed in ${((this.#clock.now().getTime() - started.getTime()) / 1000).toFixed(1)}s`);
  }

  #failed(identity: Identity, slot: Slot, err: unknown): Date {
    const message = (err as Error).message;
    slot.state.lastError = message;
    const now = this.#clock.now();
    if (err instanceof WaitingForKubeletError) {
      // The kubelet loop nudges this one when its credential lands.
      this.#logger.info(message, { identity: identity.name });
      return new Date(now.getTime() + REBOOTSTRAP_RECHECK_MS);
    }
    if (err instanceof NeedsBootstrapError) {
      slot.usable = false;
      this.metrics.recordRenewalFailure(identity.name, 'needs-bootstrap');
      this.#logger.error(
        `${message}. To recover, place a new bootstrap kubeconfig at ${this.#config.bootstrapKubeconfig} (for example from a fresh \`kubeadm token create\`); kubeboot notices it and re-bootstraps on its own`,
        { identity: identity.name },
      );
      return new Date(now.getTime() + REBOOTSTRAP_RECHECK_MS);
    }
    const reason = err instanceof CsrRejectedError ? 'denied' : err instanceof ApiError ? `http-${err.status}` : err instanceof KubebootError && err.code === ExitCode.timedOut ? 'timeout' : 'error';
    this.metrics.recordRenewalFailure(identity.name, reason);
    const wait =
      err instanceof CsrRejectedError
        ? RENEW_BACKOFF.cap
        : ((err instanceof ApiError ? retryAfterMs(err.retryAfter, now) : null) ?? nextDelay(slot.attempt++, RENEW_BACKOFF, this.#random));
    this.#logger.error(`${identity.name}: renewal failed: ${message}; retrying in ${Math.round(wait / 1000)}s${slot.usable ? ` (the current certificate stays valid until ${slot.notAfter?.toISOString()})` : ''}`, { identity: identity.name });
    return new Date(now.getTime() + wait);
  }

  async #runHooks(identity: Identity, slot: Slot): Promise<void> {
    if (identity.hooks.length === 0) return;
    const results = await runIdentityHooks(identity, this.#logger, { timeoutMs: this.#config.renewal.hookTimeout * 1000, signal: this.#signal });
    slot.state.lastHooks = results.map((r) => ({ argv: r.argv, ok: r.ok, exitCode: r.exitCode, at: this.#clock.now().toISOString() }));
    for (const r of results) if (!r.ok) this.metrics.recordHookFailure(identity.name);
  }

  async #sleep(slot: Slot, until: Date): Promise<void> {
    if (this.#signal.aborted) return;
    const woken = new AbortController();
    slot.wake = () => woken.abort();
    if (slot.pendingWake) {
      slot.pendingWake = false;
      woken.abort();
    }
    try {
      await sleepUntil(until, this.#clock, { signal: AbortSignal.any([woken.signal, this.#signal]) });
    } catch {
      // Woken early or stopping: the loop re-checks.
    } finally {
      slot.wake = null;
    }
  }

  async #publish(): Promise<void> {
    const { ready, detail } = this.readiness();
    if (ready && !this.#readySent) {
      this.#readySent = true;
      await this.#notifier.ready(`credentials valid: ${detail.join('; ')}`);
      this.#logger.info('all credentials valid; ready');
    } else {
      await this.#notifier.status(ready ? `credentials valid: ${detail.join('; ')}` : `not ready: ${detail.join('; ')}`);
    }
    const identities: Record<string, IdentityState> = {};
    for (const [name, slot] of this.#slots) identities[name] = slot.state;
    await writeDaemonState(this.#config.stateDir, { pid: process.pid, updated: this.#clock.now().toISOString(), identities }).catch((err: Error) => this.#logger.warn(`cannot write status file: ${err.message}`));
  }

}

function splitListen(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  return { host: listen.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(listen.slice(at + 1)) };
}
