// Time to a Ready Node, side by side on one plane: kubeboot then the real
// kubelet (as the packaged units order them: the kubelet starts once its
// kubeconfig is on disk), against the real kubelet doing its own TLS
// bootstrap (--bootstrap-kubeconfig). Interleaved runs, alternating which
// goes first; each run is a new Node with a new bootstrap token, from the
// first process started to the Ready condition seen (polled every 50 ms).
// Both start the in-memory container runtime (fakecri) at the first moment,
// as a node starts containerd at boot: the kubelet's own bootstrap starts the
// kubelet once its socket is there (polled every 10 ms), the kubeboot path
// once that socket and the kubelet's kubeconfig are. Needs root
// (namespaces, mounts), like the real-node tests.
//
// Then the same under the approver a TPM-attested fleet runs (`--inventory`,
// tokens bound to their node's name, kube-controller-manager's and the
// plane's approval gone): kubeboot without a TPM, kubeboot with `--tpm`
// on a swtpm whose AK is enrolled for the name (rule tpm-attested checks a
// quote in the CSR), and the kubelet's own bootstrap, again interleaved.
// The swtpms are made and started before the runs (not timed); each TPM run
// has its own, one TPM per name as the inventory requires.
//
// Alone: npm run bench:ready   (KUBEBOOT_BENCH_READY_RUNS, default 10;
// KUBEBOOT_BENCH_READY_TPM=0 leaves out the attested runs)
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { INVENTORY_NAME, newRecord, recordsPath } from '../agent/records/kinds.js';
import { identify, withTpm } from '../agent/tpm/identify.js';
import type { CreateTokenOptions } from '../test/support/admin.js';
import { dropKcmAutoApproval, installApprover, startApprover } from '../test/support/approver.js';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { expectStatus } from '../test/support/http.js';
import { handToken, nodeLayout, startKubeboot } from '../test/support/kubeboot.js';
import { createNodeNetwork, type NodeNetwork } from '../test/support/netns.js';
import { stopComponent } from '../test/support/processes.js';
import { startRealNode, startRuntime, writeKubeletConfig, type RealNode, type RealNodeOptions } from '../test/support/realnode.js';
import { manufactureTpm, startSwtpm, type Swtpm } from '../test/support/swtpm.js';

