// A stand-in for systemd's notification socket: Node cannot bind a unix
// datagram socket (nodejs/node#61933), so a tiny python3 child does, and
// reports every datagram it receives as one JSON line on stdout.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { spawnTiedToTest } from './processes.js';

export interface NotifySocket {
  /** Value for NOTIFY_SOCKET: a file path, or `@name` for an abstract socket. */
  path: string;
  /** Every datagram received so far, in order (a datagram is `KEY=VALUE` lines). */
  messages(): string[];
  /** Resolves with the first datagram matching `pred`, seen or future; rejects after `timeoutMs`. */
  waitFor(pred: (message: string) => boolean, timeoutMs?: number): Promise<string>;
  close(): Promise<void>;
}

// recv() without room for ancillary data makes the kernel close any fd that
// came with the datagram, which is what completes systemd-notify's BARRIER=1.
const LISTENER = `
import json, socket, sys
a = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind('\\0' + a[1:] if a.startswith('@') else a)
print('LISTENING', flush=True)
while True:
    print(json.dumps(s.recv(65536).decode('utf-8', 'replace')), flush=True)
`;

const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

export async function listenNotifySocket(dir: string, opts: { abstract?: boolean } = {}): Promise<NotifySocket> {
  const socketPath = opts.abstract ? `@kubeboot-test-${randomBytes(8).toString('hex')}` : path.join(dir, 'notify.sock');
  const child = spawnTiedToTest(PYTHON, ['-c', LISTENER, socketPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  const received: string[] = [];
  const waiters = new Set<() => void>();
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));

  await new Promise<void>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`notify listener exited with ${code}: ${stderr}`)));
    lines.on('line', (line) => {
      if (line === 'LISTENING') return resolve();
      received.push(JSON.parse(line) as string);
      for (const wake of waiters) wake();
    });
  });

  const waitFor = (pred: (message: string) => boolean, timeoutMs = 10_000): Promise<string> =>
    new Promise((resolve, reject) => {
      const check = (): boolean => {
        const hit = received.find(pred);
        if (hit === undefined) return false;
        waiters.delete(wake);
        clearTimeout(timer);
        resolve(hit);
        return true;
      };
      const wake = (): void => void check();
      const timer = setTimeout(() => {
        waiters.delete(wake);
        reject(new Error(`no matching notify message within ${timeoutMs} ms; got ${JSON.stringify(received)}`));
      }, timeoutMs);
      waiters.add(wake);
      check();
    });

  return {
    path: socketPath,
    messages: () => [...received],
    waitFor,
    async close() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill();
        await exited;
      }
      if (!opts.abstract) await rm(socketPath, { force: true });
    },
  };
}
