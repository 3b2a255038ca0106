// A cluster CA rotation with no node touched, against a real control plane
// restarted with new flags and certificates as an admin would
// (docs/ca-rotation.md): start on CA 1 with three nodes running `kubeboot
// run`; publish CA 1 + CA 2; switch the API server's client CA bundle, then
// its serving certificate, then the signer to CA 2; retire CA 1. Before
// that, hostile bundles published in cluster-info are refused, each for its
// reason, with nothing written. Throughout: no hand step on a node, no
// bootstrap token (deleted after the join), no 401 in the audit log.
//
// rot-1 is a real node: the real kubelet (test/support/realnode.ts) on the
// kubelet.conf kubeboot writes, its clientCAFile the file kubeboot keeps
// (caRotation.clientCaFile), its serving certificate kubeboot's too
// (kubeletServing, CSRs approved by the test as an admin), and kubeboot's
// kubelet restart hook restarting that process. The other two run `kubeboot
// run` alone, their restart hook a line in a file.
import { createPrivateKey } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { appendFile, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { parse, stringify } from 'yaml';
import { KubeClient } from '../../agent/kube/client.js';
import { bundleFromFile, rotationProgress } from '../../agent/admin/ca-rotation.js';
import { parseClientKubeconfig } from '../../agent/kubeconfig/parse.js';
import { parseCertificateChain } from '../../agent/pki/certificate.js';
import { readOptional } from '../../agent/read-optional.js';
import { trustedBundle } from '../../agent/trust/bundle.js';
import { issuerPin } from '../../agent/trust/decide.js';
import { x509 } from '../../agent/pki/x509.js';
import { nextStatement, signStatement } from '../../agent/trust/statement.js';
import type { KubeObject } from '../support/admin.js';
import { registerNodeOnceCredentialed } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { assertNoSecrets, handToken, kubeboot, nodeLayout, startKubeboot, type NodeLayout, type Running } from '../support/kubeboot.js';
import { writeKubeconfig } from '../support/kubeconfig.js';
import { createNodeNetwork } from '../support/netns.js';
import { auditEventsFrom, credentialId, realNodeOrSkip, requestSpans } from '../support/node-join.js';
import { createCa, generateKeyPair, issueLeaf, subjectName } from '../support/pki.js';
import { kubeletConfigPath, startRealNode, writeKubeletConfig, type RealNode, type RealNodeOptions } from '../support/realnode.js';
import { certificateId, waitNodeReady } from '../support/rotation.js';

const NODES = ['rot-1', 'rot-2', 'rot-3'];
/** The node with the real kubelet. */
const REAL = 'rot-1';
const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
const STEP_MS = 180_000;

// The real kubelet lives in its own network namespace; the plane serves on the host end of its veth.
const net = (await realNodeOrSkip(t)) ? await createNodeNetwork() : undefined;
// Short: the real node's CRI socket and the restart socket live in here (unix socket paths are limited to 108 bytes).
const realDir = net ? mkdtempSync('/tmp/kbr-') : '';
let real: RealNode | undefined;
if (net)
  t.teardown(async () => {
    await real?.stop();
    await net.remove();
    if (t.passing() && process.env.KUBEBOOT_KEEP_CONTROLPLANE !== '1') rmSync(realDir, { recursive: true, force: true });
    else process.stderr.write(`\n*** real node kept in ${realDir} (kubelet.log, fakecri.log)\n`);
  });
// No approver of the plane's: its client certificate is CA 1's, which the API
// server stops accepting mid-rotation. The test approves the nodes' CSRs itself.
const plane = net
  ? await controlPlaneOrSkip(t, { name: 'ca-rotation', audit: true, address: net.hostIp, kubeletApprover: false })
  : undefined;
if (plane && net) {
  const ca1Pem = plane.caPem;
  const ca2 = await createCa('kubeboot-test-ca-2');
  // Canonical PEM: peculiar's PEM has no final newline, and Go reads two blocks glued on one line as none.
  const bundle12 = trustedBundle(ca1Pem + ca2.certPem).pem;
  const ca2Pin = trustedBundle(ca2.certPem).pins[0]!;
  const ca1Body = ca1Pem.split('\n').slice(1, -2).join('\n');
  // The admin's CA keys, as kubeadm keeps ca.key: `kubeboot ca-rotation publish --ca-key` signs with them.
  const ca1Key = join(plane.dir, 'ca1.key');
  await writeFile(ca1Key, plane.caKeyPem, { mode: 0o600 });
  const rogue = await createCa('rogue-ca');
  /** The ConfigMap's data as published at a step, for replaying it later as an attacker would. */
  const snapshots: Record<string, Record<string, string>> = {};
  const snapshot = async (name: string) => {
    snapshots[name] = (await plane.admin.request<KubeObject>('GET', CLUSTER_INFO)).body.data as Record<string, string>;
  };
  let adminCaPem = ca1Pem;
  let adminCert = await plane.mintClientCert({ commonName: 'kubeboot-admin', organizations: ['system:masters'] });
  /** The product's client as the admin uses it for `kubeboot ca-rotation` (agent/admin/ca-rotation.ts). */
  const adminKube = () => new KubeClient({ server: plane.server, caPem: adminCaPem }, { kind: 'client-certificate', ...adminCert });
  const withAdmin = async <T>(fn: (c: KubeClient) => Promise<T>): Promise<T> => {
    const c = adminKube();
    try {
      return await fn(c);
    } finally {
      await c.close();
    }
  };

  /** `kubeboot ca-rotation …` as the admin runs it, with an admin kubeconfig of the moment. */
  const caRotation = async (t: Test, ...args: string[]) => {
    const file = join(plane.dir, 'admin-now.kubeconfig');
    await writeKubeconfig(file, plane.server, { pem: adminCaPem }, adminCert, 'kubeboot-admin');
    return kubeboot(t, ['ca-rotation', ...args, '--kubeconfig', file]);
  };

  /**
   * What an attacker (or a careless admin) puts in cluster-info: any text as its CA bundle, with no trust
   * statement or the one given; written by the admin, or by `as` (a client with less than admin rights).
   */
  async function publishRaw(pem: string, signed?: { payload: string; jws: string }, as?: KubeClient): Promise<void> {
    const cm = (await plane!.admin.request<KubeObject>('GET', CLUSTER_INFO)).body;
    const doc = parse(cm.data.kubeconfig);
    doc.clusters[0].cluster['certificate-authority-data'] = Buffer.from(pem).toString('base64');
    cm.data.kubeconfig = stringify(doc);
    delete cm.data['kubeboot-trust'];
    delete cm.data['kubeboot-trust.jws'];
    if (signed) Object.assign(cm.data, { 'kubeboot-trust': signed.payload, 'kubeboot-trust.jws': signed.jws });
    if (as) {
      await as.request('PUT', CLUSTER_INFO, { body: cm });
      return;
    }
    const res = await plane!.admin.request('PUT', CLUSTER_INFO, cm);
    if (res.status !== 200) throw new Error(`PUT cluster-info: ${res.status}`);
  }
  /** Puts back a snapshot's data whole (kubeconfig and statement), as an attacker replaying it would. */
  async function replay(data: Record<string, string>): Promise<void> {
    const cm = (await plane!.admin.request<KubeObject>('GET', CLUSTER_INFO)).body;
    cm.data = { ...data };
    const res = await plane!.admin.request('PUT', CLUSTER_INFO, cm);
    if (res.status !== 200) throw new Error(`PUT cluster-info: ${res.status}`);
  }
  /** A statement over `pem` signed by `by` (any key: an attacker signs with hers), as new as nodes accept (5 min ahead). */
  const signedBy = (by: { certPem: string; keyPem: string }, pem: string) =>
    signStatement(
      { ...nextStatement(trustedBundle(pem), null, 0, new Date(), 3600_000), version: Math.floor(Date.now() / 1000) + 300 },
      createPrivateKey(by.keyPem),
      trustedBundle(by.certPem).pins[0]!,
    );

  const annotation = async (name: string) => {
    const node = (await plane.admin.request<KubeObject>('GET', `/api/v1/nodes/${name}`)).body;
    const raw = (node.metadata.annotations as Record<string, string> | undefined)?.['kubeboot.io/ca-rotation'];
    return raw ? (JSON.parse(raw) as { bundle: string; active: boolean; refused: string | null; issuers: Record<string, string> }) : null;
  };
  /** Waits until every node's annotation passes `probe`; a timeout says what each node reported last. */
  const everyNode = async (what: string, probe: (a: NonNullable<Awaited<ReturnType<typeof annotation>>>) => boolean) => {
    const last: Record<string, unknown> = {};
    try {
      await plane.admin.waitFor(
        what,
        async () => {
          for (const name of NODES) {
            const a = await annotation(name);
            last[name] = a;
            if (!a || !probe(a)) return undefined;
          }
          return true;
        },
        STEP_MS,
      );
    } catch (err) {
      const logs = daemons.map(
        (d, i) =>
          `${NODES[i]}: ${d
            .output()
            .split('\n')
            .filter((l) => /CA rotation|pass|error/.test(l))
            .slice(-8)
            .join(' | ')}`,
      );
      throw new Error(
        `${(err as Error).message}; the nodes said ${JSON.stringify(last)}; their last CA rotation lines: ${logs.join(' || ')}`,
      );
    }
  };
  /** Both files a node keeps the cluster CA in (kubelet.conf and the kubelet's client-CA file) hold exactly `hash`. */
  const everyNodeTrusts = async (t: Test, hash: string, what: string) => {
    for (const node of nodes) {
      t.equal(trustedBundle(await kubeconfigCa(node)).hash, hash, `${what}: ${node.name}'s kubelet.conf`);
      t.equal(trustedBundle(await readFile(join(node.dir, 'client-ca.crt'), 'utf8')).hash, hash, `${what}: ${node.name}'s client-CA file`);
    }
  };
  const kubeconfigCa = async (node: NodeLayout) =>
    (await parseClientKubeconfig(node.kubeletKubeconfig, (await readOptional(node.kubeletKubeconfig))!, readOptional)).caPem!;

  // The real kubelet's `systemctl try-restart kubelet.service`: kubeboot's hook connects to this
  // socket and returns once the test has stopped the kubelet and started it again (as try-restart
  // returns once the restart job is done); a failed restart fails the hook.
  const base = t.testdir();
  /** Stops a daemon when the file's tests are done (a subtest's own teardown would stop it when the subtest ends). */
  const stopAtEnd = (daemon: Running) =>
    t.teardown(() => {
      if (daemon.child.exitCode === null) daemon.child.kill('SIGTERM');
    });
  const kubeletRestarts: { at: number; tookMs: number }[] = [];
  const restartSocket = join(realDir, 'restart.sock');
  const restartServer = createServer((sock) => {
    sock.on('error', () => {});
    const at = Date.now();
    (async () => {
      await appendFile(join(base, REAL, 'restarts'), 'kubelet\n');
      if (!real) throw new Error('no real kubelet to restart');
      await real.restartKubelet();
      kubeletRestarts.push({ at, tookMs: Date.now() - at });
      sock.end('restarted\n');
    })().catch((err: Error) => sock.end(`failed: ${err.message}\n`));
  });
  await new Promise<void>((resolve) => restartServer.listen(restartSocket, resolve));
  t.teardown(() => restartServer.close());
  const restartHook = [
    process.execPath,
    '-e',
    "const s = require('node:net').connect(process.argv[1]); let r = ''; s.on('data', (d) => (r += d)); s.on('end', () => process.exit(r === 'restarted\\n' ? 0 : 1)); s.on('error', () => process.exit(1));",
    restartSocket,
  ];

  // The nodes' kubelet client CSRs (first issue from their tokens, re-issues under CA 2) and the
  // real node's kubelet-serving CSRs, approved by the admin as they come: the plane runs no
  // approver here (above).
  const tokens: string[] = [];
  let approving = true;
  const approved = new Set<string>();
  const approveServing = (async () => {
    while (approving) {
      try {
        for (const csr of await plane.admin.listCsrs())
          if (
            ((csr.spec.signerName === 'kubernetes.io/kubelet-serving' && csr.spec.username === `system:node:${REAL}`) ||
              (csr.spec.signerName === 'kubernetes.io/kube-apiserver-client-kubelet' &&
                (tokens.some((id) => csr.spec.username === `system:bootstrap:${id}`) ||
                  NODES.some((n) => csr.spec.username === `system:node:${n}`)))) &&
            !csr.status?.conditions?.length &&
            !approved.has(csr.metadata.name)
          ) {
            await plane.admin.approveCsr(csr.metadata.name);
            approved.add(csr.metadata.name);
          }
      } catch {
        // The API server restarts during the rotation: try again.
      }
      await delay(500);
    }
  })();
  t.teardown(async () => {
    approving = false;
    await approveServing;
  });

  // Three nodes join with a bootstrap token, then run on their own certificates.
  const nodes: NodeLayout[] = [];
  const daemons: Running[] = [];
  const registrations: Promise<void>[] = [];
  let realOptions: RealNodeOptions | undefined;
  for (const name of NODES) {
    const dir = join(base, name);
    const clientCaFile = join(dir, 'client-ca.crt');
    const servingCurrent = join(dir, 'kubelet-serving-pki', 'kubelet-server-current.pem');
    if (name === REAL) {
      realOptions = {
        name,
        dir: join(realDir, 'n'),
        net,
        caFile: clientCaFile,
        kubeletKubeconfig: join(dir, 'kubelet.conf'),
        kubeProxyKubeconfig: join(dir, 'kube-proxy.conf'),
        // kubeboot keeps the kubelet's serving certificate too (re-issued under CA 2 with the others); the kubelet re-reads the file.
        kubeletServing: { certFile: servingCurrent, keyFile: servingCurrent },
      };
      // In place before kubeboot starts, which reads it (rotateCertificates).
      writeKubeletConfig(realOptions);
    }
    const node = await nodeLayout(dir, name, {
      caRotation: {
        interval: '5s',
        clientCaFile,
        restartWindow: '20s',
        reissueWindow: '20s',
        // Stand-ins for systemctl: the real kubelet's restart, or a line in a file.
        kubeletRestart: [name === REAL ? restartHook : ['/bin/sh', '-c', 'echo kubelet >> "$0"', join(dir, 'restarts')]],
      },
      ...(name === REAL
        ? {
            kubelet: { configFile: kubeletConfigPath(realOptions!.dir) },
            kubeletServing: { enabled: true, certDir: join(dir, 'kubelet-serving-pki'), ipAddresses: [net.nodeIp] },
          }
        : {}),
    });
    if (node.kubeletKubeconfig !== realOptions?.kubeletKubeconfig && name === REAL) throw new Error('nodeLayout moved kubelet.conf');
    const token = await handToken(plane, node);
    tokens.push(token.id);
    // The real kubelet registers its Node itself; the others' are registered as
    // a kubelet would, once their credential is issued (a Node that exists
    // first is a takeover the approver refuses).
    if (name !== REAL) registrations.push(registerNodeOnceCredentialed(plane, name, `system:bootstrap:${token.id}`));
    const daemon = startKubeboot(['run', '--config', node.config]);
    t.teardown(() => {
      if (daemon.child.exitCode === null) daemon.child.kill('SIGTERM');
    });
    nodes.push(node);
    daemons.push(daemon);
    if (name === REAL) {
      // As kubelet.service's drop-in orders it: the kubelet starts once its credential is on disk
      // (kubelet.conf, written last), and here once its client-CA file is too (the kubelet exits on a
      // missing one). Polled rather than `kubeboot wait`, whose checks would be asserts on the root test.
      await plane.admin.waitFor(
        "rot-1's kubelet.conf, client-CA file and serving certificate",
        async () =>
          (await readOptional(node.kubeletKubeconfig)) && (await readOptional(clientCaFile)) && (await readOptional(servingCurrent))
            ? true
            : undefined,
        STEP_MS,
      );
      real = await startRealNode(realOptions!);
    }
  }
  await Promise.all(registrations);
  const realNode = () => real!;
  const only2 = bundleFromFile('ca2.crt', ca2.certPem, new Date());
  const steps: { bundlePublished?: number; signerSwitched?: number; retired?: number; done?: number } = {};
  await waitNodeReady(plane, REAL, [realNode().kubelet, realNode().fakecri]);
  const hash1 = trustedBundle(ca1Pem).hash;
  await everyNode('every node to report CA 1 in use', (a) => a.bundle === hash1 && a.active);
  for (const id of tokens) await plane.admin.deleteBootstrapToken(id);
  const restarts = async (node: NodeLayout) =>
    ((await readFile(join(node.dir, 'restarts'), 'utf8').catch(() => '')).match(/kubelet/g) ?? []).length;

  t.test('hostile bundles are refused, each for its reason, and nothing is written', async (t) => {
    const leaf = (await plane.mintClientCert({ commonName: 'not-a-ca' })).certPem;
    const expired = await expiredCa();
    const cases: { name: string; publish: () => Promise<void>; reason: string; undo?: () => Promise<void> }[] = [
      {
        name: 'a cluster-info that nodes may write',
        publish: async () => {
          await grantNodesWrite(true);
          await publishRaw(bundle12);
        },
        reason: 'node-writable-source',
        undo: () => grantNodesWrite(false),
      },
      {
        // The attack of issue 26: a user holding only get/update on kube-public/cluster-info adds her CA.
        name: 'a CA added by a user who may only write cluster-info, unsigned',
        publish: async () => {
          const writer = await clusterInfoWriter();
          try {
            await publishRaw(ca1Pem + rogue.certPem, undefined, writer);
          } finally {
            await writer.close();
          }
        },
        reason: 'unsigned',
      },
      {
        name: 'a CA added with a statement signed by that CA itself',
        publish: () => publishRaw(ca1Pem + rogue.certPem, signedBy(rogue, ca1Pem + rogue.certPem)),
        reason: 'untrusted-signer',
      },
      {
        name: "a CA added next to a statement the admin's CA signed for another bundle",
        publish: () => publishRaw(ca1Pem + rogue.certPem, signedBy({ certPem: ca1Pem, keyPem: plane.caKeyPem }, bundle12)),
        reason: 'signature-mismatch',
      },
      { name: 'a bundle dropping the CA the API server presents', publish: () => publishRaw(ca2.certPem), reason: 'drops-presented-ca' },
      { name: 'a bundle with a leaf certificate', publish: () => publishRaw(ca1Pem + leaf), reason: 'not-ca' },
      { name: 'a bundle with an expired CA', publish: () => publishRaw(ca1Pem + expired), reason: 'expired' },
      { name: 'a huge bundle', publish: () => publishRaw(ca1Pem.repeat(40)), reason: 'too-big' },
    ];
    for (const c of cases) {
      await c.publish();
      await everyNode(`every node to refuse ${c.name}`, (a) => a.refused === c.reason);
      if (c.reason === 'node-writable-source') {
        const status = await caRotation(t, 'status');
        t.equal(status.code, 1, 'kubeboot ca-rotation status: not finished while nodes refuse');
        t.match(status.stdout, /rot-1: refuses the published bundle: node-writable-source/, 'and names each node and why');
        const events = (
          await plane.admin.request<KubeObject>('GET', '/api/v1/namespaces/default/events?fieldSelector=reason%3DCABundleRefused')
        ).body.items as KubeObject[];
        for (const name of NODES)
          t.ok(
            events.some((e) => e.involvedObject?.name === name && e.type === 'Warning' && /^node-writable-source: /.test(e.message)),
            `${name}: a Warning Event on its Node says why`,
          );
      }
      await everyNodeTrusts(t, hash1, `${c.name}: CA 1 only`);
      await publishRaw(ca1Pem);
      await c.undo?.();
      await everyNode(`every node to accept CA 1 again after ${c.name}`, (a) => a.refused === null && a.bundle === hash1);
    }
    for (const node of nodes) t.equal(await restarts(node), 0, `${node.name}: nothing was restarted`);
  });

  t.test('the rotation, step by step as docs/ca-rotation.md says, with no node touched', async (t) => {
    // 1. Publish CA 1 + CA 2; every node trusts both and restarts its kubelet once, at its slot.
    const both = bundleFromFile('ca-bundle.crt', bundle12, new Date());
    const bundleFile = join(plane.dir, 'ca-bundle.crt');
    await writeFile(bundleFile, bundle12);
    // rot-3 is offline (kubeboot stopped) when the bundle is published.
    const offline = daemons[2]!;
    offline.child.kill('SIGTERM');
    const gone = await offline.done;
    assertNoSecrets(t, gone.stdout + gone.stderr, 'kubeboot run (rot-3, before going offline)');
    const published = Date.now();
    t.equal((await caRotation(t, 'publish', bundleFile)).code, 2, 'kubeboot ca-rotation publish without --ca-key: refused (exit 2)');
    const signedPublish = await caRotation(t, 'publish', bundleFile, '--ca-key', ca1Key);
    t.equal(signedPublish.code, 0, 'kubeboot ca-rotation publish ca-bundle.crt --ca-key ca.key');
    assertNoSecrets(t, signedPublish.stdout + signedPublish.stderr, 'kubeboot ca-rotation publish');
    t.notOk((signedPublish.stdout + signedPublish.stderr).includes(plane.caKeyPem.split('\n')[1]!), 'publish never prints the CA key');
    await snapshot('both, signed by CA 1');
    await plane.admin.waitFor(
      'rot-1 and rot-2 to use CA 1 + CA 2',
      async () => {
        for (const name of ['rot-1', 'rot-2'])
          if ((await annotation(name))?.bundle !== both.hash || !(await annotation(name))?.active) return undefined;
        return true;
      },
      STEP_MS,
    );
    const lagging = await caRotation(t, 'status');
    t.equal(lagging.code, 1, 'status: not ready while rot-3 is offline');
    t.match(lagging.stdout, /2\/3 node\(s\) trust and use the published CA bundle/, 'status counts the nodes that are');
    t.match(lagging.stdout, /rot-3: has not picked up the published bundle yet/, 'and names the one that lags, and why');
    // rot-3 comes back and catches up on its own.
    const back = startKubeboot(['run', '--config', nodes[2]!.config]);
    // Stopped when the whole file ends, not this subtest: the tests after it need rot-3 running.
    stopAtEnd(back);
    daemons[2] = back;
    await plane.admin.waitFor(
      'every node to trust and use CA 1 + CA 2',
      async () => ((await withAdmin((c) => rotationProgress(c, both, null))).ready ? true : undefined),
      STEP_MS,
    );
    for (const node of nodes) {
      t.equal(trustedBundle(await kubeconfigCa(node)).hash, both.hash, `${node.name}: kubelet.conf trusts CA 1 + CA 2`);
      t.equal(trustedBundle(await readFile(join(node.dir, 'client-ca.crt'), 'utf8')).hash, both.hash, `${node.name}: client-CA file too`);
      t.equal(await restarts(node), 1, `${node.name}: the kubelet restarted once`);
    }

    steps.bundlePublished = published;
    // 2. The API server accepts client certificates of either CA.
    await plane.restart('kube-apiserver', { 'client-ca-file': bundleFile, 'kubelet-certificate-authority': bundleFile });

    // 3. Control-plane clients and the API server's serving certificate under CA 2.
    const admin2 = await issueLeaf(ca2, { commonName: 'kubeboot-admin', organizations: ['system:masters'], usage: 'client' });
    adminCert = { certPem: admin2.certPem, keyPem: admin2.keyPem };
    const kcm = await issueLeaf(ca2, { commonName: 'system:kube-controller-manager', usage: 'client' });
    await writeKubeconfig(plane.controllerManagerKubeconfig, plane.server, { pem: bundle12 }, kcm, 'system:kube-controller-manager');
    const serving = await issueLeaf(ca2, {
      commonName: 'kube-apiserver',
      usage: 'server',
      dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
      ipAddresses: ['127.0.0.1', net.hostIp],
    });
    const servingCert = join(plane.dir, 'apiserver-ca2.crt');
    const servingKey = join(plane.dir, 'apiserver-ca2.key');
    await writeFile(servingCert, serving.certPem);
    await writeFile(servingKey, serving.keyPem, { mode: 0o600 });
    adminCaPem = bundle12;
    plane.useAdmin({ caPem: bundle12, ...adminCert });
    // What the API server shows kubelets (logs, exec, proxy): under CA 2 too, before nodes drop CA 1 from their client-CA files.
    const kubeletClient = await issueLeaf(ca2, {
      commonName: 'kube-apiserver-kubelet-client',
      organizations: ['system:masters'],
      usage: 'client',
    });
    const kubeletClientCert = join(plane.dir, 'apiserver-kubelet-client-ca2.crt');
    const kubeletClientKey = join(plane.dir, 'apiserver-kubelet-client-ca2.key');
    await writeFile(kubeletClientCert, kubeletClient.certPem);
    await writeFile(kubeletClientKey, kubeletClient.keyPem, { mode: 0o600 });
    await plane.restart('kube-apiserver', {
      'tls-cert-file': servingCert,
      'tls-private-key-file': servingKey,
      'kubelet-client-certificate': kubeletClientCert,
      'kubelet-client-key': kubeletClientKey,
    });
    await plane.restart('kube-controller-manager', { 'root-ca-file': bundleFile });

    // 4. The signer issues under CA 2; every node re-issues at its slot.
    const ca2Cert = join(plane.dir, 'ca2.crt');
    const ca2Key = join(plane.dir, 'ca2.key');
    await writeFile(ca2Cert, ca2.certPem);
    await writeFile(ca2Key, ca2.keyPem, { mode: 0o600 });
    await plane.restart('kube-controller-manager', { 'cluster-signing-cert-file': ca2Cert, 'cluster-signing-key-file': ca2Key });
    steps.signerSwitched = Date.now();
    // Signed by CA 2 this time: the nodes trust it since step 1.
    const signerPublish = await caRotation(t, 'publish', bundleFile, '--signer-ca-hash', ca2Pin, '--ca-key', ca2Key);
    t.equal(signerPublish.code, 0, 'kubeboot ca-rotation publish --signer-ca-hash --ca-key ca2.key');
    t.match(
      signerPublish.stdout,
      /the signer moves to sha256:[0-9a-f]{64}: \d+ certificate\(s\) on 3 node\(s\) are re-issued/,
      'and says how many certificates every node re-issues',
    );
    await snapshot('both with the signer, signed by CA 2');
    await plane.admin.waitFor(
      'every node to hold certificates under CA 2',
      async () => ((await withAdmin((c) => rotationProgress(c, both, ca2Pin))).ready ? true : undefined),
      STEP_MS,
    );

    // 5. Retire CA 1: nodes first, then the control plane.
    steps.retired = Date.now();
    const retired = await caRotation(t, 'retire', ca2Cert, '--ca-key', ca2Key);
    t.equal(retired.code, 0, `kubeboot ca-rotation retire: every node was ready (${retired.stderr.trim()})`);
    t.match(retired.stderr, /join commands and user-data pinning it fail from now on/, 'retire says the old join pin stops working');
    await plane.admin.waitFor(
      'every node to trust and use CA 2 only',
      async () => ((await withAdmin((c) => rotationProgress(c, only2, ca2Pin))).ready ? true : undefined),
      STEP_MS,
    );
    await plane.restart('kube-apiserver', { 'client-ca-file': ca2Cert, 'kubelet-certificate-authority': ca2Cert });
    await writeKubeconfig(plane.controllerManagerKubeconfig, plane.server, { pem: ca2.certPem }, kcm, 'system:kube-controller-manager');
    adminCaPem = ca2.certPem;
    plane.useAdmin({ caPem: ca2.certPem, ...adminCert });
    await plane.restart('kube-controller-manager', { 'root-ca-file': ca2Cert });

    for (const [i, node] of nodes.entries()) {
      t.equal(trustedBundle(await kubeconfigCa(node)).hash, only2.hash, `${node.name}: kubelet.conf trusts CA 2 only`);
      const current = await readFile(join(node.kubeletCertDir, 'kubelet-client-current.pem'), 'utf8');
      t.equal(issuerPin(current, only2), ca2Pin, `${node.name}: its kubelet certificate chains to CA 2`);
      t.ok(parseCertificateChain(current)[0]!.notAfter > new Date(), `${node.name}: and is valid`);
      t.equal(await restarts(node), 2, `${node.name}: two restarts in all: one per bundle change`);
      for (const file of await filesUnder(node.dir))
        t.notOk((await readFile(file, 'utf8').catch(() => '')).includes(ca1Body), `${node.name}: CA 1 is in no file (${file})`);
      t.equal(daemons[i]!.child.exitCode, null, `${node.name}: kubeboot still runs`);
    }
    steps.done = Date.now();
    const status = await caRotation(t, 'status');
    t.equal(status.code, 0, 'kubeboot ca-rotation status: finished, on CA 2 alone');
    t.match(status.stdout, /3\/3 node\(s\) trust and use the published CA bundle; 3\/3 hold certificates under the signer CA/);
  });

  t.test('the real kubelet went through the rotation as system:node:<n>, and ends on CA 2, Ready', async (t) => {
    const node = nodes[0]!;
    const current = await readFile(join(node.kubeletCertDir, 'kubelet-client-current.pem'), 'utf8');
    const ca2Id = certificateId(current);
    await plane.admin.waitFor(
      'the real kubelet to authenticate with its certificate under CA 2',
      async () => {
        const gone = [realNode().kubelet, realNode().fakecri].find((c) => c.exited !== undefined);
        if (gone) throw new Error(`${gone.name} exited (${gone.exited}); see ${gone.logFile}`);
        return auditEventsFrom(plane, net.nodeIp, 'kubelet/').some((e) => credentialId(e) === ca2Id) ? true : undefined;
      },
      STEP_MS,
    );
    await waitNodeReady(plane, REAL, [realNode().kubelet, realNode().fakecri]);
    t.pass(`${REAL}: the Node is Ready on CA 2 alone`);
    const events = auditEventsFrom(plane, net.nodeIp, 'kubelet/');
    const created = events.find((e) => e.verb === 'create' && e.objectRef?.resource === 'nodes' && e.responseStatus?.code === 201);
    t.equal(created?.user?.username, `system:node:${REAL}`, 'the real kubelet registered its Node as system:node:<n>');
    // The rule: not one request of the real kubelet unauthenticated, API server restarts included (its
    // credential is always one the restarted API server accepts), and every one as the node itself.
    t.same(
      events
        .filter((e) => e.user?.username !== `system:node:${REAL}`)
        .map((e) => `${e.responseStatus?.code} ${e.user?.username ?? '?'} ${e.verb} ${e.requestURI}`),
      [],
      `each of the real kubelet's ${events.length} audited requests was authenticated as system:node:${REAL}`,
    );
    const spans = requestSpans(events).sort((a, b) => a.start - b.start);
    const firstOnCa2 = spans.find((s) => credentialId(s.event) === ca2Id);
    t.ok(
      firstOnCa2 && firstOnCa2.start > steps.signerSwitched!,
      'after the signer switch the kubelet authenticates with its certificate under CA 2',
    );
    const lastOther = spans.filter((s) => credentialId(s.event) !== ca2Id).at(-1);
    const last = spans.at(-1)!;
    t.equal(credentialId(last.event), ca2Id, 'and its latest request is with that certificate');
    t.equal(kubeletRestarts.length, 2, 'the real kubelet was restarted twice: once per bundle change');
    t.ok(approved.size >= 2, `${approved.size} serving CSRs approved: the join's, and the re-issue under CA 2`);
    const serving = await readFile(join(node.dir, 'kubelet-serving-pki', 'kubelet-server-current.pem'), 'utf8');
    t.equal(issuerPin(serving, only2), ca2Pin, 'its serving certificate chains to CA 2');
    // The API server verifies the kubelet against CA 2 alone now (--kubelet-certificate-authority), and the kubelet its client against CA 2 alone.
    const healthz = await plane.admin.request('GET', `/api/v1/nodes/${REAL}/proxy/healthz`);
    t.same([healthz.status, healthz.body], [200, 'ok'], 'GET /api/v1/nodes/<n>/proxy/healthz works, CA 2 on both sides');
    const issuedAt = (await stat(join(node.kubeletCertDir, 'kubelet-client-current.pem'))).mtimeMs;
    const at = (ms: number) => `+${Math.round((ms - steps.bundlePublished!) / 1000)} s`;
    t.comment(
      `real kubelet: restarts at ${kubeletRestarts.map((r) => `${at(r.at)} (took ${r.tookMs} ms)`).join(', ')}; signer switched ${at(steps.signerSwitched!)}, ` +
        `CA 2 certificate written ${at(issuedAt)}, first request with it ${at(firstOnCa2!.start)} (${Math.round(firstOnCa2!.start - issuedAt)} ms later), ` +
        `last request with an older one ${lastOther ? at(lastOther.start) : 'none'}; retire ${at(steps.retired!)}, done ${at(steps.done!)} (times from the bundle's publication)`,
    );
  });

  t.test('after the rotation: an older signed bundle and the retired CA are refused, and nothing changes', async (t) => {
    const only2Hash = only2.hash;
    const before = await Promise.all(nodes.map((n) => restarts(n)));
    const cases: { name: string; publish: () => Promise<void>; reason: string }[] = [
      {
        name: 'the step-4 ConfigMap replayed whole (CA 1 + CA 2, a statement CA 2 signed, an older version)',
        publish: () => replay(snapshots['both with the signer, signed by CA 2']!),
        reason: 'replayed',
      },
      {
        name: 'the step-1 ConfigMap replayed whole (signed by CA 1, retired since)',
        publish: () => replay(snapshots['both, signed by CA 1']!),
        reason: 'untrusted-signer',
      },
      {
        name: "the retired CA's key signing CA 1 back in, as new as it likes",
        publish: () => publishRaw(bundle12, signedBy({ certPem: ca1Pem, keyPem: plane.caKeyPem }, bundle12)),
        reason: 'untrusted-signer',
      },
    ];
    for (const c of cases) {
      await c.publish();
      await everyNode(`every node to refuse ${c.name}`, (a) => a.refused === c.reason);
      await everyNodeTrusts(t, only2Hash, `${c.name}: CA 2 alone`);
    }
    // The admin puts the final bundle back, signed anew.
    t.equal((await caRotation(t, 'publish', join(plane.dir, 'ca2.crt'), '--ca-key', join(plane.dir, 'ca2.key'))).code, 0);
    await everyNode('every node to accept CA 2 alone again', (a) => a.refused === null && a.bundle === only2Hash);
    t.same(await Promise.all(nodes.map((n) => restarts(n))), before, 'no node restarted anything');
    for (const [i, daemon] of daemons.entries()) t.equal(daemon.child.exitCode, null, `${NODES[i]}: kubeboot still runs`);
  });

  t.test('every request was authenticated; no bootstrap token was used after the join', async (t) => {
    const events = (await readFile(plane.auditLog!, 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { stage: string; responseStatus?: { code?: number }; user?: { username?: string }; requestURI: string });
    const unauthorized = events.filter((e) => e.responseStatus?.code === 401);
    t.same(
      unauthorized.map((e) => `${e.user?.username ?? '?'} ${e.requestURI}`),
      [],
      'no 401 in the audit log',
    );
    t.ok(
      events.some((e) => e.user?.username === 'system:node:rot-1' && e.requestURI.startsWith(CLUSTER_INFO)),
      'nodes read cluster-info as themselves',
    );
  });

  t.test('kubeboot stops cleanly and printed no token or key', async (t) => {
    for (const [i, daemon] of daemons.entries()) {
      daemon.child.kill('SIGTERM');
      const r = await daemon.done;
      t.equal(r.code, 0, `${NODES[i]}: exit 0 on SIGTERM`);
      assertNoSecrets(t, r.stdout + r.stderr, `kubeboot run (${NODES[i]})`);
      t.match(r.stdout + r.stderr, /CA rotation: adopting the CA bundle/, `${NODES[i]}: says what it adopted`);
    }
  });

  const ROLES = '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/roles';
  const BINDINGS = '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings';

  /** A Role in kube-public on cluster-info alone, with these verbs, bound to one subject. */
  async function grantClusterInfo(name: string, verbs: string[], subject: { kind: 'User' | 'Group'; name: string }): Promise<void> {
    expectCreated(
      await plane!.admin.request('POST', ROLES, {
        metadata: { name },
        rules: [{ apiGroups: [''], resources: ['configmaps'], resourceNames: ['cluster-info'], verbs }],
      }),
    );
    expectCreated(
      await plane!.admin.request('POST', BINDINGS, {
        metadata: { name },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', ...subject }],
      }),
    );
  }

  /** A user bound to exactly get and update on kube-public/cluster-info: no pods, secrets, nodes or CSRs. */
  async function clusterInfoWriter(): Promise<KubeClient> {
    if ((await plane!.admin.request('GET', `${ROLES}/cluster-info-writer`)).status === 404)
      await grantClusterInfo('cluster-info-writer', ['get', 'update'], { kind: 'User', name: 'mallory' });
    const cert = await plane!.mintClientCert({ commonName: 'mallory' });
    return new KubeClient({ server: plane!.server, caPem: adminCaPem }, { kind: 'client-certificate', ...cert });
  }

  async function grantNodesWrite(on: boolean): Promise<void> {
    if (on) return grantClusterInfo('careless-node-write', ['update', 'patch'], { kind: 'Group', name: 'system:nodes' });
    await plane!.admin.request('DELETE', `${BINDINGS}/careless-node-write`);
    await plane!.admin.request('DELETE', `${ROLES}/careless-node-write`);
  }
}

function expectCreated(res: { status: number; body: unknown }): void {
  if (res.status !== 201) throw new Error(`expected 201, got ${res.status}: ${JSON.stringify(res.body).slice(0, 300)}`);
}

async function expiredCa(): Promise<string> {
  const pair = await generateKeyPair();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '0102',
    name: subjectName({ commonName: 'expired-ca' }),
    notBefore: new Date(Date.now() - 10 * 86400_000),
    notAfter: new Date(Date.now() - 86400_000),
    keys: pair.keys,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
  });
  return cert.toString('pem');
}

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else if (e.isFile()) out.push(p);
  }
  return out;
}
