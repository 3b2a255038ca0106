/**
 * The admin's inventory of expected nodes, the Inventory record `inventory`
 * (`inventories.kubeboot.io/inventory`, records/kinds.ts), which
 * `kubeboot approver --inventory` takes as the authority over node names and
 * serving addresses instead of what a node says about itself (its CSR's CN,
 * its Node's status.addresses; upstream calls trusting those broken:
 * kubernetes/kubernetes#50635). One key of spec.nodes per node name; its
 * value is `;`-separated `field: value` pairs:
 *
 *   worker-1: "ips: 10.0.0.7, fd00::7; machine-id: 0f1e2d3c4b5a69788796a5b4c3d2e1f0"
 *   worker-2: "ips: 10.0.1.0/24"
 *   worker-3: ""                      (listed, no addresses: no IP SAN is approved for it)
 *
 * - `ips`: comma-separated addresses and CIDRs; a serving IP SAN must be one
 *   of them or inside one.
 * - `machine-id`: 32 lowercase hex digits, as /etc/machine-id; recorded, not
 *   verified (nothing in a CSR proves it: that needs attestation).
 *
 * Parsed per entry, strictly: an unknown or repeated field, or an address
 * that is not one, makes that node's entry a problem naming the key and the
 * field (its CSRs are refused), and leaves every other entry alone.
 *
 * Pure: parsing and matching. The request is the caller's.
 */
import { BlockList, isIP } from 'node:net';
import { cidrProblem, ipProblem } from '../config/values.js';
import { canonicalIp } from '../pki/names.js';
import { INVENTORY_NAME, recordRef } from './kinds.js';

export const INVENTORY_REF = recordRef('inventories', INVENTORY_NAME);

export interface InventoryEntry {
  name: string;
  /** Canonical addresses (canonicalIp) and CIDRs as written. */
  ips: string[];
  cidrs: string[];
  machineId: string | null;
}

/** Why an entry cannot be trusted: its key and field, for the rule's message. */
export interface InventoryProblem {
  name: string;
  problem: string;
}

/** What the approver read of the inventory for one node: the record is missing, or the node's entry (null: not listed). */
export type InventoryLookup =
  /** `legacy`: why a ConfigMap inventory of an earlier release that is still there is not read instead. */
  { found: false; legacy?: string } | { found: true; entry: InventoryEntry | InventoryProblem | null };

const FIELDS = ['ips', 'machine-id'] as const;
const MACHINE_ID = /^[0-9a-f]{32}$/;

/** The entry of `name` (a key of the inventory's spec.nodes), or the first problem with it. */
export function parseInventoryEntry(name: string, raw: string): InventoryEntry | InventoryProblem {
  const at = (field: string, problem: string): InventoryProblem => ({
    name,
    problem: `${INVENTORY_REF} key ${name} field ${field}: ${problem}`,
  });
  const entry: InventoryEntry = { name, ips: [], cidrs: [], machineId: null };
  const seen = new Set<string>();
  const pairs = raw.trim() === '' ? [] : raw.split(';');
  for (const pair of pairs) {
    const colon = pair.indexOf(':');
    const field = (colon < 0 ? pair : pair.slice(0, colon)).trim();
    if (colon < 0) return at(field || '(none)', 'expected `field: value` (fields are separated by `;`)');
    if (!(FIELDS as readonly string[]).includes(field)) return at(field || '(none)', `unknown field (known: ${FIELDS.join(', ')})`);
    if (seen.has(field)) return at(field, 'given twice');
    seen.add(field);
    const value = pair.slice(colon + 1).trim();
    if (field === 'machine-id') {
      if (!MACHINE_ID.test(value)) return at(field, `expected 32 lowercase hex digits, got ${JSON.stringify(value)}`);
      entry.machineId = value;
      continue;
    }
    const items = value.split(',').map((v) => v.trim());
    for (const item of items) {
      const problem = item.includes('/') ? cidrProblem(item) : ipProblem(item);
      if (problem !== null) return at(field, problem);
      if (item.includes('/')) entry.cidrs.push(item);
      else entry.ips.push(canonicalIp(item));
    }
  }
  return entry;
}

/** The node's entry in the inventory's spec.nodes (a missing key: not listed). */
export function inventoryEntry(data: Record<string, string> | undefined, name: string): InventoryEntry | InventoryProblem | null {
  const raw = data !== undefined && Object.hasOwn(data, name) ? data[name] : undefined;
  return raw === undefined ? null : parseInventoryEntry(name, raw);
}

/** Whether `ip` (canonical, as request.ts gives SANs) is one of the entry's addresses or inside one of its CIDRs. */
export function inventoryHasIp(entry: InventoryEntry, ip: string): boolean {
  if (entry.ips.includes(canonicalIp(ip))) return true;
  const family = isIP(ip);
  if (family === 0) return false;
  const blocks = new BlockList();
  for (const cidr of entry.cidrs) {
    const [net = '', prefix = ''] = cidr.split('/');
    blocks.addSubnet(net, Number(prefix), isIP(net) === 6 ? 'ipv6' : 'ipv4');
  }
  return blocks.check(ip, family === 6 ? 'ipv6' : 'ipv4');
}
