// `kubeboot approver` against a real control plane with the shipped
// manifests: a default node (kube-proxy enabled) bootstraps unattended,
// crafted CSRs that break a rule are left pending with that rule in an Event
// and the log, CSRs it does not own are never touched, and a restart neither
// double-approves nor misses anything.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import type { KubeObject } from '../support/admin.js';
import { parseCertificateChain } from '../../agent/pki/certificate.js';
import {
  ambiguousCsrPems,
  craftCsrPem,
  approvals,
  createNode,
  csrEvents,
  installApprover,
  KUBE_PROXY,
  nodeClient,
  registerNodeOnceCredentialed,
  startApprover,
  submitCsr,
  type SubmitSpec,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from '../support/http.js';
import { assertNoSecrets, handToken, kubeboot, nodeLayout, type Running } from '../support/kubeboot.js';
import { listenNotifySocket } from '../support/notify-socket.js';
import { freePort } from '../support/processes.js';
import { createServer, type AddressInfo } from 'node:net';
import { request } from 'undici';

const run = promisify(execFile);

const plane = await controlPlaneOrSkip(t, { name: 'approver' });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = await installApprover(plane, dir);
  // A long resync: every re-check these tests see comes from an event or the transient-rule back-off.
  const policyFlags = [
    '--approve-kubelet-client',
    '--resync-period',
    '10m',
    '--approve-kubelet-serving',
    '--max-expiration',
    '24h',
    '--serving-dns-suffix',
    'nodes.example',
    '--serving-ip-cidr',
    '10.0.0.0/24',
  ];
  let approver: Running = startApprover(config, policyFlags);
  await approver.waitForOutput(/became the leader/, 60_000);
  t.teardown(async () => {
    approver.child.kill('SIGTERM');
    await approver.done;
  });
  const getCsr = (name: string) => plane.admin.getCsr(name);
  const approved = (name: string) =>
    plane.admin.waitFor(`CSR ${name} approved`, async () => ((await getCsr(name))?.status?.certificate ? getCsr(name) : undefined), 60_000);

  t.test('a node with the default configuration (kube-proxy enabled) bootstraps with no human step', async (t) => {
    const node = await nodeLayout(join(dir, 'worker-a'), 'worker-a', { kubeProxy: { enabled: true } });
    // The kubelet's credential from a token bound to the name; the Node registered once it is issued, as a kubelet does.
    const token = await handToken(plane, node, 'data', node.bootstrapKubeconfig, { bind: { names: ['worker-a'] } });
    const registered = registerNodeOnceCredentialed(plane, 'worker-a', `system:bootstrap:${token.id}`);
    const result = await kubeboot(t, ['bootstrap', '--config', node.config]);
    await registered;
    t.equal(result.code, 0, `bootstrap exits 0\n${result.stderr}`);
    const kubectl = plane.kubectlPath!;
    const who = JSON.parse((await run(kubectl, ['--kubeconfig', node.kubeProxyKubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout);
    t.equal(who.status.userInfo.username, 'system:kube-proxy', 'kube-proxy.conf authenticates as system:kube-proxy');
    t.notOk((who.status.userInfo.groups as string[]).includes('system:nodes'), 'and not as a node');
    for (const resource of ['services', 'endpointslices.discovery.k8s.io']) {
      const listed = await run(kubectl, ['--kubeconfig', node.kubeProxyKubeconfig, 'get', resource, '--all-namespaces', '-o', 'name']);
      t.equal(listed.stderr, '', `kube-proxy lists ${resource} cluster-wide`);
    }
    const csr = (await plane.admin.listCsrs()).find(
      (c: KubeObject) => c.spec.signerName === KUBE_PROXY.signer && c.spec.username === 'system:node:worker-a',
    );
    const [approval] = approvals(csr ?? null);
    t.equal(approval?.reason, 'KubebootApprover', 'approved with reason KubebootApprover');
    t.match(approval?.message, /kube-proxy-client: every rule passed/, 'the message names the policy that passed');
  });

  t.test('crafted CSRs that break a rule stay pending, each with its rule in an Event and the log', async (t) => {
    await createNode(plane, 'crafty', [
      { type: 'InternalIP', address: '10.0.0.5' },
      { type: 'Hostname', address: 'crafty' },
    ]);
    await createNode(plane, 'other');
    for (const n of ['flood', 'expiring', 'rsa-small']) await createNode(plane, n);
    const crafty = await nodeClient(plane, 'crafty');
    const ghost = await nodeClient(plane, 'ghost');
    const flood = await nodeClient(plane, 'flood');
    const token = await plane.admin.createBootstrapToken();
    const bootstrapper = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
    const serving = { signer: 'kubernetes.io/kubelet-serving', usages: ['digital signature', 'server auth'], o: ['system:nodes'] };
    const proxy: SubmitSpec = { cn: KUBE_PROXY.cn };

    const cases: { what: string; by: KubeClient; spec: SubmitSpec; rule: string }[] = [
      { what: 'wrong CN', by: crafty, spec: { cn: 'system:kube-proxyx' }, rule: 'subject' },
      { what: 'an extra O', by: crafty, spec: { ...proxy, o: ['cluster-admins'] }, rule: 'subject' },
      { what: 'a DNS SAN on a client CSR', by: crafty, spec: { ...proxy, dns: ['crafty'] }, rule: 'no-sans' },
      { what: 'a URI SAN on a client CSR', by: crafty, spec: { ...proxy, uris: ['spiffe://cluster/ns/x'] }, rule: 'no-sans' },
      {
        what: 'key encipherment with an ECDSA key',
        by: crafty,
        spec: { ...proxy, usages: ['digital signature', 'key encipherment', 'client auth'] },
        rule: 'usages',
      },
      { what: 'server auth on a client CSR', by: crafty, spec: { ...proxy, usages: ['digital signature', 'server auth'] }, rule: 'usages' },
      { what: 'requester a bootstrap token', by: bootstrapper, spec: proxy, rule: 'requester-is-node' },
      { what: 'requester a node without a Node object', by: ghost, spec: proxy, rule: 'node-exists' },
      {
        what: 'expiration above the cap',
        by: await nodeClient(plane, 'expiring'),
        spec: { ...proxy, expirationSeconds: 48 * 3600 },
        rule: 'expiration',
      },
      {
        what: 'an RSA 1024 key',
        by: await nodeClient(plane, 'rsa-small'),
        spec: { ...proxy, key: 'rsa-1024', usages: ['digital signature', 'key encipherment', 'client auth'] },
        rule: 'key-algorithm',
      },
      // (A node cannot even submit CN=system:node:<other>: kube-apiserver refuses that itself.)
      {
        what: "a serving CSR for another node's name",
        by: crafty,
        spec: { ...serving, cn: 'system:node:crafty', dns: ['other'] },
        rule: 'dns-sans',
      },
      {
        what: "an IP not among the Node's addresses",
        by: crafty,
        spec: { ...serving, cn: 'system:node:crafty', ips: ['10.0.0.9'] },
        rule: 'ip-sans',
      },
      {
        what: "a DNS name not the Node's",
        by: crafty,
        spec: { ...serving, cn: 'system:node:crafty', dns: ['crafty', 'api.example.com'] },
        rule: 'dns-sans',
      },
      {
        what: 'an email SAN on a serving CSR',
        by: crafty,
        spec: { ...serving, cn: 'system:node:crafty', dns: ['crafty'], emails: ['root@crafty'] },
        rule: 'no-email-uri-sans',
      },
      {
        what: 'client auth on a serving CSR',
        by: crafty,
        spec: { ...serving, cn: 'system:node:crafty', dns: ['crafty'], usages: ['digital signature', 'client auth'] },
        rule: 'usages',
      },
      { what: 'a serving CSR without SANs', by: crafty, spec: { ...serving, cn: 'system:node:crafty' }, rule: 'has-san' },
      // Requests the API server accepts and Go's signer would issue for another identity than the approver read.
      ...(await ambiguousCsrPems()).map(({ what, pem }) => ({ what, by: crafty, spec: { ...proxy, pem }, rule: 'request-signature' })),
    ];
    // The flood: the older CSR of node "flood" breaks a rule and stays unissued, so the newer valid one waits.
    const floodFirst = await submitCsr(flood, { ...proxy, o: ['extra'], name: 'flood-1' });
    const floodSecond = await submitCsr(flood, { ...proxy, name: 'flood-2' });
    const names = await Promise.all(cases.map((c, i) => submitCsr(c.by, { ...c.spec, name: `case-${i}` })));
    cases.push({ what: 'a second concurrent kube-proxy CSR from one node', by: flood, spec: proxy, rule: 'one-unissued-per-node' });
    names.push(floodSecond);

    // The positive control is approved once the worker has reached it.
    const good = await submitCsr(crafty, {
      ...serving,
      cn: 'system:node:crafty',
      dns: ['crafty', 'crafty.nodes.example'],
      ips: ['10.0.0.5'],
      name: 'serving-ok',
    });
    await approved(good);
    for (const [i, c] of cases.entries()) {
      const name = names[i]!;
      const events = await plane.admin.waitFor(
        `Event on ${name} (${c.what})`,
        async () => {
          const found = await csrEvents(plane, name);
          return found.length > 0 ? found : undefined;
        },
        30_000,
      );
      t.match(events[0]?.message, `rule ${c.rule}:`, `${c.what}: the Event names rule ${c.rule}`);
      t.match(
        approver.output(),
        new RegExp(`"csr":"${name}".*"rule":"${c.rule}"|"rule":"${c.rule}".*"csr":"${name}"`),
        `${c.what}: one log line names it`,
      );
      const csr = await getCsr(name);
      t.same(csr?.status?.conditions ?? [], [], `${c.what}: left pending, neither approved nor denied`);
    }
    t.match((await csrEvents(plane, floodFirst))[0]?.message ?? '', 'rule subject:', 'the older flood CSR names its own rule');
    await Promise.all([crafty, ghost, flood, bootstrapper].map((c) => c.close()));
  });

  t.test('CSRs it does not own are never touched', async (t) => {
    await createNode(plane, 'bystander');
    const node = await nodeClient(plane, 'bystander');
    const custom = await submitCsr(node, { cn: 'system:kube-proxy', signer: 'example.com/custom', name: 'custom-signer' });
    // A user's own client certificate for the same signer (created by the admin).
    const userClient = await submitCsr(plane.admin, { cn: 'alice', o: ['developers'], name: 'user-client' });
    // A later valid CSR is approved only after the worker went past the two above.
    const marker = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'marker' });
    await approved(marker);
    for (const name of [custom, userClient]) {
      t.same((await getCsr(name))?.status?.conditions ?? [], [], `${name}: no condition`);
      t.same(await csrEvents(plane, name), [], `${name}: no Event`);
    }
    await node.close();
  });

  t.test('a kubelet client CSR with TPM evidence appended as PEM blocks is stored and signed unchanged (issue 37)', async (t) => {
    // GKE appends its TPM evidence after the CERTIFICATE REQUEST block; kube-apiserver parses only the
    // first PEM block (pkg/apis/certificates/helpers.go ParseCSR) and kube-controller-manager's signer
    // too: the whole spec.request must come back byte for byte, and be signed.
    await createNode(plane, 'tpm-evidence');
    const node = await nodeClient(plane, 'tpm-evidence');
    const evidence = (type: string, bytes: number) =>
      `-----BEGIN ${type}-----\n${(
        Buffer.alloc(bytes, 0xa5)
          .toString('base64')
          .match(/.{1,64}/g) ?? []
      ).join('\n')}\n-----END ${type}-----\n`;
    const pem = `${await craftCsrPem({ cn: 'system:node:tpm-evidence', o: ['system:nodes'] })}\n${evidence('TPM QUOTE', 145)}${evidence('TPM SIGNATURE', 72)}`;
    const name = await submitCsr(node, {
      cn: 'unused',
      pem,
      signer: 'kubernetes.io/kube-apiserver-client-kubelet',
      usages: ['digital signature', 'client auth'],
      name: 'tpm-evidence',
    });
    t.equal(Buffer.from((await getCsr(name))?.spec.request, 'base64').toString(), pem, 'kube-apiserver stores spec.request unchanged');
    await plane.admin.approveCsr(name);
    const signed = await approved(name);
    t.equal(Buffer.from(signed?.spec.request, 'base64').toString(), pem, 'and it is unchanged once signed');
    const [cert] = parseCertificateChain(Buffer.from(signed?.status.certificate, 'base64').toString());
    t.equal(
      cert?.subject.commonName,
      'system:node:tpm-evidence',
      "kube-controller-manager's signer issued it for the first block's subject",
    );
    await node.close();
  });

  t.test('a node whose RBAC grant was removed is not approved (SubjectAccessReview denies)', async (t) => {
    await createNode(plane, 'revoked');
    const binding = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeboot:nodes-kubeproxyclient';
    const saved = (await plane.admin.request<KubeObject>('GET', binding)).body;
    expectStatus(await plane.admin.request('DELETE', binding), 'delete binding', 200);
    const node = await nodeClient(plane, 'revoked');
    const name = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'revoked' });
    const events = await plane.admin.waitFor(
      `Event on ${name}`,
      async () => ((await csrEvents(plane, name)).length > 0 ? csrEvents(plane, name) : undefined),
      30_000,
    );
    t.match(
      events[0]?.message,
      'rule authorized: SubjectAccessReview denies system:node:revoked create certificatesigningrequests/kubeproxyclient',
      'the Event names the SubjectAccessReview',
    );
    t.same((await getCsr(name))?.status?.conditions ?? [], [], 'left pending');
    // Granting it again is enough: the approver looks again without a restart.
    const { metadata, ...rest } = saved;
    expectStatus(
      await plane.admin.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
        ...rest,
        metadata: { name: metadata.name, labels: metadata.labels },
      }),
      'restore binding',
      201,
    );
    await approved(name);
    t.equal(approvals(await getCsr(name)).length, 1, 'approved once the grant is back');
    await node.close();
  });

  t.test('a restarted approver neither double-approves nor misses a CSR created while it was down', async (t) => {
    const nodes = Array.from({ length: 8 }, (_, i) => `restart-${i}`);
    await Promise.all(nodes.map((n) => createNode(plane, n)));
    const clients = await Promise.all(nodes.map((n) => nodeClient(plane, n)));
    const before = await Promise.all(clients.slice(0, 4).map((c) => submitCsr(c, { cn: KUBE_PROXY.cn, name: 'before' })));
    await Promise.all(before.map(approved));
    approver.child.kill('SIGTERM');
    const stopped = await approver.done;
    t.equal(stopped.code, 0, 'SIGTERM stops it cleanly');
    assertNoSecrets(t, stopped.stdout + stopped.stderr, 'kubeboot approver');
    t.match(stopped.stdout + stopped.stderr, /released the lease/, 'SIGTERM releases the lease');
    const lease = (
      await plane.admin.request<KubeObject>('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver')
    ).body;
    t.notOk(lease.spec.holderIdentity, 'the lease has no holder');
    const during = await Promise.all(clients.slice(4).map((c) => submitCsr(c, { cn: KUBE_PROXY.cn, name: 'during' })));
    approver = startApprover(config, policyFlags);
    await Promise.all(during.map(approved));
    for (const name of [...before, ...during]) t.equal(approvals(await getCsr(name)).length, 1, `${name}: exactly one approval`);
    await Promise.all(clients.map((c) => c.close()));
  });

  t.test('a kube-proxy CSR sent before its Node registers is approved once the Node exists, without a resync', async (t) => {
    const node = await nodeClient(plane, 'late');
    const name = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'before-node' });
    const events = await plane.admin.waitFor(
      `Event on ${name}`,
      async () => ((await csrEvents(plane, name)).length > 0 ? csrEvents(plane, name) : undefined),
      30_000,
    );
    t.match(events[0]?.message, 'rule node-exists: no Node late exists');
    await createNode(plane, 'late');
    await approved(name);
    t.equal(approvals(await getCsr(name)).length, 1, 'approved once the kubelet registered the Node');
    await node.close();
  });

  t.test('a status port held by another process: READY=1 and approvals go on, the listener binds once the port is freed', async (t) => {
    approver.child.kill('SIGTERM');
    await approver.done;
    // A local user holds the approver's port while it is down.
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as AddressInfo).port;
    t.teardown(() => new Promise<void>((resolve) => (holder.listening ? holder.close(() => resolve()) : resolve())));
    const notify = await listenNotifySocket(dir, { abstract: true });
    t.teardown(() => notify.close());
    approver = startApprover(config, [...policyFlags, '--approver-listen', `127.0.0.1:${port}`], { NOTIFY_SOCKET: notify.path });
    await approver.waitForOutput(new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port} .*working on without them`), 60_000);
    await notify.waitFor((m) => m.split('\n').includes('READY=1'), 60_000);
    await approver.waitForOutput(/became the leader/, 30_000);
    await createNode(plane, 'held-port');
    const node = await nodeClient(plane, 'held-port');
    await approved(await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'held-port' }));
    t.pass('a CSR is approved while the port is held');
    await node.close();
    await new Promise<void>((resolve) => holder.close(() => resolve()));
    await approver.waitForOutput(/serving \/healthz, \/readyz and \/metrics on 127\.0\.0\.1:\d+ \(after \d+ failed attempt\(s\)\)/, 90_000);
    const res = await request(`http://127.0.0.1:${port}/metrics`);
    t.match(await res.body.text(), /^kubeboot_approver_status_listener_failures_total [1-9]\d*$/m, 'the failed attempts are counted');
    await notify.waitFor((m) => /STATUS=watching CSRs; lease [^;\n]*$/m.test(m), 30_000);
  });

  t.test('under --deny-violations a broken CSR is denied naming its rule; READY=1, /readyz and /metrics', async (t) => {
    approver.child.kill('SIGTERM');
    await approver.done;
    const notify = await listenNotifySocket(dir, { abstract: true });
    t.teardown(() => notify.close());
    const port = await freePort();
    approver = startApprover(config, [...policyFlags, '--deny-violations', '--approver-listen', `127.0.0.1:${port}`], {
      NOTIFY_SOCKET: notify.path,
    });
    await notify.waitFor((m) => m.includes('READY=1'), 60_000);
    await approver.waitForOutput(/became the leader/, 30_000);
    await createNode(plane, 'denied');
    const node = await nodeClient(plane, 'denied');
    const bad = await submitCsr(node, { cn: 'root', name: 'deny' });
    const csr = await plane.admin.waitFor(
      `${bad} denied`,
      async () => {
        const c = await getCsr(bad);
        return (c?.status?.conditions ?? []).some((x: KubeObject) => x.type === 'Denied') ? c : undefined;
      },
      30_000,
    );
    const [denied] = csr!.status.conditions as KubeObject[];
    t.equal(denied?.reason, 'KubebootApprover', 'denied with reason KubebootApprover');
    t.match(denied?.message, 'kube-proxy-client rule subject: CN root is not system:kube-proxy', 'the message names the rule');
    // A denied CSR is settled, so it does not hold back the node's next one.
    const good = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'after-deny' });
    await approved(good);
    // A rule that may pass later is not a reason to deny: the kube-proxy CSR of a
    // node whose kubelet has not registered yet waits, and is approved after.
    const early = await nodeClient(plane, 'not-yet-registered');
    const waiting = await submitCsr(early, { cn: KUBE_PROXY.cn, name: 'before-node' });
    const pendingEvents = await plane.admin.waitFor(
      `Event on ${waiting}`,
      async () => ((await csrEvents(plane, waiting)).length > 0 ? csrEvents(plane, waiting) : undefined),
      30_000,
    );
    t.match(pendingEvents[0]?.message, 'rule node-exists', 'left pending, naming the rule');
    t.same((await getCsr(waiting))?.status?.conditions ?? [], [], 'not denied under --deny-violations');
    await createNode(plane, 'not-yet-registered');
    await approved(waiting);
    await early.close();
    const text = async (path: string) => {
      const res = await request(`http://127.0.0.1:${port}${path}`);
      return { status: res.statusCode, body: await res.body.text() };
    };
    t.equal((await text('/healthz')).status, 200, '/healthz');
    const ready = await text('/readyz');
    t.equal(ready.status, 200, '/readyz once the CSR cache is synced');
    t.match(ready.body, /leader: yes/);
    const metrics = (await text('/metrics')).body;
    // It also denied the CSRs the earlier tests left pending: those count too.
    t.match(
      metrics,
      /kubeboot_approver_decisions_total\{signer="kubernetes.io\/kube-apiserver-client",decision="denied",rule="subject"\} [1-9]/,
      'denials are counted by rule',
    );
    t.match(
      metrics,
      /kubeboot_approver_decisions_total\{signer="kubernetes.io\/kube-apiserver-client",decision="approved",rule="kube-proxy-client"\} [1-9]/,
      'approvals by policy',
    );
    t.match(metrics, /kubeboot_approver_leader 1/, 'leader gauge');
    t.match(metrics, /kubeboot_approver_approval_latency_seconds_count [1-9]/, 'latency histogram');
    await node.close();
  });
}
