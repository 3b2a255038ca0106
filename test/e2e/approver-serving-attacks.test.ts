// `kubeboot approver --approve-kubelet-serving` against a node that claims
// to be the API server (issue 27's findings), on a real control plane with
// the shipped RBAC: a node named `kubernetes.default.svc` that lists
// 127.0.0.1 as its address, and a node listing the `kubernetes` Service's
// cluster IP, get no serving certificate, even with --serving-ip-cidr
// covering those addresses; a plain node beside them is approved (so the
// refusals are the rules', not a stalled approver). With --serving-dns-suffix,
// a name under the suffix (another node's FQDN) is refused to a pool token
// and to a node already of that name (issue 35).
//
// kube-controller-manager runs here without its CSR signer: "approved" is the Approved condition.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { KubeObject } from '../support/admin.js';
import { approvals, createNode, installApprover, nodeClient, startApprover, submitCsr } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { kubeClient } from '../support/http.js';
import { forbid, kubeboot, type Running } from '../support/kubeboot.js';

const plane = await controlPlaneOrSkip(t, { name: 'approver-serving-attacks', csrSigning: false });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-serving-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = await installApprover(plane, dir);
  const service = (await plane.admin.request<KubeObject>('GET', '/api/v1/namespaces/default/services/kubernetes')).body;
  const clusterIp = service.spec.clusterIP as string;
  // The CIDRs an admin might give: the node network (here it contains the Service range and loopback too).
  let approver: Running = startApprover(config, [
    '--resync-period',
    '10m',
    '--approve-kubelet-serving',
    '--serving-ip-cidr',
    '127.0.0.0/8',
    '--serving-ip-cidr',
    '10.0.0.0/8',
  ]);
  await approver.waitForOutput(/became the leader/, 60_000);
  t.teardown(async () => {
    approver.child.kill('SIGTERM');
    await approver.done;
  });
  const serving = { signer: 'kubernetes.io/kubelet-serving', usages: ['digital signature', 'server auth'], o: ['system:nodes'] };
  const eventsFor = async (name: string) =>
    (await plane.admin.request<{ items: KubeObject[] }>('GET', '/api/v1/namespaces/default/events')).body.items.filter(
      (e) => e.source?.component === 'kubeboot-approver' && e.involvedObject?.name === name,
    );

  /** A node (its own client certificate) that registered with these addresses and asks for a serving certificate. */
  async function servingCsrOf(node: string, addresses: { type: string; address: string }[], sans: { dns: string[]; ips: string[] }) {
    await createNode(plane!, node, addresses);
    const client = await nodeClient(plane!, node);
    try {
      return await submitCsr(client, { ...serving, name: 'serving', cn: `system:node:${node}`, ...sans });
    } finally {
      await client.close();
    }
  }

  t.test('a node named after the API server, claiming its addresses, gets no serving certificate', async (t) => {
    const cases = [
      {
        what: 'node kubernetes.default.svc with 127.0.0.1',
        node: 'kubernetes.default.svc',
        addresses: [{ type: 'InternalIP', address: '127.0.0.1' }],
        sans: { dns: ['kubernetes.default.svc'], ips: ['127.0.0.1'] },
        rule: 'reserved-names',
      },
      {
        what: "node worker-1 claiming the kubernetes Service's cluster IP",
        node: 'worker-1',
        addresses: [{ type: 'InternalIP', address: clusterIp }],
        sans: { dns: ['worker-1'], ips: [clusterIp] },
        rule: 'not-api-server-ips',
      },
      {
        what: 'node worker-2 claiming loopback',
        node: 'worker-2',
        addresses: [{ type: 'InternalIP', address: '127.0.0.1' }],
        sans: { dns: ['worker-2'], ips: ['127.0.0.1'] },
        rule: 'not-api-server-ips',
      },
    ];
    const names: string[] = [];
    for (const c of cases) names.push(await servingCsrOf(c.node, c.addresses, c.sans));
    // A plain node beside them: approved, so the approver is deciding.
    const plain = await servingCsrOf('worker-3', [{ type: 'InternalIP', address: '10.20.0.7' }], { dns: ['worker-3'], ips: ['10.20.0.7'] });
    await plane.admin.waitFor(
      'the plain node approved',
      async () => (approvals(await plane.admin.getCsr(plain)).length > 0 ? true : undefined),
      60_000,
    );
    for (const [i, c] of cases.entries()) {
      const events = await plane.admin.waitFor(
        `an Event on ${c.what}`,
        async () => {
          const found = await eventsFor(names[i]!);
          return found.length > 0 ? found : undefined;
        },
        60_000,
      );
      t.match(events[0]?.message, new RegExp(`rule ${c.rule}: `), `${c.what}: refused under ${c.rule}`);
      t.same(approvals(await plane.admin.getCsr(names[i]!)), [], `${c.what}: not approved`);
    }
  });

  t.test("issue 35: a name under --serving-dns-suffix is honest node <name>'s FQDN: refused for client and serving", async (t) => {
    // Restarted with the suffix and kubelet client approval (SIGTERM releases the Lease at once).
    approver.child.kill('SIGTERM');
    await approver.done;
    approver = startApprover(config, [
      '--resync-period',
      '10m',
      '--approve-kubelet-serving',
      '--approve-kubelet-client',
      '--serving-dns-suffix',
      'nodes.example',
      '--serving-ip-cidr',
      '10.0.0.0/8',
    ]);
    await approver.waitForOutput(/became the leader/, 60_000);
    const waitEvent = (name: string) =>
      plane.admin.waitFor(
        `an Event on ${name}`,
        async () => {
          const found = await eventsFor(name);
          return found.length > 0 ? found : undefined;
        },
        60_000,
      );
    const KUBELET_CLIENT = { signer: 'kubernetes.io/kube-apiserver-client-kubelet', usages: ['digital signature', 'client auth'] };

    // A pool token for g4-pool-*: g4-pool-7.nodes.example is under its prefix, and honest g4-pool-7's serving name.
    const created = await kubeboot(t, ['token', 'create', '--kubeconfig', plane.adminKubeconfig, '--pool', 'g4-pool-', '--max-nodes', '3']);
    t.equal(created.code, 0, created.stderr);
    const token = created.stdout.trim();
    forbid(token.split('.')[1] ?? '');
    const pool = kubeClient({ server: plane.server, caPem: plane.caPem, token });
    const stolen = await submitCsr(pool, {
      ...KUBELET_CLIENT,
      cn: 'system:node:g4-pool-7.nodes.example',
      o: ['system:nodes'],
      name: 'fqdn',
    });
    const honest = await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'system:node:g4-pool-7', o: ['system:nodes'], name: 'honest' });
    await pool.close();
    await plane.admin.waitFor(
      'the honest name approved',
      async () => (approvals(await plane.admin.getCsr(honest)).length > 0 ? true : undefined),
      60_000,
    );
    t.match(
      (await waitEvent(stolen))[0]?.message,
      /rule not-under-dns-suffix: node name g4-pool-7\.nodes\.example ends in the serving DNS suffix nodes\.example/,
    );
    t.same(approvals(await plane.admin.getCsr(stolen)), [], 'the FQDN name is not issued');

    // A node already registered under such a name (joined before the rule) gets no serving certificate for it.
    const serve = await servingCsrOf('g4-pool-8.nodes.example', [{ type: 'InternalIP', address: '10.30.0.8' }], {
      dns: ['g4-pool-8.nodes.example'],
      ips: ['10.30.0.8'],
    });
    t.match((await waitEvent(serve))[0]?.message, /kubelet-serving rule not-under-dns-suffix: /);
    t.same(approvals(await plane.admin.getCsr(serve)), [], 'no serving certificate');
  });
}
