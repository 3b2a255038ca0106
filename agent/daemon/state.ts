/**
 * What the running daemon last knew per identity, written to
 * `<stateDir>/status.json` so `kubeboot status` can show next renewal, last
 * error and hook results without talking to the daemon.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic } from '../store/atomic.js';

export interface HookOutcome {
  argv: string[];
  ok: boolean;
  exitCode: number | null;
  at: string;
}

export interface IdentityState {
  nextRenewal: string | null;
  lastSuccess: string | null;
  lastError: string | null;
  /** The CSR this identity waits on, while it waits. */
  pendingCsr: string | null;
  lastHooks: HookOutcome[];
}

export interface DaemonState {
  pid: number;
  updated: string;
  identities: Record<string, IdentityState>;
}

export function stateFile(stateDir: string): string {
  return path.join(stateDir, 'status.json');
}

export async function readDaemonState(stateDir: string): Promise<DaemonState | null> {
  try {
    return JSON.parse(await readFile(stateFile(stateDir), 'utf8')) as DaemonState;
  } catch {
    return null;
  }
}

export async function writeDaemonState(stateDir: string, state: DaemonState): Promise<void> {
  await writeFileAtomic(stateFile(stateDir), JSON.stringify(state, null, 2) + '\n', { mode: 0o600 });
}
