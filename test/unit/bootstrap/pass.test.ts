// The whole bootstrap pass of a node (bootstrap/pass.ts openPass, bootstrapNode) with
// its files in memory (memoryStore), the API server mocked (MockAgent) and
// time on a FakeClock: who asks for which certificate, what is kept, and
// that a second pass on the same files asks for nothing.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { bootstrapNode, dryRunPlan, type FoundBootstrap, openPass, renewNode } from '../../../agent/bootstrap/pass.js';
import type { Assessment } from '../../../agent/credential/assess.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import type { Config } from '../../../agent/config/types.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import type { RunDeps } from '../../../agent/credential/issue.js';
import { BootstrapCredentialError, ExitCode } from '../../../agent/errors.js';
import type { Identity } from '../../../agent/identity.js';
import { renderBootstrapKubeconfig } from '../../../agent/kubeconfig/render.js';
import { silentLogger } from '../../../agent/log.js';
import { csrName } from '../../../agent/pki/csr-name.js';
import { signDetachedJws } from '../../../agent/pki/jws.js';
import { caCertHash } from '../../../agent/pki/pin.js';
import { readOptional } from '../../../agent/read-optional.js';
import { generateKey } from '../../../agent/pki/keys.js';
import { createCsrPem } from '../../../agent/pki/pkcs10.js';
import { pendingKeyPath } from '../../../agent/store/pending-key.js';
import { FakeClock } from '../../support/fake-time.js';
import { type MemoryStore, memoryStore } from '../../support/memory-store.js';
import { createCa, signRequest } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const TOKEN = 'abcdef.0123456789abcdef';
const ca = await createCa('cluster-ca');

/**
 * A node as cloud-init leaves it: the bootstrap kubeconfig, and (standing in
 * for the keys the pass would make) a pending key per identity, so the
 * signer's certificate for each CSR can be made before the CSR is sent.
 */
async function freshNode(t: Test) {
  const dir = t.testdir();
  const config = defaultConfig('worker-1');
  // Paths under the test's own directory: the pass reads the bootstrap kubeconfig from
  // the store, and the token's deletion (bootstrap/cleanup.ts, on disk) finds nothing of the machine's there.
  config.bootstrapKubeconfig = `${dir}/bootstrap-kubelet.conf`;
  const store = memoryStore({
    [config.bootstrapKubeconfig]: renderBootstrapKubeconfig({ server: SERVER, caPem: ca.certPem, credential: { token: TOKEN } }),
  });
  const issued = new Map<string, { identity: Identity; certPem: string }>();
  for (const identity of identitiesFor(config)) {
    const key = await generateKey('ecdsa-p256');
    await store.pendingKey.save(config.stateDir, identity.name, key.pem);
    const requestPem = await createCsrPem({ key, subject: identity.subject });
    const certPem = `${(await signRequest(ca, requestPem, { usage: 'client' })).trim()}\n`;
    issued.set(csrName(key.publicKeyDer, identity.subject, identity.usages), { identity, certPem });
  }
  return { config, store, issued };
}

