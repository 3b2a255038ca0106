/**
 * One worker process as the daemon sees it: the IPC channel it sends steps
 * on, what it sent and has not heard back about, whether it was asked to
 * stop, and how it ended. The daemon (daemon.ts) decides; this only keeps
 * the facts of one child process and stops it reliably.
 */
import type { ChildProcess } from 'node:child_process';
import type { Log } from '../log-lines.js';
import type { Clock } from '../time/clock.js';
import type { FromWorker, ToWorker } from './worker-protocol.js';

/** A worker asked to stop that is still there after this long is killed (its writes are atomic). */
export const STOP_GRACE_MS = 30_000;

/** A ChildProcess started with an IPC channel that speaks worker-protocol.ts (tests pass a stand-in). */
export type WorkerHandle = Pick<ChildProcess, 'send' | 'kill' | 'on' | 'once' | 'pid' | 'connected'>;

export interface WorkerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class WorkerProcess {
  /** Asked to stop: nothing more is sent to it. */
  stopping = false;
  /** It answered a step. */
  answered = false;
  /** Monotonic time each unanswered step was sent, by id (liveness). */
  readonly sentAt = new Map<number, number>();
  /** How it ended, once it has. */
  exit: WorkerExit | null = null;
  readonly exited: Promise<void>;
  readonly #handle: WorkerHandle;
  readonly #logger: Log;
  readonly #clock: Clock;

  constructor(handle: WorkerHandle, o: { logger: Log; clock: Clock; onMessage: (m: FromWorker) => void; onExit: () => void }) {
    this.#handle = handle;
    this.#logger = o.logger;
    this.#clock = o.clock;
    this.exited = new Promise<void>((resolve) => {
      const ended = (code: number | null, signal: NodeJS.Signals | null): void => {
        this.exit ??= { code, signal };
        resolve();
        o.onExit();
      };
      // 'close', not 'exit': it comes after the IPC channel closed, so every answer the worker sent has arrived
      // (one read after an 'exit' would be taken for a lost step's, and a forced renewal it answered repeated).
      handle.once('close', ended);
      handle.once('error', (err) => {
        this.#logger.error(`cannot start a worker: ${err.message}`);
        ended(null, null);
      });
    });
    handle.on('message', o.onMessage);
  }

  send(message: ToWorker): void {
    if (!this.#handle.connected) return;
    this.#handle.send(message, (err) => {
      if (err) this.#logger.debug(`cannot reach the worker: ${err.message}`);
    });
  }

  /** Asks it to stop (nothing due, or SIGTERM); still there after STOP_GRACE_MS, it is killed, so the next one can start. */
  stop(): void {
    if (this.stopping || this.exit) return;
    this.stopping = true;
    this.send({ kind: 'stop' });
    const timer = this.#clock.setTimeout(() => {
      this.#logger.warn(
        `a worker (pid ${this.#handle.pid}) was still there ${STOP_GRACE_MS / 1000}s after it was asked to stop; killing it`,
      );
      this.#handle.kill('SIGKILL');
    }, STOP_GRACE_MS);
    void this.exited.then(() => this.#clock.clearTimeout(timer));
  }
}
