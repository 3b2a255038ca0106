/**
 * The pid-file protocol between `kubeboot run` and `kubeboot renew`, both
 * sides in one place (with the renew-request file SIGUSR2 points at). The daemon records its pid with the process start time
 * (/proc/<pid>/stat field 22), so a reused pid is never mistaken for it; the
 * reader also wants the same uid and the same executable as itself. The file
 * is written atomically (temp + rename), so a symlink planted at its name is
 * replaced, never followed.
 */
import { lstat, readFile, readlink, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { IdentityName } from '../identity.js';
import { writeFileAtomic } from '../store/atomic.js';

export const PID_FILE = 'kubeboot.pid';
/** A worker records itself here, so no second daemon starts while an orphaned worker still writes. */
export const WORKER_PID_FILE = 'kubeboot-worker.pid';

export function renewRequestFile(stateDir: string): string {
  return path.join(stateDir, 'renew-request');
}

/** The daemon's side of `kubeboot renew`: which identities were asked for (and forget the request). */
export async function takeRenewRequest(stateDir: string): Promise<IdentityName[] | 'all'> {
  try {
    const text = (await readFile(renewRequestFile(stateDir), 'utf8')).trim();
    await unlink(renewRequestFile(stateDir));
    return text === '' || text === 'all' ? 'all' : (text.split(/\s+/) as IdentityName[]);
  } catch {
    return 'all';
  }
}

export function pidFilePath(stateDir: string, file = PID_FILE): string {
  return path.join(stateDir, file);
}

/** Clock ticks since boot at which `pid` started; null when it is gone. */
export async function processStartTime(pid: number | 'self'): Promise<string | null> {
  try {
    const text = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Field 2 (comm) is parenthesised and may hold spaces or ')'; fields 3… follow the last ')'.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return fields[22 - 3] ?? null;
  } catch {
    return null;
  }
}

/** Records this process as the running daemon; returns the file's path. */
export async function writePidFile(stateDir: string, name = PID_FILE): Promise<string> {
  const file = pidFilePath(stateDir, name);
  const start = await processStartTime('self');
  await writeFileAtomic(file, `${process.pid} ${start ?? ''}\n`, { mode: 0o600 });
  return file;
}

/** Removes the pid file if it still names this process (a newer daemon's stays). */
export async function removePidFile(stateDir: string, name = PID_FILE): Promise<void> {
  const file = pidFilePath(stateDir, name);
  const record = await readRecord(file);
  if (record?.pid === process.pid) await unlink(file).catch(() => undefined);
}

interface PidRecord {
  pid: number;
  start: string;
}

async function readRecord(file: string): Promise<PidRecord | null> {
  try {
    const info = await lstat(file);
    if (!info.isFile() || info.size > 64) return null;
    const [pid, start] = (await readFile(file, 'utf8')).trim().split(' ');
    const n = Number(pid);
    if (!Number.isInteger(n) || n <= 0 || !start || !/^\d+$/.test(start)) return null;
    return { pid: n, start };
  } catch {
    return null;
  }
}

/**
 * The pid of the running daemon, or null. The process must have started
 * when the record says (not a reused pid), run as our uid, and run our
 * executable: a stale pid file naming an unrelated `… kubeboot run` process
 * once got that process killed by SIGUSR2.
 */
export async function runningDaemon(stateDir: string, name = PID_FILE): Promise<number | null> {
  const record = await readRecord(pidFilePath(stateDir, name));
  if (record === null || record.pid === process.pid) return null;
  try {
    if ((await processStartTime(record.pid)) !== record.start) return null;
    if ((await stat(`/proc/${record.pid}`)).uid !== (process.getuid?.() ?? 0)) return null;
    if ((await readlink(`/proc/${record.pid}/exe`)) !== (await readlink('/proc/self/exe'))) return null;
    return record.pid;
  } catch {
    return null;
  }
}
