// CA discovery through kube-public/cluster-info against undici's MockAgent,
// on a FakeClock: the wait for the bootstrapsigner's signature and the
// overall bound are the clock's, and a CA that fails the JWS or the pin is
// refused at once. The real API server proves the TLS side (test/e2e).
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { ExitCode, KubebootError } from '../../../agent/errors.js';
import { discoverClusterCa, type DiscoveryInput } from '../../../agent/kube/discovery.js';
import { silentLogger } from '../../../agent/log.js';
import { signDetachedJws } from '../../../agent/pki/jws.js';
import { caCertHash } from '../../../agent/pki/pin.js';
import { FakeClock } from '../../../agent/time/clock.js';
import { runOn } from '../../support/fake-time.js';
import { createCa } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
const TOKEN = { tokenId: 'abcdef', tokenSecret: '0123456789abcdef' };
const ca = await createCa('cluster-ca');
const other = await createCa('another-ca');
const kubeconfig = (caPem: string) =>
  `apiVersion: v1\nkind: Config\nclusters:\n- name: ""\n  cluster:\n    server: ${SERVER}\n    certificate-authority-data: ${Buffer.from(caPem).toString('base64')}\n`;
const unsigned = (caPem = ca.certPem) => JSON.stringify({ data: { kubeconfig: kubeconfig(caPem) } });
const signed = (caPem = ca.certPem, secret = TOKEN.tokenSecret) =>
  JSON.stringify({
    data: {
      kubeconfig: kubeconfig(caPem),
      [`jws-kubeconfig-${TOKEN.tokenId}`]: signDetachedJws(kubeconfig(caPem), TOKEN.tokenId, secret),
    },
  });

function setup(t: Test, replies: string[], input: Partial<DiscoveryInput> = {}) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const clock = new FakeClock();
  const fetchedAt: number[] = [];
  const pool = agent.get(SERVER);
  for (const body of replies)
    pool.intercept({ path: CLUSTER_INFO, method: 'GET' }).reply(() => (fetchedAt.push(clock.monotonic()), { statusCode: 200, data: body }));
  const discovery = discoverClusterCa({
    server: SERVER,
    tlsServerName: null,
    ...TOKEN,
    pins: [caCertHash(ca.certPem)],
    unsafeSkipCaVerification: false,
    timeoutMs: 60_000,
    logger: silentLogger(),
    clock,
    dispatcher: agent,
    ...input,
  });
  return { run: () => runOn(clock, discovery), fetchedAt, clock };
}

t.test('waits for the signature, asking again every 5 s on the clock, then trusts the pinned CA', async (t) => {
  const { run, fetchedAt, clock } = setup(t, [unsigned(), unsigned(), signed(), signed()]);
  t.equal(await run(), ca.certPem.trim() + '\n', 'the pinned CA, re-encoded');
  t.same(fetchedAt, [0, 5_000, 10_000, 10_000], 'unsigned twice, signed, then the verified re-fetch at once');
  t.equal(clock.pending, 0);
});

t.test('gives up when the next attempt would pass the bound, saying what it waited for', async (t) => {
  const { run, fetchedAt } = setup(t, [unsigned(), unsigned(), unsigned()], { timeoutMs: 12_000 });
  const err = await run();
  t.type(err, KubebootError);
  t.equal((err as KubebootError).code, ExitCode.timedOut);
  t.match((err as Error).message, /not yet signed for token abcdef .*gave up after 12s/);
  t.same(fetchedAt, [0, 5_000, 10_000], 'no attempt after 10 s: the next would come at 15 s');
});

t.test('a CA that fails the signature or the pins is refused at once, without waiting', async (t) => {
  const cases = [
    { name: 'signed with another token secret', body: signed(ca.certPem, 'ffffffffffffffff'), match: /does not verify; refusing its CA/ },
    { name: 'a CA no pin names', body: signed(other.certPem), match: /matches none of the --ca-cert-hash pins/ },
  ];
  for (const c of cases) {
    const { run, fetchedAt } = setup(t, [c.body]);
    const err = await run();
    t.type(err, KubebootError, c.name);
    t.match((err as Error).message, c.match, c.name);
    t.equal((err as KubebootError).code, ExitCode.other, `${c.name}: exit 1`);
    t.same(fetchedAt, [0], `${c.name}: one fetch`);
  }
});

t.test('without a pin it refuses to start unless told to skip CA verification', async (t) => {
  const { run, fetchedAt } = setup(t, [], { pins: [] });
  const err = await run();
  t.equal((err as KubebootError).code, ExitCode.badInput);
  t.match((err as Error).message, /no --ca-cert-hash was given/);
  t.same(fetchedAt, [], 'nothing fetched');
});
