// Enrolment from the EK alone (issue 37, item 5): a name the inventory knows
// only by its TPM's EK hash is first answered with a credential challenge
// for that EK and the AK that quoted; the CSR that answers it (the
// credential, and a quote by that same AK) enrols the AK, once; from then
// on that AK, and only it, must quote. Through decide() with the cluster
// look-ups faked, and two real (software) TPMs.
import t from 'tap';
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { rmSync } from 'node:fs';
import { decideBatch, RecordView } from '../../../agent/approver/batch.js';
import type { ApproverCsr } from '../../../agent/approver/csr-facts.js';
import { decide, type Decision } from '../../../agent/approver/decide.js';
import type { Lookups } from '../../../agent/approver/lookups.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { tpmVerdict } from '../../../agent/approver/rules/tpm-attested.js';
import { rotatedBeacon } from '../../../agent/records/tpm-beacon.js';
import { pcr7Policies } from '../../../agent/tpm/pcr-policy.js';
import { requestFacts } from '../../../agent/approver/request.js';
import { generateKey } from '../../../agent/pki/keys.js';
import { pemBlocks } from '../../../agent/pki/pem.js';
import { createCsrPem } from '../../../agent/pki/pkcs10.js';
import { bindingRecord } from '../../../agent/records/bindings.js';
import { parseInventoryEntry, type InventoryEntry } from '../../../agent/records/inventory.js';
import { newRecord, type TpmEnrolmentObject } from '../../../agent/records/kinds.js';
import { CHALLENGE_TTL_SECONDS, MAX_CHALLENGES, withChallenge } from '../../../agent/records/tpm-enrolment.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { type IssueContext, issueCredential } from '../../../agent/credential/issue.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { silentLogger } from '../../../agent/log.js';
import { answerChallenge, CHALLENGE_REASON, challengeIn, challengeMessage, makeChallenge } from '../../../agent/tpm/challenge.js';
import { MockAgent } from 'undici';
import { FakeClock } from '../../support/fake-time.js';
import { memoryStore } from '../../support/memory-store.js';
import { TPM_ALG, TPM_ST } from '../../../agent/tpm/constants.js';
import {
  csrBinding,
  csrQualifyingData,
  evidencePem,
  marshalEvidence,
  quoteCsr,
  csrEvidenceBlock,
  unmarshalEvidence,
  windowOf,
  type CsrEvidence,
} from '../../../agent/tpm/csr-evidence.js';
import { withTpm } from '../../../agent/tpm/identify.js';
import { attestationKeyTemplate, withAttestationKey, withEndorsementKey } from '../../../agent/tpm/keys.js';
import { marshalAttest, unmarshalAttest, type EccPublic } from '../../../agent/tpm/structures.js';
import { ekPublicKeyHash, pcrDigest, primaryQualifiedName, tpmName } from '../../../agent/tpm/verify.js';
import { manufactureTpm, startSwtpm, type Swtpm } from '../../support/swtpm.js';
import { INVENTORY_KUBELET_CLIENT_POLICY } from '../../support/approver.js';

const T = '2026-12-03T18:00:10Z';
/** The approver's beacon every quote here binds (records/tpm-beacon.ts). */
const BEACON = randomBytes(32);
const later = (seconds: number) => new Date(Date.parse(T) + seconds * 1000).toISOString().replace('.000Z', 'Z');
const policy = INVENTORY_KUBELET_CLIENT_POLICY;

const tpms: Swtpm[] = [];
const at = (i: number) => ({ swtpmTcp: tpms[i]!.address });
let ekHashA = '';

t.before(async () => {
  const [one, two] = await Promise.all([manufactureTpm(), manufactureTpm()]);
  tpms.push(await startSwtpm(one), await startSwtpm(two));
  ekHashA = ekPublicKeyHash((await quotedCsr(0)).evidence.ekPublic!);
});
t.teardown(async () => {
  for (const sw of tpms) {
    await sw.stop();
    rmSync(sw.dir, { recursive: true, force: true });
  }
});

