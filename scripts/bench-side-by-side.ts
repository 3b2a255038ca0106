// `make bench`, side by side: a join storm of kubelet client CSRs (signer
// kubernetes.io/kube-apiserver-client-kubelet), approved twice on one plane in
// one run:
//   (a) by kube-controller-manager's csrapproving on the bindings kubeadm
//       makes (bootstrappers → nodeclient, nodes → selfnodeclient), the
//       plane's approver stopped; the bindings are deleted after;
//   (b) by `kubeboot approver --approve-kubelet-client`, those bindings gone.
// Each phase is two storms: every node renews (requester system:node:<n>, no
// token involved) at the same moment, then as many new nodes ask for their
// first certificate at once with one bootstrap token bound to all their names
// (a pool). CSR created → approved as the API server's audit log has it,
// p50/p90/p99/max and approvals/s; CPU and peak RSS of the approving process
// (and the API server's) during each storm; for the approver, where its time
// goes, from the audit log: nothing in the approver measures it.
//
// Before them, the floor: the same 1,000 renewal CSRs created with nothing
// approving them, for what the API server spends on a storm whoever approves.
// Between them, the floor for approving: the two storms all at once with
// scripts/bare-approver.ts, which approves each CSR unchecked as it sees it.
// After the all-at-once storms, the same two at an arrival rate
// (KUBEBOOT_BENCH_RATE CSRs a second, default 20: 1,000 nodes over 50 s, a
// scale-up's shape), labelled as such.
//
// Alone: npm run bench:approvers   (KUBEBOOT_BENCH_NODES, default 1000; KUBEBOOT_BENCH_RATE, 0 for none;
// KUBEBOOT_BENCH_APPROVER_NODE_OPTIONS, e.g. "--cpu-prof --cpu-prof-dir=DIR", given to the approver as NODE_OPTIONS;
// KUBEBOOT_BENCH_APPROVER_LOG_LEVEL, e.g. debug; KUBEBOOT_BENCH_APPROVER_LOG, a file the approver's output is written to at the end;
// KUBEBOOT_BENCH_LEGS, a comma list of floor, kcm, bare, kubeboot, default all: for a quick iteration,
// e.g. KUBEBOOT_BENCH_LEGS=bare,kubeboot KUBEBOOT_BENCH_NODES=200 KUBEBOOT_BENCH_RATE=0)
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { KubeClient as WatchClient } from '../agent/kube/client.js';
import { CSRS, craftCsrPem, createNode, installApprover, nodeClient, startApprover } from '../test/support/approver.js';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from '../test/support/http.js';
import { type Running, startWatched } from '../test/support/kubeboot.js';
import type { AuditEvent } from '../test/support/node-join.js';

const NODES = Number(process.env.KUBEBOOT_BENCH_NODES ?? 1000);
/** CSRs a second in the paced storms (0: none). */
const RATE = Number(process.env.KUBEBOOT_BENCH_RATE ?? 20);
const APPROVER_NODE_OPTIONS = process.env.KUBEBOOT_BENCH_APPROVER_NODE_OPTIONS;
/** The approver's --log-level, e.g. debug; with KUBEBOOT_BENCH_APPROVER_LOG, where its whole output is written at the end. */
const APPROVER_LOG_LEVEL = process.env.KUBEBOOT_BENCH_APPROVER_LOG_LEVEL;
const APPROVER_LOG = process.env.KUBEBOOT_BENCH_APPROVER_LOG;
const LEG_NAMES = ['floor', 'kcm', 'bare', 'kubeboot'] as const;
/** The legs run, in LEG_NAMES order whatever order they are given in. */
const LEGS = new Set((process.env.KUBEBOOT_BENCH_LEGS ?? LEG_NAMES.join(',')).split(',').map((l) => l.trim()));
for (const leg of LEGS)
  if (!(LEG_NAMES as readonly string[]).includes(leg)) throw new Error(`KUBEBOOT_BENCH_LEGS: no leg ${leg} (${LEG_NAMES.join(', ')})`);
/** Where the approver serves /metrics during the bench (its own account of the storm). */
const METRICS_PORT = Number(process.env.KUBEBOOT_BENCH_METRICS_PORT ?? 19581);
/** A storm not approved in this long is reported as far as it got. */
const STORM_TIMEOUT_MS = 15 * 60_000;
const KUBELET_CLIENT = {
  signer: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'client auth'],
};
const APPROVER_USER = 'kubeboot:approver';
/** kube-controller-manager runs each controller as its own service account (--use-service-account-credentials). */
const KCM_APPROVER_USER = 'system:serviceaccount:kube-system:certificate-controller';

