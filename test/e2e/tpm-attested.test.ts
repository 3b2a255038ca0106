// A node's identity from its TPM, on a real control plane (issue 37): two
// machines with two software TPMs and ONE pool token. The admin enrolls
// machine A's AK for worker-1 (`kubeboot node enroll`); A joins as
// worker-1 with `kubeboot bootstrap --tpm`, and renews with a fresh quote.
// With the same pool token, the other TPM, no TPM, or A's evidence copied
// onto a CSR with another key are refused for worker-1, the rule named in
// the approver's Event; so is a renewal without evidence, as the kubelet's
// own rotateCertificates would file it. Then enrolment from the EK alone:
// worker-2 is known by machine B's EK hash only; A cannot take it (its own
// EK; B's EK public with A's AK is challenged and A's TPM cannot open the
// challenge; a guessed answer is challenged again), B joins through one
// challenge round, its AK is recorded, and only that AK renews. Every quote
// binds the approver's beacon: one made ahead of time, over a beacon the
// leader has since replaced, is refused.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { pemBlocks } from '../../agent/pki/pem.js';
import { recordsPath } from '../../agent/records/kinds.js';
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import { answerChallenge, CHALLENGE_REASON, challengeIn } from '../../agent/tpm/challenge.js';
import { evidencePem, quoteCsr, type CsrEvidence } from '../../agent/tpm/csr-evidence.js';
import { identify, withTpm } from '../../agent/tpm/identify.js';
import { withEndorsementKey } from '../../agent/tpm/keys.js';
import type { KubeObject } from '../support/admin.js';
import {
  approvals,
  craftCsrPem,
  csrEvents,
  dropKcmAutoApproval,
  installApprover,
  nodeClient,
  startApprover,
  submitCsr,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { kubeClient, type KubeClient } from '../support/http.js';
import { forbid, kubeboot, nodeLayout } from '../support/kubeboot.js';
import { manufactureTpm, startSwtpm, tpm2, type Swtpm } from '../support/swtpm.js';

const KUBELET_CLIENT = {
  signer: 'kubernetes.io/kube-apiserver-client-kubelet',
  usages: ['digital signature', 'client auth'],
  o: ['system:nodes'],
};

const plane = await controlPlaneOrSkip(t, { name: 'tpm-attested' });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-tpm-attested-'));
  const tpms: Swtpm[] = [];
  const clients: KubeClient[] = [];
  t.teardown(async () => {
    await Promise.all(clients.map((c) => c.close()));
    for (const sw of tpms) await sw.stop();
    await rm(dir, { recursive: true, force: true });
  });
  const config = await installApprover(plane, dir);
  await dropKcmAutoApproval(plane);
  const [madeA, madeB] = await Promise.all([manufactureTpm(), manufactureTpm()]);
  tpms.push(await startSwtpm(madeA!), await startSwtpm(madeB!));
  const [a, b] = tpms as [Swtpm, Swtpm];
  for (const sw of tpms) t.teardown(() => rm(sw.dir, { recursive: true, force: true }));

  const APPROVER_FLAGS = ['--approve-kubelet-client', '--inventory', '--resync-period', '10m'];
  let approver = startApprover(config, APPROVER_FLAGS);
  t.teardown(async () => {
    approver.child.kill('SIGTERM');
    await approver.done;
  });
  await approver.waitForOutput(/became the leader/, 60_000);

  // One pool token for every machine, as a pool's user-data hands it out.
  const token = await plane.admin.createBootstrapToken({ bind: { prefix: 'worker-', maxNodes: 5 } });
  forbid(token.secret);
  const pool = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
  clients.push(pool);

  const csrOf = async (name: string) => (await plane.admin.getCsr(name)) as KubeObject;
  const refused = async (name: string, rule: string) => {
    const event = await plane.admin.waitFor(`Event on ${name} naming ${rule}`, async () =>
      (await csrEvents(plane, name)).find((e) => e.message.includes(` rule ${rule}:`)),
    );
    return { message: event.message, conditions: ((await csrOf(name))?.status?.conditions ?? []) as KubeObject[] };
  };
  /** A worker-1 CSR with a fresh key, its request followed by `evidence` (a PEM block) when given. */
  const worker1Csr = async (evidence?: (der: Uint8Array) => Promise<string> | string) => {
    const pem = await craftCsrPem({ cn: 'system:node:worker-1', o: ['system:nodes'] });
    return evidence === undefined ? pem : `${pem.trimEnd()}\n${await evidence(pemBlocks(pem)[0]!.der)}`;
  };
  const beaconPath = `${recordsPath('tpmbeacons')}/kubeboot`;
  /** The approver's beacon record as the API server has it, or undefined. */
  const beaconRecord = async () => {
    const res = await plane.admin.request<KubeObject>('GET', beaconPath);
    return res.status === 200 ? res.body : undefined;
  };
  /** The newest beacon, as a node reads it before it quotes. */
  const beacon = async () => Buffer.from((await plane.admin.waitFor('the beacon', beaconRecord)).spec.beacons[0].value, 'base64');
  /** A quote of `der` by `sw` now, over the current beacon. */
  const quoteNow = async (sw: Swtpm, der: Uint8Array) => {
    const current = await beacon();
    return withTpm({ swtpmTcp: sw.address }, (tpm) => quoteCsr(tpm, der, new Date(), current));
  };
  const node = await nodeLayout(join(dir, 'machine-a'), 'worker-1', { tpm: `swtpm:${a.address}` });
  let firstCsr = '';
  /** Whole-process bootstrap times: with an admin-enrolled AK, and with the EK alone (one challenge round more). */
  const joinMs = { enrolledAk: 0, fromEk: 0 };

  t.test("the admin enrolls machine A's TPM for worker-1; A joins with the pool token and a quote", async (t) => {
    const idA = await withTpm({ swtpmTcp: a.address }, (tpm) => identify(tpm, new Date()));
    const enrolled = await kubeboot(t, ['node', 'enroll', 'worker-1', '--tpm-ek', idA.ekHash, '--tpm-ak', idA.akName], {
      KUBECONFIG: plane.adminKubeconfig,
    });
    t.equal(enrolled.code, 0, `node enroll exits 0\n${enrolled.stderr}`);
    t.match(enrolled.stdout, `node worker-1 enrolled in inventories.kubeboot.io/inventory: tpm-ak ${idA.akName}`);
    const inventory = await plane.admin.request<KubeObject>('GET', `${recordsPath('inventories')}/inventory`);
    t.match(inventory.body.spec.nodes['worker-1'], `tpm-ak: ${idA.akName}`, 'the inventory holds the AK');
    await approver.waitForOutput(/record seen: inventories\.kubeboot\.io\/inventory/, 30_000);

    await plane.writeBootstrapKubeconfig(node.bootstrapKubeconfig, token.token, { ca: 'data' });
    const began = performance.now();
    const joined = await kubeboot(t, ['bootstrap', '--config', node.config]);
    joinMs.enrolledAk = performance.now() - began;
    t.equal(joined.code, 0, `bootstrap exits 0\n${joined.stderr}`);
    const csrs = await plane.admin.request<{ items: KubeObject[] }>('GET', '/apis/certificates.k8s.io/v1/certificatesigningrequests');
    const mine = csrs.body.items.find((c) => c.spec.username === `system:bootstrap:${token.id}`);
    firstCsr = Buffer.from(mine?.spec.request ?? '', 'base64').toString();
    t.match(firstCsr, /-----END CERTIFICATE REQUEST-----\n-----BEGIN KUBEBOOT TPM EVIDENCE-----\n/, 'the CSR carries the evidence block');
    t.match(approvals(mine ?? null)[0]?.message, /tpm-attested/, 'approved with tpm-attested among the rules passed');
    // tpm2-tools is the oracle for the PCR the approval reports (secure-boot state; swtpm's is its reset value).
    const pcr7 = /\b7\s*:\s*0x([0-9A-Fa-f]{64})/.exec(await tpm2(a, 'tpm2_pcrread', ['sha256:7']))?.[1]?.toLowerCase();
    t.match(
      approvals(mine ?? null)[0]?.message,
      new RegExp(`; its TPM quoted SHA-256 PCRs 0=[0-9a-f]{64} .*7=${pcr7}$`),
      'the approval reports the quoted PCRs, PCR 7 as tpm2_pcrread reads it',
    );

    const listed = await kubeboot(t, ['node', 'list'], { KUBECONFIG: plane.adminKubeconfig });
    t.match(listed.stdout, new RegExp(`worker-1 .* tpm-ak ${idA.akName.slice(0, 16)}…`), 'node list shows the enrolment');
  });

  t.test('with the same pool token, worker-1 is refused to the other TPM, to no TPM, and to copied evidence', async (t) => {
    const otherTpm = await refused(
      await submitCsr(pool, {
        ...KUBELET_CLIENT,
        cn: 'unused',
        name: 'other-tpm',
        pem: await worker1Csr(async (der) => evidencePem(await quoteNow(b, der))),
      }),
      'tpm-attested',
    );
    t.match(otherTpm.message, /the TPM evidence is refused \(ak-name: the AK is 000b[0-9a-f]{64}, not the enrolled /);
    t.same(otherTpm.conditions, [], 'left pending, no condition');

    const noTpm = await refused(
      await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'unused', name: 'no-tpm', pem: await worker1Csr() }),
      'tpm-attested',
    );
    t.match(
      noTpm.message,
      'node worker-1 is TPM-bound (inventories.kubeboot.io/inventory key worker-1: tpm-ak) and this CSR carries no KUBEBOOT TPM EVIDENCE',
    );

    const block = firstCsr.slice(firstCsr.indexOf('-----BEGIN KUBEBOOT TPM EVIDENCE-----'));
    const copied = await refused(
      await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'unused', name: 'copied', pem: await worker1Csr(() => block) }),
      'tpm-attested',
    );
    t.match(copied.message, 'the TPM evidence is refused (nonce: the quote is over other qualifying data)', "A's evidence on another key");
  });

  t.test('a quote made ahead of time on machine A is refused once the leader has replaced the beacon it binds', async (t) => {
    const published = await plane.admin.waitFor('the leader to publish the beacon', beaconRecord);
    t.ok([1, 2].includes(published.spec.beacons.length), 'the leader publishes one beacon, or the current and the previous');
    t.match(published.spec.beacons[0].value, /^[A-Za-z0-9+/]{43}=$/, '32 bytes of base64');
    // Root on machine A, now: a CSR for worker-1 with its own key, quoted by A's enrolled AK, kept for later.
    const ahead = await worker1Csr(async (der) => evidencePem(await quoteNow(a, der)));
    // The admin deletes the record; the leader publishes a fresh beacon at once, and keeps none of the old.
    const del = await plane.admin.request('DELETE', beaconPath);
    t.equal(del.status, 200, 'the admin may delete the beacon record');
    const fresh = await plane.admin.waitFor('a fresh beacon', async () => {
      const r = await beaconRecord();
      return r !== undefined && r.metadata.uid !== published.metadata.uid ? r : undefined;
    });
    t.equal(fresh.spec.beacons.length, 1, 'a record made anew holds only the new beacon');
    t.not(fresh.spec.beacons[0].value, published.spec.beacons[0].value, 'the new beacon is not the old one');
    const late = await refused(await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'unused', name: 'made-ahead', pem: ahead }), 'tpm-attested');
    t.match(
      late.message,
      /the TPM evidence is refused \(beacon: the quote binds a beacon that is neither the approver's current nor its previous one/,
      'the quote made over the retired beacon is refused, the check named',
    );
    // The same machine quoting now, over the beacon it reads now, passes tpm-attested (worker-1 is spent: refused by the name's rule instead).
    const now = await submitCsr(pool, {
      ...KUBELET_CLIENT,
      cn: 'unused',
      name: 'quoted-now',
      pem: await worker1Csr(async (der) => evidencePem(await quoteNow(a, der))),
    });
    const decided = await plane.admin.waitFor(`an Event on ${now}`, async () => (await csrEvents(plane, now))[0]);
    t.notMatch(decided.message, / rule tpm-attested:/, 'a quote over the current beacon is not refused by tpm-attested');
  });

  t.test('renewal: kubeboot renews with a fresh quote; a renewal without evidence (the kubelet rotating itself) is refused', async (t) => {
    const renewed = await kubeboot(t, ['renew', '--config', node.config]);
    t.equal(renewed.code, 0, `renew exits 0\n${renewed.stderr}`);
    const csrs = await plane.admin.request<{ items: KubeObject[] }>('GET', '/apis/certificates.k8s.io/v1/certificatesigningrequests');
    const renewal = csrs.body.items.find((c) => c.spec.username === 'system:node:worker-1' && approvals(c).length > 0);
    t.ok(renewal, 'a renewal CSR by system:node:worker-1 was approved');
    const request = Buffer.from(renewal?.spec.request ?? '', 'base64').toString();
    t.match(request, 'KUBEBOOT TPM EVIDENCE', 'with its own evidence');
    t.not(request, firstCsr, 'a fresh quote over a fresh request');
    t.match(approvals(renewal ?? null)[0]?.message, /tpm-attested.*kubebootselfnodeclient/);

    const self = await nodeClient(plane, 'worker-1');
    clients.push(self);
    const bare = await refused(await submitCsr(self, { ...KUBELET_CLIENT, cn: 'system:node:worker-1', name: 'rotate' }), 'tpm-attested');
    t.match(
      bare.message,
      "carries no KUBEBOOT TPM EVIDENCE: only kubeboot with --tpm on that machine files such CSRs (the kubelet's own rotateCertificates CSRs carry none",
    );
    t.notMatch(approver.output(), 'could not decide on CSR', 'no decision failed');
  });

  t.test('check and status say so when the kubelet would renew its own client certificate on a TPM-bound node', async (t) => {
    const quiet = await kubeboot(t, ['check', '--config', node.config]);
    t.equal(quiet.code, 0, `check passes while kubeboot renews\n${quiet.stdout}${quiet.stderr}`);
    t.match(quiet.stdout, /^ok {3}TPM: swtpm at 127\.0\.0\.1:\d+ \(testing only\): kubelet client CSRs carry a quote by AK 000b/m);
    await writeFile(join(node.dir, 'kubelet-config.yaml'), 'kind: KubeletConfiguration\nrotateCertificates: true\n');
    const checked = await kubeboot(t, ['check', '--config', node.config]);
    t.equal(checked.code, 2, 'check fails: exit 2, a configuration to fix');
    t.match(
      checked.stdout,
      /^FAIL kubelet renewal: --tpm is swtpm:.*, but the kubelet renews its own client certificate .*\(rule tpm-attested\)/m,
    );
    const status = await kubeboot(t, ['status', '--config', node.config]);
    t.match(status.stdout, /warning: +--tpm is swtpm:.*refuses them for a TPM-enrolled name \(rule tpm-attested\)/);
  });

  t.test(
    'enrolment from the EK alone: worker-2 joins through one challenge round, its AK recorded; the other machine cannot take it',
    async (t) => {
      const idB = await withTpm({ swtpmTcp: b.address }, (tpm) => identify(tpm, new Date()));
      const enrolled = await kubeboot(t, ['node', 'enroll', 'worker-2', '--tpm-ek', idB.ekHash], { KUBECONFIG: plane.adminKubeconfig });
      t.equal(enrolled.code, 0, `node enroll exits 0\n${enrolled.stderr}`);
      const listedBefore = await kubeboot(t, ['node', 'list'], { KUBECONFIG: plane.adminKubeconfig });
      t.match(listedBefore.stdout, /worker-2 .* tpm-ek only \(AK not enrolled yet: challenged at its first join\)/);

      const ekB = await withTpm({ swtpmTcp: b.address }, (tpm) => withEndorsementKey(tpm, async (ek) => ek.public));
      /** A worker-2 CSR quoted by machine A's TPM, its evidence changed by `edit` (B's EK public, a made-up answer). */
      const fromA = async (edit: (e: CsrEvidence) => CsrEvidence = (e) => e) => {
        const pem = await craftCsrPem({ cn: 'system:node:worker-2', o: ['system:nodes'] });
        const evidence = await quoteNow(a, pemBlocks(pem)[0]!.der);
        return `${pem.trimEnd()}\n${evidencePem(edit(evidence))}`;
      };
      const challengeOn = async (name: string) => {
        const denied = await plane.admin.waitFor(`the challenge on ${name}`, async () =>
          ((await csrOf(name))?.status?.conditions ?? []).find((c: KubeObject) => c.type === 'Denied'),
        );
        t.equal(denied.reason, CHALLENGE_REASON, `${name} is denied with a challenge`);
        return denied.message as string;
      };

      const ownEk = await refused(
        await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'unused', name: 'a-own-ek', pem: await fromA() }),
        'tpm-attested',
      );
      t.match(ownEk.message, /the evidence's EK is [0-9a-f]{12}…, not node worker-2's enrolled /, "A's own EK: refused");
      t.same(ownEk.conditions, [], 'left pending, no challenge');

      const withB = (e: CsrEvidence): CsrEvidence => ({ ...e, ekPublic: ekB });
      const asB = await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'unused', name: 'a-as-b', pem: await fromA(withB) });
      const message = await challengeOn(asB);
      t.ok(message.length > 500, `the API server keeps the Denied message whole (${message.length} characters)`);
      const blob = challengeIn(message);
      t.ok(blob, 'the message carries the challenge');
      await t.rejects(
        withTpm({ swtpmTcp: a.address }, (tpm) => answerChallenge(tpm, blob!)),
        "A's TPM cannot open a challenge made for B's EK",
      );
      const guessed = await submitCsr(pool, {
        ...KUBELET_CLIENT,
        cn: 'unused',
        name: 'a-guessed',
        pem: await fromA((e) => ({ ...withB(e), credential: randomBytes(32) })),
      });
      t.match(
        await challengeOn(guessed),
        /the credential answered is none sent for AK/,
        'a guessed answer is challenged again, not approved',
      );

      const nodeB = await nodeLayout(join(dir, 'machine-b'), 'worker-2', { tpm: `swtpm:${b.address}` });
      await plane.writeBootstrapKubeconfig(nodeB.bootstrapKubeconfig, token.token, { ca: 'data' });
      const began = performance.now();
      const joined = await kubeboot(t, ['bootstrap', '--config', nodeB.config]);
      joinMs.fromEk = performance.now() - began;
      t.equal(joined.code, 0, `B joins with the pool token: bootstrap exits 0\n${joined.stderr}`);
      t.match(
        joined.stdout + joined.stderr,
        /the approver challenges this TPM's AK \(enrolment from the EK\); answering it with credential activation/,
      );
      // The round, from kubeboot's own log: the challenged CSR submitted → the answering CSR submitted.
      const submitted = [...(joined.stdout + joined.stderr).matchAll(/"message":"CSR \S+ submitted[^}]*"timestamp":"([^"]+)"/g)].map((m) =>
        Date.parse(m[1]!),
      );
      t.equal(submitted.length, 2, 'two CSRs: the challenged one and the answer');
      t.comment(
        `join, whole process: ${Math.round(joinMs.enrolledAk)} ms with an admin-enrolled AK, ${Math.round(joinMs.fromEk)} ms from the EK alone; the challenge round (decision, Denied write, activation, new CSR) ${submitted[1]! - submitted[0]!} ms`,
      );
      const csrs = await plane.admin.request<{ items: KubeObject[] }>('GET', '/apis/certificates.k8s.io/v1/certificatesigningrequests');
      // kubeboot names its CSRs node-csr-…; worker-1's first one is A's.
      const ofB = csrs.body.items.filter(
        (c) =>
          c.spec.username === `system:bootstrap:${token.id}` &&
          c.metadata.name.startsWith('node-csr-') &&
          Buffer.from(c.spec.request, 'base64').toString() !== firstCsr,
      );
      t.same(
        ofB.map((c) => (approvals(c).length > 0 ? 'approved' : 'challenged')).sort(),
        ['approved', 'challenged'],
        "B's two CSRs: the challenged one and the answer, approved",
      );
      const record = await plane.admin.request<KubeObject>('GET', `${recordsPath('tpmenrolments')}/worker-2`);
      t.match(record.body.spec, { ekHash: idB.ekHash, akName: idB.akName, challenges: [] }, "B's AK is recorded, its challenges spent");
      const listed = await kubeboot(t, ['node', 'list'], { KUBECONFIG: plane.adminKubeconfig });
      t.match(listed.stdout, new RegExp(`worker-2 .* tpm-ak ${idB.akName.slice(0, 16)}… \\(enrolled from tpm-ek\\)`), 'node list shows it');

      const renewed = await kubeboot(t, ['renew', '--config', nodeB.config]);
      t.equal(renewed.code, 0, `B renews with a quote by the recorded AK\n${renewed.stderr}`);
      const self = await nodeClient(plane, 'worker-2');
      clients.push(self);
      const otherAk = await refused(
        await submitCsr(self, { ...KUBELET_CLIENT, cn: 'system:node:worker-2', name: 'renew-a', pem: await fromA(withB) }),
        'tpm-attested',
      );
      t.match(
        otherAk.message,
        /ak-name: .*its AK was enrolled from its EK: tpmenrolments\.kubeboot\.io\/worker-2/,
        'a renewal quoted by another AK is refused',
      );
      const late = await refused(
        await submitCsr(pool, { ...KUBELET_CLIENT, cn: 'unused', name: 'a-late', pem: await fromA(withB) }),
        'tpm-attested',
      );
      t.match(late.message, /ak-name: /, "once enrolled, B's EK with another AK is refused, not challenged: one-shot");
      t.same(late.conditions, [], 'no challenge');
      t.notMatch(approver.output(), 'could not decide on CSR', 'no decision failed');
    },
  );
  // Last: it restarts the approver with a pool policy.
  t.test('--tpm-pcr7: a name is issued only on a quote of a PCR 7 its pool allows, the longest prefix deciding', async (t) => {
    const pcr7A = /\b7\s*:\s*0x([0-9A-Fa-f]{64})/.exec(await tpm2(a, 'tpm2_pcrread', ['sha256:7']))?.[1]?.toLowerCase();
    t.ok(pcr7A, "machine A's PCR 7, read by tpm2_pcrread");
    approver.child.kill('SIGTERM');
    await approver.done;
    approver = startApprover(config, [...APPROVER_FLAGS, '--tpm-pcr7', `worker-1=${pcr7A}`, '--tpm-pcr7', `worker-=${'ab'.repeat(32)}`]);
    await approver.waitForOutput(/became the leader/, 60_000);
    await approver.waitForOutput(/record seen: inventories\.kubeboot\.io\/inventory/, 60_000);

    const renewed = await kubeboot(t, ['renew', '--config', node.config]);
    t.equal(renewed.code, 0, `worker-1 quotes the PCR 7 its own prefix allows: renewed\n${renewed.stderr}`);
    const self = await nodeClient(plane, 'worker-2');
    clients.push(self);
    // Both swtpms start with PCR 7 at its reset value (zeros); B's now measures another secure-boot state.
    await tpm2(b, 'tpm2_pcrextend', [`7:sha256=${'5b'.repeat(32)}`]);
    const pem = await craftCsrPem({ cn: 'system:node:worker-2', o: ['system:nodes'] });
    const evidence = await quoteNow(b, pemBlocks(pem)[0]!.der);
    const outside = await refused(
      await submitCsr(self, {
        ...KUBELET_CLIENT,
        cn: 'system:node:worker-2',
        name: 'b-pcr7',
        pem: `${pem.trimEnd()}\n${evidencePem(evidence)}`,
      }),
      'tpm-attested',
    );
    t.match(
      outside.message,
      /node worker-2 quoted PCR 7 [0-9a-f]{64}, which --tpm-pcr7 does not allow for names "worker-\*"/,
      "worker-2's renewal, quoted by its enrolled AK, is refused: its PCR 7 is not the pool's",
    );
    t.notMatch(approver.output(), 'could not decide on CSR', 'no decision failed');
  });
}
