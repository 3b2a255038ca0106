// The resting daemon next to a bare Node timer, in one run on one machine:
// `kubeboot run` bootstraps a node, its worker ends once nothing is due,
// and then both processes are sampled side by side (RSS at the end, CPU
// over the window). Also what one worker costs: a forced renewal
// (`kubeboot renew` → SIGUSR2 → a worker), its CPU and peak RSS as the
// worker reports them, and the wall time from the request to its end.
// And how many workers an idle day starts with CA rotation on (default
// caRotation.interval, 10 min ±20 %): the real Daemon on a FakeClock, each
// fake worker answering its steps as a real one does — before: the CA step
// leaving no look, so every check is a worker; after: handing the daemon
// its look (daemon/ca-look.ts), which finds cluster-info unchanged.
//
// Alone: npm run bench:idle   (KUBEBOOT_BENCH_IDLE_SECONDS, default 60; NODE_COMPILE_CACHE=DIR
// runs kubeboot with a compile cache, as the packaged launcher does for root). Alone, the
// resting daemon is measured twice: started as the launcher starts it, and as
// `node dist/kubeboot.cjs run` with no flags (it execs itself with them: agent/node-flags.ts).
import { execFileSync, spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { bundle, handToken, launcherNodeFlags, nodeLayout, startKubeboot, startWatched } from '../test/support/kubeboot.js';
import { freePort } from '../test/support/processes.js';
import { configIn } from '../test/support/node-config.js';
import { defaultConfig } from '../agent/config/defaults.js';
import { Daemon, type WorkerHandle } from '../agent/daemon/daemon.js';
import { EMPTY_HAND_OVER, type FromWorker, type ToWorker } from '../agent/daemon/worker-protocol.js';
import { createLineLogger } from '../agent/log-lines.js';
import { FakeClock } from '../test/support/fake-time.js';

const IDLE_SECONDS = Number(process.env.KUBEBOOT_BENCH_IDLE_SECONDS ?? 60);
/** The real idle stretch for CPU per idle day (0: skipped; 3600 for the hour). */
const HOUR_SECONDS = Number(process.env.KUBEBOOT_BENCH_IDLE_HOUR_SECONDS ?? 0);
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

const WORKER_ENDED = /worker ended \(([\d.]+) s CPU, peak RSS (\d+) MiB\)/g;

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
    const firstWorker = await daemon.waitForOutput(/worker ended \([^)]*\)/);
    const bare = spawn(process.execPath, ['-e', 'setInterval(()=>{},1e9)'], { stdio: 'ignore' });
    const [d, b] = await Promise.all([idle(daemon.child.pid!, IDLE_SECONDS), idle(bare.pid!, IDLE_SECONDS)]);
    bare.kill('SIGTERM');
    const ratio = d.rssMiB / b.rssMiB;
    rows.push([
      `resting kubeboot run, listening on ${listen}, ${IDLE_SECONDS} s after its first worker ended (${how}${compileCache ? ', compile cache' : ''}${started === 'launcher' ? ', as packaged' : ''})`,
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
    const [, bootCpu, bootRss] = /([\d.]+) s CPU, peak RSS (\d+) MiB/.exec(firstWorker)!;
    rows.push(['first worker (bootstrap of kubelet and kube-proxy), its own process', `${bootCpu} s CPU, peak RSS ${bootRss} MiB`]);

    // One renewal through the resting daemon: what resting light costs per renewal.
    const before = [...daemon.output().matchAll(WORKER_ENDED)].length;
    const t0 = performance.now();
    const renew = await startKubeboot(['renew', '--config', node.config]).done;
    if (renew.code !== 0) throw new Error(`kubeboot renew failed: ${renew.stderr}`);
    for (;;) {
      const ended = [...daemon.output().matchAll(WORKER_ENDED)];
      if (ended.length > before) {
        const last = ended.at(-1)!;
        rows.push([
          'one forced renewal of every identity: a worker started, renewed, ended',
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
 * Workers started over one simulated idle day (no renewal due: a kubelet client certificate
 * lives a year), with CA rotation on at the default interval; `looks`: the daemon's own looks made.
 */
export async function idleDayStarts(daemonLooks: boolean, dir: string): Promise<{ workers: number; looks: number }> {
  const config = configIn(dir);
  config.caRotation = { ...config.caRotation, enabled: true, interval: defaultConfig('n1').caRotation.interval };
  const clock = new FakeClock(new Date('2025-06-01T00:00:00Z'));
  let seed = 1;
  const random = (): number => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
  const checkIn = () => config.caRotation.interval * 1000 * (0.8 + 0.4 * random());
  let workers = 0;
  let looks = 0;
  const stop = new AbortController();
  const daemon = new Daemon({
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
    // A worker as the real one answers: an identity is next due in 200 days, the CA check in 8–12 min.
    startWorker: () => {
      workers++;
      const worker = Object.assign(new EventEmitter(), { pid: workers, connected: true, kill: () => true });
      const say = (message: FromWorker) => setImmediate(() => worker.emit('message', message));
      const send = (message: ToWorker, done?: (err: Error | null) => void): boolean => {
        done?.(null);
        const now = clock.now().getTime();
        if (message.kind === 'stop') {
          say({ kind: 'ended', usage: { cpuSeconds: 0, maxRssMiB: 0 } });
          setImmediate(() => {
            worker.connected = false;
            worker.emit('exit', 0, null);
            worker.emit('close', 0, null);
          });
        }
        if (message.kind !== 'step') return true;
        const { step } = message;
        const next = new Date(step.target === 'ca' ? now + checkIn() : now + 200 * DAY_MS);
        const look =
          step.target === 'ca' && daemonLooks
            ? {
                url: 'https://api.test:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0',
                caPem: '',
                tlsServerName: null,
                certFile: '',
                keyFile: '',
                digest: 'unchanged',
                at: next.toISOString(),
                until: new Date(now + 365 * DAY_MS).toISOString(),
              }
            : null;
        say({
          kind: 'answer',
          answer: {
            id: step.id,
            target: step.target,
            next: next.toISOString(),
            record: null,
            wake: [],
            force: [],
            look,
            handOver: EMPTY_HAND_OVER,
          },
        });
        return true;
      };
      return Object.assign(worker, { send }) as unknown as WorkerHandle;
    },
  });
  const running = daemon.run();
  while (workers === 0) await new Promise((resolve) => setImmediate(resolve));
  // The first worker (the bootstrap) is not part of the idle day.
  const first = { workers, looks };
  for (let minute = 0; minute < 24 * 60; minute++) await clock.tick(60_000);
  stop.abort();
  await running;
  return { workers: workers - first.workers, looks: looks - first.looks };
}

/**
 * A real idle stretch (KUBEBOOT_BENCH_IDLE_HOUR_SECONDS, an hour for the figure) of a node
 * as it lives: CA rotation on at the default interval, its Node registered by its own kubelet hook
 * (what the CA keeper waits for before it hands the daemon a look), no renewal due. CPU of the
 * daemon and of every worker, worker starts and the daemon's own looks, scaled to a day.
 */
export async function idleStretch(plane: ControlPlane, dir: string, seconds: number): Promise<[string, string][]> {
  const name = 'bench-idle-hour';
  const nodeFile = join(dir, 'node.json');
  writeFileSync(nodeFile, JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name } }));
  const kubectl = plane.kubectlPath;
  if (!kubectl) throw new Error('no kubectl: the node registers itself with it');
  const node = await nodeLayout(join(dir, 'hour'), name, {
    caRotation: { enabled: true },
    kubelet: {
      hooks: [
        [kubectl, '--kubeconfig', join(dir, 'hour', 'kubelet.conf'), '--cache-dir', join(dir, 'kube-cache'), 'create', '-f', nodeFile],
      ],
    },
  });
  await handToken(plane, node, 'data');
  const listen = `127.0.0.1:${await freePort()}`;
  const daemon = startKubeboot(['run', '--config', node.config, '--listen', listen, '--log-level', 'debug']);
  const metric = async (series: string): Promise<number> => {
    const body = await (await fetch(`http://${listen}/metrics`)).text();
    const line = body.split('\n').find((l) => l.startsWith(series));
    return Number(line?.split(' ').at(-1) ?? 0);
  };
  try {
    await daemon.waitForOutput(/worker ended \([^)]*\)/);
    const at0 = {
      workers: await metric('kubeboot_workers_total'),
      cpu: await metric('kubeboot_worker_cpu_seconds_total'),
      looks: await metric('kubeboot_ca_looks_total{result="unchanged"}'),
    };
    const d = await idle(daemon.child.pid!, seconds);
    const workers = (await metric('kubeboot_workers_total')) - at0.workers;
    const workerCpu = (await metric('kubeboot_worker_cpu_seconds_total')) - at0.cpu;
    const looks = (await metric('kubeboot_ca_looks_total{result="unchanged"}')) - at0.looks;
    const perDay = ((d.cpuSeconds + workerCpu) * 86_400) / seconds;
    return [
      [
        `a real idle ${Math.round(seconds / 60)} min after the bootstrap, CA rotation on (interval 600 s), Node registered`,
        `daemon CPU ${d.cpuSeconds.toFixed(2)} s, ${workers} worker(s) (${workerCpu.toFixed(2)} s CPU), ${looks} look(s) of its own, RSS ${d.rssMiB.toFixed(1)} MiB`,
      ],
      ['the same, scaled to a day', `${perDay.toFixed(1)} s CPU per idle day (target ≤ 5 s: ${perDay <= 5 ? 'met' : 'not met'})`],
    ];
  } finally {
    daemon.child.kill('SIGTERM');
    await daemon.done;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const plane = await startControlPlane({ name: 'bench-idle' });
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-bench-idle-'));
  try {
    const before = await idleDayStarts(false, join(dir, 'day-before'));
    const after = await idleDayStarts(true, join(dir, 'day-after'));
    const rows: [string, string][] = [
      ['workers started in one idle day, CA rotation on (FakeClock): each CA check a worker', `${before.workers}`],
      [
        'the same day, the daemon looking at cluster-info itself (daemon/ca-look.ts), unchanged all day',
        `${after.workers} workers, ${after.looks} looks (target ≤ 4 workers a day: ${after.workers <= 4 ? 'met' : 'not met'})`,
      ],
      ...(await benchIdle(plane, dir)),
      ...(await benchIdle(plane, dir, undefined, 'node')),
      ...(HOUR_SECONDS > 0 ? await idleStretch(plane, dir, HOUR_SECONDS) : []),
    ];
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
  } finally {
    await plane.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
