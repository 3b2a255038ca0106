// The resting daemon next to a bare Node timer, in one run on one machine:
// `kubeboot run` bootstraps a node, its pass process ends once every
// identity sleeps, and then both processes are sampled side by side (RSS at
// the end, CPU over the window). Also what one pass costs: a forced renewal
// (`kubeboot renew` → SIGUSR2 → a pass), its CPU and peak RSS as the pass
// reports them, and the wall time from the request to the pass at rest.
// And how many pass processes an idle day starts with CA rotation on
// (default caRotation.interval, 10 min ±20 %): the real Supervisor on a
// FakeClock, each fake pass resting as a real one does — before: with the CA
// check as its next wake-up; after: handing the daemon its look
// (daemon/ca-look.ts), which finds cluster-info unchanged.
//
// Alone: npm run bench:idle   (KUBEBOOT_BENCH_IDLE_SECONDS, default 60; NODE_COMPILE_CACHE=DIR
// runs kubeboot with a compile cache, as the packaged launcher does for root). Alone, the
// resting daemon is measured twice: started as the launcher starts it, and as
// `node dist/kubeboot.cjs run` with no flags (it execs itself with them: agent/node-flags.ts).
import { execFileSync, spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { bundle, handToken, launcherNodeFlags, nodeLayout, startKubeboot, startWatched } from '../test/support/kubeboot.js';
import { freePort } from '../test/support/processes.js';
import { configIn } from '../test/support/node-config.js';
import { defaultConfig } from '../agent/config/defaults.js';
import { EMPTY_CARRY, type FromPass, type ToPass } from '../agent/daemon/pass-protocol.js';
import { Supervisor, type PassHandle } from '../agent/daemon/supervisor.js';
import { createLineLogger } from '../agent/log-lines.js';
import { FakeClock } from '../agent/time/clock.js';
import type { CaLook } from '../agent/trust/keeper.js';

const IDLE_SECONDS = Number(process.env.KUBEBOOT_BENCH_IDLE_SECONDS ?? 60);
/** The target of issue 19: a resting daemon at most this many times a bare Node timer. */
const TARGET_RATIO = 1.5;

function procSample(pid: number): { rssKiB: number; cpuTicks: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return { rssKiB, cpuTicks: Number(fields[11]) + Number(fields[12]) };
}

/** RSS at the end and CPU seconds spent over `seconds` of sampling. */
async function idle(pid: number, seconds: number): Promise<{ rssMiB: number; cpuSeconds: number }> {
  const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
  const start = procSample(pid);
  await sleep(seconds * 1000);
  const end = procSample(pid);
  return { rssMiB: end.rssKiB / 1024, cpuSeconds: (end.cpuTicks - start.cpuTicks) / ticks };
}

const PASS_ENDED = /pass ended \(([\d.]+) s CPU, peak RSS (\d+) MiB\)/g;

export async function benchIdle(
  plane: ControlPlane,
  dir: string,
  compileCache: string | null = process.env.NODE_COMPILE_CACHE ?? null,
  started: 'launcher' | 'node' = 'launcher',
): Promise<[string, string][]> {
  const rows: [string, string][] = [];
  const node = await nodeLayout(join(dir, `idle-${started}`), started === 'launcher' ? 'bench-idle' : 'bench-idle-node');
  await handToken(plane, node, 'data');
  const flags = launcherNodeFlags('run').join(' ');
  const how = started === 'launcher' ? `node ${flags}` : 'node dist/kubeboot.cjs run, no flags given';
  // The status listener on, as by default: node:http is part of what a resting daemon holds.
  const listen = `127.0.0.1:${await freePort()}`;
  const args = ['run', '--config', node.config, '--listen', listen, '--log-level', 'debug'];
  const env = compileCache ? { NODE_COMPILE_CACHE: compileCache } : {};
  const daemon =
    started === 'launcher'
      ? startKubeboot(args, env)
      : startWatched(process.execPath, [bundle, ...args], {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          KUBEBOOT_LOG_FORMAT: 'json',
          ...env,
        });
  try {
    const firstPass = await daemon.waitForOutput(/pass ended \([^)]*\)/);
    const bare = spawn(process.execPath, ['-e', 'setInterval(()=>{},1e9)'], { stdio: 'ignore' });
    const [d, b] = await Promise.all([idle(daemon.child.pid!, IDLE_SECONDS), idle(bare.pid!, IDLE_SECONDS)]);
    bare.kill('SIGTERM');
    const ratio = d.rssMiB / b.rssMiB;
    rows.push([
      `resting kubeboot run, listening on ${listen}, ${IDLE_SECONDS} s after its first pass ended (${how}${compileCache ? ', compile cache' : ''}${started === 'launcher' ? ', as packaged' : ''})`,
      `RSS ${d.rssMiB.toFixed(1)} MiB, CPU ${d.cpuSeconds.toFixed(2)} s`,
    ]);
    rows.push([
      `bare node -e "setInterval(()=>{},1e9)", sampled alongside`,
      `RSS ${b.rssMiB.toFixed(1)} MiB, CPU ${b.cpuSeconds.toFixed(2)} s`,
    ]);
    rows.push([
      'resting daemon / bare timer (RSS)',
      `${ratio.toFixed(2)}× (target ≤ ${TARGET_RATIO}×: ${ratio <= TARGET_RATIO ? 'met' : 'not met'})`,
    ]);
    const [, bootCpu, bootRss] = /([\d.]+) s CPU, peak RSS (\d+) MiB/.exec(firstPass)!;
    rows.push(['first pass (bootstrap of kubelet and kube-proxy), its own process', `${bootCpu} s CPU, peak RSS ${bootRss} MiB`]);

    // One renewal through the resting daemon: what resting light costs per renewal.
    const before = [...daemon.output().matchAll(PASS_ENDED)].length;
    const t0 = performance.now();
    const renew = await startKubeboot(['renew', '--config', node.config]).done;
    if (renew.code !== 0) throw new Error(`kubeboot renew failed: ${renew.stderr}`);
    for (;;) {
      const ended = [...daemon.output().matchAll(PASS_ENDED)];
      if (ended.length > before) {
        const last = ended.at(-1)!;
        rows.push([
          'one forced renewal of every identity: a pass process started, renewed, ended',
          `${((performance.now() - t0) / 1000).toFixed(2)} s wall from the request, ${last[1]} s CPU, peak RSS ${last[2]} MiB`,
        ]);
        break;
      }
      await sleep(50);
    }
  } finally {
    daemon.child.kill('SIGTERM');
    await daemon.done;
  }
  return rows;
}