// As kubeadm makes them (cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go), for
// every bootstrap token rather than kubeadm's default-node-token group: the plane's tokens carry no extra group.
const KCM_BINDINGS = [
  { name: 'kubeadm:node-autoapprove-bootstrap', role: 'nodeclient', group: 'system:bootstrappers' },
  { name: 'kubeadm:node-autoapprove-certificate-rotation', role: 'selfnodeclient', group: 'system:nodes' },
];
const CLUSTER_ROLE_BINDINGS = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';

const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));

function sample(pid: number): { rssKiB: number; cpuSeconds: number } {
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return { rssKiB, cpuSeconds: (Number(fields[11]) + Number(fields[12])) / ticksPerSecond };
}

type Usage = Record<string, { cpuSeconds: number; peakRssMiB: number }>;

/** CPU seconds spent and the largest RSS seen (sampled every 100 ms) until `done` settles. */
async function during<T>(pids: Record<string, number>, done: Promise<T>): Promise<{ result: T; usage: Usage }> {
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

/** One watch over every CSR: when each was first seen (epoch ms, this host's clock, as the audit log's) and which are approved and issued. */
async function watchCsrs(plane: ControlPlane) {
  const cert = await plane.mintClientCert({ commonName: 'bench-storm-watch', organizations: ['system:masters'] });
  const client = new WatchClient({ server: plane.server, caPem: plane.caPem }, { kind: 'client-certificate', ...cert });
  const seenAt = new Map<string, number>();
  const approved = new Set<string>();
  const issued = new Set<string>();
  let changed = () => {};
  const abort = new AbortController();
  type Csr = { metadata: { name: string; resourceVersion: string }; status?: { certificate?: string; conditions?: { type: string }[] } };
  let rv = (await client.request<{ metadata: { resourceVersion: string } }>('GET', CSRS)).body.metadata.resourceVersion;
  const watching = (async () => {
    // The server ends a watch after a few minutes; a storm can outlast that.
    while (!abort.signal.aborted) {
      try {
        for await (const ev of client.watch<Csr>(CSRS, { resourceVersion: rv }, abort.signal)) {
          const { name, resourceVersion } = ev.object.metadata;
          rv = resourceVersion;
          if (!seenAt.has(name)) seenAt.set(name, Date.now());
          if (ev.object.status?.conditions?.some((c) => c.type === 'Approved')) approved.add(name);
          if (ev.object.status?.certificate) issued.add(name);
          changed();
        }
      } catch (err) {
        if (!abort.signal.aborted) process.stderr.write(`storm: CSR watch ended (${(err as Error).message}); watching again\n`);
        await sleep(500);
      }
    }
  })();
  return {
    seenAt,
    /** Resolves once every one of `names` is issued, or at the deadline; how many were approved. */
    async until(names: string[], deadline: number): Promise<number> {
      const progress = setInterval(() => {
        const n = names.filter((x) => approved.has(x)).length;
        process.stderr.write(`storm: ${n} of ${names.length} approved, ${names.filter((x) => issued.has(x)).length} issued\n`);
      }, 10_000);
      try {
        while (!names.every((x) => issued.has(x)) && Date.now() < deadline)
          await new Promise<void>((resolve) => {
            changed = resolve;
            setTimeout(resolve, 1_000);
          });
      } finally {
        clearInterval(progress);
      }
      return names.filter((x) => approved.has(x)).length;
    },
    async stop() {
      abort.abort();
      await watching;
      await client.close();
    },
  };
}

type Watch = Awaited<ReturnType<typeof watchCsrs>>;

/** Successful (and 409) requests of the audit log written after `fromByte`, answered. */
function auditSince(plane: ControlPlane, fromByte: number): AuditEvent[] {
  const events: AuditEvent[] = [];
  for (const line of readFileSync(plane.auditLog!).subarray(fromByte).toString('utf8').split('\n')) {
    if (!line.includes('"ResponseComplete"')) continue;
    events.push(JSON.parse(line) as AuditEvent);
  }
  return events;
}

/** A request for one of the approver's records (kubeboot.io objects: bindings, claims, replacements, revocations, inventory). */
const isRecord = (e: AuditEvent) => e.requestURI.startsWith('/apis/kubeboot.io/');
const received = (e: AuditEvent) => Date.parse(e.requestReceivedTimestamp);
const answered = (e: AuditEvent) => Date.parse(e.stageTimestamp);
const ms = (v: number) => (v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${v.toFixed(0)} ms`);

function spread(values: number[]): string {
  if (values.length === 0) return 'none';
  const l = [...values].sort((a, b) => a - b);
  return `p50 ${ms(percentile(l, 50))}, p90 ${ms(percentile(l, 90))}, p99 ${ms(percentile(l, 99))}, max ${ms(l.at(-1)!)}`;
}

/** The most requests of these events the API server had in hand at once. */
function mostInFlight(events: AuditEvent[]): number {
  const edges = events.flatMap((e) => [
    [received(e), 1],
    [answered(e), -1],
  ]);
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let now = 0;
  let most = 0;
  for (const [, d] of edges) most = Math.max(most, (now += d!));
  return most;
}

interface StormRequest {
  client: KubeClient;
  /** The CSR's exact name; the node's name is its tail after `-`. */
  csr: string;
  node: string;
  pem: string;
}

/** The approver's /metrics as name{labels} → value (its own account of where its time goes). */
type Scrape = Map<string, number>;

async function scrape(port: number): Promise<Scrape> {
  const out: Scrape = new Map();
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const line of text.split('\n')) {
      const m = /^(kubeboot_approver_\w+(?:\{[^}]*\})?) (\S+)$/.exec(line);
      if (m) out.set(m[1]!, Number(m[2]));
    }
  } catch {
    // An approver without the listener (an older build) has no account of its own.
  }
  return out;
}

interface StormResult {
  kind: string;
  /** The approver's metrics before and after the storm. */
  metrics?: [Scrape, Scrape];
  requests: StormRequest[];
  events: AuditEvent[];
  approvedCount: number;
  usage: Usage;
  /** 429s and lost connections the creates got (and retried). */
  throttled: number;
  /** The approver's warn and error lines during the storm. */
  warnings: string[];
  /** The approver's leader transitions during the storm ('became the leader', 'stopped leading' lines). */
  transitions: string[];
}

/**
 * Every request sent at one moment (or, given `rate`, the i-th at i/rate s),
 * on connections opened just before (a renewing kubelet has one open), then
 * waits until every CSR is issued.
 */
async function storm(
  plane: ControlPlane,
  watch: Watch,
  kind: string,
  requests: StormRequest[],
  pids: Record<string, number>,
  approver?: Running,
  rate = 0,
): Promise<StormResult> {
  const logFrom = approver?.output().length ?? 0;
  const before = approver ? await scrape(METRICS_PORT) : undefined;
  await Promise.all(requests.map((r) => r.client.request('GET', '/version').catch(() => undefined)));
  const auditFrom = statSync(plane.auditLog!).size;
  process.stderr.write(`storm: ${kind}: ${requests.length} CSRs\n`);
  const names = requests.map((r) => r.csr);
  let throttled = 0;
  const { result: approvedCount, usage } = await during(
    pids,
    (async () => {
      const start = performance.now();
      await Promise.all(
        requests.map(async (r, i) => {
          if (rate > 0) await sleep(Math.max(0, start + (i * 1000) / rate - performance.now()));
          throttled += await createCsr(r);
        }),
      );
      return watch.until(names, Date.now() + STORM_TIMEOUT_MS);
    })(),
  );
  await Promise.all(requests.map((r) => r.client.close()));
  const lines = (approver?.output().slice(logFrom) ?? '').split('\n');
  const warnings = lines.filter((l) => l.includes('"level":"warn"') || l.includes('"level":"error"'));
  const transitions = lines.filter((l) => l.includes('"became the leader"') || l.includes('"stopped leading"'));
  const metrics: [Scrape, Scrape] | undefined = before ? [before, await scrape(METRICS_PORT)] : undefined;
  return {
    kind,
    requests,
    events: auditSince(plane, auditFrom),
    approvedCount,
    usage,
    throttled,
    warnings,
    transitions,
    ...(metrics ? { metrics } : {}),
  };
}

/**
 * Creates the CSR as a kubelet does: a 429 (the API server's inflight limit,
 * hit by a storm) is retried after its Retry-After, as client-go does, and a
 * connection lost before the answer (a loaded plane) is retried after 1 s
 * (then AlreadyExists means the first one got through). Returns how many
 * retries it took.
 */
async function createCsr(r: StormRequest, labels?: Record<string, string>): Promise<number> {
  const body = {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name: r.csr, ...(labels ? { labels } : {}) },
    spec: { request: Buffer.from(r.pem).toString('base64'), signerName: KUBELET_CLIENT.signer, usages: KUBELET_CLIENT.usages },
  };
  for (let retried = 0; ; retried++) {
    let res: Awaited<ReturnType<KubeClient['request']>>;
    try {
      res = await r.client.request('POST', CSRS, body);
    } catch (err) {
      if (retried >= 5) throw err;
      process.stderr.write(`storm: create ${r.csr}: ${(err as Error).message}; retrying\n`);
      await sleep(1_000);
      continue;
    }
    if (res.status !== 429) {
      if (retried > 0 && res.status === 409) return retried;
      expectStatus(res, `create CSR ${r.csr}`, 201);
      return retried;
    }
    await sleep(Number(res.headers['retry-after'] ?? 1) * 1000);
  }
}

/**
 * What the plane spends on a storm that nothing approves: the CSRs created at
 * one moment, then 5 s for the watches and kube-controller-manager (its
 * csrapproving reviews them and is refused) to see them; deleted after.
 */
async function floor(plane: ControlPlane, requests: StormRequest[], pids: Record<string, number>): Promise<[string, string][]> {
  await Promise.all(requests.map((r) => r.client.request('GET', '/version').catch(() => undefined)));
  const auditFrom = statSync(plane.auditLog!).size;
  const began = performance.now();
  let createdMs = 0;
  const { usage } = await during(
    pids,
    (async () => {
      await Promise.all(requests.map((r) => createCsr(r, { 'kubeboot.io/bench': 'floor' })));
      createdMs = performance.now() - began;
      await sleep(5_000);
    })(),
  );
  await Promise.all(requests.map((r) => r.client.close()));
  const creates = auditSince(plane, auditFrom).filter(
    (e) => e.verb === 'create' && e.objectRef?.resource === 'certificatesigningrequests' && e.objectRef.subresource === undefined,
  );
  expectStatus(
    await plane.admin.request('DELETE', `${CSRS}?labelSelector=${encodeURIComponent('kubeboot.io/bench=floor')}`),
    'delete the floor storm',
    200,
  );
  const api = usage['kube-apiserver']!;
  return [
    [
      `floor: ${requests.length} renewal CSRs created at once, nothing approving (creates, watches, kube-controller-manager's refused reviews)`,
      `all created in ${ms(createdMs)}; create served in ${spread(creates.map((e) => answered(e) - received(e)))}; kube-apiserver CPU ${api.cpuSeconds.toFixed(1)} s (${((api.cpuSeconds * 1000) / requests.length).toFixed(1)} ms per CSR), kube-controller-manager ${usage['kube-controller-manager']!.cpuSeconds.toFixed(1)} s`,
    ],
  ];
}

