// --inventory: the Inventory record's entries parsed strictly, one node at a
// time, and the two rules that make it the authority over kubelet client
// names and serving IP SANs; decide() reads it only when the flag is on.
import t from 'tap';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { decide } from '../../../agent/approver/decide.js';
import type { Lookups } from '../../../agent/approver/lookups.js';
import { evaluate } from '../../../agent/approver/policy.js';
import { KUBELET_CLIENT_RULES } from '../../../agent/approver/rules/kubelet-client.js';
import { KUBELET_SERVING_RULES } from '../../../agent/approver/rules/kubelet-serving.js';
import type { ApproverPolicy, RuleInput, World } from '../../../agent/approver/rules/rule.js';
import type { RequestFacts } from '../../../agent/approver/request.js';
import { inventoryEntry, inventoryHasIp, parseInventoryEntry, type InventoryEntry } from '../../../agent/records/inventory.js';
import { craftCsrPem, type CraftSpec } from '../../support/approver.js';

t.test('an entry: ips (addresses and CIDRs) and machine-id, in any order, spaces ignored', async (t) => {
  t.same(parseInventoryEntry('w1', ' ips: 10.0.0.7, 10.0.1.0/24 ,fd00::7 ; machine-id: 0f1e2d3c4b5a69788796a5b4c3d2e1f0 '), {
    name: 'w1',
    ips: ['10.0.0.7', 'fd00::7'],
    cidrs: ['10.0.1.0/24'],
    machineId: '0f1e2d3c4b5a69788796a5b4c3d2e1f0',
  });
  t.same(parseInventoryEntry('w1', 'ips: FD00:0:0::7'), { name: 'w1', ips: ['fd00::7'], cidrs: [], machineId: null }, 'IPv6 canonical');
  t.same(parseInventoryEntry('w1', ''), { name: 'w1', ips: [], cidrs: [], machineId: null }, 'empty: listed, no addresses');
});

t.test('a malformed entry is a problem naming the key and the field, never a partial entry', async (t) => {
  const cases: [string, RegExp][] = [
    ['ips: 10.0.0.7; ips: 10.0.0.8', /key w1 field ips: given twice/],
    ['ips: 10.0.0.300', /key w1 field ips: expected an IPv4 or IPv6 address/],
    ['ips: 10.0.0.0/33', /key w1 field ips: expected a CIDR/],
    ['ips: 10.0.0.7,', /key w1 field ips: expected an IPv4 or IPv6 address, got ""/],
    ['ips: ', /key w1 field ips: expected an IPv4 or IPv6 address/],
    ['ip: 10.0.0.7', /key w1 field ip: unknown field \(known: ips, machine-id, tpm-ek, tpm-ak\)/],
    ['10.0.0.7', /key w1 field 10\.0\.0\.7: expected `field: value`/],
    ['ips: 10.0.0.7;', /key w1 field \(none\): expected `field: value`/],
    ['{"ips":["10.0.0.7"]}', /key w1 field/],
    ['machine-id: 0F1E', /key w1 field machine-id: expected 32 lowercase hex digits/],
  ];
  for (const [raw, problem] of cases) {
    const parsed = parseInventoryEntry('w1', raw);
    t.ok('problem' in parsed, `${JSON.stringify(raw)} is a problem`);
    t.match('problem' in parsed ? parsed.problem : '', problem);
    t.match('problem' in parsed ? parsed.problem : '', /^inventories\.kubeboot\.io\/inventory key w1 /);
  }
});

t.test('one malformed entry touches only its own node; an absent key is not listed', async (t) => {
  const data = { w1: 'ips: 10.0.0.7', w2: 'ips: nonsense', toString: 'ips: 10.0.0.9' };
  t.match(inventoryEntry(data, 'w1'), { ips: ['10.0.0.7'] });
  t.match(inventoryEntry(data, 'w2'), { problem: /key w2 field ips/ });
  t.equal(inventoryEntry(data, 'w3'), null);
  t.equal(inventoryEntry({}, 'constructor'), null, "an object's own inherited names are no keys");
});

t.test('an IP is in an entry when it is one of its addresses or inside one of its CIDRs', async (t) => {
  const entry = parseInventoryEntry('w1', 'ips: 10.0.0.7, 10.0.1.0/24, fd00:1::/64') as InventoryEntry;
  t.ok(inventoryHasIp(entry, '10.0.0.7'));
  t.ok(inventoryHasIp(entry, '10.0.1.200'));
  t.ok(inventoryHasIp(entry, 'fd00:1::99'));
  t.notOk(inventoryHasIp(entry, '10.0.0.8'));
  t.notOk(inventoryHasIp(entry, '10.0.2.1'));
  t.notOk(inventoryHasIp(entry, 'fd00:2::1'));
});

