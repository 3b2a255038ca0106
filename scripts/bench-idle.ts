// The resting daemon next to a bare Node timer, in one run on one machine:
// `kubeboot run` bootstraps a node, its pass process ends once every
// identity sleeps, and then both processes are sampled side by side (RSS at
// the end, CPU over the window). Also what one pass costs: a forced renewal
// (`kubeboot renew` → SIGUSR2 → a pass), its CPU and peak RSS as the pass
// reports them, and the wall time from the request to the pass at rest.
//
// Alone: npm run bench:idle   (KUBEBOOT_BENCH_IDLE_SECONDS, default 60; NODE_COMPILE_CACHE=DIR
// runs kubeboot with a compile cache, as the packaged launcher does for root)
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { handToken, launcherNodeFlags, nodeLayout, startKubeboot } from '../test/support/kubeboot.js';
import { freePort } from '../test/support/processes.js';

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
): Promise<[string, string][]> {
  const rows: [string, string][] = [];
  const node = await nodeLayout(join(dir, 'idle'), 'bench-idle');
  await handToken(plane, node, 'data');
  const flags = launcherNodeFlags('run').join(' ');
  // The status listener on, as by default: node:http is part of what a resting daemon holds.
  const listen = `127.0.0.1:${await freePort()}`;
  const daemon = startKubeboot(
    ['run', '--config', node.config, '--listen', listen, '--log-level', 'debug'],
    compileCache ? { NODE_COMPILE_CACHE: compileCache } : {},
  );
  try {
    const firstPass = await daemon.waitForOutput(/pass ended \([^)]*\)/);
    const bare = spawn(process.execPath, ['-e', 'setInterval(()=>{},1e9)'], { stdio: 'ignore' });
    const [d, b] = await Promise.all([idle(daemon.child.pid!, IDLE_SECONDS), idle(bare.pid!, IDLE_SECONDS)]);
    bare.kill('SIGTERM');
    const ratio = d.rssMiB / b.rssMiB;
    rows.push([
      `resting kubeboot run, listening on ${listen}, ${IDLE_SECONDS} s after its first pass ended (node ${flags}${compileCache ? ', compile cache' : ''}, as packaged)`,
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

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const plane = await startControlPlane({ name: 'bench-idle' });
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-bench-idle-'));
  try {
    const rows = await benchIdle(plane, dir);
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
  } finally {
    await plane.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
