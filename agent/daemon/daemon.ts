/**
 * `kubeboot run`: the long-lived process systemd supervises, and the agent's
 * only sleeper. It holds the schedule (schedule.ts) — which step is due for
 * which identity and for the CA check — and what must outlive a worker: the
 * identities' records, READY=1 and STATUS=, the watchdog, /healthz, /readyz
 * and /metrics, the status file, the file watcher, SIGHUP and `kubeboot
 * renew`. A due step goes to a worker (worker.ts), started for it; once
 * nothing is due for REST_AFTER_MS the worker ends, so an idle node holds
 * none of the libraries a step loads. The CA check's periodic look it makes
 * itself when the last CA step left it one (ca-look.ts). What this keeps
 * true is listed, with its tests, in docs/architecture.md.
 */
import { identitiesFor } from '../config/identities.js';
import type { Config } from '../config/types.js';
import type { IdentityName } from '../identity.js';
import type { Log } from '../log-lines.js';
import { progressBy, SLEEP_CHUNK_MS, stepBoundMs } from '../renewal/plan.js';
import { emptyRecord, validUntil, type IdentityRecord } from '../renewal/record.js';
import { ensureNodeDirs, sweepTempFiles, writtenDirs } from '../store/sweep.js';
import { systemClock, type Clock } from '../time/clock.js';
import { abortAfter, delay } from '../time/timer.js';
import type { CaLook } from '../trust/keeper.js';
import { afterLook, atLookTime, type LookResult } from './ca-look.js';
import { lookAtClusterInfo } from './ca-look-get.js';
import { removePidFile, writePidFile } from './control.js';
import { createMetrics, type KubebootMetrics } from './metrics.js';
import { readinessOf, Reporter } from './report.js';
import * as schedule from './schedule.js';
import { StatusListener, type Readiness } from '../service/http.js';
import { createNotifier, startWatchdog, type Notifier } from '../service/notify.js';
import { createSelfWrites, watchCredentials, type CredentialWatcher } from './watch.js';
import { WorkerProcess, type WorkerHandle } from './worker-process.js';
import { applyMetric, EMPTY_HAND_OVER, type FromWorker, type HandOver } from './worker-protocol.js';

export type { WorkerHandle };

/** A worker ends once nothing is due for this long; a shorter wait keeps it. */
export const REST_AFTER_MS = 2 * 60_000;
/** After a worker ended without answering its steps, the next one waits this long, doubling up to RESTART_CAP_MS. */
const RESTART_INITIAL_MS = 5_000;
const RESTART_CAP_MS = 5 * 60_000;
/**
 * After this many workers in a row ended without answering (5 s + 10 s + … +
 * 5 min: about 10 minutes of trying), the daemon reports itself unhealthy, so
 * the watchdog restarts the unit and `systemctl status` shows it, rather than
 * a node that looks fine while nothing renews.
 */
const FAILED_WORKERS_UNHEALTHY = 7;
/** The daemon's own GET of cluster-info gives up after this long, and a worker looks instead. */
export const LOOK_TIMEOUT_MS = 15_000;

export interface DaemonOptions {
  config: Config;
  logger: Log;
  signal: AbortSignal;
  reload: () => Promise<Config>;
  /** Starts one worker process; its IPC channel speaks worker-protocol.ts. */
  startWorker: () => WorkerHandle;
  /** The daemon's own look at cluster-info (ca-look-get.ts); tests pass a fake. */
  lookAt?: (look: CaLook, signal: AbortSignal) => Promise<LookResult>;
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  random?: () => number;
}

export class Daemon {
  #config: Config;
  readonly #o: DaemonOptions;
  readonly #logger: Log;
  readonly #clock: Clock;
  readonly #env: NodeJS.ProcessEnv;
  readonly #selfWrites = createSelfWrites();
  readonly #notifier: Notifier;
  readonly #reporter: Reporter;
  readonly metrics: KubebootMetrics;
  #schedule: schedule.Schedule;
  readonly #records: Map<IdentityName, IdentityRecord>;
  #handOver: HandOver = EMPTY_HAND_OVER;
  #worker: WorkerProcess | null = null;
  /** No worker starts before this (monotonic ms): the back-off after one ended without answering. */
  #notBefore = 0;
  #failures = 0;
  /** Until a worker has answered a step, each worker is the first: it joins with --server/--token. */
  #answered = false;
  /** Monotonic time by which the daemon's own sleep or look must show progress again. */
  #progressDue: number;
  /** Ends the current sleep or look early; set when something changed meanwhile. */
  #wake: (() => void) | null = null;
  #woken = false;
  #publishing: Promise<void> = Promise.resolve();
  #listener: StatusListener | null = null;