/** A worker-1 CSR with a fresh key, quoted by TPM `i` (with `answer` when it answers a challenge), or by `forge`. */
async function quotedCsr(i: number, answer?: Buffer, forge?: (der: Uint8Array) => CsrEvidence, when = T) {
  const key = await generateKey('ecdsa-p256');
  const pem = await createCsrPem({ key, subject: { commonName: 'system:node:worker-1', organizations: ['system:nodes'] } });
  const der = pemBlocks(pem)[0]!.der;
  const evidence = forge?.(der) ?? (await withTpm(at(i), (tpm) => quoteCsr(tpm, der, new Date(when), BEACON, answer)));
  return { pem: `${pem.trimEnd()}\n${evidencePem(evidence)}`, evidence };
}

let csrs = 0;
function csrObject(pem: string, created = T, username = 'system:bootstrap:abcdef'): ApproverCsr {
  csrs++;
  return {
    metadata: { name: `node-csr-${csrs}`, uid: `uid-${csrs}`, creationTimestamp: created },
    spec: {
      request: Buffer.from(pem).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      usages: ['digital signature', 'client auth'],
      username,
      groups: username.startsWith('system:node:') ? ['system:nodes'] : ['system:bootstrappers'],
    },
  };
}

/** The records as the informers would have them: the pool's binding, the inventory entry, the name's TpmEnrolment. */
function lookups(entry: string, enrolment: TpmEnrolmentObject | null): Lookups {
  const made = bindingRecord('abcdef', { prefix: 'worker-', maxNodes: 5 }, 'secret-uid');
  const records: Record<string, unknown> = {
    'tokenbindings/abcdef': { ...made, metadata: { ...made.metadata, resourceVersion: '3' } },
    'inventories/inventory': {
      ...newRecord('inventories', 'inventory', { spec: { nodes: { 'worker-1': entry } } }),
      metadata: { name: 'inventory', resourceVersion: '4' },
    },
    'tpmenrolments/worker-1': enrolment,
    'tpmbeacons/kubeboot': rotatedBeacon(null, BEACON, new Date(T)),
  };
  return {
    node: async () => null,
    allowed: async () => true,
    sameRequester: () => [],
    apiServer: async () => ({ names: ['api.example'], ips: ['10.96.0.1'] }),
    // biome-ignore lint/suspicious/noExplicitAny: a fake store answers any record
    record: async (resource, name) => (records[`${resource}/${name}`] ?? null) as any,
    legacy: async () => null,
  };
}

/** The TpmEnrolment a decision's claims write, as the API server would store it (at resourceVersion `rv`). */
function written(d: Decision, rv: string): TpmEnrolmentObject {
  const claim = 'claims' in d ? d.claims.find((c) => c.resource === 'tpmenrolments') : undefined;
  if (claim === undefined || !('object' in claim)) throw new Error(`no TpmEnrolment claim in ${d.kind}`);
  const object = claim.object as TpmEnrolmentObject;
  return { ...object, metadata: { ...object.metadata, resourceVersion: rv } };
}

