/**
 * A worker of `kubeboot run`, in its own process: started by the daemon
 * (daemon.ts) with the configuration, every identity's record and what the
 * last worker handed over, it runs each step it is sent — one identity
 * (renewal/step.ts) or the CA check (trust/keeper.ts `step`) — and answers
 * it by id with when to look again. It never sleeps on a deadline: the
 * daemon's schedule does, and says `stop` when nothing is due soon.
 * Everything it would tell the outside (records, metrics, its own writes)
 * goes to the daemon over the IPC channel.
 *
 * SIGTERM, SIGINT, a `stop` message or the daemon going away stop it: the
 * abort reaches every request and wait, and credential writes are atomic.
 */
import type { EventEmitter } from 'node:events';
import { deleteBootstrapNow, openPass, recoverNode } from '../bootstrap/pass.js';
import { IDENTITY_ROLES, identitiesFor, nodeIdentity } from '../config/identities.js';
import type { Config } from '../config/types.js';
import { assessNode, isNodeCredential, type Assessment } from '../credential/assess.js';
import { hookEnvironment, runHook } from '../credential/hooks.js';
import { KubebootError } from '../errors.js';
import type { IdentityName } from '../identity.js';
import { joinRequested } from '../bootstrap/join.js';
import { createLineLogger, type Log as Logger } from '../log-lines.js';
import { validUntil, type IdentityRecord } from '../renewal/record.js';
import { runIdentityStep, type StepDeps, type StepMemory } from '../renewal/step.js';
import type { WriteObserver } from '../store/atomic.js';
import { fileStore } from '../store/store.js';
import { systemClock, type Clock } from '../time/clock.js';
import { serializer } from '../store/serializer.js';
import { TrustKeeper } from '../trust/keeper.js';
import { removePidFile, WORKER_PID_FILE, writePidFile } from './control.js';
import { readinessOf } from './report.js';
import {
  carriedCredential,
  forwardingMetrics,
  restoredCredential,
  type Answer,
  type FromWorker,
  type HandOver,
  type Step,
  type ToWorker,
} from './worker-protocol.js';

export type Start = Extract<ToWorker, { kind: 'start' }>;

/**
 * The first message, which every worker waits for before it reads anything;
 * null when it is stopped first (SIGTERM to the unit's cgroup while the
 * daemon starts: a worker forked early, worker-start.ts, has nothing to say).
 */
export function startMessage(signal: AbortSignal, channel: EventEmitter = process): Promise<Start | null> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: ToWorker): void => {
      if (message.kind !== 'start') return;
      channel.off('message', onMessage);
      resolve(message);
    };
    channel.on('message', onMessage);
    channel.once('disconnect', () => reject(new KubebootError('the daemon went away before the worker started')));
    signal.addEventListener('abort', () => resolve(null), { once: true });
  });
}

function send(message: FromWorker): Promise<void> {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send!(message, undefined, {}, () => resolve());
  });
}

const observer: WriteObserver = {
  willWrite: (path) => void send({ kind: 'write', op: 'willWrite', path }),
  didWrite: (path) => void send({ kind: 'write', op: 'didWrite', path }),
  willRemove: (path) => void send({ kind: 'write', op: 'willRemove', path }),
};

export async function runWorkerProcess(): Promise<number> {
  if (!process.send) throw new KubebootError('`__worker` is started by `kubeboot run`, never by hand');
  const stop = new AbortController();
  const halt = (): void => stop.abort(new KubebootError('the worker was stopped'));
  // process.on, not once: systemd signals the whole cgroup and the daemon may also ask; a second SIGTERM must not kill mid-write.
  process.on('SIGTERM', halt);
  process.on('SIGINT', halt);
  // SIGHUP and SIGUSR2 are ignored from the first moment (cli/main.ts, worker-start.ts `ignoreDaemonSignals`).
  try {
    const start = await startMessage(stop.signal);
    if (start === null) return 0;
    // Only now: before the start, a daemon gone is an error (startMessage), not a stop.
    process.on('disconnect', halt);
    // log-lines.ts writes each line as it comes, the daemon's lines exactly (nothing to flush at the end):
    // winston and its stream stack cost every worker ~25 ms of start-up for the same lines.
    const logger = createLineLogger({ level: start.config.log.level, format: start.config.log.format });
    await work(start, logger, stop.signal, halt);
    const cpu = process.cpuUsage();
    await send({ kind: 'ended', usage: { cpuSeconds: (cpu.user + cpu.system) / 1e6, maxRssMiB: process.resourceUsage().maxRSS / 1024 } });
    return 0;
  } finally {
    // An IPC channel with listeners keeps the process alive, and the daemon waits for this one to exit.
    if (process.connected) process.disconnect();
  }
}

