// Issuing one identity's credential, with the API server mocked (MockAgent),
// the files in memory (memoryStore) and time on a FakeClock: what is kept,
// what is cleared and what is never written, for each way a CSR can end.
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { type IssueContext, issueCredential, requestedExpiration } from '../../../agent/credential/issue.js';
import { CsrRejectedError, IdentityMismatchError, KubebootError, TimedOutError } from '../../../agent/errors.js';
import { currentCertPath } from '../../../agent/identity.js';
import { KubeClient } from '../../../agent/kube/client.js';
import { silentLogger } from '../../../agent/log.js';
import { parseCertificateChain } from '../../../agent/pki/certificate.js';
import { csrName } from '../../../agent/pki/csr-name.js';
import { generateKey, parsePrivateKey } from '../../../agent/pki/keys.js';
import { createCsrPem, parseCsrPem } from '../../../agent/pki/pkcs10.js';
import { pendingKeyPath } from '../../../agent/store/pending-key.js';
import { FakeClock } from '../../support/fake-time.js';
import { runOn } from '../../support/fake-time.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa, signRequest } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const REVIEWS = '/apis/authentication.k8s.io/v1/selfsubjectreviews';
const config = defaultConfig('worker-1');
const kubelet = identitiesFor(config)[0]!;
const ca = await createCa('cluster-ca');
const otherCa = await createCa('not-the-cluster-ca');
const cluster = { server: SERVER, caPem: ca.certPem, tlsServerName: null };
const pendingPath = pendingKeyPath(config.stateDir, 'kubelet');

/** A key left pending by an earlier run, its CSR, its name and a certificate `signer` issued for it. */
async function pendingCsr(signer = ca) {
  const key = await generateKey('ecdsa-p256');
  const requestPem = await createCsrPem({ key, subject: kubelet.subject });
  const name = csrName(key.publicKeyDer, kubelet.subject, kubelet.usages);
  // Newline-terminated, as the API server's PEM is.
  return { key, name, certPem: `${(await signRequest(signer, requestPem, { usage: 'client' })).trim()}\n` };
}

const csrObject = (name: string, o: { conditions?: object[]; certPem?: string } = {}) => ({
  kind: 'CertificateSigningRequest',
  metadata: { name, uid: 'uid-1', resourceVersion: '5' },
  spec: { request: '', signerName: kubelet.signerName },
  status: { conditions: o.conditions ?? [], ...(o.certPem ? { certificate: Buffer.from(o.certPem).toString('base64') } : {}) },
});
const approved = [{ type: 'Approved', status: 'True', reason: 'AutoApproved' }];

function setup(t: Test, store = memoryStore()) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const pool = agent.get(SERVER);
  const clock = new FakeClock(new Date());
  const ctx: IssueContext = {
    logger: silentLogger(),
    clock,
    store,
    dispatcher: agent,
    cluster,
    requester: new KubeClient(cluster, { kind: 'token', token: 'abcdef.0123456789abcdef' }, agent),
    stateDir: config.stateDir,
    keyAlgorithm: 'ecdsa-p256',
    expirationSeconds: null,
    reuseKeyPem: null,
    waitTimeoutMs: 60_000,
    pendingNoticeMs: 600_000,
  };
  const serve = (o: {
    list: object;
    whoami?: string;
    created?: (body: { metadata: { name: string }; spec: { request: string } }) => void;
    stayPending?: boolean;
  }) => {
    pool.intercept({ path: CSRS, method: 'POST' }).reply((req) => {
      const body = JSON.parse(String(req.body));
      o.created?.(body);
      return { statusCode: 201, data: csrObject(body.metadata.name) };
    });
    const list = pool
      .intercept({ path: (p) => p.startsWith(`${CSRS}?`) && !p.includes('watch=true'), method: 'GET' })
      .reply(200, { metadata: { resourceVersion: '6' }, items: [o.list] });
    // A CSR left pending: watching is refused, so it is polled, and every poll finds it pending.
    if (o.stayPending) {
      list.persist();
      pool.intercept({ path: (p) => p.includes('watch=true'), method: 'GET' }).reply(403, { kind: 'Status', reason: 'Forbidden' });
    }
    pool.intercept({ path: REVIEWS, method: 'POST' }).reply(201, {
      status: { userInfo: { username: o.whoami ?? 'system:node:worker-1', groups: ['system:nodes', 'system:authenticated'] } },
    });
  };
  return { ctx, store, clock, serve, agent };
}

t.test(
  'a key pending from an earlier run is reused: same CSR, then the credential and its kubeconfig are kept and the key cleared',
  async (t) => {
    const earlier = await pendingCsr();
    const { ctx, store, serve } = setup(t, memoryStore({ [pendingPath]: earlier.key.pem }));
    let sent = '';
    serve({ list: csrObject(earlier.name, { conditions: approved, certPem: earlier.certPem }), created: (b) => (sent = b.metadata.name) });
    const issued = await issueCredential(kubelet, ctx);
    t.equal(sent, earlier.name, 'the CSR name of the pending key: the CSR already on the server is adopted');
    t.equal(issued.csrName, earlier.name);
    const current = await store.current(kubelet);
    t.equal(current?.certPem, earlier.certPem, 'the certificate is current');
    t.equal(current?.keyPem, earlier.key.pem, 'with the pending key');
    const kubeconfig = store.files.get(kubelet.kubeconfigPath!) ?? '';
    t.match(kubeconfig, `client-certificate: ${currentCertPath(kubelet)}`, 'the kubeconfig names -current.pem');
    t.match(kubeconfig, `server: ${SERVER}`);
    t.notOk(store.files.has(pendingPath), 'the pending key is gone');
    t.same(issued.notAfter, parseCertificateChain(earlier.certPem)[0]!.notAfter, 'valid until what the certificate says');
  },
);

