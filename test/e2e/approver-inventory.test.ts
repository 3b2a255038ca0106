// `kubeboot approver --inventory` against a real control plane: the admin's
// Inventory record (inventories.kubeboot.io/inventory) is the authority. While it is missing nothing of the
// kubelet's is approved; then a bound token's CSR is approved for a listed
// name and refused (rule named) for an unlisted one its binding allows; a
// serving IP SAN outside the node's entry is refused though the Node's
// status.addresses claims it; a node removed from the inventory renews no
// more. Without --inventory the same CSRs are approved, as before.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { newRecord, recordsPath } from '../../agent/records/kinds.js';
import type { KubeObject } from '../support/admin.js';
import {
  approvals,
  createNode,
  csrEvents,
  dropKcmAutoApproval,
  installApprover,
  nodeClient,
  startApprover,
  submitCsr,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from '../support/http.js';
import type { Running } from '../support/kubeboot.js';
import { freePort } from '../support/processes.js';

const INVENTORY = `${recordsPath('inventories')}/inventory`;
const KUBELET_CLIENT = {
  signer: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'key encipherment', 'client auth'],
  o: ['system:nodes'],
};
const SERVING = { signer: 'kubernetes.io/kubelet-serving', usages: ['digital signature', 'server auth'], o: ['system:nodes'] };

