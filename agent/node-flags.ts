/**
 * The V8 flags the long-running commands need, however they are started.
 * The packaged launcher passes them (packaging/files/kubeboot.sh, the fast
 * path); `node kubeboot.cjs run`, an image's own entrypoint or an operator's
 * unit does not, and they only work on the command line
 * (`v8.setFlagsFromString` after start does not resize the heap). So a
 * command started without them replaces its process image with itself plus
 * the flags: execve(2) keeps the PID, so systemd's MAINPID, sd_notify and the
 * watchdog see one process throughout.
 */
import type { Log } from './log-lines.js';

/**
 * --max-semi-space-size=1: V8 otherwise keeps up to 16 MiB of young
 * generation a resting process has long emptied. --lite-mode for `run`, which
 * only rests and starts passes (each pass runs without it, see RESTING_ONLY_FLAGS).
 */
export const NODE_FLAGS = {
  run: ['--max-semi-space-size=1', '--lite-mode'],
  approver: ['--max-semi-space-size=1'],
} as const satisfies Record<string, readonly string[]>;

export type LongRunning = keyof typeof NODE_FLAGS;

/** `--max_semi_space_size=4` → `--max-semi-space-size`: V8 reads `_` and `-` alike. */
export function flagName(arg: string): string {
  return arg.split('=')[0]!.replaceAll('_', '-');
}

/**
 * The flags of `wanted` that neither the command line's runtime flags nor
 * NODE_OPTIONS name; by name, so an operator's own `--max-semi-space-size=4` stands.
 */
export function missingNodeFlags(wanted: readonly string[], execArgv: readonly string[], nodeOptions = ''): string[] {
  const given = new Set([...execArgv, ...nodeOptions.split(/\s+/).filter(Boolean)].map(flagName));
  return wanted.filter((flag) => !given.has(flagName(flag)));
}

/** What a process is started with, as `process` tells it. */
export interface Started {
  execPath: string;
  execArgv: readonly string[];
  /** `process.argv`: the executable, the script, then the command's own arguments. */
  argv: readonly string[];
}

/**
 * What to exec for `command`, or null when nothing is missing. Missing flags
 * go after the ones given, so the process started again finds them all in
 * its `process.execArgv`, nothing missing: no second exec.
 */
export function reexecArgv(command: LongRunning, started: Started, nodeOptions?: string): { missing: string[]; argv: string[] } | null {
  const missing = missingNodeFlags(NODE_FLAGS[command], started.execArgv, nodeOptions);
  if (missing.length === 0) return null;
  return { missing, argv: [started.execPath, ...started.execArgv, ...missing, ...started.argv.slice(1)] };
}

export interface Exec extends Started {
  execve?: ((file: string, args?: readonly string[], env?: NodeJS.ProcessEnv) => never) | undefined;
  /** An IPC channel does not survive an exec (only stdio does), while NODE_CHANNEL_FD would still name its fd. */
  channel?: unknown;
}

/**
 * Returns only when the flags are there already or the exec is not possible
 * (no execve on this platform, an IPC channel: said at debug level; a failed
 * execve: a warning): the command then runs as it is, some MiB larger.
 */
export function ensureNodeFlags(command: LongRunning, proc: Exec, env: NodeJS.ProcessEnv, logger: Log): void {
  const exec = reexecArgv(command, proc, env.NODE_OPTIONS);
  if (exec === null) return;
  const without = `running without ${exec.missing.join(' ')}`;
  if (typeof proc.execve !== 'function') return void logger.debug(`${command}: no process.execve on this platform; ${without}`);
  if (proc.channel) return void logger.debug(`${command}: started with an IPC channel, which an exec would close; ${without}`);
  logger.debug(`${command}: started without ${exec.missing.join(' ')}; executing itself again with them (same pid)`);
  try {
    proc.execve(proc.execPath, exec.argv, env);
  } catch (err) {
    logger.warn(`${command}: execve failed (${(err as Error).message}); ${without}`);
  }
}
