// `make bench`, side by side: a join storm of 250 simulated nodes, each sending
// a kubelet client CSR (approved by kube-controller-manager's csrapproving
// controller, the selfnodeclient path) and a kube-proxy client CSR (approved by
// `kubeboot approver`) at the same moment, twice: 1,000 CSRs on one plane in
// one run, interleaved. CSR created → Approved as one watch sees it, p50/p90/p99
// and throughput per approver; CPU and peak RSS of both processes during the
// storm; the approver's RSS idle and after.
//
// Alone: npm run bench:approvers   (KUBEBOOT_BENCH_NODES, default 250)
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createNode, installApprover, KUBE_PROXY, nodeClient, startApprover, submitCsr } from '../test/support/approver.js';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { watchCsrTimeline } from '../test/support/csr-timeline.js';
import type { KubeClient as NodeClient } from '../test/support/http.js';

const NODES = Number(process.env.KUBEBOOT_BENCH_NODES ?? 250);
const ROUNDS = 2;
const KUBELET_CLIENT = {
  signer: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'client auth'],
  o: ['system:nodes'],
};

const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));

function sample(pid: number): { rssKiB: number; cpuSeconds: number } {
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return { rssKiB, cpuSeconds: (Number(fields[11]) + Number(fields[12])) / ticksPerSecond };
}

/** CPU seconds spent and the largest RSS seen (sampled every 100 ms) until `done` settles. */
async function during<T>(
  pids: Record<string, number>,
  done: Promise<T>,
): Promise<{ result: T; usage: Record<string, { cpuSeconds: number; peakRssMiB: number }> }> {
  const start = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, sample(pid)]));
  const peak = Object.fromEntries(Object.entries(start).map(([k, s]) => [k, s.rssKiB]));
  let finished = false;
  const sampler = (async () => {
    while (!finished) {
      for (const [k, pid] of Object.entries(pids)) peak[k] = Math.max(peak[k]!, sample(pid).rssKiB);
      await sleep(100);
    }
  })();
  const result = await done.finally(() => (finished = true));
  await sampler;
  const usage = Object.fromEntries(
    Object.entries(pids).map(([k, pid]) => [k, { cpuSeconds: sample(pid).cpuSeconds - start[k]!.cpuSeconds, peakRssMiB: peak[k]! / 1024 }]),
  );
  return { result, usage };
}

export async function benchSideBySide(plane: ControlPlane, dir: string): Promise<[string, string][]> {
  mkdirSync(dir, { recursive: true });
  const config = await installApprover(plane, dir);
  const approver = startApprover(config);
  try {
    await approver.waitForOutput(/became the leader/, 60_000);
    const names = Array.from({ length: NODES }, (_, i) => `storm-${i}`);
    for (let i = 0; i < names.length; i += 50) await Promise.all(names.slice(i, i + 50).map((n) => createNode(plane, n)));
    const clients = await Promise.all(names.map((n) => nodeClient(plane, n)));
    process.stderr.write(`storm: ${NODES} Nodes and clients ready\n`);
    const idleRss = sample(approver.child.pid!).rssKiB / 1024;

    const timeline = await watchCsrTimeline(plane);
    const { approvedAt } = timeline;
    const issuedOf = timeline.issued;

    const latency = { kcm: [] as number[], kubeboot: [] as number[] };
    const firstLast = { kcm: [Infinity, 0], kubeboot: [Infinity, 0] };
    const send = async (who: 'kcm' | 'kubeboot', client: NodeClient, name: string) => {
      const t0 = performance.now();
      const csr = await submitCsr(
        client,
        who === 'kcm'
          ? { ...KUBELET_CLIENT, cn: `system:node:${name}`, name: 'storm-kubelet' }
          : { cn: KUBE_PROXY.cn, name: 'storm-proxy' },
      );
      await issuedOf(csr);
      const at = approvedAt.get(csr)!;
      latency[who].push(at - t0);
      firstLast[who] = [Math.min(firstLast[who][0]!, t0), Math.max(firstLast[who][1]!, at)];
    };
    const began = performance.now();
    const progress = setInterval(
      () =>
        process.stderr.write(
          `storm: ${latency.kcm.length} kubelet + ${latency.kubeboot.length} kube-proxy of ${NODES * ROUNDS} each done, ${approvedAt.size} approvals seen\n`,
        ),
      5_000,
    );
    const { usage } = await during(
      { kcm: plane.pids()['kube-controller-manager']!, kubeboot: approver.child.pid! },
      Promise.all(
        clients.map(async (client, i) => {
          // Each node's kubelet and kube-proxy CSRs go out together; the next round after both are issued.
          for (let r = 0; r < ROUNDS; r++) await Promise.all([send('kcm', client, names[i]!), send('kubeboot', client, names[i]!)]);
        }),
      ),
    );
    clearInterval(progress);
    const total = (performance.now() - began) / 1000;
    await timeline.stop();
    await Promise.all(clients.map((c) => c.close()));

    const row = (who: 'kcm' | 'kubeboot', label: string): [string, string] => {
      const l = latency[who].sort((a, b) => a - b);
      const span = (firstLast[who][1]! - firstLast[who][0]!) / 1000;
      return [
        `storm, ${label}: created → approved (${l.length} CSRs)`,
        `p50 ${percentile(l, 50).toFixed(0)} ms, p90 ${percentile(l, 90).toFixed(0)} ms, p99 ${percentile(l, 99).toFixed(0)} ms, max ${l.at(-1)!.toFixed(0)} ms; ${(l.length / span).toFixed(0)} approvals/s`,
      ];
    };
    return [
      row('kcm', 'kubelet client CSRs, kube-controller-manager csrapproving'),
      row('kubeboot', 'kube-proxy CSRs, kubeboot approver'),
      [`storm: ${NODES} nodes × ${ROUNDS} rounds × 2 CSRs, all issued in`, `${total.toFixed(1)} s`],
      [
        `storm: kube-controller-manager CPU, peak RSS (its signer issues all ${NODES * ROUNDS * 2} too)`,
        `${usage.kcm!.cpuSeconds.toFixed(1)} s, ${usage.kcm!.peakRssMiB.toFixed(0)} MiB`,
      ],
      [
        'storm: kubeboot approver CPU, peak RSS',
        `${usage.kubeboot!.cpuSeconds.toFixed(1)} s, ${usage.kubeboot!.peakRssMiB.toFixed(0)} MiB`,
      ],
      [
        'kubeboot approver RSS: idle (leader, synced) → after the storm',
        `${idleRss.toFixed(0)} → ${(sample(approver.child.pid!).rssKiB / 1024).toFixed(0)} MiB`,
      ],
    ];
  } finally {
    approver.child.kill('SIGTERM');
    await approver.done;
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-bench-storm-'));
  const plane = await startControlPlane({ name: 'bench-storm' });
  try {
    const rows = await benchSideBySide(plane, join(dir, 'approver'));
    const width = Math.max(...rows.map((r) => r[0].length));
    process.stdout.write(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|\n`);
    for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
  } finally {
    await plane.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