/**
 * scripts/bare-approver.ts as the approver's user (the same RBAC, the same
 * client code), running once its watch is open.
 */
async function startBareApprover(plane: ControlPlane, dir: string): Promise<Running> {
  const credential = join(dir, 'bare-approver.json');
  const cert = await plane.mintClientCert({ commonName: APPROVER_USER });
  writeFileSync(credential, JSON.stringify({ server: plane.server, caPem: plane.caPem, ...cert }), { mode: 0o600 });
  const script = fileURLToPath(new URL('bare-approver.ts', import.meta.url));
  const bare = startWatched(process.execPath, ['--import', '@tapjs/typescript/import', script, credential], {
    PATH: process.env.PATH,
    TS_NODE_TRANSPILE_ONLY: '1',
  });
  await bare.waitForOutput(/^watching$/m, 60_000);
  return bare;
}

/** CSR created → first approval written, both as the API server answered them: each approved CSR's, and the span from the first create to the last approval. */
function latencies(s: StormResult): { latencies: number[]; firstCreated: number; lastCreated: number; spanSeconds: number } {
  const created = new Map<string, number>();
  const approvedAt = new Map<string, number>();
  for (const e of s.events) {
    const ref = e.objectRef ?? {};
    const code = e.responseStatus?.code ?? 0;
    if (ref.resource !== 'certificatesigningrequests' || ref.name === undefined || code < 200 || code > 299) continue;
    if (e.verb === 'create' && ref.subresource === undefined) created.set(ref.name, answered(e));
    if (e.verb === 'update' && ref.subresource === 'approval' && !approvedAt.has(ref.name)) approvedAt.set(ref.name, answered(e));
  }
  const firstCreated = Math.min(...created.values());
  return {
    latencies: s.requests.filter((r) => approvedAt.has(r.csr)).map((r) => approvedAt.get(r.csr)! - created.get(r.csr)!),
    firstCreated,
    lastCreated: Math.max(...created.values()),
    spanSeconds: (Math.max(...approvedAt.values()) - firstCreated) / 1000,
  };
}

