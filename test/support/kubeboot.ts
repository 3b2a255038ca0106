// Runs the bundled agent (dist/kubeboot.cjs, what the packages ship) as a
// child process, the way an operator would, and checks every line it prints
// for secrets.
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import type { Test } from 'tap';
import type { CreateTokenOptions } from './admin.js';
import type { BootstrapToken, ControlPlane } from './controlplane.js';
import { freePort, spawnTiedToTest } from './processes.js';

export const bundle = fileURLToPath(new URL('../../dist/kubeboot.cjs', import.meta.url));

const launcher = readFileSync(new URL('../../packaging/files/kubeboot.sh', import.meta.url), 'utf8');

/**
 * The Node flags the packaged launcher (/usr/bin/kubeboot, or the `script`
 * given) adds for `command`, read from it, so a daemon started here runs as
 * the packaged one does.
 */
export function launcherNodeFlags(command: string | undefined, script = launcher): string[] {
  for (const [, commands, flags] of script.matchAll(/^\s+([\w |-]+)\) heap="?([^";]+)"? ;;$/gm)) {
    if (commands!.split('|').some((c) => c.trim() === command)) return flags!.split(' ');
  }
  return [];
}

export interface NodeLayout {
  dir: string;
  name: string;
  config: string;
  bootstrapKubeconfig: string;
  stateDir: string;
  kubeletKubeconfig: string;
  kubeletCertDir: string;
  kubeProxyKubeconfig: string;
  kubeProxyCertDir: string;
  cloudDir: string;
}

/** A node's file layout inside `dir`, with a config file naming every path. */
export async function nodeLayout(dir: string, name: string, settings: Record<string, unknown> = {}): Promise<NodeLayout> {
  const layout: NodeLayout = {
    dir,
    name,
    config: join(dir, 'config.yaml'),
    bootstrapKubeconfig: join(dir, 'bootstrap-kubelet.conf'),
    stateDir: join(dir, 'state'),
    kubeletKubeconfig: join(dir, 'kubelet.conf'),
    kubeletCertDir: join(dir, 'kubelet-pki'),
    kubeProxyKubeconfig: join(dir, 'kube-proxy.conf'),
    kubeProxyCertDir: join(dir, 'kube-proxy-pki'),
    cloudDir: join(dir, 'cloud'),
  };
  await mkdir(layout.cloudDir, { recursive: true });
  const { kubeProxy, kubelet, ...rest } = settings as { kubeProxy?: Record<string, unknown>; kubelet?: Record<string, unknown> };
  const config = {
    bootstrapKubeconfig: layout.bootstrapKubeconfig,
    stateDir: layout.stateDir,
    nodeName: name,
    // The kubelet's configuration inside the layout (absent unless a test writes it), never the host's.
    kubelet: {
      kubeconfig: layout.kubeletKubeconfig,
      certDir: layout.kubeletCertDir,
      configFile: join(dir, 'kubelet-config.yaml'),
      ...kubelet,
    },
    kubeProxy: { enabled: false, kubeconfig: layout.kubeProxyKubeconfig, certDir: layout.kubeProxyCertDir, ...kubeProxy },
    cloudInitPaths: [layout.cloudDir],
    waitTimeout: '3m',
    listen: 'off',
    ...rest,
  };
  await writeFile(layout.config, stringify(config));
  return layout;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Text that must never appear in anything kubeboot prints. */
export const secrets: string[] = [];

export function forbid(...values: string[]): void {
  secrets.push(...values.filter((v) => v.length >= 8));
}

export function assertNoSecrets(t: Test, output: string, what: string): void {
  const leaked = secrets.filter((s) => output.includes(s));
  t.same(leaked.length, 0, `${what}: no token or key material in the output`);
  t.notMatch(output, /PRIVATE KEY-----[A-Za-z0-9+/=\s]{20}/, `${what}: no PEM private key in the output`);
  t.notMatch(output, /Bearer [A-Za-z0-9]/, `${what}: no Authorization header in the output`);
}

export interface Running {
  child: ChildProcess;
  output(): string;
  /** Resolves when the combined output matches. */
  waitForOutput(re: RegExp, timeoutMs?: number): Promise<string>;
  done: Promise<RunResult>;
}

export function startKubeboot(args: string[], env: NodeJS.ProcessEnv = {}): Running {
  return startWatched(process.execPath, [...launcherNodeFlags(args[0]), bundle, ...args], {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    KUBEBOOT_LOG_FORMAT: 'json',
    ...env,
  });
}

/** Any command (kubeboot in a container, say), its output collected and watched as startKubeboot's. */
export function startWatched(command: string, args: string[], env: NodeJS.ProcessEnv): Running {
  const child = spawnTiedToTest(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const watchers: { re: RegExp; resolve: (m: string) => void }[] = [];
  const check = (): void => {
    for (const w of [...watchers]) {
      const m = (stdout + stderr).match(w.re);
      if (m) {
        watchers.splice(watchers.indexOf(w), 1);
        w.resolve(m[0]);
      }
    }
  };
  child.stdout!.on('data', (d: Buffer) => ((stdout += d.toString()), check()));
  child.stderr!.on('data', (d: Buffer) => ((stderr += d.toString()), check()));
  const done = new Promise<RunResult>((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  return {
    child,
    output: () => stdout + stderr,
    done,
    waitForOutput(re, timeoutMs = 120_000) {
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`kubeboot never printed ${re}; output so far:\n${stdout}${stderr}`)), timeoutMs);
        const entry = { re, resolve: (m: string) => (clearTimeout(timer), resolve(m)) };
        watchers.push(entry);
        void done.then(() => {
          if (watchers.includes(entry)) {
            clearTimeout(timer);
            reject(new Error(`kubeboot exited before printing ${re}; output:\n${stdout}${stderr}`));
          }
        });
        check();
      });
    },
  };
}