async function work(start: Start, logger: Logger, signal: AbortSignal, halt: () => void): Promise<void> {
  // Until the worker is ready, a stop is carried out and steps wait.
  const early: ToWorker[] = [];
  let deliver = (message: ToWorker): void => (message.kind === 'stop' ? halt() : void early.push(message));
  process.on('message', (message: ToWorker) => deliver(message));
  const config = start.config;
  if (config.log.level === 'debug') (await import('../kube/trace.js')).traceRequests(logger);
  await writePidFile(config.stateDir, WORKER_PID_FILE);
  try {
    const deps = { logger, clock: systemClock, signal, observer };
    // --server/--token: the daemon's first worker joins and writes the bootstrap kubeconfig its steps then find.
    if (start.joinFirst && joinRequested(config)) await openPass(config, deps, { join: true });
    await recoverNode(config, deps);
    const worker = new Worker(start, logger, signal);
    const running = new Set<Promise<void>>();
    deliver = (message) => {
      if (message.kind === 'step') {
        const done = worker.run(message.step).then((answer) => (answer ? send({ kind: 'answer', answer }) : undefined));
        running.add(done);
        void done.finally(() => running.delete(done));
      } else if (message.kind === 'config') worker.config = message.config;
      else if (message.kind === 'stop') halt();
    };
    for (const message of early.splice(0)) deliver(message);
    await new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })));
    await Promise.allSettled([...running]);
  } finally {
    await removePidFile(config.stateDir, WORKER_PID_FILE);
  }
}

/** The steps of one worker process: what they share, and how each one's outcome becomes an answer. */
export class Worker {
  config: Config;
  readonly #logger: Logger;
  readonly #signal: AbortSignal;
  readonly #clock: Clock = systemClock;
  readonly #records: Map<IdentityName, IdentityRecord>;
  readonly #memory: StepMemory;
  readonly #writes = serializer();
  /** The node's files, for every step and the CA keeper alike; each write told to the daemon's watcher. */
  readonly #store = fileStore({ observer });
  readonly #trust: TrustKeeper;
  readonly #metrics = forwardingMetrics((m) => void send(m));
  /** What this worker last found on disk per identity. */
  readonly #seen = new Map<IdentityName, Assessment | null>();
  /** Identities the CA check's re-issue slot forces, collected during one CA step. */
  #reissue: IdentityName[] = [];
  #cleaningUp = false;