t.test('an EK-only name: challenged, answered by its TPM, its AK enrolled once, and only that AK quotes from then on', async (t) => {
  const entry = `tpm-ek: ${ekHashA}`;
  const first = await quotedCsr(0);
  const challenged = await decide(csrObject(first.pem), policy, lookups(entry, null));
  t.equal(challenged.kind, 'challenge', 'the first CSR is challenged');
  if (challenged.kind !== 'challenge') return;
  t.match(
    challenged.message,
    /^kubelet-client rule tpm-attested: node worker-1 is enrolled by its TPM's EK alone .* its AK 000b[0-9a-f]{8}… is not enrolled yet: this CSR is denied with a credential challenge .* kubeboot-tpm-challenge:[A-Za-z0-9+/=]+$/,
  );
  t.ok(challenged.message.length < 1024, `the Denied message is ${challenged.message.length} characters`);
  t.same(
    challenged.claims.map((c) => [c.op, c.resource, c.name]),
    [['create', 'tpmenrolments', 'worker-1']],
    'the challenge is kept before the CSR is denied; nothing of the token is spent',
  );
  const record = written(challenged, '10');
  t.equal(record.spec?.ekHash, ekHashA);
  t.equal(record.spec?.akName, undefined, 'no AK enrolled by a challenge');
  t.same(
    record.spec?.challenges?.map((c) => [c.akName, c.at]),
    [[tpmName(first.evidence.akPublic).toString('hex'), T]],
  );

  const blob = challengeIn(challenged.message)!;
  await t.rejects(
    withTpm(at(1), (tpm) => answerChallenge(tpm, blob)),
    'the other TPM cannot open it',
  );
  const credential = await withTpm(at(0), (tpm) => answerChallenge(tpm, blob));

  const other = await quotedCsr(1, credential);
  const stolen = await decide(csrObject(other.pem, later(5)), policy, lookups(entry, record));
  t.match(
    stolen.kind === 'violation' ? stolen.message : stolen.kind,
    /the evidence's EK is [0-9a-f]{12}…, not node worker-1's enrolled/,
    'the credential with the other TPM is refused: another EK',
  );

  const answer = await quotedCsr(0, credential);
  const enrolled = await decide(csrObject(answer.pem, later(5)), policy, lookups(entry, record));
  t.equal(enrolled.kind, 'approve', 'the answering CSR is approved');
  if (enrolled.kind !== 'approve') return;
  t.same(
    enrolled.claims.map((c) => [c.op, c.resource]),
    [
      ['status', 'tokenbindings'],
      ['create', 'nodeclaims'],
      ['replace', 'tpmenrolments'],
    ],
    'the name is spent and the AK enrolled, on the version read',
  );
  t.match(
    enrolled.message,
    `; its TPM quoted SHA-256 PCRs ${answer.evidence.pcrValues.map((v, i) => `${i}=${v.toString('hex')}`).join(' ')}`,
    'the approval reports the PCRs 0-7 the quote covers',
  );
  t.same(enrolled.pcrValues, answer.evidence.pcrValues, 'and hands them to the metric');
  const after = written(enrolled, '11');
  t.match(after.spec, {
    ekHash: ekHashA,
    akName: tpmName(answer.evidence.akPublic).toString('hex'),
    csrUID: `uid-${csrs}`,
    challenges: [],
  });

  const renewal = await quotedCsr(0);
  const renewed = await decide(csrObject(renewal.pem, later(60), 'system:node:worker-1'), policy, lookups(entry, after));
  t.equal(renewed.kind, 'approve', 'renewal with a quote by the enrolled AK');
  t.same(renewed.kind === 'approve' ? renewed.claims : null, [], 'nothing written at renewal');
  t.match(
    renewed.kind === 'approve' ? renewed.message : '',
    / its TPM quoted SHA-256 PCRs 0=[0-9a-f]{64} .* 7=[0-9a-f]{64}$/,
    'a renewal reports them too',
  );
  const bare = await quotedCsr(1);
  const refused = await decide(csrObject(bare.pem, later(60), 'system:node:worker-1'), policy, lookups(`tpm-ek: ${ekHashA}`, after));
  t.match(
    refused.kind === 'violation' ? refused.message : refused.kind,
    /ak-name: .*its AK was enrolled from its EK: tpmenrolments\.kubeboot\.io\/worker-1/,
  );
  const again = await decide(csrObject((await quotedCsr(0, credential)).pem, later(30)), policy, lookups(entry, after));
  t.equal(again.kind, 'approve', 'one-shot: the same answer again is just a quote by the enrolled AK');
  t.same(again.kind === 'approve' ? again.claims.filter((c) => c.resource === 'tpmenrolments') : null, [], 'and enrols nothing again');

  const stale = await decide(csrObject(renewal.pem, later(60)), policy, lookups(`tpm-ek: ${'ab'.repeat(32)}`, after));
  t.match(
    stale.kind === 'violation' ? stale.message : stale.kind,
    /the evidence's EK is .* not node worker-1's enrolled abababababab/,
    'a new tpm-ek leaves the old enrolment unread',
  );
});

