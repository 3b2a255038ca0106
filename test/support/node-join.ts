// One real node joining a test control plane the way the packaged units do
// it: `kubeboot run` obtains the credentials (the kubelet's, with a token
// bound to the node's name, and kube-proxy's, both approved by `kubeboot
// approver`), the real kubelet starts once `kubeboot wait
// --identity kubelet` returns, the real kube-proxy once its own does. Also
// reads the apiserver's audit log for what the node's programs sent.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { IdentityName } from '../../agent/identity.js';
import { INVENTORY_NAME, newRecord, recordsPath } from '../../agent/records/kinds.js';
import { identify, withTpm } from '../../agent/tpm/identify.js';
import { installApprover, startApprover } from './approver.js';
import { controlPlaneBinaries, onPath } from './binaries.js';
import { withControlPlane, type ControlPlane, type StartOptions } from './controlplane.js';
import { assertNoSecrets, handToken, kubeboot, nodeLayout, startKubeboot, type NodeLayout, type Running } from './kubeboot.js';
import { createNodeNetwork, snapshotHost, type HostSnapshot, type NodeNetwork } from './netns.js';
import { expectStatus } from './http.js';
import { nodeBinaries, startRealNode, writeKubeletConfig, type RealNode, type RealNodeOptions } from './realnode.js';
import { manufactureTpm, startSwtpm } from './swtpm.js';

/**
 * The real node's binaries, or a loud skip where they cannot run: not root
 * (namespaces, mounts) or no Go toolchain and nothing built. Under CI=true
 * both are failures.
 */
export async function realNodeOrSkip(t: Test): Promise<boolean> {
  let reason = '';
  if (process.getuid?.() !== 0) reason = 'not root: the real kubelet runs in mount and network namespaces';
  else {
    try {
      await controlPlaneBinaries();
      await nodeBinaries();
    } catch (err) {
      if (onPath('go')) throw err;
      reason = 'no Go toolchain on PATH and no kubelet/kube-proxy built (run test/controlplane/build.sh --node)';
    }
  }
  if (!reason) return true;
  if (process.env.CI === 'true') throw new Error(`the real-node tests cannot run under CI: ${reason}`);
  process.stderr.write(`\n${'!'.repeat(100)}\n!!! SKIPPED: ${reason}; the real-node tests did NOT run\n${'!'.repeat(100)}\n\n`);
  t.plan(0, reason);
  return false;
}

export interface JoinedNode {
  plane: ControlPlane;
  net: NodeNetwork;
  layout: NodeLayout;
  daemon: Running;
  approver: Running;
  node: RealNode;
  /** Host state before anything started, to compare with `snapshotHost()` after `stop()`. */
  hostBefore: HostSnapshot;
  /** Milliseconds from `kubeboot run`'s start to the kubelet's credential on disk. */
  credentialMs: number;
  startedAt: number;
  /** Stops everything in reverse order and removes the namespace; checks kubeboot's output for secrets (the teardown, after a failure, does not). */
  stop(): Promise<void>;
}

/**
 * A plane serving on the host end of a fresh node network, the approver,
 * `kubeboot run` for node `name` (kube-proxy on) and the real kubelet on its
 * kubelet.conf. kube-proxy is started by the caller (`node.startKubeProxy`)
 * after `waitForIdentity(joined, 'kube-proxy')`.
 */
export interface JoinOptions {
  plane?: StartOptions;
  kubeboot?: Record<string, unknown>;
  kubeletConfig?: Record<string, unknown>;
  /**
   * The kubelet's own serving certificate (serverTLSBootstrap: a
   * kubernetes.io/kubelet-serving CSR with its name and address), approved by
   * the approver with --approve-kubelet-serving, the node's address as the
   * only allowed IP.
   */
  servingBootstrap?: boolean;
  /**
   * kubeboot's kubeletServing identity instead (DNS:<n>, IP:<node IP>, in the
   * kubelet's certificate directory), approved the same way. The kubelet
   * first starts on its self-signed default: the approver holds the CSR
   * until the Node lists the address.
   */
  kubebootServing?: boolean;
  /** The kubelet's --cert-dir is kubeboot's kubelet certificate directory, as with both programs' defaults (/var/lib/kubelet/pki). */
  sharedCertDir?: boolean;
  /** Another kubelet binary (version skew). */
  kubeletBinary?: string;
  /**
   * A TPM-attested node (issue 37): a swtpm on loopback whose AK the
   * inventory holds for the node, kubeboot with `tpm: swtpm:…`, the approver
   * with `--inventory`, so every kubelet client CSR must carry its quote.
   */
  tpm?: boolean;
}

