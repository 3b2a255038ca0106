// Two `kubeboot approver`s on one Lease: only the leader approves; after
// kill -9 of the leader the standby takes over within the lease duration and
// every valid CSR of a stream is approved exactly once.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pause } from 'node:timers/promises';
import t from 'tap';
import type { KubeObject } from '../support/admin.js';
import {
  approvals,
  CSRS,
  createNode,
  FAST_LEASE,
  installApprover,
  KUBE_PROXY,
  nodeClient,
  startApprover,
  submitCsr,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, type KubeResponse, kubeClient } from '../support/http.js';
import { flowSchemaInEffect } from '../support/manifests.js';
import type { Running } from '../support/kubeboot.js';

const plane = await controlPlaneOrSkip(t, { name: 'approver-ha' });
if (plane) {
  const leaseSeconds = Number(FAST_LEASE[1]!.replace('s', ''));
  const retrySeconds = Number(FAST_LEASE[5]!.replace('s', ''));
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-ha-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = await installApprover(plane, dir);

  t.test('kill -9 of the leader while CSRs arrive: the standby takes over, each CSR is approved once, never by a non-leader', async (t) => {
    const approvers = [startApprover(config), startApprover(config)];
    t.teardown(async () => {
      for (const a of approvers) if (a.child.exitCode === null && a.child.signalCode === null) a.child.kill('SIGTERM');
      await Promise.all(approvers.map((a) => a.done));
    });
    const identityOf = async (a: Running) =>
      JSON.parse(await a.waitForOutput(/\{[^\n]*"kubeboot approver starting"[^\n]*\}/, 60_000)).identity as string;
    const identities = await Promise.all(approvers.map(identityOf));
    const leasePath = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver';
    const holder = async () =>
      ((await plane.admin.request<KubeObject>('GET', leasePath)).body.spec?.holderIdentity as string | undefined) ?? '';
    const first = await plane.admin.waitFor('a leader', async () => ((await holder()) !== '' ? holder() : undefined), 60_000);
    const leaderIndex = identities.indexOf(first);
    t.not(leaderIndex, -1, `one of the two holds the lease (${first} of ${identities.join(', ')})`);
    const [leader, standby] = [approvers[leaderIndex]!, approvers[1 - leaderIndex]!];
    const [leaderId, standbyId] = [identities[leaderIndex]!, identities[1 - leaderIndex]!];

    const count = 30;
    const nodes = Array.from({ length: count }, (_, i) => `ha-${i}`);
    await Promise.all(nodes.map((n) => createNode(plane, n)));
    const clients = await Promise.all(nodes.map((n) => nodeClient(plane, n)));
    const names: string[] = [];
    let killedAt = 0;
    // A stream: one CSR every 100 ms; the leader dies a third of the way in.
    for (const [i, client] of clients.entries()) {
      if (i === count / 3) {
        leader.child.kill('SIGKILL');
        killedAt = Date.now();
      }
      names.push(await submitCsr(client, { cn: KUBE_PROXY.cn, name: `stream-${i}` }));
      await pause(100);
    }
    await plane.admin.waitFor('the standby holds the lease', async () => ((await holder()) === standbyId ? true : undefined), 30_000);
    const takeoverMs = Date.now() - killedAt;
    t.ok(
      takeoverMs <= (leaseSeconds + retrySeconds + 2) * 1000,
      `the standby took over ${takeoverMs} ms after the kill (lease ${leaseSeconds}s, retry ${retrySeconds}s)`,
    );

    const all = await Promise.all(
      names.map((name) =>
        plane.admin.waitFor(
          `${name} issued`,
          async () => ((await plane.admin.getCsr(name))?.status?.certificate ? plane.admin.getCsr(name) : undefined),
          60_000,
        ),
      ),
    );
    const killedSecond = Math.floor(killedAt / 1000) * 1000;
    let byLeader = 0;
    let byStandby = 0;
    for (const csr of all) {
      const list = approvals(csr);
      t.equal(list.length, 1, `${csr!.metadata.name}: approved exactly once`);
      const [approval] = list;
      const at = Date.parse(approval?.lastUpdateTime ?? '');
      if (String(approval?.message).includes(leaderId)) {
        byLeader++;
        t.ok(at <= killedSecond + 1000, `${csr!.metadata.name}: approved by the first leader before it died`);
      } else {
        t.match(approval?.message, standbyId, `${csr!.metadata.name}: approved by the standby`);
        byStandby++;
        t.ok(at >= killedSecond, `${csr!.metadata.name}: the standby approved it only after it took over`);
      }
    }
    t.ok(byLeader > 0 && byStandby > 0, `both approvers approved while leading (${byLeader} before the kill, ${byStandby} after)`);
    t.match(standby.output(), /became the leader/, 'the standby logged that it became the leader');
    await Promise.all(clients.map((c) => c.close()));
  });

  t.test('a leader whose lease is taken stops approving at once, and resumes when it gets the lease back', async (t) => {
    const approver = startApprover(config, ['--log-level', 'debug']);
    t.teardown(async () => {
      approver.child.kill('SIGTERM');
      await approver.done;
    });
    await approver.waitForOutput(/became the leader/, 60_000);
    const leasePath = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver';
    const lease = (await plane.admin.request<KubeObject>('GET', leasePath)).body;
    // Another holder with a long lease, written over the leader's.
    lease.spec = {
      ...lease.spec,
      holderIdentity: 'intruder',
      leaseDurationSeconds: 3600,
      renewTime: new Date().toISOString().replace('Z', '000Z'),
    };
    const stolen = await plane.admin.request('PUT', leasePath, lease);
    t.equal(stolen.status, 200, 'the lease is taken over by another holder');
    await approver.waitForOutput(/stopped leading/, 30_000);
    await createNode(plane, 'while-stolen');
    const node = await nodeClient(plane, 'while-stolen');
    const name = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'while-stolen' });
    await approver.waitForOutput(new RegExp(`"csr":"${name}"[^\\n]*not the leader; CSR left to the leader`), 30_000);
    t.same(approvals(await plane.admin.getCsr(name)), [], 'seen while not leading, and not approved');
    // Give it back: the approver takes the released lease and only then approves.
    const current = (await plane.admin.request<KubeObject>('GET', leasePath)).body;
    current.spec = { ...current.spec, holderIdentity: undefined, leaseDurationSeconds: 1 };
    const releasedAt = Date.now();
    t.equal((await plane.admin.request('PUT', leasePath, current)).status, 200, 'the other holder releases the lease');
    const csr = await plane.admin.waitFor(
      `${name} approved`,
      async () => (approvals(await plane.admin.getCsr(name)).length > 0 ? plane.admin.getCsr(name) : undefined),
      30_000,
    );
    const [approval] = approvals(csr);
    t.ok(Date.parse(approval?.lastUpdateTime ?? '') >= Math.floor(releasedAt / 1000) * 1000, 'approved only after the lease came back');
    t.equal(approvals(csr).length, 1, 'approved once');
    await node.close();
  });

  t.test("the approver's requests get the priority level of the shipped approver-flowschema.yaml, not the nodes'", async (t) => {
    const get = async (path: string) => expectStatus(await plane.admin.request<KubeObject>('GET', path), `GET ${path}`, 200).body;
    const flowcontrol = '/apis/flowcontrol.apiserver.k8s.io/v1';
    const flowSchema = await get(`${flowcontrol}/flowschemas/kubeboot-approver`);
    const level = await get(`${flowcontrol}/prioritylevelconfigurations/kubeboot-approver`);
    // The stock level every API server creates (a suggested object), and the shipped schema that sends the Lease there.
    const leaderElection = await get(`${flowcontrol}/prioritylevelconfigurations/leader-election`);
    const leaseSchema = await get(`${flowcontrol}/flowschemas/kubeboot-approver-leader-election`);
    await flowSchemaInEffect(plane.admin, 'kubeboot-approver-leader-election');
    const approver = kubeClient({
      server: plane.server,
      caPem: plane.caPem,
      ...(await plane.mintClientCert({ commonName: 'kubeboot:approver' })),
    });
    const node = await nodeClient(plane, 'apf-node');
    t.teardown(() => Promise.all([approver.close(), node.close()]));
    const classed = (res: KubeResponse<unknown>, what: string, schema: KubeObject, into: KubeObject) => {
      t.equal(res.headers['x-kubernetes-pf-flowschema-uid'], schema.metadata.uid, `${what}: FlowSchema ${schema.metadata.name}`);
      t.equal(res.headers['x-kubernetes-pf-prioritylevel-uid'], into.metadata.uid, `${what}: priority level ${into.metadata.name}`);
    };
    const res = await approver.request('GET', `${CSRS}?limit=1`);
    t.equal(res.status, 200);
    classed(res, 'the user kubeboot:approver lists CSRs', flowSchema, level);

    // Its Lease as leader election makes it, no approver running: create, get, update.
    const leases = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases';
    expectStatus(await plane.admin.request('DELETE', `${leases}/kubeboot-approver`), 'delete the Lease', 200, 404);
    const lease = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'kubeboot-approver', namespace: 'kube-system' },
    };
    const created = await approver.request('POST', leases, lease);
    t.equal(created.status, 201, 'the user creates the Lease');
    classed(created, 'its Lease create', leaseSchema, leaderElection);
    const read = await approver.request<KubeObject>('GET', `${leases}/kubeboot-approver`);
    t.equal(read.status, 200, 'and reads it');
    classed(read, 'its Lease get', leaseSchema, leaderElection);
    const renewed = await approver.request('PUT', `${leases}/kubeboot-approver`, {
      ...read.body,
      spec: { holderIdentity: 'apf-test', leaseDurationSeconds: 1, renewTime: new Date().toISOString().replace('Z', '000Z') },
    });
    t.equal(renewed.status, 200, 'and renews it');
    classed(renewed, 'its Lease update', leaseSchema, leaderElection);

    const fromNode = await node.request('GET', '/api/v1/nodes/apf-node');
    t.not(fromNode.headers['x-kubernetes-pf-flowschema-uid'], undefined, 'a node request is classed too');
    t.not(fromNode.headers['x-kubernetes-pf-prioritylevel-uid'], level.metadata.uid, "a node's is not in the approver's level");
  });
}