/** An API server whose signer has issued every CSR in `issued`, and that knows each client by the order of the proofs. */
function apiServer(t: Test, issued: Map<string, { identity: Identity; certPem: string }>, provesAs: string[]) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const pool = agent.get(SERVER);
  const posted: { csr: string; authorization: string | undefined }[] = [];
  const csr = (name: string) => ({
    kind: 'CertificateSigningRequest',
    metadata: { name, uid: `uid-${name}`, resourceVersion: '5' },
    spec: { request: '', signerName: issued.get(name)!.identity.signerName },
    status: {
      conditions: [{ type: 'Approved', status: 'True', reason: 'AutoApproved' }],
      certificate: Buffer.from(issued.get(name)!.certPem).toString('base64'),
    },
  });
  pool
    .intercept({ path: CSRS, method: 'POST' })
    .reply((req) => {
      const name = JSON.parse(String(req.body)).metadata.name as string;
      const headers = req.headers as Record<string, string>;
      posted.push({ csr: name, authorization: headers.authorization });
      return { statusCode: 201, data: csr(name) };
    })
    .persist();
  pool
    .intercept({ path: (p) => p.startsWith(`${CSRS}?`), method: 'GET' })
    .reply((req) => {
      const name = decodeURIComponent(String(req.path)).match(/metadata\.name=([^&]+)/)![1]!;
      return { statusCode: 200, data: { metadata: { resourceVersion: '6' }, items: [csr(name)] } };
    })
    .persist();
  for (const username of provesAs)
    pool
      .intercept({ path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', method: 'POST' })
      .reply(201, { status: { userInfo: { username, groups: username.startsWith('system:node:') ? ['system:nodes'] : [] } } });
  return { agent, posted };
}

const depsFor = (store: ReturnType<typeof memoryStore>, agent: MockAgent): RunDeps => ({
  logger: silentLogger(),
  clock: new FakeClock(new Date()),
  store,
  dispatcher: agent,
});

t.test('a fresh node: the kubelet asks with the bootstrap token, kube-proxy with the kubelet certificate', async (t) => {
  const { config, store, issued } = await freshNode(t);
  const { agent, posted } = apiServer(t, issued, ['system:node:worker-1', 'system:kube-proxy']);
  const report = await bootstrapNode(await openPass(config, depsFor(store, agent)));
  t.same(
    report.outcomes.map((o) => [o.identity, o.action]),
    [
      ['kubelet', 'issued'],
      ['kube-proxy', 'issued'],
    ],
  );
  t.equal(report.usedBootstrap?.file, config.bootstrapKubeconfig, 'the bootstrap kubeconfig was used');
  const byIdentity = Object.fromEntries(posted.map((p) => [issued.get(p.csr)!.identity.name, p.authorization]));
  t.equal(byIdentity.kubelet, `Bearer ${TOKEN}`, "the kubelet's CSR carries the bootstrap token");
  t.equal(byIdentity['kube-proxy'], undefined, "kube-proxy's carries no token: the node's own certificate asks");
  for (const identity of identitiesFor(config)) {
    t.ok(await store.current(identity), `${identity.name}: a current credential`);
    t.ok(store.files.has(identity.kubeconfigPath!), `${identity.name}: its kubeconfig`);
    t.notOk(store.files.has(pendingKeyPath(config.stateDir, identity.name)), `${identity.name}: no pending key left`);
  }
  t.same(agent.pendingInterceptors(), [], 'both proofs were made');
});

t.test('a second pass on the same node keeps everything and sends nothing', async (t) => {
  const { config, store, issued } = await freshNode(t);
  const first = apiServer(t, issued, ['system:node:worker-1', 'system:kube-proxy']);
  t.ok((await bootstrapNode(await openPass(config, depsFor(store, first.agent)))).bootstrapKubeconfigDeleted);
  // The token is deleted on disk (bootstrap/cleanup.ts), which this store does not model: do here what that did.
  store.files.delete(config.bootstrapKubeconfig);
  const again = apiServer(t, issued, []);
  const report = await bootstrapNode(await openPass(config, depsFor(store, again.agent)));
  t.same(
    report.outcomes.map((o) => [o.identity, o.action]),
    [
      ['kubelet', 'kept'],
      ['kube-proxy', 'kept'],
    ],
  );
  t.equal(report.usedBootstrap, null);
  t.same(again.posted, [], 'no CSR');
});

t.test('onlyKubelet: the other identities are left to their own loops', async (t) => {
  const { config, store, issued } = await freshNode(t);
  const { agent, posted } = apiServer(t, issued, ['system:node:worker-1']);
  const report = await bootstrapNode(await openPass(config, depsFor(store, agent)), { onlyKubelet: true });
  t.same(
    report.outcomes.map((o) => o.identity),
    ['kubelet'],
  );
  t.equal(posted.length, 1);
  t.equal(report.bootstrapKubeconfigDeleted, false, 'not every identity is there: the token stays');
});

t.test('nothing usable and no bootstrap kubeconfig: says where to put one', async (t) => {
  const { config, issued } = await freshNode(t);
  const { agent, posted } = apiServer(t, issued, []);
  const err = await bootstrapNode(await openPass(config, depsFor(memoryStore(), agent))).catch((e: unknown) => e);
  t.type(err, BootstrapCredentialError);
  t.match((err as Error).message, `${config.bootstrapKubeconfig}: not found, and the kubelet has no usable credential`);
  t.match((err as Error).message, /place a bootstrap kubeconfig there/);
  t.same(posted, []);
});

/**
 * The store, counting what one pass does: reads of the bootstrap kubeconfig
 * (each one is also its one parse), store recoveries, and reads of
 * kube-proxy's kubeconfig: one per assessment of the node (assessNode), and
 * one when kube-proxy's credential is issued (issue.ts looks at the
 * kubeconfig it is about to replace).
 */
function counting(store: MemoryStore, config: Config) {
  const counts = { bootstrapReads: 0, recoveries: 0, proxyKubeconfigReads: 0 };
  const identities = identitiesFor(config);
  const proxyKubeconfig = identities.find((i) => i.name === 'kube-proxy')!.kubeconfigPath;
  const counted: MemoryStore = {
    ...store,
    read: async (file) => {
      if (file === config.bootstrapKubeconfig) counts.bootstrapReads++;
      if (file === proxyKubeconfig) counts.proxyKubeconfigReads++;
      return store.read(file);
    },
    recover: async (identity) => {
      counts.recoveries++;
      return store.recover(identity);
    },
  };
  const perPass = () => ({ ...counts, recoveries: counts.recoveries / identities.length });
  return { store: counted, perPass };
}

// `kubeboot bootstrap`, and `kubeboot renew` with no usable kubelet credential, run exactly this.
t.test('one pass reads the bootstrap kubeconfig once, and recovers and assesses the node once', async (t) => {
  const { config, store, issued } = await freshNode(t);
  const { agent } = apiServer(t, issued, ['system:node:worker-1', 'system:kube-proxy']);
  const { store: counted, perPass } = counting(store, config);
  const report = await bootstrapNode(await openPass(config, depsFor(counted, agent), { join: true }));
  t.ok(report.bootstrapKubeconfigDeleted, 'asked with it, then deleted it');
  t.same(perPass(), { bootstrapReads: 1, recoveries: 1, proxyKubeconfigReads: 2 }, 'kube-proxy: assessed once, then issued');
});

t.test('renew with no usable kubelet credential bootstraps within the same pass, recovering and assessing once', async (t) => {
  const { config, store, issued } = await freshNode(t);
  const { agent, posted } = apiServer(t, issued, ['system:node:worker-1', 'system:kube-proxy']);
  const { store: counted, perPass } = counting(store, config);
  await renewNode(await openPass(config, depsFor(counted, agent), { join: true }), null);
  t.equal(posted.length, 2, 'both identities issued');
  t.same(perPass(), { bootstrapReads: 1, recoveries: 1, proxyKubeconfigReads: 2 }, 'kube-proxy: assessed once, then issued');
});

t.test('a node whose credentials are all valid: one read of the bootstrap kubeconfig, to delete it', async (t) => {
  const { config, store, issued } = await freshNode(t);
  await bootstrapNode(await openPass(config, depsFor(store, apiServer(t, issued, ['system:node:worker-1', 'system:kube-proxy']).agent)));
  // A bootstrap kubeconfig dropped in again next to valid credentials: the kept kubelet credential is proven, then it goes.
  store.files.set(
    config.bootstrapKubeconfig,
    renderBootstrapKubeconfig({ server: SERVER, caPem: ca.certPem, credential: { token: TOKEN } }),
  );
  const { store: counted, perPass } = counting(store, config);
  const again = apiServer(t, issued, ['system:node:worker-1']);
  const report = await bootstrapNode(await openPass(config, depsFor(counted, again.agent), { join: true }));
  t.ok(report.bootstrapKubeconfigDeleted);
  t.same(again.posted, [], 'no CSR');
  t.same(perPass(), { bootstrapReads: 1, recoveries: 1, proxyKubeconfigReads: 1 }, 'kube-proxy: assessed once');
});

t.test('joining with --server/--token: the CA is discovered once and the written kubeconfig is not read back', async (t) => {
  const { config, store, issued } = await freshNode(t);
  store.files.delete(config.bootstrapKubeconfig);
  config.server = SERVER;
  config.token = TOKEN;
  config.caCertHashes = [caCertHash(ca.certPem)];
  const { agent, posted } = apiServer(t, issued, ['system:node:worker-1', 'system:kube-proxy']);
  const kubeconfig = `apiVersion: v1\nclusters:\n- cluster:\n    server: ${SERVER}\n    certificate-authority-data: ${Buffer.from(ca.certPem).toString('base64')}\n`;
  let clusterInfoFetches = 0;
  agent
    .get(SERVER)
    .intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' })
    .reply(() => {
      clusterInfoFetches++;
      const data = { kubeconfig, 'jws-kubeconfig-abcdef': signDetachedJws(kubeconfig, 'abcdef', '0123456789abcdef') };
      return { statusCode: 200, data: JSON.stringify({ data }) };
    })
    .persist();
  const { store: counted, perPass } = counting(store, config);
  const report = await bootstrapNode(await openPass(config, depsFor(counted, agent), { join: true }));
  t.equal(report.usedBootstrap?.file, config.bootstrapKubeconfig, 'the kubeconfig the join wrote asked');
  t.equal(Object.fromEntries(posted.map((p) => [issued.get(p.csr)!.identity.name, p.authorization])).kubelet, `Bearer ${TOKEN}`);
  t.equal(clusterInfoFetches, 2, 'one discovery: the unverified fetch and its verified confirmation');
  t.same(
    perPass(),
    { bootstrapReads: 1, recoveries: 1, proxyKubeconfigReads: 2 },
    'read once, found absent; what the join wrote is kept in memory',
  );
  t.equal(await readOptional(config.bootstrapKubeconfig), null, 'written for later passes, deleted once every identity was proven');
});

/** An API server whose cluster-info is signed for TOKEN but that refuses TOKEN (401) at the CSR: deleted inside its 10 s cache of a success. */
function refusingServer(t: Test) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const pool = agent.get(SERVER);
  const kubeconfig = `apiVersion: v1\nclusters:\n- cluster:\n    server: ${SERVER}\n    certificate-authority-data: ${Buffer.from(ca.certPem).toString('base64')}\n`;
  const data = { kubeconfig, 'jws-kubeconfig-abcdef': signDetachedJws(kubeconfig, 'abcdef', '0123456789abcdef') };
  pool
    .intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' })
    .reply(200, JSON.stringify({ data }))
    .persist();
  const unauthorized = JSON.stringify({ kind: 'Status', status: 'Failure', reason: 'Unauthorized', code: 401, message: 'Unauthorized' });
  pool.intercept({ path: CSRS, method: 'POST' }).reply(401, unauthorized).persist();
  return agent;
}