const RUNS = Number(process.env.KUBEBOOT_BENCH_READY_RUNS ?? 10);
const ATTESTED = process.env.KUBEBOOT_BENCH_READY_TPM !== '0';
const POLL_MS = 50;
const LIMIT_MS = 180_000;

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
};

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, intervalMs = POLL_MS): Promise<T> {
  const end = Date.now() + LIMIT_MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(intervalMs);
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

/** How a run's node joins: its token's binding, and kubeboot's own settings (`tpm`). */
interface Join {
  token?: CreateTokenOptions;
  settings?: Record<string, unknown>;
}

async function withKubeboot(plane: ControlPlane, net: NodeNetwork, dir: string, name: string, how: Join = {}): Promise<Run> {
  const layoutDir = join(dir, 'node');
  const nodeOptions: RealNodeOptions = {
    name,
    dir: join(dir, 'n'),
    net,
    caFile: plane.caFile,
    kubeletKubeconfig: join(layoutDir, 'kubelet.conf'),
    kubeProxyKubeconfig: join(layoutDir, 'kube-proxy.conf'),
  };
  const layout = await nodeLayout(layoutDir, name, { ...how.settings, kubelet: { configFile: writeKubeletConfig(nodeOptions) } });
  await handToken(plane, layout, 'data', layout.bootstrapKubeconfig, how.token);
  const started = Date.now();
  const daemon = startKubeboot(['run', '--config', layout.config]);
  // The runtime starts with kubeboot, as containerd starts at boot: the packaged
  // units order only the kubelet and kube-proxy after kubeboot.
  const runtime = startRuntime(nodeOptions.dir);
  let node: RealNode | undefined;
  try {
    // Polled every 10 ms: the kubelet starts on kubeboot's READY=1, sent as this file lands.
    await until('the kubelet kubeconfig', () => (existsSync(layout.kubeletKubeconfig) ? true : undefined), 10);
    const credentialMs = Date.now() - started;
    node = await startRealNode({ ...nodeOptions, runtime: await runtime });
    await ready(plane, name, node);
    return { readyMs: Date.now() - started, credentialMs };
  } finally {
    if (node) await node.stop();
    else await runtime.then(stopComponent, () => undefined);
    daemon.child.kill('SIGTERM');
    await daemon.done;
  }
}

async function withKubeletBootstrap(plane: ControlPlane, net: NodeNetwork, dir: string, name: string, how: Join = {}): Promise<Run> {
  const layoutDir = join(dir, 'node');
  mkdirSync(layoutDir, { recursive: true, mode: 0o700 });
  const bootstrap = join(layoutDir, 'bootstrap-kubelet.conf');
  await plane.writeBootstrapKubeconfig(bootstrap, (await plane.admin.createBootstrapToken(how.token)).token, { ca: 'data' });
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

type Who = 'kubeboot' | 'kubeboot --tpm' | 'kubelet';

/** Interleaved runs of `legs`, rotating which goes first; each run a new Node, deleted after. */
async function interleave(
  plane: ControlPlane,
  prefix: string,
  legs: readonly Who[],
  run: (who: Who, i: number, dir: string, name: string) => Promise<Run>,
): Promise<Record<Who, Run[]>> {
  const runs: Record<Who, Run[]> = { kubeboot: [], 'kubeboot --tpm': [], kubelet: [] };
  for (let i = 0; i < RUNS; i++) {
    for (let k = 0; k < legs.length; k++) {
      const who = legs[(i + k) % legs.length]!;
      const name = runName(prefix, who, i);
      const runDir = mkdtempSync('/tmp/kbr-');
      try {
        runs[who].push(await run(who, i, runDir, name));
      } finally {
        rmSync(runDir, { recursive: true, force: true });
      }
      await plane.admin.request('DELETE', `/api/v1/nodes/${name}`);
    }
  }
  return runs;
}

const runName = (prefix: string, who: Who, i: number) => `${prefix}-${who === 'kubeboot --tpm' ? 'tpm' : who}-${i}`;

/**
 * The attested legs: the plane's approver replaced by one with `--inventory`,
 * every run's name listed (a TPM run's with its swtpm's AK) and its token
 * bound to that name, as a fleet with TPM enrolment runs.
 */
async function attestedRuns(plane: ControlPlane, net: NodeNetwork): Promise<Record<Who, Run[]>> {
  const dir = mkdtempSync('/tmp/kbr-approver-');
  const tpms: Swtpm[] = [];
  const config = await installApprover(plane, dir);
  await dropKcmAutoApproval(plane);
  const approver = startApprover(config, ['--inventory', '--resync-period', '10m']);
  try {
    for (const made of await Promise.all(Array.from({ length: RUNS }, () => manufactureTpm()))) tpms.push(await startSwtpm(made));
    const nodes: Record<string, string> = {};
    for (let i = 0; i < RUNS; i++) {
      const ak = (await withTpm({ swtpmTcp: tpms[i]!.address }, (tpm) => identify(tpm, new Date()))).akName;
      nodes[runName('attested', 'kubeboot --tpm', i)] = `tpm-ak: ${ak}`;
      nodes[runName('attested', 'kubeboot', i)] = '';
      nodes[runName('attested', 'kubelet', i)] = '';
    }
    await approver.waitForOutput(/became the leader/, 60_000);
    expectStatus(
      await plane.admin.request('POST', recordsPath('inventories'), newRecord('inventories', INVENTORY_NAME, { spec: { nodes } })),
      'the inventory',
      201,
    );
    await approver.waitForOutput(/record seen: inventories\.kubeboot\.io\/inventory/, 60_000);
    return await interleave(plane, 'attested', ['kubeboot', 'kubeboot --tpm', 'kubelet'], (who, i, runDir, name) => {
      const how: Join = { token: { bind: { names: [name] } } };
      if (who === 'kubelet') return withKubeletBootstrap(plane, net, runDir, name, how);
      if (who === 'kubeboot') return withKubeboot(plane, net, runDir, name, how);
      return withKubeboot(plane, net, runDir, name, { ...how, settings: { tpm: `swtpm:${tpms[i]!.address}` } });
    });
  } finally {
    approver.child.kill('SIGTERM');
    await approver.done;
    for (const tpm of tpms) {
      await tpm.stop();
      rmSync(tpm.dir, { recursive: true, force: true });
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchReady(): Promise<[string, string][]> {
  const net = await createNodeNetwork();
  const plane = await startControlPlane({ name: 'bench-ready', address: net.hostIp });
  let runs: Record<Who, Run[]>;
  let attested: Record<Who, Run[]> | undefined;
  try {
    runs = await interleave(plane, 'ready', ['kubeboot', 'kubelet'], (who, _i, runDir, name) =>
      who === 'kubeboot' ? withKubeboot(plane, net, runDir, name) : withKubeletBootstrap(plane, net, runDir, name),
    );
    if (ATTESTED) attested = await attestedRuns(plane, net);
  } finally {
    await plane.stop();
    await net.remove();
  }
  const ms = (v: number) => `${(v / 1000).toFixed(2)} s`;
  const stat = (values: number[]) =>
    `median ${ms(quantile(values, 0.5))}, p90 ${ms(quantile(values, 0.9))} (min ${ms(Math.min(...values))}, max ${ms(Math.max(...values))})`;
  const ready = (of: Run[]) => of.map((r) => r.readyMs);
  const ratio = (a: Run[], b: Run[]) => `${(quantile(ready(a), 0.5) / quantile(ready(b), 0.5)).toFixed(2)}x`;
  const rows: [string, string][] = [
    [`time to a Ready Node: kubeboot run, then the real kubelet ${plane.version}, ${RUNS} runs`, stat(ready(runs.kubeboot))],
    ['  of which kubeboot run start → kubelet kubeconfig on disk', stat(runs.kubeboot.map((r) => r.credentialMs!))],
    [
      `time to a Ready Node: the real kubelet's own TLS bootstrap (--bootstrap-kubeconfig), ${RUNS} runs, interleaved`,
      stat(ready(runs.kubelet)),
    ],
    ['ratio kubeboot path / kubelet bootstrap (medians)', ratio(runs.kubeboot, runs.kubelet)],
  ];
  if (attested === undefined) return rows;
  return [
    ...rows,
    [`approver --inventory, bound tokens: kubeboot run, ${RUNS} runs`, stat(ready(attested.kubeboot))],
    [
      `approver --inventory, bound tokens: kubeboot run --tpm (swtpm, AK enrolled, rule tpm-attested), ${RUNS} runs`,
      stat(ready(attested['kubeboot --tpm'])),
    ],
    ['  of which kubeboot run --tpm start → kubelet kubeconfig on disk', stat(attested['kubeboot --tpm'].map((r) => r.credentialMs!))],
    [`approver --inventory, bound tokens: the real kubelet's own TLS bootstrap, ${RUNS} runs, interleaved`, stat(ready(attested.kubelet))],
    ['ratio kubeboot --tpm / kubelet bootstrap (medians; target ≤ 1.3x)', ratio(attested['kubeboot --tpm'], attested.kubelet)],
    ['ratio kubeboot --tpm / kubeboot without a TPM (medians)', ratio(attested['kubeboot --tpm'], attested.kubeboot)],
  ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await benchReady();
  const width = Math.max(...rows.map((r) => r[0].length));
  process.stdout.write(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|\n`);
  for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
}