t.test('what does not enrol: a wrong or late answer, an answer quoted by another AK, a software AK', async (t) => {
  const entry = `tpm-ek: ${ekHashA}`;
  const first = await quotedCsr(0);
  const challenged = await decide(csrObject(first.pem), policy, lookups(entry, null));
  const record = written(challenged, '20');
  const credential = await withTpm(at(0), (tpm) => answerChallenge(tpm, challengeIn((challenged as { message: string }).message)!));

  const guessed = await decide(csrObject((await quotedCsr(0, Buffer.alloc(32, 7))).pem, later(5)), policy, lookups(entry, record));
  t.equal(guessed.kind, 'challenge', 'a guessed credential: challenged again, nothing enrolled');
  t.match((guessed as { message: string }).message, /the credential answered is none sent for AK/);
  t.equal(written(guessed, '21').spec?.challenges?.length, 1, "the AK's earlier challenge replaced by the new one");

  const late = await decide(
    csrObject((await quotedCsr(0, credential, undefined, later(CHALLENGE_TTL_SECONDS + 5))).pem, later(CHALLENGE_TTL_SECONDS + 5)),
    policy,
    lookups(entry, record),
  );
  t.equal(late.kind, 'challenge', `an answer more than ${CHALLENGE_TTL_SECONDS}s after the challenge: challenged again`);

  // A software "AK" with the right EK public: its quote verifies (it signs what it likes), so it is challenged,
  // and the challenge opens only in the TPM holding that EK, with an object of that very name loaded.
  const soft = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = soft.publicKey.export({ format: 'jwk' });
  const akPublic: EccPublic = { ...attestationKeyTemplate(), x: Buffer.from(jwk.x!, 'base64url'), y: Buffer.from(jwk.y!, 'base64url') };
  const forge =
    (answer?: Buffer) =>
    (der: Uint8Array): CsrEvidence => {
      const genuine = first.evidence;
      const attest = unmarshalAttest(genuine.attest);
      const window = windowOf(new Date(T));
      const bytes = marshalAttest({
        ...attest,
        type: TPM_ST.ATTEST_QUOTE,
        qualifiedSigner: primaryQualifiedName(tpmName(akPublic)),
        extraData: csrQualifyingData(csrBinding(der), window, BEACON),
        quote: { pcrSelect: attest.quote!.pcrSelect, pcrDigest: pcrDigest(genuine.pcrValues) },
      });
      const sig = sign('sha256', bytes, { key: soft.privateKey, dsaEncoding: 'ieee-p1363' });
      return {
        ...genuine,
        window,
        akPublic,
        attest: bytes,
        signature: { alg: TPM_ALG.ECDSA, hash: TPM_ALG.SHA256, r: sig.subarray(0, 32), s: sig.subarray(32) },
        ...(answer ? { credential: answer } : {}),
      };
    };
  const software = await quotedCsr(0, undefined, forge());
  const softChallenge = await decide(csrObject(software.pem, later(10)), policy, lookups(entry, record));
  t.equal(softChallenge.kind, 'challenge', 'a software AK with the right EK public is only challenged');
  await t.rejects(
    withTpm(at(0), (tpm) => answerChallenge(tpm, challengeIn((softChallenge as { message: string }).message)!)),
    'the genuine TPM does not open a challenge made for another AK name',
  );
  const withSoft = written(softChallenge, '22');
  t.equal(withSoft.spec?.challenges?.length, 2, "kept beside the genuine AK's challenge: it locks nothing");
  const stolenAnswer = await decide(
    csrObject((await quotedCsr(0, undefined, forge(credential))).pem, later(15)),
    policy,
    lookups(entry, withSoft),
  );
  t.equal(
    stolenAnswer.kind,
    'challenge',
    "the genuine AK's credential, quoted by the software AK: not an answer (the AK that quotes is the AK activated)",
  );
  const genuine = await decide(csrObject((await quotedCsr(0, credential)).pem, later(20)), policy, lookups(entry, withSoft));
  t.equal(genuine.kind, 'approve', 'the genuine machine still enrols after all of that');
});

