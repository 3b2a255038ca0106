// `npm run bench:fleet -- --nodes N` (default 1000): N simulated nodes
// bootstrap at once against one real control plane on this machine, each
// with its own bootstrap token, key, state and certificate directories,
// running the product's own code (bootstrapNode, then renewIdentity with the
// node's certificate) in this one process. Run twice: with the API server's
// default limits, and with a low --max-requests-inflight so API Priority and
// Fairness answers 429 with Retry-After. The API server's audit log counts
// every request. `--ca-rotation`: instead, after the bootstrap, what the CA
// rotation's polling costs the API server (trust/keeper.ts `check`, each
// node on its own certificate): a look while nothing changed, and the look
// that adopts a newly published bundle. The plane's kubeboot approver
// approves every kubelet client CSR (the shipped RBAC grants
// kube-controller-manager none), its requests in the priority level of
// approver-flowschema.yaml; the 429s are counted apart for it and for the
// nodes. `--low-only`: only the low-limit run; `--without-flowschema`: its
// two FlowSchemas deleted first (the approver's user then falls to the stock
// global-default level with the bootstrap tokens, its Lease too). Not a test and not part of CI.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { bootstrapNode, openPass } from '../agent/bootstrap/pass.js';
import { defaultConfig } from '../agent/config/defaults.js';
import type { Config } from '../agent/config/types.js';
import { assessNode, isNodeCredential } from '../agent/credential/assess.js';
import { renewIdentity } from '../agent/credential/renew.js';
import { createLogger } from '../agent/log.js';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { createMetrics } from '../agent/daemon/metrics.js';
import { systemClock } from '../agent/time/clock.js';
import { serializer } from '../agent/store/serializer.js';
import { TrustKeeper } from '../agent/trust/keeper.js';
import { trustedBundle } from '../agent/trust/bundle.js';
import { clusterInfoKubeconfig } from '../test/support/kubeconfig.js';
import { createCa } from '../test/support/pki.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1000' },
    'low-inflight': { type: 'string', default: '20' },
    'ca-rotation': { type: 'boolean', default: false },
    'low-only': { type: 'boolean', default: false },
    'without-flowschema': { type: 'boolean', default: false },
  },
});
const NODES = Number(values.nodes);
const LOW_INFLIGHT = Number(values['low-inflight']);

interface NodeRun {
  name: string;
  token: { id: string; token: string };
  config: Config;
  log: string[];
  bootstrapMs: number | null;
  renewMs: number | null;
  error: string | null;
}

const quantile = (xs: number[], q: number) =>
  xs.length === 0 ? NaN : [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

function nodeConfig(dir: string, name: string): Config {
  const c = defaultConfig(name);
  Object.assign(c, {
    bootstrapKubeconfig: join(dir, 'bootstrap-kubelet.conf'),
    stateDir: join(dir, 'state'),
    listen: null,
    waitTimeout: 900,
    cloudInitPaths: [],
  });
  c.kubelet = { ...c.kubelet, kubeconfig: join(dir, 'kubelet.conf'), certDir: join(dir, 'pki') };
  c.kubeProxy = { ...c.kubeProxy, enabled: false };
  return c;
}

/** Each node logs JSON lines into its own array: retries and their waits are read back from it. */
function capture(lines: string[]) {
  const stream = new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) });
  return createLogger({ level: 'info', format: 'json', stream });
}

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

