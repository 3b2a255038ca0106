// CA discovery through kube-public/cluster-info against undici's MockAgent,
// on a FakeClock: the wait for the bootstrapsigner's signature and the
// overall bound are the clock's, a token the API server refuses ends the wait
// early, and a CA that fails the JWS or the pin is refused at once. The real
// API server proves the TLS side (test/e2e).
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { ExitCode, KubebootError } from '../../../agent/errors.js';
import { discoverClusterCa, SIGNATURE_WAIT_MS, type DiscoveryInput } from '../../../agent/kube/discovery.js';
import { silentLogger } from '../../../agent/log.js';
import { signDetachedJws } from '../../../agent/pki/jws.js';
import { caCertHash } from '../../../agent/pki/pin.js';
import { FakeClock } from '../../support/fake-time.js';
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

const REVIEWS = '/apis/authentication.k8s.io/v1/selfsubjectreviews';
const reviewed = JSON.stringify({ kind: 'SelfSubjectReview', status: { userInfo: { username: 'system:bootstrap:abcdef' } } });
const unauthorized = JSON.stringify({ kind: 'Status', status: 'Failure', reason: 'Unauthorized', code: 401 });

/** `replies`: cluster-info bodies, one per GET; `probes`: the status of each SelfSubjectReview made with the token. */
function setup(t: Test, replies: string[], input: Partial<DiscoveryInput> = {}, probes: number[] = []) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const clock = new FakeClock();
  const fetchedAt: number[] = [];
  const probedAt: number[] = [];
  /** The Authorization header of every request, GET and POST alike. */
  const sent: string[] = [];
  const pool = agent.get(SERVER);
  const header = (opts: { headers?: unknown }) => String((opts.headers as Record<string, string> | undefined)?.authorization ?? '');
  for (const body of replies)
    pool
      .intercept({ path: CLUSTER_INFO, method: 'GET' })
      .reply((opts) => (fetchedAt.push(clock.monotonic()), sent.push(header(opts)), { statusCode: 200, data: body }));
  for (const status of probes)
    pool
      .intercept({ path: REVIEWS, method: 'POST' })
      .reply(
        (opts) => (
          probedAt.push(clock.monotonic()), sent.push(header(opts)), { statusCode: status, data: status === 401 ? unauthorized : reviewed }
        ),
      );
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
  return { run: () => runOn(clock, discovery), fetchedAt, probedAt, sent, clock };
}

/** The failure for a token cluster-info is not signed for: exit 5, one line, its id and never its secret. */
function assertNotSigned(t: Test, err: unknown, message: RegExp) {
  t.type(err, KubebootError);
  t.equal((err as KubebootError).code, ExitCode.tokenNotSigned, 'exit 5');
  t.match((err as Error).message, /^no signature for token abcdef in kube-public\/cluster-info/);
  t.match((err as Error).message, message);
  t.match(
    (err as Error).message,
    /; make a new token \(kubeboot token create, or kubeboot join-command --create-token for the whole join line\)/,
  );
  t.notMatch((err as Error).message, TOKEN.tokenSecret, 'never the secret');
  t.notMatch((err as Error).message, /\n/, 'one line');
}

t.test('waits for the signature, asking again every 5 s on the clock, then trusts the pinned CA', async (t) => {
  const { run, fetchedAt, clock } = setup(t, [unsigned(), unsigned(), signed(), signed()]);
  t.equal(await run(), ca.certPem.trim() + '\n', 'the pinned CA, re-encoded');
  t.same(fetchedAt, [0, 5_000, 10_000, 10_000], 'unsigned twice, signed, then the verified re-fetch at once');
  t.equal(clock.pending, 0);
});

t.test('the trust statement of the verified fetch is handed on with the pinned CA, for the node floor', async (t) => {
  const withStatement = (extra: Record<string, string>) => JSON.stringify({ data: { ...JSON.parse(signed()).data, ...extra } });
  const found: unknown[] = [];
  const { run } = setup(
    t,
    [withStatement({ 'kubeboot-trust': 'unverified' }), withStatement({ 'kubeboot-trust': 'S', 'kubeboot-trust.jws': 'J' })],
    {
      onVerified: async (f) => void found.push(f),
    },
  );
  await run();
  t.same(
    found,
    [{ caPem: ca.certPem.trim() + '\n', signed: { payload: 'S', jws: 'J' } }],
    'from the fetch over verified TLS, not the first',
  );
});