t.test('a name keeps at most MAX_CHALLENGES challenges, the oldest dropped, the expired ones first', async (t) => {
  const c = (i: number, seconds: number) => ({
    akName: `000b${String(i).padStart(64, '0')}`,
    digest: 'd'.repeat(64),
    csrUid: `u${i}`,
    at: later(seconds),
  });
  let object: TpmEnrolmentObject | null = null;
  for (let i = 0; i < MAX_CHALLENGES + 3; i++) {
    const current =
      object === null
        ? null
        : {
            ekHash: ekHashA,
            akName: null,
            enrolledBy: null,
            challenges: (object.spec?.challenges ?? []).map((e) => ({
              akName: e.akName!,
              digest: e.digest!,
              csrUid: e.csrUID!,
              at: e.at!,
            })),
          };
    object = withChallenge('worker-1', object, current, ekHashA, c(i, i));
  }
  t.same(
    object?.spec?.challenges?.map((e) => e.csrUID),
    ['u3', 'u4', 'u5', 'u6', 'u7', 'u8', 'u9', 'u10'],
  );
  const current = {
    ekHash: ekHashA,
    akName: null,
    enrolledBy: null,
    challenges: (object?.spec?.challenges ?? []).map((e) => ({ akName: e.akName!, digest: e.digest!, csrUid: e.csrUID!, at: e.at! })),
  };
  const after = withChallenge('worker-1', object, current, ekHashA, c(99, CHALLENGE_TTL_SECONDS + 6));
  t.same(
    after.spec?.challenges?.map((e) => e.csrUID),
    ['u6', 'u7', 'u8', 'u9', 'u10', 'u99'],
    'those past their time dropped',
  );
});

t.test('tpmVerdict: evidence without the EK (kubeboot before enrolment from the EK) is refused, the way out named', async (t) => {
  const key = await generateKey('ecdsa-p256');
  const pem = await createCsrPem({ key, subject: { commonName: 'system:node:worker-1', organizations: ['system:nodes'] } });
  const evidence = await withTpm(at(0), (tpm) => quoteCsr(tpm, pemBlocks(pem)[0]!.der, new Date(T), BEACON));
  const { ekPublic: _, ...v1 } = evidence;
  const facts = await requestFacts(Buffer.from(`${pem.trimEnd()}\n${evidencePem(v1)}`).toString('base64'));
  const verdict = tpmVerdict(parseInventoryEntry('worker-1', `tpm-ek: ${ekHashA}`) as InventoryEntry, facts, T, [BEACON], null);
  t.match(verdict, { kind: 'refuse', problem: /carries no EK to challenge .*\(kubeboot node enroll worker-1 --tpm-ak …\)/ });
  t.ok(makeChallenge(evidence.ekPublic!, tpmName(evidence.akPublic)).digest.match(/^[0-9a-f]{64}$/));
});