function p99(s: StormResult): number {
  return percentile(
    latencies(s).latencies.sort((a, b) => a - b),
    99,
  );
}

function latencyRow(s: StormResult, who: string): [string, string] {
  const { latencies: l, firstCreated, lastCreated, spanSeconds } = latencies(s);
  const all =
    s.approvedCount === s.requests.length
      ? ''
      : `; ONLY ${s.approvedCount} of ${s.requests.length} approved in ${STORM_TIMEOUT_MS / 60_000} min`;
  return [
    `storm, ${s.kind}, ${who}: created → approved (${s.requests.length} CSRs, created over ${ms(lastCreated - firstCreated)}, ${s.throttled} × 429 or lost connection retried)`,
    `${spread(l)}; ${(l.length / spanSeconds).toFixed(0)} approvals/s${all}`,
  ];
}

function usageRow(s: StormResult, who: string, key: string): [string, string] {
  const u = s.usage[key]!;
  const api = s.usage['kube-apiserver']!;
  return [
    `storm, ${s.kind}, ${who}: CPU, peak RSS (kube-apiserver's)`,
    `${u.cpuSeconds.toFixed(1)} s, ${u.peakRssMiB.toFixed(0)} MiB (${api.cpuSeconds.toFixed(1)} s, ${api.peakRssMiB.toFixed(0)} MiB)`,
  ];
}

