/**
 * What the running daemon last knew per identity (renewal/record.ts), written
 * to `<stateDir>/status.json` so `kubeboot status` can show next renewal,
 * last error and hook results without talking to the daemon.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { IdentityRecord } from '../renewal/record.js';
import { writeFileAtomic } from '../store/atomic.js';

export interface DaemonState {
  pid: number;
  updated: string;
  identities: Record<string, IdentityRecord>;
  /** Present while the status listener is not bound: why (a port held by another process). */
  statusListener?: string;
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