const DAY_MS = 24 * 3_600_000;

/**
 * Pass processes started over one simulated idle day (no renewal due: a kubelet client certificate
 * lives a year), with CA rotation on at the default interval; `looks`: the daemon's own looks made.
 */
export async function idleDayStarts(daemonLooks: boolean, dir: string): Promise<{ passes: number; looks: number }> {
  const config = configIn(dir);
  config.caRotation = { ...config.caRotation, enabled: true, interval: defaultConfig('n1').caRotation.interval };
  const clock = new FakeClock(new Date('2025-06-01T00:00:00Z'));
  let seed = 1;
  const random = (): number => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
  const checkIn = () => config.caRotation.interval * 1000 * (0.8 + 0.4 * random());
  let passes = 0;
  let looks = 0;
  const stop = new AbortController();
  const supervisor = new Supervisor({
    config,
    logger: createLineLogger({ level: 'error', format: 'json' }),
    signal: stop.signal,
    reload: async () => config,
    clock,
    random,
    env: {},
    lookAt: async (look) => {
      looks++;
      return { kind: 'read', digest: look.digest };
    },
    // A pass as the real one rests once every identity and the CA keeper sleep: its next CA check in 8–12 min.
    startPass: () => {
      passes++;
      const pass = Object.assign(new EventEmitter(), { pid: passes, connected: true, kill: () => true });
      const send = (message: ToPass, done?: (err: Error | null) => void): boolean => {
        done?.(null);
        if (message.kind !== 'start') return true;
        const now = clock.now().getTime();
        const at = new Date(now + checkIn());
        const look: CaLook | null = daemonLooks
          ? {
              url: 'https://api.test:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0',
              caPem: '',
              tlsServerName: null,
              certFile: '',
              keyFile: '',
              digest: 'unchanged',
              at: at.toISOString(),
              until: new Date(now + 365 * DAY_MS).toISOString(),
            }
          : null;
        const rest: FromPass = {
          kind: 'rest',
          until: (look ? new Date(now + 200 * DAY_MS) : at).toISOString(),
          look,
          carry: EMPTY_CARRY,
          lastSeq: 0,
          usage: { cpuSeconds: 0, maxRssMiB: 0 },
        };
        setImmediate(() => {
          pass.emit('message', rest);
          pass.connected = false;
          pass.emit('exit', 0, null);
        });
        return true;
      };
      return Object.assign(pass, { send }) as unknown as PassHandle;
    },
  });
  const running = supervisor.run();
  while (passes === 0) await new Promise((resolve) => setImmediate(resolve));
  // The first pass (the bootstrap) is not part of the idle day.
  const first = { passes, looks };
  for (let minute = 0; minute < 24 * 60; minute++) await clock.tick(60_000);
  stop.abort();
  await running;
  return { passes: passes - first.passes, looks: looks - first.looks };
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const plane = await startControlPlane({ name: 'bench-idle' });
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-bench-idle-'));
  try {
    const before = await idleDayStarts(false, join(dir, 'day-before'));
    const after = await idleDayStarts(true, join(dir, 'day-after'));
    const rows: [string, string][] = [
      ['pass processes started in one idle day, CA rotation on (FakeClock): each CA check a pass, as before', `${before.passes}`],
      [
        'the same day, the daemon looking at cluster-info itself (daemon/ca-look.ts), unchanged all day',
        `${after.passes} pass processes, ${after.looks} looks (target ≤ 4 pass processes a day: ${after.passes <= 4 ? 'met' : 'not met'})`,
      ],
      ...(await benchIdle(plane, dir)),
      ...(await benchIdle(plane, dir, undefined, 'node')),
    ];
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
  } finally {
    await plane.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