/**
 * What kube-controller-manager's csrapproving client did: its request rate is
 * its queue. Its signer acts as the same service account (its status writes
 * are left out here) but through a client, and a rate limiter, of its own.
 */
function kcmRow(s: StormResult): [string, string] {
  const own = s.events.filter((e) => e.user?.username === KCM_APPROVER_USER);
  const sars = own.filter((e) => e.objectRef?.resource === 'subjectaccessreviews');
  const approvals = own.filter((e) => e.objectRef?.subresource === 'approval');
  const approving = [...sars, ...approvals];
  const first = Math.min(...approving.map(received));
  const last = Math.max(...approving.map(answered));
  return [
    `storm, ${s.kind}, kube-controller-manager: its csrapproving client (audit log)`,
    `${sars.length} SubjectAccessReviews + ${approvals.length} approvals at ${(approving.length / ((last - first) / 1000)).toFixed(1)} requests/s; SubjectAccessReview served in ${spread(sars.map((e) => answered(e) - received(e)))}; at most ${mostInFlight(approving)} in flight`,
  ];
}

/**
 * Where the approver's time goes, from the audit log: from the CSR's
 * creation to the approver's first request for it (its Node GET: watch
 * delivery, the informer, the queue), then each request it makes as the API
 * server served it. The watch delivery is a second watcher's (this process's),
 * an upper bound: this process is busy sending the storm.
 */
