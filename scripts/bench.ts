// `make bench`: the numbers the issues ask for, as a table. Not a test: it
// asserts nothing and takes a few minutes (one minute of idle sampling).
//   - API requests one bootstrap makes, and approval → files-on-disk time
//   - resting `kubeboot run`: RSS and CPU over a minute, next to a bare Node timer, and one pass's cost (scripts/bench-idle.ts)
//   - cold start of the bundle vs `node -e 0`
//   - kubeboot bootstrap next to the kubelet's own LoadClientCert and to the
//     same bootstrap in Node built-ins only (test/bench/node-floor.mjs),
//     interleaved, with API requests counted by the API server (its audit log)
//   - what each chosen library costs a process at start (scripts/bench-stack.ts)
//   - kubeboot approver: CSR created → approved p50/p99, idle RSS (scripts/bench-approver.ts)
//   - a join storm, kube-controller-manager's csrapproving next to kubeboot approver (scripts/bench-side-by-side.ts)
//   - time to a Ready Node: kubeboot then the real kubelet, next to the kubelet's own TLS bootstrap (scripts/bench-ready.ts)
//   - the approver's CPU per CSR with TPM evidence to verify, next to without (scripts/bench-tpm-decide.ts)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane } from '../test/support/controlplane.js';
import { bundle, launcherNodeFlags, nodeLayout, startKubeboot } from '../test/support/kubeboot.js';
import { benchApprover } from './bench-approver.js';
import { benchIdle } from './bench-idle.js';
import { benchReady } from './bench-ready.js';
import { benchSideBySide } from './bench-side-by-side.js';
import { benchStack } from './bench-stack.js';
import { benchTpmDecide } from './bench-tpm-decide.js';

const rows: [string, string][] = [];

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

const PEER_RUNS = Number(process.env.KUBEBOOT_BENCH_PEER_RUNS ?? 15);

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};

/**
 * Requests the API server saw from these users, one per audit ID, in the part
 * of the log written after `fromByte` (the audit backend is blocking, so an
 * event is in the log before its response is sent). The offset leaves out the
 * SelfSubjectReview the test harness makes to see a new token authenticate.
 */
function requestsBy(auditLog: string, users: string[], fromByte: number): number {
  const ids = new Set<string>();
  for (const line of readFileSync(auditLog).subarray(fromByte).toString('utf8').split('\n')) {
    if (!line) continue;
    const event = JSON.parse(line) as { auditID: string; user?: { username?: string } };
    if (users.includes(event.user?.username ?? '')) ids.add(event.auditID);
  }
  return ids.size;
}

