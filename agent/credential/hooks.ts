/**
 * Post-renewal hooks: argv lists run without a shell (like smallstep's
 * `step ca renew --exec`), bounded by a timeout. A hook's failure is logged
 * and counted, never fatal: the new certificate is already in place.
 *
 * spawn rather than execFile: execFile kills a child whose output exceeds
 * maxBuffer, and a chatty hook must not fail for that. Only the first
 * STDERR_LIMIT bytes of stderr are kept; stdout is discarded.
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { currentCertPath, type Identity } from '../identity.js';
import type { Logger } from '../log.js';

export const STDERR_LIMIT = 2048;
export const DEFAULT_HOOK_TIMEOUT_MS = 60_000;
/** Time between SIGTERM and SIGKILL for a hook that outlived its timeout. */
export const KILL_GRACE_MS = 5_000;

export interface HookResult {
  argv: string[];
  ok: boolean;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  durationMs: number;
  /** First STDERR_LIMIT bytes of stderr. */
  stderr: string;
  /** Set when the hook could not be started at all (e.g. ENOENT). */
  error?: string;
}

export interface HookOptions {
  timeoutMs?: number;
  killGraceMs?: number;
  env?: NodeJS.ProcessEnv;
  /** Stopping kubeboot stops its hooks too, so systemd's stop timeout is not spent waiting for them. */
  signal?: AbortSignal;
}

export function runHook(argv: string[], options: HookOptions = {}): Promise<HookResult> {
  const [file, ...args] = argv;
  const started = performance.now();
  const base = { argv, ok: false, exitCode: null, signal: null, timedOut: false, stderr: '' };
  if (file === undefined) return Promise.resolve({ ...base, durationMs: 0, error: 'empty hook command' });

  return new Promise((resolve) => {
    // Own process group, so a timeout also reaches whatever a hook script started.
    // cwd /: a relative hook path never means whatever directory `kubeboot renew` was started in.
    const child = spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe'], detached: true, cwd: '/', env: options.env ?? process.env });
    const chunks: Buffer[] = [];
    let kept = 0;
    let timedOut = false;
    let spawnError: string | undefined;
    const timers: NodeJS.Timeout[] = [];

    const killGroup = (signal: NodeJS.Signals): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, signal);
      } catch {
        // already gone
      }
    };

    child.stderr.on('data', (chunk: Buffer) => {
      if (kept >= STDERR_LIMIT) return;
      chunks.push(chunk.subarray(0, STDERR_LIMIT - kept));
      kept += Math.min(chunk.length, STDERR_LIMIT - kept);
    });
    child.on('error', (err) => (spawnError = err.message));
    // A grandchild that keeps stderr open would delay 'close'; once the hook
    // itself has exited, stop waiting for it shortly after.
    child.on('exit', () => timers.push(setTimeout(() => child.stderr.destroy(), 1_000)));
    child.on('close', (code, signal) => {
      for (const timer of timers) clearTimeout(timer);
      resolve({
        argv,
        ok: code === 0 && !timedOut,
        exitCode: code,
        signal,
        timedOut,
        durationMs: Math.round(performance.now() - started),
        stderr: Buffer.concat(chunks).toString('utf8'),
        ...(spawnError === undefined ? {} : { error: spawnError }),
      });
    });

    const stop = (): void => {
      killGroup('SIGTERM');
      timers.push(setTimeout(() => killGroup('SIGKILL'), options.killGraceMs ?? KILL_GRACE_MS));
    };
    timers.push(
      setTimeout(() => {
        timedOut = true;
        stop();
      }, options.timeoutMs ?? DEFAULT_HOOK_TIMEOUT_MS),
    );
    if (options.signal?.aborted) stop();
    else options.signal?.addEventListener('abort', stop, { once: true });
    child.on('close', () => options.signal?.removeEventListener('abort', stop));
  });
}

/** Used when kubeboot itself has no PATH (systemd gives services one, but a bare exec may not). */
export const HOOK_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** What a hook inherits from kubeboot's environment; nothing else crosses. */
const INHERITED = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TZ', 'USER', 'LOGNAME'];

/**
 * A clean environment for hooks. Never NOTIFY_SOCKET, WATCHDOG_USEC or
 * WATCHDOG_PID: under NotifyAccess=all a hook holding the socket could send
 * READY=1 or STOPPING=1 for kubeboot. Nor KUBEBOOT_* settings, which are
 * kubeboot's configuration, not the hook's.
 */
export function hookEnvironment(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of INHERITED) if (base[name] !== undefined) env[name] = base[name];
  env.PATH ??= HOOK_PATH;
  return env;
}

/**
 * Runs an identity's hooks one after another (order is the operator's),
 * logging each failure. Hooks get KUBEBOOT_IDENTITY, KUBEBOOT_CERT_FILE and,
 * for client identities, KUBEBOOT_KUBECONFIG in their environment.
 */
export async function runIdentityHooks(identity: Identity, logger: Logger, options: HookOptions = {}): Promise<HookResult[]> {
  const env: NodeJS.ProcessEnv = {
    ...hookEnvironment(options.env ?? process.env),
    KUBEBOOT_IDENTITY: identity.name,
    KUBEBOOT_CERT_FILE: currentCertPath(identity),
    ...(identity.kubeconfigPath ? { KUBEBOOT_KUBECONFIG: identity.kubeconfigPath } : {}),
  };
  const results: HookResult[] = [];
  for (const argv of identity.hooks) {
    const result = await runHook(argv, { ...options, env });
    results.push(result);
    if (!result.ok) {
      logger.warn('hook failed', {
        identity: identity.name,
        argv,
        exitCode: result.exitCode,
        signal: result.signal,
        timedOut: result.timedOut,
        durationMs: result.durationMs,
        stderr: result.stderr,
        ...(result.error === undefined ? {} : { error: result.error }),
      });
    }
  }
  return results;
}
