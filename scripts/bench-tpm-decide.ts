// What TPM evidence costs the approver (issue 37: "≤ +0.5 ms of CPU per
// CSR"): the same kubelet client renewals decided by decide() with the
// cluster's records in memory, once for a name listed without a TPM (no
// evidence to read) and once for a name enrolled with a swtpm's AK (every
// CSR carries a quote, verified), interleaved in rounds; CPU time of this
// process per decision, not wall time. Also the node's side: one quote on
// swtpm, wall time. No control plane: decide() is the approver's whole
// decision; its API calls are the same with and without evidence.
//
// Alone: npm run bench:tpm   (KUBEBOOT_BENCH_TPM_CSRS, default 300; 5 rounds)
import { randomBytes } from 'node:crypto';
import { decide } from '../agent/approver/decide.js';
import type { ApproverCsr } from '../agent/approver/csr-facts.js';
import type { Lookups } from '../agent/approver/lookups.js';
import { generateKey } from '../agent/pki/keys.js';
import { pemBlocks } from '../agent/pki/pem.js';
import { createCsrPem } from '../agent/pki/pkcs10.js';
import { INVENTORY_NAME, newRecord } from '../agent/records/kinds.js';
import { rotatedBeacon } from '../agent/records/tpm-beacon.js';
import { evidencePem, quoteCsr } from '../agent/tpm/csr-evidence.js';
import { identify, withTpm } from '../agent/tpm/identify.js';
import { withSwtpm } from '../test/support/swtpm.js';
import { INVENTORY_KUBELET_CLIENT_POLICY } from '../test/support/approver.js';

const CSRS = Number(process.env.KUBEBOOT_BENCH_TPM_CSRS ?? 300);
const ROUNDS = 5;
const NODE = 'worker-1';

const policy = INVENTORY_KUBELET_CLIENT_POLICY;

/** The approver's beacon the quotes bind. */
const BEACON = randomBytes(32);
const beaconRecord = rotatedBeacon(null, BEACON, new Date());

/** The records as the informers hold them: the inventory with `entry` for the node, and the beacon. */
function lookups(entry: string): Lookups {
  const inventory = {
    ...newRecord('inventories', INVENTORY_NAME, { spec: { nodes: { [NODE]: entry } } }),
    metadata: { name: INVENTORY_NAME, resourceVersion: '4' },
  };
  return {
    node: async () => null,
    allowed: async () => true,
    sameRequester: () => [],
    apiServer: async () => ({ names: [], ips: [] }),
    // biome-ignore lint/suspicious/noExplicitAny: the records a renewal of this policy reads
    record: async (resource) => (resource === 'inventories' ? inventory : resource === 'tpmbeacons' ? beaconRecord : null) as any,
    legacy: async () => null,
  };
}

function renewal(i: number, pem: string, created: string): ApproverCsr {
  return {
    metadata: { name: `csr-${i}`, uid: `uid-${i}`, creationTimestamp: created },
    spec: {
      request: Buffer.from(pem).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      usages: ['digital signature', 'client auth'],
      username: `system:node:${NODE}`,
      groups: ['system:nodes', 'system:authenticated'],
    },
  };
}

const cpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

export async function benchTpmDecide(): Promise<[string, string][]> {
  return withSwtpm(async (swtpm) => {
    const where = { swtpmTcp: swtpm.address };
    const { akName } = await withTpm(where, (tpm) => identify(tpm, new Date()));
    const created = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const plain: ApproverCsr[] = [];
    const attested: ApproverCsr[] = [];
    const quoteMs: number[] = [];
    for (let i = 0; i < CSRS; i++) {
      const key = await generateKey('ecdsa-p256');
      const pem = await createCsrPem({ key, subject: { commonName: `system:node:${NODE}`, organizations: ['system:nodes'] } });
      const began = performance.now();
      const evidence = await withTpm(where, (tpm) => quoteCsr(tpm, pemBlocks(pem)[0]!.der, new Date(created), BEACON));
      quoteMs.push(performance.now() - began);
      plain.push(renewal(i, pem, created));
      attested.push(renewal(i, `${pem.trimEnd()}\n${evidencePem(evidence)}`, created));
    }
    const legs = [
      { name: 'listed without a TPM', csrs: plain, lookups: lookups(''), cpu: [] as number[] },
      { name: 'enrolled AK, quote verified', csrs: attested, lookups: lookups(`tpm-ak: ${akName}`), cpu: [] as number[] },
    ];
    for (const leg of legs) {
      const d = await decide(leg.csrs[0]!, policy, leg.lookups);
      if (d.kind !== 'approve') throw new Error(`${leg.name}: the renewal was not approved: ${'message' in d ? d.message : d.kind}`);
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const leg of round % 2 === 0 ? legs : [...legs].reverse()) {
        const before = cpuMs();
        for (const csr of leg.csrs) await decide(csr, policy, leg.lookups);
        leg.cpu.push((cpuMs() - before) / leg.csrs.length);
      }
    }
    const [without, withTpmLeg] = legs.map((l) => median(l.cpu)) as [number, number];
    return [
      [
        `approver CPU per kubelet client renewal, decide(), ${CSRS} CSRs × ${ROUNDS} rounds: name listed without a TPM`,
        `${without.toFixed(3)} ms`,
      ],
      ['  the same, name enrolled with an AK: every CSR carries a quote, verified (rule tpm-attested)', `${withTpmLeg.toFixed(3)} ms`],
      ['  added by the evidence (median of rounds; target ≤ +0.5 ms)', `+${(withTpmLeg - without).toFixed(3)} ms`],
      [
        `node: one quote on swtpm (connect, AK primary, quote, flush), ${CSRS} quotes`,
        `median ${median(quoteMs).toFixed(1)} ms, max ${Math.max(...quoteMs).toFixed(1)} ms`,
      ],
    ];
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await benchTpmDecide();
  const width = Math.max(...rows.map((r) => r[0].length));
  process.stdout.write(`\n| ${'measure'.padEnd(width)} | value |\n|${'-'.repeat(width + 2)}|-------|\n`);
  for (const [k, v] of rows) process.stdout.write(`| ${k.padEnd(width)} | ${v} |\n`);
}
