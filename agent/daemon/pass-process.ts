/**
 * One pass of `kubeboot run`, in its own process: started by the resting
 * daemon (supervisor.ts) with the configuration and what the last pass
 * handed over, it runs the renewal loops (loops.ts) until every identity
 * sleeps for longer than REST_AFTER_MS, says when to wake it again, and
 * ends. Everything it would tell the outside (readiness, metrics, its own
 * writes, liveness) goes to the daemon over the IPC channel.
 *
 * SIGTERM, SIGINT, a `stop` message or the daemon going away stop it the way
 * they stop any pass: the abort reaches every request and wait, and
 * credential writes are atomic.
 */
import { openPass, recoverNode } from '../bootstrap/pass.js';
import type { Config } from '../config/types.js';
import { KubebootError } from '../errors.js';
import { joinRequested } from '../join/prepare.js';
import { createLogger } from '../log.js';
import type { WriteObserver } from '../store/atomic.js';
import { systemClock } from '../time/clock.js';
import { PASS_PID_FILE, removePidFile, writePidFile } from './control.js';
import { RenewalLoops } from './loops.js';
import { forwardingMetrics, REST_AFTER_MS, type FromPass, type ToPass } from './pass-protocol.js';

/** The first message, which every pass waits for before it reads anything. */
function startMessage(): Promise<Extract<ToPass, { kind: 'start' }>> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: ToPass): void => {
      if (message.kind !== 'start') return;
      process.off('message', onMessage);
      resolve(message);
    };
    process.on('message', onMessage);
    process.once('disconnect', () => reject(new KubebootError('the daemon went away before the pass started')));
  });
}

function send(message: FromPass): Promise<void> {
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

export async function runPassProcess(): Promise<number> {
  if (!process.send) throw new KubebootError('`__pass` is started by `kubeboot run`, never by hand');
  const stop = new AbortController();
  const halt = (): void => stop.abort(new KubebootError('the pass was stopped'));
  // process.on, not once: systemd signals the whole cgroup and the daemon may also ask; a second SIGTERM must not kill mid-write.
  process.on('SIGTERM', halt);
  process.on('SIGINT', halt);
  process.on('disconnect', halt);
  // Meant for the daemon (`systemctl kill -s HUP` reaches the whole cgroup): their default action would kill the pass.
  process.on('SIGHUP', () => undefined);
  process.on('SIGUSR2', () => undefined);
  try {
    return await runPass(stop, halt);
  } finally {
    // An IPC channel with listeners keeps the process alive, and the daemon waits for this one to exit,
    // whether the pass rested or failed.
    if (process.connected) process.disconnect();
  }
}

async function runPass(stop: AbortController, halt: () => void): Promise<number> {
  const start = await startMessage();
  // Until the loops exist, a stop is carried out and anything else waits for them.
  const early: ToPass[] = [];
  let deliver = (message: ToPass): void => (message.kind === 'stop' ? halt() : void early.push(message));
  process.on('message', (message: ToPass) => deliver(message));
  const config: Config = start.config;
  const logger = createLogger({ level: config.log.level, format: config.log.format });
  try {
    if (config.log.level === 'debug') (await import('../kube/trace.js')).traceRequests(logger);
    await writePidFile(config.stateDir, PASS_PID_FILE);
    try {
      const deps = { logger, clock: systemClock, signal: stop.signal, observer };
      // --server/--token: the daemon's first pass joins and writes the bootstrap kubeconfig the loops then find.
      if (start.joinFirst && joinRequested(config)) await openPass(config, deps, { join: true });
      await recoverNode(config, deps);
      const loops = new RenewalLoops({
        config,
        logger,
        signal: stop.signal,
        carry: start.carry,
        restAfterMs: REST_AFTER_MS,
        sink: {
          metrics: forwardingMetrics((m) => void send(m)),
          report: (views, carry, done) =>
            send({
              kind: 'report',
              views: views.map((v) => ({
                name: v.name,
                validUntil: v.validUntil?.toISOString() ?? null,
                expiredAt: v.expiredAt?.toISOString() ?? null,
                state: v.state,
              })),
              carry,
              done,
            }),
          progress: (msLeft) => void send({ kind: 'progress', msLeft }),
          observer,
        },
      });
      for (const nudge of start.nudges) loops.apply(nudge);
      deliver = (message: ToPass) => {
        if (message.kind === 'nudge') loops.apply(message.nudge);
        else if (message.kind === 'config') loops.reconfigure(message.config, message.seq);
        else if (message.kind === 'stop') halt();
      };
      for (const message of early.splice(0)) deliver(message);
      const end = await loops.run();
      if (end.kind === 'resting') {
        const cpu = process.cpuUsage();
        const usage = { cpuSeconds: (cpu.user + cpu.system) / 1e6, maxRssMiB: process.resourceUsage().maxRSS / 1024 };
        await send({ kind: 'rest', until: end.until.toISOString(), look: end.look, carry: end.carry, lastSeq: end.lastSeq, usage });
      }
      return 0;
    } finally {
      await removePidFile(config.stateDir, PASS_PID_FILE);
    }
  } finally {
    await new Promise<void>((resolve) => logger.on('finish', resolve).end());
  }
}