t.test('a bootstrap token refused at the CSR is dead: exit 5 naming its id, and the operator’s bootstrap kubeconfig is kept', async (t) => {
  const { config, store } = await freshNode(t);
  const agent = refusingServer(t);
  const err = await bootstrapNode(await openPass(config, depsFor(store, agent))).catch((e: unknown) => e);
  t.match(err, { code: ExitCode.tokenNotSigned, message: /refuses bootstrap token abcdef \(401 Unauthorized\): the token is dead/ });
  t.notMatch((err as Error).message, /0123456789abcdef/, 'never the secret');
  t.ok(store.files.has(config.bootstrapKubeconfig), 'kept: a 401 is no proof the token is gone for good, and it may be the only copy');
  t.same(store.removes, []);
});

t.test(
  'a token refused at the CSR after a join: exit 5, and the kubeconfig the join wrote goes again, so a new --token is used next',
  async (t) => {
    const { config, store } = await freshNode(t);
    store.files.delete(config.bootstrapKubeconfig);
    config.server = SERVER;
    config.token = TOKEN;
    config.caCertHashes = [caCertHash(ca.certPem)];
    const agent = refusingServer(t);
    const err = await bootstrapNode(await openPass(config, depsFor(store, agent), { join: true })).catch((e: unknown) => e);
    t.match(err, {
      code: ExitCode.tokenNotSigned,
      message:
        /the token is dead .*join with it \(.*bootstrap-kubelet\.conf, written from the join settings moments ago, is removed again\)$/,
    });
    t.same(store.removes, [config.bootstrapKubeconfig]);
    t.notOk(store.files.has(config.bootstrapKubeconfig));
  },
);