  constructor(start: Start, logger: Logger, signal: AbortSignal) {
    this.config = start.config;
    this.#logger = logger;
    this.#signal = signal;
    this.#records = new Map(start.records.map((r) => [r.name, r]));
    this.#memory = {
      lastGoodKubelet: restoredCredential(start.config, start.handOver.lastGoodKubelet),
      provenKubeletPem: start.handOver.provenKubeletPem,
    };
    this.#trust = new TrustKeeper(
      {
        config: () => this.config,
        logger,
        clock: this.#clock,
        random: Math.random,
        signal,
        nodeCredential: () => {
          const held = this.#memory.lastGoodKubelet;
          return held && held.notAfter > this.#clock.now() ? held : null;
        },
        serialize: this.#writes,
        reissue: (identity) => void this.#reissue.push(identity),
        runCommands: (argvs) => this.#runCommands(argvs),
        store: this.#store,
        metrics: this.#metrics,
      },
      start.handOver.trust ?? undefined,
    );
  }

  /** One step, answered; null when the worker was stopped before it finished (the daemon hands it to the next worker). */
  async run(step: Step): Promise<Answer | null> {
    try {
      return step.target === 'ca' ? await this.#caStep(step) : await this.#identityStep(step, step.target);
    } catch (err) {
      if (!this.#signal.aborted) this.#logger.error(`${step.target}: ${(err as Error).message}`);
      return null;
    }
  }

  async #identityStep(step: Step, name: IdentityName): Promise<Answer | null> {
    const config = this.config;
    const identity = identitiesFor(config).find((i) => i.name === name);
    const record = this.#records.get(name);
    if (!identity || !record) return null;
    const deps: StepDeps = {
      logger: this.#logger,
      clock: this.#clock,
      random: Math.random,
      signal: this.#signal,
      metrics: this.#metrics,
      memory: this.#memory,
      observer,
      store: this.#store,
      serialize: this.#writes,
      onRecord: (r) => void send({ kind: 'record', record: r }),
    };
    const result = await runIdentityStep(config, identity, record, step.force, deps);
    this.#records.set(name, result.record);
    this.#seen.set(name, result.seen);
    const wake: Answer['wake'] = [];
    // The kubelet's client-CA file exists before READY=1 (trust/keeper.ts); a failure is logged, never holds the node back.
    const caPem = identity.requester === 'bootstrap-token' && result.seen?.state === 'usable' ? result.seen.cluster?.caPem : undefined;
    if (caPem !== undefined) await this.#trust.seedClientCa(caPem).catch((err: Error) => this.#logger.error(`CA rotation: ${err.message}`));
    if (result.issued) {
      // The new certificate may be under the new CA; and others may have waited for the kubelet's credential.
      wake.push('ca');
      if (identity.requester === 'bootstrap-token')
        for (const [other, r] of this.#records)
          if (IDENTITY_ROLES[other].requester === 'node-credential' && validUntil(r, this.#clock.now()) === null) wake.push(other);
    }
    await this.#removeBootstrapWhenDone(config);
    return { ...this.#answer(step), next: result.next.toISOString(), record: result.record, wake };
  }

  async #caStep(step: Step): Promise<Answer> {
    this.#reissue = [];
    const { next, look } = await this.#trust.step();
    return { ...this.#answer(step), next: next.toISOString(), look, force: this.#reissue };
  }

  #answer(step: Step): Answer {
    return { id: step.id, target: step.target, next: null, record: null, wake: [], force: [], look: null, handOver: this.#handOver() };
  }

  #handOver(): HandOver {
    return {
      lastGoodKubelet: carriedCredential(this.#memory.lastGoodKubelet),
      provenKubeletPem: this.#memory.provenKubeletPem,
      trust: this.#trust.memory,
    };
  }

  /**
   * Once every identity is valid, the bootstrap kubeconfig goes — also one
   * found at start or dropped in later next to valid credentials. A kubelet
   * certificate this daemon did not issue is proven first (one
   * SelfSubjectReview). A failure is logged and tried again after the next step.
   */
  async #removeBootstrapWhenDone(config: Config): Promise<void> {
    if (this.#cleaningUp || !readinessOf([...this.#records.values()], this.#clock.now()).ready) return;
    const name = nodeIdentity(config).name;
    let kubelet = this.#seen.get(name);
    if (kubelet === undefined) kubelet = (await assessNode(config, this.#clock.now(), undefined, this.#store)).kubelet;
    if (!kubelet || !isNodeCredential(kubelet)) return;
    this.#cleaningUp = true;
    try {
      const deps = { logger: this.#logger, clock: this.#clock, signal: this.#signal, observer, store: this.#store };
      await deleteBootstrapNow(config, deps, kubelet.certPem === this.#memory.provenKubeletPem ? null : kubelet);
    } catch (err) {
      if (!this.#signal.aborted) this.#logger.error((err as Error).message);
    } finally {
      this.#cleaningUp = false;
    }
  }

  /** Restart commands of a CA rotation, one after another; false when one failed. */
  async #runCommands(argvs: string[][]): Promise<boolean> {
    let ok = true;
    for (const argv of argvs) {
      const r = await runHook(argv, {
        timeoutMs: this.config.renewal.hookTimeout * 1000,
        signal: this.#signal,
        env: hookEnvironment(process.env),
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
}
