/**
 * `kubeboot node enroll`: the admin records which TPM each node name
 * belongs to, as fields `tpm-ek` and `tpm-ak` of its entry in the Inventory
 * `inventories.kubeboot.io/inventory` (records/inventory.ts), every other
 * field of the entry kept as written. From then on the approver
 * (--inventory, rule tpm-attested) issues that name's kubelet client
 * certificate only on evidence from that TPM. One name from the command
 * line, or many from a file of the lines `kubeboot tpm identify` prints,
 * each prefixed with the node's name (as a vendor's or hypervisor's list
 * can be written):
 *
 *   worker-1 ek-sha256: 2df43a85…
 *   worker-1 ak-name: 000bc88e…
 *   worker-2 ek-sha256: 77aa01…
 *
 * Other `tpm identify` lines (ek-certificate, ek-ca, tpm), blank lines and
 * `#` comments are ignored.
 */
import { dns1123SubdomainProblem } from '../config/values.js';
import { InputError, KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { enrolmentRef } from '../records/tpm-enrolment.js';
import { INVENTORY_REF, parseInventoryEntry, tpmValueProblem, withTpmIdentity } from '../records/inventory.js';
import { INVENTORY_NAME, newRecord } from '../records/kinds.js';
import { createRecord, patchSpec, readRecord } from '../records/requests.js';
import { excerpt } from '../text.js';

export interface Enrolment {
  name: string;
  ek?: string;
  ak?: string;
}

const IDENTIFY_FIELDS: Record<string, 'ek' | 'ak' | null> = {
  'ek-sha256': 'ek',
  'ak-name': 'ak',
  'ek-certificate': null,
  'ek-ca': null,
  tpm: null,
};

/** One enrolment from the command line: the name and its --tpm-ek / --tpm-ak. */
export function enrolmentOf(name: string, ek: string | undefined, ak: string | undefined): Enrolment {
  const nameProblem = dns1123SubdomainProblem(name);
  if (nameProblem !== null) throw new InputError('command line', 'node name', nameProblem);
  if (ek === undefined && ak === undefined) throw new InputError('command line', '--tpm-ek', 'give --tpm-ek HASH, --tpm-ak NAME, or both');
  const e: Enrolment = { name };
  if (ek !== undefined) {
    const problem = tpmValueProblem('tpm-ek', ek);
    if (problem !== null) throw new InputError('command line', '--tpm-ek', problem);
    e.ek = ek;
  }
  if (ak !== undefined) {
    const problem = tpmValueProblem('tpm-ak', ak);
    if (problem !== null) throw new InputError('command line', '--tpm-ak', problem);
    e.ak = ak;
  }
  return e;
}

/** The enrolments of a file (see the header), in the order their names first appear. */
export function parseEnrolmentFile(text: string, file: string): Enrolment[] {
  const byName = new Map<string, Enrolment>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `line ${i + 1}`;
    const m = /^(\S+)\s+([a-z0-9-]+):\s*(.*)$/.exec(line);
    if (m === null)
      throw new InputError(
        file,
        where,
        `expected NAME FIELD: VALUE (as kubeboot tpm identify prints FIELD: VALUE), got ${JSON.stringify(excerpt(line))}`,
      );
    const [, name = '', field = '', value = ''] = m;
    const nameProblem = dns1123SubdomainProblem(name);
    if (nameProblem !== null) throw new InputError(file, where, `node name ${JSON.stringify(excerpt(name))}: ${nameProblem}`);
    if (!Object.hasOwn(IDENTIFY_FIELDS, field))
      throw new InputError(
        file,
        where,
        `unknown field ${JSON.stringify(excerpt(field))} (known: ${Object.keys(IDENTIFY_FIELDS).join(', ')})`,
      );
    const which = IDENTIFY_FIELDS[field];
    if (which === null || which === undefined) return;
    const problem = tpmValueProblem(which === 'ek' ? 'tpm-ek' : 'tpm-ak', value.trim());
    if (problem !== null) throw new InputError(file, where, problem);
    const e = byName.get(name) ?? { name };
    if (e[which] !== undefined && e[which] !== value.trim())
      throw new InputError(file, where, `node ${name} is given two different ${field} values`);
    e[which] = value.trim();
    byName.set(name, e);
  });
  if (byName.size === 0) throw new InputError(file, '--from-file', 'holds no ek-sha256 or ak-name line');
  return [...byName.values()];
}

/** The new entry text of each enrolled name, refused when a TPM would belong to two names. */
export function enrolledNodes(nodes: Readonly<Record<string, string>>, enrolments: readonly Enrolment[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of enrolments) {
    const raw = Object.hasOwn(nodes, e.name) ? nodes[e.name] : undefined;
    try {
      out[e.name] = withTpmIdentity(e.name, raw, {
        ...(e.ek !== undefined ? { ek: e.ek } : {}),
        ...(e.ak !== undefined ? { ak: e.ak } : {}),
      });
    } catch (err) {
      throw new KubebootError(`${(err as Error).message}; fix the entry (kubectl edit ${INVENTORY_REF}) before enrolling`);
    }
  }
  // One TPM, one name: a TPM enrolled under two names would let either machine take the other's.
  const owner = new Map<string, string>();
  for (const [name, raw] of Object.entries({ ...nodes, ...out })) {
    const entry = parseInventoryEntry(name, raw);
    if ('problem' in entry) continue;
    for (const value of [entry.tpmEk, entry.tpmAk]) {
      if (value === undefined) continue;
      const other = owner.get(value);
      if (other !== undefined && (Object.hasOwn(out, name) || Object.hasOwn(out, other)))
        throw new KubebootError(
          `the TPM ${value.slice(0, 16)}… would be enrolled for both ${other} and ${name}: a TPM belongs to one name (kubeboot node replace, then enroll the new name)`,
        );
      owner.set(value, name);
    }
  }
  return out;
}

/**
 * Writes the enrolments into the inventory: creates it when there is none,
 * else a merge patch of the enrolled keys on the resourceVersion read, read
 * again and retried when someone wrote it meanwhile.
 */
export async function enrollNodes(client: KubeClient, enrolments: readonly Enrolment[]): Promise<string[]> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const record = await readRecord(client, 'inventories', INVENTORY_NAME);
    const nodes = enrolledNodes(record?.spec?.nodes ?? {}, enrolments);
    const written =
      record === null
        ? (await createRecord(
            client,
            'inventories',
            newRecord('inventories', INVENTORY_NAME, { spec: { nodes } }),
            'nothing was enrolled',
          )) !== null
        : await patchSpec(client, record, 'inventories', { nodes });
    if (written) return enrolments.map(describe);
  }
  throw new KubebootError(`${INVENTORY_REF} kept changing while it was written; nothing was enrolled, run the command again`);
}

function describe(e: Enrolment): string {
  const what = [e.ak !== undefined ? `tpm-ak ${e.ak}` : null, e.ek !== undefined ? `tpm-ek ${e.ek}` : null]
    .filter((w) => w !== null)
    .join(', ');
  const then =
    e.ak !== undefined
      ? `its kubelet client CSRs, first issue and renewal, are approved only with a quote by that AK (kubeboot --tpm device on the machine; approver --inventory, rule tpm-attested)`
      : `its AK is enrolled at its first join (kubeboot --tpm answers a credential challenge for that EK; rule tpm-attested, recorded in ${enrolmentRef(e.name)}), or now with kubeboot node enroll ${e.name} --tpm-ak …`;
  return `node ${e.name} enrolled in ${INVENTORY_REF}: ${what}; ${then}`;
}