t.test('two challenges for one name in one batch are one write: the later carries the earlier, as one create', async (t) => {
  const entry = `tpm-ek: ${ekHashA}`;
  const io = lookups(entry, null);
  const view = new RecordView(io.record);
  const genuine = await quotedCsr(0);
  const other = await quotedCsr(0);
  const outcomes = await decideBatch([csrObject(genuine.pem), csrObject(other.pem, later(1))], policy, io, view);
  t.same(
    outcomes.map((o) => ('decision' in o ? o.decision.kind : o.error.message)),
    ['challenge', 'challenge'],
  );
  const claims = view.claims();
  t.equal(claims.length, 1, 'one claim on the record');
  t.match(claims[0], { op: 'create', resource: 'tpmenrolments', name: 'worker-1' });
  const written = claims[0] && 'object' in claims[0] ? (claims[0].object as TpmEnrolmentObject) : null;
  t.same(
    written?.spec?.challenges?.map((c) => c.csrUID),
    [`uid-${csrs}`],
    'the same AK challenged twice keeps its newest challenge only',
  );
});

t.test('evidence of versions 1 and 2 (before enrolment from the EK, before beacons) still reads', async (t) => {
  const { evidence } = await quotedCsr(0, Buffer.alloc(32, 1));
  const v3 = unmarshalEvidence(marshalEvidence(evidence));
  t.same(v3.credential, Buffer.alloc(32, 1), 'version 3 carries the credential');
  t.same(v3.beacon, BEACON, 'and the beacon');
  const v2 = Buffer.from(marshalEvidence({ ...evidence, beacon: undefined }).subarray(0, -2));
  v2.writeUInt16BE(2, 4);
  const read2 = unmarshalEvidence(v2);
  t.equal(read2.beacon, undefined, 'version 2: no beacon');
  t.same(read2.ekPublic, evidence.ekPublic, 'version 2: the EK');
  const v1 = Buffer.from(marshalEvidence({ ...evidence, ekPublic: undefined, credential: undefined, beacon: undefined }).subarray(0, -6));
  v1.writeUInt16BE(1, 4);
  const read = unmarshalEvidence(v1);
  t.equal(read.ekPublic, undefined);
  t.equal(read.credential, undefined);
  t.same(read.akPublic, evidence.akPublic);
  const extra = Buffer.concat([v1, Buffer.alloc(4)]);
  t.throws(() => unmarshalEvidence(extra), /bytes left over/, 'a version 1 block with the version 2 fields is refused');
});

