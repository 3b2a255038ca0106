// A kubelet client CSR of a TPM-bound name is approved (rule tpm-attested)
// only with a quote by the enrolled AK bound to that very request: its key,
// its subject, a window around the CSR's creation, and one of the two
// beacons the approver accepts now. Two real (software)
// TPMs; each refusal below starts from the genuine case that passes.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { requestFacts, type RequestFacts } from '../../../agent/approver/request.js';
import { tpmAttestedProblem } from '../../../agent/approver/rules/tpm-attested.js';
import { generateKey, type PrivateKey } from '../../../agent/pki/keys.js';
import { pemBlocks } from '../../../agent/pki/pem.js';
import { createCsrPem } from '../../../agent/pki/pkcs10.js';
import { parseInventoryEntry, type InventoryEntry } from '../../../agent/records/inventory.js';
import {
  csrBinding,
  evidencePem,
  marshalEvidence,
  quoteCsr,
  splitCsrEvidence,
  unmarshalEvidence,
  verifyCsrEvidence,
  WINDOW_SECONDS,
  type CsrEvidence,
} from '../../../agent/tpm/csr-evidence.js';
import { identify, withTpm } from '../../../agent/tpm/identify.js';
import { EvidenceError } from '../../../agent/tpm/verify.js';
import { manufactureTpm, startSwtpm, type Swtpm } from '../../support/swtpm.js';

const NODES = ['system:nodes'];
const T = new Date('2026-12-03T18:00:10Z');
const created = (offsetSeconds = 5) => new Date(T.getTime() + offsetSeconds * 1000).toISOString();
const base64 = (pem: string) => Buffer.from(pem).toString('base64');
/** The approver's beacons now, newest first, and one it no longer accepts. */
const BEACON = randomBytes(32);
const PREVIOUS = randomBytes(32);
const RETIRED = randomBytes(32);
const BEACONS = [BEACON, PREVIOUS];

const tpms: Swtpm[] = [];
const ak: string[] = [];
let key: PrivateKey;
let csrPem: string;
let evidenceA: CsrEvidence;

async function csrFor(k: PrivateKey, cn: string): Promise<string> {
  return createCsrPem({ key: k, subject: { commonName: cn, organizations: NODES } });
}
const derOf = (pem: string) => pemBlocks(pem)[0]!.der;
async function quoted(sw: Swtpm, pem: string, at = T, beacon: Buffer | null = BEACON): Promise<CsrEvidence> {
  return withTpm({ swtpmTcp: sw.address }, (tpm) => quoteCsr(tpm, derOf(pem), at, beacon));
}
async function facts(pem: string, evidence: CsrEvidence | null): Promise<RequestFacts> {
  return requestFacts(base64(evidence === null ? pem : `${pem.trimEnd()}\n${evidencePem(evidence)}`));
}
const entry = (raw: string): InventoryEntry => parseInventoryEntry('worker-1', raw) as InventoryEntry;

t.before(async () => {
  const [one, two] = await Promise.all([manufactureTpm(), manufactureTpm()]);
  tpms.push(await startSwtpm(one), await startSwtpm(two));
  for (const sw of tpms) ak.push((await withTpm({ swtpmTcp: sw.address }, (tpm) => identify(tpm, T))).akName);
  key = await generateKey('ecdsa-p256');
  csrPem = await csrFor(key, 'system:node:worker-1');
  evidenceA = await quoted(tpms[0]!, csrPem);
});
t.teardown(async () => {
  for (const sw of tpms) {
    await sw.stop();
    rmSync(sw.dir, { recursive: true, force: true });
  }
});

