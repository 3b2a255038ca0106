// The decisions `kubeboot bootstrap|run --server --token` makes before any
// request: what is missing, what already exists, what is refused; and what a
// join writes. The node's files are in memory (memoryStore), except in the
// one test of the bootstrap kubeconfig on disk (its mode, its directory's).
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import type { Config } from '../../../agent/config/types.js';
import { ExitCode } from '../../../agent/errors.js';
import { openPass } from '../../../agent/bootstrap/pass.js';
import { joinCluster } from '../../../agent/bootstrap/join.js';
import { parseBootstrapKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { renderBootstrapKubeconfig } from '../../../agent/kubeconfig/render.js';
import { silentLogger } from '../../../agent/log.js';
import { signDetachedJws } from '../../../agent/pki/jws.js';
import { caCertHash } from '../../../agent/pki/pin.js';
import { readOptional } from '../../../agent/read-optional.js';
import type { Store } from '../../../agent/store/store.js';
import { FakeClock } from '../../support/fake-time.js';
import { runOn } from '../../support/fake-time.js';
import { clusterInfoKubeconfig } from '../../support/kubeconfig.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa } from '../../support/pki.js';

const TOKEN = 'abcdef.0123456789abcdef';
// Nothing listens on port 1: a test that reached discovery would fail, not pass.
const SERVER = 'https://127.0.0.1:1';
const API = 'https://api.test:6443';
const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
const ca = await createCa('cluster-ca');

const joining = (config: Config, store: Store = memoryStore()) =>
  openPass(config, { logger: silentLogger(), clock: new FakeClock(), store }, { join: true });

function nodeConfig(over: Partial<Config>, dir = '/node'): Config {
  const c = defaultConfig('worker-1');
  c.bootstrapKubeconfig = join(dir, 'etc/kubernetes/bootstrap-kubelet.conf');
  c.kubelet.kubeconfig = join(dir, 'etc/kubernetes/kubelet.conf');
  c.kubelet.certDir = join(dir, 'pki');
  c.stateDir = join(dir, 'state');
  c.kubeProxy.enabled = false;
  return { ...c, ...over };
}

/** An API server whose cluster-info carries `ca`, signed for the token when `signed`. */
function apiServer(t: Test, signed: boolean) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const pool = agent.get(API);
  const kubeconfig = clusterInfoKubeconfig(API, ca.certPem);
  const data = signed ? { kubeconfig, 'jws-kubeconfig-abcdef': signDetachedJws(kubeconfig, 'abcdef', '0123456789abcdef') } : { kubeconfig };
  pool.intercept({ path: CLUSTER_INFO, method: 'GET' }).reply(200, JSON.stringify({ data })).persist();
  pool.intercept({ path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', method: 'POST' }).reply(401, '{}').persist();
  return agent;
}

t.test('without --server, --token or --token-file nothing happens', async (t) => {
  const store = memoryStore();
  t.equal((await joining(nodeConfig({}), store)).found, null, 'not even looked for');
  t.same(store.writes, []);
});

t.test('incomplete or contradictory join settings are bad input naming the setting', async (t) => {
  const cases: [Partial<Config>, string][] = [
    [{ token: TOKEN }, 'configuration: server (--server, KUBEBOOT_SERVER): missing: a join token needs the API server URL'],
    [
      { server: SERVER },
      `configuration: token (--token, --token-file, KUBEBOOT_TOKEN): missing: joining ${SERVER} needs a bootstrap token`,
    ],
    [
      { server: SERVER, token: TOKEN, tokenFile: '/node/token' },
      'configuration: tokenFile (--token-file): cannot be combined with token; give one',
    ],
    [
      { server: SERVER, token: TOKEN },
      `joining ${SERVER} needs --ca-cert-hash sha256:… (kubeboot user-data and join-command print it) to trust the CA it discovers; --unsafe-skip-ca-verification trusts any`,
    ],
  ];
  for (const [over, message] of cases) await t.rejects(joining(nodeConfig(over)), { message, code: ExitCode.badInput });
});

t.test('an existing bootstrap kubeconfig is used as it is, never overwritten', async (t) => {
  const config = nodeConfig({ server: SERVER, token: TOKEN });
  const store = memoryStore({ [config.bootstrapKubeconfig]: 'operator content\n' });
  t.equal((await joining(config, store)).found?.kind, 'invalid', 'found, and used as it is (here: to fail)');
  t.equal(store.files.get(config.bootstrapKubeconfig), 'operator content\n');
  t.same(store.writes, []);
});

t.test('a token file already deleted after an earlier join is reported, not fatal', async (t) => {
  const config = nodeConfig({ server: SERVER, tokenFile: '/node/gone' });
  const store = memoryStore();
  t.same((await joining(config, store)).found, { kind: 'absent' });
  t.same(store.writes, [], 'nothing written');
});

t.test('the rendered bootstrap kubeconfig reads back with its CA and credential', async (t) => {
  const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
  const file = '/node/b.conf';
  const withFile = await parseBootstrapKubeconfig(
    file,
    renderBootstrapKubeconfig({ server: 'https://api:6443/', caPem: pem, credential: { tokenFile: '/etc/kubernetes/bootstrap-token' } }),
    async (p) => (p === '/etc/kubernetes/bootstrap-token' ? TOKEN : null),
  );
  t.match(withFile, {
    server: 'https://api:6443',
    caPem: pem,
    tokenFile: '/etc/kubernetes/bootstrap-token',
    auth: { kind: 'bootstrap-token', tokenId: 'abcdef' },
  });
  const inline = await parseBootstrapKubeconfig(
    file,
    renderBootstrapKubeconfig({ server: 'https://api:6443', caPem: pem, credential: { token: TOKEN } }),
    readOptional,
  );
  t.match(inline, { tokenFile: null, auth: { kind: 'bootstrap-token', token: TOKEN } });
});

t.test('a token cluster-info has no signature for ends the join with exit 5, and nothing holding the token is written', async (t) => {
  for (const via of ['--token', '--token-file'] as const) {
    const agent = apiServer(t, false);
    const tokenFile = '/node/etc/kubernetes/bootstrap-token';
    const store = memoryStore(via === '--token-file' ? { [tokenFile]: `${TOKEN}\n` } : {});
    const config = nodeConfig({
      server: API,
      ...(via === '--token' ? { token: TOKEN } : { tokenFile }),
      caCertHashes: [caCertHash(ca.certPem)],
    });
    const clock = new FakeClock();
    const err = await runOn(clock, openPass(config, { logger: silentLogger(), clock, dispatcher: agent, store }, { join: true }));
    t.match(err, { code: ExitCode.tokenNotSigned, message: /^no signature for token abcdef in kube-public\/cluster-info: / }, via);
    t.same(store.writes, [], `${via}: nothing written`);
    const holding = [...store.files].filter(([, text]) => text.includes('0123456789abcdef')).map(([file]) => file);
    t.same(holding, via === '--token' ? [] : [tokenFile], `${via}: the secret is only in a token file the operator gave`);
  }
});

t.test('a join writes the bootstrap kubeconfig through the store: the discovered CA, the token file named, not copied', async (t) => {
  const tokenFile = '/node/etc/kubernetes/bootstrap-token';
  const store = memoryStore({ [tokenFile]: `${TOKEN}\n` });
  const config = nodeConfig({ server: API, tokenFile, caCertHashes: [caCertHash(ca.certPem)] });
  const joined = await joinCluster(config, { logger: silentLogger(), clock: new FakeClock(), dispatcher: apiServer(t, true), store });
  t.same(store.writes, [config.bootstrapKubeconfig]);
  t.match(joined, { file: config.bootstrapKubeconfig, server: API, caPem: ca.certPem, tokenFile, auth: { tokenId: 'abcdef' } });
  const text = store.files.get(config.bootstrapKubeconfig)!;
  t.notMatch(text, '0123456789abcdef', 'the token stays in its file');
  t.same(
    await parseBootstrapKubeconfig(config.bootstrapKubeconfig, text, store.read),
    joined,
    'what a later pass reads is what this one kept',
  );
});

t.test('on disk the bootstrap kubeconfig is 0600, its new directories 0755, and no temp file is left', async (t) => {
  const dir = t.testdir();
  const config = nodeConfig({ server: API, token: TOKEN, caCertHashes: [caCertHash(ca.certPem)] }, dir);
  await joinCluster(config, { logger: silentLogger(), clock: new FakeClock(), dispatcher: apiServer(t, true) });
  t.equal((await stat(config.bootstrapKubeconfig)).mode & 0o777, 0o600);
  t.equal((await stat(join(dir, 'etc/kubernetes'))).mode & 0o777, 0o755);
  t.equal((await stat(join(dir, 'etc'))).mode & 0o777, 0o755);
  t.same(await readdir(join(dir, 'etc/kubernetes')), ['bootstrap-kubelet.conf']);
  t.match(await readFile(config.bootstrapKubeconfig, 'utf8'), `token: ${TOKEN}`);
});
