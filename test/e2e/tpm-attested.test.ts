// A node's identity from its TPM, on a real control plane (issue 37): two
// machines with two software TPMs and ONE pool token. The admin enrolls
// machine A's AK for worker-1 (`kubeboot node enroll`); A joins as
// worker-1 with `kubeboot bootstrap --tpm`, and renews with a fresh quote.
// With the same pool token, the other TPM, no TPM, or A's evidence copied
// onto a CSR with another key are refused for worker-1, the rule named in
// the approver's Event; so is a renewal without evidence, as the kubelet's
// own rotateCertificates would file it.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { pemBlocks } from '../../agent/pki/pem.js';
import { recordsPath } from '../../agent/records/kinds.js';
import { evidencePem, quoteCsr } from '../../agent/tpm/csr-evidence.js';
import { identify, withTpm } from '../../agent/tpm/identify.js';
import type { KubeObject } from '../support/admin.js';
import { approvals, craftCsrPem, csrEvents, installApprover, nodeClient, startApprover, submitCsr } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from '../support/http.js';
import { forbid, kubeboot, nodeLayout } from '../support/kubeboot.js';
import { manufactureTpm, startSwtpm, type Swtpm } from '../support/swtpm.js';

const KCM_BINDINGS = ['kubeboot:node-autoapprove-bootstrap', 'kubeboot:node-autoapprove-certificate-rotation'];
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
  for (const name of KCM_BINDINGS)
    expectStatus(await plane.admin.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`), name, 200, 404);
  const [madeA, madeB] = await Promise.all([manufactureTpm(), manufactureTpm()]);
  tpms.push(await startSwtpm(madeA!), await startSwtpm(madeB!));
  const [a, b] = tpms as [Swtpm, Swtpm];
  for (const sw of tpms) t.teardown(() => rm(sw.dir, { recursive: true, force: true }));

  const approver = startApprover(config, ['--approve-kubelet-client', '--inventory', '--resync-period', '10m']);
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
  const node = await nodeLayout(join(dir, 'machine-a'), 'worker-1', { tpm: `swtpm:${a.address}` });
  let firstCsr = '';

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
    const joined = await kubeboot(t, ['bootstrap', '--config', node.config]);
    t.equal(joined.code, 0, `bootstrap exits 0\n${joined.stderr}`);
    const csrs = await plane.admin.request<{ items: KubeObject[] }>('GET', '/apis/certificates.k8s.io/v1/certificatesigningrequests');
    const mine = csrs.body.items.find((c) => c.spec.username === `system:bootstrap:${token.id}`);
    firstCsr = Buffer.from(mine?.spec.request ?? '', 'base64').toString();
    t.match(firstCsr, /-----END CERTIFICATE REQUEST-----\n-----BEGIN KUBEBOOT TPM EVIDENCE-----\n/, 'the CSR carries the evidence block');
    t.match(approvals(mine ?? null)[0]?.message, /tpm-attested/, 'approved with tpm-attested among the rules passed');

    const listed = await kubeboot(t, ['node', 'list'], { KUBECONFIG: plane.adminKubeconfig });
    t.match(listed.stdout, new RegExp(`worker-1 .* tpm-ak ${idA.akName.slice(0, 16)}…`), 'node list shows the enrolment');
  });

  t.test('with the same pool token, worker-1 is refused to the other TPM, to no TPM, and to copied evidence', async (t) => {
    const otherTpm = await refused(
      await submitCsr(pool, {
        ...KUBELET_CLIENT,
        cn: 'unused',
        name: 'other-tpm',
        pem: await worker1Csr(async (der) => evidencePem(await withTpm({ swtpmTcp: b.address }, (tpm) => quoteCsr(tpm, der, new Date())))),
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
}
