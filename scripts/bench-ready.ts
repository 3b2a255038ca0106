// Time to a Ready Node, side by side on one plane: kubeboot then the real
// kubelet (as the packaged units order them: the kubelet starts once its
// kubeconfig is on disk), against the real kubelet doing its own TLS
// bootstrap (--bootstrap-kubeconfig). Interleaved runs, alternating which
// goes first; each run is a new Node with a new bootstrap token, from the
// first process started to the Ready condition seen (polled every 50 ms).
// Both include the in-memory container runtime's start (fakecri). Needs root
// (namespaces, mounts), like the real-node tests.
//
// Alone: npm run bench:ready   (KUBEBOOT_BENCH_READY_RUNS, default 10)
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { handToken, nodeLayout, startKubeboot } from '../test/support/kubeboot.js';
import { createNodeNetwork, type NodeNetwork } from '../test/support/netns.js';
import { startRealNode, writeKubeletConfig, type RealNode, type RealNodeOptions } from '../test/support/realnode.js';

const RUNS = Number(process.env.KUBEBOOT_BENCH_READY_RUNS ?? 10);
const POLL_MS = 50;
const LIMIT_MS = 180_000;

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
};

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined): Promise<T> {
  const end = Date.now() + LIMIT_MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(POLL_MS);
  }
}

async function ready(plane: ControlPlane, name: string, node: RealNode): Promise<void> {
  await until(`Node ${name} Ready`, async () => {
    if (node.kubelet.exited !== undefined) throw new Error(`the kubelet exited (${node.kubelet.exited}); see ${node.kubelet.logFile}`);
    const cond = ((await plane.admin.getNode(name))?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
    return cond?.status === 'True' ? true : undefined;
  });
}

interface Run {
  readyMs: number;
  /** kubeboot only: its kubelet kubeconfig on disk. */
  credentialMs?: number;
}

async function withKubeboot(plane: ControlPlane, net: NodeNetwork, dir: string, name: string): Promise<Run> {
  const layoutDir = join(dir, 'node');
  const nodeOptions: RealNodeOptions = {
    name,
    dir: join(dir, 'n'),
    net,
    caFile: plane.caFile,
    kubeletKubeconfig: join(layoutDir, 'kubelet.conf'),
    kubeProxyKubeconfig: join(layoutDir, 'kube-proxy.conf'),
  };
  const layout = await nodeLayout(layoutDir, name, { kubelet: { configFile: writeKubeletConfig(nodeOptions) } });
  await handToken(plane, layout, 'data');
  const started = Date.now();
  const daemon = startKubeboot(['run', '--config', layout.config]);
  let node: RealNode | undefined;
  try {
    await until('the kubelet kubeconfig', () => (existsSync(layout.kubeletKubeconfig) ? true : undefined));
    const credentialMs = Date.now() - started;
    node = await startRealNode(nodeOptions);
    await ready(plane, name, node);
    return { readyMs: Date.now() - started, credentialMs };
  } finally {
    await node?.stop();
    daemon.child.kill('SIGTERM');
    await daemon.done;
  }
}

async function withKubeletBootstrap(plane: ControlPlane, net: NodeNetwork, dir: string, name: string): Promise<Run> {
  const layoutDir = join(dir, 'node');
  mkdirSync(layoutDir, { recursive: true, mode: 0o700 });
  const bootstrap = join(layoutDir, 'bootstrap-kubelet.conf');
  await plane.writeBootstrapKubeconfig(bootstrap, (await plane.admin.createBootstrapToken()).token, { ca: 'data' });
  const started = Date.now();
  const node = await startRealNode({
    name,
    dir: join(dir, 'n'),
    net,
    caFile: plane.caFile,
    kubeletKubeconfig: join(layoutDir, 'kubelet.conf'),
    kubeProxyKubeconfig: join(layoutDir, 'kube-proxy.conf'),
    certDir: join(layoutDir, 'pki'),
    kubeletArgs: [`--bootstrap-kubeconfig=${bootstrap}`],
  });
  try {
    await ready(plane, name, node);
    return { readyMs: Date.now() - started };
  } finally {
    await node.stop();
  }
}

export async function benchReady(): Promise<[string, string][]> {
  const net = await createNodeNetwork();
  const plane = await startControlPlane({ name: 'bench-ready', address: net.hostIp });
  const runs: Record<'kubeboot' | 'kubelet', Run[]> = { kubeboot: [], kubelet: [] };
  try {
    for (let i = 0; i < RUNS; i++) {
      const order = i % 2 === 0 ? (['kubeboot', 'kubelet'] as const) : (['kubelet', 'kubeboot'] as const);
      for (const who of order) {
        const name = `ready-${who}-${i}`;
        const runDir = mkdtempSync('/tmp/kbr-');
        try {
          runs[who].push(
            who === 'kubeboot' ? await withKubeboot(plane, net, runDir, name) : await withKubeletBootstrap(plane, net, runDir, name),
          );
        } finally {
          rmSync(runDir, { recursive: true, force: true });
        }
        await plane.admin.request('DELETE', `/api/v1/nodes/${name}`);
      }
    }
  } finally {
    await plane.stop();
    await net.remove();
  }
  const ms = (v: number) => `${(v / 1000).toFixed(2)} s`;
  const stat = (values: number[]) =>
    `median ${ms(quantile(values, 0.5))}, p90 ${ms(quantile(values, 0.9))} (min ${ms(Math.min(...values))}, max ${ms(Math.max(...values))})`;
  const kb = runs.kubeboot.map((r) => r.readyMs);
  const kl = runs.kubelet.map((r) => r.readyMs);
  return [
    [`time to a Ready Node: kubeboot run, then the real kubelet ${plane.version}, ${RUNS} runs`, stat(kb)],
    ['  of which kubeboot run start → kubelet kubeconfig on disk', stat(runs.kubeboot.map((r) => r.credentialMs!))],
    [`time to a Ready Node: the real kubelet's own TLS bootstrap (--bootstrap-kubeconfig), ${RUNS} runs, interleaved`, stat(kl)],
    ['ratio kubeboot path / kubelet bootstrap (medians)', `${(quantile(kb, 0.5) / quantile(kl, 0.5)).toFixed(2)}x`],
  ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await benchReady();
  const width = Math.max(...rows.map((r) => r[0].length));
  process.stdout.write(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|\n`);
  for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
}
