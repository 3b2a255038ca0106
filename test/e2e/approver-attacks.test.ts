// `kubeboot approver` under attack, against a real control plane with the
// shipped RBAC (issue 17's findings, each a test that failed before the fix):
// a requester whose node name is no Node name gets nothing; a hostile CSR name
// neither stalls the event loop nor reaches the log raw; big CSRs in the list
// do not blind a restarted approver; a replica that cannot list never holds
// the Lease; and one node never has two approved, unissued kube-proxy CSRs,
// whatever order its CSRs arrive in.
//
// kube-controller-manager runs here without its CSR signer, so an approved
// CSR stays unissued: "approved" below means the Approved condition.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { stringify } from 'yaml';
import { writeFile } from 'node:fs/promises';
import type { KubeObject } from '../support/admin.js';
import {
  approvals,
  craftCsrPem,
  createNode,
  installApprover,
  KUBE_PROXY,
  nodeClient,
  startApprover,
  submitCsr,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient } from '../support/http.js';
import { writeKubeconfig } from '../support/kubeconfig.js';
import { assertNoSecrets, kubeboot, type Running } from '../support/kubeboot.js';
import { freePort } from '../support/processes.js';

const plane = await controlPlaneOrSkip(t, { name: 'approver-attacks', csrSigning: false });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-attacks-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = await installApprover(plane, dir);
  const port = await freePort();
  // The journal format: the one that must never carry a raw control character.
  const flags = ['--resync-period', '10m', '--approver-listen', `127.0.0.1:${port}`];
  const journal = { KUBEBOOT_LOG_FORMAT: 'journal' };
  let approver: Running = startApprover(config, flags, journal);
  await approver.waitForOutput(/became the leader/, 60_000);
  t.teardown(async () => {
    approver.child.kill('SIGTERM');
    await approver.done;
  });

  const byName = async () => new Map((await plane.admin.listCsrs()).map((c: KubeObject) => [c.metadata.name as string, c]));
  const approvedNow = async (name: string) => approvals((await byName()).get(name) ?? null).length > 0;
  const waitApproved = (name: string, timeoutMs = 60_000) =>
    plane.admin.waitFor(`CSR ${name.slice(0, 40)} approved`, async () => ((await approvedNow(name)) ? true : undefined), timeoutMs);
  /** The approver's own Events in `default`, by the CSR they are about (names may be too long for a field selector). */
  const eventsFor = async (name: string) =>
    (await plane.admin.request<{ items: KubeObject[] }>('GET', '/api/v1/namespaces/default/events')).body.items.filter(
      (e) => e.source?.component === 'kubeboot-approver' && e.involvedObject?.name === name,
    );
  const waitEvent = (name: string) =>
    plane.admin.waitFor(
      `an Event on ${JSON.stringify(name.slice(0, 40))}`,
      async () => {
        const found = await eventsFor(name);
        return found.length > 0 ? found : undefined;
      },
      60_000,
    );

  t.test('a requester whose node name is not a valid Node name gets no approval, and nothing loops (finding 1)', async (t) => {
    // kube-controller-manager auto-approves a bootstrap token's kubelet CSR for any name under
    // system:node:, so these identities exist in real clusters; here the CA mints them directly.
    const names = ['.', '..', 'a/b', 'UPPER', `${'x'.repeat(250)}.long`];
    const clients = await Promise.all(names.map((n) => nodeClient(plane, n)));
    const csrs = await Promise.all(clients.map((c, i) => submitCsr(c, { cn: KUBE_PROXY.cn, name: `bad-node-${i}` })));
    await createNode(plane, 'control-a');
    const control = await nodeClient(plane, 'control-a');
    const good = await submitCsr(control, { cn: KUBE_PROXY.cn, name: 'control-a' });
    await waitApproved(good);
    for (const [i, name] of csrs.entries()) {
      const [event] = await waitEvent(name);
      t.match(
        event?.message,
        /rule requester-is-node: requester system:node:.* the node name /,
        `system:node:${names[i]!.slice(0, 20)}: refused under requester-is-node`,
      );
      t.notOk(await approvedNow(name), `system:node:${names[i]!.slice(0, 20)}: not approved`);
    }
    t.notMatch(approver.output(), /could not decide on CSR/, 'no CSR went round the retry loop');
    t.notMatch(approver.output(), /TypeError/, 'no TypeError');
    await Promise.all([...clients, control].map((c) => c.close()));
  });

  t.test('one node never has two approved, unissued kube-proxy CSRs, whatever the names and order (finding 4)', async (t) => {
    await createNode(plane, 'order');
    const node = await nodeClient(plane, 'order');
    // The first CSR is approved (and, with no signer, stays unissued); the others follow within
    // the same second as a rule, with names that sort before it, so by (timestamp, name) each
    // looks older than the approved one. Before, that let a second approval through.
    const names = ['order-e', 'order-d', 'order-c', 'order-b', 'order-a'];
    await submitCsr(node, { cn: KUBE_PROXY.cn, exactName: names[0] });
    await waitApproved(names[0]!);
    await Promise.all(names.slice(1).map((exactName) => submitCsr(node, { cn: KUBE_PROXY.cn, exactName })));
    // Every later CSR is decided: each reported under the rule, none approved.
    await plane.admin.waitFor(
      'every later order-* CSR decided',
      async () => {
        const decided = await Promise.all(
          names
            .slice(1)
            .map(async (n) => (await approvedNow(n)) || (await eventsFor(n)).some((e) => /one-unissued-per-node/.test(e.message))),
        );
        return decided.every(Boolean) ? true : undefined;
      },
      60_000,
    );
    const all = await byName();
    const approved = names.filter((n) => approvals(all.get(n) ?? null).length > 0);
    t.same(approved, ['order-e'], 'only the first: the approved, unissued one blocks the rest, whatever their names');
    await node.close();
  });

  t.test('hostile CSR names neither stall the approver nor reach its log raw (findings 2 and 5)', async (t) => {
    // Names the API server accepts: a 7,002-character one of newline-space runs (20 s of
    // event loop before), a 40,000-character one (about an hour before), and control characters.
    const hostile = [`x${'\n '.repeat(3500)}x`, `y${'\n '.repeat(20_000)}y`, 'ctl-\u001b[2J<0>-\u0007-end'];
    const token = await plane.admin.createBootstrapToken();
    const bootstrapper = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
    await createNode(plane, 'hostile');
    const node = await nodeClient(plane, 'hostile');
    let worstMs = 0;
    let probing = true;
    const prober = (async () => {
      let probes = 0;
      while (probing) {
        const started = performance.now();
        const res = await request(`http://127.0.0.1:${port}/healthz`);
        await res.body.dump();
        worstMs = Math.max(worstMs, performance.now() - started);
        probes++;
      }
      return probes;
    })();
    // From a bootstrap token asking for kube-proxy's name: recognised, refused, logged with its name.
    for (const exactName of hostile) await submitCsr(bootstrapper, { cn: KUBE_PROXY.cn, exactName });
    // From a node, a CN full of control characters: refused under `subject`, the CN in the message.
    const cnCsr = await submitCsr(node, { cn: 'system:kube-proxy\u001b[31m\u0000<0>\u0085', name: 'ctl-cn' });
    for (const name of [...hostile, cnCsr]) await waitEvent(name);
    // Another node: the refused ctl-cn CSR, older and pending, holds back its own node's next one.
    await createNode(plane, 'after-hostile');
    const other = await nodeClient(plane, 'after-hostile');
    const good = await submitCsr(other, { cn: KUBE_PROXY.cn, name: 'after-hostile' });
    await waitApproved(good).finally(() => (probing = false));
    const probes = await prober;
    t.ok(probes > 0, `/healthz probed ${probes} times meanwhile`);
    t.ok(worstMs < 2_000, `/healthz always answered within 2 s (worst ${worstMs.toFixed(0)} ms)`);
    t.notMatch(approver.output(), /stopped leading/, 'it kept the lease throughout');
    const lines = approver.output().split('\n').filter(Boolean);
    const raw = lines.filter((l) => /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(l));
    t.same(raw, [], 'no log line carries a raw control character');
    t.ok(
      lines.every((l) => /^<[0-7]>/.test(l)),
      'every line starts with its own priority, and only there',
    );
    t.ok(
      lines.every((l) => l.length < 16_384),
      `every line is bounded (longest ${Math.max(...lines.map((l) => l.length))} characters)`,
    );
    // The reason is a field (never the message), so its escapes are quoted once more: \\u001b.
    t.match(approver.output(), /\\\\u001b\[31m\\\\u0000<0>\\\\u0085/, 'the CN is shown escaped');
    await Promise.all([bootstrapper.close(), node.close(), other.close()]);
  });

  t.test('big CSRs in the list do not blind a restarted approver (finding 3)', async (t) => {
    approver.child.kill('SIGTERM');
    await approver.done;
    // A foreign signer's CSRs, each 1.2 MB (Go's PEM decoder ignores what follows the block):
    // six of them are about 10 MB of list, over one 8 MiB page, so pages shrink to fit.
    const pem = `${await craftCsrPem({ cn: 'big' })}\n${'#'.repeat(1_200_000)}\n`;
    for (let i = 0; i < 6; i++) await submitCsr(plane.admin, { cn: 'big', name: `big-${i}`, signer: 'example.com/foreign', pem });
    // And one a bootstrap token may create: 1.4 MB of `<` in a free-text field, which the API
    // server sends back escaped as `\u003c`: one CSR of 8.4 MB of JSON, larger than a page.
    const token = await plane.admin.createBootstrapToken();
    const bootstrapper = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
    const escaping = async (name: string, size: number) => {
      const body = {
        apiVersion: 'certificates.k8s.io/v1',
        kind: 'CertificateSigningRequest',
        metadata: {
          name,
          ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: '<'.repeat(size), uid: '00000000-0000-0000-0000-000000000000' }],
        },
        spec: {
          request: Buffer.from(await craftCsrPem({ cn: 'system:node:x', o: ['system:nodes'] })).toString('base64'),
          signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
          usages: ['digital signature', 'client auth'],
        },
      };
      const res = await bootstrapper.request('POST', '/apis/certificates.k8s.io/v1/certificatesigningrequests', body);
      t.equal(res.status, 201, `the API server stores ${name}`);
    };
    await escaping('escaping-list', 1_400_000);
    await createNode(plane, 'after-big');
    const node = await nodeClient(plane, 'after-big');
    const good = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'after-big' });
    approver = startApprover(config, flags, journal);
    await waitApproved(good);
    t.pass('a kube-proxy CSR is approved past 16 MB of foreign CSRs');
    // Another, arriving on the watch as one 8 MB event line.
    await escaping('escaping-watch', 1_400_000);
    await createNode(plane, 'after-watch');
    const other = await nodeClient(plane, 'after-watch');
    await waitApproved(await submitCsr(other, { cn: KUBE_PROXY.cn, name: 'after-watch' }));
    t.notMatch(approver.output(), /exceeds \d+ bytes/, 'no list page or watch event was refused for its size');
    t.notMatch(approver.output(), /re-listing/, 'the watch never broke');
    await Promise.all([node.close(), other.close(), bootstrapper.close()]);
  });

  t.test(
    "issue 35: a revoked node gets no kube-proxy certificate, a lifetime left to the signer is refused, and a custom role's auto-approval shows on /readyz",
    async (t) => {
      const CRB = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings';
      const CR = '/apis/rbac.authorization.k8s.io/v1/clusterroles';
      // Revoked by the admin; the node (its kubelet certificate still valid) asks for a kube-proxy one.
      await createNode(plane, 'revoked-proxy');
      const revoked = await kubeboot(t, ['node', 'revoke', 'revoked-proxy', '--kubeconfig', plane.adminKubeconfig]);
      t.equal(revoked.code, 0, revoked.stderr);
      const node = await nodeClient(plane, 'revoked-proxy');
      const proxy = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'revoked-proxy' });
      t.match((await waitEvent(proxy))[0], { reason: 'PolicyViolation', message: /rule not-revoked: node revoked-proxy was revoked/ });
      t.notOk(await approvedNow(proxy), 'no kube-proxy certificate for a revoked node');
      await node.close();

      // No expirationSeconds: the signer would issue its whole --cluster-signing-duration.
      await createNode(plane, 'long-lived');
      const longLived = await nodeClient(plane, 'long-lived');
      const forever = await submitCsr(longLived, { cn: KUBE_PROXY.cn, name: 'long-lived', expirationSeconds: null });
      t.match((await waitEvent(forever))[0], { message: /rule short-lived: spec\.expirationSeconds is not set/ });
      t.notOk(await approvedNow(forever));
      await longLived.close();
      // A day, from another node (the refused CSR above, pending, holds back that node's later ones: one-unissued-per-node).
      await createNode(plane, 'short-lived');
      const shortLived = await nodeClient(plane, 'short-lived');
      await waitApproved(await submitCsr(shortLived, { cn: KUBE_PROXY.cn, name: 'short-lived', expirationSeconds: 24 * 3600 }));
      await shortLived.close();

      // The 1.7 TLS bootstrapping docs' role for renewals, of no stock name, bound to every node.
      const role = 'approve-node-client-renewal-csr';
      expectStatus(
        await plane.admin.request('POST', CR, {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRole',
          metadata: { name: role },
          rules: [{ apiGroups: ['certificates.k8s.io'], resources: ['certificatesigningrequests/selfnodeclient'], verbs: ['create'] }],
        }),
        'create the custom role',
        201,
      );
      expectStatus(
        await plane.admin.request('POST', CRB, {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRoleBinding',
          metadata: { name: 'auto-approve-renewals-for-nodes' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
          subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'system:nodes' }],
        }),
        'bind it to system:nodes',
        201,
      );
      t.teardown(async () => {
        await plane.admin.request('DELETE', `${CRB}/auto-approve-renewals-for-nodes`);
        await plane.admin.request('DELETE', `${CR}/${role}`);
      });
      // A standby with --approve-kubelet-client: /readyz says what it found whether it leads or not.
      const kcmPort = await freePort();
      const standby = startApprover(config, ['--approve-kubelet-client', '--approver-listen', `127.0.0.1:${kcmPort}`]);
      t.teardown(async () => {
        standby.child.kill('SIGTERM');
        await standby.done;
      });
      const said = await plane.admin.waitFor(
        '/readyz of the standby to name the grant',
        async () => {
          const res = await request(`http://127.0.0.1:${kcmPort}/readyz`).catch(() => null);
          const body = res ? await res.body.text() : '';
          return /kubelet client approval: on; (?!not looked at)/.test(body) ? body : undefined;
        },
        60_000,
      );
      t.match(
        said,
        'kube-controller-manager still approves kubelet client CSRs on a name-prefix check, whatever this approver refuses or revokes: the authorizer says system:nodes may create certificatesigningrequests/selfnodeclient; remove the grant: kubectl delete clusterrolebinding auto-approve-renewals-for-nodes',
      );
      t.match(
        standby.output(),
        /kube-controller-manager still approves kubelet client CSRs .*auto-approve-renewals-for-nodes/,
        'and at start',
      );
      const warned = await kubeboot(t, ['node', 'revoke', 'revoked-proxy', '--kubeconfig', plane.adminKubeconfig]);
      t.match(
        warned.stderr,
        /kube-controller-manager still approves kubelet client CSRs .*kubectl delete clusterrolebinding auto-approve-renewals-for-nodes; until then a revoked node renews/,
        'node revoke says so too',
      );
    },
  );

  t.test('a replica that cannot list CSRs never holds the Lease, and says why on /readyz (finding 3)', async (t) => {
    approver.child.kill('SIGTERM');
    await approver.done;
    // A kubeconfig for a user no RBAC binds: every list is 403.
    const blindConf = join(dir, 'blind.conf');
    await writeKubeconfig(blindConf, plane.server, { pem: plane.caPem }, await plane.mintClientCert({ commonName: 'kubeboot:blind' }));
    const blindConfig = join(dir, 'blind.yaml');
    await writeFile(blindConfig, stringify({ approver: { kubeconfig: blindConf } }));
    const blindPort = await freePort();
    const blind = startApprover(blindConfig, ['--approver-listen', `127.0.0.1:${blindPort}`]);
    t.teardown(async () => {
      blind.child.kill('SIGTERM');
      await blind.done;
    });
    const readyz = await plane.admin.waitFor(
      '/readyz of the blind replica to say why',
      async () => {
        const res = await request(`http://127.0.0.1:${blindPort}/readyz`).catch(() => null);
        const body = res ? await res.body.text() : '';
        return /not synced: .*403/.test(body) ? { status: res!.statusCode, body } : undefined;
      },
      60_000,
    );
    t.equal(readyz.status, 503, '/readyz is 503');
    t.match(readyz.body, /not taking part in leader election/);
    // A healthy replica started next to it leads at once and approves: the blind one holds nothing.
    approver = startApprover(config, flags, journal);
    await approver.waitForOutput(/became the leader/, 30_000);
    await createNode(plane, 'after-blind');
    const node = await nodeClient(plane, 'after-blind');
    await waitApproved(await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'after-blind' }));
    t.notMatch(blind.output(), /became the leader/, 'the blind replica never led');
    const lease = (
      await plane.admin.request<KubeObject>('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver')
    ).body;
    const healthy = /kubeboot approver starting.* identity=(\S+)/.exec(approver.output())?.[1];
    t.equal(lease.spec.holderIdentity, healthy, 'the healthy replica holds the Lease');
    assertNoSecrets(t, blind.output(), 'blind approver');
    await node.close();
  });

  t.test('the RBAC grants only the verbs the approver uses', async (t) => {
    const role = (await plane.admin.request<KubeObject>('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles/kubeboot:approver')).body;
    const verbs = (resource: string) =>
      (role.rules as KubeObject[])
        .filter((r) => r.resources.includes(resource))
        .flatMap((r) => r.verbs as string[])
        .sort();
    t.same(verbs('nodes'), ['get'], 'nodes: get only (list let GET /api/v1/nodes/ answer a NodeList)');
    t.same(verbs('certificatesigningrequests'), ['list', 'watch'], 'CSRs: list and watch');
    // Every test above ran with exactly these grants, so nothing the approver needs is missing.
  });
}