t.test('a token the API server refuses for 15 s ends the wait with exit 5, well before the bound', async (t) => {
  const { run, fetchedAt, probedAt, sent } = setup(t, Array(10).fill(unsigned()), {}, Array(10).fill(401));
  assertNotSigned(t, await run(), /: deleted, expired or mistyped \(https:\/\/api\.test:6443 refuses it: 401 Unauthorized\);/);
  t.same(fetchedAt, [0, 5_000, 10_000, 15_000], 'four tries: a token just made may be refused for a moment');
  t.same(probedAt, fetchedAt, 'the token asked about after each unsigned fetch');
  t.same(sent, Array(4).fill(['', 'Bearer abcdef.0123456789abcdef']).flat(), 'cluster-info anonymously, then the review with the token');
});

t.test('a token refused for a moment, then signed, joins: the refusals were the apiserver catching up', async (t) => {
  const { run, fetchedAt, probedAt } = setup(t, [unsigned(), unsigned(), signed(), signed()], {}, [401, 401]);
  t.equal(await run(), ca.certPem.trim() + '\n');
  t.same(fetchedAt, [0, 5_000, 10_000, 10_000]);
  t.same(probedAt, [0, 5_000], 'no question once it is signed');
});

t.test('the 15 s of refusals run from the first 401 after the token last authenticated', async (t) => {
  const { run, probedAt } = setup(t, Array(10).fill(unsigned()), {}, [401, 201, 401, 401, 401, 401]);
  assertNotSigned(t, await run(), /refuses it: 401 Unauthorized/);
  t.same(probedAt, [0, 5_000, 10_000, 15_000, 20_000, 25_000], 'refused since 10 s, given up at 25 s');
});

t.test('a token that authenticates but is never signed waits the whole 2-minute bound, then says why', async (t) => {
  const { run, fetchedAt, probedAt } = setup(t, Array(30).fill(unsigned()), { timeoutMs: 15 * 60_000 }, Array(30).fill(201));
  assertNotSigned(
    t,
    await run(),
    / after 120s, though https:\/\/api\.test:6443 accepts the token: it was made without usage-bootstrap-signing, or the bootstrapsigner controller of kube-controller-manager is not running;/,
  );
  t.equal(SIGNATURE_WAIT_MS, 120_000);
  t.equal(fetchedAt.length, 25, 'every 5 s from 0 to 120 s');
  t.equal(fetchedAt.at(-1), 120_000, 'no attempt after the bound');
  t.equal(probedAt.length, 25);
});

t.test('the token goes only over TLS pinned by the operator: without a pin that names the CA it is never sent', async (t) => {
  const cases: [string, Partial<DiscoveryInput>][] = [
    ['--unsafe-skip-ca-verification, no pin', { pins: [], unsafeSkipCaVerification: true }],
    ["a pin that names none of cluster-info's CAs", { pins: [caCertHash(other.certPem)] }],
  ];
  for (const [name, input] of cases) {
    const { run, fetchedAt, probedAt, sent } = setup(t, Array(30).fill(unsigned()), { ...input, timeoutMs: 15 * 60_000 }, [401]);
    assertNotSigned(t, await run(), /: deleted, expired or mistyped \(none after 120s\);/);
    t.equal(fetchedAt.length, 25, `${name}: the bound alone ends the wait`);
    t.same(probedAt, [], `${name}: no SelfSubjectReview`);
    t.same(new Set(sent), new Set(['']), `${name}: no request carried a credential`);
  }
});

t.test('with a waitTimeout under the bound, an unsigned cluster-info still ends with exit 5 at the timeout', async (t) => {
  const { run, fetchedAt } = setup(t, [unsigned(), unsigned(), unsigned()], { timeoutMs: 12_000 });
  assertNotSigned(t, await run(), /: deleted, expired or mistyped \(none after 10s\);/);
  t.same(fetchedAt, [0, 5_000, 10_000], 'no attempt after 10 s: the next would come at 15 s');
});

t.test(
  'a cluster-info that cannot be read is waited for until waitTimeout, then exit 1 (API unreachable, as the exit code table says) saying what it waited for',
  async (t) => {
    const agent = new MockAgent();
    agent.disableNetConnect();
    t.teardown(() => agent.close());
    const clock = new FakeClock();
    agent.get(SERVER).intercept({ path: CLUSTER_INFO, method: 'GET' }).reply(503, 'etcd is down').times(3);
    const err = await runOn(
      clock,
      discoverClusterCa({
        server: SERVER,
        tlsServerName: null,
        ...TOKEN,
        pins: [caCertHash(ca.certPem)],
        unsafeSkipCaVerification: false,
        timeoutMs: 12_000,
        logger: silentLogger(),
        clock,
        dispatcher: agent,
      }),
    );
    t.equal((err as KubebootError).code, ExitCode.other, 'exit 4 is only a CSR not approved in time');
    t.match(
      (err as Error).message,
      /^CA discovery from https:\/\/api\.test:6443: cannot read kube-public\/cluster-info \(.*503.*\); gave up after 12s$/,
    );
  },
);

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