t.test('the genuine case: the enrolled TPM quotes this CSR, the approver recomputes the binding and approves', async (t) => {
  const f = await facts(csrPem, evidenceA);
  t.ok(f.signatureValid, 'the request with its evidence block still parses and verifies');
  t.equal(tpmAttestedProblem(entry(`tpm-ak: ${ak[0]}`), f, created(), BEACONS), null);
  t.equal(
    tpmAttestedProblem(entry(`tpm-ek: ${'aa'.repeat(32)}; tpm-ak: ${ak[0]}`), f, created(), BEACONS),
    null,
    'with the EK enrolled too',
  );
  t.equal(
    tpmAttestedProblem(entry(`tpm-ak: ${ak[0]}`), await facts(csrPem, await quoted(tpms[0]!, csrPem, T, PREVIOUS)), created(), BEACONS),
    null,
    'a quote over the previous beacon (made just before a rotation) passes',
  );
  t.same(unmarshalEvidence(marshalEvidence(evidenceA)), evidenceA, 'the block round-trips');
  t.equal(evidenceA.pcrValues.length, 8, 'SHA-256 PCRs 0-7 are reported with the quote');
  t.equal(
    tpmAttestedProblem(entry('ips: 10.0.0.7'), await facts(csrPem, null), created(), { problem: 'no record' }),
    null,
    'a name without TPM identity is not checked',
  );
});

