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
 * - `tpm-ek`: the machine's TPM endorsement key, as `kubeboot tpm identify`
 *   prints it (`ek-sha256`: 64 lowercase hex digits).
 * - `tpm-ak`: the TPM name of kubeboot's attestation key in that TPM
 *   (`ak-name`: `000b` and 64 lowercase hex digits). A name with either is
 *   TPM-bound: its kubelet client CSRs must carry a quote by that AK (the
 *   approver's rule tpm-attested, docs/tpm.md). `kubeboot node enroll`
 *   writes both. With `tpm-ek` alone, the AK that answers a credential
 *   challenge at the first join is recorded in records/tpm-enrolment.ts.
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
import { excerpt } from '../text.js';
import { INVENTORY_NAME, recordRef } from './kinds.js';

export const INVENTORY_REF = recordRef('inventories', INVENTORY_NAME);

export interface InventoryEntry {
  name: string;
  /** Canonical addresses (canonicalIp) and CIDRs as written. */
  ips: string[];
  cidrs: string[];
  machineId: string | null;
  /** `tpm-ek`: SHA-256 of the TPM's EK SubjectPublicKeyInfo, hex; absent when not enrolled. */
  tpmEk?: string;
  /** `tpm-ak`: the TPM name of the machine's attestation key, hex; absent when not enrolled. */
  tpmAk?: string;
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

const FIELDS = ['ips', 'machine-id', 'tpm-ek', 'tpm-ak'] as const;
const MACHINE_ID = /^[0-9a-f]{32}$/;
/** An EK public-key hash as `kubeboot tpm identify` prints it (ek-sha256). */
export const TPM_EK = /^[0-9a-f]{64}$/;
/** An AK's TPM name as `kubeboot tpm identify` prints it (ak-name): SHA-256 nameAlg 000b, then the digest. */
export const TPM_AK = /^000b[0-9a-f]{64}$/;

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
    if (field === 'tpm-ek' || field === 'tpm-ak') {
      const problem = tpmValueProblem(field, value);
      if (problem !== null) return at(field, problem);
      if (field === 'tpm-ek') entry.tpmEk = value;
      else entry.tpmAk = value;
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

/** Why a `tpm-ek` or `tpm-ak` value is not one, or null. */
export function tpmValueProblem(field: 'tpm-ek' | 'tpm-ak', value: string): string | null {
  if (field === 'tpm-ek')
    return TPM_EK.test(value)
      ? null
      : `expected the EK hash as kubeboot tpm identify prints it (ek-sha256: 64 lowercase hex digits), got ${JSON.stringify(excerpt(value))}`;
  return TPM_AK.test(value)
    ? null
    : `expected the AK name as kubeboot tpm identify prints it (ak-name: 000b and 64 lowercase hex digits), got ${JSON.stringify(excerpt(value))}`;
}

/** What the inventory says of a name's TPM: `ak` (bound to that AK), `ek-only` (its AK not enrolled yet), or `none`. */
export function tpmBinding(entry: InventoryEntry): 'ak' | 'ek-only' | 'none' {
  if (entry.tpmAk !== undefined) return 'ak';
  return entry.tpmEk !== undefined ? 'ek-only' : 'none';
}

/**
 * An entry's text with `tpm-ek` and `tpm-ak` set (an undefined one is kept
 * as it was), every other field as the admin wrote it: what `kubeboot node
 * enroll` writes back. Throws (InputError-free: the caller names the record)
 * when the entry does not parse, so nothing is written over a broken one.
 */
export function withTpmIdentity(name: string, raw: string | undefined, tpm: { ek?: string; ak?: string }): string {
  const parsed = parseInventoryEntry(name, raw ?? '');
  if ('problem' in parsed) throw new Error(parsed.problem);
  const kept = (raw ?? '')
    .split(';')
    .map((pair) => pair.trim())
    .filter((pair) => pair !== '')
    .filter((pair) => {
      const field = pair.slice(0, pair.indexOf(':')).trim();
      return !((field === 'tpm-ek' && tpm.ek !== undefined) || (field === 'tpm-ak' && tpm.ak !== undefined));
    });
  if (tpm.ek !== undefined) kept.push(`tpm-ek: ${tpm.ek}`);
  if (tpm.ak !== undefined) kept.push(`tpm-ak: ${tpm.ak}`);
  return kept.join('; ');
}
