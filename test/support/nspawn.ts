// A Debian root booted by a real systemd (systemd-nspawn --boot), for tests
// that must see what the unit, its sandbox and the packages do under the
// service manager that runs them on a node. The container shares the host's
// network, so a control plane on the host's loopback is reachable inside.
//
// Commands run inside through nsenter into the namespaces of the container's
// PID 1 (there is no machined here, so no `systemd-run --machine`). The
// container is stopped by pid when the test ends, pass or fail; a failed
// test keeps the container's journal.
import { execFile, type ChildProcess } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Test } from 'tap';
import { waitFor } from './admin.js';
import { spawnTiedToTest } from './processes.js';
import { cachedDebianRoot, cleanEnv, output } from '../packaging/fixtures/packages.js';

export interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface Container {
  /** The machine name, which is also the hostname inside (and so kubeboot's default node name). */
  name: string;
  /** Host path of the container's root directory. */
  root: string;
  /** Host pid of the container's PID 1 (systemd). */
  pid1: number;
  /** Wall-clock time (epoch ms) nspawn was started; the container shares the host's clock. */
  startedAt: number;
  /** Milliseconds from starting nspawn to `systemctl is-system-running` answering running. */
  bootMs: number;
  /** `running` or, when the caller allowed it, `degraded`. */
  state: 'running' | 'degraded';
  /** Runs a command inside with a clean environment; never throws on a non-zero exit. */
  exec(args: string[], opts?: { timeoutMs?: number }): Promise<ExecResult>;
  /** exec, requiring exit 0; returns stdout. */
  run(args: string[], opts?: { timeoutMs?: number }): Promise<string>;
  /** `sh -c script` inside, requiring exit 0; returns stdout. */
  sh(script: string, opts?: { timeoutMs?: number }): Promise<string>;
  /** One property of a unit (`systemctl show -p NAME --value`). */
  unitProperty(unit: string, name: string): Promise<string>;
  /** `journalctl --no-pager -o cat` with these extra arguments. */
  journal(args: string[]): Promise<string>;
  /** Writes a file into the root from the host (path inside the container). */
  writeFile(path: string, content: string, mode?: number): void;
  /** Stops the container (SIGTERM to nspawn: a clean shutdown; SIGKILL after 20 s). Idempotent. */
  stop(): Promise<void>;
}

const NSPAWN = '/usr/bin/systemd-nspawn';

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function comm(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined; // exited meanwhile
  }
}

function nsExec(pid1: number, args: string[], timeoutMs: number): Promise<ExecResult> {
  // env -i: tap puts NODE_OPTIONS (an --import of a host file) into every child.
  const env = Object.entries(cleanEnv).map(([k, v]) => `${k}=${v}`);
  return new Promise((resolve) => {
    execFile(
      'nsenter',
      ['-t', String(pid1), '-a', '--', '/usr/bin/env', '-i', ...env, ...args],
      { env: cleanEnv, encoding: 'utf8', maxBuffer: 64 << 20, timeout: timeoutMs, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null;
        resolve({ code, stdout, stderr: err && code === null ? `${stderr}${err.message}` : stderr });
      },
    );
  });
}

export interface BootOptions {
  /** Runs on the copy of the root (host paths) before boot. */
  prepare?: (root: string) => void | Promise<void>;
  /** The root to copy (default: the cached bootable Debian root). */
  base?: string;
  /** How long the boot may take until systemd is no longer starting (default 60 s). */
  bootTimeoutMs?: number;
  /** Accept a boot that ends degraded (a failed unit is what the test looks at). */
  allowDegraded?: boolean;
  /** The machine name (default `kb-node-<6 hex>`), e.g. one a node-bound token was made for. */
  name?: string;
}

/** A fresh machine name as bootContainer picks one. */
export function machineName(): string {
  return `kb-node-${randomBytes(3).toString('hex')}`;
}

/**
 * Boots a fresh copy of the cached Debian root. Stopped and removed at
 * teardown; a failed test keeps the container's journal and nspawn's log,
 * and prints where.
 */