t.test(
  'kubeboot answers one challenge: a new CSR with a fresh key carries the credential and a quote; a second challenge is a refusal',
  async (t) => {
    const SERVER = 'https://api.test:6443';
    const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
    const kubelet = identitiesFor(defaultConfig('worker-1'))[0]!;
    const { ekPublic, akName } = await withTpm(at(0), async (tpm) => ({
      ekPublic: await withEndorsementKey(tpm, async (ek) => ek.public),
      akName: await withAttestationKey(tpm, async (ak) => tpmName(ak.public)),
    }));
    // A known credential (32 bytes of 9), as the approver would make a random one.
    const made = makeChallenge(ekPublic, akName, (n) => Buffer.alloc(n, 9));
    const message = challengeMessage('kubelet-client rule tpm-attested: …', made.blob);
    const agent = new MockAgent();
    agent.disableNetConnect();
    t.teardown(() => agent.close());
    const pool = agent.get(SERVER);
    const created: { name: string; request: string }[] = [];
    pool
      .intercept({ path: CSRS, method: 'POST' })
      .reply((req) => {
        const body = JSON.parse(String(req.body));
        created.push({ name: body.metadata.name, request: Buffer.from(body.spec.request, 'base64').toString() });
        return {
          statusCode: 201,
          data: { kind: 'CertificateSigningRequest', metadata: { name: body.metadata.name, uid: 'uid-1' }, spec: body.spec },
        };
      })
      .times(3);
    pool
      .intercept({ path: '/apis/kubeboot.io/v1alpha1/tpmbeacons/kubeboot', method: 'GET' })
      .reply(200, rotatedBeacon(null, BEACON, new Date(T)))
      .times(3);
    pool
      .intercept({ path: (p) => p.startsWith(`${CSRS}?`), method: 'GET' })
      .reply(() => ({
        statusCode: 200,
        data: {
          metadata: { resourceVersion: '6' },
          items: [
            {
              metadata: { name: created.at(-1)?.name, uid: 'uid-1' },
              spec: { request: '', signerName: kubelet.signerName },
              status: { conditions: [{ type: 'Denied', status: 'True', reason: CHALLENGE_REASON, message }] },
            },
          ],
        },
      }))
      .times(3);
    const cluster = { server: SERVER, caPem: '', tlsServerName: null };
    const ctx: IssueContext = {
      logger: silentLogger(),
      clock: new FakeClock(new Date(T)),
      store: memoryStore(),
      dispatcher: agent,
      cluster,
      requester: new KubeClient(cluster, { kind: 'token', token: 'abcdef.0123456789abcdef' }, agent),
      stateDir: '/var/lib/kubeboot',
      keyAlgorithm: 'ecdsa-p256',
      expirationSeconds: null,
      reuseKeyPem: null,
      waitTimeoutMs: 60_000,
      pendingNoticeMs: 600_000,
      tpm: at(0),
    };
    await t.rejects(
      issueCredential(kubelet, ctx),
      { name: 'CsrRejectedError', message: /was denied: KubebootTpmChallenge/ },
      'a second challenge is a refusal',
    );
    t.equal(created.length, 2, 'one round: the challenged CSR and the answer, no third');
    t.not(created[0]?.name, created[1]?.name, 'the answer is a new CSR, with a fresh key');
    const evidenceOf = (pem: string) => unmarshalEvidence(csrEvidenceBlock(pem)!);
    const [first, answer] = created.map((c) => evidenceOf(c.request));
    t.equal(first?.credential, undefined, 'the first CSR carries no credential');
    t.same(first?.ekPublic, ekPublic, 'and the EK, for the approver to challenge');
    t.same(answer?.credential, Buffer.alloc(32, 9), 'the answer carries the credential the TPM opened');
    t.same(tpmName(answer!.akPublic), akName, 'quoted by the same AK');
    t.same([first?.beacon, answer?.beacon], [BEACON, BEACON], 'each quote binds the beacon the node read before it');
  },
);

t.test(
  '--tpm-pcr7: a TPM-bound name is issued only on a quote of a PCR 7 its pool allows (the longest prefix), before any challenge',
  async (t) => {
    const { pem, evidence } = await quotedCsr(0);
    const pcr7 = evidence.pcrValues[7]!.toString('hex');
    const ak = tpmName(evidence.akPublic).toString('hex');
    const withPolicy = (...flags: string[]): ApproverPolicy => ({ ...policy, tpmPcr7: pcr7Policies(flags) });
    const other = 'ab'.repeat(32);
    const renewal = () => csrObject(pem, T, 'system:node:worker-1');

    const allowed = await decide(renewal(), withPolicy(`worker-=${other}`, `worker-1=${pcr7}`), lookups(`tpm-ak: ${ak}`, null));
    t.equal(allowed.kind, 'approve', 'PCR 7 as its own prefix allows: approved');
    const refused = await decide(renewal(), withPolicy(`worker-=${other}`, `worker-1x=${pcr7}`), lookups(`tpm-ak: ${ak}`, null));
    t.match(
      refused.kind === 'violation' ? refused.message : refused.kind,
      `kubelet-client rule tpm-attested: node worker-1 quoted PCR 7 ${pcr7}, which --tpm-pcr7 does not allow for names "worker-*"`,
      'another pool value: refused, the rule and the pool named',
    );
    const unbound = await decide(renewal(), withPolicy(`=${other}`), lookups('', null));
    t.equal(unbound.kind, 'approve', 'a name with no TPM identity is never asked for PCRs');

    const ekOnly = await decide(csrObject(pem), withPolicy(`worker-=${other}`), lookups(`tpm-ek: ${ekHashA}`, null));
    t.equal(ekOnly.kind, 'violation', 'enrolment from the EK: a quote outside the policy is refused, not challenged');
  },
);