const plane = await startControlPlane({ name: 'bench', audit: true });
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
  const requests = [...(boot.stdout + boot.stderr).matchAll(/api request (\w+) https?:\/\/[^/]+(\S+) -> (\d+|\?)/g)].map(
    (m) => `${m[1]} ${m[2]} ${m[3]}`,
  );
  const result = (boot.stdout + boot.stderr).match(/approved after ([\d.]+)s, on disk (\d+) ms later/);
  rows.push(['bootstrap: API requests', `${requests.length}: ${requests.join('; ')}`]);
  rows.push(['bootstrap: CSR created → approved certificate seen (auto-approval)', `${(Number(result?.[1]) * 1000).toFixed(0)} ms`]);
  rows.push(['bootstrap: certificate seen → files on disk (verify, prove, store)', `${result?.[2]} ms`]);
  rows.push(['bootstrap: whole command (process start to exit)', `${wall} ms`]);

  // The resting daemon next to a bare Node timer, and what one pass costs.
  rows.push(...(await benchIdle(plane, dir)));

  // kubeboot next to the kubelet's own bootstrap, the kubelet identity only, interleaved.
  const peer = execFileSync('bash', ['test/bench/build-kubelet-bootstrap.sh'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
  const auditLog = join(plane.dir, 'audit.log');
  const floor = join(process.cwd(), 'test/bench/node-floor.mjs');
  const contenders = ['kubeboot', 'kubelet', 'floor'] as const;
  type Contender = (typeof contenders)[number];
  const times: Record<Contender, number[]> = { kubeboot: [], kubelet: [], floor: [] };
  const apiRequests: Record<Contender, number[]> = { kubeboot: [], kubelet: [], floor: [] };
  for (let i = 0; i < PEER_RUNS; i++) {
    for (const who of contenders) {
      const n = await nodeLayout(join(dir, `${who}-${i}`), `peer-${who}-${i}`);
      const tok = await plane.admin.createBootstrapToken();
      await plane.writeBootstrapKubeconfig(n.bootstrapKubeconfig, tok.token, { ca: 'data' });
      const argv = {
        kubeboot: [process.execPath, bundle, 'bootstrap', '--config', n.config, '--no-kube-proxy'],
        kubelet: [
          peer,
          '--kubeconfig',
          n.kubeletKubeconfig,
          '--bootstrap-kubeconfig',
          n.bootstrapKubeconfig,
          '--cert-dir',
          n.kubeletCertDir,
          '--node-name',
          n.name,
        ],
        floor: [process.execPath, floor, n.bootstrapKubeconfig, n.kubeletCertDir, n.name],
      }[who];
      const auditFrom = statSync(auditLog).size;
      const started = process.hrtime.bigint();
      // kubeboot as packaged: the launcher gives root a compile cache (the first run fills it).
      execFileSync(argv[0]!, argv.slice(1), { stdio: 'ignore', env: { ...process.env, NODE_COMPILE_CACHE: join(dir, 'compile-cache') } });
      times[who].push(Number(process.hrtime.bigint() - started) / 1e6);
      apiRequests[who].push(requestsBy(auditLog, [`system:bootstrap:${tok.id}`, `system:node:${n.name}`], auditFrom));
    }
  }
  const median = (who: Contender) => quantile(times[who], 0.5);
  const labels: Record<Contender, string> = {
    kubeboot: 'kubeboot bootstrap --no-kube-proxy',
    kubelet: "the kubelet's LoadClientCert (Go)",
    floor: 'the same bootstrap in Node built-ins only (test/bench/node-floor.mjs)',
  };
  for (const who of contenders) {
    rows.push([
      `${labels[who]}: whole process, ${PEER_RUNS} runs`,
      `median ${median(who).toFixed(0)} ms, p90 ${quantile(times[who], 0.9).toFixed(0)} ms; API requests (server-side) ${[...new Set(apiRequests[who])].sort().join(' or ')}`,
    ]);
  }
  rows.push(['ratio kubeboot / kubelet (medians)', `${(median('kubeboot') / median('kubelet')).toFixed(2)}x`]);
  rows.push(['ratio Node built-ins floor / kubelet (medians)', `${(median('floor') / median('kubelet')).toFixed(2)}x`]);
  rows.push(...(await benchStack(join(dir, 'stack'), launcherNodeFlags('run'))));
  rows.push(...(await benchApprover(plane, join(dir, 'approver'))));
  rows.push(...(await benchSideBySide(plane, join(dir, 'storm'))));
  // Its own plane, serving on the host end of the node's network namespace.
  rows.push(...(await benchReady()));
  rows.push(...(await benchTpmDecide()));

  rows.push([
    'cold start: node dist/kubeboot.cjs --version (median of 20)',
    `${coldStart([process.execPath, bundle, '--version']).toFixed(0)} ms`,
  ]);
  rows.push(['cold start: node -e 0 (median of 20)', `${coldStart([process.execPath, '-e', '0']).toFixed(0)} ms`]);
  rows.push(['Node', process.version]);
} finally {
  await plane.stop();
  rmSync(dir, { recursive: true, force: true });
}

const width = Math.max(...rows.map((r) => r[0].length));
process.stdout.write(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|\n`);
for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