export async function joinRealNode(t: Test, name: string, o: JoinOptions = {}): Promise<JoinedNode> {
  const hostBefore = await snapshotHost();
  const net = await createNodeNetwork();
  const stops: ((inTest: boolean) => Promise<void>)[] = [() => net.remove()];
  let stopped = false;
  const stopAll = async (inTest: boolean) => {
    if (stopped) return;
    stopped = true;
    for (const s of stops.reverse()) await s(inTest);
  };
  const stop = () => stopAll(true);
  t.teardown(() => stopAll(false));

  const plane = await withControlPlane(t, { name, audit: true, address: net.hostIp, ...o.plane });
  // Short: the CRI socket lives in here (unix socket paths are limited to 108 bytes).
  const dir = mkdtempSync('/tmp/kbn-');
  stops.push(async () => {
    if (t.passing() && process.env.KUBEBOOT_KEEP_CONTROLPLANE !== '1') rmSync(dir, { recursive: true, force: true });
    else process.stderr.write(`\n*** real node kept in ${dir} (kubelet.log, kube-proxy.log, fakecri.log)\n`);
  });

  const approverConfig = await installApprover(plane, dir);
  const swtpm = o.tpm ? await startSwtpm(await manufactureTpm()) : null;
  if (swtpm !== null) {
    stops.push(async () => {
      await swtpm.stop();
      rmSync(swtpm.dir, { recursive: true, force: true });
    });
    const { akName } = await withTpm({ swtpmTcp: swtpm.address }, (tpm) => identify(tpm, new Date()));
    const inventory = newRecord('inventories', INVENTORY_NAME, { spec: { nodes: { [name]: `tpm-ak: ${akName}` } } });
    expectStatus(await plane.admin.request('POST', recordsPath('inventories'), inventory), 'the inventory', 201);
  }
  const approver = startApprover(approverConfig, [
    '--approve-kubelet-client',
    ...(o.servingBootstrap || o.kubebootServing ? ['--approve-kubelet-serving', '--serving-ip-cidr', `${net.nodeIp}/32`] : []),
    ...(swtpm !== null ? ['--inventory'] : []),
  ]);
  stops.push(async () => {
    approver.child.kill('SIGTERM');
    await approver.done;
  });
  await approver.waitForOutput(/became the leader/, 60_000);
  if (swtpm !== null) await approver.waitForOutput(/record seen: inventories\.kubeboot\.io\/inventory/, 60_000);

  const nodeDir = join(dir, 'n');
  const layoutDir = join(dir, 'node');
  const kubeletCertDir = join(layoutDir, 'kubelet-pki');
  const nodeOptions: RealNodeOptions = {
    name,
    dir: nodeDir,
    net,
    caFile: plane.caFile,
    kubeletKubeconfig: join(layoutDir, 'kubelet.conf'),
    kubeProxyKubeconfig: join(layoutDir, 'kube-proxy.conf'),
    kubeletConfig: { ...(o.servingBootstrap ? { serverTLSBootstrap: true } : {}), ...o.kubeletConfig },
    ...(o.sharedCertDir ? { certDir: kubeletCertDir } : {}),
    ...(o.kubeletBinary ? { kubeletBinary: o.kubeletBinary } : {}),
  };
  // The kubelet's configuration is in place before kubeboot starts, which reads it (rotateCertificates).
  const kubeletConfigFile = writeKubeletConfig(nodeOptions);
  const { kubelet: kubeletSettings, ...otherSettings } = (o.kubeboot ?? {}) as { kubelet?: Record<string, unknown> };
  const layout = await nodeLayout(layoutDir, name, {
    kubeProxy: { enabled: true },
    kubelet: { configFile: kubeletConfigFile, ...kubeletSettings },
    ...(o.kubebootServing ? { kubeletServing: { enabled: true, certDir: kubeletCertDir, ipAddresses: [net.nodeIp] } } : {}),
    ...(swtpm !== null ? { tpm: `swtpm:${swtpm.address}` } : {}),
    ...otherSettings,
  });
  if (layout.kubeletCertDir !== kubeletCertDir || layout.kubeletKubeconfig !== nodeOptions.kubeletKubeconfig)
    throw new Error('nodeLayout moved the kubelet files');
  // Bound to this node's name, as `kubeboot token create --node` makes it: the approver refuses unbound tokens.
  await handToken(plane, layout, 'data', layout.bootstrapKubeconfig, { bind: { names: [name] } });
  const startedAt = Date.now();
  const daemon = startKubeboot(['run', '--config', layout.config]);
  stops.push(async (inTest) => {
    if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGTERM');
    const result = await daemon.done;
    if (inTest) assertNoSecrets(t, result.stdout + result.stderr, 'kubeboot run');
  });
  // As kubelet.service's drop-in orders it: the kubelet starts once its credential is on disk.
  await waitForIdentity(t, layout, 'kubelet');
  const credentialMs = Date.now() - startedAt;

  const node = await startRealNode(nodeOptions);
  // Before the daemon's stop: the node's programs go first, as at shutdown.
  stops.push(() => node.stop());

  return { plane, net, layout, daemon, approver, node, hostBefore, credentialMs, startedAt, stop };
}

