// Who asks for a certificate: the bootstrap kubeconfig's credential, read
// from an in-memory store, and what a 401 with it tells the operator.
// (Which credential asks, and the error when there is none: test/unit/bootstrap/pass.test.ts.)
import t from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { findBootstrap } from '../../../agent/bootstrap/pass.js';
import { bootstrapRequester, clusterOf, explainBootstrapFailure } from '../../../agent/credential/requester.js';
import { ApiError, BootstrapCredentialError, DeadTokenError, ExitCode } from '../../../agent/errors.js';
import type { BootstrapKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { renderBootstrapKubeconfig } from '../../../agent/kubeconfig/render.js';
import { silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const ca = await createCa('cluster-ca');
const config = defaultConfig('worker-1');
const deps = { logger: silentLogger(), clock: new FakeClock() };

/** The bootstrap kubeconfig in `store`, read and parsed as a pass does. */
async function bootstrapIn(store: ReturnType<typeof memoryStore>): Promise<BootstrapKubeconfig> {
  const found = await findBootstrap(config, store.read);
  if (found.kind !== 'kubeconfig') throw new Error(`want a bootstrap kubeconfig, found ${found.kind}`);
  return found.bootstrap;
}

t.test('the bootstrap kubeconfig authenticates, against the CA it names', async (t) => {
  const store = memoryStore({
    [config.bootstrapKubeconfig]: renderBootstrapKubeconfig({
      server: SERVER,
      caPem: ca.certPem,
      credential: { token: 'abcdef.0123456789abcdef' },
    }),
  });
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  let authorization: string | undefined;
  agent
    .get(SERVER)
    .intercept({ path: '/version', method: 'GET' })
    .reply((req) => ((authorization = (req.headers as Record<string, string>).authorization), { statusCode: 200, data: {} }));
  const bootstrap = await bootstrapIn(store);
  const requester = bootstrapRequester(bootstrap, await clusterOf(bootstrap, config, deps), agent);
  t.teardown(() => requester.client.close());
  t.same(requester.cluster, { server: SERVER, tlsServerName: null, caPem: ca.certPem });
  t.equal(requester.bootstrap?.file, config.bootstrapKubeconfig, 'remembered, to be deleted once every identity is proven');
  t.equal(requester.bootstrap?.auth.kind, 'bootstrap-token');
  await requester.client.request('GET', '/version');
  t.equal(authorization, 'Bearer abcdef.0123456789abcdef', 'its requests carry the token');
});

t.test('no bootstrap kubeconfig is found as absent, one that does not parse as invalid', async (t) => {
  t.same(await findBootstrap(config, memoryStore().read), { kind: 'absent' });
  const found = await findBootstrap(config, memoryStore({ [config.bootstrapKubeconfig]: 'kind: Config\n' }).read);
  t.equal(found.kind, 'invalid');
});

t.test('a 401 is the bootstrap credential to replace only when the bootstrap credential asked', async (t) => {
  const store = memoryStore({
    [config.bootstrapKubeconfig]: renderBootstrapKubeconfig({
      server: SERVER,
      caPem: ca.certPem,
      credential: { token: 'abcdef.0123456789abcdef' },
    }),
  });
  const found = await bootstrapIn(store);
  const { bootstrap, client } = bootstrapRequester(found, await clusterOf(found, config, deps));
  await client.close();
  const api = (status: number) => new ApiError({ method: 'POST', path: '/x', status, reason: 'R', message: '' });
  const explained = explainBootstrapFailure(api(401), bootstrap);
  t.type(explained, DeadTokenError);
  t.equal((explained as DeadTokenError).code, ExitCode.tokenNotSigned, 'a bootstrap token refused is dead: exit 5, as for no signature');
  t.match(
    (explained as Error).message,
    /refuses bootstrap token abcdef \(401 Unauthorized\): the token is dead \(deleted, expired or mistyped\)/,
  );
  const certificate = { ...bootstrap!, auth: { kind: 'client-certificate', certPem: '', keyPem: '' } } as BootstrapKubeconfig;
  const refusedCert = explainBootstrapFailure(api(401), certificate);
  t.type(refusedCert, BootstrapCredentialError);
  t.equal((refusedCert as BootstrapCredentialError).code, ExitCode.badInput, 'another credential refused: bad input, exit 2');
  const forbidden = api(403);
  t.equal(explainBootstrapFailure(forbidden, bootstrap), forbidden, '403: unchanged');
  const unauthorized = api(401);
  t.equal(explainBootstrapFailure(unauthorized, null), unauthorized, "401 with the node's own certificate: unchanged");
});
