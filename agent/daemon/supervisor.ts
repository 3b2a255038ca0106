/**
 * `kubeboot run` at rest: the long-lived process systemd supervises. It holds
 * what must outlive a pass — READY=1 and STATUS=, the watchdog, /healthz,
 * /readyz and /metrics, the status file, the file watcher, SIGHUP and
 * `kubeboot renew` — and starts a pass process (pass-process.ts) whenever
 * one is due: at the time the last pass asked for, on a file change, a
 * signal or a renewal request. Between passes it holds none of the
 * libraries a pass loads, which is what keeps an idle node agent small.
 * The CA check's periodic look it makes itself when the last pass left it
 * one (ca-look.ts): one GET, and a pass only when cluster-info changed.
 *
 * Guarantees carried over from the single-process daemon:
 * - READY=1 once the kubelet's credential is valid (the Reporter, fed by the pass);
 * - the watchdog pings only while the running pass, or the daemon's own
 *   sleep or look, shows progress within its bound;
 * - the kubelet credential last seen valid is kept here and handed to the
 *   next pass (Carry), so deleted files still do not strand the node;
 * - one pass at a time; a nudge that reaches a pass just as it ends is
 *   handed to the next one (numbered nudges);
 * - SIGTERM stops the running pass the way it stops any pass (or aborts a look), then the daemon.
 */
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { Config } from '../config/types.js';
import { identitiesFor } from '../config/identities.js';
import type { IdentityName } from '../identity.js';
import type { Log } from '../log-lines.js';
import { LIVENESS_GRACE_MS, passBoundMs, SLEEP_CHUNK_MS } from '../renewal/plan.js';
import { ensureDir } from '../store/atomic.js';
import { sweepTempFiles, writtenDirs } from '../store/sweep.js';
import { systemClock, type Clock } from '../time/clock.js';
import { abortAfter, delay } from '../time/timer.js';
import type { CaLook } from '../trust/keeper.js';
import { afterLook, atLookTime, type LookResult } from './ca-look.js';
import { lookAtClusterInfo } from './ca-look-get.js';
import { removePidFile, writePidFile } from './control.js';
import { startHttpServer, type StatusServer } from './http.js';
import { createMetrics, type KubebootMetrics } from './metrics.js';
import { createNotifier, startWatchdog, type Notifier } from './notify.js';
import { applyMetric, EMPTY_CARRY, type Carry, type FromPass, type IdentityViewWire, type Nudge, type ToPass } from './pass-protocol.js';
import { readinessOf, Reporter, type IdentityView, type Readiness } from './report.js';
import { createSelfWrites, watchCredentials, type CredentialWatcher } from './watch.js';

/** After a pass ended without finishing, the next one waits this long, doubling up to RESTART_CAP_MS. */
const RESTART_INITIAL_MS = 5_000;
const RESTART_CAP_MS = 5 * 60_000;
/**
 * After this many passes in a row ended without finishing (5 s + 10 s + … + 5 min:
 * about 10 minutes of trying), the daemon reports itself unhealthy, so the
 * watchdog restarts the unit and `systemctl status` shows it, rather than a
 * node that looks fine while nothing renews.
 */
const FAILED_PASSES_UNHEALTHY = 7;
/** A pass asked to stop, or at rest, that is still there after this long is killed (its writes are atomic). */
const STOP_GRACE_MS = 30_000;
/** The daemon's own GET of cluster-info gives up after this long, and a pass looks instead. */
export const LOOK_TIMEOUT_MS = 15_000;

/** One pass process, as the supervisor sees it (a ChildProcess started with an IPC channel). */
export type PassHandle = Pick<ChildProcess, 'send' | 'kill' | 'on' | 'once' | 'pid' | 'connected'>;