/** `kubeboot wait --identity NAME`, as the shipped units' ExecStartPre= runs it. */
export async function waitForIdentity(t: Test, layout: NodeLayout, identity: IdentityName, timeout = '3m'): Promise<void> {
  const result = await kubeboot(t, ['wait', '--config', layout.config, '--identity', identity, '--timeout', timeout]);
  if (result.code !== 0) throw new Error(`kubeboot wait --identity ${identity} exited ${result.code}: ${result.stderr}`);
}

export interface AuditEvent {
  auditID: string;
  stage: string;
  verb: string;
  requestURI: string;
  userAgent?: string;
  sourceIPs?: string[];
  user?: { username?: string; extra?: Record<string, string[]> };
  responseStatus?: { code?: number };
  objectRef?: { resource?: string; namespace?: string; name?: string; subresource?: string };
  requestReceivedTimestamp: string;
  stageTimestamp: string;
}

/**
 * Audit events (stages ResponseStarted, for watches, and ResponseComplete)
 * from `sourceIp` whose user agent starts with `agent` (`kubelet/`, `kube-proxy/`).
 */
export function auditEventsFrom(plane: ControlPlane, sourceIp: string, agent: string): AuditEvent[] {
  if (!plane.auditLog) throw new Error('the plane was started without an audit log');
  return readFileSync(plane.auditLog, 'utf8')
    .split('\n')
    .filter((l) => l.includes(sourceIp))
    .map((l) => JSON.parse(l) as AuditEvent)
    .filter((e) => e.sourceIPs?.includes(sourceIp) && e.userAgent?.startsWith(agent) === true);
}

/** One request per audit ID: when it was received and, unless still open (a watch), when it completed. */
export function requestSpans(events: AuditEvent[]): { event: AuditEvent; start: number; end: number | undefined }[] {
  const byId = new Map<string, { event: AuditEvent; start: number; end: number | undefined }>();
  for (const e of events) {
    const span = byId.get(e.auditID) ?? { event: e, start: Date.parse(e.requestReceivedTimestamp), end: undefined };
    if (e.stage === 'ResponseComplete') {
      span.end = Date.parse(e.stageTimestamp);
      span.event = e;
    }
    byId.set(e.auditID, span);
  }
  return [...byId.values()];
}

export const credentialId = (e: AuditEvent) => e.user?.extra?.['authentication.kubernetes.io/credential-id']?.[0];