/** Runs kubeboot to completion and checks its output for secrets. */
export async function kubeboot(t: Test, args: string[], env: NodeJS.ProcessEnv = {}): Promise<RunResult> {
  const result = await startKubeboot(args, env).done;
  assertNoSecrets(t, result.stdout + result.stderr, `kubeboot ${args[0] ?? ''}`);
  return result;
}

/**
 * Puts a fresh bootstrap token into the node's bootstrap kubeconfig (or
 * `file`) and forbids its secret in everything kubeboot prints.
 */
export async function handToken(
  plane: ControlPlane,
  node: NodeLayout,
  ca: 'file' | 'data' | 'none' = 'data',
  file = node.bootstrapKubeconfig,
  tokenOptions: CreateTokenOptions = {},
): Promise<BootstrapToken> {
  const token = await plane.admin.createBootstrapToken(tokenOptions);
  forbid(token.secret);
  await plane.writeBootstrapKubeconfig(file, token.token, { ca });
  return token;
}

/**
 * kubeboot started by `start` with `--listen 127.0.0.1:<port>` on a port that
 * was free a moment ago. On a busy loopback another connection can take it
 * before kubeboot binds; kubeboot then retries that port for as long as it is
 * held (the listener is no start condition), so here another port is tried,
 * up to three, `discard` undoing what `start` made for the attempt given up.
 */
export async function startListening(
  start: (listen: string[]) => Running | Promise<Running>,
  discard: () => Promise<void> = async () => {},
): Promise<{ daemon: Running; port: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const daemon = await start(['--listen', `127.0.0.1:${port}`]);
    const outcome = await Promise.race([
      daemon.waitForOutput(/serving \/healthz, \/readyz and \/metrics on/, 60_000).then(
        () => 'listening' as const,
        () => 'timeout' as const,
      ),
      daemon.waitForOutput(/cannot listen on/, 60_000).then(
        () => 'taken' as const,
        () => 'timeout' as const,
      ),
      daemon.done.then(() => 'ended' as const),
    ]);
    if (outcome !== 'taken' || attempt === 3) return { daemon, port };
    daemon.child.kill('SIGTERM');
    await daemon.done;
    await discard();
  }
}