t.test('each copy or forgery is refused, naming the check', async (t) => {
  const otherKey = await generateKey('ecdsa-p256');
  const cases: {
    what: string;
    request: () => Promise<RequestFacts>;
    raw?: () => string;
    at?: string;
    beacons?: readonly Buffer[] | { problem: string };
    want: RegExp;
  }[] = [
    {
      what: 'a quote made ahead of time (root on the node): it binds a beacon two rotations old',
      request: async () => facts(csrPem, await quoted(tpms[0]!, csrPem, T, RETIRED)),
      want: /refused \(beacon: the quote binds a beacon that is neither the approver's current nor its previous one.*; tpmbeacons\.kubeboot\.io\/kubeboot\)/,
    },
    {
      what: 'a quote that binds no beacon (kubeboot before beacons, evidence version 2)',
      request: async () => facts(csrPem, await quoted(tpms[0]!, csrPem, T, null)),
      want: /refused \(beacon: the quote binds no beacon/,
    },
    {
      what: 'the current beacon written into evidence quoted over a retired one',
      request: async () => facts(csrPem, { ...(await quoted(tpms[0]!, csrPem, T, RETIRED)), beacon: BEACON }),
      want: /refused \(nonce: /,
    },
    {
      what: 'no beacon published yet',
      request: () => facts(csrPem, evidenceA),
      beacons: [],
      want: /refused \(beacon: the approver has published no beacon yet/,
    },
    {
      what: 'a beacon record that cannot be read',
      request: () => facts(csrPem, evidenceA),
      beacons: { problem: 'tpmbeacons.kubeboot.io/kubeboot spec.beacons does not hold one or two beacons' },
      want: /^tpmbeacons\.kubeboot\.io\/kubeboot spec\.beacons does not hold one or two beacons: delete it and the approver's leader publishes a new one$/,
    },
    {
      what: "evidence copied onto a CSR with another key (a stolen disk's, an attacker's)",
      request: async () => facts(await csrFor(otherKey, 'system:node:worker-1'), evidenceA),
      want: /refused \(nonce: /,
    },
    {
      what: 'evidence copied onto a CSR of the same key for another name',
      request: async () => facts(await csrFor(key, 'system:node:worker-2'), evidenceA),
      want: /refused \(nonce: /,
    },
    {
      what: 'an old copy: the CSR was created two windows after the quote',
      request: () => facts(csrPem, evidenceA),
      at: created(2 * WINDOW_SECONDS + 5),
      want: /refused \(window: the quote is for the 5-minute window starting 2026-12-03T18:00:00\.000Z, the CSR was created at 2026-12-03T18:10:15\.000Z/,
    },
    {
      what: 'a quote from a future window (a node clock far ahead)',
      request: () => facts(csrPem, evidenceA),
      at: created(-2 * WINDOW_SECONDS),
      want: /refused \(window: /,
    },
    {
      what: 'another TPM quoting the right CSR (the other machine, with the pool token)',
      request: async () => facts(csrPem, await quoted(tpms[1]!, csrPem)),
      want: /refused \(ak-name: the AK is 000b[0-9a-f]{64}, not the enrolled /,
    },
    {
      what: 'the right quote judged against another enrolled AK',
      request: () => facts(csrPem, evidenceA),
      raw: () => `tpm-ak: ${ak[1]}`,
      want: /refused \(ak-name: /,
    },
    {
      what: 'no evidence at all (the kubelet rotating its own certificate, or a join without a TPM)',
      request: () => facts(csrPem, null),
      want: /is TPM-bound .* carries no KUBEBOOT TPM EVIDENCE: only kubeboot with --tpm/,
    },
    {
      what: "a name enrolled by another TPM's EK alone (test/unit/tpm/enrolment.test.ts has the rest)",
      request: () => facts(csrPem, evidenceA),
      raw: () => `tpm-ek: ${'aa'.repeat(32)}`,
      want: /the evidence's EK is [0-9a-f]{12}…, not node worker-1's enrolled aaaaaaaaaaaa…/,
    },
    {
      what: 'a signature bit flipped',
      request: () => {
        const e = structuredClone(evidenceA);
        const sig = e.signature as { r: Buffer };
        sig.r = Buffer.from(sig.r);
        sig.r[5] = (sig.r[5] as number) ^ 1;
        return facts(csrPem, e);
      },
      want: /refused \(signature: /,
    },
    {
      what: 'PCR values that are not the quoted ones',
      request: () => facts(csrPem, { ...evidenceA, pcrValues: evidenceA.pcrValues.map((v, i) => (i === 7 ? Buffer.alloc(32, 1) : v)) }),
      want: /refused \(pcr-digest: /,
    },
  ];
  for (const c of cases) {
    const raw = c.raw?.() ?? `tpm-ak: ${ak[0]}`;
    const problem = tpmAttestedProblem(entry(raw), await c.request(), c.at ?? created(), c.beacons ?? BEACONS);
    t.match(problem, c.want, c.what);
  }
});

t.test('the request parser takes exactly one evidence block after the request and nothing else', async (t) => {
  const block = evidencePem(evidenceA);
  const cases: [string, string][] = [
    ['two evidence blocks', `${csrPem.trimEnd()}\n${block}${block}`],
    ['another block type after the request', `${csrPem.trimEnd()}\n${block.replaceAll('KUBEBOOT TPM EVIDENCE', 'ATTESTATION DATA')}`],
    ['an evidence block with a header', `${csrPem.trimEnd()}\n${block.replace('-----\n', '-----\nProc-Type: 4,ENCRYPTED\n\n')}`],
    ['text after the evidence', `${csrPem.trimEnd()}\n${block}junk\n`],
    ['evidence before the request', `${block}${csrPem}`],
  ];
  for (const [what, pem] of cases) await t.rejects(requestFacts(base64(pem)), { message: /not exactly one PEM CERTIFICATE REQUEST/ }, what);
  t.same(splitCsrEvidence(`${csrPem.trimEnd()}\n${block}`), { request: csrPem.trimEnd(), evidence: marshalEvidence(evidenceA) });
  t.match(
    tpmAttestedProblem(
      entry(`tpm-ak: ${ak[0]}`),
      { binding: csrBinding(derOf(csrPem)), tpmEvidence: Buffer.from('KBTE') },
      created(),
      BEACONS,
    ),
    /refused \(format: /,
    'cut-short evidence bytes',
  );
});

t.test('approver CPU per CSR with evidence: one verification', async (t) => {
  const binding = csrBinding(derOf(csrPem));
  const bytes = marshalEvidence(evidenceA);
  const expect = { binding, akName: Buffer.from(ak[0]!, 'hex'), created: new Date(created()), beacons: BEACONS };
  const times: number[] = [];
  for (let i = 0; i < 200; i++) {
    const start = performance.now();
    verifyCsrEvidence(bytes, expect);
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  t.comment(`verifyCsrEvidence: median ${times[100]!.toFixed(3)} ms, p90 ${times[180]!.toFixed(3)} ms over 200`);
  t.throws(() => verifyCsrEvidence(bytes, { ...expect, akName: Buffer.from(ak[1]!, 'hex') }), EvidenceError);
});
