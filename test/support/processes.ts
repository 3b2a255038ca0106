// Child processes of the test control plane: started with their output in a
// log file, watched for early exit, and never left behind by the test run.
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, openSync, closeSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

export interface Component {
  name: string;
  pid: number;
  logFile: string;
  /** Set once the process has exited (code or signal). */
  exited: string | undefined;
  /** Resolves when the process has exited. */
  exit: Promise<void>;
  child: ChildProcess;
}

// Every live child, so an interrupted run (uncaught error, Ctrl-C, tap's
// timeout SIGTERM) still kills them: 'exit' handlers must be synchronous.
const live = new Set<ChildProcess>();
let handlersInstalled = false;

function killAllNow(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
}

function installExitHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on('exit', killAllNow);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    // Kill the children, then let the signal take its default course.
    process.once(signal, () => {
      killAllNow();
      process.kill(process.pid, signal);
    });
  }
}

const SETPRIV = '/usr/bin/setpriv';

/**
 * spawn(), with the child killed by the kernel when this test process dies,
 * even by SIGKILL, which no exit handler sees. Node cannot set
 * PR_SET_PDEATHSIG itself; util-linux's setpriv (Essential on Debian) sets it
 * and then execs the program, so the pid, signals and /proc reads are the
 * program's own.
 */
export function spawnTiedToTest(command: string, args: string[], options: SpawnOptions): ChildProcess {
  if (!existsSync(SETPRIV)) return spawn(command, args, options);
  return spawn(SETPRIV, ['--pdeathsig', 'KILL', '--', command, ...args], options);
}

export function startComponent(name: string, binary: string, args: string[], logFile: string): Component {
  installExitHandlers();
  const fd = openSync(logFile, 'a', 0o600);
  const child = spawnTiedToTest(binary, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  live.add(child);
  const component: Component = {
    name,
    pid: child.pid ?? -1,
    logFile,
    exited: undefined,
    child,
    exit: new Promise<void>((resolve) => {
      const done = (how: string) => {
        if (component.exited === undefined) component.exited = how;
        live.delete(child);
        resolve();
      };
      child.once('exit', (code, signal) => done(signal ? `signal ${signal}` : `exit code ${code}`));
      child.once('error', (err) => done(`failed to start: ${err.message}`));
    }),
  };
  return component;
}

/** SIGTERM, then SIGKILL if it has not exited within graceMs; resolves once it has exited. */
export async function stopComponent(c: Component, graceMs = 10_000): Promise<void> {
  if (c.exited !== undefined) return;
  c.child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const killed = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      c.child.kill('SIGKILL');
      resolve();
    }, graceMs);
  });
  await Promise.race([c.exit, killed]);
  clearTimeout(timer);
  await c.exit;
}

export function logTail(c: Component, lines = 30): string {
  try {
    const all = readFileSync(c.logFile, 'utf8').trimEnd().split('\n');
    return all.slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Peak resident set size (VmHWM) in KiB, read before the process exits. */
export function peakRssKiB(c: Component): number | undefined {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${c.pid}/status`, 'utf8'));
    return m?.[1] ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A loopback port that was free a moment ago. Another process can take it
 * before the component binds, so callers retry the start on "address already
 * in use" (see isPortClash).
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

function isPortClash(c: Component): boolean {
  return /address already in use/i.test(logTail(c, 200));
}

export class ExitedEarly extends Error {
  readonly component: Component;
  constructor(c: Component) {
    super(`${c.name} exited during startup (${c.exited})\n--- ${c.logFile} (tail) ---\n${logTail(c)}`);
    this.component = c;
  }
}

/**
 * Polls `probe` every `intervalMs` until true; fails early, with the log tail,
 * if the component exits meanwhile. A cheap probe may poll fast where the
 * moment matters (a benchmark's clock runs while it waits).
 */
export async function waitReady(
  c: Component,
  what: string,
  probe: () => Promise<boolean>,
  timeoutMs: number,
  intervalMs = 250,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  for (;;) {
    if (c.exited !== undefined) throw new ExitedEarly(c);
    try {
      if (await probe()) return;
    } catch (err) {
      lastError = ` (last error: ${(err as Error).message})`;
    }
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError}\n--- ${c.logFile} (tail) ---\n${logTail(c)}`);
    }
    await Promise.race([c.exit, delay(intervalMs)]);
  }
}

/**
 * Starts a component on `portCount` fresh loopback ports and waits until it
 * is ready; on "address already in use" (a port taken since freePort) it
 * starts again on new ports, up to three times.
 */
export async function startOnFreePorts(
  portCount: number,
  start: (ports: number[]) => Component,
  ready: (c: Component, ports: number[]) => Promise<void>,
): Promise<number[]> {
  for (let attempt = 1; ; attempt++) {
    const ports: number[] = [];
    while (ports.length < portCount) {
      const p = await freePort();
      if (!ports.includes(p)) ports.push(p);
    }
    const component = start(ports);
    try {
      await ready(component, ports);
      return ports;
    } catch (err) {
      await stopComponent(component);
      if (attempt < 3 && isPortClash(component)) continue;
      throw err;
    }
  }
}
