// No gap across a failover (issue 28): two `kubeboot approver
// --approve-kubelet-client` replicas on one Lease while nodes file a storm of
// CSRs (kubelet client renewals and kube-proxy client certificates); the
// leader is killed with SIGKILL midway, so it never releases the Lease and the
// standby must wait it out. Told by the API server's audit log: every CSR of
// the storm is approved, by exactly one successful write of its approval, by
// one replica or the other, and the standby only once it holds the Lease.
// What the takeover cost is reported as created → approved latency.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pause } from 'node:timers/promises';
import t from 'tap';
import { stringify } from 'yaml';
import type { KubeObject } from '../support/admin.js';
import {
  approvals,
  createNode,
  FAST_LEASE,
  installApprover,
  KUBE_PROXY,
  nodeClient,
  startApprover,
  submitCsr,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { percentile, readCsrAudit, watchCsrTimeline } from '../support/csr-timeline.js';
import type { KubeClient } from '../support/http.js';
import { writeKubeconfig } from '../support/kubeconfig.js';
import { credentialId, type AuditEvent } from '../support/node-join.js';
import { certificateId } from '../support/rotation.js';
import { until } from '../support/until.js';

/** CSRs filed per second, whatever the approvers are doing: the storm's arrival rate. */
const RATE = 15;
/** CSRs filed, half of them approved, before the wave. */
const BEFORE = 60;
/** CSRs filed at once on top of the stream; the leader is killed once a quarter of that many more are approved. */
const WAVE = 40;
/** CSRs filed after the standby is seen holding the Lease. */
const AFTER = 50;
/** The storm's bound: two CSRs per node. */
const MAX = 300;
const LEASE = 'kube-system/kubeboot-approver';
const LEASE_PATH = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver';
/** A kubelet client certificate renewal, the node asking for its own name (policy.ts KUBELET_CLIENT_RULES). */
const RENEWAL = {
  o: ['system:nodes'],
  signer: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'client auth'],
};

/** A duration flag of FAST_LEASE, in ms. */
const flagMs = (flag: string) => Number(FAST_LEASE[FAST_LEASE.indexOf(flag) + 1]!.replace('s', '')) * 1000;