interface AuditEvent {
  auditID: string;
  stage: string;
  verb: string;
  user?: { username?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
  stageTimestamp: string;
}

function audit(plane: ControlPlane, since: number): AuditEvent[] {
  return readFileSync(join(plane.dir, 'audit.log'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as AuditEvent)
    .filter((e) => e.stage === 'ResponseComplete' && Date.parse(e.requestReceivedTimestamp) >= since);
}

async function fleet(run: string, apiserverFlags: string[]): Promise<string[]> {
  const mode = values['without-flowschema'] ? `${run}, without the FlowSchema` : run;
  const plane = await startControlPlane({ name: 'fleet', audit: true, apiserverFlags });
  if (values['without-flowschema']) {
    for (const name of ['kubeboot-approver', 'kubeboot-approver-leader-election']) {
      const res = await plane.admin.request('DELETE', `/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/${name}`);
      if (res.status !== 200) throw new Error(`deleting FlowSchema ${name}: ${res.status}`);
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-fleet-'));
  try {
    const nodes: NodeRun[] = [];
    // Tokens are made before the clock starts, in parallel batches (each waits until it authenticates).
    const tokens: { id: string; token: string }[] = [];
    await inBatches(
      Array.from({ length: NODES }, (_, i) => i),
      50,
      async () => void tokens.push(await plane.admin.createBootstrapToken()),
    );
    for (let i = 0; i < NODES; i++) {
      const name = `fleet-${i}`;
      const config = nodeConfig(join(dir, name), name);
      mkdirSync(join(dir, name));
      await plane.writeBootstrapKubeconfig(config.bootstrapKubeconfig, tokens[i]!.token, { ca: 'data' });
      nodes.push({ name, token: tokens[i]!, config, log: [], bootstrapMs: null, renewMs: null, error: null });
    }
    const rssBefore = process.memoryUsage().rss;
    const started = Date.now();
    await Promise.all(
      nodes.map(async (n) => {
        const t0 = performance.now();
        try {
          await bootstrapNode(await openPass(n.config, { logger: capture(n.log), clock: systemClock }));
          n.bootstrapMs = performance.now() - t0;
        } catch (err) {
          n.error = (err as Error).message;
        }
      }),
    );
    const allCredentialed = Date.now() - started;
    const peakRssPerNode = (process.memoryUsage().rss - rssBefore) / NODES / 1024;
    const bootstrapAudit = audit(plane, started);

    if (values['ca-rotation']) return await caRotationCost(plane, nodes, started);

    // A renewal pass, each node authenticated by its own new certificate.
    const renewStarted = Date.now();
    await Promise.all(
      nodes.map(async (n) => {
        const node = (await assessNode(n.config, new Date())).kubelet;
        if (!isNodeCredential(node)) return;
        const t0 = performance.now();
        try {
          await renewIdentity(n.config, node, node, { logger: capture(n.log), clock: systemClock });
          n.renewMs = performance.now() - t0;
        } catch (err) {
          n.error = `renewal: ${(err as Error).message}`;
        }
      }),
    );
    const renewAudit = audit(plane, renewStarted);

    // A node asks first as its bootstrap token's user, then as system:node:<name>.
    const nodeOfUser = new Map<string, string>(
      nodes.flatMap((n) => [
        [`system:bootstrap:${n.token.id}`, n.name],
        [`system:node:${n.name}`, n.name],
      ]),
    );
    const perNode = (events: AuditEvent[]) => {
      const byNode = new Map<string, number>();
      for (const e of events) {
        const node = nodeOfUser.get(e.user?.username ?? '');
        if (node !== undefined) byNode.set(node, (byNode.get(node) ?? 0) + 1);
      }
      return [...byNode.values()];
    };
    const peakPerSecond = (events: AuditEvent[]) => {
      const counts = new Map<number, number>();
      for (const e of events)
        counts.set(
          Math.floor(Date.parse(e.requestReceivedTimestamp) / 1000),
          (counts.get(Math.floor(Date.parse(e.requestReceivedTimestamp) / 1000)) ?? 0) + 1,
        );
      return Math.max(0, ...counts.values());
    };
    const peakWatches = (events: AuditEvent[]) => {
      const edges = events
        .filter((e) => e.verb === 'watch')
        .flatMap((e) => [[Date.parse(e.requestReceivedTimestamp), 1] as const, [Date.parse(e.stageTimestamp), -1] as const]);
      edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      let open = 0;
      let peak = 0;
      for (const [, d] of edges) peak = Math.max(peak, (open += d));
      return peak;
    };
    const throttled = (events: AuditEvent[]) => events.filter((e) => e.responseStatus?.code === 429).length;
    const APPROVER_USER = 'kubeboot:approver';
    const approverEvents = [...bootstrapAudit, ...renewAudit].filter((e) => e.user?.username === APPROVER_USER);
    const nodeEvents = [...bootstrapAudit, ...renewAudit].filter((e) => nodeOfUser.has(e.user?.username ?? ''));
    const approverMs = approverEvents
      .filter((e) => e.verb !== 'watch')
      .map((e) => Date.parse(e.stageTimestamp) - Date.parse(e.requestReceivedTimestamp));
    // Retries logged by the product, with the wait it chose; none may come sooner than the first backoff step.
    const retryWaits = nodes.flatMap((n) => n.log.flatMap((l) => [...l.matchAll(/retrying in ([\d.]+)s/g)].map((m) => Number(m[1]))));
    const tooFast = retryWaits.filter((s) => s < 1).length;
    const failed = nodes.filter((n) => n.error !== null);
    const boot = nodes.flatMap((n) => (n.bootstrapMs === null ? [] : [n.bootstrapMs]));
    const renew = nodes.flatMap((n) => (n.renewMs === null ? [] : [n.renewMs]));
    const reqBoot = perNode(bootstrapAudit);
    const reqRenew = perNode(renewAudit);
    const approvedBy = new Map<string, number>();
    for (const csr of await plane.admin.listCsrs()) {
      const reason = csr.status?.conditions?.find((c: { type: string }) => c.type === 'Approved')?.reason ?? '(not approved)';
      approvedBy.set(reason, (approvedBy.get(reason) ?? 0) + 1);
    }
    const approverPid = plane.kubeletApprover?.child.pid;
    const approverRss = approverPid
      ? Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${approverPid}/status`, 'utf8'))?.[1] ?? 0) / 1024
      : 0;
    return [
      `| ${mode} | all ${NODES} credentialed in ${(allCredentialed / 1000).toFixed(1)} s (${NODES - failed.length} ok, ${failed.length} failed${failed[0] ? `: ${failed[0].error}` : ''}) |`,
      `| ${mode} | bootstrap latency p50 ${quantile(boot, 0.5).toFixed(0)} ms, p99 ${quantile(boot, 0.99).toFixed(0)} ms; renewal p50 ${quantile(renew, 0.5).toFixed(0)} ms, p99 ${quantile(renew, 0.99).toFixed(0)} ms |`,
      `| ${mode} | API requests per node: bootstrap ${Math.min(...reqBoot)}-${Math.max(...reqBoot)} (mean ${(reqBoot.reduce((a, b) => a + b, 0) / reqBoot.length).toFixed(2)}), renewal ${Math.min(...reqRenew)}-${Math.max(...reqRenew)} (mean ${(reqRenew.reduce((a, b) => a + b, 0) / reqRenew.length).toFixed(2)}) |`,
      `| ${mode} | peak ${peakPerSecond(bootstrapAudit)} requests/s; ${throttled(bootstrapAudit) + throttled(renewAudit)} answered 429; peak ${peakWatches(bootstrapAudit)} watches open |`,
      `| ${mode} | kubeboot approver: ${approverEvents.length} requests, ${throttled(approverEvents)} answered 429, p99 ${quantile(approverMs, 0.99)} ms, max ${Math.max(0, ...approverMs)} ms (audit); nodes: ${nodeEvents.length} requests, ${throttled(nodeEvents)} answered 429 |`,
      `| ${mode} | ${retryWaits.length} retries logged, shortest wait ${retryWaits.length ? Math.min(...retryWaits).toFixed(1) : '-'} s, ${tooFast} under 1 s |`,
      `| ${mode} | harness memory ${peakRssPerNode.toFixed(0)} KiB per simulated node (RSS growth / N) |`,
      `| ${mode} | kubelet client CSRs by approval: ${[...approvedBy].map(([r, c]) => `${r} ${c}`).join(', ')}; kubeboot approver peak RSS ${approverRss.toFixed(0)} MiB |`,
    ];
  } finally {
    await plane.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** kube-apiserver's CPU time so far, in ms (utime + stime from /proc, 100 ticks a second). */
function apiserverCpuMs(plane: ControlPlane): number {
  const fields = readFileSync(`/proc/${plane.pids()['kube-apiserver']}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** One CA check per node, all at once, as the fleet's polls would land if they coincided: requests, latency, API server CPU. */
async function caRotationCost(plane: ControlPlane, nodes: NodeRun[], bootStarted: number): Promise<string[]> {
  const failedBoot = nodes.filter((n) => n.error !== null).length;
  await inBatches(nodes, 50, async (n) => void (await plane.admin.request('POST', '/api/v1/nodes', { metadata: { name: n.name } })));
  const keepers = nodes.map(
    (n) =>
      new TrustKeeper({
        config: () => n.config,
        logger: capture(n.log),
        clock: systemClock,
        random: Math.random,
        signal: new AbortController().signal,
        nodeCredential: () => null,
        serialize: serializer(),
        reissue: () => undefined,
        runCommands: async () => true,
        metrics: createMetrics({ certificates: () => [], processMetrics: false }),
      }),
  );
  const round = async (what: string): Promise<string[]> => {
    const since = Date.now();
    const cpu0 = apiserverCpuMs(plane);
    const ms: number[] = [];
    let errors = 0;
    await Promise.all(
      keepers.map(async (k) => {
        const t0 = performance.now();
        try {
          await k.check();
          ms.push(performance.now() - t0);
        } catch {
          errors++;
        }
      }),
    );
    const cpu = apiserverCpuMs(plane) - cpu0;
    const events = audit(plane, since).filter((e) => e.user?.username?.startsWith('system:node:'));
    const verbs = new Map<string, number>();
    for (const e of events) verbs.set(e.verb, (verbs.get(e.verb) ?? 0) + 1);
    const perNode = events.length / nodes.length;
    return [
      `| CA check, ${what} | ${perNode.toFixed(2)} requests per node (${[...verbs].map(([v, c]) => `${v} ${c}`).join(', ')}); ${errors} failed; latency p50 ${quantile(ms, 0.5).toFixed(0)} ms, p99 ${quantile(ms, 0.99).toFixed(0)} ms (all ${nodes.length} at once) |`,
      `| CA check, ${what} | kube-apiserver CPU ${cpu} ms for ${nodes.length} checks = ${(cpu / nodes.length).toFixed(2)} ms per check; at one check per node every 10 min: ${((perNode * nodes.length) / 600).toFixed(2)} requests/s, ${(((cpu / nodes.length) * (nodes.length / 600)) / 10).toFixed(3)} % of one core |`,
    ];
  };
  const first = await round('first look (writes the Node annotation)');
  const steady = await round('bundle unchanged');
  // The rotation's first step: old + new CA published.
  const ca2 = await createCa('fleet-ca-2');
  const cm = (await plane.admin.request<{ data: Record<string, string> }>('GET', '/api/v1/namespaces/kube-public/configmaps/cluster-info'))
    .body;
  cm.data.kubeconfig = clusterInfoKubeconfig(plane.server, trustedBundle(plane.caPem + ca2.certPem).pem);
  await plane.admin.request('PUT', '/api/v1/namespaces/kube-public/configmaps/cluster-info', cm);
  const adopt = await round('new bundle adopted');
  const adopted = nodes.filter((n) => n.log.some((l) => l.includes('adopting the CA bundle'))).length;
  return [
    `| bootstrap | ${nodes.length - failedBoot} of ${nodes.length} credentialed in ${((Date.now() - bootStarted) / 1000).toFixed(1)} s (Nodes created by the admin, as kubelets would register them) |`,
    ...first,
    ...steady,
    ...adopt,
    `| CA check, new bundle adopted | ${adopted} of ${nodes.length} nodes adopted old + new CA |`,
  ];
}

const rows = values['ca-rotation']
  ? await fleet('ca-rotation', [])
  : [
      ...(values['low-only'] ? [] : await fleet('default limits', [])),
      ...(await fleet(`--max-requests-inflight=${LOW_INFLIGHT}`, [
        `--max-requests-inflight=${LOW_INFLIGHT}`,
        `--max-mutating-requests-inflight=${Math.max(1, Math.floor(LOW_INFLIGHT / 2))}`,
      ])),
    ];
process.stdout.write(
  `\n${NODES} simulated nodes, one process, one real control plane\n\n| run | figure |\n|---|---|\n${rows.join('\n')}\n`,
);