// ---- the rules ----

const policy: ApproverPolicy = {
  kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
  maxExpirationSeconds: 86_400,
  keyAlgorithms: ['ecdsa-p256'],
  serving: { enabled: true, dnsSuffixes: [], ipCidrs: [] },
  kubeletClient: { enabled: true, unboundTokens: true, protectNodes: [] },
  inventory: true,
};

const request = (over: Partial<RequestFacts>): RequestFacts => ({
  subject: { commonName: 'system:node:w1', organizations: ['system:nodes'] },
  dnsNames: [],
  ipAddresses: [],
  emailAddresses: [],
  uris: [],
  otherNames: [],
  key: { kind: 'ecdsa', curve: 'prime256v1' },
  signatureValid: true,
  ...over,
});

const listed = (raw: string): World['inventory'] => ({ found: true, entry: parseInventoryEntry('w1', raw) });

function input(
  kind: 'client' | 'serving',
  w: Partial<World>,
  over: { req?: Partial<RequestFacts>; policy?: ApproverPolicy } = {},
): RuleInput {
  const node = { name: 'w1', addresses: [{ type: 'InternalIP', address: '10.0.0.66' }] };
  return {
    csr: {
      name: 'x',
      uid: 'uid-x',
      created: '2026-12-01T10:00:00Z',
      signerName: kind === 'client' ? 'kubernetes.io/kube-apiserver-client-kubelet' : 'kubernetes.io/kubelet-serving',
      username: 'system:node:w1',
      groups: ['system:nodes'],
      usages: ['digital signature', kind === 'client' ? 'client auth' : 'server auth'],
      expirationSeconds: kind === 'client' ? undefined : 86_400,
      request: request(over.req ?? (kind === 'serving' ? { dnsNames: ['w1'] } : {})),
      requestProblem: null,
    },
    nodeName: 'w1',
    world: {
      node,
      blocking: [],
      apiServer: { names: [], ips: ['10.96.0.1'] },
      records: { binding: null, replacement: null, revocation: null },
      ...w,
    },
    policy: over.policy ?? policy,
  };
}

t.test('inventory-listed: a kubelet client renewal only for a listed name whose entry parses', async (t) => {
  t.same(evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: listed('ips: 10.0.0.7') })), { ok: true });
  t.same(evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: listed('') })), { ok: true }, 'a name with no addresses');
  t.match(evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: { found: true, entry: null } })), {
    ok: false,
    rule: 'inventory-listed',
    problem: 'node w1 is not in the inventory inventories.kubeboot.io/inventory (add a key w1 to spec.nodes)',
  });
  t.match(evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: listed('ips: x') })), {
    rule: 'inventory-listed',
    problem: /the inventory entry cannot be trusted: inventories\.kubeboot\.io\/inventory key w1 field ips/,
  });
  t.match(evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: { found: false } })), {
    rule: 'inventory-listed',
    problem: /the inventory inventories\.kubeboot\.io\/inventory does not exist/,
  });
  t.match(evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: null })), { rule: 'inventory-listed' }, 'not read: closed');
  t.same(
    evaluate(KUBELET_CLIENT_RULES, input('client', { inventory: null }, { policy: { ...policy, inventory: false } })),
    { ok: true },
    'without --inventory the rule does not run',
  );
});