const plane = await controlPlaneOrSkip(t, { name: 'approver-failover-storm', audit: true, kubeletApprover: false });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-failover-storm-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await installApprover(plane, dir);

  /** A replica: the user the manifests bind, with a certificate of its own, so the audit log tells the two apart. */
  const replica = async (name: string) => {
    const cert = await plane.mintClientCert({ commonName: 'kubeboot:approver' });
    const kubeconfig = join(dir, `${name}.kubeconfig`);
    await writeKubeconfig(kubeconfig, plane.server, { pem: plane.caPem }, cert);
    const config = join(dir, `${name}.yaml`);
    await writeFile(config, stringify({ approver: { kubeconfig } }));
    const running = startApprover(config, ['--approve-kubelet-client']);
    t.teardown(async () => {
      if (running.child.exitCode === null && running.child.signalCode === null) running.child.kill('SIGTERM');
      await running.done;
    });
    const started = await running.waitForOutput(/\{[^\n]*"kubeboot approver starting"[^\n]*\}/, 60_000);
    return { name, running, credential: certificateId(cert.certPem), identity: JSON.parse(started).identity as string };
  };

  t.test('SIGKILL of the leader in a storm of node CSRs: each is approved exactly once, the standby takes over', async (t) => {
    const replicas = await Promise.all(['a', 'b'].map(replica));
    const holder = async () =>
      ((await plane.admin.request<KubeObject>('GET', LEASE_PATH)).body.spec?.holderIdentity as string | undefined) ?? '';
    const first = await plane.admin.waitFor('a leader', async () => {
      const h = await holder();
      return h !== '' ? h : undefined;
    });
    const leader = replicas.find((r) => r.identity === first);
    const standby = replicas.find((r) => r.identity !== first);
    if (!leader || !standby)
      throw new Error(`the Lease is held by ${first}, neither replica (${replicas.map((r) => r.identity).join(', ')})`);
    await leader.running.waitForOutput(/became the leader/, 30_000);

    const nodes = Array.from({ length: MAX / 2 }, (_, i) => `storm-${i}`);
    await Promise.all(nodes.map((n) => createNode(plane, n)));
    const clients: KubeClient[] = await Promise.all(nodes.map((n) => nodeClient(plane, n)));
    t.teardown(() => Promise.all(clients.map((c) => c.close())));
    const timeline = await watchCsrTimeline(plane);
    t.teardown(() => timeline.stop());

    /** CSR i: node storm-⌊i/2⌋ renews its kubelet client certificate (even i) or asks for kube-proxy's (odd i). */
    const file = (i: number) => {
      const [node, client] = [nodes[i >> 1]!, clients[i >> 1]!];
      return i % 2 === 0
        ? submitCsr(client, { ...RENEWAL, cn: `system:node:${node}`, name: `renew-${node}` })
        : submitCsr(client, { cn: KUBE_PROXY.cn, name: `proxy-${node}` });
    };
    const names: string[] = [];
    const filing: Promise<unknown>[] = [];
    let next = 0;
    const fileNext = () => {
      if (next < MAX) filing.push(file(next++).then((name) => names.push(name)));
    };
    let stormOver = false;
    const stream = (async () => {
      while (!stormOver && next < MAX) {
        fileNext();
        // The arrival rate, not a wait for anything: CSRs keep coming whatever the approvers do.
        await pause(1000 / RATE);
      }
    })();

    await plane.admin.waitFor(
      `${BEFORE} CSRs filed and ${BEFORE / 2} approved`,
      async () => (names.length >= BEFORE && timeline.approvedAt.size >= BEFORE / 2 ? true : undefined),
      60_000,
    );
    // A wave of joins on top of the stream: the leader dies with part of it approved, part in flight, part queued.
    const approvedBeforeWave = timeline.approvedAt.size;
    for (let i = 0; i < WAVE; i++) fileNext();
    await until(
      `${WAVE / 4} more CSRs approved once the wave began`,
      () => timeline.approvedAt.size >= approvedBeforeWave + WAVE / 4,
      60_000,
    );
    leader.running.child.kill('SIGKILL');
    const killedAt = Date.now();
    await plane.admin.waitFor(
      'the standby holding the Lease',
      async () => ((await holder()) === standby.identity ? true : undefined),
      30_000,
    );
    const filedBeforeTakeover = names.length;
    await plane.admin.waitFor(
      `${AFTER} CSRs filed after the takeover`,
      async () => (names.length - filedBeforeTakeover >= AFTER ? true : undefined),
      60_000,
    );
    stormOver = true;
    await stream;
    await Promise.all(filing);
    const filed = new Set(names);
    // A CSR never approved is named by the assertions below, not by this wait's timeout.
    const audit = await plane.admin
      .waitFor(
        `the audit log showing an approval of each of the ${filed.size} CSRs`,
        async () => {
          const read = readCsrAudit(plane, LEASE);
          return names.every((n) => read.approvals.has(n)) ? read : undefined;
        },
        60_000,
      )
      .catch(() => readCsrAudit(plane, LEASE));
    t.same(
      names.filter((n) => !audit.created.has(n)),
      [],
      'the audit log shows the creation of each',
    );
    const ids = new Map(replicas.map((r) => [r.credential, r]));
    // An approval the killed leader had in flight is committed by the API server but audited
    // 504 "context canceled" (its client is gone): counted as its write when no other write of
    // that CSR's approval succeeded. The CSR's conditions (below) show that it took effect, once.
    // The API server may read such a request after the test's clock says "killed" (the bytes
    // were in the socket; CI saw one), so no bound on when it was received:
    // the credential is the leader's alone, and a dead process writes nothing new.
    const cut = cutOffApprovals(plane.auditLog!, leader.credential);
    for (const [n, write] of cut) if (!audit.approvals.has(n)) audit.approvals.set(n, [write]);
    t.comment(`${cut.size} approvals of the killed leader were in flight at the kill and audited 504 (committed all the same)`);

    const notOnce = names.filter((n) => audit.approvals.get(n)?.length !== 1).map((n) => `${n}: ${audit.approvals.get(n)?.length ?? 0}`);
    t.same(notOnce, [], `each of the ${filed.size} CSRs had exactly one successful write of its approval`);
    const approvalsOf = (r: typeof leader) => names.filter((n) => audit.approvals.get(n)?.[0]?.credential === r.credential);
    const [byLeader, byStandby] = [approvalsOf(leader), approvalsOf(standby)];
    t.same(
      names.filter((n) => !ids.has(audit.approvals.get(n)?.[0]?.credential ?? '')),
      [],
      'every approval was written by one of the two replicas',
    );
    t.ok(
      byLeader.length > 0 && byStandby.length > 0,
      `both replicas approved (${byLeader.length} the first leader, ${byStandby.length} the standby)`,
    );

    const csrs = (await plane.admin.listCsrs()).filter((c) => filed.has(c.metadata.name));
    t.equal(csrs.length, filed.size, 'every CSR of the storm is still there');
    const wrongConditions = csrs
      .filter((c) => {
        const list = approvals(c);
        const writer = ids.get(audit.approvals.get(c.metadata.name)?.[0]?.credential ?? '');
        return list.length !== 1 || writer === undefined || !String(list[0]?.message).includes(writer.identity);
      })
      .map(
        (c) =>
          `${c.metadata.name}: ${approvals(c)
            .map((a) => a.message)
            .join(' | ')}`,
      );
    t.same(wrongConditions, [], 'each CSR carries one Approved condition, naming the replica whose credential wrote it');

    const takeover = audit.leaseWrites.find((w) => w.credential === standby.credential);
    if (!takeover) throw new Error('the audit log shows no Lease write by the standby');
    const lastOfLeader = Math.max(...byLeader.map((n) => audit.approvals.get(n)![0]!.at));
    const firstOfStandby = Math.min(...byStandby.map((n) => audit.approvals.get(n)![0]!.receivedAt));
    t.ok(takeover.receivedAt >= killedAt, 'the standby took the Lease only after the leader was killed');
    const bound = flagMs('--lease-duration') + flagMs('--retry-period') + 3000;
    t.ok(takeover.at - killedAt <= bound, `it took the Lease ${takeover.at - killedAt} ms after the kill (at most ${bound} ms)`);
    t.ok(firstOfStandby >= takeover.receivedAt, 'the standby approved nothing before it held the Lease');
    t.ok(lastOfLeader < firstOfStandby, 'no approval of the first leader came after one of the standby');
    t.match(standby.running.output(), /became the leader/, 'the standby logged that it became the leader');
    t.equal(await holder(), standby.identity, "the Lease's holderIdentity is the standby's");

    // The figures, of the CSRs the log tells the whole story of (any other failed above).
    const told = names.filter((n) => audit.created.has(n) && audit.approvals.has(n));
    const createdAt = (n: string) => audit.created.get(n)!.at;
    const latency = (n: string) => audit.approvals.get(n)![0]!.at - createdAt(n);
    const phases = {
      'before the kill': told.filter((n) => createdAt(n) < killedAt),
      'between the kill and the takeover': told.filter((n) => createdAt(n) >= killedAt && createdAt(n) < takeover.at),
      'after the takeover': told.filter((n) => createdAt(n) >= takeover.at),
    };
    const figures = (list: string[]) => {
      const ms = list.map(latency);
      return `p50 ${percentile(ms, 50)} ms, p99 ${percentile(ms, 99)} ms, max ${Math.max(...ms)} ms`;
    };
    const beforeKill = phases['before the kill'];
    const undisturbed = beforeKill.filter((n) => byLeader.includes(n));
    const leftToStandby = beforeKill.filter((n) => byStandby.includes(n));
    for (const [phase, list] of Object.entries(phases)) {
      t.ok(list.length >= 10, `${list.length} CSRs were created ${phase}`);
      t.comment(`created → approved, ${list.length} CSRs created ${phase}: ${figures(list)}`);
      if (list !== beforeKill) continue;
      t.comment(`  of which ${undisturbed.length} approved by the first leader: ${figures(undisturbed)}`);
      if (leftToStandby.length > 0) t.comment(`  and ${leftToStandby.length} left to the standby: ${figures(leftToStandby)}`);
    }
    const inFlight = byLeader.filter((n) => audit.approvals.get(n)![0]!.at >= killedAt).length;
    const p50 = (list: string[]) => percentile(list.map(latency), 50);
    t.comment(
      `the takeover: Lease taken ${takeover.at - killedAt} ms after the SIGKILL; no approval for ${firstOfStandby - lastOfLeader} ms ` +
        `(the first leader's last to the standby's first, ${firstOfStandby - takeover.at} ms after it took the Lease); ` +
        `p50 ${p50(phases['between the kill and the takeover']) - p50(undisturbed)} ms more for a CSR created while no one led; ` +
        `${filed.size} CSRs in all, ${byLeader.length} approved by the first leader and ${byStandby.length} by the standby; ` +
        `at the kill ${leftToStandby.length} of the ${beforeKill.length} created were not yet approved (left to the standby) and ${inFlight} approvals were in flight (answered after it)`,
    );
  });
}

/** The killed leader's approval writes audited 504 (its connection gone), by CSR name. */
function cutOffApprovals(
  auditLog: string,
  credential: string,
): Map<string, { receivedAt: number; at: number; credential: string | undefined }> {
  const cut = new Map<string, { receivedAt: number; at: number; credential: string | undefined }>();
  for (const line of readFileSync(auditLog, 'utf8').split('\n')) {
    if (!line.includes('"ResponseComplete"') || !line.includes('/approval')) continue;
    const e = JSON.parse(line) as AuditEvent;
    const receivedAt = Date.parse(e.requestReceivedTimestamp);
    if (e.responseStatus?.code !== 504 || credentialId(e) !== credential) continue;
    if (e.objectRef?.subresource === 'approval' && e.objectRef.name !== undefined)
      cut.set(e.objectRef.name, { receivedAt, at: Date.parse(e.stageTimestamp), credential });
  }
  return cut;
}
