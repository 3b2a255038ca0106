/**
 * systemd readiness and watchdog (sd_notify protocol). Node cannot send unix
 * datagrams, so each message goes through the `systemd-notify` binary as a
 * child process; the unit therefore needs `NotifyAccess=all` (the sender is
 * the child, not the main PID). systemd-notify (systemd ≥ 246) waits until
 * systemd has read the message, and handles path and abstract (`@name`)
 * sockets alike. Everything is a no-op when NOTIFY_SOCKET is unset.
 */
import { execFile } from 'node:child_process';
import type { Log } from '../log-lines.js';
import { systemClock, type Clock, type TimerHandle } from '../time/clock.js';
import { scrub } from '../redact.js';

export type NotifyExec = (file: string, args: string[], env: NodeJS.ProcessEnv) => Promise<void>;

export interface Notifier {
  /** False when not started by systemd with Type=notify. */
  readonly enabled: boolean;
  ready(status: string): Promise<boolean>;
  status(text: string): Promise<boolean>;
  watchdog(): Promise<boolean>;
  stopping(status?: string): Promise<boolean>;
}

export interface NotifierOptions {
  env: NodeJS.ProcessEnv;
  logger: Log;
  exec?: NotifyExec;
  /** Path or name of the systemd-notify binary. */
  binary?: string;
}

const defaultExec: NotifyExec = (file, args, env) =>
  new Promise((resolve, reject) => {
    execFile(file, args, { env, timeout: 15_000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`${String(stderr).trim() || err.message}`, { cause: err }));
      else resolve();
    });
  });

/**
 * The protocol separates assignments by newlines; a status must stay one
 * line. Scrubbed: STATUS= is readable by any local user (systemctl status).
 */
function oneLine(text: string): string {
  return scrub(text).replace(/[\r\n]+/g, ' ');
}

export function createNotifier(options: NotifierOptions): Notifier {
  const socket = options.env.NOTIFY_SOCKET;
  const exec = options.exec ?? defaultExec;
  const binary = options.binary ?? 'systemd-notify';
  const env: NodeJS.ProcessEnv = { NOTIFY_SOCKET: socket, PATH: options.env.PATH ?? '/usr/bin:/bin' };

  const send = async (args: string[]): Promise<boolean> => {
    if (!socket) return false;
    try {
      await exec(binary, args, env);
      return true;
    } catch (err) {
      // Never fatal: a lost STATUS is cosmetic, and a lost READY shows up as
      // systemd's own start timeout, which names the unit.
      options.logger.warn('systemd notification failed', { args, error: (err as Error).message });
      return false;
    }
  };

  return {
    enabled: Boolean(socket),
    ready: (status) => send(['--ready', `--status=${oneLine(status)}`]),
    status: (text) => send([`--status=${oneLine(text)}`]),
    watchdog: () => send(['WATCHDOG=1']),
    // Assignment form: `--stopping` only exists from systemd 253 on.
    stopping: (status) => send(status === undefined ? ['STOPPING=1'] : ['STOPPING=1', `--status=${oneLine(status)}`]),
  };
}

/**
 * matches sd_watchdog_enabled(3): the watchdog is on when WATCHDOG_USEC is a
 * positive integer and WATCHDOG_PID, if set, is this process. Returns the
 * ping interval in ms — half the timeout, as sd_watchdog_enabled advises.
 */
export function watchdogIntervalMs(env: NodeJS.ProcessEnv, pid: number): number | null {
  const usec = env.WATCHDOG_USEC;
  if (!usec || !/^\d+$/.test(usec) || Number(usec) === 0) return null;
  if (env.WATCHDOG_PID !== undefined && env.WATCHDOG_PID !== String(pid)) return null;
  return Math.max(1, Math.floor(Number(usec) / 2000));
}

export interface Watchdog {
  stop(): void;
}

/**
 * Pings at once, then every interval while `healthy()` holds. The next ping is armed only after the
 * previous systemd-notify finished, so a slow one never piles up children.
 * Returns null when the watchdog is off.
 */
export function startWatchdog(
  notifier: Notifier,
  options: {
    env: NodeJS.ProcessEnv;
    pid?: number;
    clock?: Clock;
    /** When it returns false the ping is skipped, so systemd restarts a stuck daemon. */
    healthy?: () => boolean;
  },
): Watchdog | null {
  const interval = watchdogIntervalMs(options.env, options.pid ?? process.pid);
  if (interval === null || !notifier.enabled) return null;
  const clock = options.clock ?? systemClock;
  let handle: TimerHandle | undefined;
  let stopped = false;
  const healthy = options.healthy ?? (() => true);
  const ping = (): void => {
    const sent = healthy() ? notifier.watchdog() : Promise.resolve(false);
    void sent.finally(() => {
      if (!stopped) handle = clock.setTimeout(ping, interval);
    });
  };
  ping();
  return {
    stop() {
      stopped = true;
      if (handle) clock.clearTimeout(handle);
    },
  };
}