t.test("inventory-addresses: serving IP SANs from the inventory, not the Node's status.addresses", async (t) => {
  const serving = (raw: string | null, ips: string[], p = policy) =>
    evaluate(
      KUBELET_SERVING_RULES,
      input(
        'serving',
        { inventory: raw === null ? { found: false } : listed(raw) },
        { req: { dnsNames: ['w1'], ipAddresses: ips }, policy: p },
      ),
    );
  t.same(serving('ips: 10.0.0.7', ['10.0.0.7']), { ok: true }, 'a listed address, though the Node does not claim it');
  t.same(serving('ips: 10.0.0.0/24', ['10.0.0.7']), { ok: true }, 'an address inside a listed CIDR');
  t.same(serving('', []), { ok: true }, 'DNS SANs only, for a listed node without addresses');
  t.match(serving('ips: 10.0.0.7', ['10.0.0.66']), {
    rule: 'inventory-addresses',
    problem: "IP SAN 10.0.0.66 is not among node w1's inventory addresses [10.0.0.7] (inventories.kubeboot.io/inventory)",
  });
  t.match(serving(null, []), { rule: 'inventory-addresses', problem: /does not exist/ }, 'missing inventory: no serving CSR');
  t.match(serving('machine-id: nope', ['10.0.0.7']), { rule: 'inventory-addresses', problem: /key w1 field machine-id/ });
  t.match(
    serving('ips: 10.0.0.0/16', ['10.0.9.1'], { ...policy, serving: { ...policy.serving, ipCidrs: ['10.0.0.0/24'] } }),
    { rule: 'inventory-addresses', problem: 'IP SAN 10.0.9.1 is outside [10.0.0.0/24]' },
    '--serving-ip-cidr still bounds it',
  );
  t.match(serving('ips: 127.0.0.1', ['127.0.0.1']), { rule: 'not-api-server-ips' }, 'an inventory listing loopback does not win');
  const off = { ...policy, inventory: false };
  t.same(serving(null, ['10.0.0.66'], off), { ok: true }, "without --inventory: the Node's status.addresses, as before");
  t.match(serving(null, ['10.0.0.7'], off), { rule: 'ip-sans' });
});

// ---- decide(): what is read ----

async function csr(name: string, spec: CraftSpec, over: Partial<ApproverCsr['spec']>): Promise<ApproverCsr> {
  return {
    metadata: { name, uid: `uid-${name}`, creationTimestamp: '2026-01-01T00:00:00Z' },
    spec: { request: Buffer.from(await craftCsrPem(spec)).toString('base64'), signerName: '', usages: [], ...over },
  };
}

type InventoryRecord = { kind: 'Inventory'; metadata: { name: string }; spec: { nodes: Record<string, string> } };

function lookups(records: Record<string, InventoryRecord>): Lookups & { read: string[] } {
  const read: string[] = [];
  return {
    read,
    node: async (name) => (name === 'w1' ? { name, addresses: [{ type: 'InternalIP', address: '10.0.0.66' }], labels: {} } : null),
    allowed: async () => true,
    sameRequester: () => [],
    apiServer: async () => ({ names: [], ips: ['10.96.0.1'] }),
    // biome-ignore lint/suspicious/noExplicitAny: the fake holds only the inventory
    record: async (resource, name) => (read.push(resource), (records[name] ?? null) as any),
    legacy: async (name) => (read.push(`configmaps/${name}`), null),
  };
}

const inventory = (nodes: Record<string, string>): InventoryRecord => ({
  kind: 'Inventory',
  metadata: { name: 'inventory' },
  spec: { nodes },
});
const renewal = {
  signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'client auth'],
  username: 'system:node:w1',
  groups: ['system:nodes', 'system:authenticated'],
};
const servingCsr = {
  ...renewal,
  signerName: 'kubernetes.io/kubelet-serving',
  usages: ['digital signature', 'server auth'],
  expirationSeconds: 86_400,
};

t.test('decide: a renewal of a name removed from the inventory is refused as a revocation would be', async (t) => {
  const subject = { cn: 'system:node:w1', o: ['system:nodes'] };
  const l = lookups({ inventory: inventory({ w1: 'ips: 10.0.0.7' }) });
  t.match(await decide(await csr('a', subject, renewal), policy, l), { kind: 'approve', message: /not-revoked, inventory-listed\)/ });
  t.same(l.read, ['noderevocations', 'configmaps/revocations', 'inventories']);
  t.match(await decide(await csr('b', subject, renewal), policy, lookups({ inventory: inventory({ w2: '' }) })), {
    kind: 'violation',
    rule: 'inventory-listed',
    message:
      'kubelet-client rule inventory-listed: node w1 is not in the inventory inventories.kubeboot.io/inventory (add a key w1 to spec.nodes)',
  });
});

t.test('decide: serving IP SANs are checked against the inventory; the inventory is not read without --inventory', async (t) => {
  const spec = { cn: 'system:node:w1', o: ['system:nodes'], dns: ['w1'], ips: ['10.0.0.66'] };
  const records = { inventory: inventory({ w1: 'ips: 10.0.0.7' }) };
  t.match(await decide(await csr('s', spec, servingCsr), policy, lookups(records)), {
    kind: 'violation',
    rule: 'inventory-addresses',
  });
  const off = lookups(records);
  t.match(await decide(await csr('s', spec, servingCsr), { ...policy, inventory: false }, off), { kind: 'approve' });
  t.same(off.read, ['noderevocations', 'configmaps/revocations'], 'the inventory is not read (the revocation is, for not-revoked)');
});
