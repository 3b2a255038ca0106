// The decisions `kubeboot bootstrap|run --server --token` makes before any
// request: what is missing, what already exists, what is refused.
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import type { Config } from '../../../agent/config/types.js';
import { ExitCode } from '../../../agent/errors.js';
import { openPass } from '../../../agent/bootstrap/pass.js';
import { renderBootstrapKubeconfig } from '../../../agent/join/prepare.js';
import { parseBootstrapKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { silentLogger } from '../../../agent/log.js';
import { readOptional } from '../../../agent/read-optional.js';
import { caCertHash } from '../../../agent/pki/pin.js';
import { FakeClock, systemClock } from '../../../agent/time/clock.js';
import { runOn } from '../../support/fake-time.js';
import { clusterInfoKubeconfig } from '../../support/kubeconfig.js';
import { createCa } from '../../support/pki.js';

const deps = { logger: silentLogger(), clock: systemClock };
const joining = (config: Config) => openPass(config, deps, { join: true });
const TOKEN = 'abcdef.0123456789abcdef';
// Nothing listens on port 1: a test that reached discovery would fail, not pass.
const SERVER = 'https://127.0.0.1:1';

function nodeConfig(dir: string, over: Partial<Config>): Config {
  const c = defaultConfig('worker-1');
  c.bootstrapKubeconfig = join(dir, 'bootstrap-kubelet.conf');
  c.kubelet.kubeconfig = join(dir, 'kubelet.conf');
  c.kubelet.certDir = join(dir, 'pki');
  c.stateDir = join(dir, 'state');
  c.kubeProxy.enabled = false;
  return { ...c, ...over };
}

t.test('without --server, --token or --token-file nothing happens', async (t) => {
  t.equal((await joining(nodeConfig(t.testdir(), {}))).found, null, 'not even looked for');
});

t.test('incomplete or contradictory join settings are bad input naming the setting', async (t) => {
  const dir = t.testdir();
  const cases: [Partial<Config>, string][] = [
    [{ token: TOKEN }, 'configuration: server (--server, KUBEBOOT_SERVER): missing: a join token needs the API server URL'],
    [
      { server: SERVER },
      `configuration: token (--token, --token-file, KUBEBOOT_TOKEN): missing: joining ${SERVER} needs a bootstrap token`,
    ],
    [
      { server: SERVER, token: TOKEN, tokenFile: join(dir, 'token') },
      'configuration: tokenFile (--token-file): cannot be combined with token; give one',
    ],
    [
      { server: SERVER, token: TOKEN },
      `joining ${SERVER} needs --ca-cert-hash sha256:… (kubeboot user-data and join-command print it) to trust the CA it discovers; --unsafe-skip-ca-verification trusts any`,
    ],
  ];
  for (const [over, message] of cases) await t.rejects(joining(nodeConfig(dir, over)), { message, code: ExitCode.badInput });
});

t.test('an existing bootstrap kubeconfig is used as it is, never overwritten', async (t) => {
  const dir = t.testdir();
  const config = nodeConfig(dir, { server: SERVER, token: TOKEN });
  await writeFile(config.bootstrapKubeconfig, 'operator content\n');
  t.equal((await joining(config)).found?.kind, 'invalid', 'found, and used as it is (here: to fail)');
  t.equal(await readOptional(config.bootstrapKubeconfig), 'operator content\n');
});

t.test('a token file already deleted after an earlier join is reported, not fatal', async (t) => {
  const dir = t.testdir();
  t.same((await joining(nodeConfig(dir, { server: SERVER, tokenFile: join(dir, 'gone') }))).found, { kind: 'absent' });
  t.equal(await readOptional(join(dir, 'bootstrap-kubelet.conf')), null, 'nothing written');
});

t.test('the rendered bootstrap kubeconfig reads back with its CA and credential', async (t) => {
  const ca = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
  const file = join(t.testdir(), 'b.conf');
  const withFile = await parseBootstrapKubeconfig(
    file,
    renderBootstrapKubeconfig({ server: 'https://api:6443/', caPem: ca, credential: { tokenFile: '/etc/kubernetes/bootstrap-token' } }),
    async (p) => (p === '/etc/kubernetes/bootstrap-token' ? TOKEN : null),
  );
  t.match(withFile, {
    server: 'https://api:6443',
    caPem: ca,
    tokenFile: '/etc/kubernetes/bootstrap-token',
    auth: { kind: 'bootstrap-token', tokenId: 'abcdef' },
  });
  const inline = await parseBootstrapKubeconfig(
    file,
    renderBootstrapKubeconfig({ server: 'https://api:6443', caPem: ca, credential: { token: TOKEN } }),
    readOptional,
  );
  t.match(inline, { tokenFile: null, auth: { kind: 'bootstrap-token', token: TOKEN } });
});

t.test('a token cluster-info has no signature for ends the join with exit 5, and nothing holding the token is written', async (t) => {
  const api = 'https://api.test:6443';
  const ca = await createCa('cluster-ca');
  for (const via of ['--token', '--token-file'] as const) {
    const dir = join(t.testdir(), via);
    await mkdir(dir);
    const agent = new MockAgent();
    agent.disableNetConnect();
    t.teardown(() => agent.close());
    const pool = agent.get(api);
    pool
      .intercept({ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info', method: 'GET' })
      .reply(200, JSON.stringify({ data: { kubeconfig: clusterInfoKubeconfig(api, ca.certPem) } }))
      .persist();
    pool.intercept({ path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', method: 'POST' }).reply(401, '{}').persist();
    const tokenFile = join(dir, 'bootstrap-token');
    if (via === '--token-file') await writeFile(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    const config = nodeConfig(dir, {
      server: api,
      ...(via === '--token' ? { token: TOKEN } : { tokenFile }),
      caCertHashes: [caCertHash(ca.certPem)],
    });
    const clock = new FakeClock();
    const err = await runOn(clock, openPass(config, { logger: silentLogger(), clock, dispatcher: agent }, { join: true }));
    t.match(err, { code: ExitCode.tokenNotSigned, message: /^no signature for token abcdef in kube-public\/cluster-info: / }, via);
    t.equal(await readOptional(config.bootstrapKubeconfig), null, `${via}: no bootstrap kubeconfig`);
    const files = (await readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
    const holding = [];
    for (const f of files) if ((await readFile(join(f.parentPath, f.name), 'utf8')).includes('0123456789abcdef')) holding.push(f.name);
    t.same(holding, via === '--token' ? [] : ['bootstrap-token'], `${via}: the secret is on disk only in a token file the operator gave`);
  }
});