const plane = await controlPlaneOrSkip(t, { name: 'approver-inventory' });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-inventory-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = await installApprover(plane, dir);
  // Only kubeboot approves kubelet client CSRs here, whatever RBAC the plane started with.
  await dropKcmAutoApproval(plane);
  const clients: KubeClient[] = [];
  t.teardown(() => Promise.all(clients.map((c) => c.close())));

  const listen = await freePort();
  const start = (extra: string[]): Promise<Running> => {
    const approver = startApprover(config, [
      '--approve-kubelet-client',
      '--approve-kubelet-serving',
      '--resync-period',
      '10m',
      '--approver-listen',
      `127.0.0.1:${listen}`,
      ...extra,
    ]);
    return approver.waitForOutput(/became the leader/, 60_000).then(() => approver);
  };
  const stop = async (approver: Running) => {
    approver.child.kill('SIGTERM');
    await approver.done;
  };
  let approver = await start(['--inventory']);
  t.teardown(() => stop(approver));

  /** The approver has the record at this resourceVersion (it logs each record it sees). */
  const seen = (ref: string, rv: string) =>
    approver.waitForOutput(new RegExp(`record seen: ${ref.replace(/[.]/g, '\\.')} \\(resourceVersion ${rv}\\)`), 30_000);
  /** A bootstrap token bound to `names`, as `kubeboot token create --node` makes it. */
  const tokenFor = async (names: string[]) => {
    const token = await plane.admin.createBootstrapToken({ bind: { names } });
    const binding = await plane.admin.request<KubeObject>('GET', `${recordsPath('tokenbindings')}/${token.id}`);
    await seen(`tokenbindings.kubeboot.io/${token.id}`, binding.body.metadata.resourceVersion as string);
    const client = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
    clients.push(client);
    return client;
  };
  const ask = (by: KubeClient, node: string) => submitCsr(by, { ...KUBELET_CLIENT, cn: `system:node:${node}`, name: `kc-${node}` });
  const approved = (name: string) =>
    plane.admin.waitFor(`CSR ${name} approved`, async () => {
      const csr = await plane.admin.getCsr(name);
      return approvals(csr).length > 0 ? csr : undefined;
    });
  /** The approver's Event naming `rule`; the CSR then carries no condition. */
  const refused = async (name: string, rule: string) => {
    const event = await plane.admin.waitFor(`Event on ${name} naming ${rule}`, async () =>
      (await csrEvents(plane, name)).find((e) => e.message.includes(` rule ${rule}:`)),
    );
    const csr = await plane.admin.getCsr(name);
    return { message: event.message, conditions: (csr?.status?.conditions ?? []) as KubeObject[] };
  };
  /** Writes the inventory's spec.nodes, and waits until the approver has it. */
  const setInventory = async (nodes: Record<string, string>) => {
    const got = await plane.admin.request<KubeObject>('GET', INVENTORY);
    const made =
      got.status === 404
        ? expectStatus(
            await plane.admin.request<KubeObject>(
              'POST',
              recordsPath('inventories'),
              newRecord('inventories', 'inventory', { spec: { nodes } }),
            ),
            'create inventory',
            201,
          )
        : expectStatus(await plane.admin.request<KubeObject>('PUT', INVENTORY, { ...got.body, spec: { nodes } }), 'update inventory', 200);
    await seen('inventories.kubeboot.io/inventory', made.body.metadata.resourceVersion as string);
  };
  const readyz = async () => (await request(`http://127.0.0.1:${listen}/readyz`)).body.text();

  t.test('with --inventory and no inventory record, no kubelet client CSR is approved, and it says why', async (t) => {
    await approver.waitForOutput(/--inventory: inventories\.kubeboot\.io\/inventory: missing/, 30_000);
    t.match(approver.output(), '--inventory: inventories.kubeboot.io/inventory: missing', 'a warning at start');
    t.match(await readyz(), 'inventory inventories.kubeboot.io/inventory: missing', '/readyz says so');
    const r = await refused(await ask(await tokenFor(['early-1']), 'early-1'), 'inventory-listed');
    t.match(r.message, 'the inventory inventories.kubeboot.io/inventory does not exist');
    t.same(r.conditions, [], 'left pending');
  });

  t.test('a bound token gets a listed name; a name its binding allows but the inventory lacks is refused', async (t) => {
    await setInventory({ 'inv-1': 'ips: 10.30.0.7', 'inv-3': 'ips: 10.30.0.9', 'bad-1': 'ips: 10.30.0.300' });
    const token = await tokenFor(['inv-1', 'inv-2']);
    t.match(
      approvals(await approved(await ask(token, 'inv-1')))[0]?.message,
      /inventory-listed\) and system:bootstrap:/,
      'listed: approved',
    );
    const unlisted = await refused(await ask(token, 'inv-2'), 'inventory-listed');
    t.match(unlisted.message, 'node inv-2 is not in the inventory inventories.kubeboot.io/inventory');
    t.same(unlisted.conditions, []);
    const malformed = await refused(await ask(await tokenFor(['bad-1']), 'bad-1'), 'inventory-listed');
    t.match(malformed.message, 'inventories.kubeboot.io/inventory key bad-1 field ips', 'a malformed entry names its key and field');
  });

  t.test("a serving IP SAN outside the node's inventory entry is refused, though its Node claims it", async (t) => {
    await createNode(plane, 'inv-3', [{ type: 'InternalIP', address: '10.30.0.66' }]);
    const node = await nodeClient(plane, 'inv-3');
    clients.push(node);
    const claimed = await refused(
      await submitCsr(node, { ...SERVING, name: 'serving', cn: 'system:node:inv-3', dns: ['inv-3'], ips: ['10.30.0.66'] }),
      'inventory-addresses',
    );
    t.match(claimed.message, "IP SAN 10.30.0.66 is not among node inv-3's inventory addresses [10.30.0.9]");
    t.same(claimed.conditions, []);
    const listed = await submitCsr(node, { ...SERVING, name: 'serving', cn: 'system:node:inv-3', dns: ['inv-3'], ips: ['10.30.0.9'] });
    t.ok(await approved(listed), "the inventory's address is approved, though status.addresses does not list it");
  });

  t.test('a node removed from the inventory renews no more', async (t) => {
    const node = await nodeClient(plane, 'inv-3');
    clients.push(node);
    const renew = () => submitCsr(node, { ...KUBELET_CLIENT, cn: 'system:node:inv-3', name: 'renew' });
    t.match(approvals(await approved(await renew()))[0]?.message, /kubebootselfnodeclient/, 'listed: renewed');
    await setInventory({ 'inv-1': 'ips: 10.30.0.7' });
    t.match((await refused(await renew(), 'inventory-listed')).message, 'node inv-3 is not in the inventory');
  });

  t.test('without --inventory the same CSRs are approved, as before', async (t) => {
    await stop(approver);
    approver = await start([]);
    t.notMatch(await readyz(), 'inventory', 'no inventory line on /readyz');
    t.ok(await approved(await ask(await tokenFor(['free-1']), 'free-1')), 'an unlisted name its binding allows');
    await createNode(plane, 'free-2', [{ type: 'InternalIP', address: '10.30.0.77' }]);
    const node = await nodeClient(plane, 'free-2');
    clients.push(node);
    const serving = await submitCsr(node, { ...SERVING, name: 'serving', cn: 'system:node:free-2', dns: ['free-2'], ips: ['10.30.0.77'] });
    t.ok(await approved(serving), "a serving IP SAN from the Node's status.addresses");
    t.notMatch(approver.output(), 'could not decide on CSR', 'no decision failed');
  });
}