export async function bootContainer(t: Test, opts: BootOptions = {}): Promise<Container> {
  const name = opts.name ?? machineName();
  // /var/tmp, not /tmp: the copy is a whole root (~250 MB), and /tmp may be small.
  const dir = mkdtempSync(join('/var/tmp', `kubeboot-${name}-`));
  const root = join(dir, 'root');
  const logFile = join(dir, 'nspawn.log');
  // cp -a: owners, device nodes and hard links as debootstrap made them;
  // --reflink=auto shares the blocks where the file system can.
  output('cp', ['-a', '--reflink=auto', opts.base ?? cachedDebianRoot(), root]);
  // The hostname systemd sets at boot (debootstrap copied the host's), and
  // so the node name kubeboot defaults to.
  writeFileSync(join(root, 'etc/hostname'), `${name}\n`);
  await opts.prepare?.(root);
  const fd = openSync(logFile, 'a', 0o600);
  const began = Date.now();
  // nspawn runs as PID 1 of a pid namespace of its own (unshare): a
  // container outlives a SIGKILLed nspawn, but nothing outlives the init of
  // its pid namespace, and unshare's --kill-child and the pdeathsig of
  // spawnTiedToTest chain that init's death to the test process's.
  // --register=no: there is no machined; --keep-unit: stay in the caller's
  // cgroup instead of asking a host systemd for a scope; --console=pipe: no
  // tty needed. Host networking is nspawn's default.
  const child = spawnTiedToTest(
    'unshare',
    [
      '--pid',
      '--fork',
      '--kill-child=SIGKILL',
      '--mount-proc',
      '--',
      NSPAWN,
      '-q',
      '-D',
      root,
      `--machine=${name}`,
      '--boot',
      '--register=no',
      '--keep-unit',
      '--console=pipe',
    ],
    { stdio: ['ignore', fd, fd], env: cleanEnv },
  );
  closeSync(fd);
  const gone = exited(child);
  let nspawnPid: number | undefined;
  let pid1: number | undefined;
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    // nspawn turns SIGTERM into SIGRTMIN+3 for the container's systemd: a
    // clean halt. Killing unshare takes down the whole pid namespace.
    if (nspawnPid !== undefined) process.kill(nspawnPid, 'SIGTERM');
    else child.kill('SIGKILL');
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    await gone;
    clearTimeout(timer);
  };
  t.teardown(async () => {
    const failed = !t.passing();
    if (failed && !stopped && pid1 !== undefined) {
      const journal = await nsExec(pid1, ['journalctl', '--no-pager', '-o', 'short-precise'], 30_000);
      writeFileSync(join(dir, 'journal.txt'), journal.stdout + journal.stderr);
    }
    await stop();
    rmSync(root, { recursive: true, force: true });
    if (failed) process.stderr.write(`\n*** test failed: kept the journal and nspawn log of container ${name} in ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  });

  const status = await waitFor(
    `container ${name} to boot (nspawn log: ${logFile})`,
    async () => {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`systemd-nspawn exited: ${readFileSync(logFile, 'utf8')}`);
      nspawnPid ??= childrenOf(child.pid!)[0];
      if (nspawnPid === undefined) return undefined;
      pid1 ??= childrenOf(nspawnPid).find((pid) => comm(pid) === 'systemd');
      if (pid1 === undefined) return undefined;
      const r = await nsExec(pid1, ['systemctl', 'is-system-running'], 10_000);
      const state = r.stdout.trim();
      return state === 'running' || state === 'degraded' ? state : undefined;
    },
    opts.bootTimeoutMs ?? 60_000,
  );
  const bootMs = Date.now() - began;
  if (status !== 'running' && opts.allowDegraded !== true) {
    const failed = await nsExec(pid1!, ['systemctl', '--failed', '--no-pager'], 10_000);
    throw new Error(`container ${name} booted degraded:\n${failed.stdout}`);
  }
  const init = pid1!;

  const exec = (args: string[], o: { timeoutMs?: number } = {}) => nsExec(init, args, o.timeoutMs ?? 60_000);
  const run = async (args: string[], o: { timeoutMs?: number } = {}) => {
    const r = await exec(args, o);
    if (r.code !== 0) throw new Error(`in ${name}: ${args.join(' ')} exited ${r.code}\n${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  return {
    name,
    root,
    pid1: init,
    startedAt: began,
    bootMs,
    state: status as 'running' | 'degraded',
    exec,
    run,
    sh: (script, o) => run(['sh', '-c', script], o),
    unitProperty: async (unit, property) => (await run(['systemctl', 'show', '-p', property, '--value', unit])).trim(),
    journal: (args) => run(['journalctl', '--no-pager', '-o', 'cat', ...args]),
    writeFile(path, content, mode = 0o644) {
      writeFileSync(join(root, path), content);
      chmodSync(join(root, path), mode);
    },
    stop,
  };
}

/** True when systemd-nspawn and nsenter are here (systemd-container, util-linux). */
export function haveNspawn(): boolean {
  return existsSync(NSPAWN);
}