function approverRows(s: StormResult, watch: Watch): [string, string][] {
  const created = new Map<string, number>();
  for (const e of s.events)
    if (e.verb === 'create' && e.objectRef?.resource === 'certificatesigningrequests' && e.objectRef.subresource === undefined)
      created.set(e.objectRef.name!, answered(e));
  const own = s.events.filter((e) => e.user?.username === APPROVER_USER);
  const served = (pick: (e: AuditEvent) => boolean) => {
    const picked = own.filter(pick);
    return `${picked.length} × ${spread(picked.map((e) => answered(e) - received(e)))}`;
  };
  const nodeGet = new Map<string, AuditEvent>();
  for (const e of own)
    if (e.objectRef?.resource === 'nodes' && e.verb === 'get' && !nodeGet.has(e.objectRef.name!)) nodeGet.set(e.objectRef.name!, e);
  const approval = new Map<string, AuditEvent>();
  for (const e of own) if (e.objectRef?.subresource === 'approval' && e.responseStatus?.code === 200) approval.set(e.objectRef.name!, e);
  const queued: number[] = [];
  const deciding: number[] = [];
  const delivered: number[] = [];
  for (const r of s.requests) {
    const at = created.get(r.csr);
    const first = nodeGet.get(r.node);
    const done = approval.get(r.csr);
    if (at === undefined) continue;
    if (watch.seenAt.has(r.csr)) delivered.push(watch.seenAt.get(r.csr)! - at);
    if (first !== undefined) queued.push(received(first) - at);
    if (first !== undefined && done !== undefined) deciding.push(answered(done) - received(first));
  }
  const conflicts = own.filter((e) => e.responseStatus?.code === 409).length;
  const byMessage = new Map<string, number>();
  for (const line of s.warnings) {
    const { message = line } = JSON.parse(line) as { message?: string };
    byMessage.set(message, (byMessage.get(message) ?? 0) + 1);
  }
  const label = `storm, ${s.kind}, kubeboot approver`;
  return [
    ...ownAccount(s, label),
    [`${label}: CSR created → seen by another watch (this process's)`, spread(delivered)],
    // Only a first issue's Node GET names the CSR's node before its approval: a renewal has no such request (its own metrics tell its queue wait).
    ...(queued.length === 0
      ? []
      : ([
          [`${label}: CSR created → the approver's first request for it, its Node GET (watch, informer, queue)`, spread(queued)],
          [`${label}: its Node GET → its approval written (the decision, and its batch's)`, spread(deciding)],
        ] as [string, string][])),
    [
      `${label}: its requests as the API server served them (audit log)`,
      [
        `Node GET ${served((e) => e.objectRef?.resource === 'nodes')}`,
        // Records are read through informers (their lists and watches are not per CSR); a GET is a re-read after a 409, or a legacy ConfigMap's.
        `record GET ${served((e) => e.verb === 'get' && (isRecord(e) || e.objectRef?.resource === 'configmaps'))}`,
        `claim write ${served((e) => isRecord(e) && ['create', 'update', 'patch'].includes(e.verb))}`,
        `SubjectAccessReview ${served((e) => e.objectRef?.resource === 'subjectaccessreviews')}`,
        `approval PUT ${served((e) => e.objectRef?.subresource === 'approval')}`,
        `Lease ${served((e) => e.objectRef?.resource === 'leases')}`,
        `${conflicts} answered 409; at most ${mostInFlight(own.filter((e) => e.objectRef?.resource !== 'leases'))} in flight`,
      ].join('; '),
    ],
    [
      `${label}: leader transitions (lost and taken again)`,
      s.transitions.length === 0
        ? 'none'
        : s.transitions
            .map((l) => JSON.parse(l) as { message?: string; why?: string })
            .map((l) => `${l.message ?? ''} (${l.why ?? ''})`)
            .join('; '),
    ],
    [
      `${label}: warnings it logged`,
      byMessage.size === 0 ? 'none' : [...byMessage].map(([m, n]) => `${n} × ${m.slice(0, 120)}`).join('; '),
    ],
  ];
}

/** The approver's own account of the storm: queue wait, batches, and its API calls as it timed them (means). */
function ownAccount(s: StormResult, label: string): [string, string][] {
  if (!s.metrics) return [];
  const [before, after] = s.metrics;
  const delta = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0);
  const mean = (name: string, labels = '', scale = 1000) => {
    const n = delta(`${name}_count${labels}`);
    return n === 0
      ? 'none'
      : `${n} × mean ${((delta(`${name}_sum${labels}`) / n) * scale).toFixed(scale === 1 ? 1 : 0)}${scale === 1 ? '' : ' ms'}`;
  };
  if (delta('kubeboot_approver_queue_wait_seconds_count') === 0 && delta('kubeboot_approver_batch_size_count') === 0) return [];
  const calls = ['node', 'record', 'subjectaccessreview', 'claim', 'approval'].map(
    (c) => `${c} ${mean('kubeboot_approver_request_seconds', `{call="${c}"}`)}`,
  );
  return [
    [
      `${label}: its own metrics: queue wait; batches (CSRs each; time each)`,
      `${mean('kubeboot_approver_queue_wait_seconds')}; ${mean('kubeboot_approver_batch_size', '', 1)}; ${mean('kubeboot_approver_batch_seconds')}`,
    ],
    [`${label}: its own metrics: API calls as it timed them (its limiter's wait included)`, calls.join('; ')],
  ];
}

