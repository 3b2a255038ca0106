// `make bench`, approver part: CSR created → approved by `kubeboot approver`
// over 200 CSRs from 50 simulated nodes (each node renews one at a time, as a
// real node does), and the approver's idle RSS.
import { mkdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createNode, installApprover, KUBE_PROXY, nodeClient, startApprover, submitCsr } from '../test/support/approver.js';
import type { ControlPlane } from '../test/support/controlplane.js';
import { watchCsrTimeline } from '../test/support/csr-timeline.js';

const NODES = 50;
const PER_NODE = 4;

function rssMiB(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)?.[1] ?? 0) / 1024;
}

const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;

export async function benchApprover(plane: ControlPlane, dir: string): Promise<[string, string][]> {
  mkdirSync(dir, { recursive: true });
  const config = await installApprover(plane, dir);
  const approver = startApprover(config);
  try {
    await approver.waitForOutput(/became the leader/, 60_000);
    await sleep(10_000); // let it settle: this is the idle figure
    const idleRss = rssMiB(approver.child.pid!);

    const names = Array.from({ length: NODES }, (_, i) => `bench-node-${i}`);
    await Promise.all(names.map((n) => createNode(plane, n)));
    const clients = await Promise.all(names.map((n) => nodeClient(plane, n)));

    // One watch sees every approval and issuance; times are taken on this process's clock.
    const timeline = await watchCsrTimeline(plane);

    const latencies: number[] = [];
    const began = performance.now();
    await Promise.all(
      clients.map(async (client) => {
        for (let i = 0; i < PER_NODE; i++) {
          const t0 = performance.now();
          const name = await submitCsr(client, { cn: KUBE_PROXY.cn, name: 'bench' });
          await timeline.issued(name);
          latencies.push(timeline.approvedAt.get(name)! - t0);
        }
      }),
    );
    const total = performance.now() - began;
    await timeline.stop();
    await Promise.all(clients.map((c) => c.close()));
    latencies.sort((a, b) => a - b);
    return [
      [
        `approver: CSR created → approved (${latencies.length} CSRs, ${NODES} nodes, ${PER_NODE} each in turn)`,
        `p50 ${percentile(latencies, 50).toFixed(0)} ms, p99 ${percentile(latencies, 99).toFixed(0)} ms, max ${latencies.at(-1)!.toFixed(0)} ms; all in ${(total / 1000).toFixed(1)} s`,
      ],
      ['approver: idle RSS (leader, CSR cache synced, 10 s after start)', `${idleRss.toFixed(1)} MiB`],
      ['approver: RSS after the 200 CSRs', `${rssMiB(approver.child.pid!).toFixed(1)} MiB`],
    ];
  } finally {
    approver.child.kill('SIGTERM');
    await approver.done;
  }
}
