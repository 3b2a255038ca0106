// `make bench`: the numbers the issues ask for, as a table. Not a test: it
// asserts nothing and takes a few minutes (one minute of idle sampling).
//   - API requests one bootstrap makes, and approval → files-on-disk time
//   - idle `kubeboot run`: RSS and CPU over a minute, next to a bare Node timer
//   - cold start of the bundle vs `node -e 0`
//   - kubeboot approver: CSR created → approved p50/p99, idle RSS (scripts/bench-approver.ts)
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startControlPlane } from '../test/support/controlplane.js';
import { bundle, nodeLayout, startKubeboot } from '../test/support/kubeboot.js';
import { benchApprover } from './bench-approver.js';

const IDLE_SECONDS = Number(process.env.KUBEBOOT_BENCH_IDLE_SECONDS ?? 60);
const rows: [string, string][] = [];

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

function coldStart(argv: string[], runs = 20): number {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    execFileSync(argv[0]!, argv.slice(1), { stdio: 'ignore' });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(runs / 2)]!;
}

const plane = await startControlPlane({ name: 'bench' });
const dir = mkdtempSync(join(tmpdir(), 'kubeboot-bench-'));
try {
  rows.push(['control plane', `${plane.version}, ready in ${(plane.startupMs / 1000).toFixed(1)} s`]);

  // One bootstrap, every API request traced.
  const node = await nodeLayout(join(dir, 'a'), 'bench-a');
  const token = await plane.admin.createBootstrapToken();
  await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, token.token, { ca: 'data' });
  const t0 = Date.now();
  const boot = await startKubeboot(['bootstrap', '--config', node.config, '--log-level', 'debug']).done;
  const wall = Date.now() - t0;
  const requests = [...(boot.stdout + boot.stderr).matchAll(/api request (\w+) https?:\/\/[^/]+(\S+) -> (\d+|\?)/g)].map((m) => `${m[1]} ${m[2]} ${m[3]}`);
  const result = (boot.stdout + boot.stderr).match(/approved after ([\d.]+)s, on disk (\d+) ms later/);
  rows.push(['bootstrap: API requests', `${requests.length}: ${requests.join('; ')}`]);
  rows.push(['bootstrap: CSR created → approved certificate seen (auto-approval)', `${(Number(result?.[1]) * 1000).toFixed(0)} ms`]);
  rows.push(['bootstrap: certificate seen → files on disk (verify, prove, store)', `${result?.[2]} ms`]);
  rows.push(['bootstrap: whole command (process start to exit)', `${wall} ms`]);

  // Idle daemon vs a bare Node timer on the same runtime.
  const node2 = await nodeLayout(join(dir, 'b'), 'bench-b');
  const token2 = await plane.admin.createBootstrapToken();
  await plane.writeBootstrapKubeconfig(node2.bootstrapKubeconfig, token2.token, { ca: 'data' });
  const daemon = startKubeboot(['run', '--config', node2.config, '--listen', 'off']);
  await daemon.waitForOutput(/all credentials valid; ready/);
  const bare = spawn(process.execPath, ['-e', 'setInterval(()=>{},1e9)'], { stdio: 'ignore' });
  const [d, b] = await Promise.all([idle(daemon.child.pid!, IDLE_SECONDS), idle(bare.pid!, IDLE_SECONDS)]);
  rows.push([`idle kubeboot run over ${IDLE_SECONDS} s`, `RSS ${d.rssMiB.toFixed(1)} MiB, CPU ${d.cpuSeconds.toFixed(2)} s`]);
  rows.push([`bare node -e "setInterval(()=>{},1e9)" over ${IDLE_SECONDS} s`, `RSS ${b.rssMiB.toFixed(1)} MiB, CPU ${b.cpuSeconds.toFixed(2)} s`]);
  daemon.child.kill('SIGTERM');
  bare.kill('SIGTERM');
  await daemon.done;

  rows.push(...(await benchApprover(plane, join(dir, 'approver'))));

  rows.push(['cold start: node dist/kubeboot.cjs --version (median of 20)', `${coldStart([process.execPath, bundle, '--version']).toFixed(0)} ms`]);
  rows.push(['cold start: node -e 0 (median of 20)', `${coldStart([process.execPath, '-e', '0']).toFixed(0)} ms`]);
  rows.push(['Node', process.version]);
} finally {
  await plane.stop();
  rmSync(dir, { recursive: true, force: true });
}

const width = Math.max(...rows.map((r) => r[0].length));
process.stdout.write(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|\n`);
for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