t.test('a renewal with the same cluster leaves the kubeconfig as it is', async (t) => {
  const first = await pendingCsr();
  const { ctx, store, serve } = setup(t, memoryStore({ [pendingPath]: first.key.pem }));
  serve({ list: csrObject(first.name, { conditions: approved, certPem: first.certPem }) });
  await issueCredential(kubelet, ctx);
  const second = await pendingCsr();
  await store.pendingKey.save(config.stateDir, 'kubelet', second.key.pem);
  serve({ list: csrObject(second.name, { conditions: approved, certPem: second.certPem }) });
  store.writes.length = 0;
  await issueCredential(kubelet, ctx);
  t.notOk(store.writes.includes(kubelet.kubeconfigPath!), 'not rewritten');
  t.equal((await store.current(kubelet))?.certPem, second.certPem, 'the new certificate is current');
});

t.test('a fresh key is kept before the CSR leaves; a denied CSR clears it and stores nothing', async (t) => {
  const { ctx, store, serve } = setup(t);
  let keptWhenSent: string | undefined;
  let request = '';
  serve({
    list: csrObject('ignored', { conditions: [{ type: 'Denied', status: 'True', reason: 'NotThisNode', message: 'no' }] }),
    created: (b) => {
      keptWhenSent = store.files.get(pendingPath);
      request = Buffer.from(b.spec.request, 'base64').toString('utf8');
    },
  });
  const err = await issueCredential(kubelet, ctx).catch((e: unknown) => e);
  t.type(err, CsrRejectedError);
  t.match((err as Error).message, /was denied: NotThisNode \(no\)/);
  t.ok(keptWhenSent, 'the key was kept when the CSR was sent');
  const kept = await parsePrivateKey(keptWhenSent!);
  t.same(Buffer.from((await parseCsrPem(request)).publicKeyDer), Buffer.from(kept.publicKeyDer), 'and it is the key of the CSR');
  t.notOk(store.files.has(pendingPath), 'denied: the next attempt starts over with a new key');
  t.equal(await store.current(kubelet), null, 'nothing stored');
});

t.test('a wait that times out keeps the pending key, so a restart adopts the same CSR', async (t) => {
  const { ctx, store, clock, serve } = setup(t);
  serve({ list: csrObject('pending'), stayPending: true });
  const err = await runOn(clock, issueCredential(kubelet, ctx), 3);
  t.type(err, TimedOutError);
  t.ok(store.files.has(pendingPath), 'the key stays');
  t.equal(await store.current(kubelet), null, 'nothing stored');
});

t.test('a certificate the API server does not accept as this node is not kept, and the key is cleared', async (t) => {
  const earlier = await pendingCsr();
  const { ctx, store, serve } = setup(t, memoryStore({ [pendingPath]: earlier.key.pem }));
  serve({ list: csrObject(earlier.name, { conditions: approved, certPem: earlier.certPem }), whoami: 'system:node:worker-2' });
  const err = await issueCredential(kubelet, ctx).catch((e: unknown) => e);
  t.type(err, IdentityMismatchError);
  t.match((err as Error).message, /sees the new certificate as system:node:worker-2 .*keeping the previous credential/);
  t.equal(await store.current(kubelet), null, 'nothing stored');
  t.notOk(store.files.has(kubelet.kubeconfigPath!), 'no kubeconfig written');
  t.notOk(store.files.has(pendingPath), 'the same CSR would give the same certificate: start over');
});

t.test('a certificate from another CA is refused before it is proven or kept', async (t) => {
  const earlier = await pendingCsr(otherCa);
  const { ctx, store, serve, agent } = setup(t, memoryStore({ [pendingPath]: earlier.key.pem }));
  serve({ list: csrObject(earlier.name, { conditions: approved, certPem: earlier.certPem }) });
  const err = await issueCredential(kubelet, ctx).catch((e: unknown) => e);
  t.type(err, KubebootError);
  t.match((err as Error).message, /was signed but the certificate is not acceptable/);
  t.equal(await store.current(kubelet), null, 'nothing stored');
  t.notOk(store.files.has(pendingPath), 'key cleared');
  t.match(
    agent.pendingInterceptors().map((i) => i.path),
    [REVIEWS],
    'the SelfSubjectReview was never sent',
  );
});

t.test("kube-proxy and serving CSRs ask for at most a day, configured or not; the kubelet's for what is configured", async (t) => {
  const all = identitiesFor({ ...config, kubeletServing: { ...config.kubeletServing, enabled: true, ipAddresses: ['10.0.0.7'] } });
  const by = (name: string) => all.find((i) => i.name === name)!;
  const day = 24 * 3600;
  for (const name of ['kube-proxy', 'kubelet-serving']) {
    t.equal(requestedExpiration(by(name), null), day, `${name}: a day when none is configured (the signer's default is a year)`);
    t.equal(requestedExpiration(by(name), 3600), 3600, `${name}: a shorter one configured`);
    t.equal(requestedExpiration(by(name), 30 * day), day, `${name}: never more than a day`);
  }
  t.equal(requestedExpiration(by('kubelet'), null), null, "the kubelet client's is left to the signer");
  t.equal(requestedExpiration(by('kubelet'), 30 * day), 30 * day);
});