export interface SupervisorOptions {
  config: Config;
  logger: Log;
  signal: AbortSignal;
  reload: () => Promise<Config>;
  /** Starts one pass process; its IPC channel speaks pass-protocol.ts. */
  startPass: () => PassHandle;
  /** The daemon's own look at cluster-info (ca-look-get.ts); tests pass a fake. */
  lookAt?: (look: CaLook, signal: AbortSignal) => Promise<LookResult>;
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  random?: () => number;
}

interface Running {
  handle: PassHandle;
  /** Nudges sent to it, kept until it says which it applied. */
  sent: Nudge[];
  /** Per identity, the last nudge a finished step of this pass has answered. */
  done: Partial<Record<IdentityName, number>>;
  /** Whether it said it rests (and so ended on purpose). */
  rested: boolean;
  reported: boolean;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export class Supervisor {
  #config: Config;
  readonly #o: SupervisorOptions;
  readonly #logger: Log;
  readonly #clock: Clock;
  readonly #env: NodeJS.ProcessEnv;
  readonly #selfWrites = createSelfWrites();
  readonly #notifier: Notifier;
  readonly #reporter: Reporter;
  readonly metrics: KubebootMetrics;
  #views: IdentityViewWire[];
  #carry: Carry = EMPTY_CARRY;
  /** Nudges for the next pass. */
  #pending: Nudge[] = [];
  #seq = 0;
  /** When the last pass asked to be woken; null: a pass is due now. */
  #wakeAt: Date | null = null;
  /** The CA check's next look, the daemon's to make (ca-look.ts); null while a pass holds the check. */
  #look: CaLook | null = null;
  /** No pass starts before this (monotonic ms): the back-off after one ended without finishing. */
  #notBefore = 0;
  #failures = 0;
  /** Until a pass has reported, each pass is the first: it joins with --server/--token. */
  #reported = false;
  #running: Running | null = null;
  /** Monotonic time by which the running pass, or the daemon's own sleep, must show progress again. */
  #progressDue: number;
  #wake: (() => void) | null = null;
  #publishing: Promise<void> = Promise.resolve();

  constructor(options: SupervisorOptions) {
    this.#o = options;
    this.#config = options.config;
    this.#logger = options.logger;
    this.#clock = options.clock ?? systemClock;
    this.#env = options.env ?? process.env;
    this.#notifier = createNotifier({ env: this.#env, logger: this.#logger });
    this.#reporter = new Reporter({
      notifier: this.#notifier,
      logger: this.#logger,
      stateDir: () => this.#config.stateDir,
      now: () => this.#clock.now(),
    });
    this.#views = identitiesFor(this.#config).map((i) => ({
      name: i.name,
      validUntil: null,
      expiredAt: null,
      state: { nextRenewal: null, lastSuccess: null, lastError: null, pendingCsr: null, lastHooks: [] },
    }));
    this.#progressDue = this.#clock.monotonic() + passBoundMs(this.#config) + LIVENESS_GRACE_MS;
    this.metrics = createMetrics({
      certificates: () => this.#identityViews().map((v) => ({ identity: v.name, notAfter: v.validUntil })),
      now: () => this.#clock.now(),
    });
  }

  get config(): Config {
    return this.#config;
  }

  /** /readyz: every identity holds a certificate that is valid right now (not merely at the last pass). */
  readiness(): Readiness {
    return readinessOf(this.#identityViews());
  }

  /** /healthz and the watchdog: the running pass, or the daemon's own sleep, showed progress within its bound. */
  healthy(): boolean {
    return !this.#o.signal.aborted && this.#failures < FAILED_PASSES_UNHEALTHY && this.#clock.monotonic() <= this.#progressDue;
  }

  /** Wake identities now; `force` renews even a certificate that is not due. */
  nudge(names: IdentityName[] | 'all', force: boolean): void {
    const nudge: Nudge = { names, force, seq: ++this.#seq };
    const running = this.#running;
    if (running && !running.rested && running.handle.connected) {
      running.sent.push(nudge);
      this.#send(running, { kind: 'nudge', nudge });
      return;
    }
    this.#pending.push(nudge);
    this.#wake?.();
  }

  /** SIGHUP: re-read configuration, then renew everything now. */
  async reloadAndRenew(): Promise<void> {
    try {
      const next = await this.#o.reload();
      const before = identitiesFor(this.#config)
        .map((i) => i.name)
        .join(',');
      const after = identitiesFor(next)
        .map((i) => i.name)
        .join(',');
      if (before !== after) {
        // The watcher and the directories follow the identities the daemon started with.
        this.#logger.error(
          `configuration reload refused: the set of identities changed (${before} -> ${after}); restart kubeboot to add or remove identities`,
        );
      } else {
        this.#config = next;
        this.#logger.info('configuration reloaded; renewing now');
      }
    } catch (err) {
      this.#logger.error(`configuration reload failed, keeping the previous one: ${(err as Error).message}`);
    }
    const running = this.#running;
    if (running && !running.rested && running.handle.connected) {
      const nudge: Nudge = { names: 'all', force: true, seq: ++this.#seq };
      running.sent.push(nudge);
      this.#send(running, { kind: 'config', config: this.#config, seq: nudge.seq });
      return;
    }
    this.nudge('all', true);
  }

  /** Until stopped. Returns the exit code: 0, or the code the first pass ended with before it ever reported (a join that cannot work). */
  async run(): Promise<number> {
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
    const watchdog = startWatchdog(this.#notifier, { env: this.#env, clock: this.#clock, healthy: () => this.healthy() });
    try {
      if (config.listen) {
        const { host, port } = splitListen(config.listen);
        http = await startHttpServer({
          host,
          port,
          healthy: () => this.healthy(),
          readiness: () => this.readiness(),
          metrics: () => ({ contentType: this.metrics.contentType, body: this.metrics.render() }),
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
      while (!this.#o.signal.aborted) {
        if (this.#passDue()) {
          const code = await this.#pass();
          if (code !== null) return code;
        } else if (this.#look !== null && this.#clock.now() >= new Date(this.#look.at)) {
          await this.#lookItself(this.#look);
        } else {
          await this.#sleep();
        }
      }
      return 0;
    } finally {
      watchdog?.stop();
      await watcher?.close();
      await http?.close();
      await this.#publishing;
      await this.#notifier.stopping('stopping');
      await removePidFile(config.stateDir);
    }
  }

  #passDue(): boolean {
    if (this.#clock.monotonic() < this.#notBefore) return false;
    return this.#pending.length > 0 || this.#wakeAt === null || this.#clock.now() >= this.#wakeAt;
  }

  /** Until the next pass is due, in chunks that show the daemon alive; a nudge or a stop ends it early. */
  async #sleep(): Promise<void> {
    const woken = new AbortController();
    this.#wake = () => woken.abort();
    const signal = AbortSignal.any([woken.signal, this.#o.signal]);
    try {
      const nowMono = this.#clock.monotonic();
      const untilBackoff = Math.max(0, this.#notBefore - nowMono);
      const wakeAt = Math.min(this.#wakeAt?.getTime() ?? 0, this.#look ? Date.parse(this.#look.at) : Infinity);
      const untilWake = Math.max(0, wakeAt - this.#clock.now().getTime());
      const left = this.#pending.length > 0 ? untilBackoff : Math.max(untilBackoff, untilWake);
      const chunk = Math.min(left, SLEEP_CHUNK_MS);
      this.#progressDue = nowMono + chunk + LIVENESS_GRACE_MS;
      // Monotonic: a wall clock stepped back must not stretch a chunk past its liveness bound.
      await delay(chunk, this.#clock, { signal });
    } catch {
      // Nudged or stopping: the loop re-checks.
    } finally {
      this.#wake = null;
    }
  }

  /**
   * The CA check's look, made here: one GET bounded by LOOK_TIMEOUT_MS, aborted by a nudge or a stop.
   * Unchanged: the next look. Changed, unreadable, or past what a look may stand in for: a pass, now.
   */
  async #lookItself(look: CaLook): Promise<void> {
    const now = this.#clock.now();
    const due = atLookTime(look, now);
    let next: ReturnType<typeof afterLook> = due.kind === 'pass' ? due : { kind: 'look', look };
    if (due.kind === 'look') {
      const woken = new AbortController();
      this.#wake = () => woken.abort(new Error('a pass is due'));
      const timeout = abortAfter(LOOK_TIMEOUT_MS, this.#clock);
      // The look is the daemon's progress while it lasts: the watchdog's bound covers it.
      this.#progressDue = this.#clock.monotonic() + LOOK_TIMEOUT_MS + LIVENESS_GRACE_MS;
      let result: LookResult;
      try {
        result = await (this.#o.lookAt ?? lookAtClusterInfo)(look, AbortSignal.any([woken.signal, timeout.signal, this.#o.signal]));
      } finally {
        timeout.cancel();
        this.#wake = null;
      }
      // Stopping, or a nudge: the loop starts the pass it asked for (which takes over the CA check).
      if (this.#o.signal.aborted || woken.signal.aborted) return;
      const intervalMs = this.#config.caRotation.interval * 1000;
      next = afterLook(look, result, { now: this.#clock.now(), intervalMs, random: this.#o.random ?? Math.random });
      this.metrics.caLook(result.kind === 'failed' ? 'failed' : next.kind === 'look' ? 'unchanged' : 'changed');
    }
    if (next.kind === 'look') {
      this.#look = next.look;
      this.#logger.debug(`cluster-info unchanged; next look at ${next.look.at}`);
      return;
    }
    this.#look = null;
    this.#wakeAt = this.#clock.now();
    this.#logger.debug(`${next.why}; starting a pass for the CA check`);
  }

  /** Runs one pass process to its end. Returns an exit code only when the daemon must stop with it. */
  async #pass(): Promise<number | null> {
    const nudges = this.#pending;
    this.#pending = [];
    this.#wakeAt = null;
    this.#look = null;
    this.#progressDue = this.#clock.monotonic() + passBoundMs(this.#config) + LIVENESS_GRACE_MS;
    const first = !this.#reported;
    const handle = this.#o.startPass();
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      handle.once('exit', (code, signal) => resolve({ code, signal }));
      handle.once('error', (err) => {
        this.#logger.error(`cannot start a pass: ${err.message}`);
        resolve({ code: null, signal: null });
      });
    });
    const running: Running = { handle, sent: [...nudges], done: {}, rested: false, reported: false, exited };
    this.#running = running;
    handle.on('message', (message: FromPass) => this.#onMessage(running, message));
    this.#send(running, { kind: 'start', config: this.#config, carry: this.#carry, nudges, joinFirst: first });
    const onStop = (): void => this.#stopPass(running);
    this.#o.signal.addEventListener('abort', onStop, { once: true });
    let end: { code: number | null; signal: NodeJS.Signals | null };
    try {
      end = await exited;
    } finally {
      this.#o.signal.removeEventListener('abort', onStop);
      this.#running = null;
    }
    if (this.#o.signal.aborted) return null;
    // A pass that rested did its work, even if it had to be killed on its way out.
    if (running.rested) {
      this.#failures = 0;
      return null;
    }
    // Ended without finishing: what it was asked and had not answered is kept (a forced renewal it
    // already finished is not repeated), and it is tried again after a back-off.
    this.#pending = [...running.sent.filter((n) => this.#unanswered(n, running.done)), ...this.#pending];
    this.metrics.passFailed();
    // Its temp files (a kill lands between a write and its rename) would stay until the daemon restarts; no pass runs now.
    await sweepTempFiles(writtenDirs(this.#config), this.#logger).catch((err: Error) =>
      this.#logger.warn(`cannot remove the temp files of a pass that ended without finishing: ${err.message}`),
    );
    if (first && !running.reported && end.code !== null && end.code !== 0) return end.code;
    this.#failures += 1;
    const waitMs = Math.min(RESTART_CAP_MS, RESTART_INITIAL_MS * 2 ** (this.#failures - 1));
    this.#notBefore = this.#clock.monotonic() + waitMs;
    this.#logger.error(
      `a renewal pass ended without finishing (${end.signal ? `signal ${end.signal}` : `exit code ${end.code}`}); starting another in ${Math.round(waitMs / 1000)}s`,
    );
    return null;
  }

  #onMessage(running: Running, message: FromPass): void {
    switch (message.kind) {
      case 'report':
        running.reported = true;
        this.#reported = true;
        running.done = message.done;
        this.#views = message.views;
        this.#carry = message.carry;
        this.#publish();
        return;
      case 'progress':
        this.#progressDue = this.#clock.monotonic() + message.msLeft;
        return;
      case 'metric':
        applyMetric(this.metrics, message);
        return;
      case 'write':
        this.#selfWrites[message.op](message.path);
        return;
      case 'rest':
        running.rested = true;
        this.#reported = true;
        this.#carry = message.carry;
        this.#wakeAt = new Date(message.until);
        this.#look = message.look;
        // A nudge it had not applied when it decided to rest goes to the next pass.
        this.#pending = [...running.sent.filter((n) => n.seq > message.lastSeq), ...this.#pending];
        running.sent = [];
        this.#killIfLingering(running);
        this.metrics.passEnded(message.usage.cpuSeconds);
        this.#logger.debug(
          `pass ended (${message.usage.cpuSeconds.toFixed(2)} s CPU, peak RSS ${message.usage.maxRssMiB.toFixed(0)} MiB); every identity sleeps; next pass at ${message.until}${message.look ? `; the daemon looks at cluster-info itself at ${message.look.at}` : ''}`,
        );
        return;
    }
  }

  /** Whether some identity a nudge names has not finished a step since it arrived. */
  #unanswered(nudge: Nudge, done: Partial<Record<IdentityName, number>>): boolean {
    const names = nudge.names === 'all' ? identitiesFor(this.#config).map((i) => i.name) : nudge.names;
    return names.some((name) => (done[name] ?? 0) < nudge.seq);
  }

  #send(running: Running, message: ToPass): void {
    if (!running.handle.connected) return;
    running.handle.send(message, (err) => {
      if (err) this.#logger.debug(`cannot reach the pass: ${err.message}`);
    });
  }

  #stopPass(running: Running): void {
    this.#send(running, { kind: 'stop' });
    this.#killIfLingering(running);
  }

  /** A pass that said it ends, or was asked to, and is still there after STOP_GRACE_MS is killed: the next one must be able to start. */
  #killIfLingering(running: Running): void {
    const timer = this.#clock.setTimeout(() => {
      this.#logger.warn(`a pass (pid ${running.handle.pid}) was still there ${STOP_GRACE_MS / 1000}s after it ended its work; killing it`);
      running.handle.kill('SIGKILL');
    }, STOP_GRACE_MS);
    void running.exited.then(() => this.#clock.clearTimeout(timer));
  }

  /** The views of the last report, with validity re-checked against the clock now. */
  #identityViews(): IdentityView[] {
    const now = this.#clock.now();
    return this.#views.map((v) => {
      const notAfter = v.expiredAt === null ? null : new Date(v.expiredAt);
      return { name: v.name, validUntil: notAfter && notAfter > now ? notAfter : null, expiredAt: notAfter, state: v.state };
    });
  }

  /** One report at a time, in order; `run()` waits for the last before it returns. */
  #publish(): void {
    this.#publishing = this.#publishing
      .then(() => this.#reporter.publish(this.#identityViews()))
      .catch((err: Error) => {
        this.#logger.warn(`cannot report the credentials' state: ${err.message}`);
      });
  }
}

function splitListen(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  return { host: listen.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(listen.slice(at + 1)) };
}