t.test('the dry-run plan says who would ask for each missing credential, as the pass decides it', async (t) => {
  const config = defaultConfig('worker-1');
  const kubelet = identitiesFor(config)[0]!;
  const proxy = identitiesFor(config)[1]!;
  const missing = (identity: Identity) => ({ identity, state: 'unusable' as const, reason: 'missing', cluster: null });
  const usable = {
    identity: kubelet,
    state: 'usable' as const,
    certPem: '',
    keyPem: '',
    notAfter: new Date(),
    cluster: { server: SERVER, caPem: '', tlsServerName: null },
  };
  const bootstrap = { kind: 'kubeconfig', bootstrap: {} } as FoundBootstrap;
  const joining = { ...config, server: SERVER, token: TOKEN };
  const rows: [string, Config, Assessment, FoundBootstrap | null, [string | null, string | null]][] = [
    ['nothing, a bootstrap kubeconfig', config, missing(kubelet), bootstrap, ['bootstrap', 'kubelet']],
    ['nothing, one that cannot be read', config, missing(kubelet), null, ['bootstrap', 'kubelet']],
    ['nothing, join settings', joining, missing(kubelet), { kind: 'absent' }, ['join', 'kubelet']],
    ['nothing at all', config, missing(kubelet), { kind: 'absent' }, [null, null]],
    ['a kubelet credential, no bootstrap kubeconfig', config, usable, { kind: 'absent' }, ['(usable)', 'kubelet']],
  ];
  for (const [what, c, k, found, want] of rows) {
    const node = { kubelet: k, others: [missing(proxy)] };
    const { asker } = dryRunPlan(c, node, found);
    t.same([k.state === 'usable' ? '(usable)' : asker.get(k), asker.get(node.others[0]!)], want, what);
  }
});