async function setKcmBindings(plane: ControlPlane, present: boolean): Promise<void> {
  for (const b of KCM_BINDINGS) {
    const res = present
      ? await plane.admin.request('POST', CLUSTER_ROLE_BINDINGS, {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRoleBinding',
          metadata: { name: b.name },
          roleRef: {
            apiGroup: 'rbac.authorization.k8s.io',
            kind: 'ClusterRole',
            name: `system:certificates.k8s.io:certificatesigningrequests:${b.role}`,
          },
          subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: b.group }],
        })
      : await plane.admin.request('DELETE', `${CLUSTER_ROLE_BINDINGS}/${b.name}`);
    expectStatus(res, `${present ? 'create' : 'delete'} ClusterRoleBinding ${b.name}`, present ? 201 : 200);
  }
  // The authorizer sees RBAC through an informer: wait until a node's renewal is (or is no longer) allowed.
  await plane.admin.waitFor(`the kube-controller-manager bindings ${present ? 'in force' : 'gone'}`, async () => {
    const review = {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      spec: {
        user: 'system:node:storm-probe',
        groups: ['system:nodes', 'system:authenticated'],
        resourceAttributes: {
          group: 'certificates.k8s.io',
          resource: 'certificatesigningrequests',
          verb: 'create',
          subresource: 'selfnodeclient',
        },
      },
    };
    const res = await plane.admin.request<{ status?: { allowed?: boolean } }>(
      'POST',
      '/apis/authorization.k8s.io/v1/subjectaccessreviews',
      review,
    );
    return (res.body.status?.allowed === true) === present || undefined;
  });
}

/** Each node's renewal CSR, as its kubelet makes it: requester and CN system:node:<n>. */
async function renewals(plane: ControlPlane, phase: string, nodes: string[]): Promise<StormRequest[]> {
  return Promise.all(
    nodes.map(async (node) => ({
      client: await nodeClient(plane, node),
      csr: `${phase}-renew-${node}`,
      node,
      pem: await craftCsrPem({ cn: `system:node:${node}`, o: ['system:nodes'] }),
    })),
  );
}

/** New nodes' first CSRs, all from one bootstrap token bound to their names (a pool's). */
async function firstIssues(plane: ControlPlane, phase: string): Promise<StormRequest[]> {
  const nodes = Array.from({ length: NODES }, (_, i) => `join-${phase}-${i}`);
  const token = await plane.admin.createBootstrapToken({ bind: { names: nodes } });
  return Promise.all(
    nodes.map(async (node) => ({
      client: kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token }),
      csr: `${phase}-first-${node}`,
      node,
      pem: await craftCsrPem({ cn: `system:node:${node}`, o: ['system:nodes'] }),
    })),
  );
}