  constructor(options: DaemonOptions) {
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
    this.#records = new Map(identitiesFor(this.#config).map((i) => [i.name, emptyRecord(i.name)]));
    this.#schedule = schedule.initialSchedule(schedule.targetsFor(this.#config), this.#clock.now().getTime());
    this.#progressDue = progressBy(this.#clock.monotonic(), stepBoundMs(this.#config));
    this.metrics = createMetrics({
      certificates: () => [...this.#records.values()].map((r) => ({ identity: r.name, notAfter: validUntil(r, this.#clock.now()) })),
      now: () => this.#clock.now(),
    });
  }

  get config(): Config {
    return this.#config;
  }

  /** /readyz: every identity holds a certificate that is valid right now (not merely at the last step). */
  readiness(): Readiness {
    return readinessOf([...this.#records.values()], this.#clock.now());
  }

  /** /healthz and the watchdog: every step in flight within its bound, and the daemon's own sleep or look on time. */
  healthy(): boolean {
    if (this.#o.signal.aborted || this.#failures >= FAILED_WORKERS_UNHEALTHY) return false;
    const now = this.#clock.monotonic();
    const bound = stepBoundMs(this.#config);
    for (const sent of this.#worker?.sentAt.values() ?? []) if (now > progressBy(sent, bound)) return false;
    return now <= this.#progressDue;
  }

  /** Wake identities now; `force` renews even a certificate that is not due. */
  nudge(names: IdentityName[] | 'all', force: boolean): void {
    this.#schedule = schedule.nudge(this.#schedule, names, force, this.#clock.now().getTime());
    this.#wakeUp();
  }

  /** SIGHUP: re-read configuration, then renew everything now. */
  async reloadAndRenew(): Promise<void> {
    try {
      const next = await this.#o.reload();
      const [before, after] = [this.#config, next].map((c) =>
        identitiesFor(c)
          .map((i) => i.name)
          .join(','),
      );
      if (before !== after) {
        // The watcher, the directories and the schedule follow the identities the daemon started with.
        this.#logger.error(
          `configuration reload refused: the set of identities changed (${before} -> ${after}); restart kubeboot to add or remove identities`,
        );
      } else {
        this.#config = next;
        // CA rotation turned on or off takes effect now (the identities cannot change, above).
        this.#schedule = schedule.withTargets(this.#schedule, schedule.targetsFor(next), this.#clock.now().getTime());
        this.#logger.info('configuration reloaded; renewing now');
        const worker = this.#worker;
        if (worker && !worker.stopping) worker.send({ kind: 'config', config: next });
      }
    } catch (err) {
      this.#logger.error(`configuration reload failed, keeping the previous one: ${(err as Error).message}`);
    }
    this.nudge('all', true);
  }

  /** Until stopped. Returns the exit code: 0, or the code the first worker ended with before it ever answered (a join that cannot work). */
  async run(): Promise<number> {
    const config = this.#config;
    // The watcher needs the directories to exist.
    await ensureNodeDirs(config);
    await writePidFile(config.stateDir);
    let watcher: CredentialWatcher | null = null;
    const watchdog = startWatchdog(this.#notifier, { env: this.#env, clock: this.#clock, healthy: () => this.healthy() });
    const onStop = (): void => this.#wakeUp();
    this.#o.signal.addEventListener('abort', onStop, { once: true });
    try {
      // Not a start condition: a port held by someone else is retried by this loop (#turn) while the work goes on.
      if (config.listen) {
        this.#listener = new StatusListener(config.listen, {
          healthy: () => this.healthy(),
          readiness: () => this.readiness(),
          metrics: () => ({ contentType: this.metrics.contentType, body: this.metrics.render() }),
          logger: this.#logger,
          clock: this.#clock,
          ...(this.#o.random ? { random: this.#o.random } : {}),
          onFailure: () => this.metrics.statusListenerFailed(),
          onChange: (problem) => {
            this.#reporter.listenerProblem = problem === null ? null : `/healthz, /readyz and /metrics unavailable: ${problem}`;
            // Before the first answer there is nothing to report on yet; the first report carries it.
            if (this.#answered) this.#publish();
            else void this.#notifier.status(this.#reporter.withListener('checking credentials'));
          },
        });
        await this.#listener.attempt();
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
      await this.#notifier.status(this.#reporter.withListener('checking credentials'));
      while (!this.#o.signal.aborted) {
        const code = await this.#turn();
        if (code !== null) return code;
      }
      await this.#stopWorker();
      return 0;
    } finally {
      this.#o.signal.removeEventListener('abort', onStop);
      watchdog?.stop();
      await watcher?.close();
      await this.#listener?.close();
      await this.#publishing;
      await this.#notifier.stopping('stopping');
      await removePidFile(config.stateDir);
    }
  }

  /** One turn of the only loop: reap, send what is due, rest, look or start a worker, then sleep until something changes. */
  async #turn(): Promise<number | null> {
    this.#woken = false;
    const listenAt = this.#listener?.retryAt ?? null;
    if (listenAt !== null && this.#clock.monotonic() >= listenAt) await this.#listener!.attempt();
    const worker = this.#worker;
    if (worker?.exit) return this.#reap(worker);
    const now = this.#clock.now().getTime();
    if (worker && !worker.stopping) {
      this.#sendDue(worker, now);
      // Nothing due soon: the worker ends.
      if (schedule.mayRest(this.#schedule, now, REST_AFTER_MS)) worker.stop();
    } else if (!worker) {
      if (schedule.needsWorker(this.#schedule, now) && this.#clock.monotonic() >= this.#notBefore) {
        this.#sendDue(this.#startWorker(), now);
        return null;
      }
      if (schedule.looksItself(this.#schedule, now)) {
        await this.#lookItself();
        return null;
      }
    }
    await this.#sleep();
    return null;
  }

  #sendDue(worker: WorkerProcess, now: number): void {
    const { schedule: next, steps } = schedule.send(this.#schedule, schedule.due(this.#schedule, now));
    this.#schedule = next;
    for (const step of steps) {
      worker.sentAt.set(step.id, this.#clock.monotonic());
      worker.send({ kind: 'step', step });
    }
  }

  #startWorker(): WorkerProcess {
    const worker: WorkerProcess = new WorkerProcess(this.#o.startWorker(), {
      logger: this.#logger,
      clock: this.#clock,
      onMessage: (message) => this.#onMessage(worker, message),
      onExit: () => this.#wakeUp(),
    });
    this.#worker = worker;
    const records = [...this.#records.values()];
    worker.send({ kind: 'start', config: this.#config, records, handOver: this.#handOver, joinFirst: !this.#answered });
    return worker;
  }

  /** A worker ended. Returns an exit code only when the daemon must stop with it. */
  async #reap(worker: WorkerProcess): Promise<number | null> {
    this.#worker = null;
    const end = worker.exit!;
    const unanswered = schedule.inFlight(this.#schedule).length;
    if (worker.stopping && unanswered === 0) {
      this.#failures = 0;
      return null;
    }
    // Ended without answering: its steps are due again (a forced renewal it answered is not), after a back-off.
    this.#schedule = schedule.lost(this.#schedule, this.#clock.now().getTime());
    if (this.#o.signal.aborted) return null;
    this.metrics.workerFailed();
    // Its temp files (a kill lands between a write and its rename) would stay until the daemon restarts; no worker runs now.
    await sweepTempFiles(writtenDirs(this.#config), this.#logger).catch((err: Error) =>
      this.#logger.warn(`cannot remove the temp files of a worker that ended without finishing: ${err.message}`),
    );
    if (!this.#answered && end.code !== null && end.code !== 0) return end.code;
    this.#failures += 1;
    const waitMs = Math.min(RESTART_CAP_MS, RESTART_INITIAL_MS * 2 ** (this.#failures - 1));
    this.#notBefore = this.#clock.monotonic() + waitMs;
    this.#logger.error(
      `a worker ended without finishing its steps (${end.signal ? `signal ${end.signal}` : `exit code ${end.code}`}); starting another in ${Math.round(waitMs / 1000)}s`,
    );
    return null;
  }

  #onMessage(worker: WorkerProcess, message: FromWorker): void {
    switch (message.kind) {
      case 'answer': {
        const { answer } = message;
        // Only an answer to a step this worker holds counts (the schedule would ignore any other, so must the records).
        if (!worker.sentAt.delete(answer.id)) return;
        worker.answered = true;
        this.#answered = true;
        this.#schedule = schedule.answered(this.#schedule, answer, this.#clock.now().getTime());
        this.#handOver = answer.handOver;
        if (answer.record) this.#records.set(answer.record.name, answer.record);
        this.#publish();
        this.#wakeUp();
        return;
      }
      case 'record':
        this.#records.set(message.record.name, message.record);
        this.#publish();
        return;
      case 'metric':
        applyMetric(this.metrics, message);
        return;
      case 'write':
        this.#selfWrites[message.op](message.path);
        return;
      case 'ended':
        this.metrics.workerEnded(message.usage.cpuSeconds);
        this.#logger.debug(
          `worker ended (${message.usage.cpuSeconds.toFixed(2)} s CPU, peak RSS ${message.usage.maxRssMiB.toFixed(0)} MiB)${this.#restingLine()}`,
        );
        return;
    }
  }

  #restingLine(): string {
    const at = schedule.wakeAt(this.#schedule);
    const look = this.#schedule.look;
    const next = at === null ? '' : `; next step at ${new Date(at).toISOString()}`;
    return `${next}${look ? `; the daemon looks at cluster-info itself at ${look.at}` : ''}`;
  }

  /** SIGTERM: the worker is asked to stop the way it stops any step, and the daemon waits for it. */
  async #stopWorker(): Promise<void> {
    this.#worker?.stop();
    await this.#worker?.exited;
    this.#worker = null;
  }

  /** Until the next step is due (or the back-off ends), in chunks that show the daemon alive; any change ends it early. */
  async #sleep(): Promise<void> {
    if (this.#woken || this.#o.signal.aborted) return;
    const woken = new AbortController();
    this.#wake = () => woken.abort();
    try {
      const nowMono = this.#clock.monotonic();
      const at = schedule.wakeAt(this.#schedule);
      let left = at === null ? SLEEP_CHUNK_MS : Math.max(0, at - this.#clock.now().getTime());
      // A worker on its way out: its exit wakes the loop.
      if (this.#worker?.stopping) left = SLEEP_CHUNK_MS;
      else if (!this.#worker) left = Math.max(left, this.#notBefore - nowMono);
      // The status listener's next attempt wakes the loop too.
      const listenAt = this.#listener?.retryAt ?? null;
      if (listenAt !== null) left = Math.min(left, Math.max(0, listenAt - nowMono));
      const chunk = Math.min(left, SLEEP_CHUNK_MS);
      this.#progressDue = progressBy(nowMono, chunk);
      // Monotonic: a wall clock stepped back must not stretch a chunk past its liveness bound.
      await delay(chunk, this.#clock, { signal: AbortSignal.any([woken.signal, this.#o.signal]) });
    } catch {
      // Woken or stopping: the loop looks again.
    } finally {
      this.#wake = null;
    }
  }

  #wakeUp(): void {
    this.#woken = true;
    this.#wake?.();
  }

  /**
   * The CA check's look, made here: one GET bounded by LOOK_TIMEOUT_MS, aborted by a nudge or a stop.
   * Unchanged: the next look. Changed, unreadable, or past what a look may stand in for: a worker, now.
   */
  async #lookItself(): Promise<void> {
    const look = this.#schedule.look!;
    const at = atLookTime(look, this.#clock.now());
    if (at.kind === 'worker') return this.#caToWorker(at.why);
    const woken = new AbortController();
    this.#wake = () => woken.abort(new Error('a step is due'));
    const timeout = abortAfter(LOOK_TIMEOUT_MS, this.#clock);
    // The look is the daemon's progress while it lasts: the watchdog's bound covers it.
    this.#progressDue = progressBy(this.#clock.monotonic(), LOOK_TIMEOUT_MS);
    let result: LookResult;
    try {
      result = await (this.#o.lookAt ?? lookAtClusterInfo)(look, AbortSignal.any([woken.signal, timeout.signal, this.#o.signal]));
    } finally {
      timeout.cancel();
      this.#wake = null;
    }
    // Stopping, or a nudge: the next turn starts the worker it asked for, which takes over the CA check.
    if (this.#o.signal.aborted || woken.signal.aborted) return;
    const intervalMs = this.#config.caRotation.interval * 1000;
    const next = afterLook(look, result, { now: this.#clock.now(), intervalMs, random: this.#o.random ?? Math.random });
    this.metrics.caLook(result.kind === 'failed' ? 'failed' : next.kind === 'look' ? 'unchanged' : 'changed');
    if (next.kind === 'worker') return this.#caToWorker(next.why);
    this.#schedule = schedule.lookAgain(this.#schedule, next.look);
    this.#logger.debug(`cluster-info unchanged; next look at ${next.look.at}`);
  }

  #caToWorker(why: string): void {
    this.#schedule = schedule.caDueNow(this.#schedule, this.#clock.now().getTime());
    this.#logger.debug(`${why}; starting a worker for the CA check`);
  }

  /** One report at a time, in order; `run()` waits for the last before it returns. */
  #publish(): void {
    this.#publishing = this.#publishing
      .then(() => this.#reporter.publish([...this.#records.values()]))
      .catch((err: Error) => {
        this.#logger.warn(`cannot report the credentials' state: ${err.message}`);
      });
  }
}
