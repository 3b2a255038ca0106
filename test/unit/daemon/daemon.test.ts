// The daemon's loops driven with a fake clock and undici's MockAgent: no
// sleeps, no control plane. The real control plane proves the same daemon
// end to end in test/e2e/daemon.test.ts.
import { mkdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import type { Config } from '../../../agent/config/types.js';
import { Daemon } from '../../../agent/daemon/daemon.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { renderClientKubeconfig } from '../../../agent/kubeconfig/render.js';
import { createLogger } from '../../../agent/log.js';
import { storeCredential } from '../../../agent/store/cert-store.js';
import { writeFileAtomic } from '../../../agent/store/atomic.js';
import { FakeClock } from '../../../agent/time/clock.js';
import { listenNotifySocket } from '../../support/notify-socket.js';
import { createCa, issueLeaf, signRequest, type CertAndKey } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const logger = createLogger({ level: 'error', format: 'json' });

interface Node {
  config: Config;
  ca: CertAndKey;
  agent: MockAgent;
  clock: FakeClock;
  daemon: Daemon;
  stop: () => Promise<void>;
}

/** A node whose kubelet already holds a valid certificate; kube-proxy as asked. */
async function node(t: Test, o: { kubeProxy: boolean; env?: NodeJS.ProcessEnv }): Promise<Node> {
  // Teardowns run in the order they were added, and t.testdir() adds the
  // fixture's removal: the daemon must be stopped first, or it writes into
  // a directory being removed (ENOTEMPTY) and runs on with its files gone.
  const stopper = new AbortController();
  let running: Promise<void> | null = null;
  let agent: MockAgent | null = null;
  const stop = async () => {
    stopper.abort();
    await running;
    await agent?.close();
  };
  t.teardown(stop);
  const dir = t.testdir();
  const config = defaultConfig('n1');
  Object.assign(config, {
    bootstrapKubeconfig: join(dir, 'bootstrap-kubelet.conf'),
    stateDir: join(dir, 'state'),
    listen: null,
    waitTimeout: 60,
  });
  // The CA rotation's own loop is driven in test/unit/trust/keeper.test.ts.
  config.caRotation = { ...config.caRotation, enabled: false };
  config.kubelet = { ...config.kubelet, kubeconfig: join(dir, 'kubelet.conf'), certDir: join(dir, 'kubelet-pki') };
  config.kubeProxy = {
    ...config.kubeProxy,
    enabled: o.kubeProxy,
    kubeconfig: join(dir, 'kube-proxy.conf'),
    certDir: join(dir, 'proxy-pki'),
  };
  const ca = await createCa('unit-ca');
  const leaf = await issueLeaf(ca, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' });
  const kubelet = identitiesFor(config)[0]!;
  await mkdir(kubelet.certDir, { recursive: true });
  const stored = await storeCredential(kubelet, leaf.certPem, leaf.keyPem, new Date());
  await writeFileAtomic(
    config.kubelet.kubeconfig,
    renderClientKubeconfig({
      server: SERVER,
      caPem: ca.certPem,
      certFile: stored.currentPath,
      keyFile: stored.currentPath,
      userName: 'default-auth',
      tlsServerName: null,
    }),
    { mode: 0o600 },
  );

  agent = new MockAgent();
  agent.disableNetConnect();
  const clock = new FakeClock(new Date());
  const daemon = new Daemon({
    config,
    logger,
    signal: stopper.signal,
    reload: async () => config,
    env: o.env ?? {},
    clock,
    random: () => 0.5,
    dispatcher: agent,
  });
  running = daemon.run();
  return { config, ca, agent, clock, daemon, stop };
}

/**
 * A reply held back longer than the test runs, so the request is in flight
 * throughout; short enough that a teardown racing it ends in a minute, not
 * at tap's 20-minute timeout (seen once on a loaded machine).
 */
const NEVER_IN_THIS_TEST_MS = 60_000;

/** Resolves once `probe` holds, letting the daemon's promise chains run in between; not a sleep. */
async function until(what: string, probe: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    if (await probe()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`never saw: ${what}`);
}

t.test('READY waits only for the kubelet: kube-proxy pending does not hold the node back', async (t) => {
  // Abstract: no directory is used, so the node's fixture is still removed only after the daemon stopped.
  const notify = await listenNotifySocket(tmpdir(), { abstract: true });
  t.teardown(() => notify.close());
  const n = await node(t, { kubeProxy: true, env: { NOTIFY_SOCKET: notify.path, PATH: process.env.PATH } });
  let csrPosted = false;
  // The kube-proxy CSR goes out and is never answered: no approver.
  n.agent
    .get(SERVER)
    .intercept({ path: CSRS, method: 'POST' })
    .reply(() => {
      csrPosted = true;
      return {
        statusCode: 201,
        data: {
          kind: 'CertificateSigningRequest',
          metadata: { name: 'node-csr-x', uid: 'u1' },
          spec: { request: '', signerName: 'kubernetes.io/kube-apiserver-client' },
        },
      };
    })
    .delay(NEVER_IN_THIS_TEST_MS);
  const ready = await notify.waitFor((m) => m.includes('READY=1'), 30_000);
  t.match(ready, /STATUS=kubelet ready; pending: kube-proxy: /, 'systemd hears READY=1 with kube-proxy named as pending');
  await until('the kube-proxy CSR request', () => csrPosted);
  t.ok(n.daemon.nodeReady(), 'the node is ready: the kubelet credential is valid');
  t.notOk(n.daemon.readiness().ready, '/readyz is not: kube-proxy has no credential');
  t.match(n.daemon.readiness().detail.join('\n'), /^kube-proxy: (?!valid)/m, 'and it says which identity is missing');
});

t.test('a loop stuck in one pass fails the liveness check; sleeping loops never do', async (t) => {
  const n = await node(t, { kubeProxy: true });
  let csrPosted = false;
  n.agent
    .get(SERVER)
    .intercept({ path: CSRS, method: 'POST' })
    .reply(() => {
      csrPosted = true;
      return { statusCode: 201, data: {} };
    })
    .delay(NEVER_IN_THIS_TEST_MS);
  await until('the kube-proxy CSR request', () => csrPosted);
  t.ok(n.daemon.healthy(), 'healthy while the pass is young');
  // waitTimeout 60 s: a pass is bounded by 4 × 60 s + 5 min, plus 30 s of grace.
  await n.clock.tick(9 * 60_000 + 29_000);
  t.ok(n.daemon.healthy(), 'still healthy just inside the bound');
  await n.clock.tick(2_000);
  t.notOk(n.daemon.healthy(), 'the kube-proxy loop, stuck in its request, is reported');
});

t.test('a daemon asleep for a day stays healthy: each loop shows life every minute', async (t) => {
  const n = await node(t, { kubeProxy: false });
  await until('the kubelet loop to go to sleep', () => n.clock.pending > 0);
  for (let hour = 0; hour < 24; hour++) await n.clock.tick(3_600_000);
  t.ok(n.daemon.healthy(), 'healthy after 24 h of fake time');
});

t.test('kubelet files deleted behind its back: renewed with the credential still held in memory', async (t) => {
  const n = await node(t, { kubeProxy: false });
  const pool = n.agent.get(SERVER);
  await until('the kubelet loop to go to sleep', () => n.clock.pending > 0);
  let issued = '';
  pool.intercept({ path: CSRS, method: 'POST' }).reply(async (opts) => {
    const body = JSON.parse(String(opts.body)) as { metadata: { name: string }; spec: { request: string; signerName: string } };
    issued = await signRequest(n.ca, Buffer.from(body.spec.request, 'base64').toString(), { usage: 'client' });
    return { statusCode: 201, data: { ...body, metadata: { ...body.metadata, uid: 'u1', resourceVersion: '1' } } };
  });
  pool.intercept({ path: (p) => p.startsWith(`${CSRS}?`), method: 'GET' }).reply(() => ({
    statusCode: 200,
    data: {
      metadata: { resourceVersion: '2' },
      items: [
        {
          metadata: { name: 'any', uid: 'u1' },
          spec: { request: '', signerName: '' },
          status: { conditions: [{ type: 'Approved', status: 'True' }], certificate: Buffer.from(issued).toString('base64') },
        },
      ],
    },
  }));
  pool
    .intercept({ path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', method: 'POST' })
    .reply(200, { status: { userInfo: { username: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] } } });

  await rm(n.config.kubelet.kubeconfig);
  n.daemon.nudge(['kubelet'], false);
  await until('kubelet.conf to be written again', async () =>
    (await readFile(n.config.kubelet.kubeconfig, 'utf8').catch(() => '')).includes('client-certificate'),
  );
  t.ok(issued, 'a CSR was signed: the renewal was authenticated with the in-memory credential, not a bootstrap token');
  t.same(n.agent.pendingInterceptors(), [], 'create, list and the SelfSubjectReview proof all happened');
  await until('the daemon to record the new credential', () => n.daemon.nodeReady());
  t.pass('ready again');
});