export async function benchSideBySide(plane: ControlPlane, dir: string): Promise<[string, string][]> {
  if (!plane.auditLog) throw new Error('the storm reads the audit log: start the plane with audit');
  mkdirSync(dir, { recursive: true });
  const nodes = Array.from({ length: NODES }, (_, i) => `storm-${i}`);
  for (let i = 0; i < nodes.length; i += 50) await Promise.all(nodes.slice(i, i + 50).map((n) => createNode(plane, n)));
  const planePids = () => ({
    'kube-controller-manager': plane.pids()['kube-controller-manager']!,
    'kube-apiserver': plane.pids()['kube-apiserver']!,
  });
  const watch = await watchCsrs(plane);
  const rows: [string, string][] = [];
  let approver: Running | undefined;
  try {
    await plane.stopKubeletApprover();
    // The floor: the plane's cost of a storm, nothing approving it.
    if (LEGS.has('floor')) rows.push(...(await floor(plane, await renewals(plane, 'floor', nodes), planePids())));
    // (a) kube-controller-manager on the stock bindings, alone.
    const kcmStorms: StormResult[] = [];
    if (LEGS.has('kcm')) {
      await setKcmBindings(plane, true);
      kcmStorms.push(await storm(plane, watch, 'renewal', await renewals(plane, 'kcm', nodes), planePids()));
      kcmStorms.push(await storm(plane, watch, 'first issue', await firstIssues(plane, 'kcm'), planePids()));
      if (RATE > 0) {
        kcmStorms.push(
          await storm(plane, watch, `renewal at ${RATE}/s`, await renewals(plane, 'kcmp', nodes), planePids(), undefined, RATE),
        );
        kcmStorms.push(
          await storm(plane, watch, `first issue at ${RATE}/s`, await firstIssues(plane, 'kcmp'), planePids(), undefined, RATE),
        );
      }
      await setKcmBindings(plane, false);
    }
    const config = await installApprover(plane, dir);

    // The floor for approving: the same two storms all at once, each CSR approved unchecked as soon as it is seen.
    const bareStorms: StormResult[] = [];
    if (LEGS.has('bare')) {
      const bare = await startBareApprover(plane, dir);
      try {
        const barePids = { ...planePids(), bare: bare.child.pid! };
        bareStorms.push(await storm(plane, watch, 'renewal', await renewals(plane, 'bare', nodes), barePids));
        bareStorms.push(await storm(plane, watch, 'first issue', await firstIssues(plane, 'bare'), barePids));
      } finally {
        bare.child.kill('SIGTERM');
        await bare.done;
      }
    }

    // (b) kubeboot approver, with kube-controller-manager's csrapproving still running, unbound.
    const kbStorms: StormResult[] = [];
    let idleRss = 0;
    if (LEGS.has('kubeboot')) {
      approver = startApprover(
        config,
        // The last --approver-listen wins over the harness's `off`.
        ['--approve-kubelet-client', '--approver-listen', `127.0.0.1:${METRICS_PORT}`],
        {
          ...(APPROVER_NODE_OPTIONS ? { NODE_OPTIONS: APPROVER_NODE_OPTIONS } : {}),
          ...(APPROVER_LOG_LEVEL ? { KUBEBOOT_LOG_LEVEL: APPROVER_LOG_LEVEL } : {}),
        },
      );
      await approver.waitForOutput(/became the leader/, 60_000);
      idleRss = sample(approver.child.pid!).rssKiB / 1024;
      const pids = { ...planePids(), approver: approver.child.pid! };
      kbStorms.push(await storm(plane, watch, 'renewal', await renewals(plane, 'kb', nodes), pids, approver));
      kbStorms.push(await storm(plane, watch, 'first issue', await firstIssues(plane, 'kb'), pids, approver));
      if (RATE > 0) {
        kbStorms.push(await storm(plane, watch, `renewal at ${RATE}/s`, await renewals(plane, 'kbp', nodes), pids, approver, RATE));
        kbStorms.push(await storm(plane, watch, `first issue at ${RATE}/s`, await firstIssues(plane, 'kbp'), pids, approver, RATE));
      }
    }

    // Each storm kind with every leg that ran it; the bare approver ran the all-at-once storms only.
    const kinds = [...new Set([...kcmStorms, ...bareStorms, ...kbStorms].map((st) => st.kind))];
    const ratios: string[] = [];
    for (const kind of kinds) {
      const kcm = kcmStorms.find((st) => st.kind === kind);
      const bare = bareStorms.find((st) => st.kind === kind);
      const kb = kbStorms.find((st) => st.kind === kind);
      if (kcm) rows.push(latencyRow(kcm, 'kube-controller-manager csrapproving'));
      if (bare) rows.push(latencyRow(bare, 'bare approver (no rule checked: the floor)'), usageRow(bare, 'bare approver', 'bare'));
      if (kb) rows.push(latencyRow(kb, 'kubeboot approver'));
      if (kcm) rows.push(usageRow(kcm, 'kube-controller-manager', 'kube-controller-manager'));
      if (kb) rows.push(usageRow(kb, 'kubeboot approver', 'approver'), cpuPerCsrRow(kb, 'kubeboot approver', 'approver'));
      if (bare) rows.push(cpuPerCsrRow(bare, 'bare approver', 'bare'));
      if (kcm) rows.push(kcmRow(kcm));
      if (kb) rows.push(...approverRows(kb, watch));
      if (kb && bare) ratios.push(`${kind} ${(p99(kb) / p99(bare)).toFixed(2)}× the floor`);
      if (kb && kcm) ratios.push(`${kind} ${(p99(kcm) / p99(kb)).toFixed(1)}× faster than kube-controller-manager`);
    }
    if (ratios.length > 0) rows.push(['storm: kubeboot approver p99, created → approved', ratios.join('; ')]);
    if (approver)
      rows.push([
        'storm: kubeboot approver RSS, idle (leader, synced) → after the storms',
        `${idleRss.toFixed(0)} → ${(sample(approver.child.pid!).rssKiB / 1024).toFixed(0)} MiB`,
      ]);
    return rows;
  } finally {
    await watch.stop();
    if (approver) {
      approver.child.kill('SIGTERM');
      await approver.done;
      if (APPROVER_LOG) writeFileSync(APPROVER_LOG, approver.output());
    }
  }
}

/** The approving process's CPU per CSR of the storm. */
function cpuPerCsrRow(s: StormResult, who: string, key: string): [string, string] {
  return [`storm, ${s.kind}, ${who}: CPU per CSR`, `${((s.usage[key]!.cpuSeconds * 1000) / s.requests.length).toFixed(2)} ms`];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = mkdtempSync(join(tmpdir(), 'kubeboot-bench-storm-'));
  const plane = await startControlPlane({ name: 'bench-storm', audit: true });
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
